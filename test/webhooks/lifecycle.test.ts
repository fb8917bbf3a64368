import { describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import { WEBHOOK_EVENT_TYPES } from "../../server/webhooks/model.ts";
import { eventTypes } from "../../server/webhooks/service.ts";
import { expectProblem, ISO, validation } from "../foundation/support.ts";
import { payloadProblems } from "../support/webhook-payloads.ts";
import { settledDeliveries, waitFor, webhookTestScope, type WebhookHarness } from "./support.ts";

const scope = webhookTestScope();
const receiver = scope.receiver;
let h: WebhookHarness;

const HOUR = 3_600_000;
const subscriptionPath = (id: string, action = "") => `/public/v1/webhook-subscriptions/${id}${action ? `/${action}` : ""}`;
const createContact = async (body: Record<string, unknown> = { first_name: "Ada", email: "ada@example.com" }) => (await h.json("POST", "/public/v1/contacts", { body })).body.data;
const verifies = (secret: string, got: { body: string; headers: Record<string, string> }) => {
  try {
    new Webhook(secret).verify(got.body, got.headers);
    return true;
  } catch {
    return false;
  }
};
/** endGrace moves a rotation's grace period into the past, as if its hours had gone by. */
const endGrace = (subscriptionId: string) => h.rt.db.run("UPDATE webhook_subscriptions SET previous_secret_expires_at = ? WHERE id = ?", [Date.now() - 1, subscriptionId]);

describe("secret rotation: happy paths", () => {
  test("during the grace period receivers with the old or the new secret both verify; after it only the new one does", async () => {
    h = await scope.harness();
    const r = receiver();
    const sub = await h.subscribe(r.url, ["contact.created"]);
    const res = await h.json("POST", subscriptionPath(sub.id, "rotate-secret"), { body: { grace_hours: 2 } });
    expect(res.status).toBe(200);
    const rotated = res.body.data;
    expect(rotated).toEqual({
      ...sub,
      secret: expect.stringMatching(/^whsec_[A-Za-z0-9+/]{43}=$/),
      secret_rotated_at: expect.stringMatching(ISO),
      previous_secret_expires_at: new Date(Date.parse(rotated.secret_rotated_at) + 2 * HOUR).toISOString(),
      updated_at: rotated.secret_rotated_at,
    });
    expect(rotated.secret).not.toBe(sub.secret);
    const read = (await h.json("GET", subscriptionPath(sub.id))).body.data;
    expect(read).toEqual({ ...rotated, secret: `${rotated.secret.slice(0, 10)}…` });

    await createContact();
    const during = await waitFor(() => r.received[0], "the delivery during the grace period");
    const signatures = during.headers["webhook-signature"]!.split(" ");
    expect(signatures).toEqual([expect.stringMatching(/^v1,[A-Za-z0-9+/]{43}=$/), expect.stringMatching(/^v1,[A-Za-z0-9+/]{43}=$/)]);
    expect(verifies(sub.secret, during)).toBe(true);
    expect(verifies(rotated.secret, during)).toBe(true);
    // Newest first: the first signature alone is the new secret's.
    expect(verifies(rotated.secret, { ...during, headers: { ...during.headers, "webhook-signature": signatures[0]! } })).toBe(true);
    expect(verifies(sub.secret, { ...during, headers: { ...during.headers, "webhook-signature": signatures[0]! } })).toBe(false);
    // The history records both signatures sent.
    // The attempt is recorded after the receiver has answered: wait for the record, not the request.
    let recorded = await h.delivery(during.headers["webhook-id"]!);
    while (recorded.attempt_history.length === 0) {
      await Bun.sleep(5);
      recorded = await h.delivery(during.headers["webhook-id"]!);
    }
    expect(recorded.attempt_history[0].request_headers["webhook-signature"]).toBe(during.headers["webhook-signature"]);

    await endGrace(sub.id);
    await createContact({ first_name: "Grace" });
    const after = await waitFor(() => r.received[1], "the delivery after the grace period");
    expect(after.headers["webhook-signature"]!.split(" ")).toHaveLength(1);
    expect(verifies(rotated.secret, after)).toBe(true);
    expect(verifies(sub.secret, after)).toBe(false);
  });

  test("grace_hours 0 switches at once; without a body the grace period is 24 hours; a second rotation drops the oldest secret", async () => {
    h = await scope.harness();
    const r = receiver();
    const sub = await h.subscribe(r.url, ["contact.created"]);
    const first = (await h.json("POST", subscriptionPath(sub.id, "rotate-secret"))).body.data;
    expect(Date.parse(first.previous_secret_expires_at) - Date.parse(first.secret_rotated_at)).toBe(24 * HOUR);
    const second = (await h.json("POST", subscriptionPath(sub.id, "rotate-secret"), { body: { grace_hours: 0 } })).body.data;
    expect(second.previous_secret_expires_at).toBe(second.secret_rotated_at);
    await createContact();
    const got = await waitFor(() => r.received[0], "the delivery");
    expect(got.headers["webhook-signature"]!.split(" ")).toHaveLength(1);
    expect([verifies(second.secret, got), verifies(first.secret, got), verifies(sub.secret, got)]).toEqual([true, false, false]);
  });

  test("a repeated Idempotency-Key replays the rotation instead of rotating again", async () => {
    h = await scope.harness();
    const sub = await h.subscribe(receiver().url, ["contact.created"]);
    const headers = { "idempotency-key": "rotate-1" };
    const first = await h.json("POST", subscriptionPath(sub.id, "rotate-secret"), { body: { grace_hours: 1 }, headers });
    const again = await h.json("POST", subscriptionPath(sub.id, "rotate-secret"), { body: { grace_hours: 1 }, headers });
    expect(again.status).toBe(200);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body).toEqual(first.body);
  });

  test("no body and {} are the same request under one Idempotency-Key: the second replays the first", async () => {
    h = await scope.harness();
    const sub = await h.subscribe(receiver().url, ["contact.created"]);
    const headers = { "idempotency-key": "rotate-empty" };
    const first = await h.json("POST", subscriptionPath(sub.id, "rotate-secret"), { headers });
    const again = await h.json("POST", subscriptionPath(sub.id, "rotate-secret"), { body: {}, headers });
    expect([first.status, again.status, again.headers.get("idempotent-replayed"), again.body]).toEqual([200, 200, "true", first.body]);
  });
});

