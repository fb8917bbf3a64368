import { Elysia } from "elysia";
import { clientAddress, clientHints } from "../http/client-address.ts";
import { PUBLIC_PREFIX } from "../http/conventions.ts";
import { heldOpenWhile } from "../http/idle-timer.ts";
import { noteRateLimited, noteToken, pathStart } from "../http/request-log.ts";
import { requestSlot } from "../http/request-slot.ts";
import { WRITE_METHODS } from "../limits/api-rates.ts";
import type { Runtime } from "../runtime.ts";
import { ProblemError } from "../shared/problem.ts";
import { BEARER_CHALLENGE, checkBearer, type AuthenticatedToken, type BearerCheck } from "./service.ts";

/** unauthorized is the 401 problem, with the WWW-Authenticate challenge and any extra headers. */
export function unauthorized(detail: string, headers: Record<string, string> = {}): ProblemError {
  return new ProblemError(401, "unauthorized", detail, undefined, { ...BEARER_CHALLENGE, ...headers });
}

const authenticated = requestSlot<AuthenticatedToken>("token");
// An admitted write's hook for charging more writes once its body says what it weighs (batches).
const extraWriteCharges = requestSlot<(writes: number) => void>("extra write charges");

/** chargeExtraWrites counts `writes` more writes against the token of an admitted request (beyond the one it paid on arrival) and updates its RateLimit header. */
export function chargeExtraWrites(request: Request, writes: number): void {
  if (writes > 0) extraWriteCharges.get(request)?.(writes);
}

/**
 * authentication is the one place API requests are authenticated. Before routing and before the
 * body is read, a request under /public/v1 either carries a valid bearer token, which then spends
 * its read or write rate budget, or gets 401 (an unauthenticated caller learns nothing about a
 * route), after the throttle on requests without a valid token per client address (429). Every
 * /public/v1 response it lets through carries the RateLimit and RateLimit-Policy headers.
 */
export function authentication(rt: Runtime) {
  const rates = rt.rateLimits;
  const unrecorded = (error: unknown) => rt.log.warn("a token's last use could not be recorded; the request goes on", { error: String(error) });
  type Context = { request: Request; set: { headers: Record<string, string | number> } };
  const clientOf = (request: Request) => clientAddress(clientHints(request, rt.listening()?.requestIP(request)?.address ?? null), rt.config.trustedProxies);
  const admit = ({ request, set }: Context, token: AuthenticatedToken) => {
    // Noted first: a 429's log line names the token whose budget ran out.
    noteToken(request, token.id);
    let headers: Record<string, string>;
    try {
      headers = rates.admitToken(token.id, request.method);
    } catch (tooMany) {
      noteRateLimited(request, { bucket: WRITE_METHODS.has(request.method) ? "write" : "read", client: clientOf(request) });
      throw tooMany;
    }
    Object.assign(set.headers, headers);
    authenticated.set(request, token);
    if (WRITE_METHODS.has(request.method)) extraWriteCharges.set(request, (writes) => Object.assign(set.headers, rates.chargeWrites(token.id, writes)));
  };
  const refuse = ({ request, set }: Context, failure: string): never => {
    const client = clientOf(request);
    let headers: Record<string, string>;
    try {
      headers = rates.admitFailedAuth(client);
    } catch (tooMany) {
      noteRateLimited(request, { bucket: "failed-auth", client });
      throw tooMany;
    }
    Object.assign(set.headers, headers);
    throw unauthorized(failure, headers);
  };
  // A token the cache could not answer for is looked up in the database first.
  const admitAfterLookup = async (ctx: Context, pending: Promise<BearerCheck>) => {
    const check = await pending;
    if (!check.token) return refuse(ctx, check.failure);
    await rates.loadPolicies(check.token.id);
    admit(ctx, check.token);
  };
  // The database may keep a lookup waiting (a full pool, a lock held elsewhere) past the idle
  // timeout, whose timer runs until the handler starts: the connection is kept open meanwhile.
  const whileLookingUp = (request: Request, lookup: Promise<void>) => heldOpenWhile(request, { server: rt.listening(), idleTimeoutSeconds: rt.config.idleTimeoutSeconds }, lookup);
  // Synchronous for a cached token whose limits are known (nearly every request): no promise is made.
  // Destructured, not (ctx): Elysia reads a hook's parameters to learn what requests need, and a
  // whole context handed on would have every route parse cookies and copy headers.
  return new Elysia({ name: "authentication" }).onRequest(({ request, set }) => {
    const ctx = { request, set };
    const url = request.url;
    if (!url.startsWith(PUBLIC_PREFIX, pathStart(url))) return;
    const check = checkBearer(rt.db, ctx.request, unrecorded);
    if (check instanceof Promise) return whileLookingUp(request, admitAfterLookup(ctx, check));
    const token = check.token;
    if (!token) return refuse(ctx, check.failure);
    const loading = rates.loadPolicies(token.id);
    if (loading) return whileLookingUp(request, loading.then(() => admit(ctx, token)));
    admit(ctx, token);
  });
}

/** bearerAuth gives a feature's routes the `token` that `authentication` admitted the request with. */
export function bearerAuth() {
  return new Elysia({ name: "bearer-auth" }).resolve({ as: "scoped" }, ({ request }): { token: AuthenticatedToken } => {
    const token = authenticated.get(request);
    // Only a route outside /public/v1 could get here unauthenticated: a wiring mistake, refused all the same.
    if (!token) throw unauthorized("Send an API token in the Authorization header: Authorization: Bearer <token>.");
    return { token };
  });
}
