import { Elysia, t } from "elysia";
import { parseQuery } from "elysia/parse-query";
import { CONSOLE_PREFIX, consoleFailureOf, isConsolePath } from "../server/http/conventions.ts";
import { noteOperator, pathOf } from "../server/http/request-log.ts";
import { requestIsHttps } from "../server/http/client-address.ts";
import { readLimitedBody, type BodyWait } from "../server/http/body.ts";
import { heldOpenWhile } from "../server/http/idle-timer.ts";
import { requestProblemOf } from "../server/http/errors.ts";
import { fieldsProblem } from "../server/http/schema-errors.ts";
import type { Db } from "../server/db/sql.ts";
import type { CursorPosition } from "../server/http/list-query.ts";
import { bodyFingerprint, saveIdempotentResponse, type IdempotencyScope } from "../server/idempotency/service.ts";
import { MAX_FORM_BYTES } from "../server/limits/limits.ts";
import { MakerGone } from "../server/auth/service.ts";
import { sessionOperator } from "../server/operators/service.ts";
import type { Runtime } from "../server/runtime.ts";
import { sameBytes, sha256 } from "../server/shared/crypto.ts";
import { withOffsetPlus } from "../server/shared/time.ts";
import type { IdPrefix } from "../server/shared/ids.ts";
import { ProblemError, validationProblem } from "../server/shared/problem.ts";
import { htmlResponse, PRE_SESSION_COOKIE, problemJsonResponse, readCookie, redirect, SESSION_COOKIE } from "./http.ts";
import { FormBody, type ConsoleSession } from "./model.ts";
import { messagePage } from "./auth/pages.tsx";

/** CONSOLE_DETAIL keeps every console feature's routes out of the OpenAPI document: the console is not part of the public API. */
export const CONSOLE_DETAIL = { hide: true };

/** OptionalForm is the body schema of every console form post. */
export const OptionalForm = t.Optional(FormBody);
/** IdParam is the `:id` of a console page. */
export const IdParam = t.Object({ id: t.String({ maxLength: 64 }) });
/** countOf reads a count a redirect after a form post wrote (null for a hand-made value). */
export function countOf(text: string | undefined): number | null {
  return text !== undefined && /^\d{1,9}$/.test(text) ? Number(text) : null;
}

/** flagQuery accepts the flag a redirect after a form post sets, so the page can confirm what was done. */
export const flagQuery = (flag: string) => t.Object({ [flag]: t.Optional(t.String({ maxLength: 10 })) }, { additionalProperties: true });

// Elysia types an optional record body loosely ({} | null); the schema guarantees a FormBody or nothing.
type PostedForm = {} | null | undefined;

// Every posted value passes through field or fields, so this check keeps the NUL character (which
// PostgreSQL cannot store in text, and no form field has a use for) out of every service. The
// signed-in console's forms read their fields inside the try that shows a problem on the form page,
// which so names the field as it names any other wrong one; elsewhere it is the 422 page.
function withoutNul(name: string, values: string[]): string[] {
  if (values.some((value) => value.includes("\u0000"))) throw fieldsProblem([{ pointer: `/${name}`, detail: "must not contain the NUL character" }]);
  return values;
}

/** field reads one form field as text ("" when absent; the first value when repeated), or throws 422 naming it when it holds the NUL character. */
export function field(form: PostedForm, name: string): string {
  return fields(form, name)[0] ?? "";
}

/** fields reads a form field that may repeat (checkboxes), or throws 422 naming it when a value holds the NUL character. */
export function fields(form: PostedForm, name: string): string[] {
  const value = (form as FormBody | null | undefined)?.[name];
  return withoutNul(name, value === undefined ? [] : Array.isArray(value) ? value : [value]);
}

