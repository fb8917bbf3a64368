import { Type, type Static, type TObject } from "@sinclair/typebox";
import { t } from "elysia";
import { AccountSchema } from "../accounts/model.ts";
import { UserSchema } from "../users/model.ts";
import { ListMetaSchema, paginationQuerySchema, timestampFilterSchema } from "../http/list-query.ts";
import { documentAs, documentRefused } from "../http/openapi-docs.ts";
import { EMAIL_DESCRIPTION, EMAIL_FORMAT, emailError } from "../shared/domains.ts";
import {
  MAX_CONSENT_BYTES,
  MAX_CUSTOM_FIELDS,
  MAX_CUSTOM_FIELDS_BYTES,
  MAX_CUSTOM_FIELDS_DEPTH,
  MAX_CUSTOM_FIELD_KEY_LENGTH,
  MAX_EMAIL_LENGTH,
  MAX_EXTERNAL_ID_LENGTH,
  MAX_EXTRA_PROPERTIES_BYTES,
  MAX_NAME_LENGTH,
  MAX_PHONE_LENGTH,
  MAX_RELATED_IDS,
  MAX_TAGS,
  MAX_TAG_LENGTH,
  MAX_INCLUDE_PAGE_BYTES,
  IN_ASCII_FORM,
  byteSize,
} from "../limits/limits.ts";

/** CONTACT_SORTS are the fields a contact list can be sorted by. */
export const CONTACT_SORTS = ["created_at", "updated_at", "first_name", "last_name", "email"] as const;
export type ContactSort = (typeof CONTACT_SORTS)[number];

/** CONTACT_INCLUDES are the relations a contact list can embed. */
const CONTACT_INCLUDES = ["accounts", "assigned_user", "assigned_users"] as const;
export type ContactInclude = (typeof CONTACT_INCLUDES)[number];

/** CONTACT_FILTERS are the list's filter parameters. */
export const CONTACT_FILTERS = ["email", "full_name", "created_after", "updated_after", "account_id", "tag", "assigned_user_id"] as const;

/** READ_ONLY_CONTACT_FIELDS are set by the service; a request body may not carry them. */
export const READ_ONLY_CONTACT_FIELDS = ["id", "version", "created_at", "updated_at", "full_name", "accounts", "assigned_user", "assigned_users"] as const;

const nullable = <T extends Parameters<typeof t.Union>[0][number]>(schema: T, error: string | ReturnType<typeof emailError>) => t.Optional(t.Union([schema, t.Null()], { error }));

// Elysia's normaliser rebuilds a value that fails an object schema into an object before it
// validates ("abc" would be stored as {"0":"a","1":"b","2":"c"}), so these fields pass through
// untouched and the service refuses anything but an object or null (OBJECT_CONTACT_FIELDS).
// maxProperties is there for the OpenAPI document; the service enforces it with the other limits.
const jsonObject = (description: string, options: { maxProperties?: number } = {}) =>
  t.Optional(t.Unknown({ description, ...documentAs({ type: ["object", "null"], additionalProperties: true, ...options }) }));

/** OBJECT_CONTACT_FIELDS must be JSON objects (or null); the service checks them. */
export const OBJECT_CONTACT_FIELDS = ["custom_fields", "consent"] as const;

// An id a client gives, in a body or a filter: its form, and the refusal of anything else.
const ACCOUNT_ID = { pattern: "^acc_[0-9A-Z]{26}$", error: "must be an account id (acc_...)" };
const USER_ID = { pattern: "^usr_[0-9A-Z]{26}$", error: "must be a user id (usr_...)" };

// The list's own text covers it as a whole (too long, not a list); a bad id is named at its index with the id's.
const idList = (id: { pattern: string; error: string }, ids: string) =>
  nullable(t.Array(t.String(id), { maxItems: MAX_RELATED_IDS, uniqueItems: true }), `must be a list of at most ${MAX_RELATED_IDS} distinct ${ids}`);

