import { Database as SqliteDatabase } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { databaseFile } from "../../server/db/database.ts";
import { openPostgres, type PostgresDatabase } from "../../server/db/postgres.ts";
import { runCli, SOURCE } from "../ops/support.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { startReceiver, waitFor, webhookHarness, type Receiver, type WebhookHarness } from "../webhooks/support.ts";
import { inOneOrder, selectEveryColumn, TABLES } from "./support.ts";

// Older versions stored what PostgreSQL refuses. Versions before 2026-11-27 took the NUL character
// in request bodies and kept it in receivers' answers; PostgreSQL's text and jsonb refuse it.
// Versions before retry delays were capped (30 days) took a delay of any size, and stored a pending
// delivery's next attempt up to 1e23 ms ahead, a REAL in SQLite that PostgreSQL's bigint refuses.
// The real app fills a data directory with a MARKER where those versions stored a NUL and a pending
// delivery, the test puts the NUL there as they would have (the character in plain text, its
// escape `\u0000` in JSON text) and moves the next attempt that far, and `crm copy-to-postgres`
// must carry every row over, with U+FFFD in the NUL's place and the next attempt at the last
// instant of 9999, the one the API already shows for it.

/** MARKER stands where an old version stored a NUL: it passes today's refusal of NUL, then is replaced in the file. */
const MARKER = "~NUL~";

/** JSON_COLUMNS hold JSON text, where a NUL is written as the escape `\u0000`; other text columns hold the character. */
const JSON_COLUMNS = new Set(["contacts.properties", "events.payload", "idempotency_keys.response_body"]);

/** FAR is a next attempt an uncapped retry delay of 1e20 seconds stored (SQLite keeps it as a REAL). */
const FAR = 1e23;

/** LATEST is 9999-12-31T23:59:59.999Z in ms. */
const LATEST = 253_402_300_799_999;

let h: WebhookHarness;
let receiver: Receiver;
let target: TestDatabase;
let pg: PostgresDatabase;
let copy: ReturnType<typeof runCli>;
/** expected is every table as the copy must write it: as the app stored it, with U+FFFD where the marker was and the next attempt at LATEST. */
let expected: Record<string, unknown[]>;
let deliveryId: string;

/** markedColumns lists the text columns, as table.column, that hold the marker in some row. */
function markedColumns(sqlite: SqliteDatabase): string[] {
  return TABLES.flatMap((table) =>
    sqlite
      .query<{ name: string }, [string]>("SELECT name FROM pragma_table_info(?) WHERE type = 'TEXT'")
      .all(table)
      .filter(({ name }) => sqlite.query(`SELECT 1 FROM "${table}" WHERE instr("${name}", ?) > 0`).get(MARKER))
      .map(({ name }) => `${table}.${name}`),
  );
}

/** withFffd is a row with U+FFFD where the marker is, as the character or, in JSON text, its escape. */
function withFffd(table: string, row: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(row).map(([column, value]) => [column, typeof value === "string" ? value.replaceAll(MARKER, JSON_COLUMNS.has(`${table}.${column}`) ? "\\ufffd" : "\uFFFD") : value]),
  );
}

