import { t } from "elysia";
import { fingerprintSentBody, idempotentPost, type PostContext } from "../http/idempotent.ts";
import { IdempotencyKeyHeader, secured } from "../http/openapi-docs.ts";
import { refuseEntityTags } from "../http/preconditions.ts";
import { makerOf } from "../http/request-log.ts";
import type { Runtime } from "../runtime.ts";
import { problemResponses } from "../shared/problem.ts";
import { ErasureEnvelope, TombstoneListEnvelope, TombstoneListQuery } from "./model.ts";
import { eraseDeletedRecord, listDeletedPage, type ErasableResource } from "./service.ts";
import type { Resource } from "./store.ts";

/**
 * deletedList is the handler and route options of a GET .../deleted: the tombstones of `resource`
 * after `since` (listDeletedPage); `doc` names the operation and the records in the plural.
 */
export function deletedList(rt: Runtime, resource: Resource, doc: { operationId: string; plural: string; tags: string[] }) {
  const handler = ({ query }: { query: Record<string, unknown> }) => listDeletedPage(rt, resource, query);
  const options = {
    query: TombstoneListQuery,
    response: { 200: TombstoneListEnvelope, ...problemResponses(401, 403, 410, 422) },
    detail: {
      operationId: doc.operationId,
      summary: `List deleted ${doc.plural}`,
      description: `Ids, deletion times and versions of ${doc.plural} deleted after \`since\`, oldest first, kept for the tombstone retention (90 days by default). A \`since\` older than that is 410: resync in full.`,
      tags: doc.tags,
      ...secured,
    },
  };
  return [handler, options] as const;
}

/**
 * erasePost is the handler and route options of a POST .../deleted/:id/erase: the erasure of a
 * deleted record's earlier events (eraseDeletedRecord); `doc` names the operation and the record.
 */
export function erasePost(rt: Runtime, resource: ErasableResource, doc: { operationId: string; tags: string[] }) {
  const handler = (ctx: PostContext & { params: { id: string } }) => idempotentPost(rt.idempotency, ctx, (scope) => eraseDeletedRecord(rt.db, resource, ctx.params.id, rt.batchRows, scope, makerOf(ctx.request)));
  const options = {
    params: t.Object({ id: t.String({ maxLength: 64, description: `Id of the deleted ${resource} (${resource === "contact" ? "con_" : "acc_"}...)` }) }),
    transform: fingerprintSentBody,
    headers: IdempotencyKeyHeader,
    beforeHandle: refuseEntityTags(`A deleted ${resource} has no version to match`),
    response: { 200: ErasureEnvelope, ...problemResponses(400, 401, 403, 404, 409, 412, 422) },
    detail: {
      operationId: doc.operationId,
      summary: `Erase a deleted ${resource}'s earlier events`,
      description:
        `For an erasure request: replaces the payload of every ${resource}.created and ${resource}.updated event of a deleted ${resource} with a marker holding only its type and ids (the delivery detail then shows payload null and payload_erased_at), ends their pending deliveries as failed (a paused subscription's included: none is ever sent), and drops from their attempts what receivers answered (bodies and headers), the request headers sent (the signature, an HMAC of the payload, would confirm a guessed one: request_headers is then null) and the Location an error written before 2026-11-29 quoted. A retry of such a delivery is then 409 event-erased, and a recovery skips it. ${resource}.deleted, holding only id, version and deleted_at, stays${resource === "contact" ? "; the tombstone forgets the contact's email, by which the console found it" : ""}. ` +
        `404 for an id the service knows nothing of, 409 record-not-deleted for a ${resource} that exists. Sent again it erases nothing more and answers zeros. It erases 1,000 events a write: refused between writes (503), what was erased stays erased, and sent again it finishes.`,
      tags: doc.tags,
      ...secured,
    },
  };
  return [handler, options] as const;
}
