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

/** insertApiToken stores a new token's hash and metadata. */
export function insertApiToken(db: Database, row: Omit<ApiTokenRow, "last_used_at" | "revoked_at">): void {
  db.query("INSERT INTO api_tokens (id, name, prefix, token_hash, created_at) VALUES ($id, $name, $prefix, $token_hash, $created_at)").run(row);
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
