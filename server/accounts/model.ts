import { Type } from "@sinclair/typebox";
import { t } from "elysia";
import { ListMetaSchema, paginationQuerySchema, timestampFilterSchema } from "../http/list-query.ts";
import { documentRefused } from "../http/openapi-docs.ts";
import { IN_ASCII_FORM, MAX_DOMAIN_LENGTH, MAX_EXTRA_PROPERTIES_BYTES, MAX_NAME_LENGTH } from "../limits/limits.ts";
import { DOMAIN_FORMAT } from "../shared/domains.ts";

/** READ_ONLY_ACCOUNT_FIELDS are set by the service; no create, batch item or PATCH may carry them. */
export const READ_ONLY_ACCOUNT_FIELDS = ["id", "version", "created_at", "updated_at"] as const;

/** AccountInput is the body of POST /accounts. */
export const AccountInput = t.Object(
  {
    // A name of spaces alone names nothing, as an empty one does (and as a contact's counts as absent); one with a letter is stored as given.
    // U+0085 too: not \s to a regular expression, it is white space to nameKey, which keys such a name as "": every such name was one name.
    name: t.String({ minLength: 1, maxLength: MAX_NAME_LENGTH, pattern: "[^\\s\\u0085]", error: `must be a string of 1 to ${MAX_NAME_LENGTH} characters, not spaces alone (an account needs a name)` }),
    domain: t.Optional(
      t.Union(
        [t.String({ minLength: 1, maxLength: MAX_DOMAIN_LENGTH, format: DOMAIN_FORMAT, description: "A host name of two labels or more (acme.example, www.müller.de): in its ASCII form, labels of 1 to 63 letters, digits and hyphens, none beginning or ending with a hyphen, the last not all digits, and at most 253 characters in all. A name in Unicode (müller.de) is stored in its ASCII form (xn--mller-kva.de), and one trailing dot is dropped (acme.example. is acme.example)." }), t.Null()],
        { error: `must be a domain name like example.com of at most ${MAX_DOMAIN_LENGTH} characters, ${IN_ASCII_FORM}, or null` },
      ),
    ),
  },
  {
    additionalProperties: true,
    ...documentRefused(READ_ONLY_ACCOUNT_FIELDS),
    description: `Account fields; further properties are stored and returned as given (together at most ${MAX_EXTRA_PROPERTIES_BYTES} bytes as JSON).`,
    examples: [{ name: "Acme Ltd", domain: "acme.example" }],
  },
);
export type AccountInput = typeof AccountInput.static;

/** AccountPatch is the body of PATCH /accounts/:id: fields present replace, null clears a further property. */
export const AccountPatch = t.Object(
  {
    name: t.Optional(AccountInput.properties.name),
    domain: AccountInput.properties.domain,
  },
  {
    additionalProperties: true,
    ...documentRefused(READ_ONLY_ACCOUNT_FIELDS),
    description: `Fields present replace the stored ones; domain or a further property set to null is cleared (further properties together at most ${MAX_EXTRA_PROPERTIES_BYTES} bytes as JSON).`,
    examples: [{ domain: "acme.example", industry: "anvils" }],
  },
);
export type AccountPatch = typeof AccountPatch.static;

/** AccountSchema is an account as the API returns it. */
export const AccountSchema = t.Object(
  {
    id: t.String({ examples: ["acc_01JDB7Y1Q7A6T5ZV3C8W9X0K2M"] }),
    name: t.String(),
    domain: t.Union([t.String(), t.Null()], { description: "lowercased, in ASCII form (IDNA A-labels: müller.de is xn--mller-kva.de), without a trailing dot. An account given its domain before host names were enforced (2026-11-29) keeps it as stored, even one that is no host name." }),
    version: Type.Integer({ minimum: 1, description: "1 when created, one more with every change: of two representations of an account, the higher version is the newer." }),
    created_at: t.String({ format: "date-time" }),
    updated_at: t.String({ format: "date-time" }),
  },
  { additionalProperties: true },
);
export type Account = typeof AccountSchema.static;

/** ACCOUNT_SORTS are the fields an account list can be sorted by (name folds case in every script). */
export const ACCOUNT_SORTS = ["created_at", "updated_at", "name", "domain"] as const;
export type AccountSort = (typeof ACCOUNT_SORTS)[number];

export const ACCOUNT_FILTERS = ["name", "domain", "created_after", "updated_after"] as const;

export const AccountListQuery = paginationQuerySchema(ACCOUNT_SORTS, {
  name: t.Optional(t.String({ minLength: 1, maxLength: MAX_NAME_LENGTH, error: `must be 1 to ${MAX_NAME_LENGTH} characters`, description: "Exact name, case-insensitive in every script, case folded in full (MÜLLER GMBH finds Müller GmbH, GROSSHANDEL and GROẞHANDEL find Großhandel; Turkish İ, I, ı and i are one letter); white space folded (a no-break or doubled space is one space, none at the ends)." })),
  domain: t.Optional(t.String({ minLength: 1, maxLength: MAX_DOMAIN_LENGTH, error: `must be 1 to ${MAX_DOMAIN_LENGTH} characters`, description: "Exact domain, case-insensitive, a trailing dot ignored (acme.example. finds acme.example); a name in Unicode finds its ASCII form (müller.de finds xn--mller-kva.de)." })),
  created_after: timestampFilterSchema("Only accounts created after this time."),
  updated_after: timestampFilterSchema("Only accounts updated after this time."),
});
export type AccountListQuery = typeof AccountListQuery.static;

export const AccountEnvelope = t.Object({ data: AccountSchema });
export const AccountListEnvelope = t.Object({ data: t.Array(AccountSchema), meta: ListMetaSchema });
