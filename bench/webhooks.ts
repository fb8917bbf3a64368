// bun bench/webhooks.ts: webhook delivery on loopback, against the real server in a child process.
//  1. latency: contacts created over HTTP at a steady rate; event-to-delivery time is the receiver's
//     clock at arrival minus the event's timestamp (set in the transaction that wrote it).
//  2. throughput: a backlog of deliveries written into the database while the server is down is
//     drained after start; every attempt is recorded, which is checked afterwards.
// Settings: BENCH_RATE (contacts/s, default 200), BENCH_SECONDS (latency phase, 10),
// BENCH_BACKLOG (deliveries, 50000), BENCH_SUBSCRIPTIONS (receivers sharing the backlog, 4),
// BENCH_PROFILE=1 (write the server's CPU profile of the backlog phase as markdown to bench/results/),
// BENCH_SIGNATURES=2 (rotate every subscription's secret first, so each request carries two
// signatures, as during a rotation's grace period; default 1).
// BENCH_TARGET_HOST (how subscriptions name the receiver, default 127.0.0.1; "localhost" makes every
// attempt resolve a name, which the pinned connect does itself: compare the two).
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { createApiToken } from "../server/auth/service.ts";
import { databasePath, openDatabase } from "../server/db/database.ts";
import { migrate } from "../server/db/migrations.ts";
import { recordEvent } from "../server/webhooks/outbox.ts";
import { waitForListening } from "./listening.ts";

const RATE = Number(process.env.BENCH_RATE ?? 200);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const BACKLOG = Number(process.env.BENCH_BACKLOG ?? 50_000);
const SUBSCRIPTIONS = Number(process.env.BENCH_SUBSCRIPTIONS ?? 4);
const PROFILE = process.env.BENCH_PROFILE === "1";
const SIGNATURES = Number(process.env.BENCH_SIGNATURES ?? 1);
const TARGET_HOST = process.env.BENCH_TARGET_HOST ?? "127.0.0.1";
const ROOT = join(import.meta.dir, "..");
const RESULTS_DIR = join(import.meta.dir, "results");
const CLOCK_TICKS = 100;

const dataDir = mkdtempSync(join(tmpdir(), "crm-bench-webhooks-"));
const setupDb = openDatabase(databasePath(dataDir));
migrate(setupDb.sqlite);
const { token } = await createApiToken(setupDb, "bench");
await setupDb.close();

// The receiver: answers 200 at once and notes when each delivery arrived.
let latencies: number[] = [];
let arrivals = 0;
let firstArrival = 0;
let lastArrival = 0;
const receiver = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  async fetch(request) {
    const now = performance.timeOrigin + performance.now();
    const body = (await request.json()) as { timestamp: string };
    latencies.push(now - Date.parse(body.timestamp));
    arrivals++;
    if (firstArrival === 0) firstArrival = now;
    lastArrival = now;
    return new Response("ok");
  },
});

async function serve(profile = false): Promise<{ child: Subprocess<"ignore", "pipe", "inherit">; url: string }> {
  const profiling = profile ? ["--cpu-prof-md", `--cpu-prof-dir=${RESULTS_DIR}`, `--cpu-prof-name=webhooks-profile-${Date.now()}.md`] : [];
  const child = Bun.spawn([process.execPath, ...profiling, "server/main.ts", "serve", "--port", "0", "--log-level", "error"], {
    cwd: ROOT,
    // The rate limits would refuse a load generator's steady writes: this measures delivery.
    env: { ...process.env, CRM_DATA_DIR: dataDir, CRM_ALLOW_PRIVATE_TARGETS: "1", CRM_RATE_WRITE_PER_SECOND: "100000", CRM_RATE_WRITE_BURST: "100000", CRM_RATE_READ_PER_SECOND: "100000" },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "inherit",
  });
  return { child, url: await waitForListening("server", child.stdout) };
}

