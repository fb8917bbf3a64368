/** JSON_CONTENT_TYPE is the content type of every JSON body the API sends (what Elysia sends for an object). */
export const JSON_CONTENT_TYPE = "application/json;charset=utf-8";

/**
 * jsonText answers a route with a body serialised here: it sets the content type on the route's
 * headers and returns the text. Elysia sends a string as it is, with the headers the hooks set,
 * in one Response. A returned object would be cleaned against the response schema first (every
 * contact of a page walked once more), and a returned Response copied into a second one to add
 * the hooks' headers: about 3 us of a by-email page.
 */
export function jsonText<T>(set: { headers: Record<string, string | number> }, body: T): T {
  set.headers["content-type"] = JSON_CONTENT_TYPE;
  // Typed as the body it serialises, so the route still type-checks against its response schema.
  return JSON.stringify(body) as unknown as T;
}