/**
 * formBodyOf parses a urlencoded form post as Elysia does, or returns the 400 of a percent escape
 * that does not decode (`%E9` alone is not UTF-8, `%zz` no escape at all), which Elysia would keep
 * as typed ("%E9" stored as a name): as with such an escape in a request target, the request is
 * refused rather than guessed at. No browser sends one; a broken or hand-made client does.
 */
function formBodyOf(text: string): FormBody | ProblemError {
  if (text.includes("%")) {
    try {
      decodeURIComponent(text);
    } catch {
      return new ProblemError(400, "invalid-form-body", "The form has a percent escape that does not decode to UTF-8 text (such as %E9 alone, or % not followed by two hex digits); nothing was changed.");
    }
  }
  return parseQuery(text);
}

/**
 * formOf reads a console form post within its limits (MAX_FORM_BYTES, the body deadline, the
 * memory budget) and parses it, or returns the problem: 413, 408, 400, or 415 for a body that is not
 * urlencoded, as the console's pages send their forms. Every body is read here, whatever its type:
 * Elysia's own parsers, which would otherwise read a JSON, text or multipart body, have no limit.
 */
async function formOf(request: Request, contentType: string, wait: BodyWait): Promise<FormBody | ProblemError | undefined> {
  let text: string;
  try {
    text = await readLimitedBody(request, wait, MAX_FORM_BYTES);
  } catch (error) {
    if (error instanceof ProblemError) return error;
    throw error;
  }
  if (contentType === "application/x-www-form-urlencoded") return formBodyOf(text);
  if (text === "" && contentType === "") return undefined;
  return new ProblemError(415, "unsupported-media-type", "The console takes forms as its pages send them, as application/x-www-form-urlencoded; nothing was changed.");
}

/**
 * consoleTime reads a console date-time field (datetime-local, taken as UTC) into RFC 3339; other
 * text, as a link carries it, is returned for a check to read or refuse, an offset's "+" sent
 * unencoded given back (withOffsetPlus), as the API's time filters read it.
 */
export function consoleTime(value: string): string {
  return /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$/.test(value) ? `${value}:00Z` : /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,3})?$/.test(value) ? `${value}Z` : withOffsetPlus(value);
}

/**
 * consoleFieldTime shows an instant in a console date-time field (datetime-local, in UTC): to the
 * minute, or to the second or millisecond when it has them, which consoleTime reads back as the
 * same instant. Null for a year the field cannot hold (it takes 0001 to 9999 as four digits).
 */
export function consoleFieldTime(ms: number): string | null {
  const iso = new Date(ms).toISOString(); // ±YYYYYY-... outside years 0000-9999
  if (!/^\d{4}-/.test(iso) || iso.startsWith("0000-")) return null;
  return iso.slice(0, ms % 1000 !== 0 ? 23 : ms % 60_000 !== 0 ? 19 : 16);
}

/** positionText writes the `before` of a list's older page: the time and id of the last row shown. */
export function positionText(position: CursorPosition): string {
  return `${position.value}.${position.id}`;
}

/** positionOf reads a `before` positionText wrote of a row whose id has `prefix`, or gives null for any other text. */
export function positionOf(text: string, prefix: IdPrefix): CursorPosition | null {
  const match = new RegExp(`^(\\d{1,15})\\.(${prefix}_[0-9A-Z]{26})$`).exec(text);
  return match ? { value: Number(match[1]), id: match[2]! } : null;
}

/**
 * safeNext keeps a post-sign-in destination only when it is a console path (no open redirect) that
 * a Location header can carry as it is: printable ASCII, as the console's own links are (their
 * other characters percent-encoded). A line break would split the header, and Bun refuses
 * characters beyond Latin-1 outright, after the sign-in it answers has started a session. The path
 * is checked with its dot segments resolved (`%2e%2e` too), as the browser resolves them before it
 * asks: `/console/../docs` leads to /docs.
 */
