import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { listAccounts } from "../../server/accounts/store.ts";
import { listContacts, type ContactFilters } from "../../server/contacts/store.ts";
import { findContactTombstonesByEmail } from "../../server/tombstones/store.ts";
import type { CursorPosition } from "../../server/http/list-query.ts";
import { createUser } from "../../server/users/service.ts";
import { detachUserFromContacts, UNLINK_CHUNK } from "../../server/contacts/service.ts";
import { countDeliveries, listDeliveries } from "../../server/webhooks/store.ts";
import { createHarness, UNKNOWN_ORIGIN, type Harness } from "../support/harness.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import type { Db, SqlValue } from "../../server/db/sql.ts";
import { capturing, type Captured } from "../support/query-plans.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";

// The PostgreSQL twin of foundation/index-use.test.ts for the sorts by a nullable key, which ask
// for NULLs first ascending and last descending (SQLite's order): an index in the other NULL order
// serves neither direction, and every page, cursor pages included, sorted the whole table.
// Also the deliveries list by event kind alone (migration 0021), which read every delivery.

let database: TestDatabase;
let h: Harness;
let account: string;
let user: string;
const keyDir = mkdtempSync(join(tmpdir(), "crm-index-use-"));

beforeAll(async () => {
  database = await createTestDatabase();
  h = await createHarness({ databaseUrl: database.url, secretsKeyFile: secretsKey() });
  account = (await h.json("POST", "/public/v1/accounts", { body: { name: "Acme" } })).body.data.id;
  await h.json("POST", "/public/v1/accounts", { body: { name: "Globex", domain: "globex.test" } });
  user = (await createUser(h.rt.db, { name: "U", email: "u@example.com" })).id;
  for (let i = 0; i < 20; i++) {
    await h.json("POST", "/public/v1/contacts", {
      body: { first_name: i % 5 ? `First${i}` : null, last_name: i % 4 ? `Last${i}` : null, email: i % 3 ? `p${i}@example.com` : null, tags: ["common"], account_ids: [account], assigned_user_id: user },
    });
  }
}, 60_000);

afterAll(async () => {
  await h?.close();
  await database?.drop();
  rmSync(keyDir, { recursive: true, force: true });
});

/** secretsKey writes the key a PostgreSQL-backed app seals signing secrets with. */
function secretsKey(): string {
  return writeSecretsKeyFile(join(keyDir, "secrets.key"));
}

/**
 * planOf explains a captured statement with sequential scans priced out of reach, and sorts too
 * unless `sort` allows them, so a plan that still sorts has no index in its order.
 */
async function planOf(c: Captured, options: { sort?: boolean } = {}): Promise<string[]> {
  return h.rt.db.read(async (tx) => {
    await tx.run("SET LOCAL enable_seqscan = off");
    if (!options.sort) {
      await tx.run("SET LOCAL enable_sort = off");
      await tx.run("SET LOCAL enable_incremental_sort = off");
    }
    return (await tx.all<{ "QUERY PLAN": string }>(`EXPLAIN ${c.sql}`, c.params as never[])).map((r) => r["QUERY PLAN"]);
  });
}

const CURSORS: Record<string, CursorPosition | null> = {
  "no cursor": null,
  "cursor on a value": { value: "m", id: "con_01M00000000000000000000000" },
  "cursor on NULL": { value: null, id: "con_01M00000000000000000000000" },
};

const FILTERS: Record<string, () => ContactFilters> = {
  none: () => ({}),
  tag: () => ({ tags: ["common"] }),
  account_id: () => ({ accountId: account }),
  assigned_user_id: () => ({ assignedUserId: user }),
};

/** expectIndexOrder fails when a statement's plan has a step PostgreSQL could only take disabled: a sort (or a scan) that no index spares. */
async function expectIndexOrder(label: string, statements: Captured[]) {
  expect(statements.length).toBeGreaterThan(0);
  for (const c of statements) {
    const plan = await planOf(c);
    expect({ label, sql: c.sql, plan: plan.some((line) => line.trim() === "Disabled: true") ? plan : "no disabled step" }).toEqual({ label, sql: c.sql, plan: "no disabled step" });
  }
}

test("a contacts page sorted by a nullable key is read in the order of an index, in both directions, at any cursor, alone or walking a relation", async () => {
  for (const [filterName, filtersOf] of Object.entries(FILTERS)) {
    for (const sortBy of ["first_name", "last_name", "email"] as const) {
      for (const direction of ["asc", "desc"] as const) {
        for (const [cursorName, cursor] of Object.entries(CURSORS)) {
          const { db, captured } = capturing(h.rt.db);
          await listContacts(db, filtersOf(), { sortBy, direction, cursor, limit: 5, offset: 0, matches: 20 });
          await expectIndexOrder(`${filterName} / ${sortBy} ${direction} / ${cursorName}`, captured);
        }
      }
    }
  }
});

