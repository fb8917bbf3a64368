import { Elysia } from "elysia";
import { unauthorized } from "../auth/routes.ts";
import { checkBearer, tokenRate } from "../auth/service.ts";
import { PUBLIC_PREFIX } from "../http/conventions.ts";
import { ProblemError } from "../shared/problem.ts";
import { clientAddress, clientHints } from "../http/client-address.ts";
import type { Runtime } from "../runtime.ts";
import { ConnectionGate } from "./connections.ts";
import { BUN_TIMER_GRANULARITY_SECONDS, MAX_HEADER_BYTES, MAX_HEADER_FIELDS, MAX_QUERY_BYTES } from "./limits.ts";
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

/**
 * limitsGuard enforces, before routing and before any body is read: the connection cap (503),
 * query string and header size limits (414, 431), per-token rate limits for reads and writes,
 * and the throttle on failed authentication per client address (429 with Retry-After); a
 * request under /public/v1 without a valid token gets its 401 here, before parsing. Every
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
  const idleHorizonMs = (config.idleTimeoutSeconds + BUN_TIMER_GRANULARITY_SECONDS) * 1000;
  const gate = new ConnectionGate(config.maxConnections, idleHorizonMs, idleHorizonMs + config.bodyTimeoutMs);
  const connectionOf = new WeakMap<Request, string>();

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
    .onRequest(({ request, server, set }) => {
      const peer = server?.requestIP(request) ?? null;
      if (peer) {
        const connection = `${peer.address}|${peer.port}`;
        if (!gate.admit(connection)) {
          throw new ProblemError(503, "too-many-connections", `The server is serving its limit of ${config.maxConnections} connections. Retry shortly, or reuse a kept-alive connection.`, undefined, {
            "retry-after": "1",
            connection: "close",
          });
        }
        connectionOf.set(request, connection);
        // Bun's idle timer also runs while a body arrives; give the body its own, longer deadline.
        if (request.body && config.bodyTimeoutMs > config.idleTimeoutSeconds * 1000) server!.timeout(request, Math.ceil(config.bodyTimeoutMs / 1000) + 1);
      }
      refuseOversizedRequest(request);
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
    .onAfterResponse({ as: "global" }, ({ request }) => {
      const connection = connectionOf.get(request);
      if (connection) gate.release(connection, request.headers.get("connection")?.toLowerCase() === "close");
    });
}