describe("secret rotation: errors", () => {
  test("grace_hours outside 0..168 is 422 and changes nothing; an unknown subscription is 404", async () => {
    h = await scope.harness();
    const sub = await h.subscribe(receiver().url, ["contact.created"]);
    for (const body of [{ grace_hours: 169 }, { grace_hours: -1 }, { grace_hours: 1.5 }, { grace_hours: "24" }]) {
      const res = await h.json("POST", subscriptionPath(sub.id, "rotate-secret"), { body });
      expectProblem(res, 422, "validation");
      expect(res.body.errors).toEqual([{ pointer: "/grace_hours", detail: "must be a whole number of hours from 0 to 168" }]);
    }
    expect((await h.json("GET", subscriptionPath(sub.id))).body.data.secret_rotated_at).toBeNull();
    expectProblem(await h.json("POST", subscriptionPath("sub_missing", "rotate-secret")), 404, "not-found");
  });
});

describe("recovery: happy paths", () => {
  test("after an outage, recover re-sends every failed delivery of the window once, with its webhook-id, and nothing outside it", async () => {
    h = await scope.harness();
    const r = receiver();
    r.respond(() => new Response("down", { status: 503 }));
    const sub = await h.subscribe(r.url, ["contact.created"]);
    const failedIds = async () => (await settledDeliveries(h)).filter((d) => d.status === "failed").map((d) => d.id);
    const before = await createContact({ first_name: "Before" });
    await failedIds();
    await Bun.sleep(2); // the window's bounds are milliseconds apart from the events outside it
    const since = new Date().toISOString();
    const inWindow = [await createContact({ first_name: "In1" }), await createContact({ first_name: "In2" }), await createContact({ first_name: "In3" })];
    await failedIds();
    await Bun.sleep(2);
    const until = new Date().toISOString();
    await Bun.sleep(2);
    const after = await createContact({ first_name: "After" });
    const all = await settledDeliveries(h);
    expect(all.map((d) => d.status)).toEqual(["failed", "failed", "failed", "failed", "failed"]);
    const windowIds = all.filter((d) => d.created_at >= since && d.created_at < until).map((d) => d.id);
    expect(windowIds).toHaveLength(3);
    const attemptsBefore = r.received.length;

    r.respond(() => new Response("ok"));
    const res = await h.json("POST", subscriptionPath(sub.id, "recover"), { body: { since, until }, headers: { "idempotency-key": "outage-1" } });
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ data: { subscription_id: sub.id, since, until, queued: 3 } });
    await waitFor(() => r.received.length === attemptsBefore + 3, "the recovered deliveries");
    const settled = await settledDeliveries(h);
    const resent = r.received.slice(attemptsBefore);
    expect(resent.map((got) => got.headers["webhook-id"]).sort()).toEqual([...windowIds].sort());
    expect(resent.map((got) => got.json.data.id).sort()).toEqual(inWindow.map((c) => c.id).sort());
    for (const got of resent) expect(verifies(sub.secret, got)).toBe(true);
    const byId = new Map(settled.map((d) => [d.id, d]));
    for (const id of windowIds) expect(byId.get(id)).toMatchObject({ status: "succeeded", attempts: 4, last_response_status: 200 });
    const outside = settled.filter((d) => !windowIds.includes(d.id));
    expect(outside.map((d) => [d.status, d.attempts])).toEqual([["failed", 3], ["failed", 3]]);
    expect(resent.some((got) => got.json.data.id === before.id || got.json.data.id === after.id)).toBe(false);

    // The same key replays the answer and queues nothing again.
    const again = await h.json("POST", subscriptionPath(sub.id, "recover"), { body: { since, until }, headers: { "idempotency-key": "outage-1" } });
    expect(again.status).toBe(202);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body).toEqual(res.body);
    // A new recovery finds nothing failed left in the window.
    expect((await h.json("POST", subscriptionPath(sub.id, "recover"), { body: { since, until } })).body.data.queued).toBe(0);
  });

  test("until defaults to now; a recovered delivery that fails again is failed again after one attempt", async () => {
    h = await scope.harness();
    const r = receiver();
    r.respond(() => new Response("down", { status: 503 }));
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [failed] = await settledDeliveries(h);
    const res = await h.json("POST", subscriptionPath(sub.id, "recover"), { body: { since: new Date(Date.now() - HOUR).toISOString() } });
    expect(res.body.data).toMatchObject({ queued: 1, until: expect.stringMatching(ISO) });
    await waitFor(() => r.received.length === 4, "the recovered attempt");
    const [after] = await settledDeliveries(h);
    expect(after).toMatchObject({ id: failed.id, status: "failed", attempts: 4, last_response_status: 503 });
  });

  test("a delivery ended early by a 410 gets one attempt when recovered, not the rest of its schedule; the disable counted it with none of the others", async () => {
    h = await scope.harness();
    const r = receiver();
    r.respond(() => new Response("gone", { status: 410 }));
    const onCall = receiver("/on-call");
    const pager = await h.subscribe(onCall.url, ["subscription.disabled", "delivery.exhausted"]);
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [gone] = await settledDeliveries(h, `subscription_id=${sub.id}`);
    expect(gone).toMatchObject({ status: "failed", attempts: 1, last_response_status: 410 });
    await waitFor(() => onCall.received.length === 1, "the subscription.disabled event");
    const disabled = new Webhook(pager.secret).verify(onCall.received[0]!.body, onCall.received[0]!.headers) as any;
    // The 410'd delivery failed of itself; the subscription had no other pending delivery.
    expect([disabled.type, disabled.data.pending_deliveries_failed]).toEqual(["subscription.disabled", 0]);
    // The 410 began the streak the event reports, as the subscription records it.
    const { failing_since } = (await h.json("GET", `/public/v1/webhook-subscriptions/${sub.id}`)).body.data;
    expect([disabled.data.failing_since, failing_since]).toEqual([expect.stringMatching(ISO), disabled.data.failing_since]);

    expect((await h.json("POST", subscriptionPath(sub.id, "enable"))).status).toBe(200);
    r.respond(() => new Response("down", { status: 500 }));
    const res = await h.json("POST", subscriptionPath(sub.id, "recover"), { body: { since: new Date(Date.now() - HOUR).toISOString() } });
    expect(res.body.data.queued).toBe(1);
    await waitFor(() => onCall.received.length === 2, "the delivery.exhausted event");
    const exhausted = new Webhook(pager.secret).verify(onCall.received[1]!.body, onCall.received[1]!.headers) as any;
    expect([exhausted.type, exhausted.data.delivery_id, exhausted.data.attempts, exhausted.data.last_response_status]).toEqual(["delivery.exhausted", gone.id, 2, 500]);
    const [after] = await settledDeliveries(h, `subscription_id=${sub.id}`);
    expect(after).toMatchObject({ id: gone.id, status: "failed", attempts: 2, last_response_status: 500 });
    expect(r.received.length).toBe(2);
  });

  test("a manual retry failing before a recovered delivery's attempt leaves that attempt to come, and sends no delivery.exhausted; the attempt's failure then ends it", async () => {
    h = await scope.harness();
    const r = receiver();
    r.respond(() => new Response("down", { status: 500 }));
    const onCall = receiver("/on-call");
    const pager = await h.subscribe(onCall.url, ["delivery.exhausted"]);
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [failed] = await settledDeliveries(h, `subscription_id=${sub.id}`);
    await waitFor(() => onCall.received.length === 1, "the first delivery.exhausted");
    // Recovered, and not due for an hour: the manual retry comes first.
    const dueAt = Date.now() + HOUR;
    await h.rt.db.run("UPDATE webhook_deliveries SET status = 'pending', recovered_at = ?, next_attempt_at = ? WHERE id = ?", [Date.now(), dueAt, failed.id]);
    const manual = await h.json("POST", `/public/v1/webhook-deliveries/${failed.id}/retry`);
    expect(manual.body.data).toMatchObject({ id: failed.id, status: "pending", attempts: 4, next_attempt_at: new Date(dueAt).toISOString() });
    expect(await h.rt.db.get("SELECT CASE WHEN recovered_at IS NULL THEN 0 ELSE 1 END AS recovered FROM webhook_deliveries WHERE id = ?", [failed.id])).toEqual({ recovered: 1 });
    // Due now; a commit wakes the loop.
    await h.rt.db.run("UPDATE webhook_deliveries SET next_attempt_at = ? WHERE id = ?", [Date.now(), failed.id]);
    await h.json("POST", "/public/v1/accounts", { body: { name: "Wake" } });
    await waitFor(() => onCall.received.length === 2, "the recovered attempt's delivery.exhausted");
    const exhausted = onCall.received.map((got) => (new Webhook(pager.secret).verify(got.body, got.headers) as any).data.attempts);
    expect(exhausted).toEqual([3, 5]);
    const [after] = await settledDeliveries(h, `subscription_id=${sub.id}`);
    expect(after).toMatchObject({ id: failed.id, status: "failed", attempts: 5 });
  });
});

