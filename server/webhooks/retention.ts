import { deleteRotationsWithoutReplacementBefore } from "../../console/subscriptions/store.ts";
import type { Database, Db } from "../db/sql.ts";
import { pruneIdempotencyKeys } from "../idempotency/service.ts";
import { deleteExpiredOperatorLinks } from "../operators/store.ts";
import type { Runtime } from "../runtime.ts";
import { DAY_MS } from "../shared/time.ts";
import { pruneTombstones } from "../tombstones/service.ts";
import { forgetTombstoneEmailsBefore, RESOURCES } from "../tombstones/store.ts";
import { STATS_KEPT_MS } from "./stats.ts";
import { deleteAttemptStatsBefore, deleteFinishedDeliveriesBefore, deleteUnreferencedEventsBefore, deleteUnusedHeaderSetsAfter, measureDeliveryHistory, type HistorySize } from "./store.ts";

/** RETENTION_INTERVAL_MS is how often the retention job runs (hourly). */
const RETENTION_INTERVAL_MS = 60 * 60 * 1000;
/** PRUNE_BATCH is how many rows one commit deletes, so pruning never holds the writer for long. */
const PRUNE_BATCH = 1000;
/** BUDGET_INTERVAL_MS is how often the history's size is held against --delivery-history-max-mb. */
const BUDGET_INTERVAL_MS = 60 * 1000;
/** BUDGET_STEP_MIN is the fewest deliveries one round of pruning to the budget deletes, so a small excess does not cost a measure per row. */
const BUDGET_STEP_MIN = 100;
/** HISTORY_READER is the reader the history's measure takes its turns on the read lane as, beside the slow lists' (API tokens, operators). */
const HISTORY_READER = "webhook history size";

/**
 * Pruning is how a run of pruning writes: at most `batch` rows a write (PRUNE_BATCH), and no write
 * more once `signal` is aborted (a stop waits for the write under way, not for the whole run; each
 * write commits on its own, so stopping between two loses nothing).
 */
export interface Pruning {
  batch?: number;
  signal?: AbortSignal;
}

/**
 * HISTORY_SIZE_FRESH_MS is how long a measure of the delivery history serves /metrics. Measuring
 * walks every page of the history's tables (SQLite's dbstat, PostgreSQL's rows): 0.7 to 1.5 s for
 * 1.3 million deliveries, on the read lane (SQLite's thread of its own, part of PostgreSQL's pool).
 */
export const HISTORY_SIZE_FRESH_MS = 60 * 1000;

/** HistoryMeasures are a database's last measure of the history that succeeded, and the one under way. */
type HistoryMeasures = { last: { at: number; size: HistorySize } | null; under: Promise<HistorySize> | null };
const historyMeasures = new WeakMap<Database, HistoryMeasures>();

/** measureHistory measures the delivery history of `db` on its read lane, started now, and keeps the figure for recentHistorySize; a failed measure (the database down, the lane full) is not kept. */
function measureHistory(db: Database, now: number): Promise<HistorySize> {
  let measures = historyMeasures.get(db);
  if (!measures) historyMeasures.set(db, (measures = { last: null, under: null }));
  const kept = measures;
  const under = db.readAside((lane) => measureDeliveryHistory(lane), HISTORY_READER);
  kept.under = under;
  under.then(
    (size) => {
      if (!kept.last || kept.last.at <= now) kept.last = { at: now, size };
    },
    () => {},
  ).finally(() => kept.under === under && (kept.under = null));
  return under;
}

/**
 * recentHistorySize is the delivery history's size as measured in the last HISTORY_SIZE_FRESH_MS
 * (by the size budget's pruning or a scrape). Past that it has a new measure start (or joins the
 * one under way) and answers with the last figure meanwhile, so a scrape waits for a measure only
 * when there was none yet.
 */
export function recentHistorySize(db: Database, now = Date.now()): Promise<HistorySize> {
  const measures = historyMeasures.get(db);
  const last = measures?.last;
  if (last && now - last.at < HISTORY_SIZE_FRESH_MS) return Promise.resolve(last.size);
  const measuring = measures?.under ?? measureHistory(db, now);
  return last ? Promise.resolve(last.size) : measuring;
}

