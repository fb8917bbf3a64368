import { t } from "elysia";

/** IdempotencyKeyHeader documents the optional Idempotency-Key request header of every POST. */
export const IdempotencyKeyHeader = t.Object(
  {
    "idempotency-key": t.Optional(
      t.String({ description: "Up to 255 characters. Same key and body within 24 h replays the first response (Idempotent-Replayed: true); a different body answers 422; a request still running answers 409." }),
    ),
  },
  { additionalProperties: true },
);

/** secured marks a route as needing the bearer token in OpenAPI. */
export const secured = { security: [{ bearerAuth: [] }] };
