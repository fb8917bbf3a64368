// bun bench/soak.ts [--minutes N] [--workers W]: a soak under mixed, partly hostile traffic, on
// loopback only. It spawns the server on a fresh data directory and, for N minutes (default 1,
// at most 10), sends valid creates, PATCHes and deletes, lists and reads, idempotent retries,
// malformed and oversized requests, a token hammering past its rate limit, and slow-header
// connections; a webhook receiver fails a third of the deliveries (when the server has
// /public/v1/webhook-subscriptions). It then checks: no 5xx, every acknowledged create stored
// (and nothing else), every event delivered, RSS growth under 20% after warm-up, and prints
// p99 latency per minute. Exit code 1 when a check fails.
import { Database } from "bun:sqlite";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { waitForListening } from "./listening.ts";

const ROOT = join(import.meta.dir, "..");
const argValue = (name: string) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
};
const MINUTES = Math.min(10, Math.max(0.5, Number(argValue("--minutes") ?? 1)));
const WORKERS = Math.max(1, Number(argValue("--workers") ?? 16));
const WARMUP_MS = Math.min(30_000, Math.max(10_000, MINUTES * 60_000 * 0.15)); // JIT, SQLite page cache and pools fill first
const DRAIN_LIMIT_MS = 120_000;

const dataDir = mkdtempSync(join(tmpdir(), "crm-soak-"));

function cli(args: string[]): string {
  const result = Bun.spawnSync([process.execPath, "server/main.ts", ...args, "--data-dir", dataDir], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
  if (result.exitCode !== 0) throw new Error(`crm ${args.join(" ")} failed: ${result.stderr.toString()}`);
  return result.stdout.toString().trim();
}

/** rssBytes reads a process's resident set size from /proc. */
function rssBytes(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return match ? Number(match[1]) * 1024 : Number.NaN;
}

// --- the webhook receiver: fails a third of the attempts, but no delivery more than three times
// running (a flaky receiver that recovers, so "every event delivered" does not hinge on luck);
// records every delivery that succeeded
const succeeded = new Set<string>();
const failuresByDelivery = new Map<string, number>();
let receiverAttempts = 0;
let receiverFailures = 0;
const receiver = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  async fetch(request) {
    await request.text();
    receiverAttempts++;
    const id = request.headers.get("webhook-id") ?? "";
    const failures = failuresByDelivery.get(id) ?? 0;
    if (failures < 3 && Math.random() < 1 / 3) {
      receiverFailures++;
      failuresByDelivery.set(id, failures + 1);
      return new Response("try again", { status: 503 });
    }
    succeeded.add(id);
    return new Response(null, { status: 204 });
  },
});

// --- the server, with a generous token for the well-behaved traffic and a default one for the hammering script
const mainToken = cli(["token", "create", "--name", "soak", "--rate", "100000,100000"]);
const throttledToken = cli(["token", "create", "--name", "tight-loop importer"]);
const server = Bun.spawn(
  [process.execPath, "server/main.ts", "serve", "--port", "0", "--data-dir", dataDir, "--log-level", "warn", "--allow-private-targets", "--retry-schedule", "1,1,1,1,1,1,1,1,1,1", "--delivery-timeout-ms", "5000"],
  { cwd: ROOT, stdout: "pipe", stderr: "inherit", stdin: "ignore" },
);
const serverOutput: string[] = [];
const url = await waitForListening("server", server.stdout, (text) => {
  if (serverOutput.length < 20) serverOutput.push(text);
});
const port = Number(new URL(url).port);

// --- bookkeeping
const statuses = new Map<number, number>();
const problems: string[] = [];
const latencies: number[][] = []; // per minute since start
let networkErrors = 0;
/** every create acknowledged with 201: the contact id and the request, for idempotent retries */
const acknowledged: { id: string; key: string; body: string }[] = [];
const deleted = new Set<string>();
let replays = 0;
let started = performance.now();

function note(problem: string): void {
  if (problems.length < 20) problems.push(problem);
}

