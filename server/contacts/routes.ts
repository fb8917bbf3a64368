import { Elysia, t } from "elysia";
import { refuseListWhileAnswersUnread } from "../limits/routes.ts";
import { bearerAuth } from "../auth/routes.ts";
import { fingerprintSentBody, idempotentPost } from "../http/idempotent.ts";
import { IdempotencyKeyHeader, secured } from "../http/openapi-docs.ts";
import { originOf } from "../http/request-log.ts";
import { ConditionHeaders, IdempotentConditionHeaders, ReadConditionHeaders, refuseEntityTags, tagged, taggedRead, versionCondition } from "../http/preconditions.ts";
import { problemResponses } from "../shared/problem.ts";
import type { Runtime } from "../runtime.ts";
import { sendJson, serialisedResponse, toJsonText } from "../http/json-text.ts";
import { withRepeatedValues } from "../http/list-query.ts";
import { deletedList, erasePost } from "../tombstones/routes.ts";
import { CONTACT_BATCH_OPTIONS, ContactAccountInput, ContactEnvelope, ContactInput, ContactListEnvelope, ContactListQuery, ContactTagInput, IncludeParam, storedText } from "./model.ts";
import { addContactAccount, addContactTag, CONTACT_BATCH, createContact, deleteContact, getContact, listContactsPage, removeContactAccount, removeContactTag, updateContact } from "./service.ts";
import { batchPost } from "../batch/routes.ts";

const contactId = t.String({ maxLength: 64, description: "Contact id (con_...)" });
const ContactId = t.Object({ id: contactId });
const ContactAccountId = t.Object({ id: contactId, accountId: t.String({ maxLength: 64, description: "Account id (acc_...)" }) });
const ContactTag = t.Object({ id: contactId, tag: t.String({ minLength: 1, maxLength: 300, description: "The tag, percent-encoded" }) });
// Further parameters reach the service, which refuses them (a mistyped include is not ignored).
const IncludeQuery = t.Object({ include: IncludeParam }, { additionalProperties: true });
const tags = ["Contacts"];
const BATCH_DOC = {
  operationId: "upsertContactsBatch",
  summary: "Create or update contacts in a batch",
  description:
    "Each item is a contact (the body of POST /contacts) matched by external_id when it has one; else by email. When no contact has the item's external_id, the one contact of its email without an external_id is updated and given it; contacts of that email with other external ids are other people, so without such a contact one is created. A match is updated as a PATCH would update it, fields present replacing the stored ones (tags, and custom_fields and account_ids whole unless merge_custom_fields or add_account_ids is true), with contact.updated only if something changed; otherwise a contact is created (contact.created). With merge_custom_fields: true, an update keeps the contact's custom fields its item does not name; with add_account_ids: true, it adds the item's account_ids to the contact's instead of replacing them. An email shared by several contacts (for an item without external_id), or an external_id no contact has beside several contacts of its email without one, is refused naming them.",
  item: ContactInput,
  itemDescription: "A contact, as the body of POST /public/v1/contacts; external_id or email selects the contact to update.",
  options: CONTACT_BATCH_OPTIONS,
  storedText,
  unversioned: "A batch has no version (one If-Match cannot name each item's)",
  tags,
};

