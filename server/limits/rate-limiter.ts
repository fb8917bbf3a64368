/** RatePolicy is a token bucket: `burst` requests at once, refilled at `perSecond`. */
export interface RatePolicy {
  /** policy name in the RateLimit and RateLimit-Policy headers */
  name: string;
  perSecond: number;
  burst: number;
}

/** TokenRate is an API token's own rate limits, set with `token create --rate`. */
export interface TokenRate {
  readPerSecond: number;
  readBurst: number;
  writePerSecond: number;
  writeBurst: number;
}

/** MAX_TOKEN_RATE bounds each rate and burst `token create --rate` takes. */
export const MAX_TOKEN_RATE = 1_000_000;

/**
 * parseTokenRate reads `READ[:BURST],WRITE[:BURST]` (requests per second, burst defaulting to
 * twice the rate, at most MAX_TOKEN_RATE), e.g. `10,5` or `100:500,20:20`; null when the text does
 * not have that form or a value passes MAX_TOKEN_RATE.
 */
export function parseTokenRate(text: string): TokenRate | null {
  const match = /^\s*(\d+(?:\.\d+)?)(?::(\d+))?\s*,\s*(\d+(?:\.\d+)?)(?::(\d+))?\s*$/.exec(text);
  if (!match) return null;
  const readPerSecond = Number(match[1]);
  const writePerSecond = Number(match[3]);
  // A default burst past the cap would refuse a rate that is itself within it.
  const defaultBurst = (perSecond: number) => Math.min(MAX_TOKEN_RATE, Math.max(1, Math.ceil(perSecond * 2)));
  const readBurst = match[2] === undefined ? defaultBurst(readPerSecond) : Number(match[2]);
  const writeBurst = match[4] === undefined ? defaultBurst(writePerSecond) : Number(match[4]);
  if (!(readPerSecond > 0 && writePerSecond > 0 && readBurst >= 1 && writeBurst >= 1)) return null;
  if (![readPerSecond, writePerSecond, readBurst, writeBurst].every((v) => v <= MAX_TOKEN_RATE)) return null;
  return { readPerSecond, readBurst, writePerSecond, writeBurst };
}

/** RateDecision is the outcome of one request against its bucket. */
export interface RateDecision {
  allowed: boolean;
  /** whole requests left in the bucket after this one */
  remaining: number;
  /** seconds until the bucket is full again */
  resetSeconds: number;
  /** seconds until the next request is allowed (0 when allowed) */
  retryAfterSeconds: number;
}

interface Bucket {
  tokens: number;
  at: number;
  policy: RatePolicy;
}

/** MAX_TRACKED_KEYS is how many keys a map of what requests bring (client addresses, API tokens) holds before makeRoom sweeps it. */
export const MAX_TRACKED_KEYS = 100_000;

/**
 * makeRoom sweeps `map`, about to take a new key, once it holds `maxKeys`: first of the entries
 * `spent` finds indistinguishable from absent, then of the oldest until it holds under 90% of
 * `maxKeys`. Keys come from requests, so memory stays bounded whoever calls.
 */
export function makeRoom<K, V>(map: Map<K, V>, maxKeys: number, spent: (value: V) => boolean): void {
  if (map.size < maxKeys) return;
  for (const [key, value] of map) {
    if (spent(value)) map.delete(key);
  }
  for (const key of map.keys()) {
    if (map.size < maxKeys * 0.9) break;
    map.delete(key);
  }
}

/**
 * TokenBuckets keeps one token bucket per key (an API token and its request class, or a client
 * address). Keys are many when they are addresses, so the map is swept (makeRoom) of buckets that
 * have refilled: they are indistinguishable from new ones.
 */
export class TokenBuckets {
  private readonly buckets = new Map<string, Bucket>();

  constructor(private readonly maxKeys = MAX_TRACKED_KEYS) {}

  /** take spends one request from key's bucket if it holds one, and reports the bucket's state. */
  take(key: string, policy: RatePolicy, now = performance.now()): RateDecision {
    const bucket = this.refilled(key, policy, now);
    const allowed = bucket.tokens >= 1;
    if (allowed) bucket.tokens -= 1;
    return decisionOf(bucket, allowed);
  }

  /**
   * charge spends `count` more requests from key's bucket, into debt if it holds fewer: a request
   * already admitted that turns out to weigh more (a batch) is never refused after its body was
   * read; the requests after it wait until the debt is repaid.
   */
  charge(key: string, policy: RatePolicy, count: number, now = performance.now()): RateDecision {
    const bucket = this.refilled(key, policy, now);
    bucket.tokens -= count;
    return decisionOf(bucket, true);
  }

  /** forget drops key's bucket: its key will not be used again (a revoked API token's). */
  forget(key: string): void {
    this.buckets.delete(key);
  }

  private refilled(key: string, policy: RatePolicy, now: number): Bucket {
    let bucket = this.buckets.get(key);
    if (!bucket) {
      makeRoom(this.buckets, this.maxKeys, ({ tokens, at, policy }) => tokens + ((now - at) / 1000) * policy.perSecond >= policy.burst);
      bucket = { tokens: policy.burst, at: now, policy };
      this.buckets.set(key, bucket);
    } else {
      bucket.tokens = Math.min(policy.burst, bucket.tokens + ((now - bucket.at) / 1000) * policy.perSecond);
      bucket.at = now;
      bucket.policy = policy;
    }
    return bucket;
  }

  /** size is the number of buckets held. */
  get size(): number {
    return this.buckets.size;
  }
}

function decisionOf({ tokens, policy }: Bucket, allowed: boolean): RateDecision {
  return {
    allowed,
    remaining: Math.max(0, Math.floor(tokens)),
    resetSeconds: Math.ceil((policy.burst - tokens) / policy.perSecond),
    retryAfterSeconds: allowed ? 0 : Math.ceil((1 - tokens) / policy.perSecond),
  };
}

/** policyWindowSeconds is the window advertised for a bucket: the time it takes to refill completely. */
function policyWindowSeconds(policy: RatePolicy): number {
  return Math.max(1, Math.ceil(policy.burst / policy.perSecond));
}

/**
 * rateLimitHeaders renders the IETF RateLimit-Policy and RateLimit fields
 * (draft-ietf-httpapi-ratelimit-headers-10, Structured Field lists) for one decision, and
 * Retry-After when the request was refused.
 */
export function rateLimitHeaders(policy: RatePolicy, decision: RateDecision): Record<string, string> {
  const headers: Record<string, string> = {
    "ratelimit-policy": `"${policy.name}";q=${policy.burst};w=${policyWindowSeconds(policy)}`,
    ratelimit: `"${policy.name}";r=${decision.remaining};t=${decision.resetSeconds}`,
  };
  if (!decision.allowed) headers["retry-after"] = String(decision.retryAfterSeconds);
  return headers;
}
