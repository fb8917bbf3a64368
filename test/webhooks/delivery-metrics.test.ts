import { describe, expect, test } from "bun:test";
import { SQL } from "bun";
import { WRITE_LOCK } from "../../server/db/postgres.ts";
import { metricsText } from "../../server/ops/service.ts";
import { createLogger } from "../../server/shared/log.ts";
import { addOperator, ConsoleClient } from "../console/support.ts";
import { parseExposition } from "../ops/prometheus.ts";
import { postgresOnly } from "../support/backend.ts";
import { refuseWhile, waitFor, webhookTestScope, type WebhookHarness } from "./support.ts";

// README, Health, readiness and metrics: crm_webhook_deliveries_total counts the deliveries that
// reached succeeded or failed, each once, and crm_webhook_delivery_latency_seconds the time from
// an event to its successful delivery; the queue gauge shows them leaving pending.
const scope = webhookTestScope();
let h: WebhookHarness;

const createContact = async (first_name: string) => expect((await h.json("POST", "/public/v1/contacts", { body: { first_name } })).status).toBe(201);

/** deliveryMetrics reads the delivery series of a scrape once no attempt is under way (whose outcome is counted as it ends). */
async function deliveryMetrics() {
  await waitFor(() => h.rt.deliveries.inFlightCount === 0, "the attempts under way to be counted");
  const scraped = parseExposition(await metricsText(h.rt));
  const read = (name: string, labels?: Record<string, string>) => scraped.value(name, labels);
  return {
    succeeded: read("crm_webhook_deliveries_total", { status: "succeeded" }),
    failed: read("crm_webhook_deliveries_total", { status: "failed" }),
    latencies: read("crm_webhook_delivery_latency_seconds_count"),
    attempts: { succeeded: read("crm_webhook_delivery_attempts_total", { result: "succeeded" }), failed: read("crm_webhook_delivery_attempts_total", { result: "failed" }) },
    pending: read("crm_webhook_queue_depth"),
  };
}

/** pendingAfterFirstAttempts creates `count` contacts for a subscription whose receiver answers 500 and waits until each delivery is pending after its first attempt. */
async function pendingAfterFirstAttempts(count: number) {
  const r = scope.receiver();
  r.respond(() => new Response("down", { status: 500 }));
  const sub = await h.subscribe(r.url, ["contact.created"]);
  for (let i = 0; i < count; i++) await createContact(`Ada ${i}`);
  const pending = await waitFor(async () => {
    const list = await h.deliveries("status=pending");
    return list.length === count && list.every((d) => d.attempts === 1) && list;
  }, "every delivery pending after its first attempt");
  return { r, sub, pending };
}

/** consoleDeleteOfTwoPending signs an operator in and shows the console's delete confirmation of a subscription with two pending deliveries. */
async function consoleDeleteOfTwoPending() {
  h = await scope.harness({ retrySchedule: [600] });
  const { sub } = await pendingAfterFirstAttempts(2);
  await addOperator(h.rt.db);
  const client = new ConsoleClient((request) => h.app.handle(request));
  expect((await client.signIn()).status).toBe(303);
  const path = `/console/subscriptions/${sub.id}/delete`;
  const formKey = /name="form_key" value="([^"]+)"/.exec((await client.get(path)).text)![1]!;
  return { client, path, formKey };
}

