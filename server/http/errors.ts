import { ValidationError } from "elysia";
import { databaseFailureOf, databaseFaultOf, tablesMissing, type DatabaseFailure, type DatabaseFault } from "../db/backend.ts";
import { DatabaseNewer } from "../db/postgres.ts";
import { PartlyDone } from "../db/sql.ts";
import { SpacedLines, type Logger } from "../shared/log.ts";
import { ProblemError, validationProblem, type FieldError } from "../shared/problem.ts";
import { fieldErrorsOf, type SchemaIssue } from "./schema-errors.ts";
import { pathOf, routedPath } from "./request-log.ts";
import { BUILD } from "../version.ts";
import { errorCode, sqlStateOf } from "../shared/thrown.ts";

/** routePatternMatches tells whether a concrete path matches an Elysia route pattern like /a/:id. */
function routePatternMatches(pattern: string, path: string): boolean {
  const a = pattern.split("/");
  const b = path.split("/");
  if (a.length !== b.length) return false;
  return a.every((segment, i) => (segment.startsWith(":") ? b[i] !== "" : segment === b[i]));
}

function validationErrors(error: ValidationError): FieldError[] {
  const where = error.type === "query" || error.type === "params" ? "parameter" : error.type === "headers" ? "header" : "pointer";
  return fieldErrorsOf(error.all as SchemaIssue[], where);
}

/** RouteEntry is one route of the app's table (query, body: the route has a query or body schema). */
export interface RouteEntry {
  method: string;
  path: string;
  query: boolean;
  body: boolean;
}

/** servesPath tells whether a route serves a concrete path. A catch-all (/console/*) serves nothing: it only answers that no page is there, for GET as for any other method. */
function servesPath(r: RouteEntry, path: string): boolean {
  return r.method !== "ALL" && !r.path.endsWith("*") && routePatternMatches(r.path, path);
}

/**
 * allowedMethods lists the methods the app's routes serve on a concrete path. A path some route
 * names as it is (/contacts/batch, /metrics/ too) is served by those routes alone: an id route
 * around it (/contacts/:id) would only answer that no contact has the id "batch".
 */
function allowedMethods(routes: RouteEntry[], path: string): string[] {
  return staticPathMethods(routes).get(routedPath(path)) ?? [...new Set(routes.filter((r) => servesPath(r, path)).map((r) => r.method))];
}

/**
 * routePatternServing returns the pattern of the route that serves a method on a concrete path, as
 * the router picks it (a route naming the path as it is before a pattern around it; HEAD is served
 * by GET's), or "" when none does.
 */
export function routePatternServing(routes: RouteEntry[], method: string, path: string): string {
  const wanted = method === "HEAD" ? "GET" : method;
  const serves = (r: RouteEntry) => r.method === wanted && servesPath(r, path);
  return (routes.find((r) => r.path === path && serves(r)) ?? routes.find(serves))?.path ?? "";
}

/**
 * staticPathMethods maps each route path without parameters to the methods served on it, by the
 * path as routedPath reads a request's: the router serves the start page's /console/ at /console
 * too, so another method there is a 405 as at /console/, not a 404.
 */
export function staticPathMethods(routes: RouteEntry[]): Map<string, string[]> {
  const methods = new Map<string, string[]>();
  for (const r of routes) {
    const path = routedPath(r.path);
    const served = methods.get(path) ?? [];
    if (r.method !== "ALL" && !r.path.includes(":") && !r.path.includes("*") && !served.includes(r.method)) methods.set(path, [...served, r.method]);
  }
  return methods;
}

/** methodNotAllowed is the 405 for a method a path does not serve, with its Allow header. */
export function methodNotAllowed(method: string, path: string, served: string[]): ProblemError {
  // HEAD is served wherever GET is (GET's answer without its body), so Allow names it too.
  const allowed = served.includes("GET") && !served.includes("HEAD") ? [...served, "HEAD"] : served;
  return new ProblemError(405, "method-not-allowed", `${method} is not allowed on ${path}; allowed: ${allowed.join(", ")}.`, undefined, { allow: allowed.join(", ") });
}

