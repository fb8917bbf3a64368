import type { Database } from "bun:sqlite";

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
export function findIdempotencyRecord(db: Database, id: IdempotencyKeyId, since: number): IdempotencyRow | null {
  return db
    .query<IdempotencyRow, [string, string, string, string, number]>(
      "SELECT fingerprint, status, response_body, created_at FROM idempotency_keys WHERE token_id = ? AND method = ? AND path = ? AND idem_key = ? AND created_at >= ?",
    )
    .get(id.tokenId, id.method, id.path, id.key, since);
}

/** upsertIdempotencyRecord saves a finished response for a key (replacing an expired one). */
export function upsertIdempotencyRecord(db: Database, id: IdempotencyKeyId, fingerprint: Uint8Array, status: number, body: string, now: number): void {
  db.query(
    "INSERT OR REPLACE INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
  ).run(id.tokenId, id.method, id.path, id.key, fingerprint, status, body, now);
}

/** deleteIdempotencyRecordsBefore prunes records older than the cutoff and returns how many went. */
export function deleteIdempotencyRecordsBefore(db: Database, cutoff: number): number {
  return db.query("DELETE FROM idempotency_keys WHERE created_at < ?").run(cutoff).changes;
}
