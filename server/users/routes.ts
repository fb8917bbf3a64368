import { Elysia, t } from "elysia";
import { refuseListWhileAnswersUnread } from "../limits/routes.ts";
import { bearerAuth } from "../auth/routes.ts";
import { fingerprintSentBody, idempotentPost } from "../http/idempotent.ts";
import { IdempotencyKeyHeader, secured } from "../http/openapi-docs.ts";
import { originOf } from "../http/request-log.ts";
import { unversionedWrites } from "../http/preconditions.ts";
import { problemResponses } from "../shared/problem.ts";
import type { Runtime } from "../runtime.ts";
import { deletedList } from "../tombstones/routes.ts";
import { UserEnvelope, UserInput, UserListEnvelope, UserListQuery, UserPatch } from "./model.ts";
import { createUserOnce, deleteUser, getUser, listUsersPage, updateUser } from "./service.ts";

const tags = ["Users"];
const UserId = t.Object({ id: t.String({ maxLength: 64, description: "User id (usr_...)" }) });

/** userRoutes serves /public/v1/users: the people contacts are assigned to. */
export function userRoutes(rt: Runtime) {
  return new Elysia({ name: "users", prefix: "/public/v1/users" })
    .use(bearerAuth())
    .use(unversionedWrites("Users", { id: { kind: "user", lookup: (id) => getUser(rt.db, id) } }))
    .get("", ({ query }) => listUsersPage(rt.db, rt.secrets, query), {
      query: UserListQuery,
      beforeHandle: refuseListWhileAnswersUnread(rt),
      response: { 200: UserListEnvelope, ...problemResponses(401, 403, 422) },
      detail: {
        operationId: "listUsers",
        summary: "List users",
        description: "The people contacts can be assigned to (assigned_user_id, assigned_user_ids). Paginated by page/per_page, or by cursor for full scans and incremental syncs (updated_after, sort_by=updated_at).",
        tags,
        ...secured,
      },
    })
    .post("", ({ request, headers, token, body, set }) => idempotentPost(rt.idempotency, { request, headers, token, body, set }, (scope) => createUserOnce(rt, body, scope)), {
      body: UserInput,
      transform: fingerprintSentBody,
      headers: IdempotencyKeyHeader,
      response: { 201: UserEnvelope, ...problemResponses(400, 401, 403, 409, 410, 413, 415, 422) },
      detail: { operationId: "createUser", summary: "Create a user", description: "Emails are unique (409 when taken) and stored lowercased.", tags, ...secured },
    })
    .get("/deleted", ...deletedList(rt, "user", { operationId: "listDeletedUsers", plural: "users", tags }))
    .get("/:id", async ({ params }) => ({ data: await getUser(rt.db, params.id) }), {
      params: UserId,
      response: { 200: UserEnvelope, ...problemResponses(401, 403, 404, 422) },
      detail: { operationId: "getUser", summary: "Get a user", tags, ...secured },
    })
    .patch("/:id", async ({ params, body }) => ({ data: await updateUser(rt, params.id, body) }), {
      params: UserId,
      body: UserPatch,
      response: { 200: UserEnvelope, ...problemResponses(400, 401, 403, 404, 409, 413, 415, 422) },
      detail: { operationId: "updateUser", summary: "Update a user", description: "Fields present replace the stored ones; the email stays unique (409 when taken).", tags, ...secured },
    })
    .delete("/:id", async ({ request, params, set }) => {
      await deleteUser(rt.db, params.id, rt.unlinkChunk, originOf(request));
      set.status = 204;
    }, {
      params: UserId,
      response: { 204: t.Void(), ...problemResponses(401, 403, 404, 422) },
      detail: {
        operationId: "deleteUser",
        summary: "Delete a user",
        description: "Its contacts stay and lose the assignment, as assigned_user_id and in assigned_user_ids (each gets a new version and sends contact.updated), 100 a commit, so some may read changed before the answer; a refusal after the first commit (a 404: deleted meanwhile; a 503) leaves the contacts changed so far changed and says how many in its detail, and the DELETE sent again finishes the job. The last commit deletes the user and withdraws the answers kept for replaying its create (a replay is 410). Users send no events of their own: there is no user.deleted; GET /users/deleted lists the deletion.",
        tags,
        ...secured,
      },
    });
}
