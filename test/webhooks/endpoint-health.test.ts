import { describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import { createLogger } from "../../server/shared/log.ts";
import { LATEST_TIMESTAMP_MS } from "../../server/shared/time.ts";
import { metricsText } from "../../server/ops/service.ts";
import { LATENCY_BOUNDS_MS } from "../../server/webhooks/stats.ts";
import { WAITING_COUNTED } from "../../server/webhooks/model.ts";
import { MAX_PER_SUBSCRIPTION } from "../../server/webhooks/worker.ts";
import { parseExposition } from "../ops/prometheus.ts";
import { disableGone, trackFailingStreak } from "../../server/webhooks/health.ts";
import { findSubscriptionById, markSubscriptionFailing } from "../../server/webhooks/store.ts";
import { expectProblem, ISO } from "../foundation/support.ts";
import { addOperator, ConsoleClient } from "../console/support.ts";
import { addStoredDeliveries, addStoredSubscription, refuseWhile, settledDeliveries, waitFor, webhookTestScope, type WebhookHarness } from "./support.ts";

const scope = webhookTestScope();
let h: WebhookHarness;

/** SECONDS_AS_HOURS turns seconds into the hours --disable-failing-after-hours takes. */
const secondsAsHours = (s: number) => s / 3600;
const HOUR_MS = 3_600_000;
const createContact = async (first_name = "Ada") => (await h.json("POST", "/public/v1/contacts", { body: { first_name } })).body.data;
const getSubscription = async (id: string) => (await h.json("GET", `/public/v1/webhook-subscriptions/${id}`)).body.data;
const enable = (id: string, headers: Record<string, string> = {}) => h.json("POST", `/public/v1/webhook-subscriptions/${id}/enable`, { headers });
/** eventually polls an asynchronous check until it gives a value; it fails the test after 10 s. */
async function eventually<T>(check: () => Promise<T | false | undefined>, what: string): Promise<T> {
  const until = Date.now() + 10_000;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > until) throw new Error(`gave up waiting for ${what}`);
    await Bun.sleep(10);
  }
}
const stats = (id: string) => h.json("GET", `/public/v1/webhook-subscriptions/${id}/stats`);
/** failingNote is the text of the first failing-note on a console page, its markup left out. */
const failingNote = (html: string) => /<p class="failing-note">([\s\S]*?)<\/p>/.exec(html)?.[1]?.replace(/<[^>]+>/g, "") ?? null;