// s33 observability audit: Prometheus takes a series' first sample as its baseline, so a counter
// that appeared at its first increment hid that increment from increase(), and the usual alert
// (increase(crm_webhook_deliveries_total{status="failed"}[5m]) > 0) missed the first failure after a start.
describe("delivery metrics: a fresh process", () => {
  test("its scrape carries every delivery status and attempt result at 0, and the attempt and latency histograms empty", async () => {
    h = await scope.harness();
    const scraped = parseExposition(await metricsText(h.rt));
    expect({
      deliveries_succeeded: scraped.value("crm_webhook_deliveries_total", { status: "succeeded" }),
      deliveries_failed: scraped.value("crm_webhook_deliveries_total", { status: "failed" }),
      attempts_succeeded: scraped.value("crm_webhook_delivery_attempts_total", { result: "succeeded" }),
      attempts_failed: scraped.value("crm_webhook_delivery_attempts_total", { result: "failed" }),
      attempts_error: scraped.value("crm_webhook_delivery_attempts_total", { result: "error" }),
      attempt_durations: scraped.value("crm_webhook_delivery_attempt_duration_seconds_count"),
      latencies: scraped.value("crm_webhook_delivery_latency_seconds_count"),
    }).toEqual({ deliveries_succeeded: 0, deliveries_failed: 0, attempts_succeeded: 0, attempts_failed: 0, attempts_error: 0, attempt_durations: 0, latencies: 0 });
  });
});

