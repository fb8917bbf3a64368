import { writeInSteps, type Database, type Db } from "../db/sql.ts";
import { notFound, ProblemError } from "../shared/problem.ts";
import { keptProgress, saveIdempotentProgress, saveIdempotentResponse, type IdempotencyScope } from "../idempotency/service.ts";
import { findAccountById } from "../accounts/store.ts";
import { findContactById } from "../contacts/store.ts";
import { eraseAttemptsOfEvents, eraseEventsAbout, failPendingDeliveriesOfEvents, hasEventsAbout } from "../webhooks/store.ts";
import { listMeta, pageRows, pageWindow, parseListQuery, parseTimestampFilter, readListPage, type ListMeta } from "../http/list-query.ts";
import type { Runtime } from "../runtime.ts";
import { DAY_MS, hourOf, toTimestamp } from "../shared/time.ts";
import type { ChangeMaker } from "../shared/made-by.ts";
import { TOMBSTONE_FILTERS, type Erasure, type Tombstone } from "./model.ts";
import { countTombstonesSince, deleteTombstonesBefore, findPrunedHorizon, forgetTombstoneEmail, hasTombstone, listTombstonesSince, raisePrunedHorizon, type Resource, type TombstoneRow } from "./store.ts";

/**
 * retentionStart is the oldest deletion time this instance's --tombstone-retention-days keeps,
 * down to the start of its hour: the retained_since a 410 gives then stays accepted for the rest
 * of the hour, where one a millisecond later would refuse it again. Pruning cuts there too, so it
 * never passes the horizon it answers.
 */
function retentionStart(rt: Runtime, now: number): number {
  return hourOf(now - rt.config.tombstoneRetentionDays * DAY_MS);
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
  const list = parseListQuery(query, { list: `${resource}s/deleted`, sorts: ["deleted_at"], defaultSort: "deleted_at", defaultDirection: "asc", filters: TOMBSTONE_FILTERS, fixedOrder: true }, rt.secrets);
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
    meta: listMeta(list, total, read, (row: TombstoneRow) => row.deleted_at),
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

/** ErasableResource is a kind of record whose events hold it: users send none. */
export type ErasableResource = "contact" | "account";

/** ERASABLE is, per kind of record, its ids' prefix, its live row's finder and the events holding the record: its delete's event holds only id, version and deleted_at. */
const ERASABLE: Record<ErasableResource, { prefix: string; find: (db: Db, id: string) => Promise<unknown>; events: readonly string[] }> = {
  contact: { prefix: "con_", find: findContactById, events: ["contact.created", "contact.updated"] },
  account: { prefix: "acc_", find: findAccountById, events: ["account.created", "account.updated"] },
};

/**
 * refuseUnerasable throws unless `id` is a deleted record of `resource`: 409 record-not-deleted
 * while it exists (a live record's history is not erased, whoever asks), 404 when the service
 * knows nothing of it (no tombstone, no event about it), or when the id is another kind's.
 */
export async function refuseUnerasable(db: Db, resource: ErasableResource, id: string): Promise<void> {
  const kind = ERASABLE[resource];
  if (!id.startsWith(kind.prefix)) throw notFound(`deleted ${resource}`, id);
  if ((await kind.find(db, id)) !== null) {
    throw new ProblemError(409, "record-not-deleted", `The ${resource} ${id} exists: only a deleted ${resource}'s events are erased. Delete it first (DELETE /public/v1/${resource}s/${id}), then erase them.`);
  }
  // A tombstone pruned before the events (a paused subscription's keep theirs) leaves the events to tell.
  if (!(await hasTombstone(db, resource, id)) && !(await hasEventsAbout(db, id))) throw notFound(`deleted ${resource}`, id);
}

/** erasedReason is the last_error of a pending delivery an erasure ended. */
function erasedReason(now: number): string {
  return `not sent: its event's payload was erased at ${toTimestamp(now)}, after the record was deleted`;
}

/**
 * eraseDeletedRecord erases what the earlier events of a deleted contact or account hold of it, in
 * short writes (writeInSteps) of `chunk` events each, oldest first: each write replaces their
 * payloads with a marker holding only their type and ids (eraseEventsAbout, erased by `by`), ends their pending
 * deliveries as failed (a paused subscription's too: none is sent after it), and drops from their
 * attempts what receivers answered, the signatures and request headers sent, and the Location an
 * earlier version's error quoted (eraseAttemptsOfEvents). The delete's own event, holding only
 * id, version and deleted_at, stays; the last write drops the email its tombstone keeps
 * (forgetTombstoneEmail), so Find finds it by that email no more. Every write checks the record
 * (refuseUnerasable: 404, 409). An erasure is idempotent: sent again, it finds nothing left and
 * answers zeros; each write but the last keeps its counts under the Idempotency-Key, so a resend
 * after a refusal between writes answers the whole erasure's, and the last saves the answer.
 */
export async function eraseDeletedRecord(db: Database, resource: ErasableResource, id: string, chunk: number, idempotency: IdempotencyScope | null, by: ChangeMaker | null): Promise<{ status: number; body: { data: Erasure } }> {
  const kept = keptProgress<Erasure>(idempotency);
  let erased = kept?.events_erased ?? 0;
  let failed = kept?.deliveries_failed ?? 0;
  return writeInSteps(db, async (tx) => {
    const now = Date.now();
    await refuseUnerasable(tx, resource, id);
    const events = await eraseEventsAbout(tx, id, ERASABLE[resource].events, now, by, chunk);
    // Counted as the step runs: a step that fails ends the erasure, so no count outlives its rollback.
    failed += await failPendingDeliveriesOfEvents(tx, events, erasedReason(now), now);
    await eraseAttemptsOfEvents(tx, events);
    erased += events.length;
    const data = { id, events_erased: erased, deliveries_failed: failed };
    if (events.length === chunk) {
      await saveIdempotentProgress(tx, idempotency, data, now);
      return null;
    }
    // Last, with the last events: an erasure cut short leaves the contact found by its email, to finish it.
    await forgetTombstoneEmail(tx, resource, id);
    await saveIdempotentResponse(tx, idempotency, 200, { data }, now);
    return { status: 200, body: { data } };
  }, (committed) => `the payloads of ${committed * chunk} of the ${resource}'s earlier events were erased`);
}
