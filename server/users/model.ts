import { t } from "elysia";
import { ListMetaSchema, paginationQuerySchema } from "../http/list-query.ts";

/** UserSchema is a user (someone contacts are assigned to) as the API returns it. */
export const UserSchema = t.Object({
  id: t.String({ examples: ["usr_01JDB7Y1Q7A6T5ZV3C8W9X0K2M"] }),
  name: t.String(),
  email: t.String(),
  created_at: t.String({ format: "date-time" }),
  updated_at: t.String({ format: "date-time" }),
});
export type User = typeof UserSchema.static;

export const UserListQuery = paginationQuerySchema(null);
export const UserListEnvelope = t.Object({ data: t.Array(UserSchema), meta: ListMetaSchema });
