import type { Config } from "../config.ts";
import { clientNetwork } from "../http/client-address.ts";
import { ProblemError } from "../shared/problem.ts";
import { makeRoom, MAX_TRACKED_KEYS, TokenBuckets, rateLimitHeaders, type RatePolicy, type TokenRate } from "./rate-limiter.ts";

/**
 * WRITE_METHODS spend a token's write budget; every other method its read budget: the API routes
 * no other method that changes anything, so a PUT or an OPTIONS, answered 405, writes nothing.
 */
export const WRITE_METHODS = new Set(["POST", "PATCH", "DELETE"]);

interface TokenPolicies {
  read: RatePolicy;
  write: RatePolicy;
}

/** bucketKey names a token's bucket for one request class (its policy). */
function bucketKey(tokenId: string, policy: RatePolicy): string {
  return `${tokenId}:${policy.name}`;
}

function tooManyRequests(detail: string, headers: Record<string, string>): ProblemError {
  return new ProblemError(429, "rate-limited", detail, undefined, headers);
}

/**
 * ApiRateLimits holds the API's token buckets: reads and writes per token (the server's defaults
 * or the token's own rate), and requests without a valid token per client address. Each admit
 * returns the RateLimit and RateLimit-Policy headers for the response, or throws 429 with them.
 */
export class ApiRateLimits {
  private readonly defaults: TokenPolicies;
  private readonly failedAuth: RatePolicy;
  private readonly policiesByToken = new Map<string, TokenPolicies>();
  private readonly tokenBuckets = new TokenBuckets();
  private readonly failureBuckets = new TokenBuckets();

  constructor(
    private readonly config: Config,
    private readonly tokenRateOf: (tokenId: string) => Promise<TokenRate | null>,
  ) {
    this.defaults = {
      read: { name: "read", perSecond: config.rateReadPerSecond, burst: config.rateReadBurst },
      write: { name: "write", perSecond: config.rateWritePerSecond, burst: config.rateWriteBurst },
    };
    this.failedAuth = { name: "failed-auth", perSecond: config.authFailuresPerMinute / 60, burst: config.authFailuresPerMinute };
  }

  /**
   * loadPolicies reads a token's own rate limit the first time the token is seen (only then a
   * promise); call it before admitToken. Tokens revoked elsewhere (the CLI, another instance) are
   * never named here: the oldest are dropped past MAX_TRACKED_KEYS (makeRoom), and read again when seen again.
   */
  loadPolicies(tokenId: string): void | Promise<void> {
    if (this.policiesByToken.has(tokenId)) return;
    return this.tokenRateOf(tokenId).then((own) => {
      makeRoom(this.policiesByToken, MAX_TRACKED_KEYS, () => false);
      this.policiesByToken.set(
        tokenId,
        own
          ? { read: { name: "read", perSecond: own.readPerSecond, burst: own.readBurst }, write: { name: "write", perSecond: own.writePerSecond, burst: own.writeBurst } }
          : this.defaults,
      );
    });
  }

  /** forgetToken drops the rate limits and buckets kept for a token revoked here (call it once the revoke commits): it is never admitted again. */
  forgetToken(tokenId: string): void {
    const { read, write } = this.policiesOf(tokenId);
    this.tokenBuckets.forget(bucketKey(tokenId, read));
    this.tokenBuckets.forget(bucketKey(tokenId, write));
    this.policiesByToken.delete(tokenId);
  }

  /** tokenPoliciesKept is how many tokens' rate limits are kept, read once each (loadPolicies). */
  get tokenPoliciesKept(): number {
    return this.policiesByToken.size;
  }

  /** tokenBucketsKept is how many read and write buckets of tokens are kept, one per token and request class used. */
  get tokenBucketsKept(): number {
    return this.tokenBuckets.size;
  }

  /** admitToken spends one request of the token's read or write budget, by the request's method. */
  admitToken(tokenId: string, method: string): Record<string, string> {
    const policies = this.policiesOf(tokenId);
    const write = WRITE_METHODS.has(method);
    const policy = write ? policies.write : policies.read;
    const decision = this.tokenBuckets.take(bucketKey(tokenId, policy), policy);
    const headers = rateLimitHeaders(policy, decision);
    if (!decision.allowed) {
      throw tooManyRequests(
        `This API token may make ${policy.perSecond} ${write ? "writes" : "reads"} per second (bursts of ${policy.burst}); retry after ${decision.retryAfterSeconds} s.`,
        headers,
      );
    }
    return headers;
  }

  /**
   * chargeWrites spends `writes` more of the token's write budget, into debt if it holds fewer: a
   * request already admitted that turns out to weigh more (a batch) is never refused after its
   * body was read; the token's next writes wait until the debt is repaid. Returns the new headers.
   */
  chargeWrites(tokenId: string, writes: number): Record<string, string> {
    const policy = this.policiesOf(tokenId).write;
    return rateLimitHeaders(policy, this.tokenBuckets.charge(bucketKey(tokenId, policy), policy, writes));
  }

  /** admitFailedAuth spends one request without a valid token from a client address (null: unknown), counted per clientNetwork. */
  admitFailedAuth(address: string | null): Record<string, string> {
    const decision = this.failureBuckets.take(address === null ? "unknown" : clientNetwork(address), this.failedAuth);
    const headers = rateLimitHeaders(this.failedAuth, decision);
    if (!decision.allowed) {
      throw tooManyRequests(
        `Too many requests without a valid API token from this address (${this.config.authFailuresPerMinute} per minute); retry after ${decision.retryAfterSeconds} s.`,
        headers,
      );
    }
    return headers;
  }

  private policiesOf(tokenId: string): TokenPolicies {
    return this.policiesByToken.get(tokenId) ?? this.defaults;
  }
}