/**
 * requestProblemOf returns the problem of a request's own making: a ProblemError thrown (also from
 * the parse hook, which Elysia wraps), or a query, body or parameter failing its schema (422 with
 * pointers); null for anything else.
 */
export function requestProblemOf(code: unknown, error: unknown): ProblemError | null {
  if (code === "PARSE" && (error as Error).cause instanceof ProblemError) return (error as Error).cause as ProblemError;
  if (error instanceof ProblemError) return error;
  if (code === "VALIDATION" && (error as ValidationError).type !== "response") return validationProblem(validationErrors(error as ValidationError));
  return null;
}

/** DATABASE_RETRY_AFTER_SECONDS is the Retry-After of a 503 for a database that cannot be used just now: a restart or failover takes seconds. */
const DATABASE_RETRY_AFTER_SECONDS = 5;

/** DATABASE_NEWER_RETRY_AFTER_SECONDS is the Retry-After of a request refused by an instance whose database a newer crm migrated: time for a load balancer to send the retry elsewhere. */
const DATABASE_NEWER_RETRY_AFTER_SECONDS = 5;

/** nothing is what a refused write's detail says it changed: nothing, or nothing more when it was a later step of a change (PartlyDone), whose steps before it stay done; `sentenceStart` capitalises it. */
function nothing(partly: boolean, sentenceStart = false): string {
  const words = partly ? "nothing more" : "nothing";
  return sentenceStart ? `N${words.slice(1)}` : words;
}

/**
 * databaseNewer is the 503 of an instance whose database a newer crm has migrated: its code would
 * read and write that schema the old way. `newer` names the migrations found; none when only a
 * statement whose table changed under it told (a migration under way). `partly`: the refused write
 * was a later step of a change (PartlyDone), whose steps before it stay done.
 */
export function databaseNewer(newer: readonly string[], partly = false): ProblemError {
  const unchanged = `${nothing(partly, true)} was changed; send the request to an instance of the newer crm.`;
  const detail =
    newer.length > 0
      ? `This instance runs crm ${BUILD}, and a newer crm has migrated its database (it has ${newer.join(", ")}, which this version does not know): it serves no requests and sends no webhooks, so that it writes nothing the old way. ${unchanged} The operator should stop this instance and run the newer crm in its place.`
      : `This instance runs crm ${BUILD}, and a table this request reads changed under it: a newer crm is migrating its database. ${unchanged} The operator should stop this instance and run the newer crm in its place.`;
  return new ProblemError(503, "database-newer", detail, undefined, { "retry-after": String(DATABASE_NEWER_RETRY_AFTER_SECONDS) });
}

/**
 * partlyDoneText is the sentence a refusal of a change's later step (PartlyDone) ends with: what its
 * committed steps did, and, for a 503 (the database could not serve it just now), that the request
 * sent again finishes the change; after a 404 or a 409 (the record deleted or disabled meanwhile)
 * the same request would be refused again.
 */
function partlyDoneText(done: string, status: number): string {
  return `Part of this request was done before this refusal, and stays done: ${done}.${status === 503 ? " Sending the request again finishes it." : ""}`;
}

/**
 * DATABASE_FAILURES answer a request the database could not serve through no fault of the request:
 * 503, which says so, where a 500 would say the request broke something. A full disk rolled the
 * change back whole (a retry once the operator has made room succeeds), and so did a write that
 * read-only storage refused (once it is writable again), and so was a write refused since the
 * file was replaced (once the service is restarted). A failed sync to disk rolled the change
 * back too, but its pages may reach the disk all the same and be read back at a restart. An
 * unreachable database may have taken a change whose commit went unanswered, so a retry is safe
 * only as an idempotent one.
 */
