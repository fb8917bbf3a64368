import { describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import { MAX_ATTEMPTS_SHOWN } from "../../server/limits/limits.ts";
import { createOperator } from "../../server/operators/service.ts";
import { VERSION } from "../../server/version.ts";
import { MAX_MANUAL_ATTEMPTS, MAX_PER_SUBSCRIPTION } from "../../server/webhooks/worker.ts";
import { ConsoleClient, OPERATOR } from "../console/support.ts";
import { expectProblem, ISO } from "../foundation/support.ts";
import { attemptsBusy, retryAnswerOf, settledDeliveries, waitFor, webhookTestScope, type WebhookHarness } from "./support.ts";

const scope = webhookTestScope();
const receiver = scope.receiver;
let h: WebhookHarness;

const createContact = async (first_name = "Ada") => (await h.json("POST", "/public/v1/contacts", { body: { first_name } })).body.data;

describe("delivery history: happy paths", () => {
  test("a delivery's detail has the body sent and every attempt with request and response", async () => {
    h = await scope.harness({ retrySchedule: [0.01] });
    const r = receiver();
    const big = "x".repeat(5000);
    r.respond((_, i) =>
      i === 0
        ? new Response(big, { status: 503, headers: { "content-type": "text/plain", "retry-after": "0", "x-request-id": "abc", "x-secret-internal": "not kept" } })
        : Response.json({ ok: true }, { headers: { server: "receiver/1" } }),
    );
    const sub = await h.subscribe(r.url, ["contact.created"]);
    const contact = await createContact();
    const [delivery] = await settledDeliveries(h);
    const detail = await h.delivery(delivery.id);
    expect(detail).toEqual({
      ...delivery,
      payload: { type: "contact.created", event_id: delivery.event_id, timestamp: contact.created_at, data: contact },
      payload_erased_at: null,
      attempt_history: [
        {
          attempt: 1,
          trigger: "scheduled",
          started_at: expect.stringMatching(ISO),
          duration_ms: expect.any(Number),
          request_headers: {
            "content-type": "application/json",
            "user-agent": `crm-webhooks/${VERSION}`,
            "webhook-id": delivery.id,
            "webhook-timestamp": r.received[0]!.headers["webhook-timestamp"],
            "webhook-signature": r.received[0]!.headers["webhook-signature"],
          },
          response_status: 503,
          response_headers: { "content-type": "text/plain", "content-length": "5000", "retry-after": "0", "x-request-id": "abc" },
          response_body: "x".repeat(1024),
          error: null,
        },
        {
          attempt: 2,
          trigger: "scheduled",
          started_at: expect.stringMatching(ISO),
          duration_ms: expect.any(Number),
          request_headers: expect.objectContaining({ "webhook-id": delivery.id }),
          response_status: 200,
          response_headers: { "content-type": "application/json;charset=utf-8", "content-length": "11", server: "receiver/1" },
          response_body: '{"ok":true}',
          error: null,
        },
      ],
    });
    expect(JSON.parse(r.received[1]!.body)).toEqual(detail.payload);
    new Webhook(sub.secret).verify(r.received[1]!.body, r.received[1]!.headers);
  });

  test("the list is newest first and filters by subscription_id, event, event_id, status and created_after", async () => {
    h = await scope.harness({ retrySchedule: [] });
    const ok = receiver("/ok");
    const bad = receiver("/bad");
    bad.respond(() => new Response("no", { status: 400 }));
    const okSub = await h.subscribe(ok.url, ["contact.created", "contact.deleted"]);
    const badSub = await h.subscribe(bad.url, ["contact.created"]);
    const first = await createContact("first");
    await Bun.sleep(2);
    const second = await createContact("second");
    await h.request("DELETE", `/public/v1/contacts/${first.id}`);
    const all = await settledDeliveries(h);
    expect(all.length).toBe(5);
    const sorted = [...all].sort((a, b) => (a.created_at === b.created_at ? (a.id < b.id ? 1 : -1) : a.created_at < b.created_at ? 1 : -1));
    expect(all.map((d) => d.id)).toEqual(sorted.map((d) => d.id));
    const ids = async (query: string) => (await h.deliveries(query)).map((d) => d.id);
    expect(await ids(`subscription_id=${badSub.id}`)).toEqual(all.filter((d) => d.subscription_id === badSub.id).map((d) => d.id));
    expect((await h.deliveries(`subscription_id=${okSub.id}`)).length).toBe(3);
    expect((await h.deliveries("event=contact.deleted")).map((d) => [d.event_type, d.subscription_id])).toEqual([["contact.deleted", okSub.id]]);
    expect((await h.deliveries("status=failed")).map((d) => [d.status, d.last_response_status, d.subscription_id])).toEqual([
      ["failed", 400, badSub.id],
      ["failed", 400, badSub.id],
    ]);
    const secondEvent = all.find((d) => d.created_at === second.created_at && d.event_type === "contact.created")!.event_id;
    expect((await h.deliveries(`event_id=${secondEvent}`)).map((d) => d.subscription_id).sort()).toEqual([okSub.id, badSub.id].sort());
    const after = await h.deliveries(`created_after=${encodeURIComponent(first.created_at)}`);
    expect(after.every((d) => d.created_at > first.created_at)).toBe(true);
    expect(after.length).toBe(3);
    const page = await h.json("GET", "/public/v1/webhook-deliveries?per_page=2");
    expect(page.body.meta).toEqual({ current_page: 1, last_page: 3, per_page: 2, total: 5, next_cursor: expect.any(String) });
    const next = await h.json("GET", `/public/v1/webhook-deliveries?per_page=2&cursor=${page.body.meta.next_cursor}`);
    expect(next.body.data.map((d: any) => d.id)).toEqual(all.slice(2, 4).map((d) => d.id));
  });

  test("POST /:id/retry makes a manual attempt now and answers with the delivery afterwards", async () => {
    h = await scope.harness({ retrySchedule: [] });
    const r = receiver();
    r.respond(() => new Response("down", { status: 500 }));
    await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [failed] = await settledDeliveries(h);
    expect(failed).toMatchObject({ status: "failed", attempts: 1 });
    r.respond(() => new Response("back"));
    const res = await h.json("POST", `/public/v1/webhook-deliveries/${failed.id}/retry`, { headers: { "idempotency-key": "retry-1" } });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ ...failed, status: "succeeded", attempts: 2, last_response_status: 200, last_error: null, updated_at: expect.stringMatching(ISO) });
    expect(r.received.map((got) => got.headers["webhook-id"])).toEqual([failed.id, failed.id]);
    const history = (await h.delivery(failed.id)).attempt_history.map((a: any) => [a.attempt, a.trigger, a.response_status]);
    expect(history).toEqual([[1, "scheduled", 500], [2, "manual", 200]]);
    const replay = await h.json("POST", `/public/v1/webhook-deliveries/${failed.id}/retry`, { headers: { "idempotency-key": "retry-1" } });
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(replay.body).toEqual(res.body);
    expect(r.received.length).toBe(2);
  });

  test("a delivery's detail shows its newest attempts, at most MAX_ATTEMPTS_SHOWN, oldest first: manual retries add attempts without end", async () => {
    h = await scope.harness({ retrySchedule: [], rateWriteBurst: 1000 });
    const r = receiver();
    await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    for (let i = 0; i < MAX_ATTEMPTS_SHOWN + 1; i++) expect((await h.json("POST", `/public/v1/webhook-deliveries/${delivery.id}/retry`)).status).toBe(200);
    const detail = await h.delivery(delivery.id);
    expect([detail.attempts, detail.attempt_history.map((a: { attempt: number; trigger: string }) => [a.attempt, a.trigger])]).toEqual([
      MAX_ATTEMPTS_SHOWN + 2,
      Array.from({ length: MAX_ATTEMPTS_SHOWN }, (_, i) => [i + 3, "manual"]),
    ]);
    // The console's page of it says which are left out.
    await createOperator(h.rt.db, OPERATOR);
    const client = new ConsoleClient((request) => h.app.handle(request));
    expect((await client.signIn()).status).toBe(303);
    const page = (await client.get(`/console/deliveries/${delivery.id}`)).text;
    expect([page.includes(`The newest ${MAX_ATTEMPTS_SHOWN} attempts are shown; attempts 1 to 2 are not.`), page.includes("<h3>Attempt 3</h3>"), page.includes("<h3>Attempt 2</h3>")]).toEqual([true, true, false]);
  });

  test("a failed manual attempt of a finished delivery leaves it failed, with no automatic retry", async () => {
    h = await scope.harness({ retrySchedule: [0.01] });
    const r = receiver();
    r.respond(() => new Response("down", { status: 500 }));
    await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [failed] = await settledDeliveries(h);
    const res = await h.json("POST", `/public/v1/webhook-deliveries/${failed.id}/retry`);
    expect(res.body.data).toMatchObject({ status: "failed", attempts: 3, next_attempt_at: null, last_response_status: 500 });
  });

  test("a failed manual attempt of a succeeded delivery leaves it succeeded: it is not among the failures, and a recovery does not send it again", async () => {
    h = await scope.harness();
    const r = receiver();
    const sub = await h.subscribe(r.url, ["contact.created"]);
    const since = new Date(Date.now() - 1000).toISOString();
    await createContact();
    const [delivered] = await settledDeliveries(h);
    r.respond(() => new Response("down for maintenance", { status: 500 }));
    const res = await h.json("POST", `/public/v1/webhook-deliveries/${delivered.id}/retry`);
    expect(res.body.data).toEqual({ ...delivered, status: "succeeded", attempts: 2, last_response_status: 500, last_error: null, updated_at: expect.stringMatching(ISO) });
    const recovered = await h.json("POST", `/public/v1/webhook-subscriptions/${sub.id}/recover`, { body: { since } });
    expect({ failed: await h.deliveries("status=failed"), queued: recovered.body.data.queued, received: r.received.length }).toEqual({ failed: [], queued: 0, received: 2 });
  });

  test("a next attempt stored past the year 9999 (a retry delay an earlier version accepted) reads as the last instant RFC 3339 writes, not a 500", async () => {
    h = await scope.harness({ retrySchedule: [3600] });
    const r = receiver();
    r.respond(() => new Response("down", { status: 500 }));
    await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [pending] = await waitFor(async () => {
      const list = await h.deliveries();
      return list[0]?.attempts === 1 && list;
    }, "the first attempt");
    // Past Date's range, and within what a PostgreSQL bigint holds.
    await h.rt.db.run("UPDATE webhook_deliveries SET next_attempt_at = ? WHERE id = ?", [9e18, pending.id]);
    const list = await h.json("GET", "/public/v1/webhook-deliveries");
    const detail = await h.json("GET", `/public/v1/webhook-deliveries/${pending.id}`);
    const farthest = { ...pending, next_attempt_at: "9999-12-31T23:59:59.999Z" };
    expect([list.status, list.body.data, detail.status, detail.body.data]).toEqual([
      200,
      [farthest],
      200,
      { ...farthest, payload: expect.objectContaining({ type: "contact.created" }), payload_erased_at: null, attempt_history: [expect.objectContaining({ attempt: 1, response_status: 500 })] },
    ]);
  });
});