/** pruneInBatches runs `prune` one write after another, each deleting at most the run's batch of rows, until one deletes fewer, `most` are deleted or the run is stopped; it returns how many it deleted. */
async function pruneInBatches(rt: Runtime, { batch = PRUNE_BATCH, signal }: Pruning, prune: (tx: Db, limit: number) => Promise<number>, most = Infinity): Promise<number> {
  let total = 0;
  while (total < most && !signal?.aborted) {
    const limit = Math.min(batch, most - total);
    const n = await rt.db.write((tx) => prune(tx, limit));
    total += n;
    if (n < limit) break;
  }
  return total;
}

/** writeUnlessStopped runs a pruning step of one write, unless the run was stopped (0 rows). */
function writeUnlessStopped(rt: Runtime, { signal }: Pruning, prune: (tx: Db) => Promise<number>): Promise<number> {
  return signal?.aborted ? Promise.resolve(0) : rt.db.write(prune);
}

/** forgetUnusedHeaderSets forgets the header sets no attempt refers to any more (after pruning), checking a batch of sets a write. */
async function forgetUnusedHeaderSets(rt: Runtime, { batch = PRUNE_BATCH, signal }: Pruning): Promise<void> {
  for (let after: number | null = 0; after !== null && !signal?.aborted; ) {
    const from: number = after;
    after = await rt.db.write((tx) => deleteUnusedHeaderSetsAfter(tx, from, batch));
  }
}

/** Pruned counts what one run of pruneHistory deleted, by kind. */
export type Pruned = {
  deliveries: number;
  events: number;
  idempotency_keys: number;
  attempt_stats: number;
  tombstone_emails: number;
  tombstones: number;
  rotations_without_replacement: number;
  expired_links: number;
};

/**
 * pruneHistory deletes finished deliveries (with their attempts) created more than the retention
 * period ago, then events no delivery refers to any more, then idempotency keys past 24 hours,
 * then the header sets no attempt uses, then hourly attempt statistics older than the longest stats
 * window (or of deleted subscriptions), then the emails of deleted contacts' tombstones deleted
 * before the same cutoff, then tombstones past their own (longer) retention, then the
 * console's rotations whose new subscription was deleted, untouched for the retention period, and
 * its expired one-time links.
 * Pending deliveries are kept whatever their age: pruning them would lose events.
 */
export async function pruneHistory(rt: Runtime, now = Date.now(), pruning: Pruning = {}): Promise<Pruned> {
  const cutoff = now - rt.config.deliveryRetentionDays * DAY_MS;
  const deliveries = await pruneInBatches(rt, pruning, (tx, limit) => deleteFinishedDeliveriesBefore(tx, cutoff, limit));
  const events = await pruneInBatches(rt, pruning, (tx, limit) => deleteUnreferencedEventsBefore(tx, cutoff, limit));
  const idempotencyKeys = await pruneInBatches(rt, pruning, (tx, limit) => pruneIdempotencyKeys(tx, now, limit));
  // Every run, not only one that deleted deliveries: a run stopped or failed after its delete left
  // their sets (a receiver's Location may name the person), and a quiet installation may never
  // delete another delivery. Each set is two index probes (migration 0044).
  await forgetUnusedHeaderSets(rt, pruning);
  const attemptStats = await writeUnlessStopped(rt, pruning, (tx) => deleteAttemptStatsBefore(tx, now - STATS_KEPT_MS));
  // The email Find finds a deleted contact by goes when the events that held it do (the same
  // cutoff): the tombstone itself stays longer, and a deleted person is to be gone by then.
  const tombstoneEmails = await pruneInBatches(rt, pruning, (tx, limit) => forgetTombstoneEmailsBefore(tx, cutoff, limit));
  let tombstones = 0;
  for (const resource of RESOURCES) tombstones += await pruneInBatches(rt, pruning, (tx, limit) => pruneTombstones(tx, rt, resource, now, limit));
  const rotationsWithoutReplacement = await writeUnlessStopped(rt, pruning, (tx) => deleteRotationsWithoutReplacementBefore(tx, cutoff));
  const expiredLinks = await writeUnlessStopped(rt, pruning, (tx) => deleteExpiredOperatorLinks(tx, now));
  return { deliveries, events, idempotency_keys: idempotencyKeys, attempt_stats: attemptStats, tombstone_emails: tombstoneEmails, tombstones, rotations_without_replacement: rotationsWithoutReplacement, expired_links: expiredLinks };
}

