// bun bench/console.ts: what the operator console costs on a large history. Seeds 20 subscriptions
// and BENCH_DELIVERIES (default 200k) deliveries, then times in-process requests (no network) of a
// signed-in operator: the live deliveries endpoint each open console polls every 3 s, the start
// page, the subscriptions page with its 24-hour counts, and a delivery page. Prints a table and
// writes JSON to bench/results/. BENCH_ROUNDS (default 200) requests per measurement.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createOperator, signIn } from "../server/operators/service.ts";
import { createApp, createRuntime } from "../server/app.ts";
import { DEFAULT_CONFIG } from "../server/config.ts";
import { databasePath, openDatabase } from "../server/db/database.ts";
import { newId } from "../server/shared/ids.ts";
import { createLogger } from "../server/shared/log.ts";
import { insertEvent, insertDelivery, insertSubscription, updateDeliveryAfterAttempt } from "../server/webhooks/store.ts";

const DELIVERIES = Number(process.env.BENCH_DELIVERIES ?? 200_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 200);
const SUBSCRIPTIONS = 20;

const dataDir = mkdtempSync(join(tmpdir(), "crm-bench-console-"));
const db = openDatabase(databasePath(dataDir));
const rt = createRuntime({ db, config: { ...DEFAULT_CONFIG, dataDir, logLevel: "error" }, log: createLogger("error") });
const app = createApp(rt);

const seedStarted = performance.now();
const now = Date.now();
const subscriptions: string[] = [];
const firstDelivery = now - DELIVERIES * 100;
db.transaction(() => {
  for (let i = 0; i < SUBSCRIPTIONS; i++) {
    const id = newId("sub", now - 1_000_000 + i);
    subscriptions.push(id);
    insertSubscription(db, { id, target_url: `https://receiver${i}.example.com/hooks`, description: `Receiver ${i}`, events: '["contact.created"]', secret: "whsec_x", previous_secret: null, previous_secret_expires_at: null, secret_rotated_at: null, status: "active", disabled_at: null, disabled_reason: null, paused_at: null, max_rate: null, failing_since: null, created_at: now, updated_at: now }, ["contact.created"]);
  }
  for (let i = 0; i < DELIVERIES; i++) {
    const at = firstDelivery + i * 100;
    const eventId = newId("evt", at);
    insertEvent(db, { id: eventId, type: "contact.created", payload: `{"type":"contact.created","timestamp":"${new Date(at).toISOString()}","data":{"id":"con_${i}"}}`, created_at: at });
    const id = newId("dlv", at);
    const subscription = subscriptions[i % SUBSCRIPTIONS]!;
    insertDelivery(db, { id, event_id: eventId, event_type: "contact.created", subscription_id: subscription, target_url: `https://receiver${i % SUBSCRIPTIONS}.example.com/hooks`, next_attempt_at: at, created_at: at });
    const status = i % 50 === 0 ? "failed" : i % 97 === 0 ? "pending" : "succeeded";
    if (status !== "pending") updateDeliveryAfterAttempt(db, { id, status, attempts: status === "failed" ? 8 : 1, next_attempt_at: null, last_response_status: status === "failed" ? 500 : 200, last_error: null, updated_at: at });
  }
}).immediate();
db.run("ANALYZE");
const seedMs = performance.now() - seedStarted;

await createOperator(db, { email: "bench@example.com", password: "bench password 123" });
const cookie = `crm_console_session=${await signIn(db, { email: "bench@example.com", password: "bench password 123", address: "bench" })}`;
const sampleDelivery = db.query<{ id: string }, []>("SELECT id FROM webhook_deliveries ORDER BY created_at DESC LIMIT 1").get()!.id;

async function measure(path: string): Promise<{ path: string; p50_ms: number; p99_ms: number; per_second: number; bytes: number }> {
  const get = () => app.handle(new Request(`http://localhost${path}`, { headers: { cookie } }));
  const first = await get();
  if (first.status !== 200) throw new Error(`${path} answered ${first.status}`);
  const bytes = (await first.text()).length;
  for (let i = 0; i < 20; i++) await (await get()).text();
  const times: number[] = [];
  const started = performance.now();
  for (let i = 0; i < ROUNDS; i++) {
    const t = performance.now();
    await (await get()).text();
    times.push(performance.now() - t);
  }
  const total = performance.now() - started;
  times.sort((a, b) => a - b);
  const at = (q: number) => Math.round(times[Math.min(times.length - 1, Math.floor(q * times.length))]! * 100) / 100;
  return { path, p50_ms: at(0.5), p99_ms: at(0.99), per_second: Math.round((ROUNDS / total) * 1000), bytes };
}

const results = [];
for (const path of [
  "/console/api/deliveries",
  "/console/api/deliveries?status=failed",
  `/console/api/deliveries?subscription_id=${subscriptions[3]}`,
  "/console/api/deliveries?status=pending&event=contact.created",
  "/console/",
  "/console/subscriptions",
  `/console/deliveries/${sampleDelivery}`,
]) {
  results.push(await measure(path));
}

console.log(`console bench: ${DELIVERIES} deliveries over ${SUBSCRIPTIONS} subscriptions (seeded in ${Math.round(seedMs)} ms), ${ROUNDS} sequential in-process requests each`);
console.log(`${"request".padEnd(72)} ${"p50 ms".padStart(8)} ${"p99 ms".padStart(8)} ${"req/s".padStart(7)} ${"bytes".padStart(8)}`);
for (const r of results) console.log(`${r.path.padEnd(72)} ${String(r.p50_ms).padStart(8)} ${String(r.p99_ms).padStart(8)} ${String(r.per_second).padStart(7)} ${String(r.bytes).padStart(8)}`);
mkdirSync(join(import.meta.dir, "results"), { recursive: true });
writeFileSync(join(import.meta.dir, "results", `console-${Date.now()}.json`), JSON.stringify({ deliveries: DELIVERIES, subscriptions: SUBSCRIPTIONS, rounds: ROUNDS, results }, null, 2));
rt.writes.flush();
db.close();
rmSync(dataDir, { recursive: true, force: true });
