// bun bench/recovery.ts: recovery of a receiver's outage, against the real server in a child process.
// BENCH_FAILED (default 10000) failed deliveries to one subscription are written while the server is
// down; after start, POST /recover queues them all, and the time is measured from the request until
// the receiver (on loopback, answering 200 at once) has them all. Every re-sent delivery must arrive
// exactly once, with its original webhook-id, and be recorded as succeeded.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { createApiToken } from "../server/auth/service.ts";
import { databasePath, openDatabase } from "../server/db/database.ts";
import { migrate } from "../server/db/migrations.ts";
import { newId } from "../server/shared/ids.ts";
import { recordEvent } from "../server/webhooks/outbox.ts";
import { loadSecretsKey, SecretBox } from "../server/webhooks/secrets.ts";
import { newSubscriptionRow } from "../server/webhooks/service.ts";
import { insertSubscription } from "../server/webhooks/store.ts";
import { waitForListening } from "./listening.ts";

const FAILED = Number(process.env.BENCH_FAILED ?? 10_000);
const ROOT = join(import.meta.dir, "..");
const RESULTS_DIR = join(import.meta.dir, "results");

const dataDir = mkdtempSync(join(tmpdir(), "crm-bench-recovery-"));
const arrived = new Set<string>();
let duplicates = 0;
let lastArrival = 0;
const receiver = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  async fetch(request) {
    await request.arrayBuffer();
    const id = request.headers.get("webhook-id")!;
    if (arrived.has(id)) duplicates++;
    arrived.add(id);
    lastArrival = performance.now();
    return new Response("ok");
  },
});

// The outage, written while the server is down: FAILED contact.updated events whose one delivery each failed.
const setup = openDatabase(databasePath(dataDir));
migrate(setup.sqlite);
const { token } = await createApiToken(setup, "bench");
const now = Date.now();
const subscriptionId = newId("sub", now - 3_600_000);
const input = { target_url: `http://127.0.0.1:${receiver.port}/hook`, description: "bench", events: ["contact.updated" as const] };
// Sealed with the data directory's key (created here), as the server stores secrets.
const sealed = new SecretBox(loadSecretsKey({ dataDir, secretsKeyFile: "" }).key).seal(subscriptionId, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYo=");
await insertSubscription(setup, newSubscriptionRow(subscriptionId, input, sealed, { kind: "command_line" }, now - 3_600_000), input.events);
await setup.write(async (tx) => {
  for (let i = 0; i < FAILED; i++) await recordEvent(tx, "contact.updated", { id: `con_bench${i}`, first_name: "Outage", version: 2 }, { requestId: null, madeBy: null }, now - 1_800_000 + i);
});
await setup.run("UPDATE webhook_deliveries SET status = 'failed', attempts = 8, next_attempt_at = NULL, last_response_status = 503");
const failedIds = (await setup.all<{ id: string }>("SELECT id FROM webhook_deliveries WHERE status = 'failed'")).map((row) => row.id);
await setup.close();

const child = Bun.spawn([process.execPath, "server/main.ts", "serve", "--port", "0", "--log-level", "error"], {
  cwd: ROOT,
  env: { ...process.env, CRM_DATA_DIR: dataDir, CRM_ALLOW_PRIVATE_TARGETS: "1" },
  stdin: "ignore",
  stdout: "pipe",
  stderr: "inherit",
});
const url = await waitForListening("server", child.stdout);

const started = performance.now();
const res = await fetch(`${url}/public/v1/webhook-subscriptions/${subscriptionId}/recover`, {
  method: "POST",
  headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
  body: JSON.stringify({ since: new Date(now - 3_600_000).toISOString() }),
});
const answered = performance.now();
const queued = ((await res.json()) as { data: { queued: number } }).data.queued;
const deadline = Date.now() + 300_000;
while (arrived.size < FAILED && Date.now() < deadline) await Bun.sleep(5);
child.kill("SIGTERM");
await child.exited;

const check = openDatabase(databasePath(dataDir));
const succeeded = (await check.get<{ n: number }>("SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'succeeded' AND attempts = 9"))!.n;
await check.close();
receiver.stop(true);
rmSync(dataDir, { recursive: true, force: true });

const round = (n: number) => Math.round(n * 100) / 100;
const seconds = (lastArrival - started) / 1000;
const result = {
  at: new Date().toISOString(),
  cpus: cpus().length,
  failed: FAILED,
  queued,
  answer_ms: round(answered - started),
  seconds_until_all_resent: round(seconds),
  deliveries_per_s: Math.round(FAILED / seconds),
  arrived: arrived.size,
  duplicates,
  same_webhook_ids: failedIds.every((id) => arrived.has(id)),
  recorded_succeeded: succeeded,
};
console.log(
  `recovery of ${FAILED} failed deliveries: answered 202 (${queued} queued) in ${result.answer_ms} ms; all re-sent after ${result.seconds_until_all_resent} s (${result.deliveries_per_s}/s); ${duplicates} duplicates; recorded succeeded ${succeeded}`,
);
mkdirSync(RESULTS_DIR, { recursive: true });
writeFileSync(join(RESULTS_DIR, `recovery-${Date.now()}.json`), `${JSON.stringify(result, null, 2)}\n`);
if (queued !== FAILED || arrived.size !== FAILED || duplicates > 0 || !result.same_webhook_ids || succeeded !== FAILED) process.exit(1);
