import { SQL, type TransactionSQL } from "bun";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, readdirSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import { api, ROOT, runCli, SOURCE, spawnServer, startReceiver, tempDir, waitUntil, type ServerProcess } from "../ops/support.ts";
import { busiestSecond, LOOPBACK_SLACK_MS } from "../support/pacing.ts";
import { PayloadCheck } from "../support/webhook-payloads.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { ConsoleClient, OPERATOR } from "../console/support.ts";
import { PACED_AFTER } from "../../server/operators/service.ts";
import { MAX_PER_SUBSCRIPTION } from "../../server/webhooks/worker.ts";
import { WRITE_LOCK } from "../../server/db/postgres.ts";
import { settlesWithin } from "../../server/shared/time.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";

// Several instances of the real server (`bun server/main.ts serve --database-url ...`) on one
// PostgreSQL database (issue 12, items 5 and 6): delivery work shared without two live instances
// sending the same attempt, a SIGKILLed instance's leases taken over, and idempotency keys that
// hold across instances.

const CONTACTS = 3000;
/** CLIENTS is how many API requests the test keeps open at once, spread over the live instances. */
const CLIENTS = 24;
/** The lease is the request timeout plus 2 s: a killed instance's attempts are sent again 3 s after the kill. */
const DELIVERY_TIMEOUT_MS = "1000";

let database: TestDatabase;
let env: Record<string, string>;
let token: string;
let admin: SQL;

beforeAll(async () => {
  database = await createTestDatabase();
  const dir = tempDir("instances");
  const keyFile = writeSecretsKeyFile(join(dir, "secrets.key"));
  env = {
    PATH: process.env.PATH ?? "",
    CRM_DATABASE_URL: database.url,
    CRM_SECRETS_KEY_FILE: keyFile,
    CRM_ALLOW_PRIVATE_TARGETS: "1",
    CRM_DELIVERY_TIMEOUT_MS: DELIVERY_TIMEOUT_MS,
    CRM_RETRY_SCHEDULE: "1,1,1",
    // Rate-limit buckets are per instance; the test's one token writes as fast as it can.
    CRM_RATE_WRITE_PER_SECOND: "100000",
    CRM_RATE_WRITE_BURST: "100000",
    CRM_RATE_READ_PER_SECOND: "100000",
    CRM_RATE_READ_BURST: "100000",
  };
  const created = runCli([...SOURCE, "token", "create", "--name", "instances"], { env });
  if (created.exitCode !== 0) throw new Error(`token create failed: ${created.stderr}`);
  token = created.stdout.trim();
  admin = new SQL({ url: database.url, max: 1 });
}, 60_000);

afterAll(async () => {
  await admin?.close();
  await database?.drop();
});

/** serve starts one instance on the shared database. */
function serve(): Promise<ServerProcess> {
  return spawnServer([...SOURCE, "serve", "--port", "0", "--log-level", "warn", "--shutdown-timeout-ms", "300"], { env });
}

/**
 * inAnotherSession runs `work` inside a transaction of a session of its own, after `take` (a lock,
 * a changed row, as another instance's write would hold them), then commits it. Not an array from
 * `work`: Bun's begin would await its items first.
 */
async function inAnotherSession<T extends object>(take: (tx: TransactionSQL) => Promise<unknown>, work: () => Promise<T>): Promise<T> {
  const holder = new SQL({ url: database.url, max: 1 });
  try {
    return await holder.begin(async (tx) => {
      await take(tx);
      return work();
    }) as T;
  } finally {
    await holder.close();
  }
}

/** holdingTheWriteLock runs `work` while a session of its own holds the service's write lock, then lets go. */
function holdingTheWriteLock<T extends object>(work: () => Promise<T>): Promise<T> {
  return inAnotherSession((tx) => tx`SELECT pg_advisory_xact_lock(${WRITE_LOCK}::bigint)`, work);
}

/** writesWaiting reads an instance's `crm_database_writes_waiting`: its writes not committed yet, queued or in the group waiting for the write lock. */
async function writesWaiting(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith("crm_database_writes_waiting "));
  if (!line) throw new Error(`no crm_database_writes_waiting in ${url}/metrics`);
  return Number(line.split(" ")[1]);
}

/** waitingOnARow counts the sessions waiting for a lock another transaction holds on a row (a row it changed). */
async function waitingOnARow(): Promise<number> {
  return (await admin`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted`)[0].n;
}

/** Receipt is one request a receiver got: which delivery, which contact, the sender's TCP port, and when it was open. */
interface Receipt {
  webhookId: string;
  contactId: string;
  port: number;
  start: number;
  end: number;
}

/**
 * slowReceiver records every request and answers 200 after `delayMs` (a slow receiver); stop()
 * fails on a body off the event catalogue. `open` holds the requests received whole and not
 * answered yet: the sender's TCP port and when the request arrived.
 */
