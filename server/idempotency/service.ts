import type { Db } from "../db/sql.ts";
import { ProblemError } from "../shared/problem.ts";
import { sameBytes, sha256 } from "../shared/crypto.ts";
import {
  IN_FLIGHT_STATUS,
  UNFINISHED_STATUS,
  completeIdempotencyReservation,
  deleteIdempotencyRecordsBefore,
  findIdempotencyRecord,
  recordReservationProgress,
  releaseIdempotencyKey,
  reserveIdempotencyKey,
  upsertIdempotencyRecord,
  WITHDRAWN_STATUS,
  type IdempotencyKeyId,
  type IdempotencyRow,
  type WithdrawnAnswer,
} from "./store.ts";

/** IDEMPOTENCY_RETENTION_MS is how long a finished response is replayed (24 hours). */
export const IDEMPOTENCY_RETENTION_MS = 24 * 60 * 60 * 1000;
/**
 * IDEMPOTENCY_RESERVATION_MS is how long a key reserved by a request still running on some
 * instance answers 409 (PostgreSQL); a reservation older than that is taken for one left by a
 * crashed instance and the key can be used again. A request still running by then (waiting that
 * long for the write lock) commits nothing once its key was taken over (saveIdempotentResponse).
 */
const IDEMPOTENCY_RESERVATION_MS = 60_000;

/** IdempotencyScope identifies one idempotent request; services save their response under it. */
export interface IdempotencyScope extends IdempotencyKeyId {
  fingerprint: Uint8Array;
  /** when the key was reserved in the database for this request (PostgreSQL); the response replaces that reservation only */
  reservedAt?: number;
  /** set once a response was saved under the scope (its reservation is then the response) */
  saved?: boolean;
  /** what a run of this request refused between its writes kept (saveIdempotentProgress), for this one to continue from */
  progress?: string;
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

/**
 * bodyFingerprint hashes a request body in canonical form; no body and {} are one request, as
 * routes take either. It is taken of the body as the client sent it (fingerprintSentBody), before
 * a route puts names and tags in the form stored: that form changed (NFC since 2026-11-29) and may
 * change again, and a retry of the same bytes must match what an older crm kept.
 */
export function bodyFingerprint(body: unknown): Uint8Array {
  const empty = body === undefined || (typeof body === "object" && body !== null && !Array.isArray(body) && Object.keys(body).length === 0);
  return sha256(canonicalJson(empty ? null : body));
}

/** RELEASE_RETRY_MS is how often a reservation that could not be given back is tried again. */
const RELEASE_RETRY_MS = 1000;

/** resourceDeleted is the 410 a replay answers once the resource its kept answer showed was deleted (withdrawIdempotencyRecordsOf). */
function resourceDeleted({ resource, id }: WithdrawnAnswer): ProblemError {
  return new ProblemError(
    410,
    "replay-resource-deleted",
    `The answer kept for this Idempotency-Key showed ${resource} ${id}, which has been deleted since, so it is not shown again. The request was made once and is not made again; a new request needs a new key.`,
    undefined,
    {},
    { [`${resource}_id`]: id },
  );
}

/** sameRequest refuses (422) a request whose body differs from the one the key's record was kept for. */
function sameRequest(stored: IdempotencyRow, scope: IdempotencyScope): void {
  if (!sameBytes(stored.fingerprint, scope.fingerprint)) {
    throw new ProblemError(422, "idempotency-key-reused", "This Idempotency-Key was already used with a different request body. Use a new key for a different request.");
  }
}

const inUse = () =>
  new ProblemError(409, "idempotency-key-in-use", "A request with this Idempotency-Key is still being processed. Retry after it finishes.", undefined, { "retry-after": "1" });

/**
 * IdempotencyGuard runs POSTs that carry an Idempotency-Key at most once per token, method,
 * path and key: finished requests are replayed from the database, requests still running answer
 * 409, and a different body under the same key answers 422. One SQLite process knows what it
 * runs (a set in memory, no extra write per POST); instances sharing PostgreSQL reserve the key
 * in the database before running, so a request running on one instance answers 409 on the others.
 */
export class IdempotencyGuard {
  private readonly inFlight = new Set<string>();

  constructor(private readonly db: Db) {}

  /** replay answers a finished request's stored response, or 422 when the body differs (sameRequest), or 410 when the resource it showed was deleted. */
  private replay<T>(stored: IdempotencyRow, scope: IdempotencyScope): IdempotentResult<T> {
    sameRequest(stored, scope);
    if (stored.status === WITHDRAWN_STATUS) throw resourceDeleted(JSON.parse(stored.response_body) as WithdrawnAnswer);
    return { status: stored.status, body: JSON.parse(stored.response_body) as T, replayed: true };
  }

  /** run executes `execute` once for the key (or always, without a key; its caller has checked it) and returns its result or the replay; `fingerprint` gives the body's bodyFingerprint, asked for with a key only. */
  async run<T>(
    request: { tokenId: string; method: string; path: string; key: string | undefined; fingerprint: () => Uint8Array },
    execute: (scope: IdempotencyScope | null) => Promise<{ status: number; body: T }>,
  ): Promise<IdempotentResult<T>> {
    if (request.key === undefined) return { ...(await execute(null)), replayed: false };
    const scope: IdempotencyScope = { tokenId: request.tokenId, method: request.method, path: request.path, key: request.key, fingerprint: request.fingerprint() };
    const now = Date.now();
    const stored = await findIdempotencyRecord(this.db, scope, now - IDEMPOTENCY_RETENTION_MS);
    const unfinished = stored?.status === IN_FLIGHT_STATUS || stored?.status === UNFINISHED_STATUS;
    if (stored && !unfinished) return this.replay(stored, scope);
    // A run refused between its writes (or one a crashed instance left) kept where it stopped: this one goes on from there.
    if (stored && stored.response_body !== "") {
      sameRequest(stored, scope);
      scope.progress = stored.response_body;
    }
    if (this.db.dialect === "postgres") return this.runReserved(scope, now, execute);
    const lock = JSON.stringify([scope.tokenId, scope.method, scope.path, scope.key]);
    if (this.inFlight.has(lock)) throw inUse();
    this.inFlight.add(lock);
    try {
      return { ...(await execute(scope)), replayed: false };
    } finally {
      this.inFlight.delete(lock);
    }
  }