describe("auto-disable: happy paths", () => {
  test("a subscription whose attempts all fail past the limit is disabled with a reason, a log line and a subscription.disabled event; enable brings deliveries back", async () => {
    const logs: any[] = [];
    h = await scope.harness(
      { disableFailingAfterHours: secondsAsHours(0.3), retrySchedule: Array(40).fill(0.05) },
      { log: createLogger("warn", (line) => logs.push(JSON.parse(line))) },
    );
    const dying = scope.receiver("/dying");
    dying.respond(() => new Response("down", { status: 500 }));
    const onCall = scope.receiver("/on-call");
    const sub = await h.subscribe(dying.url, ["contact.created"], "CRM sync");
    const pager = await h.subscribe(onCall.url, ["subscription.disabled"]);
    await createContact();

    const disabled = await eventually(async () => {
      const s = await getSubscription(sub.id);
      return s.status === "disabled" && s;
    }, "the subscription to be disabled");
    expect(disabled).toMatchObject({ status: "disabled", disabled_at: expect.stringMatching(ISO), failing_since: expect.stringMatching(ISO) });
    expect(disabled.disabled_reason).toMatch(/^every attempt failed since \S+Z, for \d+(\.\d)? s \(the limit is 0\.3 s\); enable it once the receiver works again$/);
    const attemptsAtDisable = dying.received.length;
    expect(attemptsAtDisable).toBeGreaterThan(1);

    const [delivery] = await settledDeliveries(h, `subscription_id=${sub.id}`);
    expect(delivery).toMatchObject({ status: "failed", last_error: "not sent: the subscription was disabled after its attempts failed for too long" });

    await waitFor(() => onCall.received[0], "the subscription.disabled event");
    const event = new Webhook(pager.secret).verify(onCall.received[0]!.body, onCall.received[0]!.headers) as any;
    expect(event).toEqual({
      type: "subscription.disabled",
      event_id: expect.stringMatching(/^evt_[0-9A-Z]{26}$/),
      timestamp: disabled.disabled_at,
      data: {
        subscription_id: sub.id,
        target_url: dying.url,
        description: "CRM sync",
        reason: disabled.disabled_reason,
        disabled_at: disabled.disabled_at,
        failing_since: disabled.failing_since,
        pending_deliveries_failed: 1,
      },
    });
    expect(logs.filter((l) => l.msg.startsWith("webhook subscription disabled"))).toEqual([
      {
        time: expect.stringMatching(ISO),
        level: "warn",
        msg: "webhook subscription disabled: every attempt failed for too long",
        subscription_id: sub.id,
        target_host: new URL(dying.url).host,
        failing_since: disabled.failing_since,
        disable_failing_after_hours: secondsAsHours(0.3),
      },
    ]);

    // Disabled: new events are not even queued for it.
    await createContact("Grace");
    expect((await h.deliveries(`subscription_id=${sub.id}`)).length).toBe(1);

    dying.respond(() => new Response("ok"));
    const enabled = await enable(sub.id);
    expect(enabled.status).toBe(200);
    expect(enabled.body.data).toEqual({ ...disabled, status: "active", disabled_at: null, disabled_reason: null, disabled_by: null, failing_since: null, updated_at: expect.stringMatching(ISO) });
    await createContact("Linus");
    await waitFor(() => dying.received.find((r) => r.json?.data?.first_name === "Linus"), "a delivery after enabling");
    const after = await settledDeliveries(h, `subscription_id=${sub.id}`);
    expect(after.map((d) => d.status)).toEqual(["succeeded", "failed"]);
    expect((await getSubscription(sub.id)).failing_since).toBeNull();
  });

  test("the limit is when: a streak 10 minutes short of --disable-failing-after-hours is left active at its next failure, one 10 minutes past it is disabled (s37 mutation audit)", async () => {
    h = await scope.harness({ disableFailingAfterHours: 2, retrySchedule: [3600] });
    const failingFor = async (ms: number) => {
      const r = scope.receiver(`/failing-${ms}`);
      r.respond(() => new Response("down", { status: 500 }));
      const sub = await h.subscribe(r.url, ["contact.created"]);
      await h.rt.db.write((tx) => markSubscriptionFailing(tx, sub.id, Date.now() - ms));
      return sub.id;
    };
    const short = await failingFor(2 * HOUR_MS - 10 * 60_000);
    const past = await failingFor(2 * HOUR_MS + 10 * 60_000);
    await createContact();
    await waitFor(async () => (await h.deliveries()).filter((d: { attempts: number }) => d.attempts === 1).length === 2, "both attempts recorded");
    expect([(await getSubscription(short)).status, (await getSubscription(past)).status]).toEqual(["active", "disabled"]);
  });

  test("a failure recorded for a subscription disabled meanwhile (its attempt under way at a 410) disables nothing again: the 410's reason and time stay, one subscription.disabled (s37 mutation audit)", async () => {
    h = await scope.harness({ disableFailingAfterHours: 2 });
    const sub = await h.subscribe(scope.receiver().url, ["contact.created"]);
    const now = Date.now();
    await h.rt.db.write((tx) => markSubscriptionFailing(tx, sub.id, now - 3 * HOUR_MS));
    await h.rt.db.write(async (tx) => disableGone(tx, (await findSubscriptionById(tx, sub.id))!, "wd_gone", now, h.rt.deliveries.openAttemptsOf));
    const disabled = await getSubscription(sub.id);
    expect(disabled).toMatchObject({ status: "disabled", disabled_reason: "the receiver answered 410 Gone to delivery wd_gone" });
    // recordAttempt reads the subscription again for the attempt that ends after the disable.
    expect(await h.rt.db.write(async (tx) => trackFailingStreak(tx, 2, (await findSubscriptionById(tx, sub.id))!, now + 1000, h.rt.deliveries.openAttemptsOf))).toBeNull();
    expect(await getSubscription(sub.id)).toEqual(disabled);
    expect(await h.rt.db.all("SELECT type FROM events WHERE type = 'subscription.disabled'")).toEqual([{ type: "subscription.disabled" }]);
  });

  test("a success ends the failing streak, so failures spread over a longer time do not disable", async () => {
    const limitMs = 300;
    h = await scope.harness({ disableFailingAfterHours: secondsAsHours(limitMs / 1000), retrySchedule: Array(20).fill(0.02) });
    const r = scope.receiver();
    const arrivals: number[] = [];
    // Fails, fails, succeeds, over and over: each streak is short, the failures together span more than the limit.
    r.respond((_, i) => {
      arrivals.push(Date.now());
      return new Response(i % 3 === 2 ? "ok" : "down", { status: i % 3 === 2 ? 200 : 500 });
    });
    const sub = await h.subscribe(r.url, ["contact.created"]);
    for (let i = 0; arrivals.length === 0 || arrivals.at(-1)! - arrivals[0]! <= limitMs; i++) {
      await createContact(`c${i}`);
      await settledDeliveries(h);
    }
    expect(r.received.length % 3).toBe(0);
    expect(await getSubscription(sub.id)).toMatchObject({ status: "active", failing_since: null });
  });

  test("a success ends a streak begun after its delivery was claimed: a burst answered 500 once, then 200, leaves the subscription healthy", async () => {
    h = await scope.harness({ retrySchedule: [60] });
    const r = scope.receiver();
    // The ten deliveries of one batch go out in one claim; the 200s come once the 500 is recorded.
    r.respond(async (_, i) => {
      if (i === 0) return new Response("down", { status: 500 });
      await Bun.sleep(300);
      return new Response("ok");
    });
    const sub = await h.subscribe(r.url, ["account.created"]);
    const items = Array.from({ length: 10 }, (_, i) => ({ name: `Burst ${i}` }));
    expect((await h.json("POST", "/public/v1/accounts/batch", { body: { items } })).status).toBe(200);
    await waitFor(async () => (await h.deliveries("per_page=100")).filter((d: { status: string }) => d.status === "succeeded").length === 9, "the nine successes");
    expect(await getSubscription(sub.id)).toMatchObject({ status: "active", failing_since: null });
  });

  test("a delivery that uses up its attempts sends delivery.exhausted to the subscriptions that want it", async () => {
    h = await scope.harness({ retrySchedule: [0.02] });
    const failing = scope.receiver("/failing");
    failing.respond(() => new Response("nope", { status: 422 }));
    const onCall = scope.receiver("/on-call");
    const sub = await h.subscribe(failing.url, ["contact.created"]);
    const pager = await h.subscribe(onCall.url, ["delivery.exhausted", "subscription.disabled"]);
    await createContact();
    await waitFor(() => onCall.received[0], "the delivery.exhausted event");
    const [failed] = (await settledDeliveries(h)).filter((d) => d.subscription_id === sub.id);
    const event = new Webhook(pager.secret).verify(onCall.received[0]!.body, onCall.received[0]!.headers) as any;
    expect(event).toEqual({
      type: "delivery.exhausted",
      event_id: expect.stringMatching(/^evt_[0-9A-Z]{26}$/),
      timestamp: expect.stringMatching(ISO),
      data: { delivery_id: failed.id, subscription_id: sub.id, event_type: "contact.created", target_url: failing.url, attempts: 2, last_response_status: 422, last_error: null },
    });
  });
});

