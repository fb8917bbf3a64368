import { SQL, type Socket, type TCPSocketListener } from "bun";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { api, runCli, SOURCE, spawnServer, startReceiver, tempDir, waitUntil, type ServerProcess } from "../ops/support.ts";
import { parseExposition } from "../ops/prometheus.ts";
import { closedWithin, Connection, type RawResponse } from "../limits/support.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { WRITE_LOCK } from "../../server/db/postgres.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { SESSION_COOKIE } from "../../console/http.ts";
import { sha256 } from "../../server/shared/crypto.ts";

// The real server (`bun server/main.ts serve`) on a PostgreSQL database it reaches through a TCP
// relay the test can cut, stall and mend: what clients and load balancers get while the database
// is down, not answering, restarting or refusing work, and that the service recovers by itself.

const UNAVAILABLE = {
  type: "urn:crm:problem:database-unavailable",
  title: "Service Unavailable",
  status: 503,
  detail:
    "The service cannot use its database just now (it is unreachable, restarting or busy). Retry shortly; a change retried with the same Idempotency-Key is made once, even if this attempt went through.",
};

/**
 * Relay forwards TCP connections from its own port to the database's. `cut` closes every
 * connection and the port (new ones are refused, as by a stopped server), `stall` accepts new
 * connections and never answers (as across a dropped network path), `freeze` holds every byte and
 * close either way (a network partition), `mend` ends a stall or a freeze.
 */
interface Relay {
  port: number;
  cut(): void;
  stall(): void;
  /** freeze holds the bytes and closes passing either way, on open and new connections, and leaves the connections open, as a network partition does. */
  freeze(): void;
  /**
   * mend resets the connections opened while stalled and forwards again. What freeze held is
   * delivered, as TCP retransmits it once a partition heals; with `loseHeld`, the connections that
   * were open when the freeze came lose it instead and stay silent for ever, as when a firewall or
   * NAT forgot them meanwhile (those opened since get through, as their retried handshake does).
   */
  mend(options?: { loseHeld?: boolean }): void;
  /** forget makes the one connection the database sees coming from `port` pass nothing any more, either way, as a firewall that forgot it. */
  forget(port: number): void;
  /** forgetIdle forgets every connection nothing passed through for `ms`, as a firewall's idle timeout does. */
  forgetIdle(ms: number): void;
  /** stallOn makes each connection that sends `text` (a statement) pass nothing more from then on, either way, as a path that stops forwarding just then; null ends it for connections sending it later. */
  stallOn(text: string | null): void;
  stop(): void;
}

/** Link is one relayed connection; a lost one passes nothing any more. */
type Link = { lost: boolean; lastPassed: number };
type RelayEnd = { peer: Socket<RelayEnd> | null; early: Uint8Array[]; forwards: boolean; link: Link };

function startRelay(targetPort: number): Relay {
  const open = new Set<Socket<RelayEnd>>();
  let forwarding = true;
  // What freeze holds, in order (null while not frozen), and the links that were open when it came.
  let held: (() => void)[] | null = null;
  let partitioned: Link[] = [];
  let stallText: string | null = null;
  const pass = (link: Link, action: () => void) => {
    if (link.lost) return;
    link.lastPassed = performance.now();
    if (held) held.push(() => link.lost || action());
    else action();
  };
  const close = (socket: Socket<RelayEnd>) => {
    open.delete(socket);
    socket.end();
  };
  const handlers = {
    open(client: Socket<RelayEnd>) {
      const link = { lost: false, lastPassed: performance.now() };
      client.data = { peer: null, early: [], forwards: forwarding, link };
      open.add(client);
      if (!forwarding) return;
      void Bun.connect<RelayEnd>({
        hostname: "127.0.0.1",
        port: targetPort,
        data: { peer: client, early: [], forwards: true, link },
        socket: {
          open(server) {
            open.add(server);
            client.data.peer = server;
            for (const chunk of client.data.early) server.write(chunk);
          },
          data: (_server, chunk) => {
            const copy = new Uint8Array(chunk);
            pass(link, () => void client.write(copy));
          },
          close: (server) => (close(server), pass(link, () => close(client))),
          error: (server) => (close(server), pass(link, () => close(client))),
        },
      }).catch(() => close(client));
    },
    data(client: Socket<RelayEnd>, chunk: Uint8Array) {
      if (!client.data.forwards) return;
      if (stallText !== null && Buffer.from(chunk).includes(stallText)) client.data.link.lost = true;
      const copy = new Uint8Array(chunk);
      pass(client.data.link, () => {
        if (client.data.peer) client.data.peer.write(copy);
        else client.data.early.push(copy);
      });
    },
    close(client: Socket<RelayEnd>) {
      open.delete(client);
      pass(client.data.link, () => {
        if (client.data.peer) close(client.data.peer);
      });
    },
  };
  let listener: TCPSocketListener<RelayEnd> | null = Bun.listen<RelayEnd>({ hostname: "127.0.0.1", port: 0, socket: handlers });
  const port = listener.port;
  const dropAll = () => {
    held = null;
    for (const socket of [...open]) close(socket);
  };
  return {
    port,
    cut() {
      listener?.stop(true);
      listener = null;
      dropAll();
    },
    freeze() {
      if (held) return;
      held = [];
      partitioned = [...open].map((socket) => socket.data.link);
    },
    stall() {
      dropAll();
      forwarding = false;
      listener ??= Bun.listen<RelayEnd>({ hostname: "127.0.0.1", port, socket: handlers });
    },
    mend({ loseHeld = false } = {}) {
      // A connection opened while stalled never reaches the database: it is reset, as a router coming back does.
      for (const socket of [...open]) if (!socket.data.forwards) close(socket);
      if (loseHeld) for (const link of partitioned) link.lost = true;
      const delivered = held ?? [];
      held = null;
      for (const action of delivered) action();
      forwarding = true;
      listener ??= Bun.listen<RelayEnd>({ hostname: "127.0.0.1", port, socket: handlers });
    },
    forget(databaseSidePort) {
      for (const socket of open) if (socket.localPort === databaseSidePort) socket.data.link.lost = true;
    },
    forgetIdle(ms) {
      const before = performance.now() - ms;
      for (const socket of open) if (socket.data.link.lastPassed <= before) socket.data.link.lost = true;
    },
    stallOn(text) {
      stallText = text;
    },
    stop() {
      listener?.stop(true);
      dropAll();
    },
  };
}

let database: TestDatabase;
let admin: SQL;
let keyFile: string;
let token: string;
let relay: Relay | null = null;
let server: ServerProcess | null = null;

beforeAll(async () => {
  database = await createTestDatabase();
  keyFile = writeSecretsKeyFile(join(tempDir("outage"), "secrets.key"));
  token = createTokenOn(database);
  admin = new SQL({ url: database.url, max: 1 });
}, 60_000);

afterEach(async () => {
  await server?.stopWith("SIGTERM");
  server = null;
  relay?.stop();
  relay = null;
  await admin.unsafe(`ALTER DATABASE "${database.name}" RESET ALL`);
});

afterAll(async () => {
  await admin?.close();
  await database?.drop();
});

/** serveThroughRelay starts the server on the test database (or `on`) as `user`, reached through a new relay, with extra settings (CRM_* variables). */
async function serveThroughRelay(user = "postgres", settings: Record<string, string> = {}, on: TestDatabase = database): Promise<{ relay: Relay; server: ServerProcess }> {
  relay = startRelay(Number(new URL(database.url).port));
  const env = {
    PATH: process.env.PATH ?? "",
    CRM_DATABASE_URL: `postgres://${user}@127.0.0.1:${relay.port}/${on.name}`,
    CRM_SECRETS_KEY_FILE: keyFile,
    CRM_DATABASE_POOL: "4",
    ...settings,
  };
  server = await spawnServer([...SOURCE, "serve", "--port", "0", "--log-level", "warn"], { env });
  return { relay, server };
}

