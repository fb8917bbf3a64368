import type { Db } from "../db/sql.ts";

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

/** upsertIdempotencyRecord saves a finished response for a key (replacing an expired one). */
export async function upsertIdempotencyRecord(db: Db, id: IdempotencyKeyId, fingerprint: Uint8Array, status: number, body: string, now: number): Promise<void> {
  await db.run(
    `INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (token_id, method, path, idem_key) DO UPDATE SET fingerprint = excluded.fingerprint, status = excluded.status, response_body = excluded.response_body, created_at = excluded.created_at`,
    [id.tokenId, id.method, id.path, id.key, fingerprint, status, body, now],
  );
}

/** deleteIdempotencyRecordsBefore prunes records older than the cutoff and returns how many went. */
export function deleteIdempotencyRecordsBefore(db: Db, cutoff: number): Promise<number> {
  return db.run("DELETE FROM idempotency_keys WHERE created_at < ?", [cutoff]);
}
