import { describe, expect, test } from "bun:test";
import { createServer, type AddressInfo, type Server, type Socket } from "node:net";
import { Webhook } from "standardwebhooks";
import { deliveryWithSubscription, retryFromConsole, retryRefusalText } from "../../console/deliveries/service.ts";
import { metricsText } from "../../server/ops/service.ts";
import { parseExposition } from "../ops/prometheus.ts";
import { deleteSubscription } from "../../server/webhooks/store.ts";
import { ISO } from "../foundation/support.ts";
import { postgresOnly } from "../support/backend.ts";
import { attemptsBusy, retryAnswerOf, settledDeliveries, waitFor, webhookTestScope, type WebhookHarness } from "./support.ts";

// What an operator's action does to what a receiver taught the delivery loop: the hold its
// Retry-After asked for, the cut its unanswered attempts earned (README, Webhooks, Delivery).

const scope = webhookTestScope();
const receiver = scope.receiver;
let h: WebhookHarness;

const subscriptionPath = (id: string, action = "") => `/public/v1/webhook-subscriptions/${id}${action ? `/${action}` : ""}`;
/**
 * rawReceiver is a TCP server on 127.0.0.1 that hands each connection's first request to `answer`
 * (with the index of the request): closing it unanswered is a receiver the loop cuts at once,
 * with no timeout to wait for.
 */
async function rawReceiver(answer: (socket: Socket, index: number) => void): Promise<{ url: string; server: Server; requests: () => number }> {
  let requests = 0;
  const server = createServer((socket) => socket.once("data", () => answer(socket, requests++)));
  await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, server, requests: () => requests };
}

const createContact = async (first_name: string) => (await h.json("POST", "/public/v1/contacts", { body: { first_name } })).body.data;

describe("a receiver's hold (Retry-After) and the operator", () => {
  test("enabling a subscription again ends its receiver's hold: the operator has acted, and its events go out at once, not after the hour the receiver asked for (s37 cuthold)", async () => {
    h = await scope.harness({ retrySchedule: [3600] });
    const r = receiver();
    // A 429 asking for an hour, then the ping the operator sends during the hold is answered 410 Gone.
    r.respond((_, i) => (i === 0 ? new Response("busy", { status: 429, headers: { "retry-after": "3600" } }) : i === 1 ? new Response("gone", { status: 410 }) : new Response(null, { status: 204 })));
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact("Held");
    await waitFor(async () => (await h.json("GET", subscriptionPath(sub.id))).body.data.held_until, "the subscription held by its receiver");
    expect((await h.json("POST", subscriptionPath(sub.id, "test"))).status).toBe(202);
    await waitFor(async () => (await h.json("GET", subscriptionPath(sub.id))).body.data.status === "disabled", "the subscription disabled by the 410");
    const enabled = await h.json("POST", subscriptionPath(sub.id, "enable"));
    expect(enabled.status).toBe(200);
    const { status, held_until, disabled_at, disabled_reason, failing_since } = enabled.body.data;
    expect({ status, held_until, disabled_at, disabled_reason, failing_since }).toEqual({ status: "active", held_until: null, disabled_at: null, disabled_reason: null, failing_since: null });
    const after = await createContact("After the enable");
    await waitFor(() => r.received.length === 3, "the event made after the enable sent");
    expect(r.received.map((got) => `${got.json.type} ${got.json.data.id ?? "ping"}`)[2]).toBe(`contact.created ${after.id}`);
  });
});

describe("subscription.disabled: pending_deliveries_failed", () => {
  test("counts only the pending deliveries the disable failed: one whose attempt was under way at the disable is left to it, and ends as its answer says (s37 cuthold)", async () => {
    h = await scope.harness({ retrySchedule: [3600] });
    const onCall = receiver("/on-call");
    const pager = await h.subscribe(onCall.url, ["subscription.disabled"]);
    const r = receiver("/dying");
    const answered = Promise.withResolvers<void>();
    // The first delivery fails and waits an hour for its retry; the second is held open until the
    // disable is over; the third is answered 410 Gone, which disables the subscription meanwhile.
    r.respond(async (_, i) => {
      if (i === 0) return new Response("down", { status: 500 });
      if (i === 1) await answered.promise;
      return i === 2 ? new Response("gone", { status: 410 }) : new Response(null, { status: 204 });
    });
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact("Waiting for its retry");
    await waitFor(() => r.received.length === 1, "the first attempt");
    await createContact("Under way at the disable");
    await waitFor(() => r.received.length === 2, "the second attempt open at the receiver");
    await createContact("Gone");
    await waitFor(() => onCall.received.length === 1, "the subscription.disabled event");
    answered.resolve();
    await waitFor(() => h.rt.deliveries.inFlightCount === 0, "the attempt under way at the disable recorded");
    const deliveries = await settledDeliveries(h, `subscription_id=${sub.id}`);
    const [waiting, underWay, gone] = r.received.map((got) => got.headers["webhook-id"]);
    const outcome = (id: string | undefined) => deliveries.filter((d) => d.id === id).map(({ status, attempts, last_response_status, last_error }) => ({ status, attempts, last_response_status, last_error }));
    expect([outcome(waiting), outcome(underWay), outcome(gone)]).toEqual([
      [{ status: "failed", attempts: 1, last_response_status: 500, last_error: "not sent: the subscription was disabled after its receiver answered 410 Gone" }],
      [{ status: "succeeded", attempts: 1, last_response_status: 204, last_error: null }],
      [{ status: "failed", attempts: 1, last_response_status: 410, last_error: null }],
    ]);
    const disabled = (await h.json("GET", subscriptionPath(sub.id))).body.data;
    expect(new Webhook(pager.secret).verify(onCall.received[0]!.body, onCall.received[0]!.headers)).toEqual({
      type: "subscription.disabled",
      event_id: expect.stringMatching(/^evt_[0-9A-Z]{26}$/),
      timestamp: disabled.disabled_at,
      data: {
        subscription_id: sub.id,
        target_url: r.url,
        description: null,
        reason: `the receiver answered 410 Gone to delivery ${gone}`,
        disabled_at: disabled.disabled_at,
        failing_since: expect.stringMatching(ISO),
        pending_deliveries_failed: 1,
      },
    });
    // The metrics agree: the delivery under way is counted once, by its attempt, as succeeded.
    const scraped = parseExposition(await metricsText(h.rt));
    expect({ succeeded: scraped.value("crm_webhook_deliveries_total", { status: "succeeded" }), failed: scraped.value("crm_webhook_deliveries_total", { status: "failed" }) }).toEqual({ succeeded: 2, failed: 2 });
  });
});