export function safeNext(next: string | undefined): string | undefined {
  if (!next || next.length > 500 || !next.startsWith(`${CONSOLE_PREFIX}/`) || next.includes("\\") || !/^[\x21-\x7e]+$/.test(next)) return undefined;
  const resolved = new URL(next, "http://console.invalid");
  const path = `${resolved.pathname}${resolved.search}${resolved.hash}`;
  return path.startsWith(`${CONSOLE_PREFIX}/`) ? path : undefined;
}


/** csrfTokenFor derives the CSRF token of a seed (the session secret, or the pre-session cookie); it reveals nothing of the seed. */
export function csrfTokenFor(seed: string): string {
  return Buffer.from(sha256(`csrf\u0000${seed}`)).toString("base64url");
}

/** csrfTokenMatches compares a submitted CSRF token with the seed's in constant time. */
function csrfTokenMatches(seed: string | undefined, presented: unknown): boolean {
  if (!seed || typeof presented !== "string") return false;
  return sameBytes(Buffer.from(csrfTokenFor(seed)), Buffer.from(presented));
}

/** SignInRequired is thrown for a console request without a session: pages send the browser to sign in, JSON endpoints answer 401. */
class SignInRequired extends ProblemError {
  constructor(readonly next: string | undefined) {
    super(401, "unauthorized", "Sign in to the console first; console endpoints take the session cookie, not API tokens.");
  }
}

const ERROR_TITLES: Record<number, string> = {
  400: "Not understood",
  403: "Not allowed",
  404: "Not found",
  405: "Method not allowed",
  408: "Form too slow",
  409: "Not possible now",
  // What a form sent again made, or the link it showed, is gone (replay-resource-deleted, form-link-not-kept).
  410: "No longer available",
  413: "Form too large",
  414: "Address too long",
  415: "Not a form",
  422: "Check your input",
  429: "Slow down",
  431: "Headers too large",
  503: "Try again soon",
};

/** errorAnswer turns a problem into the page explaining it, or problem+json for the JSON endpoints. */
function errorAnswer(error: ProblemError, request: Request, session: ConsoleSession | null): Response {
  const path = new URL(request.url).pathname;
  // An operator removed while their request ran (MakerGone) is signed out by then, as their next request finds.
  if ((error instanceof SignInRequired || error instanceof MakerGone) && !path.startsWith(`${CONSOLE_PREFIX}/api/`)) {
    const next = error instanceof SignInRequired ? error.next : undefined;
    return redirect(`${CONSOLE_PREFIX}/login${next ? `?next=${encodeURIComponent(next)}` : ""}`);
  }
  if (path.startsWith(`${CONSOLE_PREFIX}/api/`)) return problemJsonResponse(error.toProblem(), error.headers);
  return htmlResponse(messagePage({ session, title: ERROR_TITLES[error.status] ?? "Something went wrong", text: error.message }), error.status, { headers: error.headers });
}

/**
 * consoleErrors is the console's one error handler, for every console address: registered globally,
 * so that it also answers the problems found before routing (limitsGuard's malformed request
 * target, oversized query or headers, a full server), which reach no feature's scoped hooks; those
 * come without a session, so their page has no navigation. The service's own failures (a database
 * that cannot serve, an unexpected error) reach it as httpConventions logged and mapped them.
 */
export function consoleErrors() {
  return new Elysia({ name: "console-errors" }).onError({ as: "global" }, ({ code, error, request, set, ...context }) => {
    if (!isConsolePath(pathOf(request))) return;
    const problem = requestProblemOf(code, error) ?? consoleFailureOf(request);
    if (!problem) return;
    // A value past a route schema's limit (a pasted 10,000-character search): the page names the field.
    const named = code === "VALIDATION" && problem.errors ? fieldsProblem(problem.errors) : problem;
    const answer = errorAnswer(named, request, (context as { session?: ConsoleSession | null }).session ?? null);
    // The request's log line and metrics read the status here: a sign-in required is answered 303, not 401.
    set.status = answer.status;
    return answer;
  });
}

