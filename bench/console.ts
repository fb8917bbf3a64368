// bun bench/console.ts: what the operator console costs on a large history. Seeds, with bulk SQL,
// BENCH_CONTACTS (default 200,000) contacts and BENCH_DELIVERIES (default 1,000,000) deliveries
// over the last 7 days (a quarter as many events, each about a contact, fanned out to 4 of 20
// subscriptions), then times in-process requests (no network) of a signed-in operator: the start
// page with its charts, older pages and filters of the deliveries table, a subscription's page, a
// contact's page, the contacts search and the search box. Prints p50/p95/p99 per request and the
// query plan of every statement the console's reads run, and writes JSON to bench/results/.
// BENCH_ROUNDS (default 200) requests per measurement.
import type { Database } from "bun:sqlite";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { contactPage, contactsPage } from "../console/contacts/service.ts";
import { latestDeliveries } from "../console/deliveries/service.ts";
import { search } from "../console/search/service.ts";
import { recentFailures, subscriptionsHealth } from "../console/subscriptions/health.ts";
import { createApp, createRuntime } from "../server/app.ts";
import { DEFAULT_CONFIG } from "../server/config.ts";
import { databasePath, openDatabase } from "../server/db/database.ts";
import { createOperator, signIn } from "../server/operators/service.ts";
import { createLogger } from "../server/shared/log.ts";
import { LATENCY_BOUNDS_MS } from "../server/webhooks/stats.ts";
import { listAllSubscriptions } from "../server/webhooks/service.ts";
import { capturing, queryPlan } from "../test/support/query-plans.ts";

const DELIVERIES = Number(process.env.BENCH_DELIVERIES ?? 1_000_000);
const CONTACTS = Number(process.env.BENCH_CONTACTS ?? 200_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 200);
const SUBSCRIPTIONS = 20;
const FAN_OUT = 4;
const EVENTS = Math.ceil(DELIVERIES / FAN_OUT);
const HOUR = 3_600_000;
const WEEK = 7 * 24 * HOUR;

const dataDir = mkdtempSync(join(tmpdir(), "crm-bench-console-"));
const db = openDatabase(databasePath(dataDir));
const rt = await createRuntime({ db, config: { ...DEFAULT_CONFIG, dataDir, logLevel: "error" }, log: createLogger("error") });
const app = createApp(rt);
const now = Date.now();