describe("delivery metrics: deliveries failed with their subscription", () => {
  test("deleting a subscription counts each pending delivery it fails", async () => {
    h = await scope.harness({ retrySchedule: [600] });
    const { sub } = await pendingAfterFirstAttempts(3);
    expect((await h.request("DELETE", `/public/v1/webhook-subscriptions/${sub.id}`)).status).toBe(204);
    expect((await h.deliveries("status=failed")).length).toBe(3);
    expect(await deliveryMetrics()).toEqual({ succeeded: 0, failed: 3, latencies: 0, attempts: { succeeded: 0, failed: 3 }, pending: 0 });
  });

  test("deleting a subscription in the console counts what it fails once, the confirm form sent twice too", async () => {
    const { client, path, formKey } = await consoleDeleteOfTwoPending();
    for (let i = 0; i < 2; i++) expect((await client.post(path, { form_key: formKey })).status).toBe(303);
    expect(await deliveryMetrics()).toEqual({ succeeded: 0, failed: 2, latencies: 0, attempts: { succeeded: 0, failed: 2 }, pending: 0 });
  });

  postgresOnly("a console delete whose form key a double click took over as stale while it waited for the write lock counts what it failed once", async () => {
    const { client, path, formKey } = await consoleDeleteOfTwoPending();
    const reservedAt = async () => (await h.rt.db.get<{ created_at: number }>("SELECT created_at FROM idempotency_keys WHERE idem_key = ? AND status = 0", [formKey]))?.created_at;
    // A write may wait for the lock longer than the reservation's 60 s; the test holds the lock and
    // ages the first sending's reservation instead, so the second takes the key over. The first
    // deletes, finds its reservation gone and rolls back; the second deletes and commits; the
    // first, waiting for the key, then gets the second's answer replayed.
    const holder = new SQL({ url: h.rt.config.databaseUrl, max: 1 });
    try {
      const answers = await holder.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(${WRITE_LOCK}::bigint)`;
        const first = client.post(path, { form_key: formKey });
        await waitFor(async () => (await reservedAt()) !== undefined, "the first sending to reserve the key");
        await h.rt.db.run("UPDATE idempotency_keys SET created_at = created_at - 61000 WHERE idem_key = ?", [formKey]);
        const aged = await reservedAt();
        const second = client.post(path, { form_key: formKey });
        await waitFor(async () => (await reservedAt()) !== aged, "the second sending to take the key over");
        return { first, second };
      });
      expect([(await answers.first).status, (await answers.second).status]).toEqual([303, 303]);
    } finally {
      await holder.close();
    }
    expect((await h.deliveries("status=failed")).length).toBe(2);
    expect(await deliveryMetrics()).toEqual({ succeeded: 0, failed: 2, latencies: 0, attempts: { succeeded: 0, failed: 2 }, pending: 0 });
  });

  test("a 410 Gone counts the delivery it answered and each other pending delivery its disable fails", async () => {
    h = await scope.harness({ retrySchedule: [600] });
    const { r } = await pendingAfterFirstAttempts(3);
    r.respond(() => new Response("gone", { status: 410 }));
    await createContact("Grace");
    await waitFor(async () => (await h.deliveries("status=failed")).length === 4, "every delivery failed");
    expect(await deliveryMetrics()).toEqual({ succeeded: 0, failed: 4, latencies: 0, attempts: { succeeded: 0, failed: 4 }, pending: 0 });
  });

  test("a failing streak past the limit counts each delivery its disable fails once, the one whose retry it ended too", async () => {
    h = await scope.harness({ disableFailingAfterHours: 0.3 / 3600, retrySchedule: Array(40).fill(0.05) });
    const r = scope.receiver();
    r.respond(() => new Response("down", { status: 500 }));
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact("Ada");
    await createContact("Grace");
    await waitFor(async () => (await h.json("GET", `/public/v1/webhook-subscriptions/${sub.id}`)).body.data.status === "disabled", "the subscription to be disabled");
    // The disable commits first; its pending deliveries are failed by the writes after it.
    await waitFor(async () => (await h.deliveries("status=failed")).length === 2, "both deliveries failed");
    // How many attempts fail before the limit passes is the clock's business.
    const { attempts: _, ...deliveries } = await deliveryMetrics();
    expect(deliveries).toEqual({ succeeded: 0, failed: 2, latencies: 0, pending: 0 });
  });

  // The disable counted the deliveries it found pending, the one with an attempt under way among
  // them; that attempt, recorded before the write that fails them, ended its delivery and counted
  // it again. Each delivery is counted by the write that ends it: the attempt's, or the failing of
  // those left pending (refused here until the attempt is in, as a write refused would leave it).
  for (const [answer, counted] of [
    [500, { succeeded: 0, failed: 2 }],
    [200, { succeeded: 1, failed: 1 }],
  ] as const) {
    test(`a disable while another delivery's attempt is under way counts that delivery once, by its attempt answered ${answer}`, async () => {
      h = await scope.harness({ disableFailingAfterHours: 1, retrySchedule: [600] }, { stoppedSweepMs: 50, log: createLogger("error", () => undefined) });
      const r = scope.receiver();
      const graceAnswered = Promise.withResolvers<void>();
      r.respond(async (request) => {
        if (request.json.data.first_name !== "Grace") return new Response("down", { status: 500 });
        await graceAnswered.promise;
        return new Response("grace", { status: answer });
      });
      const sub = await h.subscribe(r.url, ["contact.created"]);
      await createContact("Ada");
      const [ada] = await waitFor(async () => {
        const list = await h.deliveries("status=pending");
        return list[0]?.attempts === 1 && list;
      }, "Ada's delivery pending after its first attempt");
      const allowUnsent = await refuseWhile(h.rt.db, "refuse_unsent", "UPDATE", "webhook_deliveries", "NEW.last_error LIKE 'not sent:%'");
      await createContact("Grace");
      await waitFor(() => r.received.some((request) => request.json.data.first_name === "Grace"), "Grace's attempt at the receiver");
      // Failing for two hours already: Ada's next failed attempt disables the subscription.
      await h.rt.db.run("UPDATE webhook_subscriptions SET failing_since = ? WHERE id = ?", [Date.now() - 2 * 3600_000, sub.id]);
      expect((await h.json("POST", `/public/v1/webhook-deliveries/${ada.id}/retry`)).status).toBe(200);
      expect((await h.json("GET", `/public/v1/webhook-subscriptions/${sub.id}`)).body.data.status).toBe("disabled");
      graceAnswered.resolve();
      await waitFor(async () => (await h.deliveries("status=pending")).length === 1, "Grace's attempt to end her delivery");
      await allowUnsent();
      await waitFor(async () => (await h.deliveries("status=pending")).length === 0, "the sweep to fail Ada's delivery");
      const { attempts: _, ...deliveries } = await deliveryMetrics();
      expect(deliveries).toEqual({ ...counted, latencies: counted.succeeded, pending: 0 });
    });
  }

  test("an attempt under way when its subscription is deleted, which the delete aborts, does not count its delivery a second time", async () => {
    h = await scope.harness({ retrySchedule: [600] });
    const r = scope.receiver();
    r.hold();
    const sub = await h.subscribe(r.url, ["contact.created"]);
    await createContact("Ada");
    await waitFor(() => r.received.length === 1, "the attempt at the receiver");
    expect((await h.request("DELETE", `/public/v1/webhook-subscriptions/${sub.id}`)).status).toBe(204);
    await waitFor(async () => (await h.deliveries("status=failed"))[0]?.attempts === 1, "the aborted attempt recorded");
    r.release();
    // The delivery is counted failed once, by the delete; its aborted attempt, which had no answer, as an error.
    expect(await deliveryMetrics()).toEqual({ succeeded: 0, failed: 1, latencies: 0, attempts: { succeeded: 0, failed: 0 }, pending: 0 });
    expect(parseExposition(await metricsText(h.rt)).value("crm_webhook_delivery_attempts_total", { result: "error" })).toBe(1);
  });
});

