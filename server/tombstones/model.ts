import { Type } from "@sinclair/typebox";
import { t } from "elysia";
import { ListMetaSchema, paginationQuerySchema, timestampFilterSchema } from "../http/list-query.ts";

/** TOMBSTONE_FILTERS are the parameters of a deleted list that choose its rows. */
export const TOMBSTONE_FILTERS = ["since"] as const;

/** Tombstone is a deleted contact, account or user as the deleted lists return it. */
export const Tombstone = t.Object({
  id: t.String({ examples: ["con_01JDB7Y1Q7A6T5ZV3C8W9X0K2M"] }),
  deleted_at: t.String({ format: "date-time" }),
  version: t.Union([Type.Integer({ minimum: 1 }), t.Null()], {
    description:
      "The version the deletion's contact.deleted or account.deleted carries, above every other of the record: keep the id marked deleted with it, and drop webhook data of a lower version (ids are never reused; a deletion is final). null for users, which carry no version, and for deletions made before tombstones kept it: the deletion is final all the same.",
  }),
});
export type Tombstone = typeof Tombstone.static;

export const TombstoneListQuery = paginationQuerySchema(null, {
  since: timestampFilterSchema("Only deletions after this time; older than the tombstone retention is 410 (resync in full)."),
});
export const TombstoneListEnvelope = t.Object({ data: t.Array(Tombstone), meta: ListMetaSchema });

/** Erasure is the answer to an erasure of a deleted record's earlier events. */
export const Erasure = t.Object({
  id: t.String({ examples: ["con_01JDB7Y1Q7A6T5ZV3C8W9X0K2M"] }),
  events_erased: Type.Integer({ minimum: 0, description: "Its created and updated events whose payload this request erased (0 when an earlier erasure did it all)." }),
  deliveries_failed: Type.Integer({ minimum: 0, description: "Pending deliveries of those events this request ended as failed, never to be sent (a paused subscription's, one waiting for a retry)." }),
});
export type Erasure = typeof Erasure.static;
export const ErasureEnvelope = t.Object({ data: Erasure });