/** NAME_ERROR refuses a first_name or last_name too long in NFC, the form it is stored in (storedText gives it that form before the schema counts). */
const NAME_ERROR = `must be a string of at most ${MAX_NAME_LENGTH} characters, or null`;
/** TAG_ERROR refuses a tag too long in NFC (as NAME_ERROR), empty, "." or "..". */
const TAG_ERROR = `must be a tag of 1 to ${MAX_TAG_LENGTH} characters, not "." or ".."`;

// "." and ".." are refused: URL clients read them as path steps (DELETE .../tags/%2E%2E is sent as
// DELETE /contacts/:id/), so such a tag could never be removed through its own URL.
const tagName = () => t.String({ minLength: 1, maxLength: MAX_TAG_LENGTH, pattern: "^(?!\\.\\.?$)", error: TAG_ERROR });

// Text a Mac writes decomposed (NFD) is then the name a user types (NFC), in a search as in a tag.
const NFC_STORED = "Stored in Unicode NFC (composed characters); the length limit holds for that form, which decomposed text (NFD, Korean jamo) shortens and a few characters lengthen.";

/**
 * storedText gives the names and tags of a contact body, in place, the form they are stored in:
 * Unicode NFC. Routes run it before their schema (an Elysia transform), and the importer on each
 * row, so the length limits count what is stored, which NFC shortens (decomposed text, Korean
 * jamo) or lengthens (U+0958), and a tag given composed and decomposed is a repeat (uniqueItems).
 * Anything else (not an object, a name that is not a string) is left as given for the schema to refuse.
 */
export function storedText(body: unknown): void {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return;
  const fields = body as Record<string, unknown>;
  for (const field of ["first_name", "last_name"] as const) {
    const name = fields[field];
    if (typeof name === "string") fields[field] = name.normalize("NFC");
  }
  if (Array.isArray(fields.tags)) fields.tags = fields.tags.map((tag: unknown) => (typeof tag === "string" ? tag.normalize("NFC") : tag));
}

/** ContactFields are the known, validated contact properties; any others are stored as given. */
const contactFields = {
  first_name: nullable(t.String({ maxLength: MAX_NAME_LENGTH, description: NFC_STORED }), NAME_ERROR),
  last_name: nullable(t.String({ maxLength: MAX_NAME_LENGTH, description: NFC_STORED }), NAME_ERROR),
  email: nullable(
    t.String({ format: EMAIL_FORMAT, maxLength: MAX_EMAIL_LENGTH, description: `${EMAIL_DESCRIPTION} At most ${MAX_EMAIL_LENGTH} characters in that form.` }),
    emailError(`must be an email address of at most ${MAX_EMAIL_LENGTH} characters, its domain ${IN_ASCII_FORM}, or null`),
  ),
  phone: nullable(t.String({ maxLength: MAX_PHONE_LENGTH }), `must be a string of at most ${MAX_PHONE_LENGTH} characters, or null`),
  external_id: nullable(
    t.String({ minLength: 1, maxLength: MAX_EXTERNAL_ID_LENGTH, description: "The contact's id in the system it comes from; unique when set." }),
    `must be a string of 1 to ${MAX_EXTERNAL_ID_LENGTH} characters, or null`,
  ),
  tags: nullable(
    t.Array(tagName(), { maxItems: MAX_TAGS, uniqueItems: true, description: `${NFC_STORED} A tag given in two forms (café composed and decomposed) is a repeat.` }),
    `must be a list of at most ${MAX_TAGS} distinct tags of 1 to ${MAX_TAG_LENGTH} characters each, none of them "." or ".."`,
  ),
  custom_fields: jsonObject(
    `Custom fields: a JSON object, or null to clear. At most ${MAX_CUSTOM_FIELDS} keys, keys of at most ${MAX_CUSTOM_FIELD_KEY_LENGTH} characters at any depth, nesting at most ${MAX_CUSTOM_FIELDS_DEPTH} levels, at most ${MAX_CUSTOM_FIELDS_BYTES} bytes as JSON.`,
    { maxProperties: MAX_CUSTOM_FIELDS },
  ),
  consent: jsonObject(`Communication consent: a JSON object, or null to clear. At most ${MAX_CONSENT_BYTES} bytes as JSON.`),
  account_ids: idList(ACCOUNT_ID, "account ids (acc_...)"),
  assigned_user_id: nullable(t.String({ pattern: USER_ID.pattern }), "must be a user id (usr_...) or null"),
  assigned_user_ids: idList(USER_ID, "user ids (usr_...)"),
};

