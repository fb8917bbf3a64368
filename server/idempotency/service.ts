import type { Db } from "../db/sql.ts";
import { ProblemError } from "../shared/problem.ts";
import { sameBytes, sha256 } from "../shared/crypto.ts";
import { findIdempotencyRecord, upsertIdempotencyRecord, deleteIdempotencyRecordsBefore, type IdempotencyKeyId } from "./store.ts";

/** IDEMPOTENCY_RETENTION_MS is how long a finished response is replayed (24 hours). */
export const IDEMPOTENCY_RETENTION_MS = 24 * 60 * 60 * 1000;
const MAX_KEY_LENGTH = 255;

/** IdempotencyScope identifies one idempotent request; services save their response under it. */
export interface IdempotencyScope extends IdempotencyKeyId {
  fingerprint: Uint8Array;
}

export interface IdempotentResult<T> {
  status: number;
  body: T;
  replayed: boolean;
}

/** canonicalJson serialises a value with object keys sorted, so equal bodies give equal text. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.keys(value as object)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`);
    return `{${entries.join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

function fingerprintOf(body: unknown): Uint8Array {
  return sha256(canonicalJson(body ?? null));
}

/**
 * IdempotencyGuard runs POSTs that carry an Idempotency-Key at most once per token, method,
 * path and key: finished requests are replayed from the database, requests still running in
 * this process answer 409, and a different body under the same key answers 422.
 */
export class IdempotencyGuard {
  private readonly inFlight = new Set<string>();

  constructor(private readonly db: Db) {}

  /** run executes `execute` once for the key (or always, without a key) and returns its result or the replay. */
  async run<T>(
    request: { tokenId: string; method: string; path: string; key: string | undefined; body: unknown },
    execute: (scope: IdempotencyScope | null) => Promise<{ status: number; body: T }>,
  ): Promise<IdempotentResult<T>> {
    if (request.key === undefined) return { ...(await execute(null)), replayed: false };
    if (request.key.length === 0 || request.key.length > MAX_KEY_LENGTH) {
      throw new ProblemError(422, "validation", `Idempotency-Key must be 1 to ${MAX_KEY_LENGTH} characters.`, [
        { header: "idempotency-key", detail: `must be 1 to ${MAX_KEY_LENGTH} characters` },
      ]);
    }
    const scope: IdempotencyScope = { tokenId: request.tokenId, method: request.method, path: request.path, key: request.key, fingerprint: fingerprintOf(request.body) };
    const stored = await findIdempotencyRecord(this.db, scope, Date.now() - IDEMPOTENCY_RETENTION_MS);
    if (stored) {
      if (!sameBytes(stored.fingerprint, scope.fingerprint)) {
        throw new ProblemError(422, "idempotency-key-reused", "This Idempotency-Key was already used with a different request body. Use a new key for a different request.");
      }
      return { status: stored.status, body: JSON.parse(stored.response_body) as T, replayed: true };
    }
    const lock = JSON.stringify([scope.tokenId, scope.method, scope.path, scope.key]);
    if (this.inFlight.has(lock)) {
      throw new ProblemError(409, "idempotency-key-in-use", "A request with this Idempotency-Key is still being processed. Retry after it finishes.", undefined, { "retry-after": "1" });
    }
    this.inFlight.add(lock);
    try {
      return { ...(await execute(scope)), replayed: false };
    } finally {
      this.inFlight.delete(lock);
    }
  }
}

/** saveIdempotentResponse records a finished response; call it inside the transaction of the change. */
export async function saveIdempotentResponse(db: Db, scope: IdempotencyScope | null, status: number, body: unknown, now = Date.now()): Promise<void> {
  if (scope) await upsertIdempotencyRecord(db, scope, scope.fingerprint, status, JSON.stringify(body), now);
}

/** pruneIdempotencyKeys deletes records past the 24-hour retention. */
export function pruneIdempotencyKeys(db: Db, now = Date.now()): Promise<number> {
  return deleteIdempotencyRecordsBefore(db, now - IDEMPOTENCY_RETENTION_MS);
}