async function send(method: string, path: string, options: { body?: string; headers?: Record<string, string>; token?: string } = {}) {
  const began = performance.now();
  try {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: { authorization: `Bearer ${options.token ?? mainToken}`, ...(options.body === undefined ? {} : { "content-type": "application/json" }), ...options.headers },
      body: options.body,
    });
    const text = await res.text();
    const elapsed = performance.now() - began;
    (latencies[Math.min(Math.ceil(MINUTES) - 1, Math.floor((began - started) / 60_000))] ??= []).push(elapsed);
    statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    if (res.status >= 500) note(`${res.status} on ${method} ${path.slice(0, 80)}: ${text.slice(0, 200)}`);
    return { status: res.status, headers: res.headers, text };
  } catch (error) {
    networkErrors++;
    note(`network error on ${method} ${path.slice(0, 80)}: ${(error as Error).message}`);
    return { status: 0, headers: new Headers(), text: "" };
  }
}

const pick = <T>(items: readonly T[]): T => items[Math.floor(Math.random() * items.length)]!;
/** recent picks one of the last `window` acknowledged creates (undefined before the first). */
const recent = (window: number) => acknowledged[acknowledged.length - 1 - Math.floor(Math.random() * Math.min(window, acknowledged.length))];
let sequence = 0;

function contactBody(): string {
  const n = ++sequence;
  return JSON.stringify({
    first_name: pick(["Ada", "Grace", "Alan", "Edsger", "Barbara", "Ken"]),
    last_name: `Soak${n}`,
    email: `person${n}@example.com`,
    tags: n % 3 ? ["import"] : ["import", "vip"],
    custom_fields: { row: n, plan: pick(["free", "pro", "team"]) },
    source: { system: "soak", row: n },
  });
}

const MALFORMED = [
  '{"first_name":"Ada"',
  '{"first_name":"Ada","first_name":"Eve"}',
  '{"__proto__":{"admin":true}}',
  '{"custom_fields":{"constructor":{"prototype":{"x":1}}}}',
  `{"deep":${"[".repeat(40)}${"]".repeat(40)}}`,
  '{"n":123456789012345678901234567890}',
  '{"email":"not an address"}',
  '{"first_name":"\\ud800"}',
  "[1,2,3]",
];