/** dropConnections ends the server's connections from PostgreSQL's side, as a restart of it does. */
async function dropConnections(): Promise<void> {
  await admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = ${database.name} AND pid <> pg_backend_pid()`;
}

async function contactsWithEmail(email: string): Promise<number> {
  const [row] = await admin`SELECT count(*)::int AS n FROM contacts WHERE email = ${email}`;
  return row.n;
}

/** createRole makes a role that may log in and use the test database's tables, as a service's own role. */
async function createRole(role: string): Promise<void> {
  await admin.unsafe(`DROP ROLE IF EXISTS ${role}`);
  await admin.unsafe(`CREATE ROLE ${role} LOGIN`);
  await admin.unsafe(`GRANT ALL ON SCHEMA public TO ${role}; GRANT ALL ON ALL TABLES IN SCHEMA public TO ${role}; GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO ${role}`);
}

/** dropRole stops the server and removes a role createRole made. */
async function dropRole(role: string): Promise<void> {
  await server?.stopWith("SIGTERM");
  server = null;
  await admin.unsafe(`REASSIGN OWNED BY ${role} TO postgres; DROP OWNED BY ${role}; DROP ROLE ${role}`);
}

/** createTokenOn creates an API token on a database (migrating it first, as every command does) and returns it. */
function createTokenOn(on: TestDatabase): string {
  const created = runCli([...SOURCE, "token", "create", "--name", "outage"], { env: { PATH: process.env.PATH ?? "", CRM_DATABASE_URL: on.url, CRM_SECRETS_KEY_FILE: keyFile } });
  if (created.exitCode !== 0) throw new Error(`token create failed: ${created.stderr}`);
  return created.stdout.trim();
}

/** refusalsSeen sends a list request until `count` answers came and returns the last `count`, as "status type retry-after". */
async function refusalsSeen(server: ServerProcess, bearer: string, count: number): Promise<string[]> {
  const seen: string[] = [];
  await waitUntil(async () => {
    const res = await api(server.url, bearer, "GET", "/public/v1/contacts");
    seen.push(`${res.status} ${res.body?.type} ${res.headers.get("retry-after")}`);
    return seen.length >= count + 2;
  }, "the answers", server.proc);
  return seen.slice(-count);
}

/**
 * lockLinesSeen waits for the server's first line above info (`what`) and gives each such line by
 * its level, message, lock_timeout_ms and holders, each as "pid table mode".
 */
async function lockLinesSeen(server: ServerProcess, what: string) {
  const lines = () => server.logLines().filter((line) => line.level !== "info");
  await waitUntil(() => lines().length > 0, what, server.proc);
  return lines().map((line) => ({
    level: line.level,
    msg: line.msg,
    lock_timeout_ms: line.lock_timeout_ms,
    holders: line.holders.map((h: { pid: number; table: string; mode: string }) => `${h.pid} ${h.table} ${h.mode}`),
  }));
}

/**
 * boundedAnswer makes one request, by default an API request with the test's token, and gives its
 * answer as "status", or "status type retry-after" for an error (the problem's type, or a page's
 * content type), bounded so that one held for as long as a lock fails the test instead of waiting
 * for it.
 */
async function boundedAnswer(url: string, method: string, path: string, body?: unknown, headers: Record<string, string> = { authorization: `Bearer ${token}` }): Promise<string> {
  const response = await fetch(`${url}${path}`, {
    method,
    headers: { ...headers, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(15_000),
  }).catch((error: unknown) => ({ status: `no answer (${(error as Error).name})`, headers: new Headers(), text: async () => "{}" }));
  if (typeof response.status !== "number" || response.status < 400) return `${response.status}`;
  const contentType = response.headers.get("content-type") ?? "";
  const type = contentType.startsWith("application/problem+json") ? (JSON.parse(await response.text()) as { type?: string }).type : contentType;
  return `${response.status} ${type} ${response.headers.get("retry-after")}`;
}

/** answers sends `count` requests at once, so that every pooled connection serves one, and returns their statuses and problem types. */
async function answers(url: string, count: number, method: string, path: string, body?: (i: number) => unknown) {
  const results = await Promise.all(Array.from({ length: count }, (_, i) => api(url, token, method, path, body?.(i))));
  return results.map((r) => `${r.status}${r.status >= 400 ? ` ${r.body.type}` : ""}`);
}

describe("database down", () => {
  test("while PostgreSQL cannot be reached the API is 503 database-unavailable with Retry-After, /readyz is 503 naming it, /healthz stays 200; once it is back, an idempotent retry creates the contact once", async () => {
    const { relay, server } = await serveThroughRelay();
    expect((await api(server.url, token, "GET", "/public/v1/contacts")).status).toBe(200);

    relay.cut();
    const listed = await api(server.url, token, "GET", "/public/v1/contacts");
    expect({ status: listed.status, retryAfter: listed.headers.get("retry-after"), body: listed.body }).toEqual({ status: 503, retryAfter: "5", body: UNAVAILABLE });
    const create = () =>
      fetch(`${server.url}/public/v1/contacts`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json", "idempotency-key": "outage-1" },
        body: JSON.stringify({ email: "outage@example.com", first_name: "Out" }),
      });
    const refused = await create();
    expect({ status: refused.status, retryAfter: refused.headers.get("retry-after"), body: await refused.json() }).toEqual({ status: 503, retryAfter: "5", body: UNAVAILABLE });
    const ready = await fetch(`${server.url}/readyz`);
    // A loopback client, as /metrics answers one, gets the reasons beside the checks' codes.
    const readiness = (await ready.json()) as { type: string; checks: Record<string, string>; reasons: Record<string, string> };
    expect({ status: ready.status, type: readiness.type, checks: readiness.checks, reasons: readiness.reasons }).toEqual({
      status: 503,
      type: "urn:crm:problem:not-ready",
      checks: { database: "unavailable", migrations: "unavailable", delivery_loop: "ok" },
      reasons: { database: "Failed to connect", migrations: "Failed to connect" },
    });
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
    // The scrape still answers: the process's own metrics, and the database's gauges marked missing.
    const scrape = async () => {
      const response = await fetch(`${server.url}/metrics`);
      const metrics = parseExposition(await response.text());
      return { status: response.status, up: metrics.value("crm_up"), database: metrics.value("crm_database_up"), queued: metrics.value("crm_webhook_queue_depth"), inFlight: metrics.value("crm_webhook_attempts_in_flight") };
    };
    expect(await scrape()).toEqual({ status: 200, up: 1, database: 0, queued: undefined, inFlight: 0 });
    const refusals = () => server.logLines().filter((line) => line.msg === "database unavailable: a request was refused");
    // Every request meets the outage: the first refusal is logged, the next within the minute only counted (RefusalLog).
    await waitUntil(() => refusals().length >= 1, "the first refusal logged", server.proc);
    // One line a cause: on a loaded machine a connection refused and one timed out are two causes (their codes), each logged once.
    const causes = refusals().map((line) => `${line.level} ${String(line.code ?? line.error)}`);
    expect({ first: `${refusals()[0]!.method} ${refusals()[0]!.path}`, causes: [...new Set(causes)] }).toEqual({ first: "GET /public/v1/contacts", causes });
    expect(server.logLines().filter((line) => line.msg === "unhandled error")).toEqual([]);
    expect(await contactsWithEmail("outage@example.com")).toBe(0);

    relay.mend();
    const created = await create();
    expect(created.status).toBe(201);
    const replayed = await create();
    expect({ status: replayed.status, replayed: replayed.headers.get("idempotent-replayed") }).toEqual({ status: 201, replayed: "true" });
    expect(await contactsWithEmail("outage@example.com")).toBe(1);
    expect((await fetch(`${server.url}/readyz`)).status).toBe(200);
    expect(await scrape()).toEqual({ status: 200, up: 1, database: 1, queued: 0, inFlight: 0 });
  });

  test("a create cut off from the database after reserving its Idempotency-Key gives the key back once the database returns: the retry is not refused as still running", async () => {
    const { relay, server } = await serveThroughRelay();
    const create = () =>
      fetch(`${server.url}/public/v1/contacts`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json", "idempotency-key": "cut-mid-create" },
        body: JSON.stringify({ email: "midway@example.com", first_name: "Mid" }),
      });
    // The create reserves its key, then waits on a lock the test holds; the database goes away under it.
    const refused = await admin.begin(async (tx) => {
      await tx`LOCK TABLE contacts IN ACCESS EXCLUSIVE MODE`;
      const pending = create();
      const waiting = async () => (await tx`SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND relation = 'contacts'::regclass`)[0].n > 0;
      await waitUntil(waiting, "the create to wait on the lock", server.proc);
      relay.cut();
      return pending;
    });
    expect({ status: refused.status, body: await refused.json() }).toEqual({ status: 503, body: UNAVAILABLE });
    expect(await admin`SELECT status FROM idempotency_keys WHERE idem_key = 'cut-mid-create'`).toEqual([{ status: 0 }]);

    relay.mend();
    const answers: string[] = [];
    await waitUntil(async () => {
      const retry = await create();
      answers.push(`${retry.status} ${retry.status === 201 ? "" : ((await retry.json()) as { type: string }).type}`.trim());
      return retry.status === 201;
    }, "the retry to create the contact", server.proc);
    // Until the key is given back, a retry is told to wait (409 with Retry-After: 1), never anything else.
    expect(answers.filter((answer) => answer !== "201" && answer !== "409 urn:crm:problem:idempotency-key-in-use")).toEqual([]);
    expect(await contactsWithEmail("midway@example.com")).toBe(1);
  });

  test("a database that stops answering fails /readyz within the check's 3 s deadline, not after the 10 s connect timeout", async () => {
    const { relay, server } = await serveThroughRelay();
    expect((await fetch(`${server.url}/readyz`)).status).toBe(200);
    relay.stall();
    const readyz = async () => {
      const response = await fetch(`${server.url}/readyz`);
      // A loopback client, as /metrics answers one, gets the reasons.
      return { status: response.status, reasons: ((await response.json()) as { reasons?: Record<string, string> }).reasons ?? {} };
    };
    // stall() closes the open connections: a check that takes one before the instance has seen it close fails at once; the next ones wait.
    let ready = await readyz();
    if (Object.values(ready.reasons).includes("Connection closed")) ready = await readyz();
    // A check ends at its own 3 s deadline, or sooner when the instance gives up on a statement it
    // sent before the stall (the 5 s answer timeout fails whatever waits then): either way, the
    // answer says the database is silent and comes within the 3 s, not after the 10 s connect timeout.
    const silent = (verdict: string | undefined) => (verdict === "no answer within 3 s" || verdict === "PostgreSQL did not answer within 5 s" ? "silent" : verdict);
    expect({ status: ready.status, database: silent(ready.reasons.database), migrations: silent(ready.reasons.migrations) }).toEqual({
      status: 503,
      database: "silent",
      migrations: "silent",
    });
    relay.mend();
    await waitUntil(async () => (await fetch(`${server.url}/readyz`)).status === 200, "/readyz to be ready again", server.proc);
  });
});

describe("an instance cut off in mid-write", () => {
  test("an instance partitioned from PostgreSQL inside a write holds the write lock only until the server ends its idle transaction (10 s), not until its TCP keepalive gives up (2 h)", async () => {
    // One pooled connection: with more, each of the instance's writes queued for the lock would
    // hold it, once granted, for its own 10 s (the README's bound: pool size x 10 s).
    const { relay, server } = await serveThroughRelay("postgres", { CRM_DATABASE_POOL: "1" });
    // The create takes the write lock, then waits on a table lock the test holds; the network then freezes.
    const write = admin.begin(async (tx) => {
      await tx`LOCK TABLE contacts IN ACCESS EXCLUSIVE MODE`;
      void api(server.url, token, "POST", "/public/v1/contacts", { email: "partitioned@example.com" }).catch(() => {});
      await waitUntil(async () => (await tx`SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND relation = 'contacts'::regclass`)[0].n > 0, "the create to wait on the lock", server.proc);
      relay.freeze();
    });
    await write;
    // The create's transaction now waits for a next statement that cannot arrive. Another
    // instance's write (here the test's own session) waits for the write lock until it ends.
    const other = new SQL({ url: database.url, max: 1 });
    try {
      const waited = await other.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(${WRITE_LOCK}::bigint)`;
        return (await tx`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = ${database.name} AND application_name = 'crm' AND state = 'idle in transaction'`)[0].n;
      });
      expect(waited).toBe(0);
    } finally {
      await other.close();
    }
    expect(await contactsWithEmail("partitioned@example.com")).toBe(0);
    relay.stop();
  }, 60_000);
});

