import { t, type TSchema } from "elysia";
import { SENT_AS_TEXT } from "./openapi-docs.ts";

/** JSON_CONTENT_TYPE is the content type of every JSON body the API sends (what Elysia sends for an object). */
export const JSON_CONTENT_TYPE = "application/json;charset=utf-8";

/** JsonText is the JSON serialisation of a T: a string, typed by what it holds. */
export type JsonText<T> = string & { readonly serialises?: T };

/** toJsonText serialises a value. */
export function toJsonText<T>(value: T): JsonText<T> {
  return JSON.stringify(value) as JsonText<T>;
}

/**
 * serialisedResponse is the response schema of a route that answers with sendJson: the body's
 * schema as the document states it, and typed as it, while Elysia passes the text on unchanged.
 * Given an object schema, Elysia first "cleans" the returned value against it (exact-mirror),
 * which on a string throws, caught, about 1 us a request. A schema without a type of its own
 * (unknown, all of the body's schema) is passed through as it is; the OpenAPI document states the
 * body's schema in its place (SENT_AS_TEXT).
 */
export function serialisedResponse<T extends TSchema>(schema: T): T {
  return t.Unknown({ allOf: [schema], [SENT_AS_TEXT]: true }) as unknown as T;
}

/**
 * sendJson answers a route with a body serialised beforehand: it sets the content type on the
 * route's headers and returns the text, which Elysia sends as it is, with the headers the hooks
 * set, in one Response; the route declares its body with serialisedResponse. A returned object
 * would be cleaned against the response schema first (every contact of a page walked once more),
 * and a returned Response copied into a second one to add the hooks' headers: about 3 us of a
 * by-email page. Typed as the body the text holds, so the route still type-checks against its
 * response schema.
 */
export function sendJson<T>(set: { headers: Record<string, string | number> }, text: JsonText<T>): T {
  set.headers["content-type"] = JSON_CONTENT_TYPE;
  return text as unknown as T;
}
