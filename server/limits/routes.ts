import { Elysia } from "elysia";
import { ProblemError } from "../shared/problem.ts";
import type { Runtime } from "../runtime.ts";
import { isConsolePath } from "../http/conventions.ts";
import { pathOf } from "../http/request-log.ts";
import { addressOf } from "../http/client-address.ts";
import { JSON_CONTENT_TYPE } from "../http/json-text.ts";
import { ANSWER_PIECE_BYTES, budgetedBody, largeTextOf } from "./answer-budget.ts";
import { BodyBudget } from "./body-budget.ts";
import { MAX_BODY_BYTES, MAX_FORM_BYTES, MAX_HEADER_BYTES, MAX_HEADER_FIELDS, MAX_QUERY_BYTES } from "./limits.ts";

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
    // Bun joins a field sent several times into one value, ", " between: each counts as a line
    // of its own (a comma-separated list in one line counts as many too, which no client is near).
    let lines = 1;
    for (let at = value.indexOf(", "); at >= 0; at = value.indexOf(", ", at + 2)) lines++;
    const size = lines * (name.length + 4) + value.length - 2 * (lines - 1); // "name: value\r\n" per line
    bytes += size;
    fields += lines;
    if (size > largestBytes) {
      largest = name;
      largestBytes = size;
    }
  }
  // Too many fields is no one field's fault: only a size refusal names the largest.
  if (fields > MAX_HEADER_FIELDS) throw new ProblemError(431, "headers-too-large", `The request has ${fields} header fields; the limit is ${MAX_HEADER_FIELDS}.`);
  if (bytes > MAX_HEADER_BYTES) {
    const detail = `The request headers are ${bytes} bytes; the limit is ${MAX_HEADER_BYTES} bytes (8 KiB). The largest is ${largest} (${largestBytes} bytes).`;
    throw new ProblemError(431, "headers-too-large", detail, [{ header: largest, detail: `is ${largestBytes} bytes of ${bytes} in all` }]);
  }
}

/** VALID_HOST is one host (a name, an IPv4 address or a bracketed IPv6 address) with an optional port, 0 to 65535 (RFC 9110 section 7.2). */
const VALID_HOST = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~!$&'()*+;=%]+)(?::(?:6553[0-5]|655[0-2]\d|65[0-4]\d\d|6[0-4]\d{3}|[1-5]?\d{1,4}))?$/;

/**
 * refuseInvalidHost answers 400 for a Host header that is repeated (Bun joins the values with
 * ", ") or is not one host and port, as RFC 9112 section 3.2 requires, and for a missing one,
 * which Bun itself refuses only in HTTP/1.1.
 */
function refuseInvalidHost(request: Request): void {
  const host = request.headers.get("host");
  if (host === null) {
    // Bun refuses an HTTP/1.1 request without Host itself; for HTTP/1.0 it passes the bare path on as
    // the URL, which every later step would misread ("/public/v1/x" as host "public", path "/v1/x").
    if (request.url.startsWith("/")) throw new ProblemError(400, "invalid-host", "The request has no Host header; send one, as HTTP/1.1 requires.", [{ header: "host", detail: "is missing" }]);
    return;
  }
  if (VALID_HOST.test(host)) return;
  throw new ProblemError(400, "invalid-host", "The Host header must name one host (a name or an address) with an optional port, once.", [
    { header: "host", detail: host.includes(",") ? "is given more than once" : "is not a host with an optional port" },
  ]);
}

function hexDigit(code: number): number {
  if (code >= 0x30 && code <= 0x39) return code - 0x30;
  const lower = code | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x57 : -1;
}

/**
 * refuseMalformedTarget answers 400 for a path or query string holding %00 (no id or parameter may
 * contain the NUL character, which PostgreSQL cannot store in text and SQLite would) or a percent
 * escape that does not decode (`%E9` alone is not UTF-8, `%zz` no escape at all), which the
 * router would otherwise pass on undecoded. Escapes of ASCII (`%40`) are checked by hand: decoding
 * a whole URL costs several times more, and only escapes of bytes past 0x7F can break UTF-8.
 */