/**
 * pruneToBudget deletes the oldest finished deliveries (with their attempts) while the history is
 * larger than --delivery-history-max-mb. A measure walks every page of the history, so the excess
 * is turned into a count of deliveries once (from what one takes on average), deleted a batch a
 * write, and measured again after: pages a delete leaves partly used still count, so another round
 * may be owed. Pending deliveries are never pruned, so a backlog alone may stay above the budget.
 * Returns how many deliveries it deleted and the size left (as last measured).
 */
export async function pruneToBudget(rt: Runtime, now = Date.now(), pruning: Pruning = {}): Promise<{ deliveries: number; bytes: number }> {
  const budget = rt.config.deliveryHistoryMaxMb * 1024 * 1024;
  let size = await measureHistory(rt.db, Date.now());
  let deleted = 0;
  while (budget > 0 && size.bytes > budget && !pruning.signal?.aborted) {
    const perDelivery = size.bytes / Math.max(1, size.deliveries);
    const owed = Math.max(BUDGET_STEP_MIN, Math.ceil((size.bytes - budget) / perDelivery));
    const n = await pruneInBatches(rt, pruning, (tx, limit) => deleteFinishedDeliveriesBefore(tx, now + 1, limit), owed);
    deleted += n;
    if (n > 0 && !pruning.signal?.aborted) size = await measureHistory(rt.db, Date.now());
    if (n < owed) break;
  }
  // Every minute only after a delete: what a stopped or failed sweep left, the hourly run forgets.
  if (deleted > 0) await forgetUnusedHeaderSets(rt, pruning);
  return { deliveries: deleted, bytes: size.bytes };
}

/**
 * startRetentionJob runs pruneHistory now and then every hour, and with a size budget
 * (--delivery-history-max-mb) pruneToBudget every minute, `batch` rows a write (PRUNE_BATCH); the
 * returned function stops both, waiting for the write under way (or the history's measure), not
 * for the rest of the run.
 */
export function startRetentionJob(rt: Runtime, { intervalMs = RETENTION_INTERVAL_MS, batch = PRUNE_BATCH }: { intervalMs?: number; batch?: number } = {}): () => Promise<void> {
  const stopping = new AbortController();
  const pruning: Pruning = { batch, signal: stopping.signal };
  let running: Promise<unknown> = Promise.resolve();
  const chain = <T>(run: () => Promise<T>, report: (result: T) => void, failed: string) => {
    running = running.then(() => (stopping.signal.aborted ? undefined : run().then(report, (error: unknown) => rt.log.error(failed, { error: String(error) }))));
  };
  const retain = () =>
    chain(
      () => pruneHistory(rt, Date.now(), pruning),
      (pruned) => {
        if (Object.values(pruned).some((n) => n > 0)) rt.log.info("history pruned", pruned);
      },
      "pruning webhook history failed",
    );
  const budget = () =>
    chain(
      () => pruneToBudget(rt, Date.now(), pruning),
      (pruned) => {
        // Stopped between two writes, the size was not measured again: the next start goes on.
        if (stopping.signal.aborted) rt.log.info("pruning webhook history to its size budget stopped with the service", { deliveries: pruned.deliveries, budget_mb: rt.config.deliveryHistoryMaxMb });
        else if (pruned.deliveries > 0) rt.log.info("webhook history pruned to its size budget", { ...pruned, budget_mb: rt.config.deliveryHistoryMaxMb });
      },
      "pruning webhook history to its size budget failed",
    );
  retain();
  const timers = [setInterval(retain, intervalMs)];
  if (rt.config.deliveryHistoryMaxMb > 0) {
    budget();
    timers.push(setInterval(budget, BUDGET_INTERVAL_MS));
  }
  for (const timer of timers) timer.unref?.();
  return async () => {
    for (const timer of timers) clearInterval(timer);
    stopping.abort();
    await running;
  };
}
