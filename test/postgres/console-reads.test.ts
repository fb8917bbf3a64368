import { Database as SqliteDatabase } from "bun:sqlite";
import { afterAll, beforeAll, expect, test } from "bun:test";
import { contactPage, contactsPage } from "../../console/contacts/service.ts";
import { latestDeliveries } from "../../console/deliveries/service.ts";
import { search } from "../../console/search/service.ts";
import { recentFailures, subscriptionsHealth } from "../../console/subscriptions/health.ts";
import { migrate } from "../../server/db/migrations.ts";
import { openPostgres, type PostgresDatabase } from "../../server/db/postgres.ts";
import { migratePostgres } from "../../server/db/postgres-migrations.ts";
import { listAllSubscriptions } from "../../server/webhooks/service.ts";
import type { SqlValue } from "../../server/db/sql.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

// Migration 0015 on both backends: the hourly delivery counts the console's charts read, and what
// an event is about, follow the same writes alike.

let server: TestDatabase;
let db: PostgresDatabase;
let sqlite: SqliteDatabase;

beforeAll(async () => {
  server = await createTestDatabase();
  db = await openPostgres(server.url, 2);
  await migratePostgres(db);
  sqlite = new SqliteDatabase(":memory:", { strict: true });
  migrate(sqlite);
}, 60_000);

afterAll(async () => {
  sqlite?.close();
  await db?.close();
  await server?.drop();
});

/** onBoth runs one portable statement on SQLite and on PostgreSQL. */
async function onBoth(sql: string, params: SqlValue[] = []): Promise<void> {
  sqlite.query(sql).run(...(params as never[]));
  await db.run(sql, params);
}

/** readBoth runs one query on both backends and returns the rows of each, numbers as numbers. */
async function readBoth(sql: string): Promise<[unknown[], unknown[]]> {
  const numeric = (rows: Record<string, unknown>[]) => rows.map((row) => Object.fromEntries(Object.entries(row).map(([k, v]) => [k, typeof v === "bigint" ? Number(v) : v])));
  return [numeric(sqlite.query(sql).all() as Record<string, unknown>[]), numeric(await db.all<Record<string, unknown>>(sql))];
}

const HOUR = 3_600_000;

/** idOf makes the n-th id with a prefix, in the form the console's filters accept. */
const idOf = (prefix: string, n: number) => `${prefix}_01M8${String(n).padStart(22, "0")}`;

test("the hourly delivery counts follow inserts, changes of status and deletions alike, and lose the rows that reach zero", async () => {
  await onBoth("INSERT INTO events (id, type, payload, created_at) VALUES (?, 'contact.updated', ?, 1), (?, 'webhook.ping', ?, 1)", [
    "evt_a",
    JSON.stringify({ type: "contact.updated", data: { id: "con_a" } }),
    "evt_p",
    JSON.stringify({ type: "webhook.ping", data: { subscription_id: "sub_a" } }),
  ]);
  const insert = "INSERT INTO webhook_deliveries (id, event_id, event_type, subscription_id, target_url, status, created_at, updated_at) VALUES (?, 'evt_a', 'contact.updated', ?, 'https://x', ?, ?, ?)";
  for (const [id, subscription, status, at] of [
    ["dlv_1", "sub_a", "pending", 10 * HOUR + 5],
    ["dlv_2", "sub_a", "pending", 10 * HOUR + 7],
    ["dlv_3", "sub_a", "failed", 11 * HOUR],
    ["dlv_4", "sub_b", "pending", 10 * HOUR + 1],
  ] as const) {
    await onBoth(insert, [id, subscription, status, at, at]);
  }
  await onBoth("UPDATE webhook_deliveries SET status = 'succeeded' WHERE id IN ('dlv_1', 'dlv_2')");
  await onBoth("UPDATE webhook_deliveries SET attempts = 2, status = 'pending' WHERE id = 'dlv_4'");
  await onBoth("UPDATE webhook_deliveries SET status = 'pending' WHERE id = 'dlv_3'");
  await onBoth("DELETE FROM webhook_deliveries WHERE id = 'dlv_1'");
  const [onSqlite, onPostgres] = await readBoth("SELECT subscription_id, hour, status, n FROM webhook_delivery_hours ORDER BY subscription_id, hour, status");
  const expected = [
    { subscription_id: "sub_a", hour: 10 * HOUR, status: "succeeded", n: 1 },
    { subscription_id: "sub_a", hour: 11 * HOUR, status: "pending", n: 1 },
    { subscription_id: "sub_b", hour: 10 * HOUR, status: "pending", n: 1 },
  ];
  expect(onSqlite).toEqual(expected);
  expect(onPostgres).toEqual(expected);
});

test("an event's subject is the id its data names, alike, and none for an event naming none", async () => {
  const [onSqlite, onPostgres] = await readBoth("SELECT id, subject_id FROM events ORDER BY id");
  expect(onSqlite).toEqual([
    { id: "evt_a", subject_id: "con_a" },
    { id: "evt_p", subject_id: null },
  ]);
  expect(onPostgres).toEqual(onSqlite);
});

