import type { Database, Db } from "../db/sql.ts";
import { makeRoom, MAX_TRACKED_KEYS, type TokenRate } from "../limits/rate-limiter.ts";
import { sameBytes, sha256 } from "../shared/crypto.ts";
import { newId } from "../shared/ids.ts";
import { findOperatorById, listOperators } from "../operators/store.ts";
import { madeByColumns, madeByOf, type MadeBy, type MakerNames } from "../shared/made-by.ts";
import { ProblemError } from "../shared/problem.ts";
import { codePointName } from "../shared/text.ts";
import { toOptionalTimestamp, toTimestamp } from "../shared/time.ts";
import { findActiveTokensByPrefix, findApiTokenById, findApiTokenRate, insertApiToken, listApiTokens, markTokenRevoked, markTokensMadeByRevoked, touchTokenLastUsed, type ApiTokenRow } from "./store.ts";

const PREFIX_LENGTH = 12; // "crm_" + 8 characters: enough to find the row, too little to matter if shown
const LAST_USED_RESOLUTION_MS = 60_000; // last_used_at is written at most once a minute per token

export interface ApiTokenInfo {
  id: string;
  name: string;
  prefix: string;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
  /** who made it: an operator on the console, or the command line; null when made before migration 0047 */
  made_by: MadeBy | null;
}

/** BEARER_CHALLENGE is the WWW-Authenticate header of every 401 the API answers. */
export const BEARER_CHALLENGE = { "www-authenticate": 'Bearer realm="crm"' };

/** TOKEN_REFUSED is the 401's detail for a token presented that no active token matches. */
const TOKEN_REFUSED = "The API token is unknown or revoked.";

/**
 * MakerGone refuses, inside its write, what a maker was making when it stopped standing since its
 * request was let in (an API token revoked, an operator removed, by an operator's removal in that
 * moment): the write rolls back, nothing is made, and the request is answered as the maker's next
 * one: 401 as for a revoked token (the console sends the browser to sign in).
 */
export class MakerGone extends ProblemError {
  constructor(readonly madeBy: MadeBy) {
    super(401, "unauthorized", madeBy.kind === "api_token" ? TOKEN_REFUSED : "The operator who sent this was removed from the console; nothing was made.", undefined, madeBy.kind === "api_token" ? BEARER_CHALLENGE : {});
  }
}

/**
 * checkMakerStands throws MakerGone, inside the write that stores what `madeBy` made, when that
 * maker no longer stands: the API token is revoked, the operator removed. Read in the write, it
 * sees a removal that committed while the request ran (its target's name lookup, its turn for the
 * write), which otherwise would leave what the request makes active, by a maker it meant to stop.
 */
export async function checkMakerStands(tx: Db, madeBy: MadeBy | null): Promise<void> {
  if (madeBy === null || madeBy.kind === "command_line") return;
  const stands = madeBy.kind === "api_token" ? (await findApiTokenById(tx, madeBy.id))?.revoked_at === null : (await findOperatorById(tx, madeBy.id)) !== null;
  if (!stands) throw new MakerGone(madeBy);
}

export interface AuthenticatedToken {
  id: string;
  name: string;
}

function randomTokenSecret(): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  const bytes = crypto.getRandomValues(new Uint8Array(40));
  // 40 characters from 62 (rejection-free bias is < 2^-7 per character with 256 % 62; acceptable: 238 bits)
  return Array.from(bytes, (b) => alphabet[b % 62]).join("");
}

/** TOKEN_NAME_MAX_LENGTH bounds a token's name, in characters. */
const TOKEN_NAME_MAX_LENGTH = 100;

// A name is printed as it is by `token list` and the console: a tab or newline would break its row
// apart and an escape sequence would drive the operator's terminal. C0, DEL and C1 are refused.
const CONTROL_CHARACTER = /\p{Cc}/u;

/** checkTokenName returns why a token name (trimmed, as it is stored) cannot be used, or null when it can. */
export function checkTokenName(name: string): string | null {
  const trimmed = name.trim();
  if (trimmed === "" || trimmed.length > TOKEN_NAME_MAX_LENGTH) return `must be 1 to ${TOKEN_NAME_MAX_LENGTH} characters`;
  const control = CONTROL_CHARACTER.exec(trimmed);
  if (control) return `must not contain control characters (${codePointName(control[0])} at character ${control.index + 1})`;
  return null;
}

function toInfo(row: ApiTokenRow): ApiTokenInfo {
  return {
    id: row.id,
    name: row.name,
    prefix: row.prefix,
    created_at: toTimestamp(row.created_at),
    last_used_at: toOptionalTimestamp(row.last_used_at),
    revoked_at: toOptionalTimestamp(row.revoked_at),
    made_by: madeByOf(row),
  };
}

/**
 * createApiToken makes a new random token, stores only its hash and who made it (null: not known,
 * as for a token made before migration 0047), and returns the token once. A rate overrides the
 * server's default rate limits for this token. A maker that may be removed meanwhile (an
 * operator) is checked (checkMakerStands): give `db` as the write's transaction then.
 */
