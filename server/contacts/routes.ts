import { Elysia, t } from "elysia";
import { bearerAuth } from "../auth/routes.ts";
import { idempotentPost } from "../http/idempotent.ts";
import { IdempotencyKeyHeader, secured } from "../http/openapi-docs.ts";
import { problemResponses } from "../shared/problem.ts";
import type { Runtime } from "../runtime.ts";
import { ContactEnvelope, ContactInput, ContactListEnvelope, ContactListQuery, IncludeParam } from "./model.ts";
import { createContact, deleteContact, getContact, listContactsPage, updateContact, CONTACT_BATCH } from "./service.ts";
import { batchPost } from "../batch/routes.ts";

const ContactId = t.Object({ id: t.String({ maxLength: 64, description: "Contact id (con_...)" }) });
// Further parameters reach the service, which refuses them (a mistyped include is not ignored).
const IncludeQuery = t.Object({ include: IncludeParam }, { additionalProperties: true });
const tags = ["Contacts"];
const BATCH_DOC = {
  operationId: "upsertContactsBatch",
  summary: "Create or update contacts in a batch",
  description: "Each item is a contact (the body of POST /contacts) matched by external_id when it has one, else by email: a match is updated (contact.updated only if something changed), otherwise a contact is created (contact.created). An email shared by several contacts is refused, naming them.",
  item: ContactInput,
  itemDescription: "A contact, as the body of POST /public/v1/contacts; external_id or email selects the contact to update.",
  tags,
};

// A Response skips Elysia's handling of a returned object (about 5% of the first page's throughput,
// bench/); the bytes and content-type are what Elysia sends for the object, as a test pins.
const jsonResponse = (body: unknown) => new Response(JSON.stringify(body), { headers: { "content-type": "application/json;charset=utf-8" } });

/** contactRoutes serves /public/v1/contacts. */
export function contactRoutes(rt: Runtime) {
  return new Elysia({ name: "contacts", prefix: "/public/v1/contacts" })
    .use(bearerAuth())
    .post("", (ctx) => idempotentPost(rt.idempotency, ctx, (scope) => createContact(rt, ctx.body, scope)), {
      body: ContactInput,
      headers: IdempotencyKeyHeader,
      response: { 201: ContactEnvelope, ...problemResponses(400, 401, 403, 409, 413, 415, 422) },
      detail: { operationId: "createContact", summary: "Create a contact", description: "Creates a contact and sends contact.created to subscribed webhooks. Search by email first when the same person may arrive from several sources; send an Idempotency-Key built from a stable source id.", tags, ...secured },
    })
    .post("/batch", ...batchPost(rt, CONTACT_BATCH, BATCH_DOC))
    .get("", ({ query }) => jsonResponse(listContactsPage(rt.db, query)), {
      query: ContactListQuery,
      // Documented, not re-checked: checking a page (50 date-time parses) cost about 15% of this, the
      // busiest route; the rows are rendered by toContact, whose shape the tests pin.
      response: { 200: t.NoValidate(ContactListEnvelope), ...problemResponses(401, 403, 422) },
      detail: { operationId: "listContacts", summary: "List contacts", description: "Paginated by page/per_page, or by cursor for full scans and incremental syncs (meta.next_cursor).", tags, ...secured },
    })
    .get("/:id", ({ params, query }) => ({ data: getContact(rt.db, params.id, query) }), {
      params: ContactId,
      query: IncludeQuery,
      response: { 200: ContactEnvelope, ...problemResponses(401, 403, 404, 422) },
      detail: { operationId: "getContact", summary: "Get a contact", tags, ...secured },
    })
    .patch("/:id", async ({ params, body }) => ({ data: await updateContact(rt, params.id, body) }), {
      params: ContactId,
      body: ContactInput,
      response: { 200: ContactEnvelope, ...problemResponses(400, 401, 403, 404, 409, 413, 415, 422) },
      detail: { operationId: "updateContact", summary: "Update a contact", description: "Fields present replace the stored ones; null clears a field. A change sends contact.updated; a request that changes nothing sends no event.", tags, ...secured },
    })
    .delete("/:id", async ({ params, set }) => {
      await deleteContact(rt, params.id);
      set.status = 204;
    }, {
      params: ContactId,
      response: { 204: t.Void(), ...problemResponses(401, 403, 404, 422) },
      detail: { operationId: "deleteContact", summary: "Delete a contact", description: "Sends contact.deleted with the contact's id and deletion time.", tags, ...secured },
    });
}