describe("manual retries", () => {
  test("a manual retry of a pending delivery that fails leaves its next scheduled attempt to come, when it was due, and sends no delivery.exhausted, even with the schedule used up", async () => {
    h = await scope.harness({ retrySchedule: [3600] });
    const r = receiver();
    r.respond(() => new Response("down", { status: 500 }));
    const onCall = receiver("/on-call");
    await h.subscribe(onCall.url, ["delivery.exhausted"]);
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    await waitFor(async () => (await h.deliveries(`subscription_id=${sub.id}`))[0]?.attempts === 1, "the first attempt");
    const [pending] = await h.deliveries(`subscription_id=${sub.id}`);
    const manual = await h.json("POST", `/public/v1/webhook-deliveries/${pending.id}/retry`);
    expect(manual.body.data).toMatchObject({ id: pending.id, status: "pending", attempts: 2, last_response_status: 500, next_attempt_at: pending.next_attempt_at });
    // Due now: its scheduled attempt is the last, and its failure ends it and reports it.
    await h.rt.db.run("UPDATE webhook_deliveries SET next_attempt_at = ? WHERE id = ?", [Date.now(), pending.id]);
    await h.json("POST", "/public/v1/accounts", { body: { name: "Wake" } });
    await waitFor(() => onCall.received.length === 1, "the delivery.exhausted of the scheduled attempt");
    expect([(await settledDeliveries(h, `subscription_id=${sub.id}`))[0], r.received.length, JSON.parse(onCall.received[0]!.body).data.attempts]).toEqual([
      expect.objectContaining({ status: "failed", attempts: 3 }),
      3,
      3,
    ]);
  });
});