/**
 * consoleBase is what every console feature starts from: the form parser, the session of the
 * cookie (or null) and the CSRF check of every form post.
 */
export function consoleBase(rt: Runtime) {
  const unrecorded = (error: unknown) => rt.log.warn("a console session's visit could not be recorded; the request goes on", { error: String(error) });
  return new Elysia()
    .onParse({ as: "scoped" }, ({ request }, contentType) =>
      formOf(request, contentType, { timeoutMs: rt.config.bodyTimeoutMs, idleTimeoutSeconds: rt.config.idleTimeoutSeconds, server: rt.listening() }),
    )
    .derive({ as: "scoped" }, async ({ request }) => {
      const secure = requestIsHttps(
        { url: request.url, forwardedProto: request.headers.get("x-forwarded-proto"), peer: rt.listening()?.requestIP(request)?.address ?? null },
        rt.config.trustedProxies,
      );
      const sessionSecret = readCookie(request, SESSION_COOKIE);
      // The session's lookup may wait for the database (a full pool, a lock held elsewhere) past
      // the idle timeout, whose timer runs until the handler starts: the connection is kept open meanwhile.
      const operator = await heldOpenWhile(request, { server: rt.listening(), idleTimeoutSeconds: rt.config.idleTimeoutSeconds }, sessionOperator(rt.db, sessionSecret, unrecorded));
      const session: ConsoleSession | null = operator && sessionSecret ? { operator, csrfToken: csrfTokenFor(sessionSecret) } : null;
      // Forms carry a token derived from the session, or before sign-in from a pre-session cookie.
      return { secure, session, sessionSecret, csrfSeed: session ? sessionSecret : readCookie(request, PRE_SESSION_COOKIE) };
    })
    // What a parse hook throws reaches the error handlers wrapped, as a parse failure the API's
    // handler answers with problem+json; the parser hands its problem on, to be thrown here, after
    // the session is known, so the page explaining it keeps the console's navigation.
    .onTransform({ as: "scoped" }, ({ body }) => {
      if (body instanceof ProblemError) throw body;
    })
    .onBeforeHandle({ as: "scoped" }, ({ request, body, csrfSeed, session }) => {
      if (request.method !== "POST" || csrfTokenMatches(csrfSeed, (body as FormBody | undefined)?._csrf)) return;
      // A sign-out with no session behind it (ended in another tab, or expired) forges nothing: it
      // only clears the dead cookie it carries, if any. Its form's token came from the ended session,
      // so it cannot match.
      if (!session && new URL(request.url).pathname === `${CONSOLE_PREFIX}/logout`) return;
      return htmlResponse(
        messagePage({ session, title: "Form expired", text: "This form was not sent from a current console page (its security token is missing or stale). Go back, reload the page and send it again." }),
        403,
      );
    });
}

/** signedInConsole is consoleBase for pages that need an operator: `session` is always set in their handlers. */
export function signedInConsole(rt: Runtime) {
  // A derive, not a resolve: it runs before the route's schemas, so a signed-out request with a
  // parameter past its limit is sent to sign in (or answered 401) like any other, not told 422.
  return consoleBase(rt).derive({ as: "scoped" }, ({ session, request }) => {
    if (!session) {
      const url = new URL(request.url);
      throw new SignInRequired(request.method === "GET" ? safeNext(url.pathname + url.search) : undefined);
    }
    noteOperator(request, session.operator);
    return { session };
  });
}

/** problemOf rethrows anything that is not a problem, and a removed operator's MakerGone (answered by sending to sign in); a route uses it to show a form again with the problem's message. */
export function problemOf(error: unknown, ...statuses: number[]): ProblemError {
  if (error instanceof ProblemError && !(error instanceof MakerGone) && (statuses.length === 0 || statuses.includes(error.status))) return error;
  throw error;
}

