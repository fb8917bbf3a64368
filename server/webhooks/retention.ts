import { deleteRotationsWithoutReplacementBefore } from "../../console/subscriptions/store.ts";
import type { Db } from "../db/sql.ts";
import { pruneIdempotencyKeys } from "../idempotency/service.ts";
import { deleteExpiredOperatorLinks } from "../operators/store.ts";
import type { Runtime } from "../runtime.ts";
import { DAY_MS } from "../shared/time.ts";
import { pruneTombstones } from "../tombstones/service.ts";
import { RESOURCES } from "../tombstones/store.ts";
import { STATS_KEPT_MS } from "./stats.ts";
import { deleteAttemptStatsBefore, deleteFinishedDeliveriesBefore, deleteUnreferencedEventsBefore, deleteUnusedHeaderSets, measureDeliveryHistory, type HistorySize } from "./store.ts";

/** RETENTION_INTERVAL_MS is how often the retention job runs (hourly). */
const RETENTION_INTERVAL_MS = 60 * 60 * 1000;
/** PRUNE_BATCH is how many rows one commit deletes, so pruning never holds the writer for long. */
const PRUNE_BATCH = 1000;
/** BUDGET_INTERVAL_MS is how often the history's size is held against --delivery-history-max-mb. */
const BUDGET_INTERVAL_MS = 60 * 1000;
/** BUDGET_STEP_MIN is the fewest deliveries one pruning step deletes, so a small excess does not cost a measure per row. */
const BUDGET_STEP_MIN = 100;

/**
 * HISTORY_SIZE_FRESH_MS is how long a measure of the delivery history serves /metrics. Measuring
 * walks every page of the history's tables (SQLite's dbstat, PostgreSQL's rows): 0.1 to 0.2 s for
 * 400,000 deliveries, during which SQLite's process answers nothing, paid by each scrape otherwise.
 */
export const HISTORY_SIZE_FRESH_MS = 60 * 1000;
// The measure under way is kept too: scrapes arriving while it runs share it rather than walk the pages again.
const lastMeasured = new WeakMap<Db, { at: number; size: Promise<HistorySize> }>();

/** measureHistory measures the delivery history of `db` through `reader` (db itself, or a read of it) and keeps the figure for recentHistorySize; a failed measure (the database down) is not kept. */
function measureHistory(db: Db, now: number, reader: Db = db): Promise<HistorySize> {
  const measure = { at: now, size: measureDeliveryHistory(reader) };
  lastMeasured.set(db, measure);
  measure.size.catch(() => lastMeasured.get(db) === measure && lastMeasured.delete(db));
  return measure.size;
}

/** recentHistorySize is the delivery history's size as measured in the last HISTORY_SIZE_FRESH_MS (by the size budget's pruning or a scrape), measured now through `reader` if it was not. */
export function recentHistorySize(db: Db, now = Date.now(), reader: Db = db): Promise<HistorySize> {
  const last = lastMeasured.get(db);
  return last && now - last.at < HISTORY_SIZE_FRESH_MS ? last.size : measureHistory(db, now, reader);
}

async function pruneInBatches(rt: Runtime, prune: (tx: Db) => Promise<number>): Promise<number> {
  let total = 0;
  for (;;) {
    const n = await rt.db.write(prune);
    total += n;
    if (n < PRUNE_BATCH) return total;
  }
}

/** Pruned counts what one run of pruneHistory deleted, by kind. */
export type Pruned = {
  deliveries: number;
  events: number;
  idempotency_keys: number;
  attempt_stats: number;
  tombstones: number;
  rotations_without_replacement: number;
  expired_links: number;
};

/**
 * pruneHistory deletes finished deliveries (with their attempts) created more than the retention
 * period ago, then events no delivery refers to any more, then idempotency keys past 24 hours,
 * then hourly attempt statistics older than the longest stats window (or of deleted subscriptions),
 * then tombstones past their own (longer) retention, then the console's rotations whose new
 * subscription was deleted, untouched for the retention period, and its expired one-time links.
 * Pending deliveries are kept whatever their age: pruning them would lose events.
 */
