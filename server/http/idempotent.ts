import type { AuthenticatedToken } from "../auth/service.ts";
import type { IdempotencyGuard, IdempotencyScope } from "../idempotency/service.ts";
import { versionTag } from "../shared/version-condition.ts";
import { JSON_CONTENT_TYPE } from "./json-text.ts";
import { pathOf } from "./request-log.ts";

/** PostContext is what idempotentPost needs of a route's context. */
export interface PostContext {
  request: Request;
  headers: Record<string, string | undefined>;
  token: AuthenticatedToken;
  body: unknown;
  set: { status?: number | string; headers: Record<string, string | number> };
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
  onReplay: (stored: T) => T = (stored) => stored,
): Promise<T> {
  const result = await guard.run(
    // The router serves /contacts/ as /contacts: scope both alike, or a retry with a slash creates twice.
    { tokenId: ctx.token.id, method: ctx.request.method, path: pathOf(ctx.request).replace(/(.)\/+$/, "$1"), key: ctx.headers["idempotency-key"], body: ctx.body },
    execute,
  );
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
  return new Response(JSON.stringify(onReplay(result.body)), { status: result.status, headers: { "content-type": JSON_CONTENT_TYPE } }) as unknown as T;
}
