import { afterEach } from "bun:test";
import type { Server } from "bun";
import type { Config } from "../../server/config.ts";
import type { Db } from "../../server/db/sql.ts";
import { newId } from "../../server/shared/ids.ts";
import { insertDeliveries, insertDelivery, insertEvent, insertEvents, insertSubscription, updateDeliveryAfterAttempt, type DeliveryRow } from "../../server/webhooks/store.ts";
import { createHarness, type Harness, type HarnessOptions } from "../support/harness.ts";
import { PayloadCheck } from "../support/webhook-payloads.ts";

/** Received is one request a test receiver got. */
export interface Received {
  path: string;
  headers: Record<string, string>;
  body: string;
  json: any;
}

export type Responder = (request: Received, index: number) => Response | Promise<Response>;

/** Receiver is a real HTTP server on 127.0.0.1 that records every request and answers as told. */
export interface Receiver {
  url: string;
  received: Received[];
  /** requests it has not answered yet whose connections are still open */
  readonly open: number;
  /** respond replaces how the receiver answers from now on */
  respond(responder: Responder): void;
  /** hold makes requests wait until release() (or the server gives up on them) */
  hold(): void;
  release(): void;
  /** stop shuts the receiver down and fails when a body it got does not match its event type's schema */
  stop(): Promise<void>;
}

/** startReceiver starts a recording receiver answering 200 "ok" unless told otherwise; it checks every body against the event catalogue. */
export function startReceiver(path = "/hook"): Receiver {
  let responder: Responder = () => new Response("ok");
  const received: Received[] = [];
  let gate: Promise<void> | null = null;
  let open: () => void = () => {};
  let unanswered = 0;
  const payloads = new PayloadCheck();
  const server: Server<unknown> = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 0,
    async fetch(request) {
      unanswered++;
      let ended = false;
      const end = () => {
        if (ended) return;
        ended = true;
        unanswered--;
      };
      request.signal.addEventListener("abort", end, { once: true });
      try {
        return await answer(request);
      } finally {
        end();
      }
    },
  });
  /** answer records a request and answers it as told, once the receiver is not held. */
  async function answer(request: Request): Promise<Response> {
    const body = await request.text();
    payloads.check(body);
    let json: any = null;
    try {
      json = JSON.parse(body);
    } catch {}
    const entry: Received = { path: new URL(request.url).pathname, headers: Object.fromEntries(request.headers), body, json };
    received.push(entry);
    const index = received.length - 1;
    if (gate) await gate;
    return responder(entry, index);
  }
  return {
    url: `http://127.0.0.1:${server.port}${path}`,
    received,
    get open() {
      return unanswered;
    },
    respond(next) {
      responder = next;
    },
    hold() {
      gate ??= new Promise<void>((resolve) => (open = resolve));
    },
    release() {
      gate = null;
      open();
    },
    async stop() {
      this.release();
      await server.stop(true);
      payloads.assertValid();
    },
  };
}

/** waitFor polls until the check passes and returns its value; it fails the test after `ms`. */
export async function waitFor<T>(check: () => T | undefined | null | false | Promise<T | undefined | null | false>, what: string, ms = 10_000): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > until) throw new Error(`gave up waiting for ${what}`);
    await Bun.sleep(5);
  }
}

/**
 * refuseWhile makes the database refuse each row `write` (INSERT or UPDATE) of `table` for which
 * `condition` (SQL, over NEW and the tables) holds, as an unforeseen fault would, with a trigger
 * named `name` on either backend; it resolves with a function that ends the refusal.
 */
export async function refuseWhile(db: Db, name: string, write: "INSERT" | "UPDATE", table: string, condition: string): Promise<() => Promise<void>> {
  if (db.dialect === "sqlite") {
    await db.run(`CREATE TRIGGER ${name} BEFORE ${write} ON ${table} WHEN ${condition} BEGIN SELECT RAISE(ABORT, '${name}'); END`);
    return async () => void (await db.run(`DROP TRIGGER ${name}`));
  }
  await db.run(`CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF ${condition} THEN RAISE EXCEPTION '${name}'; END IF; RETURN NEW; END $$`);
  await db.run(`CREATE TRIGGER ${name} BEFORE ${write} ON ${table} FOR EACH ROW EXECUTE FUNCTION ${name}()`);
  return async () => void (await db.run(`DROP TRIGGER ${name} ON ${table}`));
}

/** retryAnswerOf is what a test compares of a manual retry's answer: its status, Retry-After and whole body. */
export const retryAnswerOf = (res: { status: number; headers: Headers; body: unknown }) => ({ status: res.status, retryAfter: res.headers.get("retry-after"), body: res.body });

/** attemptsBusy is a manual retry's 503 subscription-attempts-busy as retryAnswerOf reads it but its Retry-After (the time left of an attempt, which a test checks to a range), `detail` saying which cap was reached. */
export const attemptsBusy = (detail: string) => ({
  status: 503,
  body: { type: "urn:crm:problem:subscription-attempts-busy", title: "Service Unavailable", status: 503, detail },
});

/** FAST_WEBHOOKS are settings that keep delivery tests quick: loopback targets, tiny retry delays. */
export const FAST_WEBHOOKS: Partial<Config> = { allowPrivateTargets: true, retrySchedule: [0.02, 0.02], deliveryTimeoutMs: 2000 };

