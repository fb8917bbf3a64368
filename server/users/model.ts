import { t } from "elysia";
import { ListMetaSchema, paginationQuerySchema, timestampFilterSchema } from "../http/list-query.ts";
import { IN_ASCII_FORM, MAX_EMAIL_LENGTH, MAX_NAME_LENGTH } from "../limits/limits.ts";
import { EMAIL_DESCRIPTION, EMAIL_FORMAT, emailError } from "../shared/domains.ts";

/** UserSchema is a user (someone contacts are assigned to) as the API returns it. */
export const UserSchema = t.Object({
  id: t.String({ examples: ["usr_01JDB7Y1Q7A6T5ZV3C8W9X0K2M"] }),
  name: t.String(),
  email: t.String(),
  created_at: t.String({ format: "date-time" }),
  updated_at: t.String({ format: "date-time" }),
});
export type User = typeof UserSchema.static;

/** USER_SORTS are the fields a users list can be sorted by: the times a copy kept in step reads by. */
export const USER_SORTS = ["created_at", "updated_at"] as const;
export type UserSort = (typeof USER_SORTS)[number];

export const USER_FILTERS = ["updated_after"] as const;

export const UserListQuery = paginationQuerySchema(USER_SORTS, {
  updated_after: timestampFilterSchema("Only users updated after this time."),
});
export const UserListEnvelope = t.Object({ data: t.Array(UserSchema), meta: ListMetaSchema });
export const UserEnvelope = t.Object({ data: UserSchema });

const userFields = {
  name: t.String({ minLength: 1, maxLength: MAX_NAME_LENGTH, pattern: "\\S", error: `must be a string of 1 to ${MAX_NAME_LENGTH} characters, not spaces alone (a user needs a name)` }),
  email: t.String({ format: EMAIL_FORMAT, maxLength: MAX_EMAIL_LENGTH, description: `${EMAIL_DESCRIPTION} At most ${MAX_EMAIL_LENGTH} characters in that form.`, error: emailError(`must be an email address of at most ${MAX_EMAIL_LENGTH} characters, its domain ${IN_ASCII_FORM}`) }),
};

/** UserInput is the body of POST /users. */
export const UserInput = t.Object(userFields, { additionalProperties: false, examples: [{ name: "Grace Hopper", email: "grace@example.com" }] });
export type UserInput = typeof UserInput.static;

/** UserPatch is the body of PATCH /users/:id: the fields present replace the stored ones. */
export const UserPatch = t.Object({ name: t.Optional(userFields.name), email: t.Optional(userFields.email) }, { additionalProperties: false, examples: [{ name: "Grace B. Hopper" }] });
export type UserPatch = typeof UserPatch.static;
