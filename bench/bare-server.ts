// Baseline for bench/run.ts: Bun.serve + bun:sqlite with no framework, on a copy of the same seeded
// database (migrated by the app's migrate(), so tables, triggers and indexes are the app's) with the
// same pragmas, synchronous level included. A create writes the contact and its contact.created outbox event (the SQL of the
// app's recordEvent) in one transaction, as any design of this service must: POST /contacts commits one
// transaction per request, POST /grouped-contacts does the same through the app's group commit
// (SqliteDatabase.write), to show what the commit design alone is worth, and POST
// /grouped-idempotent-contacts adds the app's Idempotency-Key lookup and saved response to that: the
// SQL of the app's whole create, so that row shows what the app's request pipeline costs. POST /contacts-only is the earlier
// baseline, one transaction per request holding the contact row alone. GET runs the app's query
// shape (ORDER BY created_at DESC, id DESC LIMIT 25, plus the count) and renders rows as the API does
// (RFC 3339 timestamps, stored properties spread in). No auth, no validation, no relations.
// Usage: bun bench/bare-server.ts DB_FILE [full|normal]
import { loadConfig } from "../server/config.ts";
import { openDatabase } from "../server/db/database.ts";
import { migrate } from "../server/db/migrations.ts";

const dbFile = process.argv[2];
if (!dbFile) throw new Error("usage: bun bench/bare-server.ts DB_FILE [full|normal]");
// The app's own parser checks the level, so both servers accept exactly the same values.
const { synchronous } = loadConfig(["--synchronous", process.argv[3] ?? "full"], {});
const database = openDatabase(dbFile, synchronous);
const db = database.sqlite;
migrate(db);

interface Row {
  id: string;
  first_name: string | null;
  last_name: string | null;
  email: string | null;
  phone: string | null;
  properties: string;
  created_at: number;
  updated_at: number;
}

const COLUMNS = "id, first_name, last_name, email, phone, properties, created_at, updated_at";
const insert = db.query(
  "INSERT INTO contacts (id, first_name, last_name, email, phone, properties, created_at, updated_at) VALUES ($id, $first_name, $last_name, $email, $phone, $properties, $created_at, $updated_at)",
);
const insertRowOnly = db.transaction((row: Row) => insert.run(row as never));
const insertEvent = db.query("INSERT INTO events (id, type, payload, created_at) VALUES (?, ?, ?, ?)");
const subscribers = db.query<{ id: string; target_url: string }, [string]>(
  `SELECT s.id, s.target_url FROM webhook_subscriptions s
   WHERE s.id IN (SELECT subscription_id FROM webhook_subscription_events WHERE event_type = ?) AND s.status = 'active'
   ORDER BY s.id`,
);
const insertDelivery = db.query(
  `INSERT INTO webhook_deliveries (id, event_id, event_type, subscription_id, target_url, next_attempt_at, created_at, updated_at)
   VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
);
/** insertWithEvent writes the contact and its outbox event, with the statements of the app's create. */
function insertWithEvent(row: Row): void {
  insert.run(row as never);
  const eventId = `evt_${Bun.randomUUIDv7()}`;
  const now = row.created_at;
  insertEvent.run(eventId, "contact.created", JSON.stringify({ type: "contact.created", event_id: eventId, timestamp: new Date(now).toISOString(), data: render(row) }), now);
  for (const s of subscribers.all("contact.created")) insertDelivery.run(`dlv_${Bun.randomUUIDv7()}`, eventId, "contact.created", s.id, s.target_url, now, now, now);
}
const insertOne = db.transaction(insertWithEvent);
// The app's idempotency SQL (idempotency/store.ts): a lookup before the write, the response saved with it.
const findKeyRecord = db.query(
  "SELECT fingerprint, status, response_body, created_at FROM idempotency_keys WHERE token_id = ? AND method = ? AND path = ? AND idem_key = ? AND created_at >= ?",
);
const saveKeyRecord = db.query(
  `INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
   ON CONFLICT (token_id, method, path, idem_key) DO UPDATE SET fingerprint = excluded.fingerprint, status = excluded.status, response_body = excluded.response_body, created_at = excluded.created_at`,
);
const DAY_MS = 24 * 60 * 60 * 1000;
const firstPage = db.query<Row, []>(`SELECT ${COLUMNS} FROM contacts ORDER BY created_at DESC, id DESC LIMIT 25`);
const total = db.query<{ n: number }, []>("SELECT n FROM row_counts WHERE table_name = 'contacts'");
const byEmail = db.query<Row, [string]>(`SELECT ${COLUMNS} FROM contacts WHERE email = ? ORDER BY created_at DESC, id DESC LIMIT 25`);
const countByEmail = db.query<{ n: number }, [string]>("SELECT count(*) AS n FROM contacts WHERE email = ?");

function render({ properties, created_at, updated_at, ...row }: Row) {
  return { ...row, ...JSON.parse(properties), created_at: new Date(created_at).toISOString(), updated_at: new Date(updated_at).toISOString() };
}

function toRow(input: Record<string, string | null>): Row {
  const now = Date.now();
  const { first_name = null, last_name = null, email = null, phone = null, ...properties } = input;
  return { id: `con_${Bun.randomUUIDv7()}`, first_name, last_name, email: email?.toLowerCase() ?? null, phone, properties: JSON.stringify(properties), created_at: now, updated_at: now };
}

function page(rows: Row[], n: number) {
  return Response.json({ data: rows.map(render), meta: { current_page: 1, last_page: Math.max(1, Math.ceil(n / 25)), per_page: 25, total: n } });
}

const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  routes: {
    "/contacts": {
      GET(request) {
        const email = new URL(request.url).searchParams.get("email");
        if (email === null) return page(firstPage.all(), total.get()!.n);
        const wanted = email.toLowerCase();
        return page(byEmail.all(wanted), countByEmail.get(wanted)!.n);
      },
      async POST(request) {
        const row = toRow(await request.json());
        insertOne.immediate(row);
        return Response.json({ data: render(row) }, { status: 201 });
      },
    },
    "/contacts-only": {
      async POST(request) {
        const row = toRow(await request.json());
        insertRowOnly.immediate(row);
        return Response.json({ data: render(row) }, { status: 201 });
      },
    },
    "/grouped-contacts": {
      async POST(request) {
        const row = toRow(await request.json());
        await database.write(async () => insertWithEvent(row));
        return Response.json({ data: render(row) }, { status: 201 });
      },
    },
    "/grouped-idempotent-contacts": {
      async POST(request) {
        const key = request.headers.get("idempotency-key") ?? "";
        const text = await request.text();
        const fingerprint = new Bun.CryptoHasher("sha256").update(text).digest();
        findKeyRecord.get("tok_bench", "POST", "/contacts", key, Date.now() - DAY_MS);
        const row = toRow(JSON.parse(text));
        const body = JSON.stringify({ data: render(row) });
        await database.write(async () => {
          insertWithEvent(row);
          saveKeyRecord.run("tok_bench", "POST", "/contacts", key, fingerprint, 201, body, row.created_at);
        });
        return new Response(body, { status: 201, headers: { "content-type": "application/json" } });
      },
    },
  },
});
process.stdout.write(`listening on http://127.0.0.1:${server.port}\n`);
process.on("SIGTERM", () => {
  void server.stop().then(() => {
    void database.close().then(() => process.exit(0));
  });
});