// sqlite-only: the bulk seed runs on the SQLite connection itself (db.sqlite).
/** seed writes the history with INSERT ... SELECT over a counter: the triggers of the hourly counts and the name search run as they would in service. */
function seed(sqlite: Database): void {
  const counter = (n: number) => `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ${n - 1})`;
  sqlite.transaction(() => {
    for (let i = 0; i < SUBSCRIPTIONS; i++) {
      sqlite
        .query(
          `INSERT INTO webhook_subscriptions (id, target_url, description, events, secret, status, created_at, updated_at)
           VALUES (printf('sub_%026d', ?1), printf('https://receiver%d.example.com/hooks', ?1), printf('Receiver %d', ?1), '["contact.updated"]', 'whsec_x', 'active', ?2, ?2)`,
        )
        .run(i, now - WEEK);
      sqlite.query("INSERT INTO webhook_subscription_events (event_type, subscription_id) VALUES ('contact.updated', printf('sub_%026d', ?))").run(i);
    }
    sqlite.run(
      `${counter(CONTACTS)} INSERT INTO contacts (id, first_name, last_name, email, properties, created_at, updated_at)
       SELECT printf('con_%026d', i), 'First' || i, 'Last' || (i % 1000), 'person' || i || '@example.com', '{}', ${now - WEEK} + i * ${Math.floor(WEEK / CONTACTS)}, ${now - WEEK} + i * ${Math.floor(WEEK / CONTACTS)} FROM n`,
    );
    // Events a week long, oldest first; event i is about contact (i * 7919) % CONTACTS, and every 500th about the busy contact 42.
    sqlite.run(
      `${counter(EVENTS)} INSERT INTO events (id, type, payload, created_at)
       SELECT printf('evt_%026d', i), 'contact.updated',
         printf('{"type":"contact.updated","event_id":"evt_%026d","timestamp":"%s","data":{"id":"con_%026d","first_name":"First"}}', i, strftime('%Y-%m-%dT%H:%M:%fZ', (${now - WEEK} + i * ${WEEK / EVENTS}) / 1000.0, 'unixepoch'), CASE WHEN i % 500 = 0 THEN 42 ELSE (i * 7919) % ${CONTACTS} END),
         ${now - WEEK} + CAST(i * ${WEEK / EVENTS} AS INTEGER) FROM n`,
    );
    // Each event to FAN_OUT subscriptions: 2% failed (a 500 or a timeout), 1% pending, the rest succeeded.
    sqlite.run(
      `${counter(DELIVERIES)} INSERT INTO webhook_deliveries (id, event_id, event_type, subscription_id, target_url, status, attempts, next_attempt_at, last_response_status, last_error, created_at, updated_at)
       SELECT printf('dlv_%026d', i), printf('evt_%026d', i / ${FAN_OUT}), 'contact.updated', printf('sub_%026d', (i / ${FAN_OUT} + i % ${FAN_OUT} * 5) % ${SUBSCRIPTIONS}),
         printf('https://receiver%d.example.com/hooks', (i / ${FAN_OUT} + i % ${FAN_OUT} * 5) % ${SUBSCRIPTIONS}),
         CASE WHEN i % 50 = 0 THEN 'failed' WHEN i % 97 = 0 THEN 'pending' ELSE 'succeeded' END,
         CASE WHEN i % 50 = 0 THEN 8 WHEN i % 97 = 0 THEN 1 ELSE 1 END,
         CASE WHEN i % 97 = 0 AND i % 50 <> 0 THEN ${now + 86_400_000} END,
         CASE WHEN i % 50 = 0 AND i % 100 = 0 THEN NULL WHEN i % 50 = 0 THEN 500 WHEN i % 97 = 0 THEN 503 ELSE 200 END,
         CASE WHEN i % 100 = 0 THEN 'timed out after 15000 ms' END,
         ${now - WEEK} + CAST((i / ${FAN_OUT}) * ${WEEK / EVENTS} AS INTEGER), ${now - WEEK} + CAST((i / ${FAN_OUT}) * ${WEEK / EVENTS} AS INTEGER) FROM n`,
    );
    // Hourly response-time statistics as the delivery loop keeps them.
    const buckets = JSON.stringify(LATENCY_BOUNDS_MS.map((_, i) => (i >= 18 && i <= 26 ? 40 - Math.abs(22 - i) * 8 : 0)).concat([0]));
    const insertStats = sqlite.query("INSERT INTO webhook_attempt_stats (subscription_id, hour, succeeded, failed, latency_buckets) VALUES (printf('sub_%026d', ?), ?, 200, 4, ?)");
    for (let i = 0; i < SUBSCRIPTIONS; i++) for (let h = 0; h < 169; h++) insertStats.run(i, now - (now % HOUR) - h * HOUR, buckets);
  }).immediate();
  sqlite.run("ANALYZE");
}

const seedStarted = performance.now();
seed(db.sqlite);
const seedMs = performance.now() - seedStarted;

await createOperator(db, { email: "bench@example.com", password: "bench password 123" });
const cookie = `crm_console_session=${(await signIn(db, rt.secrets, { email: "bench@example.com", password: "bench password 123", address: "bench" })).session}`;
const busyContact = `con_${"42".padStart(26, "0")}`;
const typical = Math.floor(CONTACTS * 0.61) + 7;
const typicalContact = `con_${String(typical).padStart(26, "0")}`;
const subscription = `sub_${"3".padStart(26, "0")}`;
const delivery = `dlv_${String(DELIVERIES - 1234).padStart(26, "0")}`;
const event = `evt_${String(EVENTS - 4321).padStart(26, "0")}`;
const olderPage = (await latestDeliveries(db, {})).next!;

