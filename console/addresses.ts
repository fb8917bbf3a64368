import { CONSOLE_PREFIX } from "../server/http/conventions.ts";
import { fieldsProblem } from "../server/http/schema-errors.ts";
import { MAX_QUERY_BYTES } from "../server/limits/limits.ts";
import type { SecretBox } from "../server/webhooks/secrets.ts";
import type { ConsoleSession } from "./model.ts";

// What a console page's address may hold of what an operator typed. A form where text can be
// pasted (the search box, the contacts page's filter, the deliveries filters) posts it, and its
// answer is a redirect to the page with the text sealed (`?s=`), so that a secret pasted by
// mistake is in no address: not the browser's history, a proxy's log or the request log.

/** SealedPage is a console page that takes what was typed sealed in its address (`?s=`). */
export type SealedPage = "search" | "contacts" | "deliveries";

const PATHS: Record<SealedPage, string> = { search: `${CONSOLE_PREFIX}/search`, contacts: `${CONSOLE_PREFIX}/contacts`, deliveries: `${CONSOLE_PREFIX}/` };

/** SEALED_ADDRESS_TTL_MS is how long a sealed address opens: long enough for Back and Reload, not for keeping. */
export const SEALED_ADDRESS_TTL_MS = 60 * 60 * 1000;
/** SEALED_MAX_LENGTH bounds a sealed `?s=`: what the query string's limit leaves after `s=`. */
export const SEALED_MAX_LENGTH = MAX_QUERY_BYTES - "s=".length;

/**
 * sealFields seals a page's fields (the text typed, the page position) for its address, for an hour
 * and for the session `sessionName` names alone (its CSRF token, a digest of its secret): the
 * address holds none of the text, a copy of it opens in no other session nor on another page, and
 * every instance sharing the secrets key opens it.
 */
export function sealFields(secrets: SecretBox, page: SealedPage, sessionName: string, fields: Record<string, string>, now = Date.now()): string {
  return secrets.sealText(`console ${page} address`, sessionName, JSON.stringify([fields, now + SEALED_ADDRESS_TTL_MS]));
}

/** openFields opens what sealFields made for the page and the session `sessionName`, or returns null: sealed for another session or page, expired or altered. */
export function openFields(secrets: SecretBox, page: SealedPage, sessionName: string, sealed: string, now = Date.now()): Record<string, string> | null {
  const text = secrets.openText(`console ${page} address`, sessionName, sealed);
  if (text === null) return null;
  const [fields, expiresAt] = JSON.parse(text) as [Record<string, string>, number];
  return expiresAt > now ? fields : null;
}

/**
 * sealedAddress is the address of `page` with `fields` sealed in it for the operator's session, or
 * throws 422 naming the longest field when the seal is longer than the query string may be: the
 * post that typed it is refused, rather than redirected to an address the server answers 414.
 */
export function sealedAddress(secrets: SecretBox, page: SealedPage, session: ConsoleSession, fields: Record<string, string>): string {
  const sealed = sealFields(secrets, page, session.csrfToken, fields);
  if (sealed.length > SEALED_MAX_LENGTH) {
    const [longest] = Object.entries(fields).reduce((most, entry) => (entry[1].length > most[1].length ? entry : most));
    throw fieldsProblem([{ parameter: longest, detail: `is too long for the page's address: what was typed takes ${sealed.length} characters sealed, and the address holds ${SEALED_MAX_LENGTH}` }]);
  }
  return `${PATHS[page]}?s=${sealed}`;
}

/** SecretShape is which of the service's own secrets a text looks like. */
export type SecretShape = "api-token" | "signing-secret";

// The shapes minted in server/auth/service.ts (crm_ and 40 letters and digits) and
// server/webhooks/service.ts (whsec_ and 32 bytes in base64), matched a few characters short too
// (a paste that lost its end) and anywhere in the text (a header or a config line pasted whole).
// Narrower than the request log's SECRET_SHAPED, which costs nothing when it errs: here a false
// match refuses a search, and an email such as crm_team@example.com must still be found.
const API_TOKEN = /crm_[A-Za-z0-9]{32}/;
const SIGNING_SECRET = /whsec_[A-Za-z0-9+/]{24}/;

/** secretShapeOf tells whether a text holds something shaped like an API token or a webhook signing secret, which a console page must not search, log, seal or put in an address. */
export function secretShapeOf(text: string): SecretShape | null {
  return API_TOKEN.test(text) ? "api-token" : SIGNING_SECRET.test(text) ? "signing-secret" : null;
}

/** secretFieldOf is the first of `fields` whose value is secret-shaped (secretShapeOf), with its shape, or null when none is. */
export function secretFieldOf(fields: Record<string, string | undefined>): { name: string; secret: SecretShape } | null {
  for (const [name, value] of Object.entries(fields)) {
    const secret = value === undefined ? null : secretShapeOf(value);
    if (secret) return { name, secret };
  }
  return null;
}
