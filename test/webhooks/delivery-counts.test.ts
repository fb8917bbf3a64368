import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { newId } from "../../server/shared/ids.ts";
import { subscriptionDeliveryCounts } from "../../server/webhooks/service.ts";
import { deleteSubscription, insertDelivery, insertEvent, insertSubscription, updateDeliveryAfterAttempt, type DeliveryRow } from "../../server/webhooks/store.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { capturing, queryPlan } from "../support/query-plans.ts";

// The console's subscriptions page: each subscription's deliveries of the last 24 hours by outcome.
const DAY = 86_400_000;
const NOW = Date.UTC(2026, 10, 21, 12);
const SINCE = NOW - DAY;

let h: Harness;
const subscriptions: Record<"busy" | "quiet" | "idle" | "deleted", string> = { busy: "", quiet: "", idle: "", deleted: "" };

async function addSubscription(): Promise<string> {
  const id = newId("sub");
  await insertSubscription(
    h.rt.db,
    { id, target_url: "https://receiver.example.com/hooks", description: null, events: '["contact.created"]', secret: "whsec_test", previous_secret: null, previous_secret_expires_at: null, secret_rotated_at: null, status: "active", disabled_at: null, disabled_reason: null, paused_at: null, max_rate: null, failing_since: null, created_at: NOW - 2 * DAY, updated_at: NOW - 2 * DAY },
    ["contact.created"],
  );
  return id;
}

async function addDeliveries(subscriptionId: string, createdAt: number, status: DeliveryRow["status"], count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const eventId = newId("evt");
    await insertEvent(h.rt.db, { id: eventId, type: "contact.created", payload: "{}", created_at: createdAt });
    const id = newId("dlv");
    await insertDelivery(h.rt.db, { id, event_id: eventId, event_type: "contact.created", subscription_id: subscriptionId, target_url: "https://receiver.example.com/hooks", next_attempt_at: createdAt, created_at: createdAt });
    if (status !== "pending") await updateDeliveryAfterAttempt(h.rt.db, { id, status, attempts: 1, next_attempt_at: null, last_response_status: status === "failed" ? 500 : 200, last_error: null, updated_at: createdAt });
  }
}

beforeAll(async () => {
  h = await createHarness();
  for (const name of Object.keys(subscriptions) as (keyof typeof subscriptions)[]) subscriptions[name] = await addSubscription();
  await addDeliveries(subscriptions.busy, NOW - 1000, "succeeded", 3);
  await addDeliveries(subscriptions.busy, NOW - 2000, "failed", 1);
  await addDeliveries(subscriptions.busy, NOW - 3000, "pending", 2);
  await addDeliveries(subscriptions.busy, SINCE - 1, "succeeded", 4);
  await addDeliveries(subscriptions.busy, SINCE - 1, "failed", 2);
  await addDeliveries(subscriptions.quiet, SINCE, "failed", 1);
  await addDeliveries(subscriptions.deleted, NOW - 1000, "succeeded", 5);
  await deleteSubscription(h.rt.db, subscriptions.deleted);
});
afterAll(async () => await h.close());

describe("subscription delivery counts: happy paths", () => {
  test("every existing subscription gets its deliveries since the given time by outcome; older ones do not count", async () => {
    expect(Object.fromEntries(await subscriptionDeliveryCounts(h.rt.db, SINCE))).toEqual({
      [subscriptions.busy]: { succeeded: 3, failed: 1, pending: 2 },
      [subscriptions.quiet]: { succeeded: 0, failed: 1, pending: 0 },
      [subscriptions.idle]: { succeeded: 0, failed: 0, pending: 0 },
    });
  });
});

describe("subscription delivery counts: index use", () => {
  test("each count is a range of webhook_deliveries_subscription_status read from the index alone: no table row, no sort", async () => {
    const { db, captured } = capturing(h.rt.db);
    await subscriptionDeliveryCounts(db, SINCE);
    const range = "SEARCH webhook_deliveries USING COVERING INDEX webhook_deliveries_subscription_status (subscription_id=? AND status=? AND created_at>?)";
    // The subscriptions are few and all read; which of their covering indexes gives the ids does not matter.
    expect(captured.map((statement) => queryPlan(h.db.sqlite, statement))).toEqual([
      [
        // Any index of subscriptions holding the id will do; which one SQLite picks depends on the table's width.
        expect.stringMatching(/^SCAN s USING COVERING INDEX (sqlite_autoindex_webhook_subscriptions_1|webhook_subscriptions_created)$/),
        "CORRELATED SCALAR SUBQUERY 1",
        range,
        "CORRELATED SCALAR SUBQUERY 2",
        range,
        "CORRELATED SCALAR SUBQUERY 3",
        range,
      ],
    ]);
  });
});