describe("delivery metrics: manual retries", () => {
  test("a manual retry that delivers a pending delivery counts it once, with its latency; a retry of it once succeeded counts no delivery", async () => {
    h = await scope.harness({ retrySchedule: [600] });
    const { r, pending } = await pendingAfterFirstAttempts(1);
    r.respond(() => new Response("ok"));
    const retried = await h.json("POST", `/public/v1/webhook-deliveries/${pending[0].id}/retry`);
    expect(retried.body.data).toMatchObject({ status: "succeeded", attempts: 2 });
    expect(await deliveryMetrics()).toEqual({ succeeded: 1, failed: 0, latencies: 1, attempts: { succeeded: 1, failed: 1 }, pending: 0 });

    expect((await h.json("POST", `/public/v1/webhook-deliveries/${pending[0].id}/retry`)).body.data).toMatchObject({ status: "succeeded", attempts: 3 });
    expect(await deliveryMetrics()).toEqual({ succeeded: 1, failed: 0, latencies: 1, attempts: { succeeded: 2, failed: 1 }, pending: 0 });
  });

  test("a manual retry that fails counts no delivery (the delivery stays pending); the scheduled attempt that ends it counts it failed once; a retry of it once failed counts no delivery", async () => {
    h = await scope.harness({ retrySchedule: [600] });
    const { pending } = await pendingAfterFirstAttempts(1);
    const retried = await h.json("POST", `/public/v1/webhook-deliveries/${pending[0].id}/retry`);
    expect(retried.body.data).toMatchObject({ status: "pending", attempts: 2 });
    expect(await deliveryMetrics()).toEqual({ succeeded: 0, failed: 0, latencies: 0, attempts: { succeeded: 0, failed: 2 }, pending: 1 });

    // Due now: the last scheduled attempt fails and ends it.
    await h.rt.db.run("UPDATE webhook_deliveries SET next_attempt_at = ? WHERE id = ?", [Date.now(), pending[0].id]);
    await createContact("Wake");
    // The waking contact's own delivery fails its first attempt too, and stays pending.
    const settled = async () => (await h.deliveries("status=failed")).length === 1 && (await h.deliveries("status=pending"))[0]?.attempts === 1;
    await waitFor(settled, "the delivery to end, and the waking contact's first attempt");
    expect(await deliveryMetrics()).toEqual({ succeeded: 0, failed: 1, latencies: 0, attempts: { succeeded: 0, failed: 4 }, pending: 1 });

    expect((await h.json("POST", `/public/v1/webhook-deliveries/${pending[0].id}/retry`)).body.data).toMatchObject({ status: "failed", attempts: 4 });
    expect(await deliveryMetrics()).toEqual({ succeeded: 0, failed: 1, latencies: 0, attempts: { succeeded: 0, failed: 5 }, pending: 1 });
  });
});
