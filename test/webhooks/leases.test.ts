import { describe, expect, test } from "bun:test";
import { metricsText } from "../../server/ops/service.ts";
import { createLogger } from "../../server/shared/log.ts";
import { ISO } from "../foundation/support.ts";
import { postgresOnly } from "../support/backend.ts";
import { parseExposition } from "../ops/prometheus.ts";
import { addStoredDeliveries, waitFor, webhookTestScope, type WebhookHarness } from "./support.ts";

const scope = webhookTestScope();
let h: WebhookHarness;

interface StoredDelivery {
  status: string;
  attempts: number;
  locked_until: number | null;
}

const stored = async (id: string) => (await h.rt.db.get<StoredDelivery>("SELECT status, attempts, locked_until FROM webhook_deliveries WHERE id = ?", [id]))!;

/**
 * heldAttempt subscribes a receiver that holds every request, creates a contact and waits until
 * its delivery's first attempt is at the receiver; it returns the receiver and the delivery as the API shows it then.
 */
async function heldAttempt() {
  const r = scope.receiver();
  r.hold();
  await h.subscribe(r.url, ["contact.created"]);
  expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).status).toBe(201);
  await waitFor(() => r.received.length === 1, "the attempt at the receiver");
  const [listed] = await h.deliveries();
  return { r, delivery: await h.delivery(listed.id) };
}

/** takeOverLease does what another claim does once a lease has run out: it leases the delivery until `until`. */
async function takeOverLease(id: string, until: number): Promise<void> {
  await h.rt.db.write((tx) => tx.run("UPDATE webhook_deliveries SET locked_until = ? WHERE id = ?", [until, id]));
}

/**
 * leaseRunOut makes a delivery's lease read as run out, as a wall clock stepped forward past it
 * would, by writing a time passed; it returns how to put the lease back as it was, which a real
 * step leaves alone, so that the attempt open is recorded as the holder of its lease.
 */
async function leaseRunOut(id: string): Promise<() => Promise<void>> {
  const { locked_until } = await stored(id);
  await takeOverLease(id, Date.now() - 1);
  return () => takeOverLease(id, locked_until!);
}