describe("manual retries: a receiver asking for a wait", () => {
  test("a manual retry answered 503 with Retry-After puts the delivery's next attempt that far off, as a scheduled one would", async () => {
    h = await scope.harness({ retrySchedule: [600] });
    const r = receiver();
    r.respond(() => new Response("down", { status: 500 }));
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    await waitFor(async () => (await h.deliveries(`subscription_id=${sub.id}`))[0]?.attempts === 1, "the first attempt");
    const [pending] = await h.deliveries(`subscription_id=${sub.id}`);
    r.respond(() => new Response("busy", { status: 503, headers: { "retry-after": "1800" } }));
    const before = Date.now();
    const manual = (await h.json("POST", `/public/v1/webhook-deliveries/${pending.id}/retry`)).body.data;
    expect([manual.status, manual.attempts, Date.parse(manual.next_attempt_at) >= before + 1_800_000]).toEqual(["pending", 2, true]);
  });
});

describe("recovery: errors", () => {
  test("a window starting over 14 days ago or in the future, ending before it starts, or not RFC 3339 is 422 and queues nothing", async () => {
    h = await scope.harness();
    const sub = await h.subscribe(receiver().url, ["contact.created"]);
    const path = subscriptionPath(sub.id, "recover");
    const old = new Date(Date.now() - 15 * 24 * HOUR).toISOString();
    expect((await h.json("POST", path, { body: { since: old } })).body).toEqual(
      validation([{ pointer: "/since", detail: "must be at most 14 days ago" }], "The recovery window is invalid."),
    );
    const since = new Date(Date.now() - HOUR).toISOString();
    expect((await h.json("POST", path, { body: { since, until: since } })).body).toEqual(validation([{ pointer: "/until", detail: "must be after since" }], "The recovery window is invalid."));
    // A start in the future is the start's fault, whether or not an end is given.
    const future = new Date(Date.now() + HOUR).toISOString();
    for (const body of [{ since: future }, { since: future, until: new Date(Date.now() + 2 * HOUR).toISOString() }]) {
      expect((await h.json("POST", path, { body })).body).toEqual(validation([{ pointer: "/since", detail: "must be in the past" }], "The recovery window is invalid."));
    }
    for (const body of [{ since: "yesterday" }, {}, { since, until: "2026-13-01T00:00:00Z" }]) expectProblem(await h.json("POST", path, { body }), 422, "validation");
    expect((await h.json("POST", path, { body: { since: "yesterday" } })).body.errors).toEqual([{ pointer: "/since", detail: "must be an RFC 3339 date-time" }]);
  });

  test("a window starting at the 14-day edge, or up to a minute past it, is taken: a count taken there is confirmed a moment later", async () => {
    h = await scope.harness();
    const sub = await h.subscribe(receiver().url, ["contact.created"]);
    const since = new Date(Date.now() - 14 * 24 * HOUR - 30_000).toISOString();
    expect(await h.json("POST", subscriptionPath(sub.id, "recover"), { body: { since } })).toMatchObject({ status: 202, body: { data: { subscription_id: sub.id, since, queued: 0 } } });
  });

  test("a leap second (second 60 at 23:59 UTC) is read as 23:59:59.999, as the time filters read it, not refused as no date-time; second 60 of another minute is, saying why", async () => {
    h = await scope.harness();
    const sub = await h.subscribe(receiver().url, ["contact.created"]);
    const path = subscriptionPath(sub.id, "recover");
    const since = new Date(Date.now() - HOUR).toISOString();
    const refused = async (body: Record<string, string>) => (await h.json("POST", path, { body })).body.errors;
    expect([
      await refused({ since: "2016-12-31T23:59:60Z" }),
      await refused({ since: "2016-12-31T15:59:60-08:00" }),
      await refused({ since, until: "2016-12-31T23:59:60Z" }),
      await refused({ since: "2016-12-31T23:58:60Z" }),
      await refused({ since, until: "2016-12-31T23:59:61Z" }),
    ]).toEqual([
      [{ pointer: "/since", detail: "must be at most 14 days ago" }],
      [{ pointer: "/since", detail: "must be at most 14 days ago" }],
      [{ pointer: "/until", detail: "must be after since" }],
      [{ pointer: "/since", detail: "must be an RFC 3339 date-time; second 60 is a leap second, which RFC 3339 allows at 23:59:60 UTC only" }],
      [{ pointer: "/until", detail: "must be an RFC 3339 date-time" }],
    ]);
    expect((await h.json("GET", "/public/v1/contacts?updated_after=2016-12-31T23:59:60Z")).status).toBe(200);
    expect((await h.json("GET", "/public/v1/contacts?updated_after=2016-12-31T12:59:60Z")).body.errors).toEqual([
      { parameter: "updated_after", detail: "must be an RFC 3339 date-time; second 60 is a leap second, which RFC 3339 allows at 23:59:60 UTC only" },
    ]);
  });

  test("an unknown subscription is 404; a disabled one is 409", async () => {
    h = await scope.harness();
    const r = receiver();
    r.respond(() => new Response("gone", { status: 410 }));
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    await settledDeliveries(h);
    const since = new Date(Date.now() - HOUR).toISOString();
    expectProblem(await h.json("POST", subscriptionPath(sub.id, "recover"), { body: { since } }), 409, "subscription-disabled");
    expectProblem(await h.json("POST", subscriptionPath("sub_missing", "recover"), { body: { since } }), 404, "not-found");
  });
});

