import type { Db } from "../db/sql.ts";
import type { Resource } from "../tombstones/store.ts";

export interface IdempotencyRow {
  fingerprint: Uint8Array;
  status: number;
  response_body: string;
  created_at: number;
}

export interface IdempotencyKeyId {
  tokenId: string;
  method: string;
  path: string;
  key: string;
}

/** findIdempotencyRecord returns the stored response for a key, if one was saved after `since`. */
export function findIdempotencyRecord(db: Db, id: IdempotencyKeyId, since: number): Promise<IdempotencyRow | null> {
  return db.get<IdempotencyRow>(
    "SELECT fingerprint, status, response_body, created_at FROM idempotency_keys WHERE token_id = ? AND method = ? AND path = ? AND idem_key = ? AND created_at >= ?",
    [id.tokenId, id.method, id.path, id.key, since],
  );
}

/** upsertIdempotencyRecord saves a finished response for a key (replacing an expired one), with the id of the resource it shows, if one. */
export async function upsertIdempotencyRecord(db: Db, id: IdempotencyKeyId, fingerprint: Uint8Array, status: number, body: string, resourceId: string | null, now: number): Promise<void> {
  await db.run(
    `INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, resource_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (token_id, method, path, idem_key) DO UPDATE SET fingerprint = excluded.fingerprint, status = excluded.status, response_body = excluded.response_body, resource_id = excluded.resource_id, created_at = excluded.created_at`,
    [id.tokenId, id.method, id.path, id.key, fingerprint, status, body, resourceId, now],
  );
}

/** IN_FLIGHT_STATUS marks a reservation: a request holding the key that has not finished (no HTTP status is 0). */
export const IN_FLIGHT_STATUS = 0;

/**
 * UNFINISHED_STATUS marks the progress of a change in several writes refused after some of them
 * committed (no HTTP status is 1): its body is where those writes stopped, for the same request
 * sent again under the key to continue from. It holds the key for no one: the next run takes it.
 */
export const UNFINISHED_STATUS = 1;

/**
 * WITHDRAWN_STATUS marks an answer withdrawn when the resource it showed was deleted (no kept
 * answer is a 410 otherwise: refusals are not kept); its body is a WithdrawnAnswer.
 */
export const WITHDRAWN_STATUS = 410;

/** WithdrawnAnswer is what a withdrawn answer keeps: which resource was deleted, and nothing of it. */
export interface WithdrawnAnswer {
  resource: Resource;
  id: string;
}

/**
 * reserveIdempotencyKey stores a reservation of the key for a request about to run, unless a
 * record holds it: a reservation made after `staleBefore` or a response saved after `expiredBefore`.
 * An unfinished run's progress (kept in its reservation, or in an UNFINISHED_STATUS record) stays in
 * the reservation taken over, read in this same statement: a run of the key that committed one more
 * step after its caller looked must not be gone on from an older place. Progress is taken over only
 * by the same body (fingerprint); another body finds the key held. Progress older than
 * `expiredBefore` is past the key's 24 hours as an answer would be, though only the hourly prune
 * deletes it: any body takes the key and starts over, as on SQLite, whose caller's look skips it.
 * It returns the progress the reservation holds ("" for none), or null when another request holds
 * the key; of several racing for it, exactly one gets it. A reservation shows no resource: one
 * left the expired answer's would have it withdrawn by that resource's delete while the request
 * runs, which then could not keep its answer.
 */
export async function reserveIdempotencyKey(db: Db, id: IdempotencyKeyId, fingerprint: Uint8Array, now: number, staleBefore: number, expiredBefore: number): Promise<string | null> {
  const unfinished = `idempotency_keys.status IN (${UNFINISHED_STATUS}, ${IN_FLIGHT_STATUS})`;
  const expired = "idempotency_keys.created_at < CAST(? AS bigint)";
  const reserved = await db.all<{ response_body: string }>(
    `INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, resource_id, created_at) VALUES (?, ?, ?, ?, ?, ${IN_FLIGHT_STATUS}, '', NULL, ?)
     ON CONFLICT (token_id, method, path, idem_key) DO UPDATE SET fingerprint = excluded.fingerprint, status = excluded.status,
       response_body = CASE WHEN ${unfinished} AND NOT ${expired} THEN idempotency_keys.response_body ELSE excluded.response_body END, resource_id = excluded.resource_id, created_at = excluded.created_at
     WHERE (idempotency_keys.response_body = '' OR NOT ${unfinished} OR ${expired} OR idempotency_keys.fingerprint = excluded.fingerprint)
       AND (idempotency_keys.status = ${UNFINISHED_STATUS} OR idempotency_keys.created_at < CASE WHEN idempotency_keys.status = ${IN_FLIGHT_STATUS} THEN CAST(? AS bigint) ELSE CAST(? AS bigint) END)
     RETURNING response_body`,
    [id.tokenId, id.method, id.path, id.key, fingerprint, now, expiredBefore, expiredBefore, staleBefore, expiredBefore],
  );
  return reserved.length === 1 ? reserved[0]!.response_body : null;
}

