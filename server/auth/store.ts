import type { Database } from "bun:sqlite";

export interface ApiTokenRow {
  id: string;
  name: string;
  prefix: string;
  token_hash: Uint8Array;
  created_at: number;
  last_used_at: number | null;
  revoked_at: number | null;
}

/** ApiTokenRateRow is a token's own rate limit; NULL columns mean the server's defaults. */
export type ApiTokenRateRow = {
  rate_read_per_second: number | null;
  rate_read_burst: number | null;
  rate_write_per_second: number | null;
  rate_write_burst: number | null;
}

/** insertApiToken stores a new token's hash, metadata and optional rate limit. */
export function insertApiToken(db: Database, row: Omit<ApiTokenRow, "last_used_at" | "revoked_at"> & ApiTokenRateRow): void {
  db.query(
    `INSERT INTO api_tokens (id, name, prefix, token_hash, created_at, rate_read_per_second, rate_read_burst, rate_write_per_second, rate_write_burst)
     VALUES ($id, $name, $prefix, $token_hash, $created_at, $rate_read_per_second, $rate_read_burst, $rate_write_per_second, $rate_write_burst)`,
  ).run(row);
}

/** findApiTokenRate returns a token's rate limit columns, or null when there is no such token. */
export function findApiTokenRate(db: Database, id: string): ApiTokenRateRow | null {
  return db
    .query<ApiTokenRateRow, [string]>("SELECT rate_read_per_second, rate_read_burst, rate_write_per_second, rate_write_burst FROM api_tokens WHERE id = ?")
    .get(id);
}

/** findActiveTokensByPrefix returns the unrevoked tokens whose visible prefix matches. */
export function findActiveTokensByPrefix(db: Database, prefix: string): ApiTokenRow[] {
  return db.query<ApiTokenRow, [string]>("SELECT * FROM api_tokens WHERE prefix = ? AND revoked_at IS NULL").all(prefix);
}

/** listApiTokens returns every token, newest first. */
export function listApiTokens(db: Database): ApiTokenRow[] {
  return db.query<ApiTokenRow, []>("SELECT * FROM api_tokens ORDER BY id DESC").all();
}

/** markTokenRevoked sets revoked_at on an unrevoked token and tells whether one was changed. */
export function markTokenRevoked(db: Database, id: string, at: number): boolean {
  return db.query("UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL").run(at, id).changes > 0;
}

/** findApiTokenById returns one token row or null. */
export function findApiTokenById(db: Database, id: string): ApiTokenRow | null {
  return db.query<ApiTokenRow, [string]>("SELECT * FROM api_tokens WHERE id = ?").get(id);
}

/** touchTokenLastUsed records when a token was last used. */
export function touchTokenLastUsed(db: Database, id: string, at: number): void {
  db.query("UPDATE api_tokens SET last_used_at = ? WHERE id = ?").run(at, id);
}
