import { Elysia } from "elysia";
import { unauthorized } from "../auth/routes.ts";
import { checkBearer, tokenRate } from "../auth/service.ts";
import { PUBLIC_PREFIX } from "../http/conventions.ts";
import { pathOf } from "../http/request-log.ts";
import { ProblemError } from "../shared/problem.ts";
import { clientAddress, clientHints } from "../http/client-address.ts";
import type { Runtime } from "../runtime.ts";
import { BodyBudget } from "./body-budget.ts";
import { connectionLimits } from "./connections.ts";
import { MAX_HEADER_BYTES, MAX_HEADER_FIELDS, MAX_QUERY_BYTES } from "./limits.ts";
import { TokenBuckets, rateLimitHeaders, type RatePolicy } from "./rate-limiter.ts";

const READ_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

interface TokenPolicies {
  read: RatePolicy;
  write: RatePolicy;
}

function tooManyRequests(detail: string, headers: Record<string, string>): ProblemError {
  return new ProblemError(429, "rate-limited", detail, undefined, headers);
}

/** refuseOversizedRequest answers 414 for a long query string and 431 for large or many headers. */
function refuseOversizedRequest(request: Request): void {
  const url = request.url;
  const question = url.indexOf("?");
  if (question >= 0 && url.length - question - 1 > MAX_QUERY_BYTES) {
    throw new ProblemError(414, "uri-too-long", `The query string is ${url.length - question - 1} bytes; the limit is ${MAX_QUERY_BYTES} bytes (4 KiB).`);
  }
  let bytes = 0;
  let fields = 0;
  let largest = "";
  let largestBytes = 0;
  for (const [name, value] of request.headers) {
    const size = name.length + value.length + 4; // "name: value\r\n"
    bytes += size;
    fields++;
    if (size > largestBytes) {
      largest = name;
      largestBytes = size;
    }
  }
  if (bytes > MAX_HEADER_BYTES || fields > MAX_HEADER_FIELDS) {
    const detail = fields > MAX_HEADER_FIELDS
      ? `The request has ${fields} header fields; the limit is ${MAX_HEADER_FIELDS}.`
      : `The request headers are ${bytes} bytes; the limit is ${MAX_HEADER_BYTES} bytes (8 KiB). The largest is ${largest} (${largestBytes} bytes).`;
    throw new ProblemError(431, "headers-too-large", detail, [{ header: largest, detail: `is ${largestBytes} bytes of ${bytes} in all` }]);
  }
}

/** VALID_HOST is one host (a name, an IPv4 address or a bracketed IPv6 address) with an optional port (RFC 9110 section 7.2). */
const VALID_HOST = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~!$&'()*+;=%]+)(?::\d{1,5})?$/;

/**
 * refuseInvalidHost answers 400 for a Host header that is repeated (Bun joins the values with
 * ", ") or is not one host and port, as RFC 9112 section 3.2 requires; Bun itself only refuses a
 * missing one. HTTP/1.0 requests may go without.
 */
function refuseInvalidHost(request: Request): void {
  const host = request.headers.get("host");
  if (host === null || VALID_HOST.test(host)) return;
  throw new ProblemError(400, "invalid-host", "The Host header must name one host (a name or an address) with an optional port, once.", [
    { header: "host", detail: host.includes(",") ? "is given more than once" : "is not a host with an optional port" },
  ]);
}

/**
 * limitsGuard enforces, before routing and before any body is read: the connection cap and each
 * client's share of it (503), query string and header size limits (414, 431), per-token rate
 * limits for reads and writes, the throttle on failed authentication per client address (429
 * with Retry-After), and the budget of body bytes held in memory (503); a request under
 * /public/v1 without a valid token gets its 401 here, before parsing. Every
 * /public/v1 response it lets through carries the RateLimit and RateLimit-Policy headers.
 */
export function limitsGuard(rt: Runtime) {
  const { config } = rt;
  const defaults: TokenPolicies = {
    read: { name: "read", perSecond: config.rateReadPerSecond, burst: config.rateReadBurst },
    write: { name: "write", perSecond: config.rateWritePerSecond, burst: config.rateWriteBurst },
  };
  const failedAuth: RatePolicy = { name: "failed-auth", perSecond: config.authFailuresPerMinute / 60, burst: config.authFailuresPerMinute };
  const policiesByToken = new Map<string, TokenPolicies>();
  const tokenBuckets = new TokenBuckets();
  const failureBuckets = new TokenBuckets();
  const connections = connectionLimits(config);
  const bodies = new BodyBudget(config.bodyBufferMaxMb * 1024 * 1024);

  const policiesOf = (tokenId: string): TokenPolicies => {
    let policies = policiesByToken.get(tokenId);
    if (!policies) {
      const own = tokenRate(rt.db, tokenId);
      policies = own
        ? { read: { name: "read", perSecond: own.readPerSecond, burst: own.readBurst }, write: { name: "write", perSecond: own.writePerSecond, burst: own.writeBurst } }
        : defaults;
      policiesByToken.set(tokenId, policies);
    }
    return policies;
  };

  return new Elysia({ name: "limits" })
    .onRequest(async ({ request, server }) => {
      await connections.admit(request, server, pathOf(request));
    })
    .onRequest(({ request, server, set }) => {
      const peer = server?.requestIP(request) ?? null;
      refuseOversizedRequest(request);
      refuseInvalidHost(request);
      const url = request.url;
      if (!url.startsWith(PUBLIC_PREFIX, url.indexOf("/", url.indexOf("//") + 2))) return;
      const check = checkBearer(rt.db, request);
      if (check.token) {
        const policies = policiesOf(check.token.id);
        const write = !READ_METHODS.has(request.method);
        const policy = write ? policies.write : policies.read;
        const decision = tokenBuckets.take(`${check.token.id}:${policy.name}`, policy);
        const headers = rateLimitHeaders(policy, decision);
        Object.assign(set.headers, headers);
        if (!decision.allowed) {
          throw tooManyRequests(
            `This API token may make ${policy.perSecond} ${write ? "writes" : "reads"} per second (bursts of ${policy.burst}); retry after ${decision.retryAfterSeconds} s.`,
            headers,
          );
        }
        return;
      }
      const address = clientAddress(clientHints(request, peer?.address ?? null), config.trustedProxies);
      const decision = failureBuckets.take(address ?? "unknown", failedAuth);
      const headers = rateLimitHeaders(failedAuth, decision);
      Object.assign(set.headers, headers);
      if (!decision.allowed) {
        throw tooManyRequests(
          `Too many requests without a valid API token from this address (${config.authFailuresPerMinute} per minute); retry after ${decision.retryAfterSeconds} s.`,
          headers,
        );
      }
      // Answer 401 before the body is parsed or validated: an unauthenticated caller learns nothing about the route.
      throw unauthorized(check.failure, headers);
    })
    // Only a request let through so far holds body memory: one refused above never takes any.
    .onRequest(({ request }) => bodies.admit(request))
    .onAfterResponse({ as: "global" }, ({ request }) => {
      connections.release(request);
      bodies.release(request);
    });
}