describe("event catalogue", () => {
  test("GET /event-types lists every event kind with a description and the JSON Schema of its body", async () => {
    h = await scope.harness();
    const res = await h.json("GET", "/public/v1/event-types");
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: await eventTypes() });
    expect(res.body.data.map((e: any) => e.type)).toEqual([...WEBHOOK_EVENT_TYPES]);
    for (const entry of res.body.data) {
      expect(entry.description.length).toBeGreaterThan(20);
      expect(entry.schema).toMatchObject({ type: "object", required: ["type", "event_id", "timestamp", "data"], properties: { type: { const: entry.type } } });
    }
  });

  test("the OpenAPI document carries the same schemas under its top-level webhooks, and the new operations by name", async () => {
    h = await scope.harness();
    const doc = (await h.json("GET", "/docs/json")).body;
    expect(doc.openapi).toStartWith("3.1");
    expect(Object.keys(doc.webhooks)).toEqual([...WEBHOOK_EVENT_TYPES]);
    for (const { type, schema } of await eventTypes()) {
      expect(doc.webhooks[type].post.requestBody.content["application/json"].schema).toEqual(schema);
      expect(doc.webhooks[type].post.parameters.map((p: any) => p.name)).toEqual(["webhook-id", "webhook-timestamp", "webhook-signature"]);
    }
    const operation = (path: string, method: string) => doc.paths[path][method].operationId;
    expect([
      operation("/public/v1/webhook-subscriptions/{subscriptionId}/rotate-secret", "post"),
      operation("/public/v1/webhook-subscriptions/{subscriptionId}/recover", "post"),
      operation("/public/v1/webhook-subscriptions/{subscriptionId}/pause", "post"),
      operation("/public/v1/webhook-subscriptions/{subscriptionId}/resume", "post"),
      operation("/public/v1/webhook-subscriptions/{subscriptionId}", "patch"),
      operation("/public/v1/event-types", "get"),
    ]).toEqual(["rotateWebhookSubscriptionSecret", "recoverWebhookDeliveries", "pauseWebhookSubscription", "resumeWebhookSubscription", "updateWebhookSubscription", "listEventTypes"]);
  });

  test("the suite's payload check refuses bodies that do not match their event type's schema", () => {
    const ok = { type: "webhook.ping", event_id: "evt_01M845H83J9WZE2N2PB9B9Q360", timestamp: "2026-11-23T12:19:15.698Z", data: { subscription_id: "sub_01M845H83B5G396C2TYHHXR46K" } };
    expect(payloadProblems(JSON.stringify(ok))).toEqual([]);
    expect(payloadProblems(JSON.stringify({ ...ok, event_id: undefined }))).toEqual(["webhook.ping/ must have required property 'event_id'"]);
    expect(payloadProblems(JSON.stringify({ ...ok, timestamp: "yesterday" }))).toEqual(['webhook.ping/timestamp must match format "date-time"']);
    expect(payloadProblems(JSON.stringify({ ...ok, type: "contact.updated" }))).not.toEqual([]);
    expect(payloadProblems(JSON.stringify({ ...ok, type: "contact.merged" }))).toEqual(['no event type "contact.merged" in the catalogue']);
  });
});

