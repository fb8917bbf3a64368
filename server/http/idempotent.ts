import type { AuthenticatedToken } from "../auth/service.ts";
import { bodyFingerprint, type IdempotencyGuard, type IdempotencyScope } from "../idempotency/service.ts";
import { textResponse } from "../limits/answer-budget.ts";
import { ProblemError } from "../shared/problem.ts";
import { versionTag } from "../shared/version-condition.ts";
import { JSON_CONTENT_TYPE } from "./json-text.ts";
import { pathOf } from "./request-log.ts";
import { requestSlot } from "./request-slot.ts";

/** PostContext is what idempotentPost needs of a route's context. */
export interface PostContext {
  request: Request;
  headers: Record<string, string | undefined>;
  token: AuthenticatedToken;
  body: unknown;
  set: { status?: number | string; headers: Record<string, string | number> };
}

/** UNRESERVED is a character RFC 3986 (section 2.3) lets a URI spell as itself or percent-escaped, to the same meaning. */
const UNRESERVED = /^[A-Za-z0-9\-._~]$/;

/**
 * scopePath is a request's path as its idempotency scope, normalised as the router reads it: it
 * serves /contacts/ as /contacts and decodes sub%5F… as sub_…, so each pair is one scope, or a
 * retry spelled the other way would act twice (RFC 3986 section 6.2.2).
 */
function scopePath(request: Request): string {
  const path = pathOf(request).replace(/(.)\/+$/, "$1");
  if (!path.includes("%")) return path;
  return path.replace(/%[0-9A-Fa-f]{2}/g, (escape) => {
    const character = String.fromCharCode(Number.parseInt(escape.slice(1), 16));
    return UNRESERVED.test(character) ? character : escape.toUpperCase();
  });
}

const sentFingerprints = requestSlot<Uint8Array>("body fingerprint as sent");

/**
 * fingerprintSentBody is the first transform of every route that takes an Idempotency-Key: it
 * takes the bodyFingerprint of a request carrying one as the client sent the body, before the
 * route's own transform puts names and tags in NFC (storedText): a fingerprint of that would not
 * match the one an older crm kept of the same bytes (its replay after the upgrade refused 422),
 * nor the next release's should the stored form change again. A route's own, not a global one:
 * no other request pays for it.
 */
export function fingerprintSentBody({ request, body }: { request: Request; body: unknown }): void {
  if (request.headers.has("idempotency-key")) sentFingerprints.set(request, bodyFingerprint(body));
}

/** sentFingerprintOf is the fingerprint fingerprintSentBody took of a request's body. */
function sentFingerprintOf(request: Request): Uint8Array {
  const fingerprint = sentFingerprints.get(request);
  if (fingerprint === undefined) throw new Error("no fingerprint of the body as sent: the route's transform lacks fingerprintSentBody");
  return fingerprint;
}

const MAX_KEY_LENGTH = 255;

// Printable ASCII (as the IETF draft's sf-string) but the comma: Bun joins an Idempotency-Key sent
// on two lines (a gateway's or a retry middleware's own beside the client's) into "A, B", which
// would be a third key, so a retry carrying A alone would act again. Without commas the two are
// told apart from one key.
const KEY_CHARACTERS = /^[\x20-\x2b\x2d-\x7e]*$/;

/** idempotencyKeyOf returns a request's Idempotency-Key (undefined without one), refusing with 422 one that is empty, too long, sent more than once or not printable ASCII. */
function idempotencyKeyOf(headers: PostContext["headers"]): string | undefined {
  const key = headers["idempotency-key"];
  if (key === undefined) return undefined;
  const refused = (detail: string, field: string) => new ProblemError(422, "validation", detail, [{ header: "idempotency-key", detail: field }]);
  if (key.includes(",")) throw refused("Idempotency-Key must be one key, sent once: a key holds no commas, and two keys (a list, or the header sent twice) would name neither.", "is given more than once (a key holds no commas)");
  if (!KEY_CHARACTERS.test(key)) throw refused("Idempotency-Key must be printable ASCII (letters, digits, spaces and punctuation) other than the comma.", "must be printable ASCII other than the comma");
  if (key.length === 0 || key.length > MAX_KEY_LENGTH) throw refused(`Idempotency-Key must be 1 to ${MAX_KEY_LENGTH} characters.`, `must be 1 to ${MAX_KEY_LENGTH} characters`);
  return key;
}

/**
 * idempotentPost runs a POST under the caller's Idempotency-Key (if any) and sets the status and
 * the Idempotent-Replayed header of the response; it returns the body to send. `onReplay` turns a
 * stored body back into the one first sent (a create response keeps its secret sealed at rest). A
 * replay is answered as a Response (typed as the body it holds), which Elysia sends without
 * checking it against the route's response schema.
 */
export async function idempotentPost<T>(
  guard: IdempotencyGuard,
  ctx: PostContext,
  execute: (scope: IdempotencyScope | null) => Promise<{ status: number; body: T }>,
  onReplay: (stored: T) => T | Promise<T> = (stored) => stored,
): Promise<T> {
  const result = await guard.run(
    { tokenId: ctx.token.id, method: ctx.request.method, path: scopePath(ctx.request), key: idempotencyKeyOf(ctx.headers), fingerprint: () => sentFingerprintOf(ctx.request) },
    execute,
  );
  // Before any header is set: a replay refused here (a kept secret that no longer opens) is answered as its problem alone.
  const replayBody = result.replayed ? await onReplay(result.body) : null;
  ctx.set.status = result.status;
  if (result.replayed) ctx.set.headers["idempotent-replayed"] = "true";
  // Every 201 names what it created: the collection's path and the new id (a replay too).
  const created = (result.body as { data?: { id?: unknown } } | null)?.data?.id;
  if (result.status === 201 && typeof created === "string") ctx.set.headers.location = `${pathOf(ctx.request).replace(/\/+$/, "")}/${encodeURIComponent(created)}`;
  // An answer carrying one versioned resource (a contact or account created or changed) is tagged as a read of it would be.
  const version = (result.body as { data?: { version?: unknown } } | null)?.data?.version;
  if (result.status < 300 && typeof version === "number") ctx.set.headers.etag = versionTag(version);
  if (!result.replayed) return result.body;
  // A replay is the first answer as it was kept, sent without checking it again against the route's
  // response schema: one kept by an older crm lacks fields added since (an account's version, a
  // subscription's paused_at) and failed that check, a 500 for the 24 hours a key is kept.
  return textResponse(JSON.stringify(replayBody), { status: result.status, headers: { "content-type": JSON_CONTENT_TYPE } }) as unknown as T;
}