describe("an instance cut off from PostgreSQL (a network partition)", () => {
  /** ANSWER_TIMEOUT is the instances' --database-answer-timeout-seconds here, short so that the tests run fast. */
  const ANSWER_TIMEOUT = { CRM_DATABASE_ANSWER_TIMEOUT_SECONDS: "2" };
  /** ANSWER_BOUND_MS bounds the wait for an answer owed within the 2 s answer timeout (or /readyz's 3 s): a hang guard, not a timing check. */
  const ANSWER_BOUND_MS = 15_000;

  /** send makes one API request with the test's token (`body` as JSON, `key` as Idempotency-Key) and reads its answer, failing if none comes within `boundMs`. */
  async function send(url: string, method: string, path: string, { body, key, boundMs = ANSWER_BOUND_MS }: { body?: unknown; key?: string; boundMs?: number } = {}) {
    const response = await fetch(`${url}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...(key ? { "idempotency-key": key } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(boundMs),
    }).catch((error: unknown) => {
      throw (error as Error).name === "TimeoutError" ? new Error(`${method} ${path}: no answer within ${boundMs / 1000} s`) : error;
    });
    return { status: response.status, retryAfter: response.headers.get("retry-after"), replayed: response.headers.get("idempotent-replayed"), body: await response.json() };
  }

  const refusal = { status: 503, retryAfter: "5", replayed: null, body: UNAVAILABLE };

  /** quiet tells whether none of the instances' sessions is running a statement or holding a transaction open (start-up's jobs are done). */
  const quiet = async () =>
    (await admin`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = ${database.name} AND application_name = 'crm' AND state <> 'idle'`)[0].n === 0;

  test("while its database answers nothing, every request is 503 database-unavailable with Retry-After within the answer timeout and /readyz is 503; once the network is back (its old connections dead for good) it serves and delivers again and the idempotent retry creates the contact once", async () => {
    const { relay, server } = await serveThroughRelay("postgres", { ...ANSWER_TIMEOUT, CRM_DATABASE_POOL: "2", CRM_ALLOW_PRIVATE_TARGETS: "1" });
    const receiver = startReceiver();
    let subscriptionId = "";
    try {
      subscriptionId = (await send(server.url, "POST", "/public/v1/webhook-subscriptions", { body: { target_url: receiver.url, events: ["contact.created"] } })).body.data.id;
      await waitUntil(quiet, "start-up's jobs to finish", server.proc);

      relay.freeze();
      const keyed = (boundMs?: number) => send(server.url, "POST", "/public/v1/contacts", { body: { email: "keyed@example.com" }, key: "partition-1", boundMs });
      const [listed, plain, created, ready] = await Promise.all([
        send(server.url, "GET", "/public/v1/contacts"),
        send(server.url, "POST", "/public/v1/contacts", { body: { email: "plain@example.com" } }),
        keyed(),
        send(server.url, "GET", "/readyz"),
      ]);
      expect({ listed, plain, created }).toEqual({ listed: refusal, plain: refusal, created: refusal });
      expect({ status: ready.status, type: ready.body.type, database: ready.body.checks.database === "ok", migrations: ready.body.checks.migrations === "ok" }).toEqual({
        status: 503,
        type: "urn:crm:problem:not-ready",
        database: false,
        migrations: false,
      });
      const refusals = () => server.logLines().filter((line) => line.msg === "database unavailable: a request was refused" && /did not answer within 2 s/.test(line.error));
      // The first refusal is logged, the others within the minute only counted.
      await waitUntil(() => refusals().length >= 1, "the first refusal logged", server.proc);

      relay.mend({ loseHeld: true });
      await waitUntil(async () => (await send(server.url, "GET", "/public/v1/contacts")).status === 200, "the instance to serve again", server.proc);
      // A write of the instance caught in the partition (a delivery claim) would keep the write lock
      // until the server ends its transaction, 10 s per pooled connection (the README's bound).
      const retried = await keyed(30_000);
      expect(retried.status).toBe(201);
      expect({ keyed: await contactsWithEmail("keyed@example.com"), plain: await contactsWithEmail("plain@example.com") }).toEqual({ keyed: 1, plain: 0 });
      await waitUntil(() => receiver.received.some((r) => JSON.parse(r.body).data.id === retried.body.data.id), "the new contact's webhook to go out", server.proc);
      await waitUntil(async () => (await send(server.url, "GET", "/readyz")).status === 200, "/readyz to be ready again", server.proc);
      expect(server.logLines().filter((line) => line.msg === "unhandled error")).toEqual([]);
    } finally {
      receiver.stop();
      // The webhook test below counts every delivery of the database.
      await admin`DELETE FROM webhook_deliveries WHERE subscription_id = ${subscriptionId}`;
      await admin`DELETE FROM webhook_subscriptions WHERE id = ${subscriptionId}`;
    }
  }, 60_000);

  test("pooled connections idle past --database-idle-timeout-seconds are closed, so none a firewall forgets for being idle longer is ever used: the next reads and writes answer at once", async () => {
    const { relay, server } = await serveThroughRelay("postgres", { ...ANSWER_TIMEOUT, CRM_DATABASE_POOL: "2", CRM_DATABASE_IDLE_TIMEOUT_SECONDS: "1" });
    const [listed, created] = await Promise.all([
      send(server.url, "GET", "/public/v1/contacts"),
      send(server.url, "POST", "/public/v1/contacts", { body: { email: "before-idle@example.com" } }),
    ]);
    expect({ listed: listed.status, created: created.status }).toEqual({ listed: 200, created: 201 });
    // A firewall forgets the connections idle for 2 s: the pool closed its own after 1 s (the
    // listening one and the one its check uses every second are busier).
    await Bun.sleep(2_500);
    relay.forgetIdle(2_000);
    const [listedAgain, createdAgain] = await Promise.all([
      send(server.url, "GET", "/public/v1/contacts"),
      send(server.url, "POST", "/public/v1/contacts", { body: { email: "after-idle@example.com" } }),
    ]);
    expect({ listed: listedAgain.status, created: createdAgain.status }).toEqual({ listed: 200, created: 201 });
    expect(await contactsWithEmail("after-idle@example.com")).toBe(1);
  }, 60_000);

  test("a listening connection that went dead without a word (a firewall forgot it) is found by the instance's check, a notification to itself every --database-idle-timeout-seconds, and replaced by a new one, which then passes its checks", async () => {
    const { relay, server } = await serveThroughRelay("postgres", { ...ANSWER_TIMEOUT, CRM_DATABASE_IDLE_TIMEOUT_SECONDS: "1" });
    const listeners = async (): Promise<{ pid: number; port: number }[]> =>
      (await admin`SELECT pid, client_port AS port FROM pg_stat_activity WHERE datname = ${database.name} AND application_name = 'crm' AND query LIKE 'LISTEN%' ORDER BY pid`).map((row: { pid: number; port: number }) => ({ pid: row.pid, port: row.port }));
    await waitUntil(async () => (await listeners()).length === 1, "the instance to listen", server.proc);
    const [first] = await listeners();
    // Checked every second while it answers, it is kept: three checks pass.
    await Bun.sleep(3_500);
    expect(await listeners()).toEqual([first!]);
    // Only the listening connection is lost; the server keeps its end of it.
    relay.forget(first!.port);
    await waitUntil(async () => (await listeners()).some(({ pid }) => pid !== first!.pid), "a new listening connection", server.proc);
    const [replacement] = (await listeners()).filter(({ pid }) => pid !== first!.pid);
    await Bun.sleep(3_500);
    expect((await listeners()).filter(({ pid }) => pid !== first!.pid)).toEqual([replacement!]);
    expect(server.logLines().filter((line) => line.msg === "unhandled error")).toEqual([]);
  }, 60_000);

  test("a listening connection lost while the server refuses new ones (a restart) is subscribed again by the instance, which logs each refused try as JSON: nothing but JSON lines on stdout and stderr, and its checks pass again once it is back", async () => {
    const { relay, server } = await serveThroughRelay("postgres", { ...ANSWER_TIMEOUT, CRM_DATABASE_IDLE_TIMEOUT_SECONDS: "1" });
    const listeners = async (): Promise<number[]> =>
      (await admin`SELECT pid FROM pg_stat_activity WHERE datname = ${database.name} AND application_name = 'crm' AND query LIKE 'LISTEN%' ORDER BY pid`).map((row: { pid: number }) => row.pid);
    await waitUntil(async () => (await listeners()).length === 1, "the instance to listen", server.proc);
    const [first] = await listeners();
    const refusedTries = () => server.logLines().filter((line) => line.msg.startsWith("webhook delivery loop: cannot listen for other instances")).length;
    relay.cut();
    // Bun's own reconnect of a listening client writes a plain-text line for every refused try (console.warn).
    await waitUntil(() => server.output().includes("bun:sql") || refusedTries() >= 2, "tries to listen again, refused", server.proc);
    relay.mend();
    await waitUntil(async () => (await listeners()).some((pid) => pid !== first), "a new listening connection", server.proc);
    const [again] = await listeners();
    // Checked every second, the new connection gets its own notifications: three checks pass, and it is kept.
    await Bun.sleep(3_500);
    expect(await listeners()).toEqual([again!]);
    // `serve` prints its address first, as the README says; every line after it is a JSON object.
    expect(server.output().split("\n").filter((line) => line !== "" && !line.startsWith("{") && !line.startsWith("listening on "))).toEqual([]);
  }, 60_000);

  test("a LISTEN the server never answers (the path stops forwarding as a lost listening connection is replaced) is given up after the answer timeout, logged, and sent again on a new connection", async () => {
    const { relay, server } = await serveThroughRelay("postgres", ANSWER_TIMEOUT);
    const listeners = async (): Promise<number[]> =>
      (await admin`SELECT pid FROM pg_stat_activity WHERE datname = ${database.name} AND application_name = 'crm' AND query LIKE 'LISTEN%' ORDER BY pid`).map((row: { pid: number }) => row.pid);
    await waitUntil(async () => (await listeners()).length === 1, "the instance to listen", server.proc);
    const [first] = await listeners();
    // The server ends the listening connection (a restart of it); the LISTEN on its replacement never arrives.
    relay.stallOn("LISTEN");
    await admin`SELECT pg_terminate_backend(${first!})`;
    const unanswered = () =>
      server.logLines().filter((line) => line.msg === "webhook delivery loop: cannot listen for other instances; polling until it listens again" && line.error === "DatabaseNotAnswering: PostgreSQL did not answer LISTEN within 2 s");
    await waitUntil(() => unanswered().length > 0, "the unanswered LISTEN to be given up", server.proc);
    relay.stallOn(null);
    await waitUntil(async () => (await listeners()).some((pid) => pid !== first), "a new listening connection", server.proc);
    expect(server.logLines().filter((line) => line.msg === "unhandled error")).toEqual([]);
  }, 60_000);

  test("a write waiting for the write lock is not cut off while the server answers (another instance holds the lock for three times the answer timeout), and is 503 once the server stops answering", async () => {
    const { relay, server } = await serveThroughRelay("postgres", ANSWER_TIMEOUT);
    const holdWriteLock = async (whileHeld: () => Promise<void>) => {
      const other = new SQL({ url: database.url, max: 1 });
      try {
        await other.begin(async (tx) => {
          await tx`SELECT pg_advisory_xact_lock(${WRITE_LOCK}::bigint)`;
          await whileHeld();
        });
      } finally {
        await other.close();
      }
    };
    const waitingForLock = async () =>
      (await admin`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)[0].n > 0;

    let patient: Promise<Awaited<ReturnType<typeof send>>> | undefined;
    await holdWriteLock(async () => {
      patient = send(server.url, "POST", "/public/v1/contacts", { body: { email: "patient@example.com" } });
      await waitUntil(waitingForLock, "the create to wait for the write lock", server.proc);
      await Bun.sleep(6000);
    });
    expect((await patient!).status).toBe(201);

    let cutOff: Promise<Awaited<ReturnType<typeof send>>> | undefined;
    await holdWriteLock(async () => {
      cutOff = send(server.url, "POST", "/public/v1/contacts", { body: { email: "cut-off@example.com" } });
      await waitUntil(waitingForLock, "the create to wait for the write lock", server.proc);
      relay.freeze();
      expect(await cutOff).toEqual(refusal);
    });
    relay.mend();
    expect({ patient: await contactsWithEmail("patient@example.com"), cutOff: await contactsWithEmail("cut-off@example.com") }).toEqual({ patient: 1, cutOff: 0 });
  }, 60_000);

  test("a request without a body that waits longer than the idle timeout (a DELETE behind another instance's write lock) still gets its answer on its connection, which then closes once idle", async () => {
    // Bun's idle timer (1 s here, checked every 4 s) also ran while the handler of a request
    // without a body worked: the connection closed at 1 to 5 s without an answer, after the commit.
    const { server } = await serveThroughRelay("postgres", { ...ANSWER_TIMEOUT, CRM_IDLE_TIMEOUT_SECONDS: "1" });
    const created = await send(server.url, "POST", "/public/v1/contacts", { body: { email: "outwaited@example.com" } });
    const waitingForLock = async () =>
      (await admin`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)[0].n > 0;
    const client = new Connection(Number(new URL(server.url).port));
    let answer: Promise<RawResponse> | undefined;
    const other = new SQL({ url: database.url, max: 1 });
    try {
      await other.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(${WRITE_LOCK}::bigint)`;
        answer = client.request("DELETE", `/public/v1/contacts/${created.body.data.id}`, { authorization: `Bearer ${token}` });
        await waitUntil(waitingForLock, "the delete to wait for the write lock", server.proc);
        await Bun.sleep(6000);
      });
    } finally {
      await other.close();
    }
    const deleted = await answer!.then(
      (res) => res.status,
      (error: Error) => `no answer: ${error.message}`,
    );
    expect({ deleted, left: await contactsWithEmail("outwaited@example.com") }).toEqual({ deleted: 204, left: 0 });
    expect(await closedWithin(client, 10_000)).toBe(true);
  }, 60_000);

  test("a create whose COMMIT goes unanswered is 503; the server committed it, and its retry with the same Idempotency-Key once the network is back replays it instead of creating a second contact", async () => {
    // A deferred trigger makes the COMMIT take a second, so that the network can fail while the server commits.
    await admin.unsafe(`CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(1); RETURN NULL; END $$`);
    await admin.unsafe(`CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON contacts DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()`);
    try {
      const { relay, server } = await serveThroughRelay("postgres", ANSWER_TIMEOUT);
      const create = () => send(server.url, "POST", "/public/v1/contacts", { body: { email: "late-commit@example.com" }, key: "late-commit" });
      const pending = create();
      // The create's COMMIT sleeps in the trigger (other COMMITs, of the delivery loop's claims, do not).
      const committing = async () =>
        (await admin`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = ${database.name} AND application_name = 'crm' AND query = 'COMMIT' AND wait_event = 'PgSleep'`)[0].n > 0;
      await waitUntil(committing, "the create's COMMIT to run", server.proc);
      relay.freeze();
      expect(await pending).toEqual(refusal);
      expect(await contactsWithEmail("late-commit@example.com")).toBe(1);

      relay.mend();
      const retried = await create();
      expect({ status: retried.status, replayed: retried.replayed }).toEqual({ status: 201, replayed: "true" });
      expect(await contactsWithEmail("late-commit@example.com")).toBe(1);
    } finally {
      await admin.unsafe("DROP TRIGGER slow_commit ON contacts; DROP FUNCTION slow_commit()");
    }
  }, 60_000);
});