describe("webhook leases: an attempt that outlived its lease", () => {
  test("its outcome is recorded as an attempt, and the delivery stays with the claim that took it over", async () => {
    const logged: any[] = [];
    h = await scope.harness({}, { log: createLogger("warn", (line) => logged.push(JSON.parse(line))) });
    const { r, delivery } = await heldAttempt();
    expect(delivery).toMatchObject({ status: "pending", attempts: 0, attempt_history: [] });
    const takenUntil = Date.now() + 10 * 60_000;
    await takeOverLease(delivery.id, takenUntil);

    r.respond(() => new Response("too late", { status: 500 }));
    r.release();
    const detail = await waitFor(async () => {
      const d = await h.delivery(delivery.id);
      return d.attempt_history.length === 1 && d;
    }, "the late attempt to be recorded");

    // A failure would otherwise have scheduled a retry and freed the lease.
    expect(detail).toEqual({
      ...delivery,
      attempts: 1,
      updated_at: expect.stringMatching(ISO),
      attempt_history: [
        {
          attempt: 1,
          trigger: "scheduled",
          started_at: expect.stringMatching(ISO),
          duration_ms: expect.any(Number),
          request_headers: expect.objectContaining({ "webhook-id": delivery.id }),
          response_status: 500,
          response_headers: expect.objectContaining({ "content-type": expect.stringContaining("text/plain") }),
          response_body: "too late",
          error: null,
        },
      ],
    });
    expect(await stored(delivery.id)).toEqual({ status: "pending", attempts: 1, locked_until: takenUntil });

    // The attempt counts; the delivery is counted by the claim that decides it.
    const metrics = parseExposition(await metricsText(h.rt));
    expect(metrics.value("crm_webhook_delivery_attempts_total", { result: "failed" })).toBe(1);
    expect(metrics.value("crm_webhook_deliveries_total", { status: "failed" })).toBe(0);
    expect(logged.filter((line) => line.delivery_id === delivery.id)).toEqual([
      expect.objectContaining({
        level: "warn",
        msg: "webhook attempt recorded after its lease was taken over; the delivery's status is the new claim's",
        delivery_id: delivery.id,
        trigger: "scheduled",
        response_status: 500,
        delivery_status: "pending",
      }),
    ]);
  });

  test("a lease run out while its attempt is still open here (a clock stepped forward past it) is not claimed again here: the delivery is sent once", async () => {
    h = await scope.harness();
    const { r, delivery } = await heldAttempt();
    const leaseAsItWas = await leaseRunOut(delivery.id);
    // A claim round after the lease ran out: it sends the next contact's delivery, and would have
    // sent the older one, due first, with it.
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Grace" } })).status).toBe(201);
    await waitFor(() => r.received.some((request) => request.json.data.first_name === "Grace"), "the next contact's delivery at the receiver");
    expect(r.received.map((request) => request.json.data.first_name)).toEqual(["Ada", "Grace"]);
    expect(h.rt.deliveries.inFlightCount).toBe(2);
    await leaseAsItWas();
    r.release();
    await waitFor(() => h.rt.deliveries.inFlightCount === 0, "both attempts to end");
    expect(await stored(delivery.id)).toEqual({ status: "succeeded", attempts: 1, locked_until: null });
    expect(r.received.length).toBe(2);
  });

  test("a manual retry of a delivery whose attempt is still open here is 409 in progress, though its lease ran out", async () => {
    h = await scope.harness();
    const { r, delivery } = await heldAttempt();
    const leaseAsItWas = await leaseRunOut(delivery.id);
    let answer: { status: number; body: any } | null = null;
    const retry = h.json("POST", `/public/v1/webhook-deliveries/${delivery.id}/retry`).then((res) => (answer = res));
    await waitFor(() => answer !== null || r.received.length > 1, "the retry to be answered, or sent");
    await leaseAsItWas();
    r.release();
    await retry;
    expect({ status: answer!.status, type: answer!.body.type, sent: r.received.length }).toEqual({ status: 409, type: "urn:crm:problem:delivery-in-progress", sent: 1 });
    await waitFor(() => h.rt.deliveries.inFlightCount === 0, "the attempt to end");
    expect(await stored(delivery.id)).toEqual({ status: "succeeded", attempts: 1, locked_until: null });
  });

  test("an attempt still holding its lease records its outcome and frees the lease", async () => {
    h = await scope.harness();
    const { r, delivery } = await heldAttempt();
    r.release();
    await waitFor(async () => (await h.delivery(delivery.id)).status === "succeeded", "the delivery to succeed");
    expect(await stored(delivery.id)).toEqual({ status: "succeeded", attempts: 1, locked_until: null });
  });

  test("stopping abandons the attempt without freeing a lease another claim holds", async () => {
    h = await scope.harness();
    const { delivery } = await heldAttempt();
    const takenUntil = Date.now() + 10 * 60_000;
    await takeOverLease(delivery.id, takenUntil);
    await h.rt.deliveries.stop(0);
    expect(await stored(delivery.id)).toEqual({ status: "pending", attempts: 0, locked_until: takenUntil });
  });

  test("stopping frees the lease of an attempt it abandons", async () => {
    h = await scope.harness();
    const { delivery } = await heldAttempt();
    await h.rt.deliveries.stop(0);
    expect(await stored(delivery.id)).toEqual({ status: "pending", attempts: 0, locked_until: null });
  });
});