describe("ordering and de-duplication", () => {
  test("five PATCHes give strictly increasing data.version in the order made, and one event_id reaches both subscriptions", async () => {
    h = await scope.harness();
    const first = receiver("/first");
    const second = receiver("/second");
    await h.subscribe(first.url, ["contact.created", "contact.updated"]);
    await h.subscribe(second.url, ["contact.updated"]);
    const contact = await createContact();
    expect(contact.version).toBe(1);
    const versions: number[] = [];
    for (let i = 1; i <= 5; i++) versions.push((await h.json("PATCH", `/public/v1/contacts/${contact.id}`, { body: { first_name: `Ada ${i}` } })).body.data.version);
    expect(versions).toEqual([2, 3, 4, 5, 6]);
    await waitFor(() => first.received.length === 6 && second.received.length === 5, "every event at both receivers");
    const updates = first.received.filter((got) => got.json.type === "contact.updated").map((got) => got.json.data);
    expect(updates.map((data) => [data.first_name, data.version]).sort((a, b) => a[1] - b[1])).toEqual([1, 2, 3, 4, 5].map((i) => [`Ada ${i}`, i + 1]));
    const eventIds = (r: typeof first) => r.received.filter((got) => got.json.type === "contact.updated").map((got) => got.json.event_id).sort();
    expect(eventIds(second)).toEqual(eventIds(first));
    expect(new Set(eventIds(first)).size).toBe(5);
    const webhookIds = new Set([...first.received, ...second.received].map((got) => got.headers["webhook-id"]));
    expect(webhookIds.size).toBe(11);
    const deliveries = await settledDeliveries(h);
    for (const got of second.received) expect(deliveries.find((d) => d.id === got.headers["webhook-id"])!.event_id).toBe(got.json.event_id);
  });

  test("concurrent PATCHes of one contact each get their own version", async () => {
    h = await scope.harness();
    const contact = await createContact();
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => h.json("PATCH", `/public/v1/contacts/${contact.id}`, { body: { phone: `+1 555 01${String(i).padStart(2, "0")}` } })));
    expect(results.map((res) => res.body.data.version).sort((a, b) => a - b)).toEqual(Array.from({ length: 30 }, (_, i) => i + 2));
    const payloads = (await h.rt.db.all<{ payload: string }>("SELECT payload FROM events WHERE type = 'contact.updated' ORDER BY id"));
    expect(payloads.map((row) => JSON.parse(row.payload).data.version)).toEqual(Array.from({ length: 30 }, (_, i) => i + 2));
  });

  test("a PATCH that changes nothing keeps the version; a batch upsert that changes the contact counts it up like a PATCH", async () => {
    h = await scope.harness();
    const contact = await createContact();
    const res = await h.json("PATCH", `/public/v1/contacts/${contact.id}`, { body: { first_name: "Ada" } });
    expect(res.body.data).toEqual(contact);
    const batch = await h.json("POST", "/public/v1/contacts/batch", { body: { items: [{ email: "ada@example.com", first_name: "Augusta Ada" }, { email: "ada@example.com", first_name: "Augusta Ada" }] } });
    expect(batch.body.data.map((r: any) => r.status)).toEqual(["updated", "unchanged"]);
    expect((await h.json("GET", `/public/v1/contacts/${contact.id}`)).body.data.version).toBe(2);
    const updated = (await h.rt.db.all<{ payload: string }>("SELECT payload FROM events WHERE type = 'contact.updated'"));
    expect(updated.map((row) => JSON.parse(row.payload).data.version)).toEqual([2]);
  });
});

