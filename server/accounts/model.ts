import { t } from "elysia";
import { ListMetaSchema, paginationQuerySchema } from "../http/list-query.ts";
import { MAX_DOMAIN_LENGTH, MAX_EXTRA_PROPERTIES_BYTES, MAX_NAME_LENGTH } from "../limits/limits.ts";

/** AccountInput is the body of POST /accounts. */
export const AccountInput = t.Object(
  {
    name: t.String({ minLength: 1, maxLength: MAX_NAME_LENGTH, error: `is required: a string of 1 to ${MAX_NAME_LENGTH} characters` }),
    domain: t.Optional(t.Union([t.String({ minLength: 1, maxLength: MAX_DOMAIN_LENGTH, pattern: "^[A-Za-z0-9.-]+$" }), t.Null()], { error: "must be a domain name like example.com, or null" })),
  },
  {
    additionalProperties: true,
    description: `Account fields; further properties are stored and returned as given (together at most ${MAX_EXTRA_PROPERTIES_BYTES} bytes as JSON).`,
    examples: [{ name: "Acme Ltd", domain: "acme.example" }],
  },
);
export type AccountInput = typeof AccountInput.static;

/** AccountSchema is an account as the API returns it. */
export const AccountSchema = t.Object(
  {
    id: t.String({ examples: ["acc_01JDB7Y1Q7A6T5ZV3C8W9X0K2M"] }),
    name: t.String(),
    domain: t.Union([t.String(), t.Null()], { description: "lowercased" }),
    created_at: t.String({ format: "date-time" }),
    updated_at: t.String({ format: "date-time" }),
  },
  { additionalProperties: true },
);
export type Account = typeof AccountSchema.static;

export const ACCOUNT_FILTERS = ["name", "domain"] as const;

export const AccountListQuery = paginationQuerySchema(null, {
  name: t.Optional(t.String({ minLength: 1, maxLength: MAX_NAME_LENGTH, description: "Exact name, case-insensitive in every script (MÜLLER GMBH finds Müller GmbH)." })),
  domain: t.Optional(t.String({ minLength: 1, maxLength: MAX_DOMAIN_LENGTH, description: "Exact domain, case-insensitive." })),
});
export type AccountListQuery = typeof AccountListQuery.static;

export const AccountEnvelope = t.Object({ data: AccountSchema });
export const AccountListEnvelope = t.Object({ data: t.Array(AccountSchema), meta: ListMetaSchema });
