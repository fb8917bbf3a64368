import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { addOperator, ConsoleClient } from "../console/support.ts";
import { expectProblem, validation } from "../foundation/support.ts";
import { createLogger } from "../../server/shared/log.ts";
import { busiestSecond, LOOPBACK_SLACK_MS } from "../support/pacing.ts";
import { settledDeliveries, waitFor, webhookTestScope, type WebhookHarness } from "./support.ts";

const scope = webhookTestScope();
let h: WebhookHarness;

/** TimingReceiver is fixtures/timing-receiver.ts running in its own process. */
interface TimingReceiver {
  url: string;
  arrivals(): Promise<number[]>;
  stop(): void;
}

/** startTimingReceiver runs fixtures/timing-receiver.ts in its own process and reads its arrival times back. */
async function startTimingReceiver(): Promise<TimingReceiver> {
  const child = Bun.spawn([process.execPath, join(import.meta.dir, "fixtures/timing-receiver.ts")], { stdout: "pipe", stderr: "inherit" });
  const reader = child.stdout.getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { done, value } = await reader.read();
    if (done) throw new Error("the timing receiver exited before listening");
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  const base = `http://127.0.0.1:${text.trim()}`;
  return {
    url: `${base}/hook`,
    arrivals: async () => (await (await fetch(`${base}/arrivals`)).json()) as number[],
    stop: () => child.kill(),
  };
}

/** createContacts creates contacts in one batch: one transaction, so their deliveries are a backlog at once. */
async function createContacts(n: number): Promise<void> {
  const res = await h.json("POST", "/public/v1/contacts/batch", { body: { items: Array.from({ length: n }, (_, i) => ({ first_name: `Backlog ${i}` })) } });
  expect(res.status).toBe(200);
  expect(res.body.data.filter((r: any) => r.status === "created").length).toBe(n);
}

/** BACKLOG is how many deliveries the pacing tests queue at once: 10 s of them at 5 a second. */
const BACKLOG = 50;

/**
 * expectPacedAtFive waits until the timing receiver has the BACKLOG deliveries of the subscription,
 * and checks they came at most 5 a second. Its 11th and 36th requests fail: `failures` says whether
 * those deliveries are retried (and succeed), or end failed (a recovery's one more attempt).
 */
async function expectPacedAtFive(receiver: TimingReceiver, subscriptionId: string, failures: "retried" | "final"): Promise<void> {
  const expected = failures === "retried" ? BACKLOG + 2 : BACKLOG;
  for (const until = Date.now() + 60_000; (await receiver.arrivals()).length < expected; await Bun.sleep(100)) {
    if (Date.now() > until) throw new Error(`gave up waiting for ${expected} requests`);
  }
  const deliveries = await settledDeliveries(h, `subscription_id=${subscriptionId}&per_page=100`);
  const count = (status: string) => deliveries.filter((d) => d.status === status).length;
  expect({ succeeded: count("succeeded"), failed: count("failed") }).toEqual(failures === "retried" ? { succeeded: BACKLOG, failed: 0 } : { succeeded: BACKLOG - 2, failed: 2 });
  const arrivals = await receiver.arrivals();
  expect(arrivals.length).toBe(expected);
  // 5 at most; 4 when a busy machine delays a send past its slot, which moves the later slots on.
  expect(busiestSecond(arrivals)).toBeOneOf([4, 5]);
  // And on the whole: n requests at 5 a second take at least n - 1 intervals of 200 ms.
  expect(Math.max(...arrivals) - Math.min(...arrivals)).toBeGreaterThanOrEqual((expected - 1) * 200 - LOOPBACK_SLACK_MS);
}

const create = (body: unknown) => h.json("POST", "/public/v1/webhook-subscriptions", { body });