describe("auto-disable: errors", () => {
  test("enable of an unknown subscription is 404; of an active one answers it unchanged", async () => {
    h = await scope.harness();
    expectProblem(await enable("sub_00000000000000000000000000"), 404, "not-found");
    const sub = await h.subscribe("http://127.0.0.1:9/x", ["contact.created"]);
    const before = await getSubscription(sub.id);
    const res = await enable(sub.id, { "idempotency-key": "enable-1" });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: before });
    const replay = await enable(sub.id, { "idempotency-key": "enable-1" });
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(replay.body).toEqual({ data: before });
  });

  test("a disable whose write is refused after it, and made again by the write that records the attempt without its response, is logged once, for the write that committed", async () => {
    const logs: any[] = [];
    h = await scope.harness({ disableFailingAfterHours: 1 }, { log: createLogger("warn", (line) => logs.push(JSON.parse(line))) });
    const dying = scope.receiver();
    dying.respond(() => new Response("down", { status: 500 }));
    const sub = await h.subscribe(dying.url, ["contact.created"]);
    // Failing for two hours already: the next failed attempt disables it.
    const failingSince = Date.now() - 2 * 3600_000;
    await h.rt.db.run("UPDATE webhook_subscriptions SET failing_since = ? WHERE id = ?", [failingSince, sub.id]);
    // The statistics, written after the disable in the same write, are refused while the attempt
    // keeps the receiver's body, as an unforeseen fault would refuse them: the write rolls back,
    // and the attempt is recorded again without the receiver's response, in a write that commits.
    await refuseWhile(h.rt.db, "refuse_stats", "INSERT", "webhook_attempt_stats", "EXISTS (SELECT 1 FROM webhook_delivery_attempts WHERE response_body IS NOT NULL)");
    await createContact();

    const disabled = await eventually(async () => {
      const s = await getSubscription(sub.id);
      return s.status === "disabled" && logs.some((l) => l.msg.startsWith("webhook subscription disabled")) && s;
    }, "the subscription to be disabled, and the disable logged");
    expect(disabled.failing_since).toBe(new Date(failingSince).toISOString());
    expect(logs.map((l) => l.msg)).toEqual([
      "webhook delivery attempt recorded without the receiver's headers and body, which the database refused",
      "webhook subscription disabled: every attempt failed for too long",
    ]);
  });
});