  /**
   * runReserved runs a request under a reservation of its key in the database, for instances
   * sharing it: whoever reserves runs, the others answer 409 until the response is saved (in the
   * change's transaction, replacing the reservation). A request that saved nothing gives the key back.
   */
  private async runReserved<T>(scope: IdempotencyScope, now: number, execute: (scope: IdempotencyScope | null) => Promise<{ status: number; body: T }>): Promise<IdempotentResult<T>> {
    const progress = await reserveIdempotencyKey(this.db, scope, scope.fingerprint, now, now - IDEMPOTENCY_RESERVATION_MS, now - IDEMPOTENCY_RETENTION_MS);
    if (progress === null) throw inUse();
    // The progress as the reservation found it: a step the run before committed since the read above counts.
    scope.progress = progress === "" ? undefined : progress;
    scope.reservedAt = now;
    let result: { status: number; body: T };
    try {
      result = await execute(scope);
    } catch (error) {
      // Whatever saved the response was rolled back with the failure; the reservation goes (a committed response stays).
      await this.giveBack(scope, now);
      throw error;
    }
    if (!scope.saved) await this.giveBack(scope, now);
    return { ...result, replayed: false };
  }

  /**
   * giveBack removes the reservation of a request that saved no response. When the database
   * cannot be reached (the failure the request itself may have met), it is tried again every
   * RELEASE_RETRY_MS in the background until the reservation would have expired: otherwise the
   * client's retry, once the database is back, would be refused as still running for a minute.
   */
  private async giveBack(scope: IdempotencyScope, reservedAt: number): Promise<void> {
    try {
      await releaseIdempotencyKey(this.db, scope, reservedAt);
    } catch {
      const retry = setTimeout(() => {
        if (Date.now() < reservedAt + IDEMPOTENCY_RESERVATION_MS) void this.giveBack(scope, reservedAt);
      }, RELEASE_RETRY_MS);
      retry.unref?.();
    }
  }
}

/**
 * keepIdempotentResponse records a finished response and tells whether it could: on PostgreSQL
 * only in place of this request's own reservation. A request that outlived
 * IDEMPOTENCY_RESERVATION_MS (waiting for the write lock, which a cut-off instance can hold for
 * about 10 s, while other instances' groups queue for it too) may have had its key taken over by a
 * retry on another instance, which then runs the change itself. Call it inside the transaction of
 * the change.
 */
export async function keepIdempotentResponse(db: Db, scope: IdempotencyScope | null, status: number, body: unknown, now = Date.now()): Promise<boolean> {
  if (!scope) return true;
  const text = JSON.stringify(body);
  const resourceId = shownResourceId(body);
  if (scope.reservedAt === undefined) await upsertIdempotencyRecord(db, scope, scope.fingerprint, status, text, resourceId, now);
  else if (!(await completeIdempotencyReservation(db, scope, scope.reservedAt, status, text, resourceId, now))) return false;
  scope.saved = true;
  return true;
}

/** shownResourceId is the id of the one resource an answer shows ({data: {id}}), or null (a batch's results, say). */
function shownResourceId(body: unknown): string | null {
  const id = (body as { data?: { id?: unknown } } | null)?.data?.id;
  return typeof id === "string" ? id : null;
}

/**
 * saveIdempotentResponse records a finished response inside the transaction of the change, or
 * answers 409 when the key was taken over meanwhile (keepIdempotentResponse), which rolls the
 * change back: the retry holding the key makes it, so it is made once.
 */
export async function saveIdempotentResponse(db: Db, scope: IdempotencyScope | null, status: number, body: unknown, now = Date.now()): Promise<void> {
  if (!(await keepIdempotentResponse(db, scope, status, body, now))) throw inUse();
}

/**
 * saveIdempotentProgress keeps, inside the transaction of one write of a change made in several
 * (writeInSteps), where the change has got to: refused before its last write, the same request sent
 * again under the key continues from there (keptProgress) rather than start over. On PostgreSQL it
 * goes in the request's reservation (409 when taken over, as saveIdempotentResponse), which a
 * refusal leaves as the progress; without a key there is nothing to keep it under.
 */
export async function saveIdempotentProgress(db: Db, scope: IdempotencyScope | null, progress: unknown, now = Date.now()): Promise<void> {
  if (!scope) return;
  const text = JSON.stringify(progress);
  if (scope.reservedAt === undefined) await upsertIdempotencyRecord(db, scope, scope.fingerprint, UNFINISHED_STATUS, text, null, now);
  else if (!(await recordReservationProgress(db, scope, scope.reservedAt, text))) throw inUse();
}

/** keptProgress is the progress a refused run of the request kept (saveIdempotentProgress), or null: none, or no key. */
export function keptProgress<T>(scope: IdempotencyScope | null): T | null {
  return scope?.progress === undefined ? null : (JSON.parse(scope.progress) as T);
}

/** pruneIdempotencyKeys deletes at most `limit` records past the 24-hour retention, oldest first, and returns how many. */
export function pruneIdempotencyKeys(db: Db, now: number, limit: number): Promise<number> {
  return deleteIdempotencyRecordsBefore(db, now - IDEMPOTENCY_RETENTION_MS, limit);
}