function refuseMalformedTarget(request: Request): void {
  const url = request.url;
  let beyondAscii = false;
  for (let at = url.indexOf("%"); at >= 0; at = url.indexOf("%", at + 3)) {
    const high = hexDigit(url.charCodeAt(at + 1));
    const low = hexDigit(url.charCodeAt(at + 2));
    if (high < 0 || low < 0) throw malformedEscape();
    if (high === 0 && low === 0) {
      throw new ProblemError(400, "invalid-request-target", "The request target contains %00, an encoded NUL character, which no path segment or query parameter may hold.");
    }
    beyondAscii ||= high >= 8;
  }
  if (!beyondAscii) return;
  try {
    decodeURIComponent(url);
  } catch {
    throw malformedEscape();
  }
}

function malformedEscape(): ProblemError {
  return new ProblemError(400, "invalid-request-target", "The request target has a percent escape that does not decode to UTF-8 text (such as %E9 alone, or % not followed by two hex digits).");
}

/**
 * refuseListWhileAnswersUnread is the beforeHandle of a GET list, whose page can be large: 429
 * answers-unread before it is read when its client holds too much of its answer share for a
 * large answer (AnswerBudget.refuseWhileNearShare), a short page too, as its size is not known yet.
 */
export function refuseListWhileAnswersUnread(rt: Runtime) {
  return ({ request }: { request: Request }) => rt.answers.refuseWhileNearShare(addressOf(rt.listening(), request, rt.config.trustedProxies));
}

/** isJsonValue tells whether a route's answer is an object or array Elysia would send as JSON (Response.json), not a Response, file, stream or status wrapper. */
function isJsonValue(value: object): boolean {
  return value.constructor === Object || Array.isArray(value);
}

/** sentAsText hands Elysia an answer already serialised, which it sends as it sends a route's text (mapResponse's type allows a Response alone). */
const sentAsText = (text: string) => text as unknown as Response;

/**
 * limitsGuard enforces, before routing and before any body is read: the connection cap and each
 * client address's share of it (503, connections.ts), the query string and header size limits
 * (414, 431), a valid Host and a target without %00 or broken escapes (400), and the budget of
 * body bytes held in memory (503, body-budget.ts); and once a route has answered, the budget of
 * answer bytes held until the client reads them (503, 429, answer-budget.ts). Rate limits come
 * after authentication (auth/routes.ts), which knows whose budget a request spends.
 */
export function limitsGuard(rt: Runtime) {
  const { config, connections } = rt;
  const bodies = new BodyBudget(config.bodyBufferMaxMb * 1024 * 1024);

  return new Elysia({ name: "limits" })
    .onRequest(async ({ request }) => {
      const path = pathOf(request);
      const waiting = connections.admit(request, rt.listening(), path);
      if (waiting) await waiting;
      refuseOversizedRequest(request);
      refuseInvalidHost(request);
      refuseMalformedTarget(request);
      // Taken before authentication: a request refused there is answered at once and gives it back.
      // The console's forms, its open sign-in form among them, hold no more than their own limit.
      bodies.admit(request, isConsolePath(path) ? MAX_FORM_BYTES : MAX_BODY_BYTES);
    })
    // A route's answer as text or JSON (objects serialised here, as Elysia would), or one built
    // whole as a Response (textResponse): a large one is charged to the answer budget and sent
    // piece by piece. Most answers are short, which pays a test or two and nothing else.
    .mapResponse({ as: "global" }, ({ request, response, set }) => {
      // Only a read is refused: any other request has done its work by now, and a client told to retry would do it again.
      const inPieces = (text: string) => budgetedBody(rt.answers, addressOf(rt.listening(), request, config.trustedProxies), text, request.method === "GET");
      if (response instanceof Response) {
        const text = largeTextOf(response);
        // Bun sends no body to HEAD: nothing is held for it.
        if (text === undefined || request.method === "HEAD") return;
        return new Response(inPieces(text), { status: response.status, headers: response.headers });
      }
      let text: string;
      if (typeof response === "string") {
        if (response.length < ANSWER_PIECE_BYTES) return;
        text = response;
        set.headers["content-type"] ??= "text/plain;charset=utf-8";
      } else {
        if (typeof response !== "object" || response === null || !isJsonValue(response)) return;
        text = JSON.stringify(response);
        set.headers["content-type"] ??= JSON_CONTENT_TYPE;
        if (text.length < ANSWER_PIECE_BYTES) return sentAsText(text);
      }
      if (request.method === "HEAD") return sentAsText(text);
      return new Response(inPieces(text));
    })
    .onAfterResponse({ as: "global" }, ({ request }) => {
      connections.release(request);
      bodies.release(request);
    });
}