/**
 * refusedOnField runs a form's change and, when a service refuses it with the problem `slug`, which
 * names no field (a 409 such as user-exists), puts the problem's detail on the form's field `name`
 * as its reason: the form marks the field to correct, in the API's words, as it does a field the
 * API names.
 */
export async function refusedOnField<T>(change: Promise<T>, slug: string, name: string): Promise<T> {
  try {
    return await change;
  } catch (error) {
    if (!(error instanceof ProblemError) || error.slug !== slug) throw error;
    throw new ProblemError(error.status, slug, error.message, [{ pointer: `/${name}`, detail: error.message }], error.headers, error.extensions);
  }
}

/** MAX_FORM_KEY_LENGTH bounds a form key; the pages draw UUIDs (36 characters). */
const MAX_FORM_KEY_LENGTH = 64;

/** FORM_ANSWER_WAIT_MS is how long a form sent again waits for the first sending's answer. */
const FORM_ANSWER_WAIT_MS = 10_000;

/**
 * onceForForm makes the change of a console form once per form key (a hidden field each page
 * showing the form draws afresh), through the API's Idempotency-Key records under the operator:
 * the form sent again (a double click, a browser retry) waits for the first sending's answer and
 * gets it, as an API client's retry does. The same key with other values is 409.
 */
export async function onceForForm<T>(
  rt: Runtime,
  form: { session: ConsoleSession; path: string; key: string; values: unknown },
  execute: (scope: IdempotencyScope | null) => Promise<{ status: number; body: T }>,
): Promise<{ status: number; body: T; replayed: boolean }> {
  // A form without a key (a page shown by an earlier version) makes its change as it always did.
  if (form.key === "") return { ...(await execute(null)), replayed: false };
  if (form.key.length > MAX_FORM_KEY_LENGTH) throw validationProblem([{ pointer: "/form_key", detail: `must be at most ${MAX_FORM_KEY_LENGTH} characters` }]);
  const fingerprint = bodyFingerprint(form.values);
  const request = { tokenId: `console:${form.session.operator.id}`, method: "POST", path: form.path, key: form.key, fingerprint: () => fingerprint };
  for (const started = Date.now(); ; ) {
    try {
      return await rt.idempotency.run(request, execute);
    } catch (error) {
      if (!(error instanceof ProblemError)) throw error;
      if (error.slug === "idempotency-key-reused") throw new ProblemError(409, "form-already-sent", "This form was already sent with other values. Load the page again to send it anew.");
      // In the console's words: the API's names the Idempotency-Key, which the operator never saw.
      if (error.slug === "replay-resource-deleted") throw new ProblemError(410, "replay-resource-deleted", "This form was already sent, and what it made has been deleted since. Load the page again to send it anew.");
      if (error.slug !== "idempotency-key-in-use") throw error;
      if (Date.now() - started > FORM_ANSWER_WAIT_MS) throw new ProblemError(409, "form-being-sent", `This form is still being sent; its answer did not come within ${FORM_ANSWER_WAIT_MS / 1000} s. Load the page again to see what it changed.`);
      await Bun.sleep(50);
    }
  }
}

/**
 * changeOnceForForm is onceForForm for a console change of its own (not an API call): `change`
 * runs in one write with the form's record, so a confirmation sent again answers as the first did
 * (and one with fields, given as `values`, sent again with others is 409).
 * On a replay, whatever `change` noted aside was of a run rolled back (its key taken over as stale):
 * the change that stands is another sending's, which notes its own.
 */
export async function changeOnceForForm<T>(
  rt: Runtime,
  form: { session: ConsoleSession; path: string; key: string; values?: unknown },
  change: (tx: Db, now: number) => Promise<T>,
): Promise<{ body: T; replayed: boolean }> {
  return onceForForm(rt, { values: {}, ...form }, (scope) =>
    rt.db.write(async (tx) => {
      const now = Date.now();
      const body = await change(tx, now);
      await saveIdempotentResponse(tx, scope, 200, body, now);
      return { status: 200, body };
    }),
  );
}
