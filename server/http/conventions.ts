import { Elysia, ValidationError } from "elysia";
import type { Logger } from "../shared/log.ts";
import type { Metrics } from "../ops/metrics.ts";
import { newId } from "../shared/ids.ts";
import { DEFAULT_CONFIG } from "../config.ts";
import { MAX_BODY_BYTES } from "../limits/limits.ts";
import { repeatedParameterErrors } from "./list-query.ts";
import { fieldErrorsOf, type SchemaIssue } from "./schema-errors.ts";
import { ProblemError, problem, problemResponse, validationProblem, type FieldError, type Problem } from "./problem.ts";
import { parseSafeJson } from "./safe-json.ts";

export const PUBLIC_PREFIX = "/public/v1";

/** CONSOLE_PREFIX is where the operator console is served (server-rendered HTML and forms). */
export const CONSOLE_PREFIX = "/console";

interface RequestInfo {
  id: string;
  started: number;
}

const requestInfo = new WeakMap<Request, RequestInfo>();

/** requestIdOf returns the id assigned to a request (for logs of work done on its behalf). */
function requestIdOf(request: Request): string {
  return requestInfo.get(request)?.id ?? "unknown";
}

const SAFE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,100}$/;

// Load balancers and Prometheus call these every few seconds; at info they would bury every other line.
const PROBE_PATHS = new Set(["/healthz", "/readyz", "/metrics"]);

function pathOf(request: Request): string {
  const url = request.url;
  const start = url.indexOf("/", url.indexOf("//") + 2);
  const end = url.indexOf("?", start);
  return start < 0 ? "/" : end < 0 ? url.slice(start) : url.slice(start, end);
}

/** routePatternMatches tells whether a concrete path matches an Elysia route pattern like /a/:id. */
function routePatternMatches(pattern: string, path: string): boolean {
  const a = pattern.split("/");
  const b = path.split("/");
  // A trailing * stands for the rest of the path; every segment before it must still match.
  if (a.at(-1) === "*" ? b.length < a.length - 1 : a.length !== b.length) return false;
  return a.every((segment, i) => (segment.startsWith(":") ? b[i] !== undefined && b[i] !== "" : segment === "*" || segment === b[i]));
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

function bodyTimedOut(timeoutMs: number): ProblemError {
  return new ProblemError(408, "body-timeout", `The request body did not arrive within ${timeoutMs} ms.`, undefined, { connection: "close" });
}

function decodeBody(bytes: Uint8Array | ArrayBuffer): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw new ProblemError(400, "invalid-json", "The request body is not valid UTF-8.");
  }
}

/**
 * readDeclaredBody reads a body of a declared length (at most 1 MiB, which the framing enforces)
 * in one call: Bun fills it natively, where a stream reader costs a few microseconds per request (bench/).
 */
async function readDeclaredBody(request: Request, timeoutMs: number): Promise<string> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), timeoutMs);
  });
  const reading = request.arrayBuffer();
  // After a 408 the connection closes and the unfinished read fails; nobody waits for it any more.
  reading.catch(() => {});
  let bytes: ArrayBuffer | null;
  try {
    bytes = await Promise.race([reading, timeout]);
  } catch {
    throw new ProblemError(400, "incomplete-body", "The connection ended before the whole request body arrived.");
  } finally {
    clearTimeout(timer);
  }
  if (bytes === null) throw bodyTimedOut(timeoutMs);
  return decodeBody(bytes);
}

/** readLimitedBody reads at most 1 MiB of body, and answers 408 if it takes longer than timeoutMs to arrive. */
async function readLimitedBody(request: Request, timeoutMs: number): Promise<string> {
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > MAX_BODY_BYTES) throw bodyTooLarge();
  if (declared !== null) return readDeclaredBody(request, timeoutMs);
  const body = request.body;
  if (!body) return "";
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = body.getReader();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    reader.cancel().catch(() => {});
  }, timeoutMs);
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (timedOut) break;
      if (done) break;
      size += value.byteLength;
      if (size > MAX_BODY_BYTES) {
        reader.cancel().catch(() => {});
        throw bodyTooLarge();
      }
      chunks.push(value);
    }
  } catch (error) {
    if (error instanceof ProblemError) throw error;
    if (!timedOut) throw new ProblemError(400, "incomplete-body", "The connection ended before the whole request body arrived.");
  } finally {
    clearTimeout(timer);
  }
  if (timedOut) throw bodyTimedOut(timeoutMs);
  return decodeBody(Buffer.concat(chunks));
}

function bodyTooLarge(): ProblemError {
  return new ProblemError(413, "body-too-large", `The request body exceeds the limit of ${MAX_BODY_BYTES} bytes (1 MiB).`);
}

/**
 * parseJsonBody reads a request body that must be a JSON object, parsed safely (safe-json.ts);
 * problems for anything else.
 */
export async function parseJsonBody(request: Request, bodyTimeoutMs = DEFAULT_CONFIG.bodyTimeoutMs): Promise<unknown> {
  const contentType = (request.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
  const text = await readLimitedBody(request, bodyTimeoutMs);
  if (text === "") return undefined; // no body: routes that need one answer 422 from their schema
  if (contentType !== "application/json" && !contentType.endsWith("+json")) {
    throw new ProblemError(
      415,
      "unsupported-media-type",
      contentType === ""
        ? "Send the request body as JSON with Content-Type: application/json."
        : `Content-Type ${contentType} is not accepted; send application/json.`,
    );
  }
  const value = parseSafeJson(text);
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ProblemError(422, "validation", "The request body must be a JSON object.", [{ pointer: "", detail: "must be a JSON object" }]);
  }
  return value;
}