type Operation = () => Promise<void>;
const operations: [number, Operation][] = [
  [30, async () => {
    const key = `soak-${crypto.randomUUID()}`;
    const body = contactBody();
    const res = await send("POST", "/public/v1/contacts", { body, headers: { "idempotency-key": key } });
    if (res.status === 201) acknowledged.push({ id: JSON.parse(res.text).data.id, key, body });
    else note(`create answered ${res.status}: ${res.text.slice(0, 200)}`);
  }],
  [8, async () => {
    const original = recent(200);
    if (!original) return;
    const res = await send("POST", "/public/v1/contacts", { body: original.body, headers: { "idempotency-key": original.key } });
    if (res.status === 201 && res.headers.get("idempotent-replayed") === "true" && JSON.parse(res.text).data.id === original.id) replays++;
    else if (res.status !== 409) note(`idempotent retry answered ${res.status} (replayed ${res.headers.get("idempotent-replayed")}): ${res.text.slice(0, 120)}`);
  }],
  [6, async () => {
    const id = recent(500)?.id;
    if (!id || deleted.has(id)) return;
    await send("PATCH", `/public/v1/contacts/${id}`, { body: JSON.stringify({ phone: `+1 555 ${Math.floor(Math.random() * 10000)}` }) });
  }],
  [2, async () => {
    const id = recent(acknowledged.length)?.id;
    if (!id || deleted.has(id)) return;
    deleted.add(id);
    const res = await send("DELETE", `/public/v1/contacts/${id}`);
    if (res.status !== 204) note(`delete answered ${res.status}`);
  }],
  [22, async () => {
    const sort = pick(["created_at", "updated_at", "first_name", "last_name", "email"]);
    const query = pick([`per_page=25&sort_by=${sort}`, `per_page=100&page=${1 + Math.floor(Math.random() * 5)}`, "full_name=ada", `email=person${Math.floor(Math.random() * sequence)}@example.com`, "include=accounts,assigned_users"]);
    const res = await send("GET", `/public/v1/contacts?${query}`);
    if (res.status !== 200) note(`list answered ${res.status}: ${res.text.slice(0, 120)}`);
  }],
  [6, async () => {
    const id = recent(acknowledged.length)?.id;
    if (id && !deleted.has(id)) await send("GET", `/public/v1/contacts/${id}`);
  }],
  [12, async () => {
    const res = await send("POST", "/public/v1/contacts", { body: pick(MALFORMED) });
    if (res.status < 400 || res.status >= 500) note(`malformed body answered ${res.status}`);
  }],
  [6, async () => {
    const kind = pick(["body", "custom_fields", "query", "header", "content-type"]);
    const res =
      kind === "body" ? await send("POST", "/public/v1/contacts", { body: `{"notes":"${"x".repeat(1024 * 1024 + 1)}"}` })
      : kind === "custom_fields" ? await send("POST", "/public/v1/contacts", { body: JSON.stringify({ custom_fields: { notes: "x".repeat(20_000) } }) })
      : kind === "query" ? await send("GET", `/public/v1/contacts?email=${"q".repeat(5000)}`)
      : kind === "header" ? await send("GET", "/public/v1/contacts", { headers: { "x-pad": "p".repeat(10_000) } })
      : await send("POST", "/public/v1/contacts", { body: "first_name=Ada", headers: { "content-type": "application/x-www-form-urlencoded" } });
    if (res.status < 400 || res.status >= 500) note(`oversized ${kind} answered ${res.status}`);
  }],
  [6, async () => {
    // A buggy import script in a tight loop, on a token with the default rates.
    for (let i = 0; i < 5; i++) await send("GET", "/public/v1/contacts?per_page=1", { token: throttledToken });
  }],
  [2, async () => {
    await send("GET", "/public/v1/contacts", { token: "crm_not-a-real-token-at-all" });
  }],
];
const totalWeight = operations.reduce((sum, [weight]) => sum + weight, 0);
function chooseOperation(): Operation {
  let roll = Math.random() * totalWeight;
  for (const [weight, operation] of operations) {
    roll -= weight;
    if (roll < 0) return operation;
  }
  return operations[0]![1];
}

/** slowHeaders opens connections that never finish their request head; Bun closes them after 10 s. */
function slowHeaders(count: number): void {
  for (let i = 0; i < count; i++) {
    const socket = net.connect(port, "127.0.0.1", () => socket.write("GET /public/v1/contacts HTTP/1.1\r\nhost: x\r\n"));
    const drip = setInterval(() => socket.writable && socket.write("x-slow: 1\r\n"), 1000);
    socket.on("error", () => {});
    socket.on("close", () => clearInterval(drip));
  }
}

// --- run
const hasWebhooks = (await send("GET", "/public/v1/webhook-subscriptions")).status === 200;
if (hasWebhooks) {
  const sub = await send("POST", "/public/v1/webhook-subscriptions", {
    body: JSON.stringify({ target_url: `http://127.0.0.1:${receiver.port}/hook`, description: "soak receiver", events: ["contact.created", "contact.updated", "contact.deleted"] }),
  });
  if (sub.status !== 201) throw new Error(`could not subscribe: ${sub.status} ${sub.text}`);
}
statuses.clear();
latencies.length = 0;
const rssIdle = rssBytes(server.pid);
console.log(`soak: ${MINUTES} min, ${WORKERS} workers, server ${url} (pid ${server.pid}), webhooks ${hasWebhooks ? "on" : "off (no /public/v1/webhook-subscriptions)"}`);
started = performance.now();
const deadline = started + MINUTES * 60_000;
let rssAfterWarmup = Number.NaN;
const warmupTimer = setTimeout(() => (rssAfterWarmup = rssBytes(server.pid)), WARMUP_MS);
const slowTimer = setInterval(() => slowHeaders(5), 20_000);
const progress = setInterval(() => {
  const minute = latencies.length;
  process.stdout.write(`  ${((performance.now() - started) / 1000).toFixed(0)} s: ${[...statuses.values()].reduce((a, b) => a + b, 0)} requests, ${acknowledged.length} creates acknowledged, RSS ${(rssBytes(server.pid) / 2 ** 20).toFixed(1)} MiB (minute ${minute})\n`);
}, 15_000);
await Promise.all(
  Array.from({ length: WORKERS }, async () => {
    while (performance.now() < deadline) await chooseOperation()();
  }),
);
clearInterval(slowTimer);
clearInterval(progress);
clearTimeout(warmupTimer);
const rssEnd = rssBytes(server.pid);

