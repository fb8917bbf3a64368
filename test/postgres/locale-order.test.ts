import { SQL } from "bun";
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { listAccounts } from "../../server/accounts/store.ts";
import { listContacts, type ContactFilters } from "../../server/contacts/store.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { capturing, type Captured } from "../support/query-plans.ts";

// A database made with a UTF-8 locale other than C (en-US here, through ICU, as managed services
// create them; glibc's en_US.UTF-8 sorts the same way) collated the sort keys in its language's
// order, which sets punctuation apart: `a_b@` sorted before `a+b@`, and every list sorted by an
// email, a name or a domain answered in another order than on SQLite. The sort keys are collated
// byte for byte whatever the database's locale (migration 0035), as SQLite's are.

const EMAILS = ["a_b@example.com", "a-b@example.com", "a.b@example.com", "ab@example.com", "a+b@example.com", "a1@example.com", "aa@example.com", null];
// Names beyond ASCII, but none that differ by the case of such a letter alone: those sort apart on
// SQLite (NOCASE folds A to Z) and together on PostgreSQL, as the README says.
const FIRST_NAMES = ["Anne-Marie", "Annemarie", "Anne Marie", "Anne_Marie", "Anne.Marie", "annette", "Émile", "Ølaf", "Σίσυφος", "anne-marie", null];
const LAST_NAMES = ["O'Brien", "Obrien", "O Brien", "o-brien", "O_Brien", null, "Zoë", "zoe", "Zola", "de Vries", "De_Vries"];
const ACCOUNTS = [
  { name: "Anne-Marie GmbH", domain: "a-b.example" },
  { name: "Anne_Marie", domain: "ab.example" },
  { name: "Anne.Marie", domain: "a.b.example" },
  { name: "annemarie", domain: "a1.example" },
  { name: "Anne Marie", domain: null },
  { name: "Émile SA", domain: "A-C.example" },
];

let base: TestDatabase;
let icuName: string;
/** icu runs on the en-US database; reference on the tests' backend (SQLite in `npm test`), filled alike. */
let icu: Harness;
let reference: Harness;
const keyDir = mkdtempSync(join(tmpdir(), "crm-locale-order-"));

/** admin runs one statement on the test server as its superuser, through the file's own database. */
async function admin(statement: string): Promise<void> {
  const sql = new SQL({ url: base.url, max: 1 });
  try {
    await sql.unsafe(statement);
  } finally {
    await sql.close();
  }
}

/** fill gives a harness the same users, accounts and contacts, in the same order, each contact tagged, linked and assigned. */
async function fill(h: Harness): Promise<{ account: string; user: string }> {
  const accounts: string[] = [];
  for (const body of ACCOUNTS) accounts.push((await h.json("POST", "/public/v1/accounts", { body })).body.data.id);
  const user = (await h.json("POST", "/public/v1/users", { body: { name: "Owner", email: "owner@example.com" } })).body.data.id;
  for (const [i, first_name] of FIRST_NAMES.entries()) {
    const body = { first_name, last_name: LAST_NAMES[i], email: EMAILS[i % EMAILS.length], tags: ["t"], account_ids: [accounts[0]], assigned_user_id: user };
    expect((await h.json("POST", "/public/v1/contacts", { body })).status).toBe(201);
  }
  return { account: accounts[0]!, user };
}

let filters: Record<string, { icu: string; reference: string }>;

beforeAll(async () => {
  base = await createTestDatabase();
  icuName = `${base.name}_icu`;
  await admin(`CREATE DATABASE "${icuName}" TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.utf8'`);
  icu = await createHarness({ databaseUrl: base.url.replace(/\/[^/]+$/, `/${icuName}`), secretsKeyFile: writeSecretsKeyFile(join(keyDir, "secrets.key")) });
  reference = await createHarness();
  const [inIcu, inReference] = [await fill(icu), await fill(reference)];
  filters = {
    none: { icu: "", reference: "" },
    tag: { icu: "&tag=t", reference: "&tag=t" },
    account_id: { icu: `&account_id=${inIcu.account}`, reference: `&account_id=${inReference.account}` },
    assigned_user_id: { icu: `&assigned_user_id=${inIcu.user}`, reference: `&assigned_user_id=${inReference.user}` },
  };
}, 60_000);

afterAll(async () => {
  await icu?.close();
  await reference?.close();
  if (icuName) await admin(`DROP DATABASE IF EXISTS "${icuName}" WITH (FORCE)`);
  await base?.drop();
  rmSync(keyDir, { recursive: true, force: true });
});

