import type { Server } from "bun";
import { Elysia } from "elysia";
import type { Metrics } from "../ops/metrics.ts";
import { SpacedLines, type Logger } from "../shared/log.ts";
import { pointerSegment } from "../limits/service.ts";
import { problem, problemResponse, ProblemError, validationProblem } from "../shared/problem.ts";
import { parseJsonBody } from "./body.ts";
import { isBrowserRequest } from "./client-address.ts";
import { RefusalLog, errorToProblem, methodNotAllowed, requestProblemOf, routePatternServing, staticPathMethods, type RouteEntry } from "./errors.ts";
import { repeatedParameterErrors } from "./list-query.ts";
import { requestSlot } from "./request-slot.ts";
import { isOpsPath, noteProblem, pathOf, problemOf, requestFinisher, requestIdOf, routedPath, startRequest } from "./request-log.ts";

export const PUBLIC_PREFIX = "/public/v1";

/** CONSOLE_PREFIX is where the operator console is served (server-rendered HTML and forms). */
export const CONSOLE_PREFIX = "/console";

/** isConsolePath tells whether a path is the console's: an address under /console, or /console itself (the start page without its slash). */
export function isConsolePath(path: string): boolean {
  return path === CONSOLE_PREFIX || path.startsWith(`${CONSOLE_PREFIX}/`);
}

export interface ConventionOptions {
  log: Logger;
  /** routes returns the app's route table, used to tell 404 from 405 */
  routes: () => RouteEntry[];
  /** metrics counts every answered request by route pattern */
  metrics?: Metrics;
  /** time a client has to send a request body before 408 */
  bodyTimeoutMs: number;
  /** how long Bun keeps an idle connection open (a body's wait and a handler's work move it, then put it back) */
  idleTimeoutSeconds: number;
  /** draining tells whether a stop is draining the connections: then every answer closes its own */
  draining: () => boolean;
  /** listening is the server the app listens on (null under app.handle): a body's wait moves its timeout */
  listening: () => Server<unknown> | null;
  /** the metrics token ("" for none): a request id equal to it is replaced, as one shaped like the service's secrets is */
  metricsToken: string;
  /** told of every request that failed unexpectedly (500) or met a newer schema (503 database-newer): a newer crm's migration of the database could explain it */
  unexpectedFailure: () => void;
  /** tablesHome names the PostgreSQL database and schema of the service's tables (tablesHomeOf), in the line saying they are missing; "" on SQLite */
  tablesHome: string;
  /** databaseUrlFrom names where the database URL was given (DatabaseUrlFrom's named), in the lines saying what to change in it */
  databaseUrlFrom: string;
}

const consoleFailures = requestSlot<ProblemError>("console failure");

/**
 * ROUTER_REFUSALS are the problems of a request no route serves (404, 405). Any other problem
 * answered before the router ran is a refusal of a request sent to a route: a browser under
 * /public/v1 (403), the limits (400, 414, 431, 503), authentication (401, 429).
 */
const ROUTER_REFUSALS = new Set(["not-found", "method-not-allowed"]);

/**
 * CAPACITY_REFUSALS are the problems of a request refused because a limit of the service is full:
 * what the operator must hear of (at warn, once a minute each), since they look like any other 503.
 */
const CAPACITY_REFUSALS = new Set(["too-many-connections", "body-buffer-full", "answer-buffer-full", "slow-lists-busy", "manual-attempts-busy", "subscription-attempts-busy"]);

/**
 * consoleFailureOf returns the problem httpConventions made of a console request's failure that is
 * not the request's own (a route that does not exist, a database that cannot serve, an unexpected
 * error), already logged, for the console to explain on a page; undefined for any other request.
 */
export function consoleFailureOf(request: Request): ProblemError | undefined {
  return consoleFailures.get(request);
}

/** methodsWith maps each route pattern to the methods whose route there has a query or body schema. */
function methodsWith(routes: RouteEntry[], schema: "query" | "body"): Map<string, Set<string>> {
  const methods = new Map<string, Set<string>>();
  for (const r of routes) if (r[schema]) methods.set(r.path, (methods.get(r.path) ?? new Set()).add(r.method));
  return methods;
}

