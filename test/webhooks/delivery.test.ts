import { describe, expect, test } from "bun:test";
import { createServer, type AddressInfo, type Socket } from "node:net";
import { gzipSync } from "node:zlib";
import { Webhook } from "standardwebhooks";
import { RETRY_AFTER_CAP_MS } from "../../server/limits/limits.ts";
import { createLogger } from "../../server/shared/log.ts";
import { VERSION } from "../../server/version.ts";
import { findSubscription, listDeliveriesPage } from "../../server/webhooks/service.ts";
import { GUARANTEED_PER_SUBSCRIPTION, MAX_IN_FLIGHT, MAX_PER_SUBSCRIPTION, RESERVED_SHARE, RESERVED_SLOTS } from "../../server/webhooks/worker.ts";
import { ISO } from "../foundation/support.ts";
import { sqliteOnly } from "../support/backend.ts";
import { settledDeliveries, waitFor, webhookTestScope, type Receiver, type WebhookHarness } from "./support.ts";

const scope = webhookTestScope();
const receiver = scope.receiver;
let h: WebhookHarness;

/**
 * SLOT_FILLERS subscriptions with MAX_PER_SUBSCRIPTION deliveries waiting each fill every slot in
 * one claim round: those at MAX_PER_SUBSCRIPTION up to the reserve, then those at its share
 * (SLOT_FILLER_SHARES, fewest first).
 */
const SLOT_FILLERS = (MAX_IN_FLIGHT - RESERVED_SLOTS) / MAX_PER_SUBSCRIPTION + RESERVED_SLOTS / RESERVED_SHARE;
const SLOT_FILLER_SHARES = [...Array(RESERVED_SLOTS / RESERVED_SHARE).fill(RESERVED_SHARE), ...Array((MAX_IN_FLIGHT - RESERVED_SLOTS) / MAX_PER_SUBSCRIPTION).fill(MAX_PER_SUBSCRIPTION)];

const createContact = async (body: Record<string, unknown> = { first_name: "Ada", last_name: "Lovelace", email: "ada@example.com" }) =>
  (await h.json("POST", "/public/v1/contacts", { body })).body.data;

/**
 * hungWithBacklog starts `count` receivers that hold every request, each subscribed to
 * contact.created with more deliveries waiting than it may run: one claim round (the loop stopped
 * while they commit) takes what they may hold, and each keeps a backlog.
 */
async function hungWithBacklog(count: number): Promise<Receiver[]> {
  const hungOnes = Array.from({ length: count }, (_, i) => receiver(`/hung-${i}`));
  for (const hung of hungOnes) {
    hung.hold();
    await h.subscribe(hung.url, ["contact.created"]);
  }
  await h.rt.deliveries.stop(0);
  const batch = await h.json("POST", "/public/v1/contacts/batch", { body: { items: Array.from({ length: 2 * MAX_PER_SUBSCRIPTION }, (_, i) => ({ first_name: `n${i}` })) } });
  expect(batch.status).toBe(200);
  h.rt.deliveries.start();
  return hungOnes;
}

/**
 * answerOnceAllOpen makes a receiver hold each request until MAX_PER_SUBSCRIPTION are open at once,
 * then answer them all 200: `most` tells how many it had open at once, `give` ends the wait early.
 */
function answerOnceAllOpen(r: Receiver): { most: () => number; give: () => void } {
  let open = 0;
  let most = 0;
  const allOpen = Promise.withResolvers<void>();
  r.respond(async () => {
    most = Math.max(most, ++open);
    if (open === MAX_PER_SUBSCRIPTION) allOpen.resolve();
    await allOpen.promise;
    return new Response("ok");
  });
  return { most: () => most, give: () => allOpen.resolve() };
}

