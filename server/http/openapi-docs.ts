import { t } from "elysia";

/** secured marks a route as needing the bearer token in OpenAPI. */
export const secured = { security: [{ bearerAuth: [] }] };

/** publicOperation marks a route that needs no authentication in OpenAPI (health probes). */
export const publicOperation = { security: [] };

/**
 * DOCUMENT_AS names a schema keyword the OpenAPI document replaces the schema with: a query
 * parameter validated as a string (for its own error message) is documented as the number it is,
 * a value the service checks itself (an Idempotency-Key's length, custom_fields being an object)
 * as what it must be.
 */
export const DOCUMENT_AS = "documentAs";

/** documentAs states the schema a parameter has in the OpenAPI document (see DOCUMENT_AS). */
export const documentAs = (schema: Record<string, unknown>) => ({ [DOCUMENT_AS]: schema });

/**
 * DOCUMENT_REFUSED names a schema keyword listing the properties a body may not carry, which the
 * service refuses itself (a read-only field answers 422 "is read-only"): the document states each
 * as `false`, so a client generated from it does not send them.
 */
export const DOCUMENT_REFUSED = "documentRefused";

/** documentRefused states the properties a body may not carry (see DOCUMENT_REFUSED). */
export const documentRefused = (names: readonly string[]) => ({ [DOCUMENT_REFUSED]: names });

/** openBranches are the document's schemas of an open enumeration: its values, or any string. */
const openBranches = (values: readonly string[]) => [{ type: "string", enum: [...values] }, { type: "string", description: "A value added after this document was generated: handle it as unknown." }];

/**
 * documentOpen states an enumeration of an answer (a problem type, a status) as open in the
 * document: anyOf [its values, any string], so a client generated from today's document keeps a
 * fallback for a value added later instead of failing to read the answer. The values are still
 * listed for the types; the route's own schema, which checks the answer, is left as it is. A
 * request's enumerations stay closed: the service refuses a value it does not know.
 */
export const documentOpen = (values: readonly string[]) => documentAs({ anyOf: openBranches(values) });

/** openEnum is a string of an answer whose listed values may grow, documented open (see documentOpen). */
export const openEnum = (values: readonly string[], options: { description?: string } = {}) => t.String({ ...options, ...documentOpen(values) });

/**
 * nullableOpenEnum is openEnum or null, documented as a whole: the generator folds "X or null"
 * into X's own schema, whose documentOpen replacement would then leave the null out.
 */
export const nullableOpenEnum = (values: readonly string[], options: { description?: string } = {}) =>
  t.Union([t.String(), t.Null()], { ...options, ...documentAs({ anyOf: [...openBranches(values), { type: "null" }] }) });

/** IdempotencyKeyHeader documents the optional Idempotency-Key request header of every POST. */
export const IdempotencyKeyHeader = t.Object(
  {
    "idempotency-key": t.Optional(
      // Checked by the idempotency code (422 naming the header), so stated for the document only.
      t.String({ ...documentAs({ type: "string", minLength: 1, maxLength: 255, pattern: "^[\\x20-\\x2B\\x2D-\\x7E]+$" }), description: "1 to 255 printable ASCII characters other than the comma, sent once (the header twice, or a list, answers 422). Same key and body within 24 h replays the first response (Idempotent-Replayed: true); a different body answers 422; a request still running answers 409." }),
    ),
  },
  { additionalProperties: true },
);

/**
 * SENT_AS_TEXT marks the response schema of a route that sends its body serialised beforehand
 * (http/json-text.ts, serialisedResponse): the document states the schema it wraps.
 */
export const SENT_AS_TEXT = "sentAsText";