function slowReceiver(delayMs: number) {
  const receipts: Receipt[] = [];
  const open = new Map<Request, { port: number; start: number }>();
  const payloads = new PayloadCheck();
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 0,
    async fetch(request, server) {
      const start = performance.timeOrigin + performance.now();
      const port = server.requestIP(request)?.port ?? 0;
      const body = await request.text();
      // Open once the whole request is in: one whose sender was killed before its body followed the
      // head was never sent, and would be recorded by no one.
      open.set(request, { port, start });
      try {
        payloads.check(body);
        await Bun.sleep(delayMs);
        receipts.push({ webhookId: request.headers.get("webhook-id") ?? "", contactId: JSON.parse(body).data.id, port, start, end: performance.timeOrigin + performance.now() });
        return new Response("ok");
      } finally {
        open.delete(request);
      }
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}/hook`,
    receipts,
    /** openFrom tells whether a request from one of these TCP ports arrived less than `withinMs` ago and is not answered yet. */
    openFrom(ports: Set<number>, withinMs: number): boolean {
      const now = performance.timeOrigin + performance.now();
      return [...open.values()].some((r) => ports.has(r.port) && now - r.start < withinMs);
    },
    async stop() {
      await server.stop(true);
      payloads.assertValid();
    },
  };
}

/** allDeliveries reads every delivery of a subscription through the API, page by page with the cursor. */
async function allDeliveries(server: ServerProcess, subscriptionId: string): Promise<{ id: string; status: string; attempts: number }[]> {
  const rows: { id: string; status: string; attempts: number }[] = [];
  let cursor: string | null = null;
  do {
    const res = await api(server.url, token, "GET", `/public/v1/webhook-deliveries?subscription_id=${subscriptionId}&per_page=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
    expect(res.status).toBe(200);
    rows.push(...res.body.data);
    cursor = res.body.meta.next_cursor;
  } while (cursor);
  return rows;
}

/** mostAtOnce is the most requests the receiver had open at one moment. */
function mostAtOnce(receipts: Receipt[]): number {
  const edges = receipts.flatMap((r) => [{ at: r.start, step: 1 }, { at: r.end, step: -1 }]).sort((a, b) => a.at - b.at || a.step - b.step);
  let open = 0;
  let most = 0;
  for (const edge of edges) most = Math.max(most, (open += edge.step));
  return most;
}

/**
 * tcpPortsOf lists the local ports of a process's TCP sockets connected to `remotePorts` (Linux: its
 * socket inodes, found in /proc/net/tcp and tcp6). Only those: a local port number is unique per
 * destination, so one of its database connections may share a number with another instance's
 * connection to the receiver.
 */
function tcpPortsOf(pid: number, remotePorts: Set<number>): Set<number> {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const socket = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (socket) inodes.add(socket[1]!);
    } catch {
      // closed between the listing and the read
    }
  }
  const ports = new Set<number>();
  for (const table of ["tcp", "tcp6"]) {
    for (const line of readFileSync(`/proc/${pid}/net/${table}`, "utf8").split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/);
      if (fields.length > 9 && inodes.has(fields[9]!) && remotePorts.has(Number.parseInt(fields[2]!.split(":")[1]!, 16))) ports.add(Number.parseInt(fields[1]!.split(":")[1]!, 16));
    }
  }
  return ports;
}