describe("webhook leases: a stopped subscription's delivery whose attempt is open here, its lease run out (a clock stepped forward past it)", () => {
  const DISABLED_UNSENT = "not sent: the subscription was disabled after its attempts failed for too long";

  /** deliveryOf returns the id of the delivery of the contact named `first_name`. */
  async function deliveryOf(first_name: string): Promise<string> {
    for (const listed of await h.deliveries()) if ((await h.delivery(listed.id)).payload.data.first_name === first_name) return listed.id;
    throw new Error(`no delivery of ${first_name}`);
  }

  /** storedUnsent stores a pending delivery of the subscription, due in an hour: no attempt holds it, so a stop fails it unsent; it returns its id. */
  async function storedUnsent(subscriptionId: string): Promise<string> {
    await h.rt.db.write((tx) => addStoredDeliveries(tx, subscriptionId, Date.now() + 3_600_000, "pending"));
    return (await h.rt.db.get<{ id: string }>("SELECT id FROM webhook_deliveries WHERE subscription_id = ? AND attempts = 0 AND locked_until IS NULL", [subscriptionId]))!.id;
  }

  /** disableStored disables a subscription as a disable another instance (or a stopped process) committed would: its pending deliveries are left to a sweep or an enable. */
  async function disableStored(subscriptionId: string): Promise<void> {
    await h.rt.db.write((tx) => tx.run("UPDATE webhook_subscriptions SET status = 'disabled', disabled_at = ?, disabled_reason = 'every attempt failed for too long' WHERE id = ?", [Date.now(), subscriptionId]));
  }

  test("a 410 of another delivery disables the subscription: its event counts the delivery unsent, not the one open here, which its attempt ends succeeded", async () => {
    h = await scope.harness();
    const r = scope.receiver();
    const answer = Promise.withResolvers<void>();
    r.respond(async (request) => (request.json.data.first_name === "Ada" ? answer.promise.then(() => new Response("ok")) : new Response("gone", { status: 410 })));
    const sub = await h.subscribe(r.url, ["contact.created"]);
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).status).toBe(201);
    await waitFor(() => r.received.length === 1, "Ada's attempt at the receiver");
    const ada = await deliveryOf("Ada");
    const leaseAsItWas = await leaseRunOut(ada);
    const unsent = await storedUnsent(sub.id);
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Grace" } })).status).toBe(201);
    // Failed unsent once the disable has committed, in the write that would fail Ada's too.
    await waitFor(async () => (await stored(unsent)).status === "failed", "the stored delivery to be failed unsent");
    expect(await stored(ada)).toEqual({ status: "pending", attempts: 0, locked_until: expect.any(Number) });
    const [disabled] = await h.rt.db.all<{ payload: string }>("SELECT payload FROM events WHERE type = 'subscription.disabled'");
    expect(JSON.parse(disabled!.payload).data.pending_deliveries_failed).toBe(1);

    await leaseAsItWas();
    answer.resolve();
    await waitFor(() => h.rt.deliveries.inFlightCount === 0, "Ada's attempt to end");
    expect(await stored(ada)).toEqual({ status: "succeeded", attempts: 1, locked_until: null });
    const metrics = parseExposition(await metricsText(h.rt));
    expect([metrics.value("crm_webhook_deliveries_total", { status: "succeeded" }), metrics.value("crm_webhook_deliveries_total", { status: "failed" })]).toEqual([1, 2]);
  });

  /** openAttemptOfStopped opens an attempt held at the receiver, runs its lease out, stores a delivery no attempt holds and disables the subscription; it returns both deliveries, how to put the lease back, and how to answer the attempt. */
  async function openAttemptOfStopped() {
    const { r, delivery } = await heldAttempt();
    const leaseAsItWas = await leaseRunOut(delivery.id);
    const unsent = await storedUnsent(delivery.subscription_id);
    await disableStored(delivery.subscription_id);
    return { r, open: delivery.id, unsent, subscriptionId: delivery.subscription_id, leaseAsItWas };
  }

  /** answeredAsHolder puts the open attempt's lease back, as a real step leaves it, lets the receiver answer 200, and sees the delivery end succeeded. */
  async function answeredAsHolder(r: ReturnType<typeof scope.receiver>, open: string, leaseAsItWas: () => Promise<void>): Promise<void> {
    await leaseAsItWas();
    r.release();
    await waitFor(() => h.rt.deliveries.inFlightCount === 0, "the attempt to end");
    expect(await stored(open)).toEqual({ status: "succeeded", attempts: 1, locked_until: null });
  }

  test("the sweep of stopped subscriptions fails the delivery no attempt holds, not the one open here, which its attempt ends", async () => {
    h = await scope.harness({}, { stoppedSweepMs: 50 });
    const { r, open, unsent, leaseAsItWas } = await openAttemptOfStopped();
    await waitFor(async () => (await stored(unsent)).status === "failed", "the sweep to fail the stored delivery");
    expect(await stored(open)).toEqual({ status: "pending", attempts: 0, locked_until: expect.any(Number) });
    await answeredAsHolder(r, open, leaseAsItWas);
  });

  test("an enable fails first the delivery no attempt holds, not the one open here", async () => {
    h = await scope.harness();
    const { r, open, unsent, subscriptionId, leaseAsItWas } = await openAttemptOfStopped();
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${subscriptionId}/enable`)).status).toBe(200);
    expect([(await stored(unsent)).status, (await stored(open)).status]).toEqual(["failed", "pending"]);
    await answeredAsHolder(r, open, leaseAsItWas);
  });

  test("a 2xx for a delivery a stop failed unsent meanwhile (another instance's, which knew nothing of the attempt) is recorded, and the delivery stays failed, saying so", async () => {
    h = await scope.harness();
    const { r, delivery } = await heldAttempt();
    await disableStored(delivery.subscription_id);
    // What another instance's sweep writes: it cannot know of an attempt open here.
    await h.rt.db.write((tx) => tx.run("UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL, last_error = ? WHERE id = ?", [DISABLED_UNSENT, delivery.id]));
    r.release();
    await waitFor(() => h.rt.deliveries.inFlightCount === 0, "the attempt to end");
    const detail = await h.delivery(delivery.id);
    expect([detail.status, detail.attempts, detail.last_response_status, detail.last_error, detail.attempt_history.map((a: any) => [a.response_status, a.error])]).toEqual([
      "failed",
      1,
      200,
      `${DISABLED_UNSENT}; an attempt under way then was answered 200 afterwards: the receiver has it`,
      [[200, null]],
    ]);
    expect(await stored(delivery.id)).toEqual({ status: "failed", attempts: 1, locked_until: null });
    const metrics = parseExposition(await metricsText(h.rt));
    expect([metrics.value("crm_webhook_delivery_attempts_total", { result: "succeeded" }), metrics.value("crm_webhook_deliveries_total", { status: "succeeded" })]).toEqual([1, 0]);
  });
});

describe("webhook leases: a delivery another instance leased", () => {
  test("is not claimed while its lease runs (its attempt under way there, or its instance crashed): the claim sends the next one, and leaves it as leased (s37 mutation audit)", async () => {
    h = await scope.harness();
    const r = scope.receiver();
    await h.subscribe(r.url, ["contact.created"]);
    await h.rt.deliveries.stop(0);
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).status).toBe(201);
    const [leased] = await h.deliveries();
    const takenUntil = Date.now() + 10 * 60_000;
    await takeOverLease(leased.id, takenUntil);
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Grace" } })).status).toBe(201);
    h.rt.deliveries.start();
    await waitFor(() => r.received.length === 1, "the next delivery at the receiver");
    await waitFor(() => h.rt.deliveries.inFlightCount === 0, "the claim's attempts to end");
    expect(r.received.map((request) => request.json.data.first_name)).toEqual(["Grace"]);
    expect(await stored(leased.id)).toEqual({ status: "pending", attempts: 0, locked_until: takenUntil });
  });
});

describe("webhook leases: a claim that waited for the write lock", () => {
  test("leases for the timeout plus 2 s from when it got the lock, not from when it asked: the lease outlasts the attempt", async () => {
    h = await scope.harness({ deliveryTimeoutMs: 1000, retrySchedule: [1] });
    const r = scope.receiver();
    r.respond(() => new Response("down", { status: 500 }));
    await h.subscribe(r.url, ["contact.created"]);
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).status).toBe(201);
    await waitFor(() => r.received.length === 1, "the first attempt");
    const [listed] = await h.deliveries();
    await waitFor(async () => (await stored(listed.id)).attempts === 1, "the first attempt to be recorded");
    r.hold();
    // Another write (another instance's, a long batch) holds the lock past the retry's due time and its would-be lease.
    let lockFreedAt = 0;
    const blocking = h.rt.db.write(async () => {
      await Bun.sleep(4000);
      lockFreedAt = Date.now();
    });
    await waitFor(() => r.received.length === 2, "the retry at the receiver", 15_000);
    const { locked_until } = await stored(listed.id);
    await blocking;
    expect(locked_until! - lockFreedAt).toBeGreaterThanOrEqual(1000 + 2000);
    r.release();
  });
});

describe("webhook attempts recorded together: one that cannot be stored", () => {
  /** poisonAttemptsOf makes the database refuse the attempt rows of one delivery (those with a response body only, if told), as an unforeseen fault would. */
  async function poisonAttemptsOf(deliveryId: string, withBodyOnly: boolean): Promise<void> {
    const condition = `NEW.delivery_id = '${deliveryId}'${withBodyOnly ? " AND NEW.response_body IS NOT NULL" : ""}`;
    if (h.rt.db.dialect === "sqlite") {
      await h.rt.db.run(`CREATE TRIGGER poisoned_attempt BEFORE INSERT ON webhook_delivery_attempts WHEN ${condition} BEGIN SELECT RAISE(ABORT, 'poisoned attempt'); END`);
    } else {
      await h.rt.db.run("CREATE FUNCTION poisoned_attempt() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'poisoned attempt'; END $$");
      await h.rt.db.run(`CREATE TRIGGER poisoned_attempt BEFORE INSERT ON webhook_delivery_attempts FOR EACH ROW WHEN (${condition}) EXECUTE FUNCTION poisoned_attempt()`);
    }
  }

  /**
   * fourAnsweredAtOnce sends four deliveries that the receiver holds, poisons one, then lets all
   * four be answered at once (their outcomes are recorded in one write); it returns the receiver,
   * the poisoned delivery's id, the other three's, and the warn and error lines logged.
   */
  async function fourAnsweredAtOnce(withBodyOnly: boolean) {
    const logged: any[] = [];
    h = await scope.harness({}, { log: createLogger("warn", (line) => logged.push(JSON.parse(line))) });
    const r = scope.receiver();
    r.hold();
    await h.subscribe(r.url, ["contact.created"]);
    for (const name of ["Ada", "Poisoned", "Grace", "Edsger"]) expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: name } })).status).toBe(201);
    await waitFor(() => r.received.length === 4, "the four attempts at the receiver");
    const poisoned = r.received.find((request) => request.json.data.first_name === "Poisoned")!.headers["webhook-id"]!;
    const healthy = r.received.map((request) => request.headers["webhook-id"]!).filter((id) => id !== poisoned);
    await poisonAttemptsOf(poisoned, withBodyOnly);
    r.release();
    await waitFor(async () => (await Promise.all(healthy.map(stored))).every((d) => d.status === "succeeded"), "the three healthy deliveries to succeed");
    return { r, poisoned, healthy, logged };
  }

  /** sends counts the requests the receiver got for each delivery id. */
  const sends = (r: { received: { headers: Record<string, string> }[] }, ids: string[]) => ids.map((id) => r.received.filter((request) => request.headers["webhook-id"] === id).length);

  test("the attempts finished beside it are recorded once, and only its own failure is logged", async () => {
    const { r, poisoned, healthy, logged } = await fourAnsweredAtOnce(false);
    const recorded = await Promise.all(healthy.map((id) => h.delivery(id)));
    expect(recorded.map((d) => [d.status, d.attempts, d.attempt_history.length])).toEqual(Array(3).fill(["succeeded", 1, 1]));
    // Each was sent once: none waited for its lease to run out and went out again.
    expect(sends(r, healthy)).toEqual([1, 1, 1]);
    const unrecorded = await waitFor(() => {
      const lines = logged.filter((line) => line.msg === "webhook delivery attempt could not be recorded");
      return lines.length > 0 && lines;
    }, "the poisoned attempt's failure to be logged");
    expect(unrecorded.map((line) => line.delivery_id)).toEqual(unrecorded.map(() => poisoned));
    expect(unrecorded[0].error).toContain("poisoned attempt");
  });

  test("an attempt refused for what the receiver sent back is recorded without its headers and body: its outcome is kept and it is not sent again", async () => {
    const { r, poisoned, healthy, logged } = await fourAnsweredAtOnce(true);
    // The warn line follows the commit, which another connection may see first.
    await waitFor(async () => logged.length > 0 && (await stored(poisoned)).status === "succeeded", "the poisoned delivery to succeed, logged");
    const detail = await h.delivery(poisoned);
    expect([detail.status, detail.attempts, detail.attempt_history.length]).toEqual(["succeeded", 1, 1]);
    expect(detail.attempt_history[0]).toMatchObject({ response_status: 200, response_headers: {}, response_body: null, error: null });
    expect(sends(r, [poisoned, ...healthy])).toEqual([1, 1, 1, 1]);
    expect(logged.map((line) => ({ msg: line.msg, delivery_id: line.delivery_id }))).toEqual([
      { msg: "webhook delivery attempt recorded without the receiver's headers and body, which the database refused", delivery_id: poisoned },
    ]);
    expect(logged[0].error).toContain("poisoned attempt");
  });

  postgresOnly("a database that cannot be used just now keeps the whole outcome: nothing is recorded without the response, the attempt is sent again after its lease and recorded whole", async () => {
    const logged: any[] = [];
    h = await scope.harness({}, { log: createLogger("warn", (line) => logged.push(JSON.parse(line))) });
    const r = scope.receiver();
    // A sequence counts outside transactions: the first attempt row is refused as a restarting server would refuse it, no later one.
    await h.rt.db.run("CREATE SEQUENCE attempt_rows_seen");
    await h.rt.db.run("CREATE FUNCTION refuse_first_attempt() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF nextval('attempt_rows_seen') = 1 THEN RAISE EXCEPTION 'the database system is starting up' USING ERRCODE = '57P03'; END IF; RETURN NEW; END $$");
    await h.rt.db.run("CREATE TRIGGER refuse_first_attempt BEFORE INSERT ON webhook_delivery_attempts FOR EACH ROW EXECUTE FUNCTION refuse_first_attempt()");
    await h.subscribe(r.url, ["contact.created"]);
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).status).toBe(201);
    const [listed] = await h.deliveries();
    await waitFor(async () => (await stored(listed.id)).status === "succeeded", "the delivery to succeed once sent again");
    const detail = await h.delivery(listed.id);
    expect([detail.attempts, detail.attempt_history.map((a: { response_status: number; response_body: string }) => [a.response_status, a.response_body])]).toEqual([1, [[200, "ok"]]]);
    expect(r.received.length).toBe(2);
    expect(logged.map((line) => ({ msg: line.msg, delivery_id: line.delivery_id }))).toEqual([{ msg: "webhook delivery attempt could not be recorded", delivery_id: listed.id }]);
  });
});