test("an accounts page sorted by domain is read in the order of an index, in both directions, at any cursor", async () => {
  for (const direction of ["asc", "desc"] as const) {
    for (const [cursorName, cursor] of Object.entries(CURSORS)) {
      const { db, captured } = capturing(h.rt.db);
      await listAccounts(db, {}, { sortBy: "domain", direction, cursor, limit: 1, offset: 0 });
      await expectIndexOrder(`domain ${direction} / ${cursorName}`, captured);
    }
  }
});

test("a deliveries page filtered by event kind, first or by cursor, and its count are read from the kind's index, alone or with a time range", async () => {
  const cursor: CursorPosition = { value: Date.now(), id: "dlv_01M00000000000000000000000" };
  const found: Record<string, boolean[]> = {};
  for (const [label, filters] of Object.entries({ event: { eventType: "webhook.ping" }, "event, created_after": { eventType: "webhook.ping", createdAfter: 0 } })) {
    const { db, captured } = capturing(h.rt.db);
    await listDeliveries(db, filters, { cursor: null, limit: 26, offset: 0 });
    await listDeliveries(db, filters, { cursor, limit: 26, offset: 0 });
    await countDeliveries(db, filters);
    await expectIndexOrder(label, captured);
    // Without the kind's index the created index, walked newest first, serves the order alone: no step is disabled, but every delivery is read.
    found[label] = await Promise.all(captured.map(async (c) => (await planOf(c)).some((line) => line.includes("webhook_deliveries_event_type"))));
  }
  expect(found).toEqual({ event: [true, true, true], "event, created_after": [true, true, true] });
});

test("a deliveries page filtered by request_id, first or by cursor, and its count find the request's events through their index (migration 0041)", async () => {
  const { db, captured } = capturing(h.rt.db);
  const filters = { requestId: "import-job-42.row-7" };
  await listDeliveries(db, filters, { cursor: null, limit: 26, offset: 0 });
  await listDeliveries(db, filters, { cursor: { value: Date.now(), id: "dlv_01M00000000000000000000000" }, limit: 26, offset: 0 });
  await countDeliveries(db, filters);
  expect(await Promise.all(captured.map(async (c) => (await planOf(c)).some((line) => line.includes("events_request"))))).toEqual([true, true, true]);
});

test("a deleted contact's email finds its tombstone through the tombstones' email index, not by reading every tombstone (migration 0053)", async () => {
  const { db, captured } = capturing(h.rt.db);
  expect(await findContactTombstonesByEmail(db, "gone@example.com", 50)).toEqual([]);
  // Sorted, not read in id order: the few tombstones of one email are sorted, where the primary key read in id order would read every contact's.
  expect(await Promise.all(captured.map(async (c) => (await planOf(c, { sort: true })).some((line) => line.includes("tombstones_email"))))).toEqual([true]);
});

test("a user's delete finds its contacts through the indexes of assigned_user_id and of the assigned users, not by reading every contact under the write lock", async () => {
  const leaving = (await createUser(h.rt.db, { name: "Leaving", email: "leaving@example.com" })).id;
  await h.json("POST", "/public/v1/contacts", { body: { first_name: "Assigned", assigned_user_id: leaving, assigned_user_ids: [leaving] } });
  const captured: Captured[] = [];
  const unassigned = await h.rt.db.write((tx) => {
    const spy = { dialect: tx.dialect, all: (sql: string, params?: readonly SqlValue[]) => (captured.push({ sql, params: [...(params ?? [])] }), tx.all(sql, params)), get: tx.get.bind(tx), run: tx.run.bind(tx) } as Db;
    return detachUserFromContacts(spy, leaving, Date.now(), UNLINK_CHUNK, UNKNOWN_ORIGIN);
  });
  expect(unassigned).toBe(1);
  // The chunk's lookup, then its UPDATE (by the ids found).
  const statements = captured.filter((c) => /^(SELECT id FROM \(SELECT id FROM contacts|UPDATE contacts)/.test(c.sql.trimStart()));
  const readsEveryContact = await Promise.all(statements.map(async (c) => (await planOf(c)).some((line) => line.includes("Seq Scan on contacts"))));
  expect(readsEveryContact).toEqual([false, false]);
});