export async function createApiToken(db: Db, name: string, now = Date.now(), rate: TokenRate | null = null, madeBy: MadeBy | null = null): Promise<{ token: string; info: ApiTokenInfo }> {
  await checkMakerStands(db, madeBy);
  const token = `crm_${randomTokenSecret()}`;
  const row = { id: newId("tok", now), name, prefix: token.slice(0, PREFIX_LENGTH), token_hash: sha256(token), created_at: now, ...(madeBy ? madeByColumns(madeBy) : { created_by: null, created_by_email: null }) };
  await insertApiToken(db, {
    ...row,
    rate_read_per_second: rate?.readPerSecond ?? null,
    rate_read_burst: rate?.readBurst ?? null,
    rate_write_per_second: rate?.writePerSecond ?? null,
    rate_write_burst: rate?.writeBurst ?? null,
  });
  return { token, info: toInfo({ ...row, last_used_at: null, revoked_at: null }) };
}

/** listTokens returns every token's metadata (never the token). */
export async function listTokens(db: Db): Promise<ApiTokenInfo[]> {
  return (await listApiTokens(db)).map(toInfo);
}

/** makerNames reads what names the makers of tokens and subscriptions (madeByText, the console's MadeByText): the operators there are now and every API token. */
export async function makerNames(db: Db): Promise<MakerNames> {
  return { operators: new Set((await listOperators(db)).map((o) => o.id)), tokens: new Map((await listTokens(db)).map((t) => [t.id, { name: t.name, prefix: t.prefix }])) };
}

/** revokeApiToken revokes a token by id, and forgets its last use; false when no active token has that id. */
export async function revokeApiToken(db: Database, id: string, now = Date.now()): Promise<boolean> {
  const revoked = await db.write((tx) => markTokenRevoked(tx, id, now));
  tokensRevoked(db, revoked ? [id] : []);
  return revoked;
}

/** revokeTokensMadeBy revokes every active token an operator made, inside the caller's write, and returns their ids: call tokensRevoked with them once it has committed. */
export function revokeTokensMadeBy(tx: Db, operatorId: string, now: number): Promise<string[]> {
  return markTokensMadeByRevoked(tx, operatorId, now);
}

/** tokensRevoked forgets, once the write that revoked tokens `ids` has committed, what this process keeps of them: the token cache and their last uses. */
export function tokensRevoked(db: Database, ids: readonly string[]): void {
  // Emptied once the revoke is committed, not before: a request checking the token meanwhile read
  // its row still active and kept it, and the cache would have admitted it on until a restart.
  tokenCaches.delete(db);
  for (const id of ids) lastTouchedOf(db).delete(id);
}

/** findToken returns one token's metadata. */
export async function findToken(db: Db, id: string): Promise<ApiTokenInfo | null> {
  const row = await findApiTokenById(db, id);
  return row ? toInfo(row) : null;
}

/**
 * lastTouchedByDatabase holds, per database, when this process last recorded each token's last use
 * (LAST_USED_RESOLUTION_MS apart). A token revoked elsewhere (the CLI, another instance) is never
 * named here, so the map is also bounded as the rate buckets are (makeRoom).
 */
const lastTouchedByDatabase = new WeakMap<Database, Map<string, number>>();

/** lastTouchedOf returns the last recorded uses of `db`'s tokens (lastTouchedByDatabase). */
function lastTouchedOf(db: Database): Map<string, number> {
  let touched = lastTouchedByDatabase.get(db);
  if (!touched) {
    touched = new Map();
    lastTouchedByDatabase.set(db, touched);
  }
  return touched;
}

/** touchedTokenCount is how many of `db`'s tokens this process keeps the last recorded use of. */
export function touchedTokenCount(db: Database): number {
  return lastTouchedOf(db).size;
}

interface CachedTokens {
  generation: number;
  byHash: Map<string, AuthenticatedToken>;
}

const tokenCaches = new WeakMap<Database, CachedTokens>();

/**
 * cachedTokensOf returns the tokens this process has authenticated, keyed by the SHA-256 of the
 * token, emptied whenever another connection has written (a CLI `token revoke`): the database
 * is asked once per token, not once per request, and a revoked token is still refused at once.
 */
function cachedTokensOf(db: Database): Map<string, AuthenticatedToken> {
  const generation = db.outsideWritesGeneration();
  let cache = tokenCaches.get(db);
  if (!cache || cache.generation !== generation) {
    cache = { generation, byHash: new Map() };
    tokenCaches.set(db, cache);
  }
  return cache.byHash;
}

/** wellFormed tells whether a presented value can be an API token at all. */
function wellFormed(presented: string): boolean {
  return presented.startsWith("crm_") && presented.length >= PREFIX_LENGTH && presented.length <= 200;
}