test("the console's reads answer on PostgreSQL: charts, failures, deliveries about a contact, a contact's page, contacts by email, search", async () => {
  const now = Date.now();
  const [sub, contact, first, second] = [idOf("sub", 1), idOf("con", 1), idOf("dlv", 1), idOf("dlv", 2)];
  await db.run("INSERT INTO webhook_subscriptions (id, target_url, description, events, secret, created_at, updated_at) VALUES (?, 'https://receiver.example.com/hooks', 'Warehouse', '[\"contact.updated\"]', 'whsec_x', ?, ?)", [sub, now - 86_400_000, now - 86_400_000]);
  await db.run("INSERT INTO contacts (id, first_name, last_name, email, created_at, updated_at) VALUES (?, 'Ada', 'Lovelace', 'ada@example.com', ?, ?)", [contact, now - 86_400_000, now - 86_400_000]);
  for (const [delivery, event, at, status, code] of [
    [first, idOf("evt", 1), now - 2 * HOUR, "failed", 500],
    [second, idOf("evt", 2), now - 1000, "succeeded", 200],
  ] as const) {
    await db.run("INSERT INTO events (id, type, payload, created_at) VALUES (?, 'contact.updated', ?, ?)", [event, JSON.stringify({ type: "contact.updated", event_id: event, data: { id: contact } }), at]);
    await db.run(
      "INSERT INTO webhook_deliveries (id, event_id, event_type, subscription_id, target_url, status, attempts, last_response_status, created_at, updated_at) VALUES (?, ?, 'contact.updated', ?, 'https://receiver.example.com/hooks', ?, 1, ?, ?, ?)",
      [delivery, event, sub, status, code, at, at],
    );
  }
  const [health] = await subscriptionsHealth(db, await listAllSubscriptions(db), now);
  const drawn = health!.hours.filter((bar) => bar.succeeded + bar.failed + bar.pending > 0);
  expect(drawn).toEqual([
    { from: new Date(now - 2 * HOUR - ((now - 2 * HOUR) % HOUR)).toISOString(), succeeded: 0, failed: 1, pending: 0 },
    { from: new Date(now - 1000 - ((now - 1000) % HOUR)).toISOString(), succeeded: 1, failed: 0, pending: 0 },
  ].filter((bar, i, bars) => i === 0 || bar.from !== bars[0]!.from));
  expect((await recentFailures(db, sub, "test", now))!.map((f) => [f.reason, f.deliveries, f.latest_delivery_id])).toEqual([["HTTP 500", 1, first]]);
  const aboutContact = await latestDeliveries(db, { contact_id: contact });
  expect([aboutContact.data.map((d) => [d.id, d.subject_id]), aboutContact.total]).toEqual([[[second, contact], [first, contact]], 2]);
  expect((await latestDeliveries(db, { status: "failed" })).total).toBe(1);
  const page = await contactPage(db, contact);
  expect([page.record?.full_name, page.events.map((e) => e.deliveries.map((d) => d.id))]).toEqual(["Ada Lovelace", [[second], [first]]]);
  // Contacts by email go through the email index on both; by name, the contacts store's FTS5 path has no PostgreSQL branch yet.
  expect((await contactsPage(db, { q: "ADA@example.com" }, "test")).contacts.map((c) => c.id)).toEqual([contact]);
  expect(await search(db, first, "operator")).toEqual({ location: `/console/deliveries/${first}` });
  expect(await search(db, "ADA@example.com", "operator")).toEqual({ location: `/console/contacts/${contact}` });
});

/**
 * totalsDisagreeing runs `add` (one row a write) while two readers read a view of fewer rows than
 * a page again and again, and returns each view whose total was not the rows it showed.
 */
async function totalsDisagreeing(add: (n: number) => Promise<void>, view: () => Promise<{ shown: number; total: number }>): Promise<{ shown: number; total: number }[]> {
  let adding = true;
  const disagreeing: { shown: number; total: number }[] = [];
  const write = async () => {
    try {
      for (let n = 0; n < 45; n++) await add(n);
    } finally {
      adding = false;
    }
  };
  const look = async () => {
    while (adding) {
      const seen = await view();
      if (seen.total !== seen.shown) disagreeing.push(seen);
    }
  };
  await Promise.all([write(), look(), look()]);
  return disagreeing;
}

/** countedId is an id of the counting tests, apart from those above. */
const countedId = (prefix: string, n: number) => idOf(prefix, 9000 + n);

test("the console's deliveries table counts what it shows while deliveries are added: every total is its rows", async () => {
  const now = Date.now();
  const sub = countedId("sub", 0);
  await db.run("INSERT INTO webhook_subscriptions (id, target_url, description, events, secret, created_at, updated_at) VALUES (?, 'https://receiver.example.com/counted', 'Counted', '[\"contact.updated\"]', 'whsec_x', ?, ?)", [sub, now, now]);
  const add = (n: number) =>
    db.write(async (tx) => {
      await tx.run("INSERT INTO events (id, type, payload, created_at) VALUES (?, 'contact.updated', '{}', ?)", [countedId("evt", n), now + n]);
      await tx.run("INSERT INTO webhook_deliveries (id, event_id, event_type, subscription_id, target_url, status, created_at, updated_at) VALUES (?, ?, 'contact.updated', ?, 'https://receiver.example.com/counted', 'pending', ?, ?)", [countedId("dlv", n), countedId("evt", n), sub, now + n, now + n]);
    });
  const view = async () => {
    const seen = await latestDeliveries(db, { subscription_id: sub });
    return { shown: seen.data.length, total: seen.total };
  };
  expect(await totalsDisagreeing(add, view)).toEqual([]);
});

test("the console's contacts search counts what it shows while contacts are added: every total is its rows", async () => {
  const now = Date.now();
  const add = (n: number) => db.write(async (tx) => void (await tx.run("INSERT INTO contacts (id, first_name, last_name, email, created_at, updated_at) VALUES (?, 'Counted', ?, ?, ?, ?)", [countedId("con", n), `${n}`, `counted.${n}@example.com`, now + n, now + n])));
  const view = async () => {
    const seen = await contactsPage(db, { q: "Counted" }, "test");
    return { shown: seen.contacts.length, total: seen.total };
  };
  expect(await totalsDisagreeing(add, view)).toEqual([]);
});