/**
 * completeIdempotencyReservation saves a finished response in place of the reservation made at
 * `reservedAt`, and tells whether that reservation was still there: not taken over as stale by a
 * retry of the key, nor given back.
 */
export async function completeIdempotencyReservation(db: Db, id: IdempotencyKeyId, reservedAt: number, status: number, body: string, resourceId: string | null, now: number): Promise<boolean> {
  const saved = await db.run(
    `UPDATE idempotency_keys SET status = ?, response_body = ?, resource_id = ?, created_at = ?
     WHERE token_id = ? AND method = ? AND path = ? AND idem_key = ? AND status = ${IN_FLIGHT_STATUS} AND created_at = ?`,
    [status, body, resourceId, now, id.tokenId, id.method, id.path, id.key, reservedAt],
  );
  return saved > 0;
}

/** recordReservationProgress keeps a change's progress (UNFINISHED_STATUS) in the reservation made at `reservedAt`, which stays one meanwhile; it tells whether that reservation was still there. */
export async function recordReservationProgress(db: Db, id: IdempotencyKeyId, reservedAt: number, progress: string): Promise<boolean> {
  const kept = await db.run(
    `UPDATE idempotency_keys SET response_body = ? WHERE token_id = ? AND method = ? AND path = ? AND idem_key = ? AND status = ${IN_FLIGHT_STATUS} AND created_at = ?`,
    [progress, id.tokenId, id.method, id.path, id.key, reservedAt],
  );
  return kept > 0;
}

/**
 * releaseIdempotencyKey gives back the reservation made at `reservedAt` if it is still one (the
 * request saved no response): it goes, unless it holds progress (recordReservationProgress), which
 * stays as UNFINISHED_STATUS for the request sent again.
 */
export async function releaseIdempotencyKey(db: Db, id: IdempotencyKeyId, reservedAt: number): Promise<void> {
  await db.run(
    `UPDATE idempotency_keys SET status = ${UNFINISHED_STATUS} WHERE token_id = ? AND method = ? AND path = ? AND idem_key = ? AND status = ${IN_FLIGHT_STATUS} AND created_at = ? AND response_body <> ''`,
    [id.tokenId, id.method, id.path, id.key, reservedAt],
  );
  await db.run(
    `DELETE FROM idempotency_keys WHERE token_id = ? AND method = ? AND path = ? AND idem_key = ? AND status = ${IN_FLIGHT_STATUS} AND created_at = ?`,
    [id.tokenId, id.method, id.path, id.key, reservedAt],
  );
}

/**
 * withdrawIdempotencyRecordsOf replaces, inside the transaction of a contact's, account's or user's
 * delete, every kept answer showing its record (a create's, a tag or account link added; found by
 * the index of resource_id) with a WithdrawnAnswer naming it, which a replay answers with 410
 * replay-resource-deleted: nothing of the record is handed out after its delete, and the key (its
 * fingerprint and age too) stays taken, so a retried create is not made again.
 */
export function withdrawIdempotencyRecordsOf(db: Db, withdrawn: WithdrawnAnswer): Promise<number> {
  return db.run(`UPDATE idempotency_keys SET status = ${WITHDRAWN_STATUS}, response_body = ? WHERE resource_id = ?`, [JSON.stringify(withdrawn), withdrawn.id]);
}

/** deleteIdempotencyRecordsBefore prunes at most `limit` records older than the cutoff, oldest first, and returns how many went. */
export function deleteIdempotencyRecordsBefore(db: Db, cutoff: number, limit: number): Promise<number> {
  // By rowid on SQLite (the records' table is a rowid table), by the primary key on PostgreSQL.
  const key = db.dialect === "postgres" ? "token_id, method, path, idem_key" : "rowid";
  return db.run(`DELETE FROM idempotency_keys WHERE (${key}) IN (SELECT ${key} FROM idempotency_keys WHERE created_at < ? ORDER BY created_at LIMIT ?)`, [cutoff, limit]);
}