describe("a receiver's cut (attempts left unanswered) and the subscriptions", () => {
  test("a manual retry counts among its receiver's cut slots: refused 503 while the loop has as many open as the cut allows, sent once one is free (s37 cuthold)", async () => {
    h = await scope.harness({ retrySchedule: [3600], deliveryTimeoutMs: 60_000 });
    const held: Socket[] = [];
    const ok = (socket: Socket) => socket.end("HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
    // The first request is left unanswered (cut to 1), the second held open, the rest answered.
    const raw = await rawReceiver((socket, i) => (i === 0 ? socket.destroy() : i === 1 ? held.push(socket) : ok(socket)));
    try {
      const sub = await h.subscribe(raw.url, ["contact.created"], "Hanging shop");
      await createContact("Unanswered");
      const [unanswered] = await waitFor(async () => {
        const list = await h.deliveries(`subscription_id=${sub.id}`);
        return list.length === 1 && list[0].attempts === 1 && list;
      }, "the first attempt recorded");
      expect(h.rt.deliveries.receiversCut).toBe(1);
      await createContact("Held");
      await waitFor(() => held.length === 1, "the second attempt open at the receiver");
      const refused = await h.json("POST", `/public/v1/webhook-deliveries/${unanswered.id}/retry`);
      // Retry-After is when the held attempt ends at the latest, its 60 s timeout, not a second: retried sooner, it is refused again.
      const retryAfter = Number(refused.headers.get("retry-after"));
      expect({ ...retryAnswerOf(refused), retryAfter: retryAfter > 1 && retryAfter <= 60 }).toEqual({
        ...attemptsBusy(`The subscription ${sub.id} has 1 attempt under way on this instance, the most it sends at once to a receiver that left attempts unanswered (timed out, or no connection) until it answers again; retry the delivery in a moment.`),
        retryAfter: true,
      });
      // The console's Retry now is refused alike, in its words.
      const byHand = await retryFromConsole(h.rt, unanswered.id);
      if (byHand === null || byHand.refused === "not-found") throw new Error(`Retry now was not refused: ${JSON.stringify(byHand)}`);
      expect(retryRefusalText(byHand, await deliveryWithSubscription(h.rt.db, unanswered.id))).toBe(
        "Not retried: the receiver of the subscription \u2068Hanging shop\u2069 left requests unanswered (timed out, or no connection), so this server sends it 1 delivery at once until it answers again, and that many are being sent. Nothing was sent; press Retry now again in a moment.",
      );
      expect(raw.requests()).toBe(2);
      ok(held[0]!);
      await waitFor(() => h.rt.deliveries.inFlightCount === 0, "the held attempt recorded");
      const retried = await h.json("POST", `/public/v1/webhook-deliveries/${unanswered.id}/retry`);
      expect({ status: retried.status, delivery: { status: retried.body.data.status, attempts: retried.body.data.attempts, last_response_status: retried.body.data.last_response_status } }).toEqual({
        status: 200,
        delivery: { status: "succeeded", attempts: 2, last_response_status: 200 },
      });
      expect(raw.requests()).toBe(3);
    } finally {
      for (const socket of held) socket.destroy();
      raw.server.close();
    }
  });

  postgresOnly("a cut receiver's entry is dropped once its subscription is gone, though no notification told this instance of the delete: memory stays bounded (s37 cuthold)", async () => {
    h = await scope.harness({ retrySchedule: [3600] }, { sharedPollMs: 50 });
    const raw = await rawReceiver((socket) => socket.destroy());
    try {
      const sub = await h.subscribe(raw.url, ["contact.created"]);
      await createContact("Unanswered");
      await waitFor(() => h.rt.deliveries.receiversCut === 1, "the receiver cut after its unanswered attempt");
      // Deleted as another instance deletes it, its notification missed: nothing tells this one.
      expect(await h.rt.db.write((tx) => deleteSubscription(tx, sub.id))).toBe(true);
      await waitFor(() => h.rt.deliveries.receiversCut === 0, "the cut of the deleted subscription's receiver dropped at a poll");
    } finally {
      raw.server.close();
    }
  });
});