/** cacheKeyOf keys the token cache by the token's SHA-256, never the token: a lookup's timing can tell nothing about a stored token. */
function cacheKeyOf(presented: string): string {
  return Bun.SHA256.hash(presented, "base64");
}

/**
 * cachedBearer answers from the token cache alone: the token, or undefined when the database must
 * be asked (not cached, or its last use is due to be recorded). Synchronous: every API request
 * passes here, most of them with a token seen moments ago.
 */
function cachedBearer(db: Database, presented: string, now: number): AuthenticatedToken | undefined {
  const token = cachedTokensOf(db).get(cacheKeyOf(presented));
  if (!token || now - (lastTouchedOf(db).get(token.id) ?? 0) >= LAST_USED_RESOLUTION_MS) return undefined;
  return token;
}

/**
 * authenticateBearer checks a presented token against the stored hashes in constant time. A last
 * use that cannot be recorded goes to `unrecorded`, and the token is admitted all the same.
 */
export async function authenticateBearer(db: Database, presented: string, unrecorded: (error: unknown) => void, now = Date.now()): Promise<AuthenticatedToken | null> {
  if (!wellFormed(presented)) return null;
  const cached = cachedTokensOf(db);
  const key = cacheKeyOf(presented);
  let token = cached.get(key) ?? null;
  if (!token) {
    const hash = sha256(presented);
    let match: ApiTokenRow | null = null;
    for (const row of await findActiveTokensByPrefix(db, presented.slice(0, PREFIX_LENGTH))) {
      if (sameBytes(row.token_hash, hash)) match = row;
    }
    if (!match) return null;
    token = { id: match.id, name: match.name };
    cached.set(key, token);
  }
  const lastTouched = lastTouchedOf(db);
  if (now - (lastTouched.get(token.id) ?? 0) >= LAST_USED_RESOLUTION_MS) {
    // A use recorded over LAST_USED_RESOLUTION_MS ago asks for the next one as no record does.
    makeRoom(lastTouched, MAX_TRACKED_KEYS, (touchedAt) => now - touchedAt >= LAST_USED_RESOLUTION_MS);
    lastTouched.set(token.id, now);
    const touched = token.id;
    // Bookkeeping: on PostgreSQL it takes no write lock, skips a row held elsewhere and gives up
    // after 50 ms on a table lock held elsewhere, so a read never waits behind another instance's
    // writes, an open transaction or an ALTER TABLE for its token's last use
    // (SQLite commits it in the next group, or gives up while another process holds the write
    // lock). Nor is a use that cannot be recorded a reason to refuse the request: a database
    // turned read-only (a failover to a standby) still serves reads. The next use a minute later
    // tries again.
    await db.writeBookkeeping((tx) => touchTokenLastUsed(tx, touched, now)).catch(unrecorded);
  }
  return token;
}

/** tokenRate returns a token's own rate limit, or null when it uses the server's defaults. */
export async function tokenRate(db: Db, id: string): Promise<TokenRate | null> {
  const row = await findApiTokenRate(db, id);
  if (!row || row.rate_read_per_second === null || row.rate_read_burst === null || row.rate_write_per_second === null || row.rate_write_burst === null) return null;
  return { readPerSecond: row.rate_read_per_second, readBurst: row.rate_read_burst, writePerSecond: row.rate_write_per_second, writeBurst: row.rate_write_burst };
}

/** BearerCheck is the outcome of reading a request's Authorization header: a token, or why not. */
export type BearerCheck = { token: AuthenticatedToken; failure?: undefined } | { token?: undefined; failure: string };

/** bearerOf reads the token of an Authorization header (the Bearer scheme, one token), or null; the API's tokens and the metrics token alike. */
export function bearerOf(header: string): string | null {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match ? match[1]! : null;
}

/**
 * checkBearer authenticates the Authorization header of a request: the token, or why not. A
 * token in the cache is answered synchronously (no promise); the database is asked otherwise.
 * A last use that cannot be recorded goes to `unrecorded` (authenticateBearer).
 */
export function checkBearer(db: Database, request: Request, unrecorded: (error: unknown) => void): BearerCheck | Promise<BearerCheck> {
  const header = request.headers.get("authorization");
  const presented = header ? bearerOf(header) : null;
  if (presented !== null && wellFormed(presented)) {
    const cached = cachedBearer(db, presented, Date.now());
    if (cached) return { token: cached };
  }
  return authenticatedOrWhyNot(db, header, presented, unrecorded);
}

async function authenticatedOrWhyNot(db: Database, header: string | null, presented: string | null, unrecorded: (error: unknown) => void): Promise<BearerCheck> {
  const token = presented !== null ? await authenticateBearer(db, presented, unrecorded) : null;
  if (token) return { token };
  return {
    failure: !header
      ? "Send an API token in the Authorization header: Authorization: Bearer <token>."
      : presented === null
        ? "The Authorization header must use the Bearer scheme: Authorization: Bearer <token>."
        : TOKEN_REFUSED,
  };
}