describe("auto-disable: security", () => {
  test("reports about failing deliveries are not reported on again: an on-call receiver that fails gets no chain of delivery.exhausted", async () => {
    h = await scope.harness({ retrySchedule: [] });
    const failing = scope.receiver("/failing");
    failing.respond(() => new Response("nope", { status: 500 }));
    const sub = await h.subscribe(failing.url, ["contact.created", "delivery.exhausted"]);
    await createContact();
    const deliveries = await eventually(async () => {
      const list = await settledDeliveries(h);
      return list.length === 2 && list;
    }, "the contact delivery and one report");
    expect(deliveries.map((d: any) => [d.event_type, d.status])).toEqual([
      ["delivery.exhausted", "failed"],
      ["contact.created", "failed"],
    ]);
    expect(deliveries.every((d: any) => d.subscription_id === sub.id)).toBe(true);
  });

  test("stats and enable need a token", async () => {
    h = await scope.harness();
    const sub = await h.subscribe("http://127.0.0.1:9/x", ["contact.created"]);
    for (const [method, path] of [["GET", `/public/v1/webhook-subscriptions/${sub.id}/stats`], ["POST", `/public/v1/webhook-subscriptions/${sub.id}/enable`]] as const) {
      expectProblem(await h.json(method, path, { headers: { authorization: "" } }), 401, "unauthorized");
    }
  });
});