describe("three instances on one PostgreSQL database", () => {
  test(`${CONTACTS} contacts created through all three, one SIGKILLed mid-way and restarted: every event reaches both slow receivers, no delivery is attempted twice at once, the history equals what they saw`, async () => {
    // The slower receiver takes 150 ms an answer, so its backlog keeps every instance at its cap.
    const receivers = [slowReceiver(20), slowReceiver(150)];
    const instances = await Promise.all([serve(), serve(), serve()]);
    const live = new Set(instances);
    const inFlightRequests = new Map<ServerProcess, number>(instances.map((i) => [i, 0]));
    try {
      const subscriptions: string[] = [];
      for (const receiver of receivers) {
        const res = await api(instances[0]!.url, token, "POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] });
        expect(res.status).toBe(201);
        subscriptions.push(res.body.data.id);
      }

      // A load balancer's view: requests go round-robin to the live instances; the one to be
      // killed is taken out of rotation first, so no API request is lost with it (its delivery
      // attempts are: that is what is tested).
      const created: string[] = [];
      let next = 0;
      let turn = 0;
      let killedAt = 0;
      let victimPorts = new Set<number>();
      const portOf = (receiver: (typeof receivers)[number]) => Number(new URL(receiver.url).port);
      const slowPortsOf = (instance: ServerProcess) => tcpPortsOf(instance.proc.pid, new Set([portOf(receivers[1]!)]));
      const client = async () => {
        while (next < CONTACTS) {
          const n = next++;
          const pool = [...live];
          const target = pool[turn++ % pool.length]!;
          inFlightRequests.set(target, inFlightRequests.get(target)! + 1);
          try {
            const res = await api(target.url, token, "POST", "/public/v1/contacts", { first_name: `Ada ${n}` });
            expect(res.status).toBe(201);
            created.push(res.body.data.id);
          } finally {
            inFlightRequests.set(target, inFlightRequests.get(target)! - 1);
          }
        }
      };
      const kill = async () => {
        await waitUntil(() => created.length >= CONTACTS / 3, "a third of the contacts");
        // The victim is an instance with an attempt open at the slow receiver (answered 150 ms after
        // arriving, so never recorded): that delivery must be sent again by another instance. Out of
        // rotation first, so no API request is lost with it; which instance has attempts open changes
        // from moment to moment (out of rotation, it may claim none), so it is picked when it has one.
        let victim: ServerProcess | undefined;
        while (!victim) {
          const candidate = [...live].find((instance) => receivers[1]!.openFrom(slowPortsOf(instance), 50));
          if (!candidate) {
            await Bun.sleep(5);
            continue;
          }
          live.delete(candidate);
          await waitUntil(() => inFlightRequests.get(candidate) === 0, "the victim's API requests to finish");
          if (receivers[1]!.openFrom(slowPortsOf(candidate), 100)) victim = candidate;
          else live.add(candidate);
        }
        victimPorts = tcpPortsOf(victim.proc.pid, new Set(receivers.map(portOf)));
        killedAt = performance.timeOrigin + performance.now();
        victim.proc.kill("SIGKILL");
        await victim.proc.exited;
        const restarted = await serve();
        instances[instances.indexOf(victim)] = restarted;
        live.add(restarted);
        inFlightRequests.set(restarted, 0);
      };
      await Promise.all([...Array.from({ length: CLIENTS }, client), kill()]);
      expect(created.length).toBe(CONTACTS);
      expect(killedAt).toBeGreaterThan(0);

      for (const receiver of receivers) {
        await waitUntil(() => new Set(receiver.receipts.map((r) => r.contactId)).size === CONTACTS, "every contact to reach the receiver");
      }
      for (const [index, receiver] of receivers.entries()) {
        // Every event reached the receiver at least once.
        expect(new Set(receiver.receipts.map((r) => r.contactId))).toEqual(new Set(created));
        // The cap per subscription held over the three instances together.
        expect(mostAtOnce(receiver.receipts)).toBeLessThanOrEqual(MAX_PER_SUBSCRIPTION);
        // No delivery was attempted twice at once.
        const byDelivery = Map.groupBy(receiver.receipts, (r) => r.webhookId);
        for (const receipts of byDelivery.values()) {
          receipts.sort((a, b) => a.start - b.start);
          for (let i = 1; i < receipts.length; i++) expect(receipts[i]!.start).toBeGreaterThanOrEqual(receipts[i - 1]!.end);
        }
        // The history equals what the receiver saw: the same deliveries, all succeeded, each with
        // as many recorded attempts as requests arrived, but for an attempt in flight in the
        // killed instance (it came over one of its connections and was never recorded). Which
        // connection, not when: the receiver runs in this process, so a request the victim sent
        // before the kill can start being handled after it.
        await waitUntil(async () => (await allDeliveries(instances[0]!, subscriptions[index]!)).every((d) => d.status === "succeeded"), "every delivery to be recorded");
        const history = await allDeliveries(instances[0]!, subscriptions[index]!);
        expect(history.map((d) => d.id).sort()).toEqual([...byDelivery.keys()].sort());
        const unaccounted = history.filter((delivery) => {
          const receipts = byDelivery.get(delivery.id)!;
          const unrecorded = receipts.length - delivery.attempts;
          return !(unrecorded === 0 || (unrecorded === 1 && receipts.some((r) => victimPorts.has(r.port))));
        });
        // On a failure, the recorded attempts and what the receiver saw say which side is short.
        const explained = await Promise.all(
          unaccounted.map(async (d) => ({ killedAt, victimPorts: [...victimPorts], receipts: byDelivery.get(d.id), recorded: (await api(instances[0]!.url, token, "GET", `/public/v1/webhook-deliveries/${d.id}`)).body })),
        );
        expect(explained).toEqual([]);
      }
      // The killed instance's attempts were made again by another one.
      const resent = receivers.flatMap((r) => [...Map.groupBy(r.receipts, (x) => x.webhookId).values()].filter((x) => x.length > 1));
      expect(resent.length).toBeGreaterThan(0);
    } finally {
      for (const instance of instances) if (instance.proc.exitCode === null) await instance.stopWith("SIGTERM");
      for (const receiver of receivers) await receiver.stop();
    }
  }, 240_000);
});

describe("two instances on one PostgreSQL database", () => {
  let instances: ServerProcess[];
  beforeAll(async () => {
    instances = await Promise.all([serve(), serve()]);
  });
  afterAll(async () => {
    for (const instance of instances ?? []) await instance.stopWith("SIGTERM");
  });

  const post = (instance: ServerProcess, key: string, body: unknown) =>
    fetch(`${instance.url}/public/v1/contacts`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json", "idempotency-key": key },
      body: JSON.stringify(body),
    });

  test("a console search's sealed address made by one instance opens on the other, in the same session (both derive its key from the shared secrets key)", async () => {
    expect(runCli([...SOURCE, "operator", "create", "--email", OPERATOR.email, "--password-stdin"], { env, stdin: `${OPERATOR.password}\n` }).exitCode).toBe(0);
    await api(instances[0]!.url, token, "POST", "/public/v1/contacts", { first_name: "Grace", last_name: "Sealed-Search" });
    const client = new ConsoleClient((request) => fetch(request, { redirect: "manual" }), instances[0]!.url);
    expect((await client.signIn()).status).toBe(303);
    await client.get("/console/");
    const location = (await client.post("/console/search", { q: "Sealed-Search" })).headers.get("location")!;
    expect(location).toMatch(/^\/console\/search\?s=[A-Za-z0-9_-]+$/);
    // The same cookies, at the other instance.
    const other = Object.assign(new ConsoleClient((request) => fetch(request, { redirect: "manual" }), instances[1]!.url), { csrf: client.csrf });
    for (const [name, value] of client.cookies) other.cookies.set(name, value);
    const opened = await other.get(location);
    expect([opened.status, /id="contacts-count"[^>]*>([^<]*)</.exec(opened.text)?.[1]]).toEqual([200, "Showing all 1 whose name contains “Sealed-Search”."]);
  }, 60_000);

  test("a subscription's max_rate holds over both instances together (receiver-side times)", async () => {
    const receiver = slowReceiver(0);
    try {
      const subscription = await api(instances[0]!.url, token, "POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"], max_rate: 10 });
      expect(subscription.status).toBe(201);
      const posts = Array.from({ length: 30 }, (_, i) => api(instances[i % 2]!.url, token, "POST", "/public/v1/contacts", { first_name: `Paced ${i}` }));
      expect((await Promise.all(posts)).map((r) => r.status)).toEqual(Array(30).fill(201));
      await waitUntil(() => receiver.receipts.length >= 30, "30 paced deliveries");
      const arrivals = receiver.receipts.map((r) => r.start);
      expect(busiestSecond(arrivals)).toBeLessThanOrEqual(10);
      // 30 requests at 10 a second take at least 29 intervals of 100 ms.
      expect(Math.max(...arrivals) - Math.min(...arrivals)).toBeGreaterThanOrEqual(29 * 100 - LOOPBACK_SLACK_MS);
      await api(instances[0]!.url, token, "DELETE", `/public/v1/webhook-subscriptions/${subscription.body.data.id}`);
    } finally {
      await receiver.stop();
    }
  }, 60_000);

  test("a receiver's 429 with Retry-After answered to one instance holds its subscription on both: neither sends it anything until the hold shown ends, then the backlog goes out, one attempt each", async () => {
    const received: string[] = [];
    const server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      async fetch(request) {
        received.push(JSON.parse(await request.text()).data.id);
        return received.length === 1 ? new Response("busy", { status: 429, headers: { "retry-after": "4" } }) : new Response(null, { status: 204 });
      },
    });
    try {
      const created = await api(instances[0]!.url, token, "POST", "/public/v1/webhook-subscriptions", { target_url: `http://127.0.0.1:${server.port}/hook`, events: ["contact.created"] });
      expect(created.status).toBe(201);
      const path = `/public/v1/webhook-subscriptions/${created.body.data.id}`;
      const first = (await api(instances[0]!.url, token, "POST", "/public/v1/contacts", { first_name: "Busy" })).body.data.id;
      await waitUntil(async () => (await api(instances[1]!.url, token, "GET", path)).body.data.held_until !== null, "the hold shown by the other instance");
      const posts = Array.from({ length: 10 }, (_, i) => api(instances[i % 2]!.url, token, "POST", "/public/v1/contacts", { first_name: `Held ${i}` }));
      const backlog = (await Promise.all(posts)).map((r) => r.body.data.id as string);
      // What the receiver had got before each look, at either instance, that still showed the hold.
      let whileHeld: string[] | null = null;
      for (let i = 0; ; i++) {
        const before = [...received];
        if ((await api(instances[i % 2]!.url, token, "GET", path)).body.data.held_until === null) break;
        whileHeld = before;
        await Bun.sleep(10);
      }
      expect(whileHeld).toEqual([first]);
      const deliveries = async () => (await api(instances[1]!.url, token, "GET", `/public/v1/webhook-deliveries?subscription_id=${created.body.data.id}`)).body.data as { status: string; attempts: number }[];
      await waitUntil(async () => (await deliveries()).filter((d) => d.status === "succeeded").length === 11, "the backlog and the held delivery's retry");
      expect(received.slice(1).sort()).toEqual([first, ...backlog].sort());
      expect((await deliveries()).map((d) => d.attempts).sort()).toEqual([...Array(10).fill(1), 2]);
      await api(instances[0]!.url, token, "DELETE", path);
    } finally {
      await server.stop(true);
    }
  }, 60_000);

  test("concurrent POSTs with one key spread over two instances create one contact; the others answer 409 or replay it", async () => {
    const body = { first_name: "Grace", last_name: "Hopper", email: "grace.concurrent@example.com" };
    const responses = await Promise.all(Array.from({ length: 16 }, (_, i) => post(instances[i % 2]!, "one-key", body)));
    const answers = await Promise.all(responses.map(async (r) => ({ status: r.status, replayed: r.headers.get("idempotent-replayed"), body: await r.json() })));
    const createdOnce = answers.filter((a) => a.status === 201 && a.replayed === null);
    expect(createdOnce.length).toBe(1);
    const contact = createdOnce[0]!.body;
    for (const answer of answers) {
      if (answer.status === 201) expect(answer.body).toEqual(contact);
      else expect({ status: answer.status, type: answer.body.type }).toEqual({ status: 409, type: "urn:crm:problem:idempotency-key-in-use" });
    }
    const listed = await api(instances[1]!.url, token, "GET", "/public/v1/contacts?email=grace.concurrent@example.com");
    expect(listed.body.data.map((c: { id: string }) => c.id)).toEqual([contact.data.id]);
    // Once finished, either instance replays it.
    for (const instance of instances) {
      const replay = await post(instance, "one-key", body);
      expect({ status: replay.status, replayed: replay.headers.get("idempotent-replayed"), body: await replay.json() }).toEqual({ status: 201, replayed: "true", body: contact });
    }
  });

  test("a key reserved by a request running on another instance answers 409; a reservation a crashed instance left past its 60 s is taken over", async () => {
    const [{ id: tokenId }] = await admin`SELECT id FROM api_tokens ORDER BY created_at LIMIT 1`;
    const reserve = (key: string, at: number) =>
      admin`INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, created_at)
            VALUES (${tokenId}, 'POST', '/public/v1/contacts', ${key}, ${Buffer.from("x")}, 0, '', ${at})`;
    const body = { first_name: "Linus", email: "linus.reserved@example.com" };

    await reserve("running-elsewhere", Date.now());
    const refused = await post(instances[0]!, "running-elsewhere", body);
    expect({ status: refused.status, retryAfter: refused.headers.get("retry-after"), type: (await refused.json()).type }).toEqual({
      status: 409,
      retryAfter: "1",
      type: "urn:crm:problem:idempotency-key-in-use",
    });

    await reserve("left-by-a-crash", Date.now() - 61_000);
    const taken = await post(instances[1]!, "left-by-a-crash", body);
    expect(taken.status).toBe(201);
    const contact = await taken.json();
    const replay = await post(instances[0]!, "left-by-a-crash", body);
    expect({ status: replay.status, body: await replay.json() }).toEqual({ status: 201, body: contact });
    const listed = await api(instances[0]!.url, token, "GET", "/public/v1/contacts?email=linus.reserved@example.com");
    expect(listed.body.data.map((c: { id: string }) => c.id)).toEqual([contact.data.id]);
  });

  test("a request whose reservation was taken over as stale while it waited for the write lock commits nothing: the key's contact is created once", async () => {
    // A write may wait for the lock longer than the reservation's 60 s (the README: up to
    // database_pool x 10 s behind an instance cut off in mid-write); the test holds the lock and
    // ages the reservation by 61 s instead of waiting.
    const body = { first_name: "Edsger", email: "edsger.stale@example.com" };
    const answers = await holdingTheWriteLock(async () => {
      // Neither can commit before the lock is let go, so the first saves its response after the takeover.
      const reservedAt = async () => (await admin`SELECT created_at FROM idempotency_keys WHERE idem_key = 'outlived' AND status = 0`)[0]?.created_at;
      const first = post(instances[0]!, "outlived", body);
      await waitUntil(async () => (await reservedAt()) !== undefined, "the first request to reserve the key");
      await admin`UPDATE idempotency_keys SET created_at = created_at - 61000 WHERE idem_key = 'outlived'`;
      const aged = await reservedAt();
      const retry = post(instances[1]!, "outlived", body);
      await waitUntil(async () => (await reservedAt()) !== aged, "the retry to take the key over");
      return { first, retry };
    });
    const answered = async (response: Promise<Response>) => {
      const res = await response;
      return { status: res.status, body: await res.json() };
    };
    const [late, retried] = await Promise.all([answered(answers.first), answered(answers.retry)]);
    expect(retried.status).toBe(201);
    expect({ status: late.status, type: late.body.type }).toEqual({ status: 409, type: "urn:crm:problem:idempotency-key-in-use" });
    const listed = await api(instances[0]!.url, token, "GET", "/public/v1/contacts?email=edsger.stale@example.com");
    expect(listed.body.data.map((c: { id: string }) => c.id)).toEqual([retried.body.data.id]);
    // The late request's client retries and gets the retry's contact.
    const replay = await post(instances[0]!, "outlived", body);
    expect({ status: replay.status, replayed: replay.headers.get("idempotent-replayed"), body: await replay.json() }).toEqual({ status: 201, replayed: "true", body: retried.body });
  });

  test("a page of contacts by updated_at shows each contact as listed while both instances change them: in order, never a newer version than its place", async () => {
    // One pooled connection: the page's statements queue behind that instance's writes, while the other instance writes too.
    const narrow = await spawnServer([...SOURCE, "serve", "--port", "0", "--log-level", "warn", "--database-pool", "1"], { env });
    try {
      const made = await Promise.all([1, 2].map((n) => api(narrow.url, token, "POST", "/public/v1/contacts", { first_name: "Ordered", last_name: `${n}` })));
      const ids = made.map((m) => m.body.data.id as string);
      const since = encodeURIComponent(made[0]!.body.data.created_at);
      const outOfOrder: string[][] = [];
      let pages = 0;
      const patcher = async (instance: ServerProcess) => {
        for (let n = 0; pages < 200; n++) await api(instance.url, token, "PATCH", `/public/v1/contacts/${ids[n % 2]}`, { last_name: `change ${n}` });
      };
      const lister = async () => {
        for (; pages < 200; pages++) {
          const page = await api(narrow.url, token, "GET", `/public/v1/contacts?updated_after=${since}&sort_by=updated_at&sort_direction=asc&per_page=100`);
          const times = page.body.data.filter((c: { id: string }) => ids.includes(c.id)).map((c: { updated_at: string }) => c.updated_at);
          if (times.some((t: string, i: number) => i > 0 && times[i - 1] > t)) outOfOrder.push(times);
        }
      };
      await Promise.all([patcher(narrow), patcher(instances[0]!), lister(), lister()]);
      expect(outOfOrder).toEqual([]);
    } finally {
      await narrow.stopWith("SIGTERM");
    }
  }, 60_000);

  test("a contact read with include=accounts while another instance deletes the account embeds it or not, never a null or a 500", async () => {
    // One pooled connection: the reads' statements queue behind that instance's writes, while the other instance deletes.
    const narrow = await spawnServer([...SOURCE, "serve", "--port", "0", "--log-level", "warn", "--database-pool", "1"], { env });
    try {
      const refused: unknown[] = [];
      for (let round = 0; round < 30; round++) {
        const account = (await api(instances[0]!.url, token, "POST", "/public/v1/accounts", { name: `Going ${round}` })).body.data;
        const contact = (await api(instances[0]!.url, token, "POST", "/public/v1/contacts", { first_name: `Embedding ${round}`, account_ids: [account.id] })).body.data;
        const [one, page] = await Promise.all([
          api(narrow.url, token, "GET", `/public/v1/contacts/${contact.id}?include=accounts`),
          api(narrow.url, token, "GET", `/public/v1/contacts?include=accounts&account_id=${account.id}`),
          api(narrow.url, token, "PATCH", `/public/v1/contacts/${contact.id}`, { last_name: "Changed" }),
          api(instances[1]!.url, token, "DELETE", `/public/v1/accounts/${account.id}`),
        ]);
        // Each read is a state that was committed: the contact linked with its account embedded, or unlinked.
        for (const read of [one, ...(page.status === 200 ? page.body.data.map((data: unknown) => ({ status: 200, body: { data } })) : [page])]) {
          const embedded = read.status === 200 ? { account_ids: read.body.data.account_ids, accounts: read.body.data.accounts } : { status: read.status, body: read.body };
          if (!(embedded.account_ids?.length === 0 && embedded.accounts?.length === 0) && !Bun.deepEquals(embedded, { account_ids: [account.id], accounts: [account] })) {
            refused.push({ round, embedded });
          }
        }
      }
      expect(refused).toEqual([]);
    } finally {
      await narrow.stopWith("SIGTERM");
    }
  }, 60_000);

  test("every list's meta.total counts the rows its page shows while the other instance adds and removes them: contacts (a relation filter, a name), accounts, deleted accounts, users, subscriptions, deliveries", async () => {
    // One pooled connection: a list's page and count queue behind the other lists' statements, while the other instance writes.
    const narrow = await spawnServer([...SOURCE, "serve", "--port", "0", "--log-level", "warn", "--database-pool", "1"], { env });
    try {
      const writer = instances[0]!.url;
      const since = encodeURIComponent(new Date().toISOString());
      const pinged = (await api(writer, token, "POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/totals", events: ["webhook.ping"] })).body.data.id;
      // One match always, a second one coming and going: a full page of one whose count misses the second is wrong.
      expect((await api(writer, token, "POST", "/public/v1/contacts", { first_name: "Countedname", last_name: "Stays" })).status).toBe(201);
      const lists = [
        "/public/v1/contacts?tag=counted&per_page=100",
        "/public/v1/contacts?full_name=Countedname&per_page=1",
        `/public/v1/accounts?created_after=${since}&per_page=100`,
        `/public/v1/accounts/deleted?since=${since}&per_page=100`,
        "/public/v1/users?per_page=100",
        "/public/v1/webhook-subscriptions?per_page=100",
        `/public/v1/webhook-deliveries?subscription_id=${pinged}&per_page=100`,
      ];
      let writing = true;
      const disagreeing: { path: string; shown: number; total: number }[] = [];
      const write = async () => {
        try {
          for (let round = 0; round < 40; round++) {
            const tagged = (await api(writer, token, "POST", "/public/v1/contacts", { first_name: `Tagged ${round}`, tags: ["counted"] })).body.data;
            await api(writer, token, "DELETE", `/public/v1/contacts/${tagged.id}/tags/counted`);
            const passing = (await api(writer, token, "POST", "/public/v1/contacts", { first_name: "Countedname", last_name: `Passing ${round}` })).body.data;
            await api(writer, token, "DELETE", `/public/v1/contacts/${passing.id}`);
            const account = (await api(writer, token, "POST", "/public/v1/accounts", { name: `Counted ${round}` })).body.data;
            await api(writer, token, "DELETE", `/public/v1/accounts/${account.id}`);
            await api(writer, token, "POST", "/public/v1/users", { name: `Counted ${round}`, email: `counted.${round}@example.com` });
            const passingSubscription = (await api(writer, token, "POST", "/public/v1/webhook-subscriptions", { target_url: `http://127.0.0.1:9/passing/${round}`, events: ["webhook.ping"] })).body.data;
            await api(writer, token, "DELETE", `/public/v1/webhook-subscriptions/${passingSubscription.id}`);
            await api(writer, token, "POST", `/public/v1/webhook-subscriptions/${pinged}/test`);
          }
        } finally {
          writing = false;
        }
      };
      const read = async (path: string) => {
        while (writing) {
          const page = await api(narrow.url, token, "GET", path);
          expect(page.status).toBe(200);
          // A first page that is not full holds every match: its total is its length; one with more
          // after it (a next cursor: the row past the page was read) has fewer than its total.
          const { data, meta } = page.body;
          const full = data.length === meta.per_page;
          if ((!full && meta.total !== data.length) || (meta.next_cursor !== null && meta.total <= data.length)) disagreeing.push({ path, shown: data.length, total: meta.total });
        }
      };
      await Promise.all([write(), ...lists.map(read)]);
      expect(disagreeing).toEqual([]);
    } finally {
      await narrow.stopWith("SIGTERM");
    }
  }, 60_000);

  test("a read is answered while another session holds the write lock, its token's first use included (last_used_at takes no write lock)", async () => {
    const fresh = runCli([...SOURCE, "token", "create", "--name", "first use"], { env }).stdout.trim();
    const read = await holdingTheWriteLock(async () => await api(instances[0]!.url, fresh, "GET", "/public/v1/contacts?per_page=1"));
    expect(read.status).toBe(200);
    expect((await admin`SELECT last_used_at IS NOT NULL AS used FROM api_tokens WHERE name = 'first use'`)[0]).toEqual({ used: true });
  });

  test("a request refused by validation gives its key back: the corrected request with the same key creates the contact", async () => {
    const refused = await post(instances[0]!, "fix-and-retry", { first_name: "Barbara", email: "not an email" });
    expect(refused.status).toBe(422);
    const [{ n }] = await admin`SELECT count(*)::int AS n FROM idempotency_keys WHERE idem_key = 'fix-and-retry'`;
    expect(n).toBe(0);
    const created = await post(instances[1]!, "fix-and-retry", { first_name: "Barbara", email: "barbara@example.com" });
    expect(created.status).toBe(201);
  });

  test("a guesser's sign-ins spread over both instances are paced as on one: of 12 sent at once from an address with 20 failures, six are checked (turns 0 to 5 s apart), six answered 429 unchecked", async () => {
    /** guess signs in at an instance, from 127.0.0.1 as every client of the test, with a wrong password for an email no operator has. */
    const guess = async (instance: ServerProcess, email: string) => {
      const res = await new ConsoleClient((request) => fetch(request, { redirect: "manual" }), instance.url).signIn({ email, password: "not the password" });
      return res.status === 429 ? `429 retry-after ${res.headers.get("retry-after")}` : String(res.status);
    };
    for (let e = 0; e < PACED_AFTER.address; e++) expect(await guess(instances[e % 2]!, `guess${e}@example.com`)).toBe("401");
    await admin`INSERT INTO sign_in_turns (pace_key, next_turn_at) VALUES ('address:192.0.2.1', 1)`; // an address whose pacing lapsed long ago
    const burst = await Promise.all(Array.from({ length: 12 }, (_, e) => guess(instances[e % 2]!, `fresh${e}@example.com`)));
    expect(burst.toSorted()).toEqual([...Array(6).fill("401"), ...Array(6).fill("429 retry-after 5")]);
    // the turns are one row per paced key; a paced check removes the lapsed ones
    expect(await admin`SELECT pace_key FROM sign_in_turns`).toEqual([{ pace_key: "address:127.0.0.1" }]);
  }, 60_000);
});

