import type { Db } from "../db/sql.ts";
import { ProblemError } from "../shared/problem.ts";
import { listMeta, pageRows, pageWindow, parseListQuery, parseTimestampFilter, readListPage, type ListMeta } from "../http/list-query.ts";
import type { Runtime } from "../runtime.ts";
import { DAY_MS, toTimestamp } from "../shared/time.ts";
import { TOMBSTONE_FILTERS, type Tombstone } from "./model.ts";
import { countTombstonesSince, deleteTombstonesBefore, listTombstonesSince, type Resource, type TombstoneRow } from "./store.ts";

/** tombstoneHorizon is the oldest deletion time still known: every deletion after it has its tombstone. */
function tombstoneHorizon(rt: Runtime, now: number): number {
  return now - rt.config.tombstoneRetentionDays * DAY_MS;
}

/**
 * listDeletedPage answers GET /contacts/deleted and /accounts/deleted: the deletions after `since`,
 * oldest first. A `since` before the retention horizon is 410: deletions from then may be pruned,
 * so an empty page would be a lie; the caller resyncs in full.
 */
export async function listDeletedPage(rt: Runtime, resource: Resource, query: Record<string, unknown>, now = Date.now()): Promise<{ data: Tombstone[]; meta: ListMeta }> {
  const list = parseListQuery(query, { sorts: ["deleted_at"], defaultSort: "deleted_at", defaultDirection: "asc", filters: TOMBSTONE_FILTERS, fixedOrder: true });
  const since = parseTimestampFilter("since", query.since);
  const horizon = tombstoneHorizon(rt, now);
  if (since !== undefined && since < horizon) {
    throw new ProblemError(
      410,
      "deletions-expired",
      `Deletions are kept for ${rt.config.tombstoneRetentionDays} days; those before ${toTimestamp(horizon)} may be gone. List every ${resource} to resync, then poll from the time the resync started.`,
      [{ parameter: "since", detail: `must be ${toTimestamp(horizon)} or later` }],
      {},
      { retained_since: toTimestamp(horizon) },
    );
  }
  const after = since ?? -1;
  const { read, total } = await readListPage(
    rt.db,
    list,
    (source) => listTombstonesSince(source, resource, after, pageWindow(list)),
    (source) => countTombstonesSince(source, resource, after),
  );
  return {
    data: pageRows(list, read).map((row) => ({ id: row.id, deleted_at: toTimestamp(row.deleted_at) })),
    meta: listMeta(list, total, read, (row: TombstoneRow) => row.deleted_at, query, TOMBSTONE_FILTERS),
  };
}

/** pruneTombstones deletes up to `limit` tombstones past the retention and returns how many; call it inside a write. */
export function pruneTombstones(tx: Db, rt: Runtime, now: number, limit: number): Promise<number> {
  return deleteTombstonesBefore(tx, tombstoneHorizon(rt, now), limit);
}