describe("pause, resume and description", () => {
  test("a paused subscription's deliveries wait, pending, and go out on resume", async () => {
    h = await scope.harness();
    const paused = receiver("/paused");
    const control = receiver("/control");
    const sub = await h.subscribe(paused.url, ["contact.created"]);
    await h.subscribe(control.url, ["contact.created"]);
    const res = await h.json("POST", subscriptionPath(sub.id, "pause"));
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ ...sub, secret: expect.stringMatching(/^whsec_.{4}…$/), status: "paused", paused_at: expect.stringMatching(ISO), paused_by: "api_token", updated_at: res.body.data.paused_at });
    // Pausing again keeps the first pause's time.
    expect((await h.json("POST", subscriptionPath(sub.id, "pause"))).body.data.paused_at).toBe(res.body.data.paused_at);
    await createContact();
    await createContact({ first_name: "Grace" });
    // The unpaused subscription got both events: the loop has run, and skipped the paused one.
    await waitFor(() => control.received.length === 2, "the control deliveries");
    const waiting = await h.deliveries(`subscription_id=${sub.id}`);
    expect(waiting.map((d) => [d.status, d.attempts])).toEqual([["pending", 0], ["pending", 0]]);
    expect(paused.received).toEqual([]);
    const retry = await h.json("POST", `/public/v1/webhook-deliveries/${waiting[0].id}/retry`);
    expectProblem(retry, 409, "subscription-paused");

    const resumed = await h.json("POST", subscriptionPath(sub.id, "resume"));
    expect(resumed.body.data).toMatchObject({ status: "active", paused_at: null });
    await waitFor(() => paused.received.length === 2, "the deliveries that waited");
    expect(paused.received.map((got) => got.json.data.first_name).sort()).toEqual(["Ada", "Grace"]);
    const settled = await settledDeliveries(h, `subscription_id=${sub.id}`);
    expect(settled.map((d) => d.status)).toEqual(["succeeded", "succeeded"]);
  });

  test("pausing a paused subscription and resuming an active one change nothing, updated_at included, and answer the subscription (an Idempotency-Key's answer too)", async () => {
    h = await scope.harness();
    const sub = await h.subscribe(receiver().url, ["contact.created"]);
    const read = async () => (await h.json("GET", subscriptionPath(sub.id))).body.data;
    // An hour back, so that a write in this millisecond would show.
    const backdate = () => h.rt.db.run("UPDATE webhook_subscriptions SET updated_at = updated_at - ? WHERE id = ?", [HOUR, sub.id]);
    await backdate();
    const active = await read();
    const resumed = await h.json("POST", subscriptionPath(sub.id, "resume"));
    expect([resumed.status, resumed.body]).toEqual([200, { data: active }]);
    expect(await read()).toEqual(active);

    expect((await h.json("POST", subscriptionPath(sub.id, "pause"))).body.data.status).toBe("paused");
    await backdate();
    const paused = await read();
    const again = await h.json("POST", subscriptionPath(sub.id, "pause"), { headers: { "idempotency-key": "pause-again" } });
    expect([again.status, again.body]).toEqual([200, { data: paused }]);
    const replay = await h.json("POST", subscriptionPath(sub.id, "pause"), { headers: { "idempotency-key": "pause-again" } });
    expect([replay.status, replay.headers.get("idempotent-replayed"), replay.body]).toEqual([200, "true", { data: paused }]);
    expect(await read()).toEqual(paused);
  });

  test("PATCH edits the description; null clears it; a PATCH with nothing new changes nothing", async () => {
    h = await scope.harness();
    const sub = await h.subscribe(receiver().url, ["contact.created"], "old label");
    const res = await h.json("PATCH", subscriptionPath(sub.id), { body: { description: "CRM sync (production)" } });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ ...sub, secret: expect.stringMatching(/^whsec_.{4}…$/), description: "CRM sync (production)", updated_at: expect.stringMatching(ISO) });
    expect((await h.json("GET", subscriptionPath(sub.id))).body.data.description).toBe("CRM sync (production)");
    const same = await h.json("PATCH", subscriptionPath(sub.id), { body: {} });
    expect(same.body.data).toEqual(res.body.data);
    expect((await h.json("PATCH", subscriptionPath(sub.id), { body: { description: null } })).body.data.description).toBeNull();
  });
});