describe("max_rate: happy paths", () => {
  test(`max_rate of 5/s holds over a backlog of ${BACKLOG} deliveries, retries included (receiver-side timestamps)`, async () => {
    h = await scope.harness({ retrySchedule: [0.01, 0.01] });
    // A few answers fail, so retries are due while the backlog drains: they wait their turn too.
    const receiver = await startTimingReceiver();
    try {
      const fast = scope.receiver("/fast");
      const created = await create({ target_url: receiver.url, events: ["contact.created"], max_rate: 5 });
      expect(created.body.data.max_rate).toBe(5);
      await h.subscribe(fast.url, ["contact.created"]);
      await createContacts(BACKLOG);
      // The receiver without a cap is not held back by the one with it.
      await waitFor(() => fast.received.length === BACKLOG, `the uncapped receiver to get all ${BACKLOG}`, 15_000);
      expect((await receiver.arrivals()).length).toBeLessThan(20);
      await expectPacedAtFive(receiver, created.body.data.id, "retried");
    } finally {
      receiver.stop();
    }
  }, 90_000);

  test(`max_rate of 5/s holds during a recovery of ${BACKLOG} deliveries (receiver-side timestamps)`, async () => {
    h = await scope.harness({ retrySchedule: [0.01, 0.01] });
    const receiver = await startTimingReceiver();
    try {
      const created = await create({ target_url: receiver.url, events: ["contact.created"], max_rate: 5 });
      const id = created.body.data.id;
      const since = new Date(Date.now() - 1000).toISOString();
      // An outage's end state, quickly: the deliveries wait while the subscription is paused, and
      // are then marked as having used up their attempts.
      expect((await h.json("POST", `/public/v1/webhook-subscriptions/${id}/pause`)).status).toBe(200);
      await createContacts(BACKLOG);
      await h.rt.db.run("UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL WHERE subscription_id = ?", [id]);
      expect((await h.json("POST", `/public/v1/webhook-subscriptions/${id}/resume`)).status).toBe(200);
      expect((await receiver.arrivals()).length).toBe(0);

      const recovery = await h.json("POST", `/public/v1/webhook-subscriptions/${id}/recover`, { body: { since } });
      expect(recovery.status).toBe(202);
      expect(recovery.body.data.queued).toBe(BACKLOG);
      await expectPacedAtFive(receiver, id, "final");
    } finally {
      receiver.stop();
    }
  }, 90_000);

  test("a cap set by PATCH on a subscription created without one paces its backlog from then on; null removes it again", async () => {
    h = await scope.harness();
    const receiver = await startTimingReceiver();
    try {
      const id = (await create({ target_url: receiver.url, events: ["contact.created"] })).body.data.id;
      const path = `/public/v1/webhook-subscriptions/${id}`;
      expect((await h.json("POST", `${path}/pause`)).status).toBe(200);
      await createContacts(20);
      const capped = await h.json("PATCH", path, { body: { max_rate: 5 } });
      expect([capped.status, capped.body.data.max_rate, capped.body.data.description]).toEqual([200, 5, null]);
      expect((await h.json("POST", `${path}/resume`)).status).toBe(200);
      for (const until = Date.now() + 30_000; (await receiver.arrivals()).length < 20; await Bun.sleep(100)) {
        if (Date.now() > until) throw new Error("gave up waiting for 20 deliveries");
      }
      const paced = await receiver.arrivals();
      expect(busiestSecond(paced)).toBeOneOf([4, 5]);
      expect(Math.max(...paced) - Math.min(...paced)).toBeGreaterThanOrEqual(19 * 200 - LOOPBACK_SLACK_MS);

      const uncapped = await h.json("PATCH", path, { body: { max_rate: null, description: "uncapped" } });
      expect([uncapped.body.data.max_rate, uncapped.body.data.description]).toEqual([null, "uncapped"]);
      await createContacts(50);
      for (const until = Date.now() + 30_000; (await receiver.arrivals()).length < 70; await Bun.sleep(50)) {
        if (Date.now() > until) throw new Error("gave up waiting for 50 more deliveries");
      }
      expect(busiestSecond((await receiver.arrivals()).slice(20))).toBeGreaterThan(5);
    } finally {
      receiver.stop();
    }
  }, 90_000);

  test("the pacing of deleted subscriptions is forgotten once their next slot has passed: the delivery loop keeps none for subscriptions that are gone", async () => {
    h = await scope.harness();
    const r = scope.receiver();
    const paced = await Promise.all(Array.from({ length: 3 }, () => create({ target_url: r.url, events: ["contact.created"], max_rate: 5 })));
    const other = (await create({ target_url: r.url, events: ["contact.updated"] })).body.data.id;
    const contact = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Paced" } })).body.data.id;
    await waitFor(() => r.received.length === 3, "one delivery to each paced subscription");
    // the loop's pacing of each subscription: the next slot of its send (internal, read here as the growth it was)
    const loop = h.rt.deliveries as unknown as { nextSlot: Map<string, number>; pacing: Map<string, number> };
    await waitFor(() => [...loop.nextSlot.values()].every((slot) => slot !== Infinity), "the paced sends' next slots");
    expect([loop.nextSlot.size, loop.pacing.size]).toEqual([3, 3]);
    for (const { body } of paced) expect((await h.json("DELETE", `/public/v1/webhook-subscriptions/${body.data.id}`)).status).toBe(204);
    await Bun.sleep(250); // past the 200 ms slots
    // the next claim, for another subscription, forgets them
    expect((await h.json("PATCH", `/public/v1/contacts/${contact}`, { body: { last_name: "Later" } })).status).toBe(200);
    await waitFor(async () => (await h.deliveries(`subscription_id=${other}`))[0]?.status === "succeeded", "the other subscription's delivery");
    expect(r.received.length).toBe(4);
    expect([loop.nextSlot.size, loop.pacing.size]).toEqual([0, 0]);
  });

  test("without max_rate, a backlog goes out as fast as the receiver takes it", async () => {
    h = await scope.harness();
    const r = scope.receiver();
    const arrivals: number[] = [];
    r.respond(() => {
      arrivals.push(Date.now());
      return new Response(null, { status: 204 });
    });
    expect((await create({ target_url: r.url, events: ["contact.created"] })).body.data.max_rate).toBeNull();
    await createContacts(50);
    await waitFor(() => arrivals.length === 50, "the backlog");
    expect(busiestSecond(arrivals)).toBeGreaterThan(5);
  });
});