/** ContactInput is the body of POST and PATCH: known fields validated, further properties kept. */
export const ContactInput = t.Object(contactFields, {
  additionalProperties: true,
  ...documentRefused(READ_ONLY_CONTACT_FIELDS),
  description: `Contact fields. Any further properties are stored and returned as given (together at most ${MAX_EXTRA_PROPERTIES_BYTES} bytes as JSON). Fields set to null are cleared.`,
  examples: [{ first_name: "Ada", last_name: "Lovelace", email: "ada@example.com", phone: "+44 20 7946 0000", tags: ["vip"], custom_fields: { plan: "pro" } }],
});
export type ContactInput = typeof ContactInput.static;

/**
 * CONTACT_BATCH_OPTIONS are the fields of POST /contacts/batch beside `items`. No `default`: Elysia
 * would write it into the body, whose Idempotency-Key fingerprint would then differ from the one
 * the same request had before.
 */
export const CONTACT_BATCH_OPTIONS = {
  merge_custom_fields: t.Optional(
    t.Boolean({
      error: "must be true or false",
      description:
        "When true, an item that updates a matched contact sets the custom fields it names (null clears one) and keeps the contact's others; the merged custom_fields must still meet their limits, else the item is invalid. When false or absent, custom_fields replaces the stored object whole, as on PATCH. A created contact is stored as given either way.",
    }),
  ),
  add_account_ids: t.Optional(
    t.Boolean({
      error: "must be true or false",
      description:
        `When true, an item that updates a matched contact adds its account_ids after the contact's (one already linked changes nothing) and keeps the others; null still clears them; more than ${MAX_RELATED_IDS} together make the item invalid. When false or absent, account_ids replaces the stored list whole, as on PATCH. A created contact is stored as given either way.`,
    }),
  ),
};
export type ContactBatchOptions = Static<TObject<typeof CONTACT_BATCH_OPTIONS>>;

/** Contact is a contact as the API returns it. */
export const Contact = t.Object(
  {
    id: t.String({ examples: ["con_01JDB7Y1Q7A6T5ZV3C8W9X0K2M"] }),
    first_name: t.Union([t.String(), t.Null()]),
    last_name: t.Union([t.String(), t.Null()]),
    full_name: t.String({ description: "first_name and last_name joined by a space" }),
    email: t.Union([t.String(), t.Null()], { description: "lowercased, its domain in ASCII form (IDNA A-labels: info@müller.de is info@xn--mller-kva.de)" }),
    phone: t.Union([t.String(), t.Null()]),
    external_id: t.Union([t.String(), t.Null()], { description: "the contact's id in its source system; unique when set" }),
    tags: t.Array(t.String()),
    custom_fields: t.Record(t.String(), t.Unknown()),
    consent: t.Union([t.Record(t.String(), t.Unknown()), t.Null()]),
    account_ids: t.Array(t.String()),
    assigned_user_id: t.Union([t.String(), t.Null()]),
    assigned_user_ids: t.Array(t.String()),
    accounts: t.Optional(t.Array(AccountSchema, { description: "with include=accounts" })),
    assigned_user: t.Optional(t.Union([UserSchema, t.Null()], { description: "with include=assigned_user" })),
    assigned_users: t.Optional(t.Array(UserSchema, { description: "with include=assigned_users" })),
    version: Type.Integer({ minimum: 1, description: "1 when created, one more with every change: of two representations of a contact, the higher version is the newer." }),
    created_at: t.String({ format: "date-time" }),
    updated_at: t.String({ format: "date-time" }),
  },
  { additionalProperties: true, description: "Further properties given on create or update are returned as given." },
);
export type Contact = typeof Contact.static;