describe("two instances on one PostgreSQL database, one of them with a clock running ahead", () => {
  test("an instance whose clock runs 5 minutes ahead leaves alone a delivery whose attempt another instance has open (leases are on the database's clock), and sends its own at once", async () => {
    const receiver = startReceiver();
    // A 30 s request timeout keeps the held attempt open for the whole test; its lease ends 32 s after the claim, by the database's clock.
    const slow = { ...env, CRM_DELIVERY_TIMEOUT_MS: "30000" };
    const command = (extra: string[]) => [process.execPath, ...extra, join(ROOT, "server", "main.ts"), "serve", "--port", "0", "--log-level", "warn", "--shutdown-timeout-ms", "300"];
    const inStep = await spawnServer(command([]), { env: slow });
    const ahead = await spawnServer(command(["--preload", join(import.meta.dir, "fixtures", "clock-ahead.ts")]), { env: { ...slow, CRM_TEST_CLOCK_AHEAD_MS: String(5 * 60_000) } });
    try {
      const subscription = await api(inStep.url, token, "POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] });
      expect(subscription.status).toBe(201);
      receiver.hold();
      const create = async (instance: ServerProcess, name: string) => {
        const res = await api(instance.url, token, "POST", "/public/v1/contacts", { first_name: name });
        expect(res.status).toBe(201);
        return res.body.data.id as string;
      };
      const contactsReceived = () => receiver.received.filter((r) => JSON.parse(r.body).type === "contact.created").map((r) => JSON.parse(r.body).data.id as string);
      // Claimed by the instance that committed it, and held open by the receiver.
      const held = await create(inStep, "Attempt open");
      await waitUntil(() => contactsReceived().length === 1, "the held attempt to arrive");
      // Each commit through the instance ahead wakes its loop: its claim rounds see the held
      // delivery due and, by its own clock, leased until minutes ago. The second round starts after
      // the first has sent what it took.
      const first = await create(ahead, "First ahead");
      await waitUntil(() => contactsReceived().includes(first), "the first delivery of the instance ahead");
      const second = await create(ahead, "Second ahead");
      await waitUntil(() => contactsReceived().includes(second), "the second delivery of the instance ahead");
      expect(contactsReceived()).toEqual([held, first, second]);
      // The instance ahead says so, once; the other one says nothing.
      const clockWarnings = (instance: ServerProcess) =>
        instance.logLines().filter((line) => line.msg.startsWith("this instance's clock is off")).map((line) => ({ level: line.level, aheadMinutes: Math.round(line.ahead_ms / 60_000) }));
      expect({ ahead: clockWarnings(ahead), inStep: clockWarnings(inStep) }).toEqual({ ahead: [{ level: "warn", aheadMinutes: 5 }], inStep: [] });
      await api(inStep.url, token, "DELETE", `/public/v1/webhook-subscriptions/${subscription.body.data.id}`);
    } finally {
      receiver.release();
      await Promise.all([inStep.stopWith("SIGTERM"), ahead.stopWith("SIGTERM")]);
      receiver.stop();
    }
  }, 60_000);
});

/** OPERATOR_DEFAULTS are database defaults an operator may have set, each unlike PostgreSQL's own, that the service's SQL must not depend on. */
const OPERATOR_DEFAULTS = { default_transaction_isolation: "repeatable read", bytea_output: "escape", standard_conforming_strings: "off" };

describe("on a database whose defaults an operator changed (REPEATABLE READ, bytea_output escape, standard_conforming_strings off)", () => {
  let instances: ServerProcess[];
  beforeAll(async () => {
    // Settings for every session; the service's writes must still read what the writes before them committed, and its token hashes must still read back.
    for (const [name, value] of Object.entries(OPERATOR_DEFAULTS)) await admin.unsafe(`ALTER DATABASE "${database.name}" SET ${name} = '${value}'`);
    instances = await Promise.all([serve(), serve()]);
  });
  afterAll(async () => {
    for (const instance of instances ?? []) await instance.stopWith("SIGTERM");
    for (const name of Object.keys(OPERATOR_DEFAULTS)) await admin.unsafe(`ALTER DATABASE "${database.name}" RESET ${name}`);
  });

  test("a create under an Idempotency-Key is replayed (its fingerprint reads back), and a name search with a backslash, % or _ finds the contact", async () => {
    const body = { first_name: "Back\\slash", last_name: "100%_sure" };
    const send = () =>
      fetch(`${instances[0]!.url}/public/v1/contacts`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json", "idempotency-key": "operator-defaults" },
        body: JSON.stringify(body),
      }).then(async (res) => ({ status: res.status, replayed: res.headers.get("idempotent-replayed"), body: await res.json() }));
    const first = await send();
    expect(first.status).toBe(201);
    expect(await send()).toEqual({ ...first, replayed: "true" });
    for (const needle of ["k\\s", "0%_s", "Back\\slash 100%_sure"]) {
      const found = await api(instances[1]!.url, token, "GET", `/public/v1/contacts?full_name=${encodeURIComponent(needle)}`);
      expect({ needle, status: found.status, ids: found.body.data?.map((c: { id: string }) => c.id) }).toEqual({ needle, status: 200, ids: [first.body.data.id] });
    }
  });

  test("two batch upserts of one new email, waiting for the write lock on two instances, make one contact: created, then unchanged", async () => {
    const item = { email: "isolated@example.com", first_name: "Barbara" };
    const answers = await holdingTheWriteLock(async () => {
      // The delivery loops' claims wait for the lock too: counted from before the batches. No write
      // commits while the lock is held, so each instance's count only grows.
      const before = await Promise.all(instances.map((instance) => writesWaiting(instance.url)));
      const batches = instances.map((instance) => api(instance.url, token, "POST", "/public/v1/contacts/batch", { items: [item] }));
      await waitUntil(
        async () => (await Promise.all(instances.map((instance) => writesWaiting(instance.url)))).every((n, i) => n >= before[i]! + 1),
        "both batches to wait for the write lock",
      );
      return { waiting: batches };
    });
    // A refused batch keeps its whole answer, so that a failure shows it.
    const results = (await Promise.all(answers.waiting)).map((r) => (r.status === 200 ? { status: r.status, statuses: r.body.data.map((d: { status: string }) => d.status) } : { status: r.status, body: r.body, statuses: [""] }));
    expect(results.toSorted((a, b) => a.statuses[0]!.localeCompare(b.statuses[0]!))).toEqual([
      { status: 200, statuses: ["created"] },
      { status: 200, statuses: ["unchanged"] },
    ]);
    const listed = await api(instances[0]!.url, token, "GET", "/public/v1/contacts?email=isolated@example.com");
    expect(listed.body.data.length).toBe(1);
  });

  // The bookkeeping of a read gives up on a lock held elsewhere: it waited as long as the lock was held.
  test("a token's first use while another session holds its row is answered without waiting for the row: the use that could not be recorded is logged at warn, and the other session's change stands", async () => {
    const fresh = runCli([...SOURCE, "token", "create", "--name", "first use, row held"], { env }).stdout.trim();
    const unrecorded = () => instances[0]!.logLines().filter((line) => line.level === "warn" && line.msg === "a token's last use could not be recorded; the request goes on");
    const before = unrecorded().length;
    const answer = await inAnotherSession(
      (tx) => tx`UPDATE api_tokens SET last_used_at = 1 WHERE name = 'first use, row held'`,
      async () => {
        const read = api(instances[0]!.url, fresh, "GET", "/public/v1/contacts?per_page=1");
        // A bound for a hung test, not a measurement.
        return { whileHeld: await settlesWithin(read, 10_000), read };
      },
    );
    const read = await answer.read;
    expect({ whileHeld: answer.whileHeld, status: read.status, data: Array.isArray(read.body.data) }).toEqual({ whileHeld: true, status: 200, data: true });
    await waitUntil(() => unrecorded().length > before, "the use that could not be recorded to be logged", instances[0]!.proc);
    expect(unrecorded().slice(before).map((line) => line.error)).toEqual([expect.stringContaining("not recorded in api_tokens: the row is locked by another session")]);
    expect((await admin`SELECT last_used_at = 1 AS kept FROM api_tokens WHERE name = 'first use, row held'`)[0]).toEqual({ kept: true });
  });

  test("a console session due for its visit while another session holds the write lock and the session's row is answered without waiting for either: the visit that could not be recorded is logged at warn", async () => {
    const secret = "a-console-session-held-elsewhere";
    const seen = Date.now() - 120_000;
    await admin`INSERT INTO operators (id, email, password_hash, created_at, updated_at) VALUES ('op_held', 'held@example.com', 'unused', ${seen}, ${seen})`;
    await admin`INSERT INTO operator_sessions (id_hash, operator_id, created_at, last_seen_at) VALUES (${Bun.SHA256.hash(secret) as Uint8Array}, 'op_held', ${seen}, ${seen})`;
    const unrecorded = () => instances[0]!.logLines().filter((line) => line.level === "warn" && line.msg === "a console session's visit could not be recorded; the request goes on");
    const before = unrecorded().length;
    const answer = await inAnotherSession(
      async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(${WRITE_LOCK}::bigint)`;
        await tx`SELECT operator_id FROM operator_sessions WHERE operator_id = 'op_held' FOR UPDATE`;
      },
      async () => {
        const page = fetch(`${instances[0]!.url}/console/api/deliveries`, { headers: { cookie: `crm_console_session=${secret}` } });
        // A bound for a hung test, not a measurement.
        return { whileHeld: await settlesWithin(page, 10_000), page };
      },
    );
    expect({ whileHeld: answer.whileHeld, status: (await answer.page).status }).toEqual({ whileHeld: true, status: 200 });
    await waitUntil(() => unrecorded().length > before, "the visit that could not be recorded to be logged", instances[0]!.proc);
    expect(unrecorded().slice(before).map((line) => line.error)).toEqual([expect.stringContaining("not recorded in operator_sessions: the row is locked by another session")]);
  });

  test("an Idempotency-Key reserved by another instance's request that commits while this one waits answers 409, not 500", async () => {
    const [{ id: tokenId }] = await admin`SELECT id FROM api_tokens WHERE name = 'instances'`;
    const answer = await inAnotherSession(
      (tx) => tx`INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, created_at)
                 VALUES (${tokenId}, 'POST', '/public/v1/contacts', 'held-elsewhere', ${new Uint8Array(32)}, 0, '', ${Date.now()})`,
      async () => {
        const created = fetch(`${instances[1]!.url}/public/v1/contacts`, {
          method: "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json", "idempotency-key": "held-elsewhere" },
          body: JSON.stringify({ first_name: "Held" }),
        }).then(async (res) => ({ status: res.status, body: await res.json() }));
        await waitUntil(async () => (await waitingOnARow()) >= 1, "the reservation to wait on the other one");
        return { created };
      },
    );
    const created = await answer.created;
    expect({ status: created.status, type: created.body.type }).toEqual({ status: 409, type: "urn:crm:problem:idempotency-key-in-use" });
    expect((await admin`SELECT count(*)::int AS n FROM contacts WHERE first_name = 'Held'`)[0]).toEqual({ n: 0 });
  });
});