describe("max_rate: a clock stepped back", () => {
  test("a next send slot an hour ahead (the clock went back since it was set) holds the subscription's next delivery no longer than its interval, with no later event to wake the loop", async () => {
    h = await scope.harness();
    const r = scope.receiver();
    const id = (await create({ target_url: r.url, events: ["contact.created"], max_rate: 5 })).body.data.id;
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Before" } })).status).toBe(201);
    await waitFor(() => r.received.length === 1, "the delivery before the step");
    // the slot set by that send, as this clock reads it once it has been stepped back an hour
    const hour = 60 * 60 * 1000;
    if (h.rt.db.dialect === "sqlite") {
      // the loop's next slot of the subscription (internal): on SQLite it is kept in the process
      const loop = h.rt.deliveries as unknown as { nextSlot: Map<string, number> };
      const slot = await waitFor(() => (loop.nextSlot.get(id) ?? Infinity) < Infinity && loop.nextSlot.get(id), "the send's next slot");
      loop.nextSlot.set(id, slot + hour);
    } else {
      // the send time stored on the subscription's pacing row, once it replaced the claim's hold (the lease's end)
      const stored = () => h.rt.db.get<{ next_send_at: number }>("SELECT next_send_at FROM webhook_send_pacing WHERE subscription_id = ?", [id]);
      await waitFor(async () => (await stored())!.next_send_at < Date.now() + 1000, "the send's next slot");
      await h.rt.db.run("UPDATE webhook_send_pacing SET next_send_at = next_send_at + ? WHERE subscription_id = ?", [hour, id]);
    }
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "After" } })).status).toBe(201);
    await waitFor(() => r.received.length === 2, "the delivery after the step");
    expect(r.received.map((request) => request.json.data.first_name)).toEqual(["Before", "After"]);
  });
});

