import type { TProperties, TSchema } from "@sinclair/typebox";
import { t } from "elysia";
import { documentOpen } from "../http/openapi-docs.ts";
import { BATCH_ITEMS_PER_WRITE, MAX_BATCH_ITEMS } from "../limits/limits.ts";
import type { FieldError } from "../shared/problem.ts";

// What the contact and account batch upserts share: the body and the per-item result.

/**
 * batchInput is the body of a batch upsert. The OpenAPI document shows each item as `item` (the
 * body of the single POST), but the route does not check items against it: the service checks each
 * item on its own, so one bad item is refused alone instead of failing the whole batch. The item
 * sits in `allOf` of an unchecked schema: stated directly on it, Elysia's body normaliser could not
 * build its mirror and printed the whole schema to stdout on the first batch request. `options` are
 * the fields beside `items` that say how every item is written (a kind may have none).
 */
export function batchInput(item: TSchema, description: string, options: TProperties = {}) {
  const documented = JSON.parse(JSON.stringify(item)) as Record<string, unknown>;
  return t.Object(
    {
      items: t.Array(t.Unknown({ description, allOf: [documented] }), {
        minItems: 1,
        maxItems: MAX_BATCH_ITEMS,
        error: `must be a list of 1 to ${MAX_BATCH_ITEMS} items`,
      }),
      ...options,
    },
    { additionalProperties: false },
  );
}

const FieldErrorSchema = t.Object({ pointer: t.Optional(t.String({ description: "JSON pointer into the request body, e.g. /items/3/email" })), detail: t.String() });

/** BATCH_STATUSES are the outcomes of a batch item. */
const BATCH_STATUSES = ["created", "updated", "unchanged", "invalid"] as const;

/** BatchResult is the outcome of one batch item. */
export const BatchResultSchema = t.Object({
  // Checked as the four values still (a pattern: the generator would fold a union of literals into a closed enum, dropping documentOpen).
  status: t.String({ pattern: `^(?:${BATCH_STATUSES.join("|")})$`, ...documentOpen(BATCH_STATUSES) }),
  id: t.Optional(t.String({ description: "the record created, updated or found unchanged" })),
  errors: t.Optional(t.Array(FieldErrorSchema, { description: "why the item was refused (status invalid)" })),
});
export type BatchResult = { status: (typeof BATCH_STATUSES)[number]; id?: string; errors?: FieldError[] };

/** BatchResultEnvelope is a batch upsert's answer: one result per item, in order. */
export const BatchResultEnvelope = t.Object({ data: t.Array(BatchResultSchema) });

/** BATCH_RATE_NOTE tells integrators, in the OpenAPI document, what a batch costs and how results read. */
export const BATCH_RATE_NOTE = `Up to ${MAX_BATCH_ITEMS} items, committed in one transaction; answers 200 with one result per item, in order (created, updated, unchanged, or invalid with errors pointing at /items/N/...). Invalid items are refused alone; the others commit. For the write rate limit a batch counts as one write per ${BATCH_ITEMS_PER_WRITE} items or part of them (1 to ${BATCH_ITEMS_PER_WRITE} items: 1, ${BATCH_ITEMS_PER_WRITE + 1} to ${MAX_BATCH_ITEMS}: ${Math.ceil(MAX_BATCH_ITEMS / BATCH_ITEMS_PER_WRITE)}), all but the first charged once it is admitted. Send an Idempotency-Key as for any POST.`;
