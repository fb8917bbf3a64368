import type { TProperties, TSchema } from "@sinclair/typebox";
import { IdempotencyKeyHeader, secured } from "../http/openapi-docs.ts";
import { refuseEntityTags } from "../http/preconditions.ts";
import { fingerprintSentBody, idempotentPost, type PostContext } from "../http/idempotent.ts";
import { originOf } from "../http/request-log.ts";
import type { IdempotencyScope } from "../idempotency/service.ts";
import { chargeExtraWrites } from "../auth/routes.ts";
import type { Runtime } from "../runtime.ts";
import { problemResponses } from "../shared/problem.ts";
import { BATCH_RATE_NOTE, BatchResultEnvelope, batchInput } from "./model.ts";
import { batchWrites, runBatch, type BatchKind } from "./service.ts";

/**
 * batchPost is the handler and route options of a POST .../batch upsert: rate-limit cost per item,
 * Idempotency-Key, per-item results, entity tags in If-Match refused; `doc` names the operation,
 * says how items are matched and declares the kind's `options` (the body's fields beside items);
 * its `storedText`, if any, gives each item the form stored before the item is checked.
 */
export function batchPost<T, O extends object>(
  rt: Runtime,
  kind: BatchKind<T, O>,
  doc: { operationId: string; summary: string; description: string; item: TSchema; itemDescription: string; options?: TProperties; storedText?: (item: unknown) => void; unversioned: string; tags: string[] },
) {
  const handler = (ctx: PostContext & { body: { items: unknown[] } }) => {
    chargeExtraWrites(ctx.request, batchWrites(ctx.body.items.length) - 1);
    const { items, ...options } = ctx.body;
    return idempotentPost(rt.idempotency, ctx, (scope: IdempotencyScope | null) => runBatch(rt, kind, items, options as O, scope, originOf(ctx.request)));
  };
  const options = {
    body: batchInput(doc.item, doc.itemDescription, doc.options),
    // The fingerprint of the body as sent, then each item in the form stored.
    transform: doc.storedText ? [fingerprintSentBody, ({ body }: { body: unknown }) => storedItems(body, doc.storedText!)] : fingerprintSentBody,
    headers: IdempotencyKeyHeader,
    beforeHandle: refuseEntityTags(doc.unversioned),
    response: { 200: BatchResultEnvelope, ...problemResponses(400, 401, 403, 409, 413, 415, 422) },
    detail: { operationId: doc.operationId, summary: doc.summary, description: `${doc.description} ${BATCH_RATE_NOTE}`, tags: doc.tags, ...secured },
  };
  return [handler, options] as const;
}

/** storedItems runs `storedText` on each item of a batch body that has a list of items; any other body is left for the schema to refuse. */
function storedItems(body: unknown, storedText: (item: unknown) => void): void {
  const items = (body as { items?: unknown } | null)?.items;
  if (Array.isArray(items)) items.forEach((item) => storedText(item));
}
