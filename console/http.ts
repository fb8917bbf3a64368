import { noneMatchNames } from "../server/http/preconditions.ts";
import { textResponse } from "../server/limits/answer-budget.ts";
import type { Problem } from "../server/shared/problem.ts";

/** CONTENT_SECURITY_POLICY allows only the console's own files: no inline scripts or styles, no framing. */
export const CONTENT_SECURITY_POLICY =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

/** SECURITY_HEADERS go on every console response, pages, JSON and assets alike. */
const SECURITY_HEADERS: Record<string, string> = {
  "content-security-policy": CONTENT_SECURITY_POLICY,
  "x-frame-options": "DENY",
  "x-content-type-options": "nosniff",
  "referrer-policy": "same-origin",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
};

// Pages can show a secret once (a new API token, a subscription secret): never keep them in a cache.
const NO_STORE = { "cache-control": "no-store" };

export const SESSION_COOKIE = "crm_console_session";
/** PRE_SESSION_COOKIE carries the CSRF seed of the sign-in and setup forms, before a session exists. */
export const PRE_SESSION_COOKIE = "crm_console_csrf";
/** DEVICE_COOKIE marks a browser that signed in as an operator before (server/operators/devices.ts): its sign-ins skip the address's pacing. */
export const DEVICE_COOKIE = "crm_console_device";

/** ResponseExtras are cookies to set and further headers (Retry-After) of a page or redirect. */
export interface ResponseExtras {
  cookies?: string[];
  headers?: Record<string, string>;
}

function withExtras(response: Response, extras: ResponseExtras): Response {
  for (const [name, value] of Object.entries(extras.headers ?? {})) response.headers.set(name, value);
  for (const cookie of extras.cookies ?? []) response.headers.append("set-cookie", cookie);
  return response;
}

/** htmlResponse answers with a whole HTML document and the security headers. */
export function htmlResponse(html: string, status = 200, extras: ResponseExtras = {}): Response {
  return withExtras(textResponse(`<!doctype html>${html}`, { status, headers: { "content-type": "text/html; charset=utf-8", ...SECURITY_HEADERS, ...NO_STORE } }), extras);
}

/** redirect answers 303 See Other, so a form post is followed by a GET. */
export function redirect(location: string, extras: ResponseExtras = {}): Response {
  return withExtras(new Response(null, { status: 303, headers: { location, ...SECURITY_HEADERS, ...NO_STORE } }), extras);
}

/** jsonResponse answers a console JSON endpoint. */
export function jsonResponse(body: unknown, status = 200): Response {
  return textResponse(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...SECURITY_HEADERS, ...NO_STORE } });
}

/** problemJsonResponse answers a console JSON endpoint with an RFC 9457 problem. */
export function problemJsonResponse(problem: Problem, headers: Record<string, string> = {}): Response {
  return textResponse(JSON.stringify(problem), { status: problem.status, headers: { "content-type": "application/problem+json", ...SECURITY_HEADERS, ...NO_STORE, ...headers } });
}

/**
 * assetResponse serves a CSS or JavaScript file of the console. Browsers revalidate it on every
 * load (no-cache, its URL names no version): a request whose If-None-Match names its ETag is
 * answered 304 with the headers alone (RFC 9110 section 15.4.5), so only a changed file is sent.
 */
export function assetResponse(request: Request, body: string, contentType: string): Response {
  const etag = `"${Bun.hash(body).toString(36)}"`;
  const headers = { etag, "cache-control": "no-cache", ...SECURITY_HEADERS };
  if (noneMatchNames(request.headers.get("if-none-match"), etag)) return new Response(null, { status: 304, headers });
  return textResponse(body, { headers: { "content-type": contentType, ...headers } });
}

/** readCookie returns one cookie of a request, or undefined. */
export function readCookie(request: Request, name: string): string | undefined {
  const header = request.headers.get("cookie");
  if (!header) return undefined;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** cookieHeader sets a console cookie: HttpOnly, SameSite=Strict, path /console, Secure over https. */
export function cookieHeader(name: string, value: string, secure: boolean, maxAgeSeconds?: number): string {
  return [`${name}=${value}`, "Path=/console", "HttpOnly", "SameSite=Strict", ...(secure ? ["Secure"] : []), ...(maxAgeSeconds === undefined ? [] : [`Max-Age=${maxAgeSeconds}`])].join("; ");
}

/** clearCookieHeader removes a console cookie. */
export function clearCookieHeader(name: string, secure: boolean): string {
  return cookieHeader(name, "", secure, 0);
}