describe("max_rate: a claim whose write failed", () => {
  /** refuseLeasesWhile makes the database refuse every claim's lease while the table `refusing_leases` holds a row, as a full disk would refuse the claim's write. */
  async function refuseLeasesWhile(): Promise<void> {
    await h.rt.db.run("CREATE TABLE refusing_leases (x INTEGER)");
    await h.rt.db.run("INSERT INTO refusing_leases VALUES (1)");
    if (h.rt.db.dialect === "sqlite") {
      await h.rt.db.run("CREATE TRIGGER refuse_lease BEFORE UPDATE OF locked_until ON webhook_deliveries WHEN NEW.locked_until IS NOT NULL AND EXISTS (SELECT 1 FROM refusing_leases) BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END");
    } else {
      await h.rt.db.run("CREATE FUNCTION refuse_lease() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF EXISTS (SELECT 1 FROM refusing_leases) THEN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = '53100'; END IF; RETURN NEW; END $$");
      await h.rt.db.run("CREATE TRIGGER refuse_lease BEFORE UPDATE OF locked_until ON webhook_deliveries FOR EACH ROW WHEN (NEW.locked_until IS NOT NULL) EXECUTE FUNCTION refuse_lease()");
    }
  }

  test("the capped subscription's deliveries are sent once claims work again: the failed claim holds none of its send slots", async () => {
    const logged: { level: string; msg: string }[] = [];
    h = await scope.harness({}, { log: createLogger("info", (line) => logged.push(JSON.parse(line))) });
    const r = scope.receiver();
    const id = (await create({ target_url: r.url, events: ["contact.created"], max_rate: 10 })).body.data.id;
    const firstNames = () => r.received.map((request) => request.json.data.first_name);
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Before" } })).status).toBe(201);
    await waitFor(() => r.received.length === 1, "the delivery before the failure");

    await refuseLeasesWhile();
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "During" } })).status).toBe(201);
    await waitFor(() => h.rt.deliveries.claimFailure !== null, "a claim to fail");
    // the loop's next slot of the subscription (internal): held for a send only a committed claim makes (on PostgreSQL a leftover hold was kept for good once the subscription was deleted)
    const loop = h.rt.deliveries as unknown as { nextSlot: Map<string, number> };
    expect(loop.nextSlot.get(id)).not.toBe(Infinity);
    await h.rt.db.run("DELETE FROM refusing_leases");
    await waitFor(() => h.rt.deliveries.claimFailure === null, "a claim to succeed again");
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "After" } })).status).toBe(201);

    await waitFor(() => r.received.length === 3, "the deliveries made during and after the failure");
    expect(firstNames()).toEqual(["Before", "During", "After"]);
    const deliveries = await settledDeliveries(h, `subscription_id=${id}`);
    expect(deliveries.map((d) => [d.status, d.attempts])).toEqual([["succeeded", 1], ["succeeded", 1], ["succeeded", 1]]);
    expect(logged.filter((line) => line.msg.startsWith("webhook delivery loop")).map((line) => `${line.level} ${line.msg}`)).toEqual([
      "error webhook delivery loop: claim failed",
      "info webhook delivery loop: claims work again",
    ]);
  });
});

describe("max_rate: errors", () => {
  const refused = [0, 1001, 2.5, -5, "5"];
  for (const value of refused) {
    test(`max_rate ${JSON.stringify(value)} is 422 naming the field, and nothing is stored`, async () => {
      h = await scope.harness();
      const res = await create({ target_url: "http://127.0.0.1:9/x", events: ["contact.created"], max_rate: value });
      expectProblem(res, 422, "validation");
      expect(res.body).toEqual(validation([{ pointer: "/max_rate", detail: "must be a whole number of requests per second from 1 to 1000" }]));
      expect((await h.json("GET", "/public/v1/webhook-subscriptions")).body.meta.total).toBe(0);
    });
  }
});

describe("max_rate by PATCH: errors", () => {
  test("a cap out of range or not a whole number is 422 naming the field, and the stored one stays", async () => {
    h = await scope.harness();
    const id = (await create({ target_url: "http://127.0.0.1:9/x", events: ["contact.created"], max_rate: 7 })).body.data.id;
    for (const value of [0, 1001, 2.5, "5"]) {
      const res = await h.json("PATCH", `/public/v1/webhook-subscriptions/${id}`, { body: { max_rate: value } });
      expect({ value, body: res.body }).toEqual({ value, body: validation([{ pointer: "/max_rate", detail: "must be a whole number of requests per second from 1 to 1000, or null" }]) });
    }
    expect((await h.json("GET", `/public/v1/webhook-subscriptions/${id}`)).body.data.max_rate).toBe(7);
  });
});

describe("max_rate in the console", () => {
  test("the create form takes max_rate; out of range is refused with the field named, and nothing is stored", async () => {
    h = await scope.harness();
    await addOperator(h.rt.db);
    const client = new ConsoleClient((request) => h.app.handle(request));
    expect((await client.signIn()).status).toBe(303);
    await client.get("/console/subscriptions");
    const refused = await client.post("/console/subscriptions", { target_url: "http://127.0.0.1:9/x", events: ["contact.created"], max_rate: "0" });
    expect(refused.status).toBe(422);
    expect(refused.text).toContain("max rate must be a whole number of requests per second from 1 to 1000.");
    expect((await h.json("GET", "/public/v1/webhook-subscriptions")).body.meta.total).toBe(0);
    const created = await client.post("/console/subscriptions", { target_url: "http://127.0.0.1:9/x", events: ["contact.created"], max_rate: "7" });
    expect(created.status).toBe(201);
    const [sub] = (await h.json("GET", "/public/v1/webhook-subscriptions")).body.data;
    expect(sub.max_rate).toBe(7);
    await client.post("/console/subscriptions", { target_url: "http://127.0.0.1:9/y", events: ["contact.created"], max_rate: "" });
    expect((await h.json("GET", "/public/v1/webhook-subscriptions")).body.data.map((s: any) => s.max_rate)).toEqual([null, 7]);
  });
});
