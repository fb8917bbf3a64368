import type { Database } from "bun:sqlite";
import { toTimestamp } from "../../server/shared/time.ts";
import type { Subscription } from "../../server/webhooks/model.ts";
import { responseTimes, type ResponseTimes } from "../../server/webhooks/stats.ts";
import { listDeliveryHoursSince, listFailureReasons, type DeliveryHourRow } from "../../server/webhooks/store.ts";
import type { ChartBar } from "../pages/charts.tsx";

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

/** SubscriptionHealth is what the health charts show of one subscription: deliveries per hour (24) and per day (7), and response times. */
export interface SubscriptionHealth {
  subscription: Subscription;
  hours: ChartBar[];
  days: ChartBar[];
  latency: { last_24h: ResponseTimes | null; last_7d: ResponseTimes | null };
}

/** FailureReason is a group of recent failing deliveries with the same last answer. */
export interface FailureReason {
  reason: string;
  deliveries: number;
  latest_at: string;
  latest_delivery_id: string;
}

/** bars buckets hourly counts into `count` bars of `size` ms ending with the one holding `now`. */
function bars(rows: DeliveryHourRow[], size: number, count: number, now: number): ChartBar[] {
  const first = now - (now % size) - (count - 1) * size;
  const out = Array.from({ length: count }, (_, i) => ({ from: toTimestamp(first + i * size), succeeded: 0, failed: 0, pending: 0 }));
  for (const row of rows) {
    const i = Math.floor((row.hour - first) / size);
    if (i >= 0 && i < count) out[i]![row.status] += row.n;
  }
  return out;
}

/** subscriptionsHealth returns the health charts of each given subscription, reading every hourly count of the week in one query. */
export function subscriptionsHealth(db: Database, subscriptions: Subscription[], now = Date.now()): SubscriptionHealth[] {
  const from = now - (now % DAY_MS) - 6 * DAY_MS;
  const only = subscriptions.length === 1 ? subscriptions[0]!.id : null;
  const rows = Map.groupBy(listDeliveryHoursSince(db, from, only), (row) => row.subscription_id);
  return subscriptions.map((subscription) => {
    const own = rows.get(subscription.id) ?? [];
    return {
      subscription,
      hours: bars(own, HOUR_MS, 24, now),
      days: bars(own, DAY_MS, 7, now),
      latency: { last_24h: responseTimes(db, subscription.id, 24, now), last_7d: responseTimes(db, subscription.id, 7 * 24, now) },
    };
  });
}

/** FAILURE_REASONS is how many distinct reasons a subscription's page lists. */
const FAILURE_REASONS = 10;

/** recentFailures groups the failing deliveries of a subscription's last 7 days by reason: the status code answered, or the network error. */
export function recentFailures(db: Database, subscriptionId: string, now = Date.now()): FailureReason[] {
  return listFailureReasons(db, subscriptionId, now - 7 * DAY_MS, FAILURE_REASONS).map((row) => ({
    reason: row.last_response_status !== null ? `HTTP ${row.last_response_status}` : (row.last_error ?? "no answer"),
    deliveries: row.deliveries,
    latest_at: toTimestamp(row.latest_at),
    latest_delivery_id: row.latest_id,
  }));
}