beforeAll(async () => {
  target = await createTestDatabase();
  receiver = startReceiver();
  receiver.respond(() => new Response(`err${MARKER}or${MARKER}`, { status: 500 }));
  // A failed attempt is retried only an hour later: the delivery stays pending, with its attempt.
  h = await webhookHarness({ retrySchedule: [3600] });
  const subscription = await h.json("POST", "/public/v1/webhook-subscriptions", {
    body: { target_url: receiver.url, events: ["contact.created"], description: `d${MARKER}x` },
    headers: { "idempotency-key": "subscription" },
  });
  expect(subscription.status).toBe(201);
  const contact = await h.json("POST", "/public/v1/contacts", {
    // The last name holds a backslash and "u0000": text, not a NUL, which must arrive as it is.
    body: { first_name: `N${MARKER}ul`, last_name: "C:\\u0000", tags: [`t${MARKER}x`], custom_fields: { k: `v${MARKER}w` } },
    headers: { "idempotency-key": "contact" },
  });
  expect(contact.status).toBe(201);
  const sqlite = new SqliteDatabase(databaseFile(h.dataDir));
  try {
    const attempts = sqlite.query<{ n: number }, []>("SELECT count(*) AS n FROM webhook_delivery_attempts");
    await waitFor(() => attempts.get()!.n > 0, "the failed attempt to be recorded");
    const marked = markedColumns(sqlite);
    expect(marked.toSorted()).toEqual([
      "contact_filter_counts.value", "contact_tags.tag", "contacts.first_name", "contacts.properties",
      "events.payload", "idempotency_keys.response_body", "webhook_delivery_attempts.response_body", "webhook_subscriptions.description",
    ]);
    const asCopied = (table: string, row: Record<string, unknown>) => withFffd(table, table === "webhook_deliveries" ? { ...row, next_attempt_at: LATEST } : row);
    expected = Object.fromEntries(TABLES.map((table) => [table, inOneOrder(sqlite.query<Record<string, unknown>, []>(selectEveryColumn(sqlite, table)).all().map((row) => asCopied(table, row)))]));
    deliveryId = sqlite.query<{ id: string }, []>("SELECT id FROM webhook_deliveries").get()!.id;
    sqlite.run("UPDATE webhook_deliveries SET next_attempt_at = ?", [FAR]);
    expect(sqlite.query("SELECT status, typeof(next_attempt_at) AS type, next_attempt_at FROM webhook_deliveries").all()).toEqual([{ status: "pending", type: "real", next_attempt_at: FAR }]);
    for (const column of marked) {
      const [table, name] = column.split(".");
      sqlite.run(`UPDATE "${table}" SET "${name}" = replace("${name}", ?, ?)`, [MARKER, JSON_COLUMNS.has(column) ? "\\u0000" : "\u0000"]);
    }
    expect(markedColumns(sqlite)).toEqual([]);
  } finally {
    sqlite.close();
  }
  copy = runCli([...SOURCE, "copy-to-postgres", "--data-dir", h.dataDir, "--database-url", target.url]);
  pg = await openPostgres(target.url, 2);
}, 60_000);

afterAll(async () => {
  await pg?.close();
  await h?.shutdown();
  await receiver?.stop();
  await target?.drop();
});

describe("copy-to-postgres: NUL characters stored by versions before 2026-11-27, a next attempt past the year 9999 by versions without a cap on retry delays", () => {
  test("the copy succeeds", () => {
    expect({ exitCode: copy.exitCode, error: copy.stderr.split("\n").filter((line) => line.startsWith("crm:")) }).toEqual({ exitCode: 0, error: [] });
  });

  test("every row arrives whole, with U+FFFD for each NUL (\\ufffd in JSON text), a backslash before u0000 left as it is, and the next attempt at the last instant of 9999", async () => {
    const sqlite = new SqliteDatabase(databaseFile(h.dataDir), { readonly: true });
    try {
      for (const table of TABLES) expect({ table, rows: inOneOrder(await pg.all(selectEveryColumn(sqlite, table))) }).toEqual({ table, rows: expected[table]! });
    } finally {
      sqlite.close();
    }
  });

  test("the delivery arrives pending, its next attempt at 9999-12-31T23:59:59.999Z, as the API showed it on SQLite", async () => {
    expect((await h.delivery(deliveryId)).next_attempt_at).toBe("9999-12-31T23:59:59.999Z");
    expect(await pg.all("SELECT id, status, attempts, next_attempt_at FROM webhook_deliveries")).toEqual([{ id: deliveryId, status: "pending", attempts: 1, next_attempt_at: LATEST }]);
  });

  test("the contact reads back from PostgreSQL with U+FFFD in its name, tag and custom field", async () => {
    const contact = await pg.get<{ first_name: string; last_name: string; properties: string }>("SELECT first_name, last_name, properties FROM contacts");
    expect({ ...contact, properties: JSON.parse(contact!.properties) }).toEqual({
      first_name: "N\uFFFDul",
      last_name: "C:\\u0000",
      properties: { tags: ["t\uFFFDx"], custom_fields: { k: "v\uFFFDw" } },
    });
  });
});
