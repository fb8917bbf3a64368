import { Elysia } from "elysia";
import type { Metrics } from "../ops/metrics.ts";
import type { Logger } from "../shared/log.ts";
import { problem, problemResponse, ProblemError, validationProblem } from "../shared/problem.ts";
import { parseJsonBody } from "./body.ts";
import { errorToProblem, type RouteEntry } from "./errors.ts";
import { repeatedParameterErrors } from "./list-query.ts";
import { pathOf, requestFinisher, requestIdOf, startRequest } from "./request-log.ts";

export const PUBLIC_PREFIX = "/public/v1";

/** CONSOLE_PREFIX is where the operator console is served (server-rendered HTML and forms). */
export const CONSOLE_PREFIX = "/console";

export interface ConventionOptions {
  log: Logger;
  /** routes returns the app's route table, used to tell 404 from 405 */
  routes: () => RouteEntry[];
  /** metrics counts every answered request by route pattern */
  metrics?: Metrics;
  /** time a client has to send a request body before 408 */
  bodyTimeoutMs?: number;
}

/**
 * httpConventions applies the service's HTTP rules to every route: request ids and log lines
 * (request-log.ts), refusal of browser calls under /public/v1, JSON-only bodies up to 1 MiB
 * (body.ts), and RFC 9457 problem responses for every error (errors.ts).
 */
export function httpConventions({ log, routes, metrics, bodyTimeoutMs }: ConventionOptions) {
  // A response returned from onRequest skips Elysia's afterResponse hooks, so both paths call this.
  const finished = requestFinisher(log, metrics);

  return new Elysia({ name: "http-conventions" })
    .onRequest(({ request, set }) => {
      const id = startRequest(request);
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
      // The console answers the problems its services throw with pages of its own (console/shell.ts).
      if (error instanceof ProblemError && pathOf(request).startsWith(`${CONSOLE_PREFIX}/`)) return;
      const requestId = requestIdOf(request);
      const { body, headers } = errorToProblem({ code, error, request, requestId }, { log, routes });
      set.status = body.status;
      return problemResponse(body, { "x-request-id": requestId, ...headers });
    })
    .onAfterResponse({ as: "global" }, ({ request, set, response, route }) => {
      const status = response instanceof Response ? response.status : typeof set.status === "number" ? set.status : 200;
      finished(request, status, route ?? "");
    });
}
