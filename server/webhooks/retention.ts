import { pruneIdempotencyKeys } from "../idempotency/service.ts";
import type { Runtime } from "../runtime.ts";
import { DAY_MS } from "../shared/time.ts";
import { pruneTombstones } from "../tombstones/service.ts";
import { deleteFinishedDeliveriesBefore, deleteUnreferencedEventsBefore } from "./store.ts";

/** RETENTION_INTERVAL_MS is how often the retention job runs (hourly). */
const RETENTION_INTERVAL_MS = 60 * 60 * 1000;
/** PRUNE_BATCH is how many rows one commit deletes, so pruning never holds the writer for long. */
const PRUNE_BATCH = 1000;

async function pruneInBatches(rt: Runtime, prune: () => number): Promise<number> {
  let total = 0;
  for (;;) {
    const n = await rt.writes.submit(prune);
    total += n;
    if (n < PRUNE_BATCH) return total;
  }
}

/**
 * pruneHistory deletes finished deliveries (with their attempts) created more than the retention
 * period ago, then events no delivery refers to any more, then idempotency keys past 24 hours,
 * then tombstones past their own (longer) retention.
 * Pending deliveries are kept whatever their age: pruning them would lose events.
 */
export async function pruneHistory(rt: Runtime, now = Date.now()): Promise<{ deliveries: number; events: number; idempotency_keys: number; tombstones: number }> {
  const cutoff = now - rt.config.deliveryRetentionDays * DAY_MS;
  const deliveries = await pruneInBatches(rt, () => deleteFinishedDeliveriesBefore(rt.db, cutoff, PRUNE_BATCH));
  const events = await pruneInBatches(rt, () => deleteUnreferencedEventsBefore(rt.db, cutoff, PRUNE_BATCH));
  const idempotencyKeys = await rt.writes.submit(() => pruneIdempotencyKeys(rt.db, now));
  const tombstones = await pruneInBatches(rt, () => pruneTombstones(rt, now, PRUNE_BATCH));
  return { deliveries, events, idempotency_keys: idempotencyKeys, tombstones };
}

/** startRetentionJob runs pruneHistory now and then every hour; the returned function stops it and waits for a run under way. */
export function startRetentionJob(rt: Runtime, intervalMs = RETENTION_INTERVAL_MS): () => Promise<void> {
  let running: Promise<unknown> = Promise.resolve();
  const run = () => {
    running = running
      .then(() => pruneHistory(rt))
      .then(
        (pruned) => {
          if (pruned.deliveries + pruned.events + pruned.idempotency_keys + pruned.tombstones > 0) rt.log.info("history pruned", pruned);
        },
        (error: unknown) => rt.log.error("pruning webhook history failed", { error: String(error) }),
      );
  };
  run();
  const timer = setInterval(run, intervalMs);
  timer.unref?.();
  return async () => {
    clearInterval(timer);
    await running;
  };
}