export async function pruneHistory(rt: Runtime, now = Date.now()): Promise<Pruned> {
  const cutoff = now - rt.config.deliveryRetentionDays * DAY_MS;
  const deliveries = await pruneInBatches(rt, (tx) => deleteFinishedDeliveriesBefore(tx, cutoff, PRUNE_BATCH));
  const events = await pruneInBatches(rt, (tx) => deleteUnreferencedEventsBefore(tx, cutoff, PRUNE_BATCH));
  const idempotencyKeys = await rt.db.write((tx) => pruneIdempotencyKeys(tx, now));
  if (deliveries > 0) await rt.db.write((tx) => deleteUnusedHeaderSets(tx));
  const attemptStats = await rt.db.write((tx) => deleteAttemptStatsBefore(tx, now - STATS_KEPT_MS));
  let tombstones = 0;
  for (const resource of RESOURCES) tombstones += await pruneInBatches(rt, (tx) => pruneTombstones(tx, rt, resource, now, PRUNE_BATCH));
  const rotationsWithoutReplacement = await rt.db.write((tx) => deleteRotationsWithoutReplacementBefore(tx, cutoff));
  const expiredLinks = await rt.db.write((tx) => deleteExpiredOperatorLinks(tx, now));
  return { deliveries, events, idempotency_keys: idempotencyKeys, attempt_stats: attemptStats, tombstones, rotations_without_replacement: rotationsWithoutReplacement, expired_links: expiredLinks };
}

/**
 * pruneToBudget deletes the oldest finished deliveries (with their attempts) while the history is
 * larger than --delivery-history-max-mb, sized from what one delivery takes on average; pending
 * deliveries are never pruned, so a backlog alone may stay above the budget. Returns how many
 * deliveries it deleted and the size left.
 */
export async function pruneToBudget(rt: Runtime, now = Date.now()): Promise<{ deliveries: number; bytes: number }> {
  const budget = rt.config.deliveryHistoryMaxMb * 1024 * 1024;
  let size = await measureHistory(rt.db, Date.now());
  let deleted = 0;
  while (budget > 0 && size.bytes > budget) {
    const perDelivery = size.bytes / Math.max(1, size.deliveries);
    const step = Math.min(PRUNE_BATCH, Math.max(BUDGET_STEP_MIN, Math.ceil((size.bytes - budget) / perDelivery)));
    const n = await rt.db.write((tx) => deleteFinishedDeliveriesBefore(tx, now + 1, step));
    if (n === 0) break;
    deleted += n;
    size = await measureHistory(rt.db, Date.now());
  }
  if (deleted > 0) await rt.db.write((tx) => deleteUnusedHeaderSets(tx));
  return { deliveries: deleted, bytes: size.bytes };
}

/**
 * startRetentionJob runs pruneHistory now and then every hour, and with a size budget
 * (--delivery-history-max-mb) pruneToBudget every minute; the returned function stops both and
 * waits for a run under way.
 */
export function startRetentionJob(rt: Runtime, intervalMs = RETENTION_INTERVAL_MS): () => Promise<void> {
  let running: Promise<unknown> = Promise.resolve();
  const retain = () => {
    running = running
      .then(() => pruneHistory(rt))
      .then(
        (pruned) => {
          if (Object.values(pruned).some((n) => n > 0)) rt.log.info("history pruned", pruned);
        },
        (error: unknown) => rt.log.error("pruning webhook history failed", { error: String(error) }),
      );
  };
  const budget = () => {
    running = running
      .then(() => pruneToBudget(rt))
      .then(
        (pruned) => {
          if (pruned.deliveries > 0) rt.log.info("webhook history pruned to its size budget", { ...pruned, budget_mb: rt.config.deliveryHistoryMaxMb });
        },
        (error: unknown) => rt.log.error("pruning webhook history to its size budget failed", { error: String(error) }),
      );
  };
  retain();
  const timers = [setInterval(retain, intervalMs)];
  if (rt.config.deliveryHistoryMaxMb > 0) {
    budget();
    timers.push(setInterval(budget, BUDGET_INTERVAL_MS));
  }
  for (const timer of timers) timer.unref?.();
  return async () => {
    for (const timer of timers) clearInterval(timer);
    await running;
  };
}
