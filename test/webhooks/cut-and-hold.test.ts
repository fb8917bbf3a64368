import { describe, expect, test } from "bun:test";
import { waitFor, webhookTestScope, type WebhookHarness } from "./support.ts";

// What an operator's action does to what a receiver taught the delivery loop: the hold its
// Retry-After asked for, the cut its unanswered attempts earned (README, Webhooks, Delivery).

const scope = webhookTestScope();
const receiver = scope.receiver;
let h: WebhookHarness;

const subscriptionPath = (id: string, action = "") => `/public/v1/webhook-subscriptions/${id}${action ? `/${action}` : ""}`;
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