const DATABASE_FAILURES: Record<DatabaseFailure, (error: unknown, partly: boolean) => ProblemError> = {
  "storage-full": (_error, partly) =>
    new ProblemError(503, "storage-full", `The service's database has no room for this change (its disk is full), so ${nothing(partly)} was changed. Retry later, once the operator has made room.`, undefined, {
      "retry-after": "60",
    }),
  "storage-read-only": (_error, partly) =>
    new ProblemError(
      503,
      "storage-read-only",
      `The service's database cannot write to its storage (its file or file system is read-only, or refused the write), so ${nothing(partly)} was changed. Retry later, once the operator has made it writable.`,
      undefined,
      { "retry-after": "60" },
    ),
  "storage-failed": () =>
    new ProblemError(
      503,
      "storage-failed",
      "The service's database storage failed while saving this change (a disk I/O error), so it may not have been saved. Retry it; a change retried with the same Idempotency-Key is made once.",
      undefined,
      { "retry-after": "60" },
    ),
  replaced: (_error, partly) =>
    new ProblemError(
      503,
      "database-replaced",
      `The service's database file was replaced or removed while the service ran, so this request was refused: ${nothing(partly)} was changed. Retry after the operator has restarted the service.`,
      undefined,
      { "retry-after": "60" },
    ),
  busy: (_error, partly) =>
    new ProblemError(
      503,
      "database-busy",
      `The service's database is busy: another session holds a lock on data this request needs (a maintenance command such as ALTER TABLE or VACUUM FULL, or a long transaction), so ${nothing(partly)} was changed. Retry shortly.`,
      undefined,
      { "retry-after": String(DATABASE_RETRY_AFTER_SECONDS) },
    ),
  newer: (error, partly) => databaseNewer(error instanceof DatabaseNewer ? error.newer : [], partly),
  unavailable: () =>
    new ProblemError(
      503,
      "database-unavailable",
      "The service cannot use its database just now (it is unreachable, restarting or busy). Retry shortly; a change retried with the same Idempotency-Key is made once, even if this attempt went through.",
      undefined,
      { "retry-after": String(DATABASE_RETRY_AFTER_SECONDS) },
    ),
};

/**
 * DATABASE_FAILURE_LOGS are the lines DATABASE_FAILURES are logged with, at error; none for
 * "busy": PostgresDatabase logs the lock and the session holding it, at most once a minute; none
 * for "replaced", which SqliteDatabase.watchFile logged once when it found the file replaced; none
 * for "newer", which the MigrationWatch logs once when it finds the migrations.
 */
const DATABASE_FAILURE_LOGS: Record<DatabaseFailure, string | null> = {
  "storage-full": "database full: a change was refused",
  "storage-read-only": "database storage read-only: a change was refused",
  "storage-failed": "database storage failed: a change may not have been saved, and /readyz fails until the service is restarted",
  replaced: null,
  unavailable: "database unavailable: a request was refused",
  busy: null,
  newer: null,
};

/**
 * DATABASE_FAULT_LOGS are the lines a DatabaseFault is logged with, at error: what the operator must
 * mend (the tables' home named by tablesHomeOf; where the URL was given, DatabaseUrlFrom's named).
 */
const DATABASE_FAULT_LOGS: Record<DatabaseFault, (home: string, urlFrom: string) => string> = {
  "login-refused": (_home, urlFrom) =>
    `the PostgreSQL server refuses the service's login (its password changed, its LOGIN revoked, or pg_hba.conf): requests are refused (503 database-unavailable) until it accepts it; update the database URL (${urlFrom}) to the role's new password, or give the role its login back`,
  "database-missing": (_home, urlFrom) =>
    `the PostgreSQL database that the database URL (${urlFrom}) names does not exist (dropped or renamed): requests are refused (503 database-unavailable) until it is back; restore it, or point the database URL at it`,
  "tables-missing": (home) => `${tablesMissing(home)}; requests are refused (503 database-unavailable) until then`,
};