describe("endpoint stats", () => {
  test("a new subscription has no attempts: counts are 0, rate and latency null", async () => {
    h = await scope.harness();
    const sub = await h.subscribe("http://127.0.0.1:9/x", ["contact.created"]);
    const res = await stats(sub.id);
    expect(res.status).toBe(200);
    const empty = { from: expect.stringMatching(ISO), attempts: 0, succeeded: 0, failed: 0, success_rate: null, latency_ms: null };
    expect(res.body).toEqual({ data: { subscription_id: sub.id, status: "active", failing_since: null, deliveries_waiting: 0, last_24h: empty, last_7d: empty } });
  });

  test("a paused subscription's stats say paused, as the subscription does", async () => {
    h = await scope.harness();
    const sub = await h.subscribe("http://127.0.0.1:9/x", ["contact.created"]);
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${sub.id}/pause`)).body.data.status).toBe("paused");
    expect((await stats(sub.id)).body.data.status).toBe("paused");
    await h.json("POST", `/public/v1/webhook-subscriptions/${sub.id}/resume`);
    expect((await stats(sub.id)).body.data.status).toBe("active");
  });

  test("attempts are counted by outcome over 24 hours and 7 days, with latency percentiles from the histogram", async () => {
    h = await scope.harness({ retrySchedule: [0.02, 0.02] });
    const r = scope.receiver();
    r.respond((_, i) => new Response("x", { status: i % 3 === 0 ? 503 : 200 }));
    const sub = await h.subscribe(r.url, ["contact.created"]);
    for (let i = 0; i < 3; i++) {
      await createContact(`c${i}`);
      await settledDeliveries(h);
    }
    // Requests 0 and 3 failed (503) and were retried: 5 attempts, 3 succeeded.
    expect(r.received.length).toBe(5);
    const { body } = await stats(sub.id);
    const window = {
      from: expect.stringMatching(ISO),
      attempts: 5,
      succeeded: 3,
      failed: 2,
      success_rate: 0.6,
      latency_ms: { p50: expect.any(Number), p90: expect.any(Number), p99: expect.any(Number) },
    };
    expect(body).toEqual({ data: { subscription_id: sub.id, status: "active", failing_since: null, deliveries_waiting: 0, last_24h: window, last_7d: window } });
    const { p50, p90, p99 } = body.data.last_24h.latency_ms;
    expect(LATENCY_BOUNDS_MS).toContain(p50);
    expect(p50).toBeLessThanOrEqual(p90);
    expect(p90).toBeLessThanOrEqual(p99);
    const detail = await Promise.all((await h.deliveries()).map((d: any) => h.delivery(d.id)));
    const longest = Math.max(...detail.flatMap((d) => d.attempt_history.map((a: any) => a.duration_ms)));
    expect(p99).toBeGreaterThanOrEqual(longest);
    expect(p99).toBeLessThanOrEqual(Math.max(1, longest * 1.25));
    expect(Date.parse(body.data.last_7d.from)).toBeLessThan(Date.parse(body.data.last_24h.from));
  });

  test("deliveries due and not started are counted: in the stats of their subscription, and in crm_webhook_deliveries_waiting for those not paused (s36 slow-receiver cut)", async () => {
    h = await scope.harness({ deliveryTimeoutMs: 30_000, rateWriteBurst: 1000 });
    const hung = scope.receiver("/hung");
    hung.hold();
    const busy = await h.subscribe(hung.url, ["contact.created"]);
    const paused = await h.subscribe(scope.receiver("/paused").url, ["account.created"]);
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${paused.id}/pause`)).status).toBe(200);
    const backlog = MAX_PER_SUBSCRIPTION + 8;
    expect((await h.json("POST", "/public/v1/contacts/batch", { body: { items: Array.from({ length: backlog }, (_, i) => ({ first_name: `n${i}` })) } })).status).toBe(200);
    expect((await h.json("POST", "/public/v1/accounts/batch", { body: { items: Array.from({ length: 3 }, (_, i) => ({ name: `Acme ${i}` })) } })).status).toBe(200);
    await waitFor(() => hung.received.length === MAX_PER_SUBSCRIPTION, "the hung receiver's attempts at once");
    const waiting = async (id: string) => (await stats(id)).body.data.deliveries_waiting;
    const scraped = parseExposition(await metricsText(h.rt));
    expect({ busy: await waiting(busy.id), paused: await waiting(paused.id), gauge: scraped.value("crm_webhook_deliveries_waiting"), type: scraped.types.get("crm_webhook_deliveries_waiting") }).toEqual({
      busy: backlog - MAX_PER_SUBSCRIPTION,
      paused: 3,
      gauge: backlog - MAX_PER_SUBSCRIPTION,
      type: "gauge",
    });
    hung.release();
    await settledDeliveries(h, `subscription_id=${busy.id}`);
    expect(await waiting(busy.id)).toBe(0);
  });

  test("deliveries_waiting counts a backlog up to WAITING_COUNTED (10,000), that many meaning as many or more: a stats request reads a bounded part of the index, not the whole backlog (s36 leftovers)", async () => {
    h = await scope.harness();
    const id = await addStoredSubscription(h.rt.db, Date.now());
    // Paused, it keeps its backlog waiting for the resume, which deliveries_waiting counts.
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${id}/pause`)).status).toBe(200);
    await h.rt.db.write((tx) => addStoredDeliveries(tx, id, Date.now() - 1000, "pending", WAITING_COUNTED - 1));
    expect((await stats(id)).body.data.deliveries_waiting).toBe(WAITING_COUNTED - 1);
    await h.rt.db.write((tx) => addStoredDeliveries(tx, id, Date.now() - 1000, "pending", 2));
    expect((await stats(id)).body.data.deliveries_waiting).toBe(WAITING_COUNTED);
    expect(WAITING_COUNTED).toBe(10_000);
  }, 60_000);

  test("an unknown subscription is 404", async () => {
    h = await scope.harness();
    expectProblem(await stats("sub_00000000000000000000000000"), 404, "not-found");
  });
});

describe("auto-disable in the console", () => {
  test("the subscriptions page shows why a subscription is disabled and enables it again", async () => {
    h = await scope.harness({ disableFailingAfterHours: secondsAsHours(0.1), retrySchedule: Array(40).fill(0.03) });
    const r = scope.receiver();
    r.respond(() => new Response("down", { status: 503 }));
    const sub = await h.subscribe(r.url, ["contact.created"], "Billing sync");
    await createContact();
    const disabled = await eventually(async () => {
      const s = await getSubscription(sub.id);
      return s.status === "disabled" && s;
    }, "the subscription to be disabled");

    await addOperator(h.rt.db);
    const client = new ConsoleClient((request) => h.app.handle(request));
    expect((await client.signIn()).status).toBe(303);
    const page = await client.get("/console/subscriptions");
    expect(page.status).toBe(200);
    const row = page.text.slice(page.text.indexOf(`data-subscription-id="${sub.id}"`));
    expect(row).toContain(Bun.escapeHTML(disabled.disabled_reason));
    expect(row).toContain(`action="/console/subscriptions/${sub.id}/enable"`);

    const enabled = await client.post(`/console/subscriptions/${sub.id}/enable`, {});
    expect(enabled.status).toBe(303);
    expect(enabled.headers.get("location")).toBe("/console/subscriptions?enabled=1");
    expect(await getSubscription(sub.id)).toMatchObject({ status: "active", disabled_reason: null, failing_since: null });
    const after = await client.get("/console/subscriptions?enabled=1");
    expect(after.text).toContain("Subscription enabled.");
    expect(after.text).not.toContain(`action="/console/subscriptions/${sub.id}/enable"`);
  });

  test("with --disable-failing-after-hours 0 a subscription whose attempts all fail is never disabled, and its note says so", async () => {
    h = await scope.harness({ disableFailingAfterHours: 0, retrySchedule: Array(10).fill(0.02) });
    const r = scope.receiver();
    r.respond(() => new Response("down", { status: 503 }));
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h, `subscription_id=${sub.id}`);
    expect(delivery).toMatchObject({ status: "failed", attempts: 11, last_response_status: 503 });
    const { status, disabled_reason, failing_since } = await getSubscription(sub.id);
    expect([status, disabled_reason, failing_since]).toEqual(["active", null, expect.stringMatching(ISO)]);

    await addOperator(h.rt.db);
    const client = new ConsoleClient((request) => h.app.handle(request));
    expect((await client.signIn()).status).toBe(303);
    const since = `${failing_since.slice(0, 10)} ${failing_since.slice(11, 19)} UTC`;
    for (const path of ["/console/", "/console/subscriptions", `/console/subscriptions/${sub.id}`]) {
      const page = await client.get(path);
      expect([path, page.status, failingNote(page.text)]).toEqual([path, 200, `Failing since ${since}; not disabled automatically (--disable-failing-after-hours is 0).`]);
    }
  });

  test("a disable time past year 9999 (the largest setting, a failing streak begun late in 9999) is said as hours rather than a date, and the pages answer", async () => {
    h = await scope.harness({ disableFailingAfterHours: 87_600 });
    const sub = await h.subscribe(scope.receiver().url, ["contact.created"]);
    await h.rt.db.write((tx) => markSubscriptionFailing(tx, sub.id, LATEST_TIMESTAMP_MS - 999));
    await addOperator(h.rt.db);
    const client = new ConsoleClient((request) => h.app.handle(request));
    expect((await client.signIn()).status).toBe(303);
    for (const path of ["/console/", "/console/subscriptions", `/console/subscriptions/${sub.id}`]) {
      const page = await client.get(path);
      expect([path, page.status, failingNote(page.text)]).toEqual([path, 200, "Failing since 9999-12-31 23:59:59 UTC; disabled automatically 87600 h after that if every attempt goes on failing."]);
    }
  });

  test("a failing streak already past a lowered limit is said to be disabled at its next attempt, not at a time already gone", async () => {
    h = await scope.harness({ disableFailingAfterHours: 5 });
    const sub = await h.subscribe(scope.receiver().url, ["contact.created"]);
    // Failing for 10 h under the 120 h default, then the service restarted with 5.
    const failingSince = Date.now() - 10 * 3_600_000;
    await h.rt.db.write((tx) => markSubscriptionFailing(tx, sub.id, failingSince));
    await addOperator(h.rt.db);
    const client = new ConsoleClient((request) => h.app.handle(request));
    expect((await client.signIn()).status).toBe(303);
    const since = `${new Date(failingSince).toISOString().slice(0, 19).replace("T", " ")} UTC`;
    for (const path of ["/console/", "/console/subscriptions", `/console/subscriptions/${sub.id}`]) {
      const page = await client.get(path);
      expect([path, page.status, failingNote(page.text)]).toEqual([path, 200, `Failing since ${since}; disabled automatically at its next attempt if that fails too (it has failed for longer than the 5 h limit).`]);
    }
  });

  test("enabling without the form's CSRF token is refused and changes nothing", async () => {
    h = await scope.harness({ disableFailingAfterHours: secondsAsHours(0.1), retrySchedule: Array(40).fill(0.03) });
    const r = scope.receiver();
    r.respond(() => new Response("gone", { status: 410 }));
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact();
    await eventually(async () => (await getSubscription(sub.id)).status === "disabled", "the subscription to be disabled");
    await addOperator(h.rt.db);
    const client = new ConsoleClient((request) => h.app.handle(request));
    expect((await client.signIn()).status).toBe(303);
    await client.get("/console/subscriptions");
    const refused = await client.post(`/console/subscriptions/${sub.id}/enable`, { _csrf: null });
    expect(refused.status).toBe(403);
    expect((await getSubscription(sub.id)).status).toBe("disabled");
  });
});