describe("delivery history: errors", () => {
  test("unknown delivery ids are 404 for get and retry", async () => {
    h = await scope.harness();
    for (const [method, path] of [["GET", ""], ["POST", "/retry"]] as const) {
      const res = await h.json(method, `/public/v1/webhook-deliveries/dlv_nope${path}`);
      expectProblem(res, 404, "not-found");
      expect(res.body.detail).toBe('No webhook delivery with id "dlv_nope" exists.');
    }
  });

  test("retrying a delivery whose subscription was deleted is 409 and sends nothing", async () => {
    h = await scope.harness({ retrySchedule: [] });
    const r = receiver();
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    await h.request("DELETE", `/public/v1/webhook-subscriptions/${sub.id}`);
    const res = await h.json("POST", `/public/v1/webhook-deliveries/${delivery.id}/retry`);
    expectProblem(res, 409, "subscription-deleted");
    expect(r.received.length).toBe(1);
  });

  test("retrying while an attempt is under way is 409", async () => {
    h = await scope.harness({ deliveryTimeoutMs: 10_000 });
    const r = receiver();
    r.hold();
    await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    await waitFor(() => r.received[0], "the attempt to start");
    const [delivery] = await h.deliveries();
    const res = await h.json("POST", `/public/v1/webhook-deliveries/${delivery.id}/retry`);
    expectProblem(res, 409, "delivery-in-progress");
    expect(res.headers.get("retry-after")).toBe("1");
    r.release();
  });

  test("many retries of one delivery at once make one attempt: the others are 409 in progress, not 503 busy, and another delivery's retry beside them goes through", async () => {
    h = await scope.harness({ deliveryTimeoutMs: 10_000, rateWriteBurst: 1000 });
    const r = receiver();
    await h.subscribe(r.url, ["contact.created"]);
    await createContact("one");
    await createContact("other");
    const [one, other] = await settledDeliveries(h);
    r.hold();
    let answered = 0;
    const retries = Array.from({ length: 20 }, () => h.json("POST", `/public/v1/webhook-deliveries/${one.id}/retry`).finally(() => answered++));
    const beside = h.json("POST", `/public/v1/webhook-deliveries/${other.id}/retry`);
    await waitFor(() => r.received.length === 4 && answered === 19, "the two manual attempts open at the receiver and every other retry answered");
    r.release();
    const statuses = (await Promise.all(retries)).map((res) => res.status).sort();
    expect({ statuses, beside: (await beside).status }).toEqual({ statuses: [200, ...Array.from({ length: 19 }, () => 409)], beside: 200 });
    expect(r.received.length).toBe(4);
  });

  test("a manual retry beyond MAX_MANUAL_ATTEMPTS under way at once is 503 and sends nothing: with the loop's attempts they stay within what Bun's fetch sends at once", async () => {
    h = await scope.harness({ deliveryTimeoutMs: 10_000, rateWriteBurst: 1000 });
    const r = receiver();
    await h.subscribe(r.url, ["contact.created"]);
    for (let i = 0; i <= MAX_MANUAL_ATTEMPTS; i++) await createContact(`n${i}`);
    const [extra, ...deliveries] = await settledDeliveries(h);
    r.hold();
    const retries = deliveries.map((d) => h.json("POST", `/public/v1/webhook-deliveries/${d.id}/retry`));
    await waitFor(() => r.received.length === 2 * deliveries.length + 1, "every manual attempt open at the receiver");
    const refused = await h.json("POST", `/public/v1/webhook-deliveries/${extra.id}/retry`);
    // Retry-After is when the oldest manual attempt ends at the latest, at its timeout (10 s).
    const retryAfter = Number(refused.headers.get("retry-after"));
    expect({ status: refused.status, retryAfter: retryAfter >= 1 && retryAfter <= 10, body: refused.body }).toEqual({
      status: 503,
      retryAfter: true,
      body: {
        type: "urn:crm:problem:manual-attempts-busy",
        title: "Service Unavailable",
        status: 503,
        detail: `${MAX_MANUAL_ATTEMPTS} manual attempts are under way, the most at once; retry the delivery in a moment.`,
      },
    });
    r.release();
    expect((await Promise.all(retries)).map((res) => res.status)).toEqual(deliveries.map(() => 200));
    expect(r.received.length).toBe(2 * deliveries.length + 1);
    expect((await h.json("POST", `/public/v1/webhook-deliveries/${extra.id}/retry`)).status).toBe(200);
  });

  test("a manual retry while MAX_PER_SUBSCRIPTION attempts of its subscription are under way is 503 and sends nothing: its receiver never has more than 32 requests open", async () => {
    h = await scope.harness({ deliveryTimeoutMs: 10_000, rateWriteBurst: 1000 });
    const r = receiver();
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact("settled");
    const [settled] = await settledDeliveries(h);
    r.hold();
    // One commit makes them due together: one claim round takes them all (one by one, the loop tops a busy receiver up in batches).
    const batch = await h.json("POST", "/public/v1/contacts/batch", { body: { items: Array.from({ length: MAX_PER_SUBSCRIPTION }, (_, i) => ({ first_name: `n${i}` })) } });
    expect(batch.status).toBe(200);
    await waitFor(() => r.received.length === 1 + MAX_PER_SUBSCRIPTION, "the subscription's every attempt open at the receiver");
    const refused = await h.json("POST", `/public/v1/webhook-deliveries/${settled.id}/retry`);
    // Retry-After is when the oldest of them ends at the latest, at its timeout (10 s).
    const retryAfter = Number(refused.headers.get("retry-after"));
    expect({ ...retryAnswerOf(refused), retryAfter: retryAfter >= 1 && retryAfter <= 10 }).toEqual({
      ...attemptsBusy(`The subscription ${sub.id} has ${MAX_PER_SUBSCRIPTION} attempts under way, the most at once; retry the delivery in a moment.`),
      retryAfter: true,
    });
    r.release();
    await settledDeliveries(h);
    expect(r.received.length).toBe(1 + MAX_PER_SUBSCRIPTION);
    expect((await h.json("POST", `/public/v1/webhook-deliveries/${settled.id}/retry`)).status).toBe(200);
  });

  test("manual attempts count towards MAX_PER_SUBSCRIPTION when the loop claims, those of finished deliveries too", async () => {
    h = await scope.harness({ deliveryTimeoutMs: 10_000, rateWriteBurst: 1000 });
    const r = receiver();
    await h.subscribe(r.url, ["contact.created"]);
    for (let i = 0; i < MAX_MANUAL_ATTEMPTS; i++) await createContact(`n${i}`);
    const settled = await settledDeliveries(h);
    r.hold();
    const retries = settled.map((d) => h.json("POST", `/public/v1/webhook-deliveries/${d.id}/retry`));
    await waitFor(() => r.received.length === 2 * MAX_MANUAL_ATTEMPTS, "every manual attempt open at the receiver");
    const batch = await h.json("POST", "/public/v1/contacts/batch", { body: { items: Array.from({ length: MAX_PER_SUBSCRIPTION }, (_, i) => ({ first_name: `b${i}` })) } });
    expect(batch.status).toBe(200);
    // One claim round starts every attempt it takes at once; the first to arrive says it has run.
    await waitFor(() => r.received.length > 2 * MAX_MANUAL_ATTEMPTS, "the loop's attempts of the batch");
    expect(h.rt.deliveries.inFlightCount).toBe(MAX_PER_SUBSCRIPTION);
    r.release();
    expect((await Promise.all(retries)).map((res) => res.status)).toEqual(settled.map(() => 200));
    await settledDeliveries(h);
  });

  test("bad list parameters are 422 naming them", async () => {
    h = await scope.harness();
    const res = await h.json("GET", "/public/v1/webhook-deliveries?status=lost&event=contact.merged&created_after=yesterday");
    expectProblem(res, 422, "validation");
    expect(res.body.errors).toEqual(
      expect.arrayContaining([
        { parameter: "status", detail: "must be one of: pending, succeeded, failed" },
        { parameter: "event", detail: "must be one of: contact.created, contact.updated, contact.deleted, account.created, account.updated, account.deleted, webhook.ping, subscription.disabled, delivery.exhausted" },
      ]),
    );
    const time = await h.json("GET", "/public/v1/webhook-deliveries?created_after=yesterday");
    expect(time.body.errors).toEqual([{ parameter: "created_after", detail: "must be an RFC 3339 date-time, e.g. 2026-11-21T10:00:00Z" }]);
    const cursor = await h.json("GET", "/public/v1/webhook-deliveries?cursor=bogus");
    expectProblem(cursor, 422, "validation");
    const repeated = await h.json("GET", "/public/v1/webhook-deliveries?status=failed&per_page=5&status=pending");
    expectProblem(repeated, 422, "validation");
    expect(repeated.body.errors).toEqual([{ parameter: "status", detail: "must be given once" }]);
  });
});

describe("delivery history: security", () => {
  test("every route needs a token", async () => {
    h = await scope.harness();
    for (const [method, path] of [["GET", ""], ["GET", "/dlv_x"], ["POST", "/dlv_x/retry"]] as const) {
      const res = await h.json(method, `/public/v1/webhook-deliveries${path}`, { headers: { authorization: "Bearer crm_wrong" } });
      expectProblem(res, 401, "unauthorized");
    }
  });

  test("no secret appears in the delivery history or the subscription list", async () => {
    h = await scope.harness();
    const r = receiver();
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    const texts = [
      JSON.stringify(await h.delivery(delivery.id)),
      JSON.stringify((await h.json("GET", "/public/v1/webhook-subscriptions")).body),
      JSON.stringify((await h.json("GET", `/public/v1/webhook-subscriptions/${sub.id}`)).body),
    ];
    for (const text of texts) expect(text).not.toContain(sub.secret.slice(10));
  });
});
