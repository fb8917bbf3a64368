import { afterEach, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { startServer, type RunningServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";
import { BUILD, VERSION } from "../../server/version.ts";
import { testBackend, type TestBackend } from "../support/backend.ts";
import { FAST_WEBHOOKS, startReceiver, waitFor, type Receiver } from "./support.ts";

const FUTURE = "9999_from_the_future.sql";
/** LONGEST_CHECK_WAIT_MS bounds the wait for the instance to notice the newer migration: its check runs every few seconds. */
const LONGEST_CHECK_WAIT_MS = 30_000;

let running: { server: RunningServer; backend: TestBackend; dataDir: string; receiver: Receiver } | undefined;
afterEach(async () => {
  if (!running) return;
  await running.server.stop();
  await running.receiver.stop();
  await running.backend.drop();
  rmSync(running.dataDir, { recursive: true, force: true });
  running = undefined;
});

test("an instance whose database a newer crm migrates under it refuses API and console requests (503 database-newer) and stops delivering", async () => {
  const receiver = startReceiver();
  receiver.respond(() => new Response("down", { status: 500 }));
  const dataDir = mkdtempSync(join(tmpdir(), "crm-newer-"));
  const backend = await testBackend(dataDir);
  const lines: string[] = [];
  // One second between attempts, for as long as the test runs: the loop would go on attempting.
  const config = { ...DEFAULT_CONFIG, ...FAST_WEBHOOKS, retrySchedule: Array(20).fill(1), port: 0, dataDir, ...backend.config };
  const server = await startServer(config, createLogger("error", (line) => lines.push(line)));
  running = { server, backend, dataDir, receiver };
  const { token } = await createApiToken(server.runtime.db, "newer");
  const api = (method: string, path: string, body?: unknown) =>
    fetch(`${server.url}/public/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  expect((await api("POST", "/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] })).status).toBe(201);
  expect((await api("POST", "/contacts", { first_name: "Ada", email: "ada@example.com" })).status).toBe(201);
  await waitFor(() => receiver.received.length >= 2, "the delivery's first attempts");

  // A newer crm, started beside this one, migrates the database.
  await server.runtime.db.run("INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, ?, 0)", [FUTURE]);

  const refused = await waitFor(
    async () => {
      const res = await api("GET", "/contacts");
      return res.status === 503 ? res : null;
    },
    "the API's refusal",
    LONGEST_CHECK_WAIT_MS,
  );
  const detail = `This instance runs crm ${BUILD}, and a newer crm has migrated its database (it has ${FUTURE}, which this version does not know): it serves no requests and sends no webhooks, so that it writes nothing the old way. Nothing was changed; send the request to an instance of the newer crm. The operator should stop this instance and run the newer crm in its place.`;
  expect({ status: refused.status, type: refused.headers.get("content-type"), retryAfter: refused.headers.get("retry-after"), body: await refused.json() }).toEqual({
    status: 503,
    type: "application/problem+json",
    retryAfter: "5",
    body: { type: "urn:crm:problem:database-newer", title: "Service Unavailable", status: 503, detail },
  });
  const create = await api("POST", "/contacts", { first_name: "Bob", email: "bob@example.com" });
  expect({ status: create.status, body: await create.json() }).toEqual({ status: 503, body: { type: "urn:crm:problem:database-newer", title: "Service Unavailable", status: 503, detail } });
  const login = await fetch(`${server.url}/console/login`);
  expect({ status: login.status, retryAfter: login.headers.get("retry-after"), explains: (await login.text()).includes(detail) }).toEqual({ status: 503, retryAfter: "5", explains: true });
  const consoleApi = await fetch(`${server.url}/console/api/deliveries`);
  expect({ status: consoleApi.status, body: await consoleApi.json() }).toEqual({ status: 503, body: { type: "urn:crm:problem:database-newer", title: "Service Unavailable", status: 503, detail } });
  // The refusal page's stylesheet still answers: the assets read nothing of the database.
  const stylesheet = await fetch(`${server.url}/console/assets/console.css`);
  expect({ status: stylesheet.status, type: stylesheet.headers.get("content-type") }).toEqual({ status: 200, type: "text/css; charset=utf-8" });

  const health = await fetch(`${server.url}/healthz`);
  expect({ status: health.status, body: await health.json() }).toEqual({ status: 200, body: { status: "ok", version: VERSION, uptime_seconds: expect.any(Number) } });
  await waitFor(() => !server.runtime.deliveries.running && server.runtime.deliveries.inFlightCount === 0, "the delivery loop's stop");
  const ready = await fetch(`${server.url}/readyz`);
  expect({ status: ready.status, body: await ready.json() }).toEqual({
    status: 503,
    body: {
      type: "urn:crm:problem:not-ready",
      title: "Service Unavailable",
      status: 503,
      detail: `Not ready: migrations: migrated by a newer crm: ${FUTURE}; delivery_loop: not running.`,
      // A loopback client, as /metrics answers one, gets the reasons.
      checks: { database: "ok", migrations: "newer-migrations", delivery_loop: "not-running" },
      reasons: { migrations: `migrated by a newer crm: ${FUTURE}`, delivery_loop: "not running" },
    },
  });

  // The delivery stays pending: wait until its next attempt is well overdue, then count what the receiver got.
  const sent = receiver.received.length;
  const pending = await server.runtime.db.all<{ next_attempt_at: number }>("SELECT next_attempt_at FROM webhook_deliveries WHERE status = 'pending'");
  expect(pending.length).toBe(1);
  await waitFor(() => Date.now() > Number(pending[0]!.next_attempt_at) + 1500, "the pending delivery's next attempt to be well overdue");
  expect(receiver.received.length).toBe(sent);

  const errors = lines.map((line) => JSON.parse(line)).filter((line) => line.msg.startsWith("the database was migrated by a newer crm"));
  expect(errors).toEqual([
    {
      time: expect.any(String),
      level: "error",
      msg: "the database was migrated by a newer crm: this instance refuses every API and console request (503 database-newer) and stops its webhook deliveries and background jobs; stop it and run the newer crm",
      version: BUILD,
      newer_migrations: [FUTURE],
    },
  ]);
});