/** IncludeParam documents the `include` parameter of contact reads. */
export const IncludeParam = t.Optional(
  t.String({ pattern: "^(accounts|assigned_user|assigned_users)(,(accounts|assigned_user|assigned_users))*$", error: "must be a comma-separated list of: accounts, assigned_user, assigned_users", description: `Relations to embed, each in full in every contact that links it: accounts, assigned_user, assigned_users. A page of the list with include is at most ${byteSize(MAX_INCLUDE_PAGE_BYTES)} as JSON: a page by cursor ends before per_page where the next contact would pass that, its next_cursor going on from there; a page by number that would pass it is 422 naming per_page and how many of its contacts fit. One contact with every relation at every limit takes about 7 MB.` }),
);

export const ContactListQuery = paginationQuerySchema(CONTACT_SORTS, {
  include: IncludeParam,
  email: t.Optional(t.String({ minLength: 1, maxLength: MAX_EMAIL_LENGTH, error: `must be 1 to ${MAX_EMAIL_LENGTH} characters`, description: "Exact email, case-insensitive; a domain in Unicode finds its ASCII form (info@müller.de finds info@xn--mller-kva.de)." })),
  full_name: t.Optional(t.String({ minLength: 1, maxLength: MAX_NAME_LENGTH, error: `must be 1 to ${MAX_NAME_LENGTH} characters`, description: "Case-insensitive substring of full_name as the API returns it (first_name and last_name joined by a space, each as stored), in Unicode NFC, as names are stored (those stored before 2026-11-29 converted by migration 0040)." })),
  created_after: timestampFilterSchema("Only contacts created after this time."),
  updated_after: timestampFilterSchema("Only contacts updated after this time."),
  account_id: t.Optional(t.String({ ...ACCOUNT_ID, description: "Only contacts linked to this account." })),
  tag: t.Optional(
    t.String({
      minLength: 1,
      maxLength: MAX_TAGS * (MAX_TAG_LENGTH + 1),
      // The service refuses an empty list item, a tag too long and a 101st item itself (parseTagFilter); the document says so with a pattern.
      ...documentAs({ type: "string", minLength: 1, maxLength: MAX_TAGS * (MAX_TAG_LENGTH + 1), pattern: `^[^,]{1,${MAX_TAG_LENGTH}}(,[^,]{1,${MAX_TAG_LENGTH}}){0,${MAX_TAGS - 1}}$` }),
      error: `must be at most ${MAX_TAGS} tags of 1 to ${MAX_TAG_LENGTH} characters, comma-separated or repeated`,
      description:
        "Only contacts carrying every one of these tags (exact, case-sensitive, in Unicode NFC as tags are stored): comma-separated (tag=a,b) or repeated (tag=a&tag=b). A tag's characters are counted as the pattern counts them, in Unicode code points as given (before NFC), and a 422 for a tag too long says which one and how many.",
    }),
  ),
  assigned_user_id: t.Optional(t.String({ ...USER_ID, description: "Only contacts whose assigned_user_id is this user." })),
});
export type ContactListQuery = typeof ContactListQuery.static;

export const ContactEnvelope = t.Object({ data: Contact });
export const ContactAccountInput = t.Object(
  { account_id: t.String(ACCOUNT_ID) },
  { additionalProperties: false, examples: [{ account_id: "acc_01JDB7Y1Q7A6T5ZV3C8W9X0K2M" }] },
);
export const ContactTagInput = t.Object(
  { tag: tagName() },
  { additionalProperties: false, examples: [{ tag: "vip" }] },
);
// Elysia states "nothing else" of a response schema it is given; this one it is given wrapped (serialisedResponse).
export const ContactListEnvelope = t.Object({ data: t.Array(Contact), meta: ListMetaSchema }, { additionalProperties: false });