/** cpuSeconds reads a process's user+system CPU time from /proc. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits;

async function waitUntil(check: () => boolean, what: string, ms: number): Promise<void> {
  const until = Date.now() + ms;
  while (!check()) {
    if (Date.now() > until) throw new Error(`gave up waiting for ${what}`);
    await Bun.sleep(5);
  }
}

let server = await serve();
const api = (method: string, path: string, body?: unknown) =>
  fetch(`${server.url}${path}`, { method, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });

for (let i = 0; i < SUBSCRIPTIONS; i++) {
  const res = await api("POST", "/public/v1/webhook-subscriptions", { target_url: `http://${TARGET_HOST}:${receiver.port}/r${i}`, events: i === 0 ? ["contact.created"] : ["contact.updated"] });
  if (res.status !== 201) throw new Error(`subscription: ${res.status} ${await res.text()}`);
  if (SIGNATURES === 2) {
    const rotated = await api("POST", `/public/v1/webhook-subscriptions/${((await res.json()) as { data: { id: string } }).data.id}/rotate-secret`, { grace_hours: 24 });
    if (rotated.status !== 200) throw new Error(`rotation: ${rotated.status} ${await rotated.text()}`);
  }
}

async function createContact(i: number): Promise<void> {
  const res = await api("POST", "/public/v1/contacts", { first_name: `bench${i}`, email: `b${i}@example.com` });
  if (res.status !== 201) throw new Error(`contact create answered ${res.status}: ${await res.text()}`);
  await res.arrayBuffer();
}

// Phase 1: steady rate; only subscription 0 wants contact.created, so one delivery per contact.
const total = RATE * SECONDS;
const cpuBefore = cpuSeconds(server.child.pid);
const started = performance.now();
let sent = 0;
const inFlight: Promise<unknown>[] = [];
while (sent < total) {
  const due = Math.min(total, Math.floor(((performance.now() - started) / 1000) * RATE));
  for (; sent < due; sent++) inFlight.push(createContact(sent));
  await Bun.sleep(2);
}
await Promise.all(inFlight);
await waitUntil(() => arrivals >= total, "phase 1 deliveries", 30_000);
const steadyCpu = cpuSeconds(server.child.pid) - cpuBefore;
const sorted = [...latencies].sort((a, b) => a - b);
const latency = {
  contacts_per_s: RATE,
  seconds: SECONDS,
  deliveries: arrivals,
  p50_ms: round(percentile(sorted, 50)),
  p90_ms: round(percentile(sorted, 90)),
  p99_ms: round(percentile(sorted, 99)),
  max_ms: round(sorted.at(-1)!),
  server_cpu_percent: round((steadyCpu / ((performance.now() - started) / 1000)) * 100, 1),
};

// Phase 2: write a backlog (contact.updated, wanted by the other subscriptions) while the server is down.
server.child.kill("SIGTERM");
await server.child.exited;
const db = openDatabase(databasePath(dataDir));
const events = Math.ceil(BACKLOG / Math.max(1, SUBSCRIPTIONS - 1));
await db.write(async (tx) => {
  const now = Date.now();
  for (let i = 0; i < events; i++) await recordEvent(tx, "contact.updated", { id: `con_bench${i}`, first_name: "Backlog", email: `b${i}@example.com` }, { requestId: null, madeBy: null }, now);
});
const backlog = (await db.get<{ n: number }>("SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'pending'"))!.n;
await db.close();

latencies = [];
arrivals = 0;
firstArrival = 0;
server = await serve(PROFILE);
const drainCpuBefore = cpuSeconds(server.child.pid);
await waitUntil(() => arrivals >= backlog, "the backlog", 120_000);
const drainCpu = cpuSeconds(server.child.pid) - drainCpuBefore;
server.child.kill("SIGTERM");
await server.child.exited;
const check = openDatabase(databasePath(dataDir));
const recorded = (await check.get<{ attempts: number; succeeded: number }>(
  "SELECT (SELECT count(*) FROM webhook_delivery_attempts) AS attempts, (SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded') AS succeeded",
))!;
await check.close();
const drainSeconds = (lastArrival - firstArrival) / 1000;
const throughput = {
  backlog,
  subscriptions: SUBSCRIPTIONS - 1,
  seconds: round(drainSeconds),
  deliveries_per_s: Math.round(backlog / drainSeconds),
  server_cpu_seconds: round(drainCpu),
  attempts_recorded: recorded.attempts - total,
  succeeded: recorded.succeeded - total,
};

receiver.stop(true);
rmSync(dataDir, { recursive: true, force: true });
const result = { at: new Date().toISOString(), cpus: cpus().length, signatures: SIGNATURES, target_host: TARGET_HOST, latency, throughput };
console.log(`${SIGNATURES} signature(s) per request`);
console.log(`event-to-delivery at ${RATE} contacts/s for ${SECONDS}s: p50 ${latency.p50_ms} ms, p90 ${latency.p90_ms} ms, p99 ${latency.p99_ms} ms, max ${latency.max_ms} ms (server CPU ${latency.server_cpu_percent}%)`);
console.log(`targets named ${TARGET_HOST}`);
console.log(`backlog of ${backlog} to ${throughput.subscriptions} subscriptions: ${throughput.deliveries_per_s} deliveries/s over ${throughput.seconds}s; attempts recorded ${throughput.attempts_recorded}, succeeded ${throughput.succeeded}`);
mkdirSync(RESULTS_DIR, { recursive: true });
writeFileSync(join(RESULTS_DIR, `webhooks-${Date.now()}.json`), `${JSON.stringify(result, null, 2)}\n`);
if (throughput.attempts_recorded !== backlog || throughput.succeeded !== backlog) process.exit(1);