// --- drain deliveries, then compare against the database
const db = new Database(join(dataDir, "crm.sqlite"), { readonly: true });
const countOf = (sql: string) => db.query<{ n: number }, []>(sql).get()!.n;
let deliveriesPending = 0;
const drainStarted = performance.now();
if (hasWebhooks) {
  for (;;) {
    deliveriesPending = countOf("SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'pending'");
    if (deliveriesPending === 0 || performance.now() - drainStarted > DRAIN_LIMIT_MS) break;
    await Bun.sleep(500);
  }
}
const storedIds = new Set(db.query<{ id: string }, []>("SELECT id FROM contacts").all().map((r) => r.id));
const expectedIds = new Set(acknowledged.map((c) => c.id).filter((id) => !deleted.has(id)));
const missing = [...expectedIds].filter((id) => !storedIds.has(id));
const unexpected = [...storedIds].filter((id) => !expectedIds.has(id));
const events = countOf("SELECT count(*) AS n FROM events WHERE type LIKE 'contact.%'");
const deliveryRows = hasWebhooks ? countOf("SELECT count(*) AS n FROM webhook_deliveries") : 0;
const deliveredOk = hasWebhooks ? countOf("SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'succeeded'") : 0;
const deliveredFailed = hasWebhooks ? countOf("SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'failed'") : 0;
db.close();
server.kill("SIGTERM");
await server.exited;
receiver.stop(true);
rmSync(dataDir, { recursive: true, force: true });

// --- report
const p99 = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))] ?? Number.NaN;
};
const fiveXX = [...statuses].filter(([status]) => status >= 500).reduce((sum, [, n]) => sum + n, 0);
const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
const growth = (rssEnd - rssAfterWarmup) / rssAfterWarmup;
console.log(`\nrequests by status: ${[...statuses].sort(([a], [b]) => a - b).map(([s, n]) => `${s}: ${n}`).join(", ")}; network errors: ${networkErrors}`);
console.log("p99 latency per minute: " + latencies.map((values, minute) => `min ${minute + 1}: ${p99(values).toFixed(1)} ms (${values.length} req)`).join(", "));
const checks: [string, boolean][] = [
  [`5xx responses: ${fiveXX} (must be 0); network errors: ${networkErrors}`, fiveXX === 0 && networkErrors === 0],
  [`contacts stored ${storedIds.size} = creates acknowledged ${acknowledged.length} - deleted ${deleted.size}; missing ${missing.length}, unexpected ${unexpected.length}; idempotent replays ${replays}`, missing.length === 0 && unexpected.length === 0],
  [
    hasWebhooks
      ? `deliveries succeeded ${deliveredOk} of ${deliveryRows} (events ${events}; failed ${deliveredFailed}, still pending ${deliveriesPending}); receiver saw ${receiverAttempts} attempts, failed ${receiverFailures} on purpose, ${succeeded.size} distinct deliveries ok`
      : "webhooks: skipped (the server has no /public/v1/webhook-subscriptions yet)",
    !hasWebhooks || (deliveredOk === events && deliveryRows === events && succeeded.size >= deliveredOk),
  ],
  [`RSS idle ${mib(rssIdle)}, after ${(WARMUP_MS / 1000).toFixed(0)} s warm-up ${mib(rssAfterWarmup)}, end ${mib(rssEnd)}: growth after warm-up ${(growth * 100).toFixed(1)}% (must be < 20%)`, growth < 0.2],
];
for (const [text, ok] of checks) console.log(`${ok ? "ok  " : "FAIL"} ${text}`);
if (problems.length > 0) console.log(`first problems:\n  ${problems.join("\n  ")}`);
if (serverOutput.length > 0) console.log(`server output:\n${serverOutput.join("").slice(0, 2000)}`);
process.exit(checks.every(([, ok]) => ok) ? 0 : 1);
