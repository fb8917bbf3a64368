import type { Db } from "../db/sql.ts";
import { ProblemError } from "../shared/problem.ts";
import { listMeta, pageRows, pageWindow, parseListQuery, parseTimestampFilter, readListPage, type ListMeta } from "../http/list-query.ts";
import type { Runtime } from "../runtime.ts";
import { DAY_MS, toTimestamp } from "../shared/time.ts";
import { TOMBSTONE_FILTERS, type Tombstone } from "./model.ts";
import { countTombstonesSince, deleteTombstonesBefore, findPrunedHorizon, listTombstonesSince, raisePrunedHorizon, type Resource, type TombstoneRow } from "./store.ts";

/** retentionStart is the oldest deletion time this instance's --tombstone-retention-days keeps. */
function retentionStart(rt: Runtime, now: number): number {
  return now - rt.config.tombstoneRetentionDays * DAY_MS;
}

/**
 * refuseExpiredSince throws 410 for a `since` before the oldest deletion time still known: every
 * deletion after it has its tombstone. That is the retention's start, or the newest deletion pruned
 * when it is later: pruning by a shorter retention, set before or on another instance sharing the
 * database, went past this instance's, and an empty page would be a lie.
 */
function refuseExpiredSince(rt: Runtime, resource: Resource, since: number, newestPruned: number | null, now: number): void {
  const kept = retentionStart(rt, now);
  const horizon = Math.max(kept, newestPruned ?? kept);
  if (since >= horizon) return;
  const days = rt.config.tombstoneRetentionDays;
  const gone = horizon > kept
    ? `Deletions up to ${toTimestamp(horizon)} may have been pruned (tombstones were kept for fewer days than the ${days} now set).`
    : `Deletions are kept for ${days} days; those before ${toTimestamp(horizon)} may be gone.`;
  throw new ProblemError(
    410,
    "deletions-expired",
    `${gone} List every ${resource} to resync, then poll from the time the resync started.`,
    [{ parameter: "since", detail: `must be ${toTimestamp(horizon)} or later` }],
    {},
    { retained_since: toTimestamp(horizon) },
  );
}

/**
 * listDeletedPage answers GET /contacts/deleted, /accounts/deleted and /users/deleted: the deletions after
 * `since`, oldest first. A `since` before the deletions still known is 410 (refuseExpiredSince), decided in
 * the page's snapshot so that a prune committing meanwhile cannot empty the page unnoticed; the
 * caller resyncs in full.
 */
export async function listDeletedPage(rt: Runtime, resource: Resource, query: Record<string, unknown>, now = Date.now()): Promise<{ data: Tombstone[]; meta: ListMeta }> {
  const list = parseListQuery(query, { sorts: ["deleted_at"], defaultSort: "deleted_at", defaultDirection: "asc", filters: TOMBSTONE_FILTERS, fixedOrder: true });
  const since = parseTimestampFilter("since", query.since);
  const after = since ?? -1;
  const { read, total } = await readListPage(
    rt.db,
    list,
    async (source) => {
      if (since !== undefined) refuseExpiredSince(rt, resource, since, await findPrunedHorizon(source, resource), now);
      return listTombstonesSince(source, resource, after, pageWindow(list));
    },
    (source) => countTombstonesSince(source, resource, after),
  );
  return {
    data: pageRows(list, read).map((row) => ({ id: row.id, deleted_at: toTimestamp(row.deleted_at), version: row.version })),
    meta: listMeta(list, total, read, (row: TombstoneRow) => row.deleted_at, query, TOMBSTONE_FILTERS),
  };
}

/**
 * pruneTombstones deletes up to `limit` of a resource's tombstones past the retention, records the
 * newest deletion time it removed (refuseExpiredSince answers 410 before it whatever the retention
 * is later), and returns how many it deleted; call it inside a write.
 */
export async function pruneTombstones(tx: Db, rt: Runtime, resource: Resource, now: number, limit: number): Promise<number> {
  const pruned = await deleteTombstonesBefore(tx, resource, retentionStart(rt, now), limit);
  if (pruned.length > 0) await raisePrunedHorizon(tx, resource, Math.max(...pruned));
  return pruned.length;
}
