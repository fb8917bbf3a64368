import { Elysia, t } from "elysia";
import { bearerAuth } from "../auth/routes.ts";
import { idempotentPost } from "../http/idempotent.ts";
import { IdempotencyKeyHeader, secured } from "../http/openapi-docs.ts";
import { problemResponses } from "../shared/problem.ts";
import type { Runtime } from "../runtime.ts";
import { AccountEnvelope, AccountInput, AccountListEnvelope, AccountListQuery } from "./model.ts";
import { createAccount, getAccount, listAccountsPage, ACCOUNT_BATCH } from "./service.ts";
import { batchPost } from "../batch/routes.ts";

const tags = ["Accounts"];
const BATCH_DOC = {
  operationId: "upsertAccountsBatch",
  summary: "Create or update accounts in a batch",
  description: "Each item is an account (the body of POST /accounts) matched by domain when it has one, else by name (case-insensitive in every script): a match is updated, otherwise an account is created. A key shared by several accounts is refused, naming them.",
  item: AccountInput,
  itemDescription: "An account, as the body of POST /public/v1/accounts; domain (or, without one, name) selects the account to update.",
  tags,
};

/** accountRoutes serves /public/v1/accounts. */
export function accountRoutes(rt: Runtime) {
  return new Elysia({ name: "accounts", prefix: "/public/v1/accounts" })
    .use(bearerAuth())
    .post("", (ctx) => idempotentPost(rt.idempotency, ctx, (scope) => createAccount(rt, ctx.body, scope)), {
      body: AccountInput,
      headers: IdempotencyKeyHeader,
      response: { 201: AccountEnvelope, ...problemResponses(400, 401, 403, 409, 413, 415, 422) },
      detail: { operationId: "createAccount", summary: "Create an account", description: "Create or resolve (list by name or domain) the account first, then attach contacts to it with account_ids.", tags, ...secured },
    })
    .post("/batch", ...batchPost(rt, ACCOUNT_BATCH, BATCH_DOC))
    .get("", ({ query }) => listAccountsPage(rt.db, query), {
      query: AccountListQuery,
      response: { 200: AccountListEnvelope, ...problemResponses(401, 403, 422) },
      detail: { operationId: "listAccounts", summary: "List accounts", tags, ...secured },
    })
    .get("/:id", ({ params }) => ({ data: getAccount(rt.db, params.id) }), {
      params: t.Object({ id: t.String({ maxLength: 64 }) }),
      response: { 200: AccountEnvelope, ...problemResponses(401, 403, 404, 422) },
      detail: { operationId: "getAccount", summary: "Get an account", tags, ...secured },
    });
}