/**
 * SPACED_FAILURES are the failures that every request meets while they last (a PostgreSQL server
 * down or unreachable, a full disk, read-only storage): logged as a DatabaseFault is, once a minute
 * with a count, not a line per refused request. A failed sync to disk is logged with each request,
 * whose change may or may not have been saved.
 */
const SPACED_FAILURES = new Set<DatabaseFailure>(["unavailable", "storage-full", "storage-read-only"]);

/**
 * DESCRIPTOR_CODES are the codes of a request's failure for want of a file descriptor: none free
 * under the process's open-file limit (EMFILE) or the system's (ENFILE). The request is not at
 * fault: this server is at capacity, as with a full connection limit, until descriptors are freed.
 */
const DESCRIPTOR_CODES = new Set(["EMFILE", "ENFILE"]);

/** DESCRIPTORS_RETRY_AFTER_SECONDS is the Retry-After of a request refused for want of a descriptor: connections and webhook attempts end within seconds and free theirs (the delivery loop waits as long). */
const DESCRIPTORS_RETRY_AFTER_SECONDS = 5;

/** descriptorShortageOf is the error that says a request failed for want of a file descriptor (its code, or its cause's, one of DESCRIPTOR_CODES), or null. */
function descriptorShortageOf(error: unknown): Error | null {
  for (const candidate of [error, (error as Error | null)?.cause]) {
    const code = errorCode(candidate);
    if (code !== undefined && DESCRIPTOR_CODES.has(code)) return candidate as Error;
  }
  return null;
}

/** outOfDescriptors is the 503 of a request refused for want of a file descriptor, `code` naming whose limit was reached. */
function outOfDescriptors(code: string): ProblemError {
  const limit = code === "ENFILE" ? "the system's open-file limit" : "its open-file limit";
  return new ProblemError(
    503,
    "out-of-descriptors",
    `The server has no free file descriptor just now (${code}: ${limit} is reached), so it could not serve this request. Retry shortly; a change retried with the same Idempotency-Key is made once.`,
    undefined,
    { "retry-after": String(DESCRIPTORS_RETRY_AFTER_SECONDS) },
  );
}

/** SpacedRefusal is a condition every request meets while it lasts, logged by RefusalLog: a DatabaseFault, one of SPACED_FAILURES, or no free file descriptor. */
type SpacedRefusal = DatabaseFault | DatabaseFailure | "out-of-descriptors";

/**
 * RefusalLog logs the requests refused for a SpacedRefusal: one line when it is first met, then at
 * most one a minute while it goes on, counting the refusals left unlogged in between. Each cause
 * has its own line (causeOf), so a new one is logged at once: a server that comes back read-only
 * after a failover is not hidden behind the minute of its restart.
 */
export class RefusalLog {
  private readonly lines = new SpacedLines<string>();

  /** home names the database and schema of the service's tables (tablesHomeOf); urlFrom where the database URL was given (DatabaseUrlFrom's named) */
  constructor(
    private readonly home: string,
    private readonly urlFrom: string,
  ) {}

  /** refused logs, unless a line about `kind` and its cause was written within the minute, the refusal of one request. */
  refused(log: Logger, kind: SpacedRefusal, error: unknown, request: { request_id: string; method: string; path: string }): void {
    const unlogged = this.lines.occurred(`${kind} ${causeOf(error)}`, performance.now());
    if (unlogged === undefined) return;
    const line =
      kind === "out-of-descriptors"
        ? `requests refused: this server is out of file descriptors (${errorCode(error)}); raise the open-file limit (see Connections in README)`
        : kind in DATABASE_FAULT_LOGS
          ? DATABASE_FAULT_LOGS[kind as DatabaseFault](this.home, this.urlFrom)
          : DATABASE_FAILURE_LOGS[kind as DatabaseFailure];
    if (line) log.error(line, { ...request, error: String(error), ...codeOf(error), ...(unlogged === null ? {} : { refused_since_last_line: unlogged }) });
  }
}