describe("pause, resume and description: errors", () => {
  test("PATCH refuses a new target_url or events and long descriptions with 422; unknown subscriptions are 404", async () => {
    h = await scope.harness();
    const sub = await h.subscribe(receiver().url, ["contact.created"], "label");
    expect((await h.json("PATCH", subscriptionPath(sub.id), { body: { description: "new", target_url: "https://elsewhere.example.com/", events: ["contact.deleted"] } })).body).toEqual(
      validation(
        [
          { pointer: "/target_url", detail: "does not change in place: create a subscription to the new URL, confirm it receives, then delete this one" },
          { pointer: "/events", detail: "do not change in place: create a subscription with the new events, confirm it receives, then delete this one" },
        ],
        "The target URL and events of a subscription do not change in place.",
      ),
    );
    for (const body of [{ description: "x".repeat(501) }, { description: 5 }]) expectProblem(await h.json("PATCH", subscriptionPath(sub.id), { body }), 422, "validation");
    expect((await h.json("GET", subscriptionPath(sub.id))).body.data).toMatchObject({ description: "label", events: ["contact.created"] });
    expectProblem(await h.json("PATCH", subscriptionPath("sub_missing"), { body: { description: "x" } }), 404, "not-found");
    expectProblem(await h.json("POST", subscriptionPath("sub_missing", "pause")), 404, "not-found");
    expectProblem(await h.json("POST", subscriptionPath("sub_missing", "resume")), 404, "not-found");
  });

  test("a disabled subscription is not paused (409, nothing stored), so its enable makes it active and the next event reaches it", async () => {
    h = await scope.harness();
    const r = receiver();
    r.respond(() => new Response("gone", { status: 410 }));
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    await settledDeliveries(h, `subscription_id=${sub.id}`);
    const reason = (await h.json("GET", subscriptionPath(sub.id))).body.data.disabled_reason;
    const pause = await h.json("POST", subscriptionPath(sub.id, "pause"));
    expect([pause.status, pause.body]).toEqual([
      409,
      {
        type: "urn:crm:problem:subscription-disabled",
        title: "Conflict",
        status: 409,
        detail: `The subscription ${sub.id} is disabled (${reason}); it sends nothing: enable it with POST /public/v1/webhook-subscriptions/${sub.id}/enable, then pause it.`,
      },
    ]);
    r.respond(() => new Response("ok"));
    const enabled = (await h.json("POST", subscriptionPath(sub.id, "enable"))).body.data;
    expect([enabled.status, enabled.paused_at]).toEqual(["active", null]);
    await createContact({ first_name: "Grace" });
    await waitFor(() => r.received.length === 2, "the event after the enable");
  });
});

describe("webhook lifecycle: security", () => {
  test("every new route needs a token", async () => {
    h = await scope.harness();
    const sub = await h.subscribe(receiver().url, ["contact.created"]);
    const calls: [string, string, unknown][] = [
      ["POST", subscriptionPath(sub.id, "rotate-secret"), {}],
      ["POST", subscriptionPath(sub.id, "recover"), { since: new Date().toISOString() }],
      ["POST", subscriptionPath(sub.id, "pause"), undefined],
      ["POST", subscriptionPath(sub.id, "resume"), undefined],
      ["PATCH", subscriptionPath(sub.id), { description: "x" }],
      ["GET", "/public/v1/event-types", undefined],
    ];
    for (const [method, path, body] of calls) {
      const res = await h.json(method, path, { body, headers: { authorization: "Bearer crm_wrong" } });
      expectProblem(res, 401);
      expect(res.headers.get("www-authenticate")).toStartWith("Bearer");
    }
    expect((await h.json("GET", subscriptionPath(sub.id))).body.data).toMatchObject({ status: "active", description: null, secret_rotated_at: null });
  });
});
