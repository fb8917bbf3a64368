import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { subscriptionDeliveryCounts } from "../../server/webhooks/service.ts";
import { deleteSubscription } from "../../server/webhooks/store.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { capturing, queryPlan } from "../support/query-plans.ts";
import { addStoredDeliveries, addStoredSubscription } from "./support.ts";

// The console's subscriptions page: each subscription's deliveries of the last 24 hours by outcome.
const DAY = 86_400_000;
const NOW = Date.UTC(2026, 10, 21, 12);
const SINCE = NOW - DAY;

let h: Harness;
const subscriptions: Record<"busy" | "quiet" | "idle" | "deleted", string> = { busy: "", quiet: "", idle: "", deleted: "" };

beforeAll(async () => {
  h = await createHarness();
  for (const name of Object.keys(subscriptions) as (keyof typeof subscriptions)[]) subscriptions[name] = await addStoredSubscription(h.rt.db, NOW - 2 * DAY);
  await addStoredDeliveries(h.rt.db, subscriptions.busy, NOW - 1000, "succeeded", 3);
  await addStoredDeliveries(h.rt.db, subscriptions.busy, NOW - 2000, "failed", 1);
  await addStoredDeliveries(h.rt.db, subscriptions.busy, NOW - 3000, "pending", 2);
  await addStoredDeliveries(h.rt.db, subscriptions.busy, SINCE - 1, "succeeded", 4);
  await addStoredDeliveries(h.rt.db, subscriptions.busy, SINCE - 1, "failed", 2);
  await addStoredDeliveries(h.rt.db, subscriptions.quiet, SINCE, "failed", 1);
  await addStoredDeliveries(h.rt.db, subscriptions.deleted, NOW - 1000, "succeeded", 5);
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