describe("webhooks across an outage", () => {
  test("an attempt whose outcome could not be recorded while PostgreSQL was down is sent again once it is back, then recorded; new events go out as before", async () => {
    const { relay, server } = await serveThroughRelay("postgres", { CRM_ALLOW_PRIVATE_TARGETS: "1", CRM_DELIVERY_TIMEOUT_MS: "1000", CRM_RETRY_SCHEDULE: "1,1,1" });
    const receiver = startReceiver();
    try {
      expect((await api(server.url, token, "POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] })).status).toBe(201);
      const sentFor = (contactId: string) => receiver.received.filter((r) => JSON.parse(r.body).data.id === contactId);
      // The receiver holds the attempt open while the database goes away: its 200 cannot be recorded.
      receiver.hold();
      const held = (await api(server.url, token, "POST", "/public/v1/contacts", { email: "held@example.com" })).body.data.id as string;
      await waitUntil(() => sentFor(held).length === 1, "the attempt to reach the receiver", server.proc);
      relay.cut();
      receiver.release();
      await waitUntil(() => server.logLines().some((line) => line.msg === "webhook delivery attempt could not be recorded"), "the lost outcome logged", server.proc);

      relay.mend();
      const after = (await api(server.url, token, "POST", "/public/v1/contacts", { email: "after@example.com" })).body.data.id as string;
      const deliveries = async () => (await api(server.url, token, "GET", "/public/v1/webhook-deliveries?per_page=100")).body.data as { status: string; attempts: number; event_id: string }[];
      await waitUntil(async () => (await deliveries()).every((d) => d.status === "succeeded"), "both deliveries to succeed", server.proc);
      // At least once: the held event went out again after its lease ran out, and that attempt is the one recorded.
      expect({ held: sentFor(held).length, after: sentFor(after).length }).toEqual({ held: 2, after: 1 });
      expect((await deliveries()).map((d) => d.attempts)).toEqual([1, 1]);
      expect(server.logLines().filter((line) => line.msg === "unhandled error")).toEqual([]);
    } finally {
      receiver.stop();
    }
  });
});

describe("database refusing work", () => {
  test("connections PostgreSQL drops (a restart) are never a 500: each request is 200 or 503, and the service reconnects", async () => {
    const { server } = await serveThroughRelay();
    expect(new Set(await answers(server.url, 8, "GET", "/public/v1/contacts"))).toEqual(new Set(["200"]));
    for (let round = 0; round < 5; round++) {
      await dropConnections();
      const statuses = await answers(server.url, 8, "GET", "/public/v1/contacts");
      expect(statuses.filter((s) => s !== "200" && s !== `503 ${UNAVAILABLE.type}`)).toEqual([]);
    }
    await waitUntil(async () => (await answers(server.url, 8, "GET", "/public/v1/contacts")).every((s) => s === "200"), "every request to succeed again", server.proc);
    expect(server.logLines().filter((line) => line.msg === "unhandled error")).toEqual([]);
  });

  test("a database turned read-only (a failover to a standby) answers writes 503 and keeps serving reads", async () => {
    const { server } = await serveThroughRelay();
    await admin.unsafe(`ALTER DATABASE "${database.name}" SET default_transaction_read_only = on`);
    await dropConnections();
    // Connections opened from now on are read-only; the ones just dropped may answer 503 once each.
    await waitUntil(async () => (await answers(server.url, 4, "GET", "/public/v1/contacts")).every((s) => s === "200"), "reads on fresh connections", server.proc);
    const refused = await api(server.url, token, "POST", "/public/v1/contacts", { email: "standby@example.com" });
    expect({ status: refused.status, body: refused.body }).toEqual({ status: 503, body: UNAVAILABLE });
    await waitUntil(
      () => server.logLines().some((line) => line.level === "error" && line.msg === "database unavailable: a request was refused" && /read-only transaction/.test(line.error)),
      "the refusal logged",
      server.proc,
    );
    expect(await contactsWithEmail("standby@example.com")).toBe(0);
  });

  test("on a database turned read-only, a token and a console session whose last use is due still read: the uses that could not be recorded are logged, not refused", async () => {
    // A token this server never saw and a session last seen 2 minutes ago: both are due to be recorded.
    const fresh = runCli([...SOURCE, "token", "create", "--name", "read-only reader"], { env: { PATH: process.env.PATH ?? "", CRM_DATABASE_URL: database.url, CRM_SECRETS_KEY_FILE: keyFile } }).stdout.trim();
    const secret = randomBytes(24).toString("base64url");
    const seen = Date.now() - 120_000;
    await admin`INSERT INTO operators (id, email, password_hash, created_at, updated_at) VALUES ('op_readonly', 'readonly@example.com', 'unused', ${seen}, ${seen})`;
    await admin`INSERT INTO operator_sessions (id_hash, operator_id, created_at, last_seen_at) VALUES (${Bun.SHA256.hash(secret) as Uint8Array}, 'op_readonly', ${seen}, ${seen})`;
    const { server } = await serveThroughRelay();
    // The test's usual token is used first, so its last use is recorded and not due again.
    expect((await api(server.url, token, "GET", "/public/v1/contacts")).status).toBe(200);
    await admin.unsafe(`ALTER DATABASE "${database.name}" SET default_transaction_read_only = on`);
    await dropConnections();
    // Connections opened from now on are read-only; the ones just dropped may answer 503 once each.
    await waitUntil(async () => (await answers(server.url, 4, "GET", "/public/v1/contacts")).every((s) => s === "200"), "reads on fresh connections", server.proc);
    const read = await api(server.url, fresh, "GET", "/public/v1/contacts?per_page=1");
    const page = await fetch(`${server.url}/console/`, { headers: { cookie: `crm_console_session=${secret}` }, redirect: "manual" });
    expect({ read: read.status, page: page.status, signedIn: (await page.text()).includes("readonly@example.com") }).toEqual({ read: 200, page: 200, signedIn: true });
    const refusedWrites = () => server.logLines().filter((line) => line.level === "warn" && /read-only transaction/.test(line.error));
    await waitUntil(() => refusedWrites().length >= 2, "both refused writes logged", server.proc);
    expect(refusedWrites().map((line) => line.msg).sort()).toEqual([
      "a console session's visit could not be recorded; the request goes on",
      "a token's last use could not be recorded; the request goes on",
    ]);
  });

  test("a statement the database cancels (the operator's statement_timeout) answers 503", async () => {
    const { server } = await serveThroughRelay();
    await admin.unsafe(`ALTER DATABASE "${database.name}" SET statement_timeout = 200`);
    await dropConnections();
    await waitUntil(async () => (await answers(server.url, 4, "GET", "/public/v1/contacts")).every((s) => s === "200"), "reads on fresh connections", server.proc);
    // A lock held elsewhere keeps the list waiting past the timeout, and PostgreSQL cancels it.
    const statuses = await admin.begin(async (tx) => {
      await tx`LOCK TABLE contacts IN ACCESS EXCLUSIVE MODE`;
      return answers(server.url, 2, "GET", "/public/v1/contacts");
    });
    expect(statuses).toEqual([`503 ${UNAVAILABLE.type}`, `503 ${UNAVAILABLE.type}`]);
    const cancelled = () => server.logLines().filter((line) => line.msg === "database unavailable: a request was refused" && /statement timeout/.test(line.error));
    // Every request meets the cancellations while they go on: the first is logged, the second within the minute only counted (the stop writes every line).
    await waitUntil(() => cancelled().length >= 1, "the first cancellation logged", server.proc);
    expect((await server.stopWith("SIGTERM")).exitCode).toBe(0);
    expect(cancelled().length).toBe(1);
  });

  test("a table another session holds locked (ALTER TABLE, VACUUM FULL) answers the writes that need it 503 database-busy with Retry-After after the lock timeout (the answer timeout), while writes to other tables commit meanwhile, and one warn line names the session holding it", async () => {
    const { server } = await serveThroughRelay("postgres", { CRM_DATABASE_ANSWER_TIMEOUT_SECONDS: "2", CRM_DATABASE_POOL: "2" });
    expect((await api(server.url, token, "GET", "/public/v1/contacts")).status).toBe(200);
    const send = (method: string, path: string, body?: unknown) => boundedAnswer(server.url, method, path, body);
    const locker = new SQL({ url: database.url, max: 1 });
    try {
      const { answers, holder } = await locker.begin(async (tx) => {
        await tx`LOCK TABLE contacts IN ACCESS EXCLUSIVE MODE`;
        const [{ pid }] = await tx`SELECT pg_backend_pid() AS pid`;
        // Creates queued behind the first, which holds the instance's write group.
        const contacts = [1, 2, 3, 4].map((i) => send("POST", "/public/v1/contacts", { email: `locked-${i}@example.com` }));
        const accounts = [1, 2].map((i) => send("POST", "/public/v1/accounts", { name: `Unlocked ${i}` }));
        return { answers: { contacts: await Promise.all(contacts), accounts: await Promise.all(accounts) }, holder: pid as number };
      });
      const busy = "503 urn:crm:problem:database-busy 5";
      expect(answers).toEqual({ contacts: [busy, busy, busy, busy], accounts: ["201", "201"] });
      expect(await lockLinesSeen(server, "the lock logged")).toEqual([
        {
          level: "warn",
          msg: "a lock another PostgreSQL session holds outlasted the lock timeout (--database-answer-timeout-seconds): requests that need it are refused (503 database-busy) while it is held",
          lock_timeout_ms: 2000,
          holders: [`${holder} contacts AccessExclusiveLock`],
        },
      ]);
      expect((await api(server.url, token, "POST", "/public/v1/contacts", { email: "after-lock@example.com" })).status).toBe(201);
    } finally {
      await locker.close();
    }
  }, 60_000);

  test("a list, a lookup and a console page that need a table another session holds in ACCESS EXCLUSIVE mode (ALTER TABLE, VACUUM FULL, LOCK TABLE) are 503 (database-busy, the console's page) with Retry-After after the lock timeout, not held for as long as the lock, one warn line names the session holding it, and all answer again once it is released", async () => {
    const { server } = await serveThroughRelay("postgres", { CRM_DATABASE_ANSWER_TIMEOUT_SECONDS: "2", CRM_DATABASE_POOL: "2" });
    const created = await api(server.url, token, "POST", "/public/v1/contacts", { email: "read-under-lock@example.com" });
    expect(created.status).toBe(201);
    const secret = "a-console-session-secret-of-the-read-under-lock-test";
    await admin`INSERT INTO operators (id, email, password_hash, created_at, updated_at) VALUES ('op_read_lock', 'read-lock@example.com', 'unused', ${Date.now()}, ${Date.now()})`;
    await admin`INSERT INTO operator_sessions (id_hash, operator_id, created_at, last_seen_at) VALUES (${sha256(secret)}, 'op_read_lock', ${Date.now()}, ${Date.now()})`;
    const paths = { list: "/public/v1/contacts", lookup: `/public/v1/contacts/${created.body.data.id}` };
    const read = (path: string) => boundedAnswer(server.url, "GET", path);
    const page = () => boundedAnswer(server.url, "GET", `/console/contacts/${created.body.data.id}`, undefined, { cookie: `${SESSION_COOKIE}=${secret}` });
    const locker = new SQL({ url: database.url, max: 1 });
    try {
      const { answers, holder } = await locker.begin(async (tx) => {
        await tx`LOCK TABLE contacts IN ACCESS EXCLUSIVE MODE`;
        const [{ pid }] = await tx`SELECT pg_backend_pid() AS pid`;
        // Three of each on a pool of 2: reads held for the lock would also hold every connection.
        const [list, lookup] = await Promise.all([paths.list, paths.lookup].map((path) => Promise.all([1, 2, 3].map(() => read(path)))));
        return { answers: { list, lookup, page: await page() }, holder: pid as number };
      });
      const busy = "503 urn:crm:problem:database-busy 5";
      expect(answers).toEqual({ list: [busy, busy, busy], lookup: [busy, busy, busy], page: "503 text/html; charset=utf-8 5" });
      expect(await lockLinesSeen(server, "the lock logged")).toEqual([
        {
          level: "warn",
          msg: "a lock another PostgreSQL session holds outlasted the lock timeout (--database-answer-timeout-seconds): requests that need it are refused (503 database-busy) while it is held",
          lock_timeout_ms: 2000,
          holders: [`${holder} contacts AccessExclusiveLock`],
        },
      ]);
      expect({ list: await read(paths.list), lookup: await read(paths.lookup), page: await page() }).toEqual({ list: "200", lookup: "200", page: "200" });
    } finally {
      await locker.close();
    }
  }, 60_000);

  // With a pool of 1 the write's own transaction holds the only connection: the blocking sessions
  // are read on a connection apart, or not before the wait has ended, when nothing blocks any more.
  for (const pool of ["4", "1"]) {
    test(`a write that meets a row another session holds (psql's SELECT ... FOR UPDATE, an open transaction that changed it) is 503 database-busy after the lock timeout, and the warn line names the blocking session (a pool of ${pool})`, async () => {
      const { server } = await serveThroughRelay("postgres", { CRM_DATABASE_ANSWER_TIMEOUT_SECONDS: "2", CRM_DATABASE_POOL: pool });
      const created = await api(server.url, token, "POST", "/public/v1/contacts", { email: `row-held-${pool}@example.com` });
      expect(created.status).toBe(201);
      const locker = new SQL({ url: database.url, max: 1, connection: { application_name: "psql" } });
      const holding = `SELECT id FROM contacts WHERE email = 'row-held-${pool}@example.com' FOR UPDATE`;
      try {
        const { patched, holder } = await locker.begin(async (tx) => {
          const [{ pid }] = await tx.unsafe("SELECT pg_backend_pid() AS pid");
          await tx.unsafe(holding);
          const response = await fetch(`${server.url}/public/v1/contacts/${created.body.data.id}`, {
            method: "PATCH",
            headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
            body: JSON.stringify({ first_name: "Held" }),
            signal: AbortSignal.timeout(15_000),
          });
          return { patched: `${response.status} ${((await response.json()) as { type?: string }).type} ${response.headers.get("retry-after")}`, holder: pid as number };
        });
        expect(patched).toBe("503 urn:crm:problem:database-busy 5");
        const lockLines = () => server.logLines().filter((line) => line.level !== "info");
        await waitUntil(() => lockLines().length > 0, "the lock logged", server.proc);
        expect(lockLines()).toEqual([
          {
            time: expect.any(String),
            level: "warn",
            msg: "a lock another PostgreSQL session holds outlasted the lock timeout (--database-answer-timeout-seconds): requests that need it are refused (503 database-busy) while it is held",
            lock_timeout_ms: 2000,
            holders: [],
            blocking_sessions: [
              { pid: holder, role: "postgres", application: "psql", client: "127.0.0.1", state: "idle in transaction", query_start: expect.any(String), transaction_seconds: expect.any(Number) },
            ],
          },
        ]);
      } finally {
        await locker.close();
      }
    }, 60_000);
  }

  test("a token whose last use is due while another session holds the tokens table locked (LOCK TABLE api_tokens IN EXCLUSIVE MODE, which lets reads through) is served without waiting for the lock: its last use is left for a later one, and one warn line a minute names the session holding it", async () => {
    const fresh = [1, 2].map((i) => runCli([...SOURCE, "token", "create", "--name", `bookkeeping ${i}`], { env: { PATH: process.env.PATH ?? "", CRM_DATABASE_URL: database.url, CRM_SECRETS_KEY_FILE: keyFile } }).stdout.trim());
    const { server } = await serveThroughRelay("postgres", { CRM_DATABASE_ANSWER_TIMEOUT_SECONDS: "2" });
    const locker = new SQL({ url: database.url, max: 1 });
    try {
      const { statuses, holder } = await locker.begin(async (tx) => {
        const [{ pid }] = await tx.unsafe("SELECT pg_backend_pid() AS pid");
        await tx.unsafe("LOCK TABLE api_tokens IN EXCLUSIVE MODE");
        const statuses: (number | string)[] = [];
        for (const bearer of fresh) {
          const response = await fetch(`${server.url}/public/v1/contacts?per_page=1`, { headers: { authorization: `Bearer ${bearer}` }, signal: AbortSignal.timeout(10_000) }).catch(
            (error: unknown) => ({ status: `no answer (${(error as Error).name})` }),
          );
          statuses.push(response.status);
        }
        return { statuses, holder: pid as number };
      });
      expect(statuses).toEqual([200, 200]);
      expect(await admin`SELECT name, last_used_at FROM api_tokens WHERE name LIKE 'bookkeeping %' ORDER BY name`).toEqual([
        { name: "bookkeeping 1", last_used_at: null },
        { name: "bookkeeping 2", last_used_at: null },
      ]);
      expect(await lockLinesSeen(server, "the skipped bookkeeping logged")).toEqual([
        {
          level: "warn",
          msg: "a lock another PostgreSQL session holds kept a token's last use or a console session's visit from being recorded (bookkeeping, given up after lock_timeout_ms): it is recorded at a later use",
          lock_timeout_ms: 50,
          holders: [`${holder} api_tokens ExclusiveLock`],
        },
      ]);
    } finally {
      await locker.close();
    }
  }, 60_000);

  test("a role out of connections (its CONNECTION LIMIT reached) answers 503 until one is free", async () => {
    const role = "outage_app";
    await createRole(role);
    try {
      const { server } = await serveThroughRelay(role);
      expect((await api(server.url, token, "GET", "/public/v1/contacts")).status).toBe(200);
      await admin.unsafe(`ALTER ROLE ${role} CONNECTION LIMIT 0`);
      await dropConnections();
      // The first answers may come from the dropped connections (57P01); every one is a 503 until a new connection is refused for the limit.
      const outOfConnections = () =>
        server.logLines().some((line) => line.msg === "database unavailable: a request was refused" && line.error === `PostgresError: too many connections for role "${role}"`);
      await waitUntil(async () => {
        expect(await answers(server.url, 4, "GET", "/public/v1/contacts")).toEqual(Array(4).fill(`503 ${UNAVAILABLE.type}`));
        return outOfConnections();
      }, "a connection refused for the role's limit", server.proc);
      await admin.unsafe(`ALTER ROLE ${role} CONNECTION LIMIT -1`);
      await waitUntil(async () => (await api(server.url, token, "GET", "/public/v1/contacts")).status === 200, "a connection again", server.proc);
      expect(server.logLines().filter((line) => line.msg === "unhandled error")).toEqual([]);
    } finally {
      await dropRole(role);
    }
  });

  test("a login the server refuses (the role's password changed, its LOGIN revoked, pg_hba.conf) is 503 database-unavailable with Retry-After, logged once naming the cause rather than a stack per request; once the role may log in again the service serves by itself", async () => {
    const role = "outage_login";
    await createRole(role);
    try {
      const { server } = await serveThroughRelay(role);
      expect((await api(server.url, token, "GET", "/public/v1/contacts")).status).toBe(200);
      // The operator rotates the role's credentials before the service's: new connections are refused (28000; a changed password is 28P01).
      await admin.unsafe(`ALTER ROLE ${role} NOLOGIN`);
      await dropConnections();
      expect(await refusalsSeen(server, token, 4)).toEqual(Array(4).fill(`503 ${UNAVAILABLE.type} 5`));
      // The dropped connections' own refusals (57P01) are logged per request, as ever; the login's once.
      const lines = server.logLines().filter((line) => line.request_id && line.level === "error" && !/terminating connection/.test(line.error));
      expect(lines.map((line) => [line.msg, line.error])).toEqual([
        [
          "the PostgreSQL server refuses the service's login (its password changed, its LOGIN revoked, or pg_hba.conf): requests are refused (503 database-unavailable) until it accepts it; update the database URL (--database-url, CRM_DATABASE_URL) to the role's new password, or give the role its login back",
          `PostgresError: role "${role}" is not permitted to log in`,
        ],
      ]);
      await admin.unsafe(`ALTER ROLE ${role} LOGIN`);
      await waitUntil(async () => (await api(server.url, token, "GET", "/public/v1/contacts")).status === 200, "a login again", server.proc);
    } finally {
      await dropRole(role);
    }
  });

  test("a database dropped under the service (3D000) is 503 database-unavailable with Retry-After, logged once naming the cause", async () => {
    const doomed = await createTestDatabase();
    const doomedToken = createTokenOn(doomed);
    const { server } = await serveThroughRelay("postgres", {}, doomed);
    expect((await api(server.url, doomedToken, "GET", "/public/v1/contacts")).status).toBe(200);
    await doomed.drop();
    expect(await refusalsSeen(server, doomedToken, 4)).toEqual(Array(4).fill(`503 ${UNAVAILABLE.type} 5`));
    // The background jobs log their own failures, once each.
    const lines = server.logLines().filter((line) => line.request_id && line.level === "error" && !/terminating connection/.test(line.error));
    expect(lines.map((line) => [line.msg, line.error])).toEqual([
      [
        "the PostgreSQL database that the database URL (--database-url, CRM_DATABASE_URL) names does not exist (dropped or renamed): requests are refused (503 database-unavailable) until it is back; restore it, or point the database URL at it",
        `PostgresError: database "${doomed.name}" does not exist`,
      ],
    ]);
  });

  test("a database made again empty under the service (its tables missing, 42P01) is 503 database-unavailable, logged once naming the database and schema, and /readyz says so; the instance makes no tables, and serves what `crm migrate` (or a restore) puts there", async () => {
    const doomed = await createTestDatabase();
    const doomedToken = createTokenOn(doomed);
    const { server } = await serveThroughRelay("postgres", {}, doomed);
    expect((await api(server.url, doomedToken, "GET", "/public/v1/contacts")).status).toBe(200);
    await doomed.drop();
    await admin.unsafe(`CREATE DATABASE "${doomed.name}"`);
    const missing = `the service's tables are missing from database "${doomed.name}", schema "public": was the database recreated? run crm migrate, or restore a backup`;
    // The refusals of the database gone (3D000) come first, then those of its tables.
    const seen: string[] = [];
    await waitUntil(async () => {
      const res = await api(server.url, doomedToken, "GET", "/public/v1/contacts");
      seen.push(`${res.status} ${res.body?.type} ${res.headers.get("retry-after")}`);
      return server.logLines().some((line) => /relation "\w+" does not exist/.test(line.error));
    }, "a request to meet the missing tables", server.proc);
    expect(new Set(seen)).toEqual(new Set([`503 ${UNAVAILABLE.type} 5`]));
    const ready = await fetch(`${server.url}/readyz`);
    const readiness = await ready.json();
    expect({ status: ready.status, migrations: readiness.checks.migrations, reason: readiness.reasons.migrations }).toEqual({ status: 503, migrations: "tables-missing", reason: missing });
    expect(await refusalsSeen(server, doomedToken, 3)).toEqual(Array(3).fill(`503 ${UNAVAILABLE.type} 5`));
    const lines = server.logLines().filter((line) => line.request_id && line.level === "error" && !/terminating connection|does not exist \(dropped/.test(`${line.error} ${line.msg}`));
    expect(lines.map((line) => line.msg)).toEqual([`${missing}; requests are refused (503 database-unavailable) until then`]);
    expect(lines[0]?.error).toMatch(/^PostgresError: relation "\w+" does not exist$/);
    // Nothing was made meanwhile; once migrated, the instance serves the new database by itself.
    const remade = new SQL({ url: doomed.url, max: 1 });
    const [tables] = await remade`SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'`;
    await remade.close();
    expect(tables?.n).toBe(0);
    const newToken = createTokenOn(doomed);
    await waitUntil(async () => (await api(server.url, newToken, "GET", "/public/v1/contacts")).status === 200, "serving the migrated database", server.proc);
    await server.stopWith("SIGTERM");
    await doomed.drop();
  });
});