function validationErrors(error: ValidationError): FieldError[] {
  const where = error.type === "query" || error.type === "params" ? "parameter" : error.type === "headers" ? "header" : "pointer";
  return fieldErrorsOf(error.all as SchemaIssue[], where);
}

export interface ConventionOptions {
  log: Logger;
  /** routes returns the app's route table (query: the route has a query schema), used to tell 404 from 405 */
  routes: () => { method: string; path: string; query: boolean }[];
  /** metrics counts every answered request by route pattern */
  metrics?: Metrics;
  /** time a client has to send a request body before 408 */
  bodyTimeoutMs?: number;
}

/**
 * httpConventions applies the service's HTTP rules to every route: request ids and log lines,
 * refusal of browser calls under /public/v1, JSON-only bodies up to 1 MiB, and RFC 9457 problem
 * responses for every error (404 vs 405 included). Unexpected exceptions are logged and hidden.
 */
export function httpConventions({ log, routes, metrics, bodyTimeoutMs }: ConventionOptions) {
  const allowedMethods = (path: string): string[] =>
    [...new Set(routes().filter((r) => r.method !== "ALL" && routePatternMatches(r.path, path)).map((r) => r.method))];
  // A response returned from onRequest skips Elysia's afterResponse hooks, so both paths call this.
  const finished = (request: Request, status: number, route: string) => {
    const info = requestInfo.get(request);
    if (info) metrics?.observeRequest(request.method, route, status, (performance.now() - info.started) / 1000);
    const path = pathOf(request);
    // A probe that succeeds is routine; a failing one (not ready, a refused scrape) is news.
    log[status < 400 && PROBE_PATHS.has(path) ? "debug" : "info"]("request", {
      request_id: info?.id,
      method: request.method,
      path,
      status,
      duration_ms: info ? Math.round((performance.now() - info.started) * 100) / 100 : undefined,
    });
  };

  return new Elysia({ name: "http-conventions" })
    .onRequest(({ request, set }) => {
      const incoming = request.headers.get("x-request-id");
      const id = incoming && SAFE_REQUEST_ID.test(incoming) ? incoming : newId("req");
      requestInfo.set(request, { id, started: performance.now() });
      set.headers["x-request-id"] = id;
      if (pathOf(request).startsWith(PUBLIC_PREFIX) && (request.headers.has("origin") || request.headers.has("sec-fetch-site"))) {
        const refusal = problemResponse(
          problem(403, "browser-request", "This API does not accept calls from browsers. API tokens are secrets for server-side code (a backend job, an import script); never put them in browser code."),
          { "x-request-id": id },
        );
        finished(request, 403, "");
        return refusal;
      }
    })
    // Elysia keeps the last value of a repeated parameter; a route that reads its query refuses the guess.
    .onTransform({ as: "global" }, ({ request, route }) => {
      const errors = repeatedParameterErrors(request.url);
      if (errors.length > 0 && routes().some((r) => r.query && r.method === request.method && r.path === route)) throw validationProblem(errors);
    })
    // The console (under /console) posts HTML forms; it validates its own form bodies.
    .onParse({ as: "global" }, ({ request }) => (pathOf(request).startsWith(`${CONSOLE_PREFIX}/`) ? undefined : parseJsonBody(request, bodyTimeoutMs)))
    .onError({ as: "global" }, ({ code, error, request, set }) => {
      const requestId = requestIdOf(request);
      let body: Problem;
      const headers: Record<string, string> = { "x-request-id": requestId };
      // Elysia wraps whatever the parse hook throws in its own ParseError.
      if (code === "PARSE" && (error as Error).cause instanceof ProblemError) error = (error as Error).cause as ProblemError;
      if (error instanceof ProblemError) {
        body = error.toProblem();
        Object.assign(headers, error.headers);
      } else if (code === "VALIDATION" && (error as ValidationError).type !== "response") {
        body = problem(422, "validation", "The request has invalid fields.", validationErrors(error as ValidationError));
      } else if (code === "NOT_FOUND") {
        const path = pathOf(request);
        const allowed = allowedMethods(path);
        if (allowed.length > 0 && !allowed.includes(request.method)) {
          body = problem(405, "method-not-allowed", `${request.method} is not allowed on ${path}; allowed: ${allowed.join(", ")}.`);
          headers.allow = allowed.join(", ");
        } else {
          body = problem(404, "not-found", `No route matches ${request.method} ${path}.`);
        }
      } else if (code === "PARSE") {
        body = problem(400, "invalid-json", "The request body could not be parsed.");
      } else {
        // A ValidationError here is of a response (requests were handled above): the server's fault.
        const status = !(error instanceof ValidationError) && typeof (error as { status?: unknown }).status === "number" ? (error as { status: number }).status : 500;
        if (status >= 400 && status < 500) {
          body = problem(status, "bad-request", "The request could not be processed.");
        } else {
          // A broken response's error carries the response itself, which may hold secrets: log only where it broke.
          const described = error instanceof ValidationError
            ? { error: `the response does not match its schema at ${(error.all[0] as { path?: string } | undefined)?.path || "/"}` }
            : { error: String(error), stack: (error as Error)?.stack };
          log.error("unhandled error", { request_id: requestId, method: request.method, path: pathOf(request), ...described });
          body = problem(500, "internal", `An unexpected error occurred. Quote request id ${requestId} when reporting it.`);
        }
      }
      set.status = body.status;
      return problemResponse(body, headers);
    })
    .onAfterResponse({ as: "global" }, ({ request, set, response, route }) => {
      const status = response instanceof Response ? response.status : typeof set.status === "number" ? set.status : 200;
      finished(request, status, route ?? "");
    });
}
