import { Elysia } from "elysia";
import { bearerAuth } from "../auth/routes.ts";
import { secured } from "../http/openapi-docs.ts";
import { problemResponses } from "../shared/problem.ts";
import type { Runtime } from "../runtime.ts";
import { UserListEnvelope, UserListQuery } from "./model.ts";
import { listUsersPage } from "./service.ts";

/** userRoutes serves /public/v1/users (read-only: users are managed by operators). */
export function userRoutes(rt: Runtime) {
  return new Elysia({ name: "users", prefix: "/public/v1/users" })
    .use(bearerAuth())
    .get("", ({ query }) => listUsersPage(rt.db, query), {
      query: UserListQuery,
      response: { 200: UserListEnvelope, ...problemResponses(401, 403, 422) },
      detail: { operationId: "listUsers", summary: "List users", description: "The people contacts can be assigned to (assigned_user_id, assigned_user_ids).", tags: ["Users"], ...secured },
    });
}