/** causeOf names what a database's error is, from a bounded set: PostgreSQL's SQLSTATE, else the code of SQLite or of the client, else its class. */
function causeOf(error: unknown): string {
  return sqlStateOf(error) ?? errorCode(error) ?? ((error as object | null)?.constructor?.name ?? "");
}

/** codeOf is the `code` of a database's error, for its log line (SQLite's extended code names what failed: SQLITE_IOERR_FSYNC), or nothing. */
function codeOf(error: unknown): { code?: string } {
  const code = errorCode(error);
  return code === undefined ? {} : { code };
}

/**
 * errorToProblem turns anything a request's handling threw into the problem to answer with:
 * ProblemErrors as they say, request validation as 422 with pointers, an unknown route as 404 or
 * (known path, other method) 405 with Allow, a database that cannot serve it or no free file
 * descriptor as a logged 503 (a DatabaseFault, a failure every request meets or the descriptors
 * through `faults`, not once per request), and anything unexpected as a logged, opaque 500. A
 * change in steps refused after a step committed (PartlyDone) is answered as the step's error,
 * saying what stays done (`partly`, for its cause).
 */
export function errorToProblem(
  { code, error, request, requestId }: { code: unknown; error: unknown; request: Request; requestId: string },
  { log, routes, faults }: { log: Logger; routes: () => RouteEntry[]; faults: RefusalLog },
  partly = false,
): ProblemError {
  if (error instanceof PartlyDone) {
    const refusal = errorToProblem({ code, error: error.cause, request, requestId }, { log, routes, faults }, true);
    return new ProblemError(refusal.status, refusal.slug, `${refusal.message} ${partlyDoneText(error.done, refusal.status)}`, refusal.errors, refusal.headers, refusal.extensions);
  }
  const requestProblem = requestProblemOf(code, error);
  if (requestProblem) return requestProblem;
  if (code === "NOT_FOUND") {
    const path = pathOf(request);
    const allowed = allowedMethods(routes(), path);
    if (allowed.length > 0 && !allowed.includes(request.method)) return methodNotAllowed(request.method, path, allowed);
    return new ProblemError(404, "not-found", `No route matches ${request.method} ${path}.`);
  }
  if (code === "PARSE") return new ProblemError(400, "invalid-json", "The request body could not be parsed.");
  const failure = databaseFailureOf(error);
  if (failure) {
    const context = { request_id: requestId, method: request.method, path: pathOf(request) };
    const fault = databaseFaultOf(error) ?? (SPACED_FAILURES.has(failure) ? failure : null);
    const line = DATABASE_FAILURE_LOGS[failure];
    if (fault) faults.refused(log, fault, error, context);
    else if (line) log.error(line, { ...context, error: String(error), ...codeOf(error) });
    return DATABASE_FAILURES[failure](error, partly);
  }
  const shortage = descriptorShortageOf(error);
  if (shortage) {
    faults.refused(log, "out-of-descriptors", shortage, { request_id: requestId, method: request.method, path: pathOf(request) });
    return outOfDescriptors(errorCode(shortage)!);
  }
  // A ValidationError here is of a response (requests were handled above): the server's fault.
  const status = !(error instanceof ValidationError) && typeof (error as { status?: unknown }).status === "number" ? (error as { status: number }).status : 500;
  if (status >= 400 && status < 500) return new ProblemError(status, "bad-request", "The request could not be processed.");
  // A broken response's error carries the response itself, which may hold secrets: log only where it broke.
  const described = error instanceof ValidationError
    ? { error: `the response does not match its schema at ${(error.all[0] as { path?: string } | undefined)?.path || "/"}` }
    : { error: String(error), stack: (error as Error)?.stack };
  log.error("unhandled error", { request_id: requestId, method: request.method, path: pathOf(request), ...described });
  return new ProblemError(500, "internal", `An unexpected error occurred. Quote request id ${requestId} when reporting it.`);
}