/** walk reads a list whole, by cursor pages of `perPage`, and returns its items. */
async function walk(h: Harness, path: string, perPage: number): Promise<any[]> {
  const items: any[] = [];
  let cursor: string | null = null;
  do {
    const res: { status: number; body: any } = await h.json("GET", `${path}&per_page=${perPage}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
    expect({ path, status: res.status }).toEqual({ path, status: 200 });
    items.push(...res.body.data);
    cursor = res.body.meta.next_cursor;
  } while (cursor);
  return items;
}

test("the database's locale is en-US, which orders punctuation apart from bytes", async () => {
  const sql = new SQL({ url: base.url, max: 1 });
  try {
    const [row] = await sql`SELECT datlocprovider, datlocale AS locale FROM pg_database WHERE datname = ${icuName}`;
    expect(row).toEqual({ datlocprovider: "i", locale: "en-US" });
    const [sorted] = await sql.unsafe(`SELECT array_agg(e ORDER BY e COLLATE "en-US-x-icu") AS emails FROM unnest(ARRAY['a+b', 'a_b']) e`);
    expect(sorted.emails).toEqual(["a_b", "a+b"]);
  } finally {
    await sql.close();
  }
});

test("contacts sorted by an email or a name come in the same order as on SQLite, byte by byte, whole and by cursor, alone or walking a relation", async () => {
  const byEmail = (await icu.json("GET", "/public/v1/contacts?sort_by=email&sort_direction=asc&per_page=100")).body.data.map((c: any) => c.email);
  expect(byEmail).toEqual([null, "a+b@example.com", "a-b@example.com", "a-b@example.com", "a.b@example.com", "a.b@example.com", "a1@example.com", "a_b@example.com", "a_b@example.com", "aa@example.com", "ab@example.com"]);
  for (const [filterName, filter] of Object.entries(filters)) {
    for (const sortBy of ["email", "first_name", "last_name"]) {
      for (const direction of ["asc", "desc"]) {
        const path = (of: string) => `/public/v1/contacts?sort_by=${sortBy}&sort_direction=${direction}${of}`;
        const names = (items: any[]) => items.map((c) => [c.email, c.first_name, c.last_name]);
        const expected = names(await walk(reference, path(filter.reference), 100));
        expect({ filterName, sortBy, direction, whole: names(await walk(icu, path(filter.icu), 100)) }).toEqual({ filterName, sortBy, direction, whole: expected });
        expect({ filterName, sortBy, direction, byCursor: names(await walk(icu, path(filter.icu), 3)) }).toEqual({ filterName, sortBy, direction, byCursor: expected });
      }
    }
  }
});

test("accounts sorted by name or domain come in the same order as on SQLite, whole and by cursor", async () => {
  const byName = (await icu.json("GET", "/public/v1/accounts?sort_by=name&per_page=100")).body.data.map((a: any) => a.name);
  expect(byName).toEqual(["Anne Marie", "Anne-Marie GmbH", "Anne.Marie", "Anne_Marie", "annemarie", "Émile SA"]);
  for (const sortBy of ["name", "domain"]) {
    for (const direction of ["asc", "desc"]) {
      const path = `/public/v1/accounts?sort_by=${sortBy}&sort_direction=${direction}`;
      const names = (items: any[]) => items.map((a) => [a.name, a.domain]);
      const expected = names(await walk(reference, path, 100));
      expect({ sortBy, direction, whole: names(await walk(icu, path, 100)) }).toEqual({ sortBy, direction, whole: expected });
      expect({ sortBy, direction, byCursor: names(await walk(icu, path, 2)) }).toEqual({ sortBy, direction, byCursor: expected });
    }
  }
});

/** sortsLeft lists the steps of a statement's plan that PostgreSQL could only take disabled (a sort no index spares), on the en-US database. */
async function sortsLeft(c: Captured): Promise<string[]> {
  return icu.rt.db.read(async (tx) => {
    await tx.run("SET LOCAL enable_seqscan = off");
    await tx.run("SET LOCAL enable_sort = off");
    await tx.run("SET LOCAL enable_incremental_sort = off");
    const plan = (await tx.all<{ "QUERY PLAN": string }>(`EXPLAIN ${c.sql}`, c.params as never[])).map((r) => r["QUERY PLAN"]);
    return plan.some((line) => line.trim() === "Disabled: true") ? plan : [];
  });
}

test("on the en-US database, the first page in each sort and the lookup by email are read from their indexes, in the page's order", async () => {
  const contactFilters: Record<string, ContactFilters> = { none: {}, tag: { tags: ["t"] }, email: { email: "a_b@example.com" } };
  for (const [filterName, contactFilter] of Object.entries(contactFilters)) {
    for (const sortBy of ["email", "first_name", "last_name"] as const) {
      const { db, captured } = capturing(icu.rt.db);
      await listContacts(db, contactFilter, { sortBy, direction: "asc", cursor: null, limit: 25, offset: 0, matches: 11 });
      expect(captured.length).toBeGreaterThan(0);
      for (const c of captured) expect({ filterName, sortBy, sql: c.sql, sortsLeft: await sortsLeft(c) }).toEqual({ filterName, sortBy, sql: c.sql, sortsLeft: [] });
    }
  }
  for (const sortBy of ["name", "domain"] as const) {
    const { db, captured } = capturing(icu.rt.db);
    await listAccounts(db, {}, { sortBy, direction: "asc", cursor: null, limit: 25, offset: 0 });
    for (const c of captured) expect({ sortBy, sql: c.sql, sortsLeft: await sortsLeft(c) }).toEqual({ sortBy, sql: c.sql, sortsLeft: [] });
  }
});