/** measure times sequential requests of one path; search answers 303, every other page 200. */
async function measure(label: string, path: string): Promise<{ label: string; path: string; p50_ms: number; p95_ms: number; p99_ms: number; bytes: number }> {
  const get = () => app.handle(new Request(`http://localhost${path}`, { headers: { cookie } }));
  const first = await get();
  const expected = path.startsWith("/console/search") ? 303 : 200;
  if (first.status !== expected) throw new Error(`${path} answered ${first.status}: ${(await first.text()).slice(0, 500)}`);
  const bytes = (await first.text()).length;
  for (let i = 0; i < 20; i++) await (await get()).text();
  const times: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    const t = performance.now();
    await (await get()).text();
    times.push(performance.now() - t);
  }
  times.sort((a, b) => a - b);
  const at = (q: number) => Math.round(times[Math.min(times.length - 1, Math.floor(q * times.length))]! * 100) / 100;
  return { label, path, p50_ms: at(0.5), p95_ms: at(0.95), p99_ms: at(0.99), bytes };
}

const pages: [string, string][] = [
  ["start page: charts of 20 subscriptions, latest 50 of 1M", "/console/"],
  ["start page, failed only", "/console/?status=failed"],
  ["deliveries, the next older page", `/console/?before=${encodeURIComponent(olderPage)}`],
  ["deliveries about one contact", `/console/?contact_id=${busyContact}`],
  ["subscriptions list", "/console/subscriptions"],
  ["a subscription: large charts, failures by reason", `/console/subscriptions/${subscription}`],
  ["a contact's page (busy: ~500 events)", `/console/contacts/${busyContact}`],
  ["a contact's page (typical)", `/console/contacts/${typicalContact}`],
  ["contacts, name search", "/console/contacts?q=Last42"],
  ["search: delivery id", `/console/search?q=${delivery}`],
  ["search: event id", `/console/search?q=${event}`],
  ["search: contact id", `/console/search?q=${typicalContact}`],
  ["search: email", `/console/search?q=person${typical}%40example.com`],
];
const results = [];
for (const [label, path] of pages) results.push(await measure(label, path));

// The plan of every statement the console's reads run, captured from the services themselves.
const spy = capturing(db);
const subscriptions = await listAllSubscriptions(spy.db);
await subscriptionsHealth(spy.db, subscriptions);
await latestDeliveries(spy.db, {});
await latestDeliveries(spy.db, { status: "failed" });
await latestDeliveries(spy.db, { before: olderPage });
await latestDeliveries(spy.db, { contact_id: busyContact });
await recentFailures(spy.db, subscription, "bench");
await contactPage(spy.db, busyContact);
await contactsPage(spy.db, { q: "Last42" }, "bench");
for (const q of [delivery, event, typicalContact, `person${typical}@example.com`]) await search(spy.db, q, "bench");
const plans = [...new Map(spy.captured.map((c) => [c.sql, c])).values()].map((c) => ({ sql: c.sql.replace(/\s+/g, " ").trim(), plan: queryPlan(db.sqlite, c) }));

console.log(`console bench: ${DELIVERIES} deliveries, ${EVENTS} events, ${CONTACTS} contacts, ${SUBSCRIPTIONS} subscriptions (seeded in ${Math.round(seedMs / 1000)} s); ${ROUNDS} sequential in-process requests each`);
console.log(`${"request".padEnd(56)} ${"p50 ms".padStart(8)} ${"p95 ms".padStart(8)} ${"p99 ms".padStart(8)} ${"bytes".padStart(8)}`);
for (const r of results) console.log(`${r.label.padEnd(56)} ${String(r.p50_ms).padStart(8)} ${String(r.p95_ms).padStart(8)} ${String(r.p99_ms).padStart(8)} ${String(r.bytes).padStart(8)}`);
console.log("\nquery plans of the console's reads:");
for (const { sql, plan } of plans) console.log(`\n${sql.slice(0, 240)}\n${plan.map((line) => `  ${line}`).join("\n")}`);
mkdirSync(join(import.meta.dir, "results"), { recursive: true });
writeFileSync(join(import.meta.dir, "results", `console-${Date.now()}.json`), JSON.stringify({ deliveries: DELIVERIES, events: EVENTS, contacts: CONTACTS, subscriptions: SUBSCRIPTIONS, rounds: ROUNDS, seed_ms: Math.round(seedMs), results, plans }, null, 2));
await db.close();
rmSync(dataDir, { recursive: true, force: true });
