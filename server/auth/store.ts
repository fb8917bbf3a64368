import { NotRecorded, unlessHeld, type Db } from "../db/sql.ts";
import type { MadeByColumns } from "../shared/made-by.ts";

export interface ApiTokenRow extends MadeByColumns {
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
export async function insertApiToken(db: Db, row: Omit<ApiTokenRow, "last_used_at" | "revoked_at"> & ApiTokenRateRow): Promise<void> {
  await db.run(
    `INSERT INTO api_tokens (id, name, prefix, token_hash, created_at, created_by, created_by_email, rate_read_per_second, rate_read_burst, rate_write_per_second, rate_write_burst)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    [row.id, row.name, row.prefix, row.token_hash, row.created_at, row.created_by, row.created_by_email, row.rate_read_per_second, row.rate_read_burst, row.rate_write_per_second, row.rate_write_burst],
  );
}

/** replaceTokenMakerEmail puts `marker` in place of `email` where it is kept as the maker of API tokens (created_by_email), and returns how many. */
export function replaceTokenMakerEmail(db: Db, email: string, marker: string): Promise<number> {
  return db.run("UPDATE api_tokens SET created_by_email = ? WHERE created_by_email = ?", [marker, email]);
}

/** findApiTokenRate returns a token's rate limit columns, or null when there is no such token. */
export function findApiTokenRate(db: Db, id: string): Promise<ApiTokenRateRow | null> {
  return db.get<ApiTokenRateRow>("SELECT rate_read_per_second, rate_read_burst, rate_write_per_second, rate_write_burst FROM api_tokens WHERE id = ?", [id]);
}

/** findActiveTokensByPrefix returns the unrevoked tokens whose visible prefix matches. */
export function findActiveTokensByPrefix(db: Db, prefix: string): Promise<ApiTokenRow[]> {
  return db.all<ApiTokenRow>("SELECT * FROM api_tokens WHERE prefix = ? AND revoked_at IS NULL", [prefix]);
}

/** listApiTokens returns every token, newest first. */
export function listApiTokens(db: Db): Promise<ApiTokenRow[]> {
  return db.all<ApiTokenRow>("SELECT * FROM api_tokens ORDER BY id DESC");
}

/** markTokenRevoked sets revoked_at on an unrevoked token and tells whether one was changed. */
export async function markTokenRevoked(db: Db, id: string, at: number): Promise<boolean> {
  return (await db.run("UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", [at, id])) > 0;
}

/** markTokensMadeByRevoked revokes, at `at`, every unrevoked token an operator made and returns their ids. */
export async function markTokensMadeByRevoked(db: Db, operatorId: string, at: number): Promise<string[]> {
  return (await db.all<{ id: string }>("UPDATE api_tokens SET revoked_at = ? WHERE created_by = ? AND revoked_at IS NULL RETURNING id", [at, operatorId])).map((row) => row.id);
}

/** findApiTokenById returns one token row or null. */
export function findApiTokenById(db: Db, id: string): Promise<ApiTokenRow | null> {
  return db.get<ApiTokenRow>("SELECT * FROM api_tokens WHERE id = ?", [id]);
}

/** touchTokenLastUsed records when a token was last used, as bookkeeping (writeBookkeeping): NotRecorded when its row is held elsewhere. */
export async function touchTokenLastUsed(db: Db, id: string, at: number): Promise<void> {
  if ((await db.run(`UPDATE api_tokens SET last_used_at = ? WHERE ${unlessHeld(db, "api_tokens", "id")}`, [at, id])) === 0) throw new NotRecorded("api_tokens");
}
