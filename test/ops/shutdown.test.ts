import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { join } from "node:path";
import { Connection, type RawResponse } from "../limits/support.ts";
import { VERSION } from "../../server/version.ts";
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

/** DRAIN_WINDOW_OVER is the message of the log line of a drain whose window ended with connections still open. */
const DRAIN_WINDOW_OVER = "drain window over with connections open; idle ones are closed now, busy ones after their answer";

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

  test("SIGTERM: once the drain window is over new connections are refused, the request in flight finishes and is committed, exit 0", async () => {
    const { dataDir, token, server } = await serve(["--shutdown-timeout-ms", "30000", "--shutdown-drain-ms", "100"]);
    const { deliveryId, retry } = await heldRetry(server, token, receiver);
    server.proc.kill("SIGTERM");
    // The held request keeps its connection open through the drain window.
    await waitForOutput(server, `"msg":"${DRAIN_WINDOW_OVER}"`);
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
    expect(server.logLines().find((l) => l.msg === "shutting down")).toMatchObject({ level: "info", signal: "SIGTERM", deadline_ms: 30000, drain_ms: 100 });
    expect(deliveryAttempts(dataDir, deliveryId)).toBe(2);
  });

  test("SIGTERM sent as soon as the server says it listens is the graceful stop, exit 0, every time", async () => {
    const dataDir = tempDir("shutdown-at-once");
    const exits = [];
    for (let run = 0; run < 8; run++) {
      const server = await spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--log-level", "warn"]);
      exits.push(await server.stopWith("SIGTERM"));
    }
    expect(exits).toEqual(Array.from({ length: 8 }, () => ({ exitCode: 0, killed: false })));
  });

  test("SIGINT stops the same way", async () => {
    const { token, server } = await serve();
    expect((await api(server.url, token, "POST", "/public/v1/contacts", { first_name: "Ada" })).status).toBe(201);
    expect(await server.stopWith("SIGINT")).toEqual({ exitCode: 0, killed: false });
    expect(server.logLines().at(-1)?.msg).toBe("stopped");
  });

  test("the shutdown deadline cuts off a request that never completes (its body never arrives); nothing of it is stored; exit 0", async () => {
    const { dataDir, token, server } = await serve(["--shutdown-timeout-ms", "200"]);
    const stalled = new Connection(Number(new URL(server.url).port));
    stalled.write(`POST /public/v1/contacts HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${token}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"first_name":`);
    await waitUntil(async () => (await api(server.url, token, "GET", "/healthz")).status === 200, "the server to take requests", server.proc);
    expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
    expect(await stalled.response().then((res) => res.status, () => "closed without an answer")).toBe("closed without an answer");
    expect(server.logLines().map((l) => l.msg)).toContain("shutdown deadline reached; closing the connections of unfinished requests");
    expect(contactNames(dataDir)).toEqual([]);
  });

  test("a manual retry whose receiver has not answered by the time the deadline leaves it is answered 503 shutting-down, not cut off; its attempt is released for the next start, not recorded", async () => {
    // A deadline the answer fits in on a loaded machine: the retry is given up a second before it.
    const { dataDir, token, server } = await serve(["--shutdown-timeout-ms", "2000"]);
    const { deliveryId, retry } = await heldRetry(server, token, receiver);
    expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
    expect(await retry).toEqual({
      status: 503,
      headers: expect.anything(),
      body: { type: "urn:crm:problem:shutting-down", title: "Service Unavailable", status: 503, detail: "The server is shutting down; retry the delivery after it restarts." },
    });
    const messages = server.logLines().map((l) => l.msg);
    expect({ abandoned: messages.includes("webhook attempts abandoned at shutdown; the deliveries among them still pending are sent again after restart"), cutOff: messages.includes("shutdown deadline reached; closing the connections of unfinished requests") }).toEqual({ abandoned: true, cutOff: false });
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

/** KeepAliveRun is what one kept-alive client saw: the answers it got, and what ended it other than a clean close. */
interface KeepAliveRun {
  answers: RawResponse[];
  failure: string | null;
}

/**
 * keepAliveClient creates contacts over one kept-alive connection, each request sent as soon as
 * the previous answer is in, until the server closes the connection. A close with a request
 * unanswered (reset or not) is a failure; a close seen before the next request is not.
 */
async function keepAliveClient(port: number, token: string, name: string, run: KeepAliveRun): Promise<void> {
  const connection = new Connection(port);
  const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
  try {
    while (!connection.isClosed) {
      const answer = await connection.request("POST", "/public/v1/contacts", headers, JSON.stringify({ first_name: `${name}-${run.answers.length}` }));
      run.answers.push(answer);
      if (answer.headers.connection === "close") await connection.closed;
    }
    if (connection.errorCode) run.failure = `the connection failed (${connection.errorCode}) between two requests`;
  } catch (error) {
    run.failure = (error as Error).message;
  }
}

describe("graceful shutdown: the drain", () => {
  test("50 kept-alive clients writing without pause at SIGTERM: every request sent is answered, the last with Connection: close, and committed; none is reset", async () => {
    const { dataDir, token, server } = await serve(["--shutdown-drain-ms", "60000", "--shutdown-timeout-ms", "120000", "--rate-write-per-second", "1000000", "--rate-write-burst", "1000000"]);
    const port = Number(new URL(server.url).port);
    const runs: KeepAliveRun[] = Array.from({ length: 50 }, () => ({ answers: [], failure: null }));
    const clients = runs.map((run, i) => keepAliveClient(port, token, `c${i}`, run));
    await waitUntil(() => runs.every((run) => run.answers.length >= 5 || run.failure !== null), "every client to have written five contacts", server.proc);
    server.proc.kill("SIGTERM");
    await Promise.all(clients);
    // The drain ends with the last client gone, long before its window.
    expect(await server.waitForExit(20_000)).toEqual({ exitCode: 0, killed: false });
    expect(runs.map((run) => run.failure)).toEqual(Array(50).fill(null));
    expect(runs.map((run) => run.answers.at(-1)!.headers.connection)).toEqual(Array(50).fill("close"));
    const answers = runs.flatMap((run) => run.answers);
    expect(new Set(answers.map((answer) => answer.status))).toEqual(new Set([201]));
    const created = answers.map((answer) => JSON.parse(answer.body).data.first_name as string);
    expect(contactNames(dataDir).sort()).toEqual(created.sort());
    expect(server.logLines().map((l) => l.msg)).not.toContain(DRAIN_WINDOW_OVER);
    expect(server.logLines().at(-1)).toMatchObject({ level: "info", msg: "stopped" });
  });

  test("while it drains, /readyz answers 503 shutting-down and /healthz 200, each closing its connection; the drain ends when the last kept-alive client has its answer", async () => {
    const { server } = await serve(["--shutdown-drain-ms", "60000", "--shutdown-timeout-ms", "120000"]);
    const port = Number(new URL(server.url).port);
    const kept = new Connection(port);
    expect((await kept.request("GET", "/healthz")).headers.connection).toBeUndefined();
    server.proc.kill("SIGTERM");
    await waitForOutput(server, '"msg":"shutting down"');

    const readinessProbe = new Connection(port);
    const ready = await readinessProbe.request("GET", "/readyz");
    // No Retry-After: this instance will not be ready again, and a probe takes it out of rotation whatever the header says.
    expect({ status: ready.status, type: ready.headers["content-type"], connection: ready.headers.connection, retryAfter: ready.headers["retry-after"] ?? null, body: JSON.parse(ready.body) }).toEqual({
      status: 503,
      type: "application/problem+json",
      connection: "close",
      retryAfter: null,
      body: {
        type: "urn:crm:problem:shutting-down",
        title: "Service Unavailable",
        status: 503,
        detail: "Shutting down: this instance answers the requests it gets, closing each connection after its answer, until it stops listening; send new requests to another instance.",
      },
    });
    await readinessProbe.closed;
    expect(readinessProbe.errorCode).toBeNull();

    const livenessProbe = new Connection(port);
    const alive = await livenessProbe.request("GET", "/healthz");
    expect({ status: alive.status, connection: alive.headers.connection, body: JSON.parse(alive.body) }).toEqual({
      status: 200,
      connection: "close",
      body: { status: "ok", version: VERSION, uptime_seconds: expect.any(Number) },
    });
    await livenessProbe.closed;

    // The kept-alive connection holds the drain open; its next request is answered, and closes it.
    expect(kept.isClosed).toBe(false);
    const last = await kept.request("GET", "/healthz");
    expect({ status: last.status, connection: last.headers.connection }).toEqual({ status: 200, connection: "close" });
    await kept.closed;
    expect(kept.errorCode).toBeNull();
    expect(await server.waitForExit(20_000)).toEqual({ exitCode: 0, killed: false });
    expect(server.logLines().find((l) => l.msg === "shutting down")).toMatchObject({ signal: "SIGTERM", deadline_ms: 120000, drain_ms: 60000 });
    expect(server.logLines().map((l) => l.msg)).not.toContain(DRAIN_WINDOW_OVER);
  });

  test("a server without open connections stops at once, however long its drain window", async () => {
    const { server } = await serve(["--shutdown-drain-ms", "60000", "--shutdown-timeout-ms", "120000"]);
    // A client that came and went leaves nothing to wait for.
    const visitor = new Connection(Number(new URL(server.url).port));
    expect((await visitor.request("GET", "/healthz")).status).toBe(200);
    visitor.destroy();
    await visitor.closed;
    expect(await server.stopWith("SIGTERM", 20_000)).toEqual({ exitCode: 0, killed: false });
    expect(server.logLines().map((l) => l.msg)).not.toContain(DRAIN_WINDOW_OVER);
    expect(server.logLines().at(-1)).toMatchObject({ level: "info", msg: "stopped" });
  });

  test("a kept-alive connection that stays idle through the drain window is closed when it ends, cleanly (not reset)", async () => {
    const { server } = await serve(["--shutdown-drain-ms", "200"]);
    const idle = new Connection(Number(new URL(server.url).port));
    expect((await idle.request("GET", "/healthz")).status).toBe(200);
    expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
    await idle.closed;
    expect({ errorCode: idle.errorCode, unread: idle.received }).toEqual({ errorCode: null, unread: "" });
    expect(server.logLines().find((l) => l.msg === DRAIN_WINDOW_OVER)).toMatchObject({ level: "info", connections: 1, drain_ms: 200 });
  });
});
