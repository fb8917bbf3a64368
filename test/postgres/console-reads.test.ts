import { Database as SqliteDatabase } from "bun:sqlite";
import { afterAll, beforeAll, expect, test } from "bun:test";
import { migrate } from "../../server/db/migrations.ts";
import { openPostgres, type PostgresDatabase } from "../../server/db/postgres.ts";
import { migratePostgres } from "../../server/db/postgres-migrations.ts";
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
