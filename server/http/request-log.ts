import type { Metrics } from "../ops/metrics.ts";
import { newId } from "../shared/ids.ts";
import type { Logger } from "../shared/log.ts";
import type { ChangeMaker, ChangeOrigin } from "../shared/made-by.ts";
import { requestSlot } from "./request-slot.ts";

interface RequestInfo {
  id: string;
  started: number;
  /** the id of the API token the request authenticated with (noteToken), a 429's too; none: a console request, or one refused before or at authentication */
  tokenId?: string;
  /** the operator whose console session sent the request (noteOperator), for the changes it makes */
  operator?: { id: string; email: string };
  /** the type (slug) of the problem the request is answered with, if it is one (noteProblem) */
  problem?: string;
  /** whose rate budget refused the request, if one did (noteRateLimited) */
  rateLimited?: RateLimited;
}

/** RateLimited names, for a 429's log line, the bucket that refused a request and the client address (its token is the request's own, noteToken). */
export interface RateLimited {
  bucket: string;
  /** the client's address (behind a trusted proxy, the forwarded one); null when unknown */
  client: string | null;
}

const requestInfo = requestSlot<RequestInfo>("request info");

/** SAFE_REQUEST_ID is an X-Request-Id a client may choose: sent back and logged as it is, unless shaped like a secret (SECRET_SHAPED). */
export const SAFE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,100}$/;

/** REQUEST_ID_RULE says what SAFE_REQUEST_ID takes, as a filter by request id refuses another value: "must be ...". */
export const REQUEST_ID_RULE = "a request id: 1 to 100 of A-Z a-z 0-9 . _ : -";

/**
 * SECRET_SHAPED matches a request id shaped like one of the service's own secrets, which a client
 * can send by mistake (a variable mixed up): an API token (crm_...), a webhook signing secret
 * (whsec_...), or 32 random bytes in base64url (randomSecret), as console session and CSRF cookies, CSRF tokens
 * and invite codes are. Kept, it would be echoed and written to every request's log line.
 */
const SECRET_SHAPED = /^(?:crm_|whsec_)|^[A-Za-z0-9_-]{43}$/;

/** OPS_PATHS are the probes and the metrics, which load balancers and Prometheus call every few seconds. */
const OPS_PATHS = new Set(["/healthz", "/readyz", "/metrics"]);

/**
 * pathStart is where the path of a request's URL starts, found without parsing it: after the
 * authority, or at 0 for the bare path Bun gives when the Host header is not one it can use.
 */
export function pathStart(url: string): number {
  return url.charCodeAt(0) === 47 ? 0 : url.indexOf("/", url.indexOf("//") + 2);
}

/** pathOf returns a request's path without parsing the whole URL. */
export function pathOf(request: Request): string {
  const url = request.url;
  const start = pathStart(url);
  const end = url.indexOf("?", start);
  return start < 0 ? "/" : end < 0 ? url.slice(start) : url.slice(start, end);
}

/** routedPath is the path the router serves a concrete path as: a fixed path ending in "/" (/metrics/, /contacts/batch/) as the path without it. */
export function routedPath(path: string): string {
  return path.endsWith("/") ? path.slice(0, -1) : path;
}

/** isOpsPath tells whether a path is a probe's or the metrics' (OPS_PATHS), with a trailing "/" too, as the router serves it. */
export function isOpsPath(path: string): boolean {
  return OPS_PATHS.has(routedPath(path));
}

/**
 * startRequest assigns a request its id (the client's, when safe, not shaped like a secret and not
 * the metrics token, which the operator chose freely: "" for none) and notes when it started.
 */
export function startRequest(request: Request, metricsToken: string): string {
  const incoming = request.headers.get("x-request-id");
  const id = incoming && SAFE_REQUEST_ID.test(incoming) && !SECRET_SHAPED.test(incoming) && incoming !== metricsToken ? incoming : newId("req");
  requestInfo.set(request, { id, started: performance.now() });
  return id;
}

/** requestIdOf returns the id assigned to a request (for logs of work done on its behalf). */
export function requestIdOf(request: Request): string {
  return requestInfo.get(request)?.id ?? "unknown";
}

/** noteToken records the id of the API token a request authenticated with, for its log line (a 429's too) and the events it makes (originOf). */
export function noteToken(request: Request, tokenId: string): void {
  const info = requestInfo.get(request);
  if (info) info.tokenId = tokenId;
}

/** noteOperator records the operator whose console session sent a request, the maker of the changes it makes (originOf). */
export function noteOperator(request: Request, operator: { id: string; email: string }): void {
  const info = requestInfo.get(request);
  if (info) info.operator = { id: operator.id, email: operator.email };
}

/** originOf returns what made a change on a request's behalf: its id and its maker, the API token it authenticated with or the console session's operator. */
export function originOf(request: Request): ChangeOrigin {
  const info = requestInfo.get(request);
  const madeBy = info?.tokenId !== undefined ? { kind: "api_token" as const, id: info.tokenId } : info?.operator ? { kind: "operator" as const, ...info.operator } : null;
  return { requestId: info?.id ?? "unknown", madeBy };
}

/** makerOf returns who made a change on a request's behalf (originOf's maker), for a change that keeps its maker but not its request: a subscription's pause, enable, rotation. */
export function makerOf(request: Request): ChangeMaker | null {
  return originOf(request).madeBy;
}

/** noteProblem records the type (slug) of the problem a request is answered with, for its log line and the route it is counted under. */
export function noteProblem(request: Request, slug: string): void {
  const info = requestInfo.get(request);
  if (info) info.problem = slug;
}

/** noteRateLimited records whose rate budget refused a request, for its log line: an operator can then tell which integration or address hit its limit. */
export function noteRateLimited(request: Request, rateLimited: RateLimited): void {
  const info = requestInfo.get(request);
  if (info) info.rateLimited = rateLimited;
}

/** problemOf returns the type (slug) of the problem a request was answered with (noteProblem), or undefined. */
export function problemOf(request: Request): string | undefined {
  return requestInfo.get(request)?.problem;
}

/** requestFinisher returns the function that counts and logs one answered request. */
export function requestFinisher(log: Logger, metrics?: Metrics) {
  return (request: Request, status: number, route: string): void => {
    const info = requestInfo.get(request);
    const elapsedMs = info ? performance.now() - info.started : undefined;
    if (elapsedMs !== undefined) metrics?.observeRequest(request.method, route, status, elapsedMs / 1000, info?.rateLimited?.bucket);
    const path = pathOf(request);
    // A probe that succeeds is routine; a failing one (not ready, a refused scrape) is news.
    // At info the probes' lines would bury every other line.
    log[status < 400 && isOpsPath(path) ? "debug" : "info"]("request", {
      request_id: info?.id,
      // Which integration sent it: the id names the token on the console's Tokens page, never the token itself.
      token_id: info?.tokenId,
      method: request.method,
      path,
      status,
      // Without it a 503 for a full connection cap reads as one for a database down.
      problem: info?.problem,
      ...info?.rateLimited,
      duration_ms: elapsedMs === undefined ? undefined : Math.round(elapsedMs * 100) / 100,
    });
  };
}
