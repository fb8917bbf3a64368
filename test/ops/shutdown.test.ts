import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { join } from "node:path";
import { api, createToken, SOURCE, spawnServer, startReceiver, tempDir, waitUntil, type Receiver, type ServerProcess } from "./support.ts";

/**
 * heldRetry starts a request the server cannot finish on its own: a manual retry of a delivery
 * whose receiver holds the attempt open. It resolves once the attempt reached the receiver, so
 * the request is certainly in flight when the test sends a signal.
 */
async function heldRetry(server: ServerProcess, token: string, receiver: Receiver) {
  const sub = await api(server.url, token, "POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["webhook.ping"] });
  expect(sub.status).toBe(201);
  const ping = await api(server.url, token, "POST", `/public/v1/webhook-subscriptions/${sub.body.data.id}/test`);
  expect(ping.status).toBe(202);
  const deliveryId: string = ping.body.data.delivery_id;
  await waitUntil(async () => (await api(server.url, token, "GET", `/public/v1/webhook-deliveries/${deliveryId}`)).body.data.status === "succeeded", "the ping delivery", server.proc);
  receiver.hold();
  const seen = receiver.received.length;
  // Settled at once into a value, so a connection cut off by the shutdown is an outcome, not an unhandled rejection.
  const retry = api(server.url, token, "POST", `/public/v1/webhook-deliveries/${deliveryId}/retry`).catch((error: Error) => error);
  await waitUntil(() => receiver.received.length > seen, "the held attempt", server.proc);
  return { deliveryId, retry };
}

/** waitForOutput resolves once the process has written `text`; the server's own hang guard bounds it. */
async function waitForOutput(server: ServerProcess, text: string): Promise<void> {
  while (!server.output().includes(text)) {
    if (server.proc.exitCode !== null) throw new Error(`the server exited before writing ${text}:\n${server.output()}`);
    await Bun.sleep(10);
  }
}

function deliveryAttempts(dataDir: string, deliveryId: string): number {
  const db = new Database(join(dataDir, "crm.sqlite"), { readonly: true });
  try {
    expect(db.query("PRAGMA integrity_check").all()).toEqual([{ integrity_check: "ok" }]);
    return db.query<{ n: number }, [string]>("SELECT count(*) AS n FROM webhook_delivery_attempts WHERE delivery_id = ?").get(deliveryId)!.n;
  } finally {
    db.close();
  }
}

function leasedDeliveries(dataDir: string): string[] {
  const db = new Database(join(dataDir, "crm.sqlite"), { readonly: true });
  try {
    return db.query<{ id: string }, []>("SELECT id FROM webhook_deliveries WHERE locked_until IS NOT NULL").all().map((r) => r.id);
  } finally {
    db.close();
  }
}

function contactNames(dataDir: string): string[] {
  const db = new Database(join(dataDir, "crm.sqlite"), { readonly: true });
  try {
    return db.query<{ first_name: string }, []>("SELECT first_name FROM contacts ORDER BY id").all().map((r) => r.first_name);
  } finally {
    db.close();
  }
}

async function serve(extra: string[] = []) {
  const dataDir = tempDir("shutdown");
  const token = createToken(SOURCE, dataDir);
  const server = await spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, ...extra], {
    env: { PATH: process.env.PATH ?? "", CRM_ALLOW_PRIVATE_TARGETS: "1" },
  });
  return { dataDir, token, server };
}

describe("graceful shutdown", () => {
  let receiver: Receiver;
  beforeEach(() => (receiver = startReceiver()));
  afterEach(() => {
    receiver.release();
    receiver.stop();
  });

  test("SIGTERM: new connections are refused, the request in flight finishes and is committed, exit 0", async () => {
    const { dataDir, token, server } = await serve(["--shutdown-timeout-ms", "30000"]);
    const { deliveryId, retry } = await heldRetry(server, token, receiver);
    server.proc.kill("SIGTERM");
    await waitForOutput(server, '"msg":"shutting down"');
    await expect(fetch(`${server.url}/healthz`)).rejects.toThrow();
    receiver.release();
    const response = await retry;
    if (response instanceof Error) throw response;
    expect(response.status).toBe(200);
    expect(response.body.data).toMatchObject({ id: deliveryId, status: "succeeded", attempts: 2 });
    expect(await server.waitForExit()).toEqual({ exitCode: 0, killed: false });
    const lines = server.logLines();
    // The request that finished during the shutdown is logged like any other.
    expect(lines.slice(-2)).toMatchObject([
      { level: "info", msg: "request", method: "POST", path: `/public/v1/webhook-deliveries/${deliveryId}/retry`, status: 200 },
      { level: "info", msg: "stopped" },
    ]);
    expect(server.logLines().find((l) => l.msg === "shutting down")).toMatchObject({ level: "info", signal: "SIGTERM", deadline_ms: 30000 });
    expect(deliveryAttempts(dataDir, deliveryId)).toBe(2);
  });

  test("SIGINT stops the same way", async () => {
    const { token, server } = await serve();
    expect((await api(server.url, token, "POST", "/public/v1/contacts", { first_name: "Ada" })).status).toBe(201);
    expect(await server.stopWith("SIGINT")).toEqual({ exitCode: 0, killed: false });
    expect(server.logLines().at(-1)?.msg).toBe("stopped");
  });

  test("the shutdown deadline cuts off a request that never completes; the attempt is released for the next start; exit 0", async () => {
    const { dataDir, token, server } = await serve(["--shutdown-timeout-ms", "200"]);
    const { deliveryId, retry } = await heldRetry(server, token, receiver);
    expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
    expect(await retry).toBeInstanceOf(Error);
    expect(server.logLines().map((l) => l.msg)).toContain("shutdown deadline reached; closing the connections of unfinished requests");
    expect(deliveryAttempts(dataDir, deliveryId)).toBe(1);
    expect(leasedDeliveries(dataDir)).toEqual([]);
  });

  test("a second signal exits at once, keeping everything already committed", async () => {
    const { dataDir, token, server } = await serve(["--shutdown-timeout-ms", "60000"]);
    for (const name of ["One", "Two", "Three"]) expect((await api(server.url, token, "POST", "/public/v1/contacts", { first_name: name })).status).toBe(201);
    await heldRetry(server, token, receiver);
    server.proc.kill("SIGTERM");
    await waitForOutput(server, '"msg":"shutting down"');
    expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 143, killed: false });
    expect(contactNames(dataDir)).toEqual(["One", "Two", "Three"]);
  });
});