describe("webhook deliveries: happy paths", () => {
  test("a contact.created request verifies with standardwebhooks; webhook-id is the delivery id; data is the contact", async () => {
    h = await scope.harness();
    const r = receiver();
    const sub = await h.subscribe(r.url, ["contact.created"]);
    const contact = await createContact();
    const got = await waitFor(() => r.received[0], "the delivery");
    const [delivery] = await settledDeliveries(h);
    const verified = new Webhook(sub.secret).verify(got.body, got.headers);
    expect(verified).toEqual({ type: "contact.created", event_id: delivery.event_id, timestamp: contact.created_at, data: contact });
    expect(got.headers["webhook-id"]).toBe(delivery.id);
    expect(got.json.data.id).toBe(contact.id);
    expect(got.headers["content-type"]).toBe("application/json");
    expect(got.headers["user-agent"]).toBe(`crm-webhooks/${VERSION}`);
    expect(Number(got.headers["webhook-timestamp"])).toBeGreaterThan(Date.now() / 1000 - 60);
    expect(got.headers["webhook-signature"]).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
    expect(got.path).toBe("/hook");
    expect(delivery).toEqual({
      id: expect.stringMatching(/^dlv_[0-9A-Z]{26}$/),
      event_id: expect.stringMatching(/^evt_[0-9A-Z]{26}$/),
      event_type: "contact.created",
      subscription_id: sub.id,
      target_url: r.url,
      status: "succeeded",
      attempts: 1,
      last_response_status: 200,
      last_error: null,
      next_attempt_at: null,
      // The POST sent no X-Request-Id: the one the service made for it, as its answer carried it.
      request_id: expect.stringMatching(/^req_[0-9A-Z]{26}$/),
      created_at: contact.created_at,
      updated_at: expect.stringMatching(ISO),
    });
  });

  test("created, updated and deleted events reach only the subscriptions that asked for them", async () => {
    h = await scope.harness();
    const all = receiver("/all");
    const created = receiver("/created");
    const updatedOrDeleted = receiver("/changed");
    await h.subscribe(all.url, ["contact.created", "contact.updated", "contact.deleted"]);
    await h.subscribe(created.url, ["contact.created"]);
    await h.subscribe(updatedOrDeleted.url, ["contact.updated", "contact.deleted"]);
    const contact = await createContact();
    await h.json("PATCH", `/public/v1/contacts/${contact.id}`, { body: { phone: "+1 555 0100" } });
    await h.json("DELETE", `/public/v1/contacts/${contact.id}`);
    await waitFor(() => all.received.length === 3 && updatedOrDeleted.received.length === 2 && created.received.length === 1, "all deliveries");
    await settledDeliveries(h);
    const summary = (r: Receiver) => r.received.map((got) => [got.json.type, got.json.data.id]).sort();
    expect(summary(all)).toEqual([["contact.created", contact.id], ["contact.deleted", contact.id], ["contact.updated", contact.id]]);
    expect(summary(created)).toEqual([["contact.created", contact.id]]);
    expect(summary(updatedOrDeleted)).toEqual([["contact.deleted", contact.id], ["contact.updated", contact.id]]);
    const deleted = updatedOrDeleted.received.find((got) => got.json.type === "contact.deleted")!;
    expect(deleted.json.data).toEqual({ id: contact.id, version: 3, deleted_at: expect.stringMatching(ISO) });
    expect((await h.deliveries("per_page=100")).length).toBe(6);
  });

  test("a deleted subscription gets nothing more", async () => {
    h = await scope.harness();
    const kept = receiver("/kept");
    const dropped = receiver("/dropped");
    await h.subscribe(kept.url, ["contact.created"]);
    const gone = await h.subscribe(dropped.url, ["contact.created"]);
    await createContact();
    await waitFor(() => dropped.received.length === 1 && kept.received.length === 1, "first deliveries");
    expect((await h.request("DELETE", `/public/v1/webhook-subscriptions/${gone.id}`)).status).toBe(204);
    await createContact({ first_name: "Grace" });
    await waitFor(() => kept.received.length === 2, "second delivery to the kept subscription");
    await settledDeliveries(h);
    expect(dropped.received.length).toBe(1);
    expect((await h.deliveries(`subscription_id=${gone.id}`)).length).toBe(1);
  });

  test("deleting a subscription fails its pending deliveries instead of sending them", async () => {
    h = await scope.harness({ retrySchedule: [60] });
    const r = receiver();
    r.respond(() => new Response("down", { status: 503 }));
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    await waitFor(() => r.received.length === 1, "the first attempt");
    const [delivery] = await waitForDeliveries(h, (list) => list[0]?.attempts === 1 && list);
    expect(delivery.status).toBe("pending");
    await h.request("DELETE", `/public/v1/webhook-subscriptions/${sub.id}`);
    expect(await h.delivery(delivery.id)).toMatchObject({ status: "failed", attempts: 1, next_attempt_at: null, last_error: "not sent: the subscription was deleted" });
  });

  test("POST /:id/test sends webhook.ping to that subscription only and returns the delivery id", async () => {
    h = await scope.harness();
    const target = receiver("/target");
    const other = receiver("/other");
    const sub = await h.subscribe(target.url, ["contact.created"]);
    await h.subscribe(other.url, ["contact.created", "webhook.ping"]);
    const res = await h.json("POST", `/public/v1/webhook-subscriptions/${sub.id}/test`);
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ data: { delivery_id: expect.stringMatching(/^dlv_/), event_id: expect.stringMatching(/^evt_/) } });
    const got = await waitFor(() => target.received[0], "the ping");
    expect(got.headers["webhook-id"]).toBe(res.body.data.delivery_id);
    expect(new Webhook(sub.secret).verify(got.body, got.headers)).toEqual({ type: "webhook.ping", event_id: res.body.data.event_id, timestamp: expect.stringMatching(ISO), data: { subscription_id: sub.id } });
    await settledDeliveries(h);
    expect(other.received).toEqual([]);
    expect(await h.delivery(res.body.data.delivery_id)).toMatchObject({ event_id: res.body.data.event_id, event_type: "webhook.ping", status: "succeeded" });
  });
});

describe("webhook deliveries: a test event", () => {
  test("POST /:id/test goes ahead of the subscription's backlog: with max_rate 2 and 20 deliveries waiting, the ping is sent first (s35 fan-out audit)", async () => {
    h = await scope.harness({ rateWriteBurst: 1000 });
    const r = receiver("/paced");
    const sub = await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: r.url, events: ["contact.created"], max_rate: 2 } });
    expect(sub.status).toBe(201);
    await h.rt.deliveries.stop(0);
    const batch = await h.json("POST", "/public/v1/contacts/batch", { body: { items: Array.from({ length: 20 }, (_, i) => ({ first_name: `n${i}` })) } });
    expect(batch.status).toBe(200);
    const ping = await h.json("POST", `/public/v1/webhook-subscriptions/${sub.body.data.id}/test`);
    expect(ping.status).toBe(202);
    h.rt.deliveries.start();
    await waitFor(() => r.received.length >= 2, "the first two requests");
    expect(r.received.slice(0, 2).map((got) => got.json.type)).toEqual(["webhook.ping", "contact.created"]);
    expect(await h.delivery(ping.body.data.delivery_id)).toMatchObject({ event_type: "webhook.ping", status: "succeeded", attempts: 1 });
  });

  test("a test ping put ahead of a backlog shows itself due at its creation, not before it, and is still sent first (s36 slow-receiver cut)", async () => {
    h = await scope.harness({ rateWriteBurst: 1000 });
    const r = receiver("/ordered");
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await h.rt.deliveries.stop(0);
    const batch = await h.json("POST", "/public/v1/contacts/batch", { body: { items: Array.from({ length: 3 }, (_, i) => ({ first_name: `n${i}` })) } });
    expect(batch.status).toBe(200);
    const backlog = await h.deliveries(`subscription_id=${sub.id}`);
    // Made a moment after the backlog, so that being due at its creation would put it last.
    await waitFor(() => Date.now() > Math.max(...backlog.map((d) => Date.parse(d.created_at))), "a millisecond after the backlog");
    const ping = await h.json("POST", `/public/v1/webhook-subscriptions/${sub.id}/test`);
    expect(ping.status).toBe(202);
    const pending = await h.delivery(ping.body.data.delivery_id);
    expect({ status: pending.status, next_attempt_at: pending.next_attempt_at }).toEqual({ status: "pending", next_attempt_at: pending.created_at });
    expect(pending.created_at > backlog[0].next_attempt_at).toBe(true);
    h.rt.deliveries.start();
    await waitFor(() => r.received.length === 4, "the ping and the backlog");
    expect(r.received.map((got) => got.json.type)).toEqual(["webhook.ping", "contact.created", "contact.created", "contact.created"]);
  });

  test("POST /:id/test is sent at once when the subscription's only delivery waiting is a retry due in 3 days", async () => {
    h = await scope.harness({ retrySchedule: [3 * 86_400], rateWriteBurst: 1000 });
    const r = receiver("/later");
    r.respond((got) => new Response(null, { status: got.json.type === "webhook.ping" ? 204 : 500 }));
    const sub = await h.subscribe(r.url, ["contact.created"]);
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).status).toBe(201);
    const [retry] = await waitForDeliveries(h, (list) => list.length === 1 && list[0].attempts === 1 && list);
    const ping = await h.json("POST", `/public/v1/webhook-subscriptions/${sub.id}/test`);
    expect(ping.status).toBe(202);
    await waitFor(async () => (await h.delivery(ping.body.data.delivery_id)).status === "succeeded", "the ping sent");
    expect(r.received.map((got) => got.json.type)).toEqual(["contact.created", "webhook.ping"]);
    expect(await h.delivery(retry.id)).toMatchObject({ status: "pending", attempts: 1, next_attempt_at: retry.next_attempt_at });
  });
});

