import { SQL } from "bun";
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ACCOUNT_SORTS } from "../../server/accounts/model.ts";
import { listAccounts } from "../../server/accounts/store.ts";
import { CONTACT_SORTS } from "../../server/contacts/model.ts";
import { listContactVersions, listContacts } from "../../server/contacts/store.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { capturing, postgresPlan, type Captured } from "../support/query-plans.ts";

// A page by number deep in the contacts or accounts list, unfiltered, sorted by a name, an email,
// a domain or a time: read whole, PostgreSQL priced the skipped rows' visits to the table above a
// scan and sort of the whole table (the last page of 195,000 contacts by last_name: 0.65 to 2.7 s,
// spilling to disk). Planned here with PostgreSQL's own costs on tables of realistic rows, vacuumed
// and analysed as autovacuum leaves them.

const CONTACTS = 5_000;
const ACCOUNTS = 5_000;
let database: TestDatabase;
let h: Harness;
const keyDir = mkdtempSync(join(tmpdir(), "crm-deep-pages-"));

beforeAll(async () => {
  database = await createTestDatabase();
  h = await createHarness({ databaseUrl: database.url, secretsKeyFile: writeSecretsKeyFile(join(keyDir, "secrets.key")) });
  const sql = new SQL(database.url);
  try {
    // Committed synchronously (the test server commits asynchronously) and vacuumed before any
    // ANALYZE: otherwise VACUUM left the pages not all-visible here, and Index Only Scans were
    // costed as visits to the table, which autovacuum spares a table that stands still.
    await sql.begin(async (tx) => {
      await tx.unsafe("SET LOCAL synchronous_commit = on");
      await tx.unsafe(
      `INSERT INTO contacts (id, first_name, last_name, email, phone, properties, account_ids, created_at, updated_at)
       SELECT 'con_' || lpad(i::text, 26, '0'), CASE WHEN i % 5 = 0 THEN NULL ELSE 'First' || (i % 3000) END,
              CASE WHEN i % 4 = 0 THEN NULL ELSE 'Last' || ((i * 7919) % 100003) END, CASE WHEN i % 3 = 0 THEN NULL ELSE 'person' || ((i * 7907) % 100003) || '@example.com' END,
              '+44 20 7946 ' || lpad((i % 10000)::text, 4, '0'),
              '{"tags":["customer","region-' || (i % 20) || '"],"custom_fields":{"plan":"pro","seats":' || (i % 50) || ',"notes":"' || repeat('n', 120) || '"}}',
              '["acc_' || lpad((i % 1000)::text, 26, '0') || '"]', 1700000000000 + i * 1000, 1700000000000 + ((i * 7919) % 100003) * 1000
       FROM generate_series(1, ${CONTACTS}) i`,
      );
      await tx.unsafe(
      `INSERT INTO accounts (id, name, name_key, domain, properties, created_at, updated_at)
       SELECT 'acc_' || lpad(i::text, 26, '0'), 'Account ' || ((i * 7919) % 100003), 'account ' || ((i * 7919) % 100003), CASE WHEN i % 5 = 0 THEN NULL ELSE 'acct' || ((i * 7907) % 100003) || '.example.com' END,
              '{"industry":"' || repeat('i', 120) || '"}', 1700000000000 + i * 1000, 1700000000000 + ((i * 7919) % 100003) * 1000
       FROM generate_series(1, ${ACCOUNTS}) i`,
      );
    });
    await sql.unsafe("VACUUM contacts, accounts");
    await sql.unsafe("ANALYZE contacts, accounts");
    const tables = await sql.unsafe("SELECT relname, relpages = relallvisible AS all_visible FROM pg_class WHERE relname IN ('contacts', 'accounts') ORDER BY relname");
    expect([...tables]).toEqual([{ relname: "accounts", all_visible: true }, { relname: "contacts", all_visible: true }]);
  } finally {
    await sql.close();
  }
}, 60_000);

afterAll(async () => {
  await h?.close();
  await database?.drop();
  rmSync(keyDir, { recursive: true, force: true });
});

/** expectNoTableSort fails when a statement's plan reads a table whole (a Seq Scan) for a Sort: the page would sort every row to skip its offset. */
async function expectNoTableSort(label: string, statements: Captured[]) {
  expect(statements.length).toBeGreaterThan(0);
  for (const c of statements) {
    const plan = await postgresPlan(h.rt.db, c);
    const sortsTable = plan.some((line) => line.includes("Sort")) && plan.some((line) => line.includes("Seq Scan"));
    expect({ label, sql: c.sql, plan: sortsTable ? plan : "no sort of the whole table" }).toEqual({ label, sql: c.sql, plan: "no sort of the whole table" });
  }
}

test("a contacts page deep in the list skips its offset in the sort index, in every sort and direction, not sorting the whole table", async () => {
  for (const sortBy of CONTACT_SORTS) {
    for (const direction of ["asc", "desc"] as const) {
      for (const read of [listContacts, listContactVersions]) {
        const { db, captured } = capturing(h.rt.db);
        const rows = await read(db, {}, { sortBy, direction, cursor: null, limit: 26, offset: CONTACTS - 25, matches: null });
        expect(rows.length).toBe(25);
        await expectNoTableSort(`${sortBy} ${direction} / ${read.name}`, captured);
      }
    }
  }
});

test("an accounts page deep in the list skips its offset in the sort index, in every sort and direction, not sorting the whole table", async () => {
  for (const sortBy of ACCOUNT_SORTS) {
    for (const direction of ["asc", "desc"] as const) {
      const { db, captured } = capturing(h.rt.db);
      const rows = await listAccounts(db, {}, { sortBy, direction, cursor: null, limit: 26, offset: ACCOUNTS - 25 });
      expect(rows.length).toBe(25);
      await expectNoTableSort(`${sortBy} ${direction}`, captured);
    }
  }
});
