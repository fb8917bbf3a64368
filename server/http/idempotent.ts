import type { AuthenticatedToken } from "../auth/service.ts";
import type { IdempotencyGuard, IdempotencyScope } from "../idempotency/service.ts";
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
 * stored body back into the one first sent (a create response keeps its secret sealed at rest).
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
  return result.replayed ? onReplay(result.body) : result.body;
}