/** contactRoutes serves /public/v1/contacts. */
export function contactRoutes(rt: Runtime) {
  return new Elysia({ name: "contacts", prefix: "/public/v1/contacts" })
    .use(bearerAuth())
    .post("", async ({ request, headers, token, body, set }) => {
      const answer = await idempotentPost(rt.idempotency, { request, headers, token, body, set }, (scope) => createContact(rt, body, scope, originOf(request)));
      return (answer as unknown) instanceof Response ? answer : sendJson(set, toJsonText(answer));
    }, {
      body: ContactInput,
      // Names and tags in the form stored (NFC), for the schema's limits to count it: after the fingerprint of the body as sent.
      transform: [fingerprintSentBody, ({ body }) => storedText(body)],
      headers: IdempotencyKeyHeader,
      beforeHandle: refuseEntityTags("A new contact has no version yet"),
      // Documented, not re-checked (as the list): the body is toContact's, whose shape the tests pin.
      response: { 201: serialisedResponse(ContactEnvelope), ...problemResponses(400, 401, 403, 409, 410, 413, 415, 422) },
      detail: { operationId: "createContact", summary: "Create a contact", description: "Creates a contact and sends contact.created to subscribed webhooks. Search by email first when the same person may arrive from several sources; send an Idempotency-Key built from a stable source id.", tags, ...secured },
    })
    .post("/batch", ...batchPost(rt, CONTACT_BATCH, BATCH_DOC))
    .get("", async ({ query, request, set, token }) => sendJson(set, await listContactsPage(rt.db, rt.secrets, withRepeatedValues(query, request.url), token.id)), {
      query: ContactListQuery,
      beforeHandle: refuseListWhileAnswersUnread(rt),
      // Documented, not re-checked: checking a page (50 date-time parses) cost about 15% of this, the
      // busiest route; the rows are rendered by toContact, whose shape the tests pin.
      response: { 200: serialisedResponse(ContactListEnvelope), ...problemResponses(401, 403, 422) },
      detail: { operationId: "listContacts", summary: "List contacts", description: "Paginated by page/per_page, or by cursor for full scans and incremental syncs (meta.next_cursor). Every filter and sort is served by an index. With include, a page by cursor may hold fewer than per_page contacts, and a page by number may be refused naming per_page: see include. A page of 64 Ki characters or more (as any such answer) is sent in chunks as the client reads it; one that would take the answers the server holds unread past --answer-buffer-max-mb is refused 503 answer-buffer-full, or 429 answers-unread past its client's share, before the page is read when 64 KiB more would pass it (README: Connections).", tags, ...secured },
    })
    .get("/deleted", ...deletedList(rt, "contact", { operationId: "listDeletedContacts", plural: "contacts", tags }))
    .post("/deleted/:id/erase", ...erasePost(rt, "contact", { operationId: "eraseDeletedContact", tags }))
    .get("/:id", async ({ params, query, headers, set }) => {
      const body = { data: await getContact(rt.db, params.id, query) };
      // Embedded accounts and users change without the contact's version: only the contact alone
      // is tagged with it, so only its read can tell that a client's copy is current.
      return query.include ? body : taggedRead(set, headers["if-none-match"], body);
    }, {
      params: ContactId,
      query: IncludeQuery,
      headers: ReadConditionHeaders,
      response: { 200: ContactEnvelope, 304: t.Void(), ...problemResponses(401, 403, 404, 422) },
      detail: {
        operationId: "getContact",
        summary: "Get a contact",
        description:
          'The ETag header is the contact\'s version, quoted ("3"), when nothing is embedded with `include`: send it back as If-Match to change the contact only if nobody has since, or as If-None-Match to be answered 304 without the body while it is current.',
        tags,
        ...secured,
      },
    })
    .patch("/:id", async ({ request, params, body, headers, set }) => tagged(set, { data: await updateContact(rt, params.id, body, versionCondition(headers), originOf(request)) }), {
      params: ContactId,
      body: ContactInput,
      transform: ({ body }) => storedText(body),
      headers: ConditionHeaders,
      response: { 200: ContactEnvelope, ...problemResponses(400, 401, 403, 404, 409, 412, 413, 415, 422) },
      detail: { operationId: "updateContact", summary: "Update a contact", description: "Fields present replace the stored ones; null clears a field. A change sends contact.updated; a request that changes nothing sends no event. With If-Match, only a contact still at that version changes (else 412 with the current ETag).", tags, ...secured },
    })
    .delete("/:id", async ({ request, params, headers, set }) => {
      await deleteContact(rt, params.id, versionCondition(headers), originOf(request));
      set.status = 204;
    }, {
      params: ContactId,
      headers: ConditionHeaders,
      response: { 204: t.Void(), ...problemResponses(401, 403, 404, 412, 422) },
      detail: { operationId: "deleteContact", summary: "Delete a contact", description: "Sends contact.deleted with the contact's id and deletion time; GET /contacts/deleted lists it. With If-Match, only a contact still at that version is deleted (else 412).", tags, ...secured },
    })
    .post("/:id/accounts", ({ request, headers, token, body, set, params }) => idempotentPost(rt.idempotency, { request, headers, token, body, set }, async (scope) => ({ status: 200, body: { data: await addContactAccount(rt, params.id, body.account_id, versionCondition(headers), scope, originOf(request)) } })), {
      params: ContactId,
      body: ContactAccountInput,
      transform: fingerprintSentBody,
      headers: IdempotentConditionHeaders,
      response: { 200: ContactEnvelope, ...problemResponses(400, 401, 403, 404, 409, 410, 412, 413, 415, 422) },
      detail: {
        operationId: "addContactAccount",
        summary: "Link a contact to an account",
        description: "Adds the account at the end of account_ids without reading and writing back the list, so concurrent additions all stay. Linking it again changes nothing. A change sends one contact.updated. With If-Match, only a contact still at that version changes (else 412).",
        tags,
        ...secured,
      },
    })
    .delete("/:id/accounts/:accountId", async ({ request, params, headers, set }) => tagged(set, { data: await removeContactAccount(rt, params.id, params.accountId, versionCondition(headers), originOf(request)) }), {
      params: ContactAccountId,
      headers: ConditionHeaders,
      response: { 200: ContactEnvelope, ...problemResponses(401, 403, 404, 412, 422) },
      detail: {
        operationId: "removeContactAccount",
        summary: "Unlink a contact from an account",
        description: "Answers the contact; an account it is not linked to changes nothing. A change sends one contact.updated. With If-Match, only a contact still at that version changes (else 412).",
        tags,
        ...secured,
      },
    })
    .post("/:id/tags", ({ request, headers, token, body, set, params }) => idempotentPost(rt.idempotency, { request, headers, token, body, set }, async (scope) => ({ status: 200, body: { data: await addContactTag(rt, params.id, body.tag, versionCondition(headers), scope, originOf(request)) } })), {
      params: ContactId,
      body: ContactTagInput,
      // The tag in the form stored (NFC), for the schema's limit to count it (as storedText): after the fingerprint of the body as sent.
      transform: [
        fingerprintSentBody,
        ({ body }) => {
          if (typeof body?.tag === "string") body.tag = body.tag.normalize("NFC");
        },
      ],
      headers: IdempotentConditionHeaders,
      response: { 200: ContactEnvelope, ...problemResponses(400, 401, 403, 404, 409, 410, 412, 413, 415, 422) },
      detail: {
        operationId: "addContactTag",
        summary: "Tag a contact",
        description: "Adds the tag at the end of tags; a tag it carries changes nothing. A change sends one contact.updated. With If-Match, only a contact still at that version changes (else 412).",
        tags,
        ...secured,
      },
    })
    .delete("/:id/tags/:tag", async ({ request, params, headers, set }) => tagged(set, { data: await removeContactTag(rt, params.id, params.tag, versionCondition(headers), originOf(request)) }), {
      params: ContactTag,
      headers: ConditionHeaders,
      response: { 200: ContactEnvelope, ...problemResponses(401, 403, 404, 412, 422) },
      detail: {
        operationId: "removeContactTag",
        summary: "Untag a contact",
        description: "The tag in the path is percent-encoded (a/b is a%2Fb). Answers the contact; a tag it does not carry changes nothing. A change sends one contact.updated. With If-Match, only a contact still at that version changes (else 412).",
        tags,
        ...secured,
      },
    });
}