/** waitForDeliveries polls the delivery list until `check` returns something truthy. */
async function waitForDeliveries<T>(harness: WebhookHarness, check: (list: any[]) => T | false | undefined): Promise<T> {
  for (let i = 0; i < 2000; i++) {
    const found = await check(await harness.deliveries("per_page=100"));
    if (found) return found;
    await Bun.sleep(5);
  }
  throw new Error("deliveries never reached the expected state");
}

describe("webhook deliveries: failures and retries", () => {
  test("500, 500, 200 ends succeeded after 3 attempts, all with one webhook-id and valid signatures", async () => {
    h = await scope.harness({ retrySchedule: [0.02, 0.02, 0.02] });
    const r = receiver();
    r.respond((_, i) => (i < 2 ? new Response("boom", { status: 500 }) : new Response("fine")));
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    expect(delivery).toMatchObject({ status: "succeeded", attempts: 3, last_response_status: 200, last_error: null });
    expect(r.received.length).toBe(3);
    expect(new Set(r.received.map((got) => got.headers["webhook-id"]))).toEqual(new Set([delivery.id]));
    for (const got of r.received) new Webhook(sub.secret).verify(got.body, got.headers);
    const detail = await h.delivery(delivery.id);
    expect(detail.attempt_history.map((a: any) => [a.attempt, a.trigger, a.response_status, a.response_body, a.error])).toEqual([
      [1, "scheduled", 500, "boom", null],
      [2, "scheduled", 500, "boom", null],
      [3, "scheduled", 200, "fine", null],
    ]);
  });

  test("a receiver that always answers 500 ends failed once the schedule is used up", async () => {
    h = await scope.harness({ retrySchedule: [0.01, 0.01, 0.01] });
    const r = receiver();
    r.respond(() => new Response("nope", { status: 500 }));
    await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    expect(delivery).toMatchObject({ status: "failed", attempts: 4, last_response_status: 500, next_attempt_at: null });
    expect(r.received.length).toBe(4);
  });

  test("a receiver that hangs is cut at the timeout, and the retry succeeds", async () => {
    h = await scope.harness({ deliveryTimeoutMs: 150 });
    const r = receiver();
    r.respond((_, i) => (i === 0 ? new Promise<Response>(() => {}) : new Response("ok")));
    await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    expect(delivery.status).toBe("succeeded");
    // Usually 2 attempts; on a busy machine a retry can outlast 150 ms as well (a fresh-clone run
    // beside other work recorded 3), so the first and the last are what the test holds to.
    const history = (await h.delivery(delivery.id)).attempt_history;
    expect(history.length).toBe(delivery.attempts);
    expect(history[0]).toMatchObject({ response_status: null, response_body: null, error: "timed out after 150 ms without a complete response" });
    expect(history.at(-1)).toMatchObject({ response_status: 200, error: null });
  });

  test("a 2xx whose body never ends is a failed attempt at the timeout (it covers reading the answer), and is retried", async () => {
    h = await scope.harness({ deliveryTimeoutMs: 150 });
    const r = receiver();
    const endless = () => new ReadableStream({ start: (controller) => controller.enqueue(new TextEncoder().encode("partial answer")) });
    r.respond((_, i) => (i === 0 ? new Response(endless(), { status: 200 }) : new Response("ok")));
    await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    expect(delivery).toMatchObject({ status: "succeeded", attempts: 2, last_response_status: 200, last_error: null });
    const [first, second] = (await h.delivery(delivery.id)).attempt_history;
    expect(first).toMatchObject({
      response_status: 200,
      response_body: null,
      error: "timed out after 150 ms reading the response body (status 200); the timeout covers the whole answer",
    });
    expect(second).toMatchObject({ response_status: 200, response_body: "ok", error: null });
  });

  test("a 2xx whose body never ends, every time, leaves the delivery failed when the schedule runs out", async () => {
    h = await scope.harness({ deliveryTimeoutMs: 100, retrySchedule: [0.01] });
    const r = receiver();
    r.respond(() => new Response(new ReadableStream({ start: (controller) => controller.enqueue(new TextEncoder().encode("{")) })));
    await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    expect(delivery).toMatchObject({
      status: "failed",
      attempts: 2,
      last_response_status: 200,
      last_error: "timed out after 100 ms reading the response body (status 200); the timeout covers the whole answer",
      next_attempt_at: null,
    });
  });

  test("410 Gone disables the subscription, fails the delivery, starts its failing streak and sends nothing more", async () => {
    h = await scope.harness();
    const r = receiver();
    r.respond(() => new Response("gone", { status: 410 }));
    const sub = await h.subscribe(r.url, ["contact.created", "contact.updated"]);
    const contact = await createContact();
    const [delivery] = await settledDeliveries(h);
    expect(delivery).toMatchObject({ status: "failed", attempts: 1, last_response_status: 410 });
    const after = (await h.json("GET", `/public/v1/webhook-subscriptions/${sub.id}`)).body.data;
    expect(after).toMatchObject({ status: "disabled", disabled_at: expect.stringMatching(ISO), disabled_reason: `the receiver answered 410 Gone to delivery ${delivery.id}`, failing_since: expect.stringMatching(ISO) });
    // The stats count the 410 as a failed attempt, so the streak it began shows there too.
    const stats = (await h.json("GET", `/public/v1/webhook-subscriptions/${sub.id}/stats`)).body.data;
    expect([stats.status, stats.failing_since, stats.last_24h.attempts, stats.last_24h.failed]).toEqual(["disabled", after.failing_since, 1, 1]);
    await h.json("PATCH", `/public/v1/contacts/${contact.id}`, { body: { phone: "1" } });
    await createContact({ first_name: "Grace" });
    expect((await h.deliveries()).length).toBe(1);
    const ping = await h.json("POST", `/public/v1/webhook-subscriptions/${sub.id}/test`);
    expect(ping.status).toBe(409);
    expect(r.received.length).toBe(1);
  });

  test("a slow receiver does not hold up a fast one", async () => {
    // rateWriteBurst: the creates below come at once, more than the default write burst (README, Limits).
    h = await scope.harness({ deliveryTimeoutMs: 10_000, rateWriteBurst: 1000 });
    const slow = receiver("/slow");
    const fast = receiver("/fast");
    slow.hold();
    await h.subscribe(slow.url, ["contact.created"]);
    const fastSub = await h.subscribe(fast.url, ["contact.created"]);
    // More deliveries for the slow receiver than attempts may run at once over all receivers:
    // without a per-subscription bound its backlog would take every slot.
    const contacts = await Promise.all(Array.from({ length: MAX_IN_FLIGHT + 50 }, (_, i) => createContact({ first_name: `n${i}` })));
    const ids = new Set(contacts.map((c) => c.id));
    await waitFor(() => fast.received.length === ids.size, "every delivery to the fast receiver");
    expect(new Set(fast.received.map((got) => got.json.data.id))).toEqual(ids);
    const fastSucceeded = async () => (await h.json("GET", `/public/v1/webhook-deliveries?subscription_id=${fastSub.id}&status=succeeded`)).body.meta.total;
    while ((await fastSucceeded()) < ids.size) await Bun.sleep(5);
    expect(slow.received.length).toBeLessThan(ids.size);
    slow.release();
    await waitFor(() => slow.received.length === ids.size, "the slow receiver's backlog");
  });

  test("slow receivers that fill every slot between them do not hold up another: each subscription may run a few attempts beyond the cap", async () => {
    h = await scope.harness({ deliveryTimeoutMs: 30_000, rateWriteBurst: 1000 });
    const slowOnes = Array.from({ length: SLOT_FILLERS }, (_, i) => receiver(`/slow-${i}`));
    for (const slow of slowOnes) {
      slow.hold();
      await h.subscribe(slow.url, ["contact.created"]);
    }
    // The loop stopped while the creates commit, so one claim round takes them all: creates spread
    // over several rounds could leave a receiver between MAX_PER_SUBSCRIPTION - REFILL and the cap,
    // which is not topped up while its attempts hang (by design), and the slots would never all fill.
    await h.rt.deliveries.stop(0);
    await Promise.all(Array.from({ length: MAX_PER_SUBSCRIPTION }, (_, i) => createContact({ first_name: `n${i}` })));
    h.rt.deliveries.start();
    await waitFor(() => h.rt.deliveries.inFlightCount === MAX_IN_FLIGHT, "every slot taken by the slow receivers");
    const fast = receiver("/fast");
    await h.subscribe(fast.url, ["account.created"]);
    const accounts = await Promise.all(["Acme", "Globex", "Initech"].map(async (name) => (await h.json("POST", "/public/v1/accounts", { body: { name } })).body.data.id));
    await waitFor(() => fast.received.length === accounts.length, "the other subscription's deliveries, while the slow ones still hold theirs");
    expect(slowOnes.map((slow) => slow.received.length).toSorted((a, b) => a - b)).toEqual(SLOT_FILLER_SHARES);
    expect(h.rt.deliveries.inFlightCount).toBeLessThanOrEqual(MAX_IN_FLIGHT + GUARANTEED_PER_SUBSCRIPTION);
    for (const slow of slowOnes) slow.release();
  });

  test("four hung receivers with a backlog leave the last RESERVED_SLOTS to others: a healthy receiver beside them runs RESERVED_SHARE attempts at once, not one (s35 fan-out audit)", async () => {
    h = await scope.harness({ deliveryTimeoutMs: 30_000, rateWriteBurst: 1000 });
    const hungOnes = await hungWithBacklog(MAX_IN_FLIGHT / MAX_PER_SUBSCRIPTION);
    await waitFor(() => h.rt.deliveries.inFlightCount >= 3 * MAX_PER_SUBSCRIPTION, "the hung receivers' attempts");
    const healthy = receiver("/healthy");
    healthy.hold();
    const sub = await h.subscribe(healthy.url, ["account.created"]);
    const accounts = await h.json("POST", "/public/v1/accounts/batch", { body: { items: Array.from({ length: 20 }, (_, i) => ({ name: `Acme ${i}` })) } });
    expect(accounts.status).toBe(200);
    await waitFor(() => healthy.received.length >= RESERVED_SHARE, "the healthy receiver's attempts at once, beside the hung ones");
    // Three took MAX_PER_SUBSCRIPTION each, the fourth only the reserve's share; nothing more while they hang.
    expect(hungOnes.map((hung) => hung.received.length).toSorted((a, b) => a - b)).toEqual([RESERVED_SHARE, MAX_PER_SUBSCRIPTION, MAX_PER_SUBSCRIPTION, MAX_PER_SUBSCRIPTION]);
    healthy.release();
    const deliveries = await settledDeliveries(h, `subscription_id=${sub.id}`);
    expect(deliveries.map((d) => ({ status: d.status, attempts: d.attempts }))).toEqual(Array(20).fill({ status: "succeeded", attempts: 1 }));
    for (const hung of hungOnes) hung.release();
  });

  test("receivers that keep timing out are cut to one attempt at a time: SLOT_FILLERS of them with a backlog no longer hold every slot, and a healthy receiver beside them runs MAX_PER_SUBSCRIPTION at once (s36 slow-receiver cut)", async () => {
    // A retry an hour away: after the first timeouts the hung receivers get their backlog's next deliveries, not their retries.
    h = await scope.harness({ deliveryTimeoutMs: 3000, retrySchedule: [3600], rateWriteBurst: 1000 });
    const hungOnes = await hungWithBacklog(SLOT_FILLERS);
    const sum = (counts: number[]) => counts.reduce((a, b) => a + b, 0);
    await waitFor(() => sum(hungOnes.map((hung) => hung.received.length)) === MAX_IN_FLIGHT, "every slot taken by the hung receivers");
    const firstShares = hungOnes.map((hung) => hung.received.length);
    expect(firstShares.toSorted((a, b) => a - b)).toEqual(SLOT_FILLER_SHARES);
    // Each attempt timed out halves what its receiver may have open, down to one: once their first
    // attempts (and any they started in the slots others freed before their own timed out) have
    // ended, each hung receiver has one request open, not its share again.
    await waitFor(() => hungOnes.every((hung, i) => hung.received.length > firstShares[i]! && hung.open === 1), "one request open at each hung receiver after their first ones timed out", 30_000);
    const healthy = receiver("/healthy");
    const answers = answerOnceAllOpen(healthy);
    const sub = await h.subscribe(healthy.url, ["account.created"]);
    const accounts = await h.json("POST", "/public/v1/accounts/batch", { body: { items: Array.from({ length: MAX_PER_SUBSCRIPTION }, (_, i) => ({ name: `Acme ${i}` })) } });
    expect(accounts.status).toBe(200);
    const deliveries = await settledDeliveries(h, `subscription_id=${sub.id}&per_page=100`);
    expect(deliveries.map((d) => ({ status: d.status, attempts: d.attempts }))).toEqual(Array(MAX_PER_SUBSCRIPTION).fill({ status: "succeeded", attempts: 1 }));
    expect(answers.most()).toBe(MAX_PER_SUBSCRIPTION);
    for (const hung of hungOnes) hung.release();
  });

  test("enabling a subscription again forgets its receiver's cut: its receiver, mended, is sent MAX_PER_SUBSCRIPTION at once, not one at a time as when it hung (s36 leftovers)", async () => {
    // A streak of timeouts past 2 s disables the subscription: its first attempts time out after 3 s.
    h = await scope.harness({ deliveryTimeoutMs: 3000, retrySchedule: Array(20).fill(0.05), disableFailingAfterHours: 2 / 3600, rateWriteBurst: 1000 });
    const r = receiver("/mended");
    r.hold();
    const sub = await h.subscribe(r.url, ["account.created"]);
    const batch = (name: string) => h.json("POST", "/public/v1/accounts/batch", { body: { items: Array.from({ length: MAX_PER_SUBSCRIPTION }, (_, i) => ({ name: `${name} ${i}` })) } });
    expect((await batch("Acme")).status).toBe(200);
    await waitFor(async () => (await findSubscription(h.rt.db, sub.id))?.status === "disabled", "the subscription disabled by its streak of timeouts", 30_000);
    // Every attempt of the hung receiver ended: none answers after the enable, cutting it anew.
    await waitFor(() => h.rt.deliveries.inFlightCount === 0 && r.open === 0, "the hung attempts ended", 30_000);
    // Released before it answers anew: the hung requests, their connections gone, take the old answer.
    r.release();
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${sub.id}/enable`)).status).toBe(200);
    const answers = answerOnceAllOpen(r);
    expect((await batch("Globex")).status).toBe(200);
    await waitFor(() => answers.most() === MAX_PER_SUBSCRIPTION, `${MAX_PER_SUBSCRIPTION} requests open at the mended receiver`).finally(answers.give);
    // Read from the service, not the API: polled, the API's rate limit would answer 429.
    const succeeded = async () => (await listDeliveriesPage(h.rt.db, h.rt.secrets, { subscription_id: sub.id, status: "succeeded", per_page: "100" })).data.length;
    await waitFor(async () => (await succeeded()) === MAX_PER_SUBSCRIPTION, "the mended receiver's deliveries succeeded");
  });

  test("receivers that never answer, each holding its guaranteed share, leave a healthy receiver's attempts inside what Bun's fetch sends at once: none times out", async () => {
    // The hung attempts time out after 1 s (and are retried): the test is over soon after.
    h = await scope.harness({ deliveryTimeoutMs: 1000, rateWriteBurst: 1000 });
    const hung = receiver("/hung");
    hung.hold();
    // SLOT_FILLERS fill the MAX_IN_FLIGHT slots; the 69 others at 2 guaranteed attempts each would
    // make 266 attempts, past the 256 Bun's fetch sends at once: the rest would wait in Bun's
    // client, their timeouts running.
    const hungCount = 80;
    for (let i = 0; i < hungCount; i++) await h.subscribe(`${hung.url}/${i}`, ["contact.created"]);
    const healthy = receiver("/healthy");
    healthy.respond(async () => {
      await Bun.sleep(200);
      return new Response("ok");
    });
    const healthySub = await h.subscribe(healthy.url, ["account.created"]);
    // One claim round takes the hung subscriptions' deliveries (the loop stopped while they commit).
    await h.rt.deliveries.stop(0);
    const batch = await h.json("POST", "/public/v1/contacts/batch", { body: { items: Array.from({ length: MAX_PER_SUBSCRIPTION }, (_, i) => ({ first_name: `n${i}` })) } });
    expect(batch.status).toBe(200);
    h.rt.deliveries.start();
    const held = MAX_IN_FLIGHT + GUARANTEED_PER_SUBSCRIPTION * (hungCount - SLOT_FILLERS);
    await waitFor(() => h.rt.deliveries.inFlightCount === held, "the hung subscriptions' attempts, each with its guaranteed share");
    for (const name of ["Acme", "Globex", "Initech"]) expect((await h.json("POST", "/public/v1/accounts", { body: { name } })).status).toBe(201);
    const deliveries = await settledDeliveries(h, `subscription_id=${healthySub.id}`);
    const attempts = await Promise.all(deliveries.map(async (d) => (await h.delivery(d.id)).attempt_history.map((a: any) => ({ status: a.response_status, error: a.error }))));
    expect(deliveries.map((d) => ({ status: d.status, attempts: d.attempts }))).toEqual(Array(3).fill({ status: "succeeded", attempts: 1 }));
    expect(attempts).toEqual(Array(3).fill([{ status: 200, error: null }]));
  });

  test("deleting a subscription aborts its attempts under way: recorded as failed in words, they free MAX_IN_FLIGHT at once for a new subscription's attempts", async () => {
    // The hung attempts would hold their slots for 30 s: past the test, unless the delete frees them.
    h = await scope.harness({ deliveryTimeoutMs: 30_000, rateWriteBurst: 1000 });
    const hung = receiver("/hung");
    hung.hold();
    // Each with RESERVED_SHARE deliveries and no more: a backlog would take the slots freed by the first deletes.
    const deleted = [];
    for (let i = 0; i < MAX_IN_FLIGHT / RESERVED_SHARE; i++) deleted.push(await h.subscribe(`${hung.url}/${i}`, ["contact.created"]));
    // One claim round takes them all (the loop stopped while they commit), so every slot fills.
    await h.rt.deliveries.stop(0);
    await h.json("POST", "/public/v1/contacts/batch", { body: { items: Array.from({ length: RESERVED_SHARE }, (_, i) => ({ first_name: `n${i}` })) } });
    h.rt.deliveries.start();
    await waitFor(() => h.rt.deliveries.inFlightCount === MAX_IN_FLIGHT, "every slot taken by the hung subscriptions");
    for (const { id } of deleted) expect((await h.request("DELETE", `/public/v1/webhook-subscriptions/${id}`)).status).toBe(204);
    // An attempt leaves the count once recorded; the hung receiver has still answered nothing.
    await waitFor(() => h.rt.deliveries.inFlightCount === 0, "the deleted subscriptions' attempts ended");
    const next = receiver("/next");
    next.hold();
    await h.subscribe(next.url, ["account.created"]);
    // In one write, so that one claim round takes them all: with the slots still held, it would take GUARANTEED_PER_SUBSCRIPTION.
    const accounts = await h.json("POST", "/public/v1/accounts/batch", { body: { items: Array.from({ length: MAX_PER_SUBSCRIPTION }, (_, i) => ({ name: `a${i}` })) } });
    expect(accounts.status).toBe(200);
    await waitFor(() => next.received.length === MAX_PER_SUBSCRIPTION, "the new subscription's attempts, all at once");
    const ended = (await Promise.all(deleted.map(async ({ id }) => h.deliveries(`subscription_id=${id}`)))).flat();
    const attempts = await Promise.all(ended.map(async (d) => (await h.delivery(d.id)).attempt_history.map((a: any) => ({ status: a.response_status, error: a.error }))));
    expect(ended.map((d) => ({ status: d.status, attempts: d.attempts, last_error: d.last_error }))).toEqual(
      Array(MAX_IN_FLIGHT).fill({ status: "failed", attempts: 1, last_error: "subscription deleted while the attempt was under way" }),
    );
    expect(attempts).toEqual(Array(MAX_IN_FLIGHT).fill([{ status: null, error: "subscription deleted while the attempt was under way" }]));
    next.release();
  });

  test("a receiver never has more than MAX_PER_SUBSCRIPTION of our requests open at once", async () => {
    h = await scope.harness({ deliveryTimeoutMs: 10_000, rateWriteBurst: 1000 });
    const r = receiver();
    let open = 0;
    let most = 0;
    r.respond(async () => {
      open++;
      most = Math.max(most, open);
      await Bun.sleep(2);
      open--;
      return new Response("ok");
    });
    await h.subscribe(r.url, ["contact.created"]);
    const contacts = await Promise.all(Array.from({ length: MAX_PER_SUBSCRIPTION * 4 }, (_, i) => createContact({ first_name: `n${i}` })));
    await waitFor(() => r.received.length === contacts.length, "every delivery");
    expect(most).toBeGreaterThan(1);
    expect(most).toBeLessThanOrEqual(MAX_PER_SUBSCRIPTION);
    expect(new Set(r.received.map((got) => got.json.data.id))).toEqual(new Set(contacts.map((c) => c.id)));
  });

  test("Retry-After is honoured over a shorter scheduled delay", async () => {
    h = await scope.harness({ retrySchedule: [0.01] });
    const r = receiver();
    r.respond((_, i) => (i === 0 ? new Response("later", { status: 429, headers: { "retry-after": "3600" } }) : new Response("ok")));
    await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [delivery] = await waitForDeliveries(h, (list) => list[0]?.attempts === 1 && list);
    expect(delivery.status).toBe("pending");
    const wait = Date.parse(delivery.next_attempt_at) - Date.parse(delivery.updated_at);
    expect(wait).toBe(3600 * 1000);
    const [attempt] = (await h.delivery(delivery.id)).attempt_history;
    expect(attempt.response_headers).toMatchObject({ "retry-after": "3600" });
  });

  test("a 429 with Retry-After holds the whole subscription until then: the receiver gets nothing more but a test ping, no held delivery spends an attempt, then the backlog goes out", async () => {
    // The test looks at the subscription every few milliseconds for seconds: past the API's read rate.
    h = await scope.harness({ retrySchedule: [0.01], rateReadPerSecond: 100_000, rateReadBurst: 100_000 });
    const r = receiver();
    r.respond((_, i) => (i === 0 ? new Response("busy", { status: 429, headers: { "retry-after": "4" } }) : new Response(null, { status: 204 })));
    const sub = await h.subscribe(r.url, ["contact.created"]);
    const subscription = async () => (await h.json("GET", `/public/v1/webhook-subscriptions/${sub.id}`)).body.data;
    const first = await createContact({ first_name: "First" });
    const heldUntil = await waitFor(async () => (await subscription()).held_until, "the subscription to show its receiver's hold");
    const backlog = await Promise.all(Array.from({ length: 5 }, (_, i) => createContact({ first_name: `Held ${i}` })));
    // The operator asked: a test ping goes out during the hold.
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${sub.id}/test`)).status).toBe(202);
    await waitFor(() => r.received.length >= 2, "the test ping");
    const seen = () => r.received.map((got) => `${got.json.type} ${got.json.data.id ?? "ping"}`);
    // What the receiver had got before each look that still showed the hold: the last one is all it got while held.
    let whileHeld: string[] | null = null;
    for (;;) {
      const before = seen();
      const shown = (await subscription()).held_until;
      if (shown === null) break;
      expect(shown).toBe(heldUntil);
      whileHeld = before;
      await Bun.sleep(5);
    }
    expect(whileHeld).toEqual([`contact.created ${first.id}`, "webhook.ping ping"]);
    const settled = await waitForDeliveries(h, (list) => list.length === 7 && list.every((d) => d.status === "succeeded") && list);
    const attempts = Object.fromEntries(settled.map((d) => [d.event_type === "webhook.ping" ? "ping" : d.id, d.attempts]));
    expect(Object.values(attempts).sort()).toEqual([1, 1, 1, 1, 1, 1, 2]);
    expect(seen().slice(2).sort()).toEqual([first, ...backlog].map((c) => `contact.created ${c.id}`).sort());
  });

  test("only a 429 or 503 with Retry-After holds a subscription, for at most an hour, and a later shorter one does not shorten the hold: a 500 with Retry-After holds nothing (s37 mutation audit)", async () => {
    // No retries: a test ping answered with Retry-After: 1 would otherwise be sent again a second later, and take the next answer.
    h = await scope.harness({ retrySchedule: [], rateReadPerSecond: 100_000, rateReadBurst: 100_000 });
    const later = (status: number, seconds: number) => new Response("later", { status, headers: { "retry-after": String(seconds) } });
    /** answering subscribes a receiver that gives `firsts` in turn, then 204s. */
    const answering = async (path: string, ...firsts: Response[]) => {
      const r = receiver(path);
      r.respond((_, i) => firsts[i] ?? new Response(null, { status: 204 }));
      return { r, sub: await h.subscribe(r.url, ["contact.created"]) };
    };
    const unavailable = await answering("/503", later(503, 60));
    const poisoned = await answering("/500", later(500, 60));
    const aDay = await answering("/a-day", later(429, 86_400));
    // Its test pings, sent during the hold, are answered asking for less, then for more.
    const pinged = await answering("/pinged", later(429, 60), later(429, 1), later(429, 120));
    const heldUntil = async (id: string) => (await h.json("GET", `/public/v1/webhook-subscriptions/${id}`)).body.data.held_until as string | null;
    const heldFor = async (id: string) => Date.parse(await waitFor(() => heldUntil(id), `the hold of ${id}`)) - Date.now();
    await createContact({ first_name: "First" });

    expect(await heldFor(unavailable.sub.id)).toBeGreaterThan(50_000);
    const dayHold = await heldFor(aDay.sub.id);
    expect([dayHold > RETRY_AFTER_CAP_MS - 60_000, dayHold <= RETRY_AFTER_CAP_MS]).toEqual([true, true]);
    // The 500's Retry-After would put off its own delivery's retry, and no other: the next one goes out at once.
    await waitFor(async () => (await h.deliveries(`subscription_id=${poisoned.sub.id}`))[0]?.attempts === 1, "the 500 recorded");
    expect(await heldUntil(poisoned.sub.id)).toBeNull();
    await createContact({ first_name: "Second" });
    await waitFor(() => poisoned.r.received.length === 2, "the second delivery to the receiver that answered 500");
    expect(unavailable.r.received).toHaveLength(1);

    const pingAnswered = async () => {
      const ping = (await h.json("POST", `/public/v1/webhook-subscriptions/${pinged.sub.id}/test`)).body.data;
      await waitFor(async () => (await h.delivery(ping.delivery_id)).attempts === 1, "the test ping's answer recorded");
      return heldUntil(pinged.sub.id);
    };
    const first = await waitFor(() => heldUntil(pinged.sub.id), "the pinged subscription's hold");
    expect(await pingAnswered()).toBe(first);
    expect(Date.parse((await pingAnswered())!)).toBeGreaterThan(Date.parse(first));
  });

  test("redirects are not followed: a 3xx is a failed attempt, whose Location is kept with its response headers and never logged", async () => {
    const logs: string[] = [];
    h = await scope.harness({ retrySchedule: [] }, { log: createLogger("warn", (line) => logs.push(line)) });
    const r = receiver();
    const elsewhere = receiver("/elsewhere");
    // A moved receiver's new address carries its own credentials, as a target URL does: a path token, a signed query.
    const location = `${elsewhere.url}/T0001/PathSecretXyZ123?sig=SignedQuerySecret456`;
    r.respond(() => new Response(null, { status: 308, headers: { location } }));
    await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    const error = "redirect (308) not followed; point the subscription at the final URL, which the answer's Location header names";
    expect(delivery).toMatchObject({ status: "failed", last_response_status: 308, last_error: error });
    const [attempt] = (await h.delivery(delivery.id)).attempt_history;
    expect({ error: attempt.error, location: attempt.response_headers.location }).toEqual({ error, location });
    expect(elsewhere.received).toEqual([]);
    const line = await waitFor(() => logs.find((l) => l.includes('"msg":"webhook attempt"')), "the attempt's log line");
    expect(JSON.parse(line).error).toBe(error);
    expect(logs.filter((l) => l.includes("PathSecretXyZ123") || l.includes("SignedQuerySecret456"))).toEqual([]);
  });

  test("a 304 is a failed attempt like any answer that is not 2xx, not called a redirect", async () => {
    h = await scope.harness({ retrySchedule: [] });
    const r = receiver();
    r.respond(() => new Response(null, { status: 304 }));
    await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    expect(delivery).toMatchObject({ status: "failed", last_response_status: 304, last_error: null });
  });

  test("an answer with NUL characters and bytes that are not UTF-8 is recorded once, with U+FFFD for each (PostgreSQL's text holds no NUL), and not sent again", async () => {
    h = await scope.harness({ retrySchedule: [] });
    const r = receiver();
    r.respond(() => new Response(new Uint8Array([...new TextEncoder().encode("ok\u0000done"), 0xff, 0x21])));
    await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    expect({ status: delivery.status, attempts: delivery.attempts }).toEqual({ status: "succeeded", attempts: 1 });
    const [attempt] = (await h.delivery(delivery.id)).attempt_history;
    expect(attempt.response_body).toBe("ok\uFFFDdone\uFFFD!");
    expect(r.received).toHaveLength(1);
  });

  test("kept response headers are cut to 160 characters: a 4 KB Location (an SSO redirect) is recorded once, not sent again for ever", async () => {
    h = await scope.harness({ retrySchedule: [] });
    const r = receiver();
    const location = `https://sso.example.com/login?SAMLRequest=${"x".repeat(4000)}`;
    r.respond(() => new Response(null, { status: 302, headers: { location, server: "s".repeat(3000) } }));
    await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    const cut = `${location.slice(0, 159)}…`;
    expect({ status: delivery.status, attempts: delivery.attempts, last_error: delivery.last_error }).toEqual({
      status: "failed",
      attempts: 1,
      last_error: "redirect (302) not followed; point the subscription at the final URL, which the answer's Location header names",
    });
    const [attempt] = (await h.delivery(delivery.id)).attempt_history;
    expect(attempt.response_headers).toEqual({ location: cut, server: `${"s".repeat(159)}…`, "content-length": "0" });
    expect(r.received).toHaveLength(1);
  });

  test("the answer is asked for uncompressed, and one compressed anyway is kept as sent: never unpacked (a few hundred bytes can unpack to gigabytes)", async () => {
    h = await scope.harness({ retrySchedule: [] });
    const r = receiver();
    const packed = gzipSync("A".repeat(200_000));
    r.respond(() => new Response(packed, { status: 500, headers: { "content-encoding": "gzip" } }));
    await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    expect(r.received[0]!.headers["accept-encoding"]).toBe("identity");
    const [attempt] = (await h.delivery(delivery.id)).attempt_history;
    expect({ headers: attempt.response_headers, body: attempt.response_body }).toEqual({
      headers: { "content-type": "application/octet-stream", "content-encoding": "gzip", "content-length": String(packed.length) },
      body: new TextDecoder().decode(packed).replaceAll("\u0000", "\uFFFD"),
    });
  });

  test("a body that goes on exactly at the kept length is cut on a character boundary, not into U+FFFD", async () => {
    h = await scope.harness({ retrySchedule: [] });
    // 1023 letters and an é (2 bytes), in two chunks: the first ends after the é's first byte, at 1024 bytes.
    const body = Buffer.from(`${"a".repeat(1023)}é`);
    const raw = Bun.listen({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        data(socket) {
          socket.write(Buffer.concat([Buffer.from("HTTP/1.1 500 X\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n"), body.subarray(0, 1024), Buffer.from("\r\n")]));
          setTimeout(() => socket.end(Buffer.concat([Buffer.from("1\r\n"), body.subarray(1024), Buffer.from("\r\n0\r\n\r\n")])), 50);
        },
      },
    });
    try {
      await h.subscribe(`http://127.0.0.1:${raw.port}/hook`, ["contact.created"]);
      await createContact();
      const [delivery] = await settledDeliveries(h);
      const [attempt] = (await h.delivery(delivery.id)).attempt_history;
      expect(attempt.response_body).toBe("a".repeat(1023));
    } finally {
      raw.stop(true);
    }
  });

  test("a small Content-Length in front of an endless chunked body is not trusted: the first kept bytes are read, the rest is not waited for", async () => {
    h = await scope.harness({ deliveryTimeoutMs: 2000, retrySchedule: [] });
    const chunk = Buffer.from(`10000\r\n${"d".repeat(0x10000)}\r\n`);
    // Bun follows Transfer-Encoding over Content-Length: buffering "the 1 declared byte" whole read gigabytes.
    const raw = createServer((socket) => {
      socket.on("error", () => {});
      socket.once("data", () => {
        socket.write("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n");
        const pump = () => {
          while (!socket.destroyed) if (!socket.write(chunk)) return void socket.once("drain", pump);
        };
        pump();
      });
    });
    await new Promise<void>((listening) => raw.listen(0, "127.0.0.1", listening));
    const port = (raw.address() as AddressInfo).port;
    try {
      await h.subscribe(`http://127.0.0.1:${port}/hook`, ["contact.created"]);
      await createContact();
      const [delivery] = await settledDeliveries(h);
      expect(delivery).toMatchObject({ status: "succeeded", attempts: 1, last_response_status: 200, last_error: null });
      const [attempt] = (await h.delivery(delivery.id)).attempt_history;
      expect({ status: attempt.response_status, body: attempt.response_body, error: attempt.error }).toEqual({ status: 200, body: "d".repeat(1024), error: null });
    } finally {
      raw.close();
    }
  });

  test("a receiver that is not listening is a connection error in words, which the attempt's log line gives too", async () => {
    const logs: Record<string, any>[] = [];
    h = await scope.harness({ retrySchedule: [] }, { log: createLogger("warn", (line) => logs.push(JSON.parse(line))) });
    const r = receiver();
    const subscription = await h.subscribe(r.url, ["contact.created"]);
    await r.stop();
    await createContact();
    const [delivery] = await settledDeliveries(h);
    expect(delivery.status).toBe("failed");
    expect(delivery.last_response_status).toBeNull();
    expect(delivery.last_error).toMatch(/^connection failed: .*(ECONNREFUSED|ConnectionRefused)/);
    // An operator reading the journal for a spike of result="error" learns why without looking up each delivery.
    const { time, duration_ms, ...line } = await waitFor(() => logs.find((l) => l.msg === "webhook attempt"), "the attempt's log line");
    expect(line).toEqual({
      level: "warn",
      msg: "webhook attempt",
      delivery_id: delivery.id,
      subscription_id: subscription.id,
      event_type: "contact.created",
      request_id: delivery.request_id,
      trigger: "scheduled",
      response_status: null,
      error: delivery.last_error,
      delivery_status: "failed",
    });
  });

  /** rawReceiverOutcome delivers one event to a TCP server that answers each request with `answer`, and returns how the delivery settled. */
  async function rawReceiverOutcome(answer: (socket: Socket) => void) {
    h = await scope.harness({ retrySchedule: [] });
    const raw = createServer((socket) => socket.once("data", () => answer(socket)));
    await new Promise<void>((listening) => raw.listen(0, "127.0.0.1", listening));
    try {
      await h.subscribe(`http://127.0.0.1:${(raw.address() as AddressInfo).port}/hook`, ["contact.created"]);
      await createContact();
      const [delivery] = await settledDeliveries(h);
      return { status: delivery.status, last_response_status: delivery.last_response_status, last_error: delivery.last_error };
    } finally {
      raw.close();
    }
  }

  test("a receiver that answers something other than HTTP is a failure in words, without the runtime's advice to developers", async () => {
    expect(await rawReceiverOutcome((socket) => socket.end("SSH-2.0-OpenSSH_9.6\r\n"))).toEqual({
      status: "failed",
      last_response_status: null,
      last_error: "connection failed: Malformed_HTTP_Response",
    });
  });

  test("a receiver that closes the connection without answering is a failure in words, without the runtime's advice to developers", async () => {
    expect(await rawReceiverOutcome((socket) => socket.destroy())).toEqual({
      status: "failed",
      last_response_status: null,
      last_error: "connection failed: ECONNRESET: The socket connection was closed unexpectedly",
    });
  });

  sqliteOnly("attempts whose outcomes storage refuses to record are logged once for the cause (then once a minute, with a count), not a line each", async () => {
    const lines: Record<string, any>[] = [];
    h = await scope.harness({ retrySchedule: [] }, { log: createLogger("warn", (line) => lines.push(JSON.parse(line))) });
    const held = receiver();
    held.hold();
    await h.subscribe(held.url, ["contact.created"]);
    for (let i = 0; i < 5; i++) await createContact({ first_name: `n${i}` });
    await waitFor(() => held.received.length === 5, "five attempts in flight");
    // query_only stands in for the read-only file: SQLite refuses the write with SQLITE_READONLY, as on one.
    h.db.sqlite.run("PRAGMA query_only = ON");
    try {
      held.release();
      await waitFor(() => h.rt.deliveries.inFlightCount === 0, "the attempts to end unrecorded");
    } finally {
      h.db.sqlite.run("PRAGMA query_only = OFF");
    }
    const unrecorded = lines.filter((line) => line.msg.startsWith("webhook delivery attempt"));
    expect(unrecorded.map((line) => ({ level: line.level, msg: line.msg, error: line.error }))).toEqual([
      { level: "error", msg: "webhook delivery attempt could not be recorded", error: expect.stringContaining("readonly database") },
    ]);
  });
});

describe("webhook deliveries: security", () => {
  test("the connect-time check refuses a target that became private, and nothing is sent", async () => {
    h = await scope.harness({ retrySchedule: [] });
    const r = receiver();
    await h.subscribe(r.url, ["contact.created"]);
    h.rt.config.allowPrivateTargets = false;
    await createContact();
    const [delivery] = await settledDeliveries(h);
    expect(delivery).toMatchObject({
      status: "failed",
      last_response_status: null,
      last_error: "refused: address 127.0.0.1 is loopback; webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists",
    });
    expect(r.received).toEqual([]);
  });

  test("each subscription signs with its own secret", async () => {
    h = await scope.harness();
    const a = receiver("/a");
    const b = receiver("/b");
    const subA = await h.subscribe(a.url, ["contact.created"]);
    const subB = await h.subscribe(b.url, ["contact.created"]);
    expect(subA.secret).not.toBe(subB.secret);
    await createContact();
    await waitFor(() => a.received[0] && b.received[0], "both deliveries");
    expect(() => new Webhook(subB.secret).verify(a.received[0]!.body, a.received[0]!.headers)).toThrow();
    expect(() => new Webhook(subA.secret).verify(a.received[0]!.body, a.received[0]!.headers)).not.toThrow();
  });
});
