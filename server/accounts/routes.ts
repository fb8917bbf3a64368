import { Elysia, t } from "elysia";
import { refuseListWhileAnswersUnread } from "../limits/routes.ts";
import { bearerAuth } from "../auth/routes.ts";
import { fingerprintSentBody, idempotentPost } from "../http/idempotent.ts";
import { IdempotencyKeyHeader, secured } from "../http/openapi-docs.ts";
import { originOf } from "../http/request-log.ts";
import { ConditionHeaders, ReadConditionHeaders, refuseEntityTags, tagged, taggedRead, versionCondition } from "../http/preconditions.ts";
import { problemResponses } from "../shared/problem.ts";
import type { Runtime } from "../runtime.ts";
import { deletedList, erasePost } from "../tombstones/routes.ts";
import { AccountEnvelope, AccountInput, AccountListEnvelope, AccountListQuery, AccountPatch } from "./model.ts";
import { ACCOUNT_BATCH, createAccount, deleteAccount, getAccount, listAccountsPage, updateAccount } from "./service.ts";
import { batchPost } from "../batch/routes.ts";

const tags = ["Accounts"];
const AccountId = t.Object({ id: t.String({ maxLength: 64, description: "Account id (acc_...)" }) });
const BATCH_DOC = {
  operationId: "upsertAccountsBatch",
  summary: "Create or update accounts in a batch",
  description: "Each item is an account (the body of POST /accounts) matched by domain when it has one (the name choosing among several accounts with that domain); else by name (case-insensitive in every script). When no account has the item's domain, the one account of its name without a domain is updated and given it; accounts of that name with other domains are other companies, so without such an account one is created. A match is updated, otherwise an account is created. A key shared by several accounts that the name does not tell apart, or a domain no account has beside several accounts of its name without one, is refused naming them.",
  item: AccountInput,
  itemDescription: "An account, as the body of POST /public/v1/accounts; domain (or, without one, name) selects the account to update.",
  unversioned: "A batch has no version (one If-Match cannot name each item's)",
  tags,
};

/** accountRoutes serves /public/v1/accounts. */
export function accountRoutes(rt: Runtime) {
  return new Elysia({ name: "accounts", prefix: "/public/v1/accounts" })
    .use(bearerAuth())
    .post("", ({ request, headers, token, body, set }) => idempotentPost(rt.idempotency, { request, headers, token, body, set }, (scope) => createAccount(rt, body, scope, originOf(request))), {
      body: AccountInput,
      transform: fingerprintSentBody,
      headers: IdempotencyKeyHeader,
      beforeHandle: refuseEntityTags("A new account has no version yet"),
      response: { 201: AccountEnvelope, ...problemResponses(400, 401, 403, 409, 410, 413, 415, 422) },
      detail: { operationId: "createAccount", summary: "Create an account", description: "Create or resolve (list by name or domain) the account first, then attach contacts to it with account_ids. Sends account.created.", tags, ...secured },
    })
    .post("/batch", ...batchPost(rt, ACCOUNT_BATCH, BATCH_DOC))
    .get("", ({ query }) => listAccountsPage(rt.db, rt.secrets, query), {
      query: AccountListQuery,
      beforeHandle: refuseListWhileAnswersUnread(rt),
      response: { 200: AccountListEnvelope, ...problemResponses(401, 403, 422) },
      detail: {
        operationId: "listAccounts",
        summary: "List accounts",
        description: "Sorted by created_at (default, oldest first), updated_at, name or domain; paginated by page/per_page or by cursor (meta.next_cursor). Every filter and sort is served by an index.",
        tags,
        ...secured,
      },
    })
    .get("/deleted", ...deletedList(rt, "account", { operationId: "listDeletedAccounts", plural: "accounts", tags }))
    .post("/deleted/:id/erase", ...erasePost(rt, "account", { operationId: "eraseDeletedAccount", tags }))
    .get("/:id", async ({ params, headers, set }) => taggedRead(set, headers["if-none-match"], { data: await getAccount(rt.db, params.id) }), {
      params: AccountId,
      headers: ReadConditionHeaders,
      response: { 200: AccountEnvelope, 304: t.Void(), ...problemResponses(401, 403, 404, 422) },
      detail: {
        operationId: "getAccount",
        summary: "Get an account",
        description: 'The ETag header is the account\'s version, quoted ("3"): send it back as If-Match to change the account only if nobody has since, or as If-None-Match to be answered 304 without the body while it is current.',
        tags,
        ...secured,
      },
    })
    .patch("/:id", async ({ request, params, body, headers, set }) => tagged(set, { data: await updateAccount(rt, params.id, body, versionCondition(headers), originOf(request)) }), {
      params: AccountId,
      body: AccountPatch,
      headers: ConditionHeaders,
      response: { 200: AccountEnvelope, ...problemResponses(400, 401, 403, 404, 412, 413, 415, 422) },
      detail: {
        operationId: "updateAccount",
        summary: "Update an account",
        description: "Fields present replace the stored ones; null clears domain or a further property. A change sends account.updated; a request that changes nothing sends no event and keeps updated_at. With If-Match, only an account still at that version changes (else 412 with the current ETag).",
        tags,
        ...secured,
      },
    })
    .delete("/:id", async ({ request, params, headers, set }) => {
      await deleteAccount(rt, params.id, versionCondition(headers), originOf(request));
      set.status = 204;
    }, {
      params: AccountId,
      headers: ConditionHeaders,
      response: { 204: t.Void(), ...problemResponses(401, 403, 404, 412, 422) },
      detail: {
        operationId: "deleteAccount",
        summary: "Delete an account",
        description: "Its contacts stay and lose the link (each sends contact.updated), 100 a commit, so some may read unlinked before the answer; the last commit removes the account and sends account.deleted with the id and deletion time, after them; GET /accounts/deleted lists it. With If-Match (or If-None-Match), only an account still at that version is deleted (else 412, nothing changed), checked in the first commit only: a change of the account after it does not stop the delete. A refusal after the first commit (a 404: deleted meanwhile; a 503) leaves the contacts unlinked so far unlinked and says how many in its detail, and the DELETE sent again finishes the job.",
        tags,
        ...secured,
      },
    });
}