/**
 * httpConventions applies the service's HTTP rules to every route: request ids and log lines
 * (request-log.ts), refusal of browser calls under /public/v1, JSON-only bodies up to 1 MiB
 * (body.ts), RFC 9457 problem responses for every error (errors.ts), and `Connection: close` on
 * every answer while the connections drain.
 */
export function httpConventions({ log, routes, metrics, bodyTimeoutMs, idleTimeoutSeconds, draining, listening, metricsToken, unexpectedFailure, tablesHome, databaseUrlFrom }: ConventionOptions) {
  // A response returned from onRequest skips Elysia's afterResponse hooks, so both paths call this.
  const finished = requestFinisher(log, metrics);
  const faults = new RefusalLog(tablesHome, databaseUrlFrom);
  const capacityLines = new SpacedLines<string>();
  // The route table is complete before the first request; read once, on that request.
  let routeTable: RouteEntry[] | undefined;
  let staticPaths: Map<string, string[]> | undefined;
  let queryRoutes: Map<string, Set<string>> | undefined;
  let bodyRoutes: Map<string, Set<string>> | undefined;
  // A request refused before routing is counted under the route it was sent to, as one refused
  // after routing (413, 422) is. The pattern is looked up for these refusals alone: a routed request has its route.
  const routeOf = (request: Request, route: string | undefined) => {
    if (route !== undefined) return route;
    const problem = problemOf(request);
    return problem !== undefined && !ROUTER_REFUSALS.has(problem) ? routePatternServing((routeTable ??= routes()), request.method, pathOf(request)) : "";
  };
  /** capacityRefused logs a refusal for a full limit, at most once a minute for each. */
  const capacityRefused = (request: Request, requestId: string, failure: ProblemError) => {
    const unlogged = capacityLines.occurred(failure.slug, performance.now());
    if (unlogged === undefined) return;
    log.warn("a limit of the service refused a request (503): it is at capacity", {
      request_id: requestId,
      method: request.method,
      path: pathOf(request),
      problem: failure.slug,
      detail: failure.message,
      ...(unlogged === null ? {} : { refused_since_last_line: unlogged }),
    });
  };

  return new Elysia({ name: "http-conventions" })
    .onRequest(({ request, set }) => {
      const id = startRequest(request, metricsToken);
      set.headers["x-request-id"] = id;
      // Set first, so that every answer carries it, those returned before routing too. Bun closes
      // the connection after such an answer: the client learns it between two requests, instead of
      // having its next request reset when the server stops listening.
      if (draining()) set.headers.connection = "close";
      // Bun dates every answer but HEAD's; RFC 9110 (section 6.6.1) asks it of every answer, and a sync reads its clock there.
      if (request.method === "HEAD") set.headers.date = new Date().toUTCString();
      const path = pathOf(request);
      const isPublic = path.startsWith(PUBLIC_PREFIX);
      // A shared cache that ignores Authorization (nginx's proxy_cache does) would serve one
      // client's data to the next, or a stale readiness to a load balancer; problems included.
      // The router serves /metrics/ as /metrics (and the probes alike).
      if (isPublic || isOpsPath(path)) set.headers["cache-control"] = "no-store";
      if (isPublic && isBrowserRequest(request)) {
        const refusal = problemResponse(
          problem(403, "browser-request", "This API does not accept calls from browsers. API tokens are secrets for server-side code (a backend job, an import script); never put them in browser code."),
          { "x-request-id": id },
        );
        noteProblem(request, "browser-request");
        finished(request, 403, routeOf(request, undefined));
        return refusal;
      }
    })
    .onTransform({ as: "global" }, ({ request, route, body }) => {
      const path = pathOf(request);
      const isPublic = path.startsWith(PUBLIC_PREFIX);
      if (route.includes("/:")) {
        // The router sends GET /contacts/batch (a POST-only path) to GET /contacts/:id; it is a 405,
        // with a trailing "/" too, as the router serves POST /contacts/batch/.
        const served = (staticPaths ??= staticPathMethods(routes())).get(routedPath(path));
        if (served && !served.includes(request.method)) throw methodNotAllowed(request.method, path, served);
        // The router takes /contacts/ID/ for /contacts/ID, and a URL client sends a tag named ".."
        // (.../tags/%2E%2E) as just that: a DELETE meant for the tag would delete the contact.
        if (isPublic && path.endsWith("/")) throw new ProblemError(404, "not-found", `No route matches ${request.method} ${path}: a path with an id does not end in "/".`);
      }
      // An action such as POST .../pause takes no body: fields sent to it would be ignored, so they are refused ({} is fine).
      if (body !== undefined && !(bodyRoutes ??= methodsWith(routes(), "body")).get(route)?.has(request.method) && isPublic) {
        const fields = Object.keys(body as object);
        if (fields.length > 0) throw validationProblem(fields.map((name) => ({ pointer: pointerSegment(name), detail: "is not a field here; this route takes no body" })));
      }
      const url = request.url;
      if (!url.includes("?")) return;
      // HEAD is served by the GET route (RFC 9110 section 9.3.2: the same answer without the body).
      const method = request.method === "HEAD" ? "GET" : request.method;
      const readsQuery = (queryRoutes ??= methodsWith(routes(), "query")).get(route)?.has(method) === true;
      // A route without parameters refuses any, as list routes refuse unknown ones: a typo is not ignored.
      if (!readsQuery && isPublic) {
        const names = [...new Set(new URLSearchParams(url.slice(url.indexOf("?") + 1)).keys())];
        if (names.length > 0) throw validationProblem(names.map((name) => ({ parameter: name, detail: "is not a parameter of this route, which takes none" })));
      }
      // Elysia keeps the last value of a repeated parameter; a route that reads its query refuses the guess.
      const errors = repeatedParameterErrors(url);
      if (errors.length > 0 && readsQuery) throw validationProblem(errors);
    })
    // The console (under /console) posts HTML forms; it validates its own form bodies.
    .onParse({ as: "global" }, ({ request }) =>
      isConsolePath(pathOf(request)) ? undefined : parseJsonBody(request, { timeoutMs: bodyTimeoutMs, idleTimeoutSeconds, server: listening() }),
    )
    // Bun's idle timer runs while a handler works, and would close the connection of a request
    // that takes longer than the idle timeout (a write waiting for PostgreSQL's write lock, an
    // account unlinked from 100,000 contacts) before its answer, after its commit. Off from the
    // handler's start, on again as it answers: it then times the keep-alive wait, as before.
    .onBeforeHandle({ as: "global" }, ({ request }) => void listening()?.timeout(request, 0))
    .onAfterHandle({ as: "global" }, ({ request }) => void listening()?.timeout(request, idleTimeoutSeconds))
    .onError({ as: "global" }, ({ code, error, request, set }) => {
      listening()?.timeout(request, idleTimeoutSeconds);
      const forConsole = isConsolePath(pathOf(request));
      // The console answers a request's problems with pages of its own (consoleErrors, console/shell.ts).
      if (forConsole && requestProblemOf(code, error)) return;
      const requestId = requestIdOf(request);
      const failure = errorToProblem({ code, error, request, requestId }, { log, routes, faults });
      noteProblem(request, failure.slug);
      if (CAPACITY_REFUSALS.has(failure.slug)) capacityRefused(request, requestId, failure);
      if (failure.status === 500 || failure.slug === "database-newer") unexpectedFailure();
      // Its other failures (an unknown page, a database down, a bug) are logged here as anywhere, and explained there.
      if (forConsole) return void consoleFailures.set(request, failure);
      set.status = failure.status;
      return problemResponse(failure.toProblem(), { "x-request-id": requestId, ...failure.headers });
    })
    .onAfterResponse({ as: "global" }, ({ request, set, response, route }) => {
      const status = response instanceof Response ? response.status : typeof set.status === "number" ? set.status : 200;
      finished(request, status, routeOf(request, route));
    });
}
