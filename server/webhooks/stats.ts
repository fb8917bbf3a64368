import type { Db } from "../db/sql.ts";
import { HOUR_MS, hourOf, toTimestamp } from "../shared/time.ts";
import { WAITING_COUNTED, type SubscriptionStats, type WindowStats } from "./model.ts";
import { countWaitingDeliveriesOf, findAttemptStats, listAttemptStatsFrom, listAttemptStatsSince, shownStatus, writeAttemptStats, type SubscriptionRow } from "./store.ts";

/** STATS_KEPT_MS is how long hourly statistics are kept: the longest window and the hour it started in. */
export const STATS_KEPT_MS = 7 * 24 * HOUR_MS + HOUR_MS;

/**
 * LATENCY_BOUNDS_MS are the upper bounds of the latency histogram's buckets, each 25% above the
 * last, from 1 ms to about 36 s (one more bucket holds anything longer). A percentile is reported
 * as the bound of its bucket, so it is at most 25% above the true value.
 */
export const LATENCY_BOUNDS_MS = Array.from({ length: 48 }, (_, i) => Math.round(1.25 ** i * 100) / 100);

function bucketOf(durationMs: number): number {
  const i = LATENCY_BOUNDS_MS.findIndex((bound) => durationMs <= bound);
  return i < 0 ? LATENCY_BOUNDS_MS.length : i;
}


/** AttemptSample is what the statistics keep of one attempt. */
export interface AttemptSample {
  subscription_id: string;
  started_at: number;
  duration_ms: number;
  succeeded: boolean;
}

/** addAttemptStats adds attempts to their subscriptions' hourly counts and histograms, one row write per subscription and hour. */
export async function addAttemptStats(db: Db, samples: AttemptSample[]): Promise<void> {
  const rows = new Map<string, { subscription_id: string; hour: number; succeeded: number; failed: number; buckets: number[] }>();
  for (const sample of samples) {
    const hour = hourOf(sample.started_at);
    const key = `${sample.subscription_id} ${hour}`;
    let row = rows.get(key);
    if (!row) {
      row = { subscription_id: sample.subscription_id, hour, succeeded: 0, failed: 0, buckets: Array(LATENCY_BOUNDS_MS.length + 1).fill(0) };
      rows.set(key, row);
    }
    if (sample.succeeded) row.succeeded++;
    else row.failed++;
    row.buckets[bucketOf(sample.duration_ms)]!++;
  }
  for (const row of rows.values()) {
    const stored = await findAttemptStats(db, row.subscription_id, row.hour);
    if (stored) {
      row.succeeded += stored.succeeded;
      row.failed += stored.failed;
      (JSON.parse(stored.latency_buckets) as number[]).forEach((n, i) => (row.buckets[i]! += n));
    }
    await writeAttemptStats(db, { subscription_id: row.subscription_id, hour: row.hour, succeeded: row.succeeded, failed: row.failed, latency_buckets: JSON.stringify(row.buckets) });
  }
}

function percentile(buckets: number[], total: number, p: number): number {
  let seen = 0;
  for (let i = 0; i < buckets.length; i++) {
    seen += buckets[i]!;
    // The overflow bucket has no bound: report the largest one, "at least this".
    if (seen >= p * total) return LATENCY_BOUNDS_MS[Math.min(i, LATENCY_BOUNDS_MS.length - 1)]!;
  }
  return LATENCY_BOUNDS_MS.at(-1)!;
}

/** subscriptionStats sums a subscription's attempts of the last 24 hours and 7 days (whole hours, the current one included), and counts its deliveries waiting. */
export async function subscriptionStats(db: Db, subscription: SubscriptionRow, now = Date.now()): Promise<SubscriptionStats> {
  const rows = await listAttemptStatsSince(db, subscription.id, hourOf(now - 7 * 24 * HOUR_MS));
  const window = (hours: number): WindowStats => {
    const from = hourOf(now - hours * HOUR_MS);
    const buckets: number[] = Array(LATENCY_BOUNDS_MS.length + 1).fill(0);
    let succeeded = 0;
    let failed = 0;
    for (const row of rows) {
      if (row.hour < from) continue;
      succeeded += row.succeeded;
      failed += row.failed;
      (JSON.parse(row.latency_buckets) as number[]).forEach((n, i) => (buckets[i]! += n));
    }
    const attempts = succeeded + failed;
    return {
      from: toTimestamp(from),
      attempts,
      succeeded,
      failed,
      success_rate: attempts === 0 ? null : Math.round((succeeded / attempts) * 10000) / 10000,
      latency_ms: attempts === 0 ? null : { p50: percentile(buckets, attempts, 0.5), p90: percentile(buckets, attempts, 0.9), p99: percentile(buckets, attempts, 0.99) },
    };
  };
  return {
    subscription_id: subscription.id,
    status: shownStatus(subscription),
    failing_since: subscription.failing_since === null ? null : toTimestamp(subscription.failing_since),
    deliveries_waiting: await countWaitingDeliveriesOf(db, now, subscription.id, WAITING_COUNTED),
    last_24h: window(24),
    last_7d: window(7 * 24),
  };
}

/** ResponseTimes are the median and 95th percentile of a subscription's attempt durations over a window, in ms. */
export interface ResponseTimes {
  attempts: number;
  p50: number;
  p95: number;
}

/** PARSED_KEPT bounds the parsed histograms kept: a week of hours of MAX_SUBSCRIPTIONS fits. */
const PARSED_KEPT = 20_000;
const parsedHistograms = new Map<string, readonly number[]>();

/**
 * histogramOf parses a stored latency histogram, once per distinct text: an hour's row stops
 * changing when the hour is over, and parsing 3,400 rows on every start page cost 3 ms.
 */
function histogramOf(text: string): readonly number[] {
  let buckets = parsedHistograms.get(text);
  if (buckets === undefined) {
    if (parsedHistograms.size >= PARSED_KEPT) parsedHistograms.clear();
    buckets = JSON.parse(text) as number[];
    parsedHistograms.set(text, buckets);
  }
  return buckets;
}

/**
 * responseTimesByWindow reads the attempt durations of every subscription (or of one) from the
 * hourly statistics, in one query, and returns per subscription the p50/p95 of each window of
 * whole hours (the current one included); null for a window without attempts.
 */
export async function responseTimesByWindow(db: Db, windowsHours: readonly number[], subscriptionId: string | null = null, now = Date.now()): Promise<Map<string, (ResponseTimes | null)[]>> {
  const froms = windowsHours.map((hours) => hourOf(now - (hours - 1) * HOUR_MS));
  const sums = new Map<string, { buckets: number[]; attempts: number }[]>();
  for (const row of await listAttemptStatsFrom(db, Math.min(...froms), subscriptionId)) {
    let windows = sums.get(row.subscription_id);
    if (!windows) sums.set(row.subscription_id, (windows = froms.map(() => ({ buckets: Array(LATENCY_BOUNDS_MS.length + 1).fill(0), attempts: 0 }))));
    const buckets = histogramOf(row.latency_buckets);
    froms.forEach((from, w) => {
      if (row.hour < from) return;
      const window = windows[w]!;
      window.attempts += row.succeeded + row.failed;
      for (let i = 0; i < buckets.length; i++) window.buckets[i]! += buckets[i]!;
    });
  }
  return new Map(
    [...sums].map(([id, windows]) => [id, windows.map((w) => (w.attempts === 0 ? null : { attempts: w.attempts, p50: percentile(w.buckets, w.attempts, 0.5), p95: percentile(w.buckets, w.attempts, 0.95) }))]),
  );
}