/** WebhookHarness is a harness whose delivery loop runs; close() drains it first. */
export interface WebhookHarness extends Harness {
  subscribe(targetUrl: string, events: string[], description?: string): Promise<{ id: string; secret: string }>;
  /** delivery reads one delivery with its attempts through the API */
  delivery(id: string): Promise<any>;
  /** deliveries lists deliveries through the API with the given query string */
  deliveries(query?: string): Promise<any[]>;
  shutdown(): Promise<void>;
}

/** webhookHarness builds a harness with FAST_WEBHOOKS (plus overrides) and starts its delivery loop. */
export async function webhookHarness(overrides: Partial<Config> = {}, options: HarnessOptions = {}): Promise<WebhookHarness> {
  const h = await createHarness({ ...FAST_WEBHOOKS, ...overrides }, options);
  h.rt.deliveries.start();
  // Object.assign, not a spread: a spread would read h.db, which throws on PostgreSQL.
  return Object.assign(h, {
    async subscribe(targetUrl: string, events: string[], description?: string) {
      const res = await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: targetUrl, events, ...(description ? { description } : {}) } });
      if (res.status !== 201) throw new Error(`subscription not created: ${JSON.stringify(res.body)}`);
      return res.body.data;
    },
    async delivery(id: string) {
      return (await h.json("GET", `/public/v1/webhook-deliveries/${id}`)).body.data;
    },
    async deliveries(query = "") {
      return (await h.json("GET", `/public/v1/webhook-deliveries${query ? `?${query}` : ""}`)).body.data;
    },
    async shutdown() {
      await h.rt.deliveries.stop(0);
      await h.close();
    },
  });
}

/** settledDeliveries waits until no delivery is pending and returns them all (newest first). */
export async function settledDeliveries(h: WebhookHarness, query = "per_page=100"): Promise<any[]> {
  for (let i = 0; ; i++) {
    const list = await h.deliveries(query);
    if (list.length > 0 && list.every((d) => d.status !== "pending")) return list;
    if (i > 2000) throw new Error(`deliveries still pending: ${JSON.stringify(list)}`);
    await Bun.sleep(5);
  }
}

/**
 * webhookTestScope gives a test file harnesses and receivers that are shut down after each test:
 * `await scope.harness()` replaces the current harness, `scope.receiver()` starts one more receiver.
 */
export function webhookTestScope() {
  let current: WebhookHarness | undefined;
  const receivers: Receiver[] = [];
  afterEach(async () => {
    await current?.shutdown();
    current = undefined;
    while (receivers.length) await receivers.pop()!.stop();
  });
  return {
    async harness(overrides: Partial<Config> = {}, options: HarnessOptions = {}): Promise<WebhookHarness> {
      current = await webhookHarness(overrides, options);
      return current;
    },
    receiver(path?: string): Receiver {
      const r = startReceiver(path);
      receivers.push(r);
      return r;
    },
  };
}

/** addStoredSubscription stores an active subscription to contact.created created at `createdAt`, through the store (no target check), and returns its id. */
export async function addStoredSubscription(db: Db, createdAt: number): Promise<string> {
  const id = newId("sub");
  await insertSubscription(
    db,
    { id, target_url: "https://receiver.example.com/hooks", description: null, events: '["contact.created"]', secret: "whsec_test", previous_secret: null, previous_secret_expires_at: null, secret_rotated_at: null, secret_test_delivery_id: null, secret_lost_at: null, status: "active", disabled_at: null, disabled_reason: null, paused_at: null, paused_by: null, disabled_by: null, max_rate: null, failing_since: null, held_until: null, created_at: createdAt, updated_at: createdAt, updated_by: null, created_by: null, created_by_email: null },
    ["contact.created"],
  );
  return id;
}

/** addStoredDeliveries stores `count` contact.created deliveries of a subscription created at `createdAt`, each with its event, and gives them a status as an attempt would. */
export async function addStoredDeliveries(db: Db, subscriptionId: string, createdAt: number, status: DeliveryRow["status"], count = 1, eventType = "contact.created"): Promise<void> {
  if (status === "pending") {
    // A backlog of thousands in multi-row INSERTs: one round trip a row took seconds on PostgreSQL.
    const events = Array.from({ length: count }, () => ({ id: newId("evt"), type: eventType, payload: "{}", request_id: null, token_id: null, made_by: null, created_at: createdAt }));
    await insertEvents(db, events);
    await insertDeliveries(db, events.map((event) => ({ id: newId("dlv"), event_id: event.id, event_type: eventType, subscription_id: subscriptionId, target_url: "https://receiver.example.com/hooks", next_attempt_at: createdAt, created_at: createdAt })));
    return;
  }
  for (let i = 0; i < count; i++) {
    const eventId = newId("evt");
    await insertEvent(db, { id: eventId, type: eventType, payload: "{}", request_id: null, token_id: null, made_by: null, created_at: createdAt });
    const id = newId("dlv");
    await insertDelivery(db, { id, event_id: eventId, event_type: eventType, subscription_id: subscriptionId, target_url: "https://receiver.example.com/hooks", next_attempt_at: createdAt, created_at: createdAt });
    await updateDeliveryAfterAttempt(db, { id, status, attempts: 1, next_attempt_at: null, last_response_status: status === "failed" ? 500 : 200, last_error: null, recovered_at: null, updated_at: createdAt });
  }
}
