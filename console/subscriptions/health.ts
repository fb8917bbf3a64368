import { ReadLaneFull } from "../../server/db/slow-reads.ts";
import type { Database, Db, ReaderName } from "../../server/db/sql.ts";
import { DAY_MS, HOUR_MS, toTimestamp } from "../../server/shared/time.ts";
import type { Subscription } from "../../server/webhooks/model.ts";
import { responseTimesByWindow, type ResponseTimes } from "../../server/webhooks/stats.ts";
import { listDeliveryDaysSince, listDeliveryHoursSince, listFailureReasons, type DeliveryHourRow, type FailureReasonRow } from "../../server/webhooks/store.ts";
import type { ChartBar } from "../pages/charts.tsx";

/** SubscriptionHealth is what the health charts show of one subscription: deliveries per hour (24) and per day (7), and response times (of 7 days only on its own page). */
export interface SubscriptionHealth {
  subscription: Subscription;
  hours: ChartBar[];
  days: ChartBar[];
  latency: { last_24h: ResponseTimes | null; last_7d?: ResponseTimes | null };
}

/** FailureReason is a group of recent failing deliveries with the same last answer. */
export interface FailureReason {
  reason: string;
  deliveries: number;
  /** when the reason was last met (its last failed attempt), and the delivery that met it */
  latest_at: string;
  latest_delivery_id: string;
}

/** bars buckets hourly counts into `count` bars of `size` ms ending with the one holding `now`. */
function bars(rows: DeliveryHourRow[], size: number, count: number, now: number): ChartBar[] {
  const first = now - (now % size) - (count - 1) * size;
  const out = Array.from({ length: count }, (_, i) => ({ from: toTimestamp(first + i * size), succeeded: 0, failed: 0, pending: 0 }));
  for (const row of rows) {
    const i = Math.floor((row.hour - first) / size);
    if (i >= 0 && i < count) out[i]![row.status] += Number(row.n);
  }
  return out;
}

/**
 * subscriptionsHealth returns the health charts of the given subscriptions, each chart's counts in
 * one query for all of them (days summed by the database: a week of hours of 20 subscriptions is
 * 10,000 rows, and building them cost 3 ms). The 7-day response times, a week of histograms, are
 * read for a single subscription's page only.
 */
export async function subscriptionsHealth(db: Db, subscriptions: Subscription[], now = Date.now()): Promise<SubscriptionHealth[]> {
  const only = subscriptions.length === 1 ? subscriptions[0]!.id : null;
  const hourRows = Map.groupBy(await listDeliveryHoursSince(db, now - (now % HOUR_MS) - 23 * HOUR_MS, only), (row) => row.subscription_id);
  const dayRows = Map.groupBy(await listDeliveryDaysSince(db, now - (now % DAY_MS) - 6 * DAY_MS, only), (row) => row.subscription_id);
  const latency = await responseTimesByWindow(db, only ? [24, 7 * 24] : [24], only, now);
  return subscriptions.map((subscription) => {
    const [last_24h = null, last_7d = null] = latency.get(subscription.id) ?? [];
    return {
      subscription,
      hours: bars(hourRows.get(subscription.id) ?? [], HOUR_MS, 24, now),
      days: bars(dayRows.get(subscription.id) ?? [], DAY_MS, 7, now),
      latency: only ? { last_24h, last_7d } : { last_24h },
    };
  });
}

/**
 * urgencyOf ranks a subscription's card for the start page: 0 failing (every attempt since its
 * failing_since failed, or it was disabled for that or a 410: its receiver gets nothing), 1 with
 * failed deliveries in the last 24 hours, 2 the rest. A paused one is ranked by its deliveries: it
 * sends nothing because an operator chose so.
 */
function urgencyOf(health: SubscriptionHealth): number {
  const s = health.subscription;
  if (s.status === "disabled" || (s.status === "active" && s.failing_since !== null)) return 0;
  return health.hours.some((bar) => bar.failed > 0) ? 1 : 2;
}

/** worstFirst orders the start page's cards for an incident: failing subscriptions first, then those with failed deliveries, then the rest, each group in the order given (the sort is stable). */
export function worstFirst(health: SubscriptionHealth[]): SubscriptionHealth[] {
  return health.toSorted((a, b) => urgencyOf(a) - urgencyOf(b));
}

/** FAILURE_REASONS is how many distinct reasons a subscription's page lists. */
const FAILURE_REASONS = 10;

/**
 * recentFailures groups the failing deliveries of a subscription's last 7 days by reason: the
 * status code answered, or the network error. Grouping reads every one of them (half a second at
 * 200,000), so it takes `reader`'s (the operator's) turn on the read lane, off SQLite's thread that
 * answers requests; null when the lane has no place for it (--slow-list-lane).
 */
export async function recentFailures(db: Database, subscriptionId: string, reader: ReaderName, now = Date.now()): Promise<FailureReason[] | null> {
  let rows: FailureReasonRow[];
  try {
    rows = await db.readAside((lane) => listFailureReasons(lane, subscriptionId, now - 7 * DAY_MS, FAILURE_REASONS), reader);
  } catch (error) {
    if (error instanceof ReadLaneFull) return null;
    throw error;
  }
  // Number(): PostgreSQL answers count(*) and max() of bigint as text.
  return rows.map((row) => ({
    reason: row.last_response_status !== null ? `HTTP ${row.last_response_status}` : (row.last_error ?? "no answer"),
    deliveries: Number(row.deliveries),
    latest_at: toTimestamp(Number(row.latest_at)),
    latest_delivery_id: row.latest_id,
  }));
}
