import type { ChangeOrigin } from "../shared/made-by.ts";
import { applyPatch } from "../shared/patch.ts";
import type { Database, Db, ReaderName } from "../db/sql.ts";
import { ReadLaneFull } from "../db/slow-reads.ts";
import { accountsByIds } from "../accounts/service.ts";
import { findAccountsByIds } from "../accounts/store.ts";
import { ProblemError, notFound, validationProblem, type FieldError } from "../shared/problem.ts";
import type { BatchResult } from "../batch/model.ts";
import type { BatchKind } from "../batch/service.ts";
import { schemaChecker } from "../http/schema-errors.ts";
import type { JsonText } from "../http/json-text.ts";
import { refuseUnmetCondition, type VersionCondition } from "../shared/version-condition.ts";
import { cursorAfter, listMeta, pageRows, pageTotal, pageWindow, parseListQuery, parseTimestampFilter, unknownParameterErrors, type CursorPosition, type ListMeta, type SortValue } from "../http/list-query.ts";
import type { SecretBox } from "../webhooks/secrets.ts";
import { canonicalJson, saveIdempotentResponse, type IdempotencyScope } from "../idempotency/service.ts";
import { withdrawIdempotencyRecordsOf } from "../idempotency/store.ts";
import type { Runtime } from "../runtime.ts";
import { newId } from "../shared/ids.ts";
import { notBefore, toTimestamp } from "../shared/time.ts";
import { missingUserIds, usersByIds } from "../users/service.ts";
import { recordEvent, recordEvents } from "../webhooks/outbox.ts";
import { consentErrors, customFieldsErrors, extraPropertiesErrors } from "../limits/service.ts";
import { IN_ASCII_FORM, MAX_EMAIL_LENGTH, MAX_INCLUDE_PAGE_BYTES, MAX_RELATED_IDS, MAX_TAGS, MAX_TAG_LENGTH, byteSize } from "../limits/limits.ts";
import { asciiEmail, emailError, unstorableUnicodeEmail } from "../shared/domains.ts";
import { findContactTombstonesByEmail, insertTombstone } from "../tombstones/store.ts";
import { codePoints } from "../shared/text.ts";
import { SpacedLines } from "../shared/log.ts";
import { errorCode } from "../shared/thrown.ts";
import { databaseFailureOf } from "../db/backend.ts";
import { CONTACT_FILTERS, CONTACT_SORTS, ContactInput, OBJECT_CONTACT_FIELDS, READ_ONLY_CONTACT_FIELDS, type Contact, type ContactBatchOptions, type ContactInclude } from "./model.ts";
import {
  countContacts,
  countReadsMatches,
  deleteContact as deleteContactRow,
  findContactByExternalId,
  findContactById,
  findContactsByEmail,
  findContactsByEmailWithoutExternalId,
  insertContact,
  insertContactAccounts,
  insertContactAssignedUsers,
  findContactsByIds,
  hasUnindexedNames,
  indexWaitingNames,
  listContacts,
  listContactVersions,
  listNeedsCount,
  planPerValue,
  valueDependentPlans,
  type ContactVersion,
  replaceContactAccounts,
  replaceContactAssignedUsers,
  insertContactTags,
  replaceContactTags,
  findContactsAssignedToUser,
  findContactsLinkedToAccount,
  unassignUserFromContacts,
  unlinkAccountFromContacts,
  updateContact as updateContactRow,
  type ContactFilters,
  type ContactRow,
} from "./store.ts";

const COLUMN_FIELDS = ["first_name", "last_name", "email", "phone", "external_id", "assigned_user_id"] as const;
const RELATION_FIELDS = ["account_ids", "assigned_user_ids"] as const;
const NOT_PROPERTIES = new Set<string>([...COLUMN_FIELDS, ...RELATION_FIELDS, ...READ_ONLY_CONTACT_FIELDS]);
/** DECLARED_FIELDS are the contact's own fields; every other property counts toward MAX_EXTRA_PROPERTIES_BYTES. */
const DECLARED_FIELDS = new Set<string>([...Object.keys(ContactInput.properties), ...READ_ONLY_CONTACT_FIELDS]);

function fullName(row: ContactRow): string {
  const first = row.first_name ?? "";
  const last = row.last_name ?? "";
  return first && last ? `${first} ${last}` : first || last;
}

// Most contacts have no accounts or assigned users; their empty list needs no parsing.
const idList = (json: string): string[] => (json === "[]" ? [] : (JSON.parse(json) as string[]));

/** toContact renders a contact row for the API. */
function toContact(row: ContactRow): Contact {
  const properties = JSON.parse(row.properties) as Record<string, unknown>;
  const contact: Record<string, unknown> = {
    id: row.id,
    first_name: row.first_name,
    last_name: row.last_name,
    full_name: fullName(row),
    email: row.email,
    phone: row.phone,
    external_id: row.external_id,
    tags: properties.tags ?? [],
    custom_fields: properties.custom_fields ?? {},
    consent: properties.consent ?? null,
    account_ids: idList(row.account_ids),
    assigned_user_id: row.assigned_user_id,
    assigned_user_ids: idList(row.assigned_user_ids),
  };
  // A loop, not rest and spread: this runs for every row of every page, and building the rest
  // object cost more than the assignments. Stored keys never include __proto__ (safe-json refuses it).
  for (const key in properties) {
    if (key !== "tags" && key !== "custom_fields" && key !== "consent") contact[key] = properties[key];
  }
  contact.version = row.version;
  const createdAt = toTimestamp(row.created_at);
  contact.created_at = createdAt;
  // Most contacts were never changed: the same instant need not be formatted twice.
  contact.updated_at = row.updated_at === row.created_at ? createdAt : toTimestamp(row.updated_at);
  return contact as Contact;
}

/**
 * MOVED is what a read of several statements answers when they saw different states: a write
 * committed between them. On PostgreSQL each statement on the pool sees what was committed by
 * then; on SQLite the reads of one event-loop turn share one snapshot, so it does not arise there.
 */
const MOVED = Symbol("moved");

/**
 * readConsistently runs `read` and, when it answers MOVED, once more through `db.read`, in one
 * snapshot on PostgreSQL, where nothing moves. The common case costs no transaction (its BEGIN and
 * COMMIT were a third of a lookup by email), and a page or a contact is never shown half before
 * and half after a change.
 */
async function readConsistently<T>(db: Database, read: (db: Db) => Promise<T | typeof MOVED>): Promise<T> {
  const result = await read(db);
  return result === MOVED ? inOneSnapshot(db, read) : result;
}

/** inOneSnapshot runs `read` through `db.read`, or `db.readAside` for `slowReader`'s slow reads: one snapshot, where nothing moves. */
async function inOneSnapshot<T>(db: Database, read: (db: Db) => Promise<T | typeof MOVED>, slowReader?: ReaderName): Promise<T> {
  const result = await (slowReader === undefined ? db.read(read) : db.readAside(read, slowReader));
  if (result === MOVED) throw new Error("contacts moved between the reads of one snapshot");
  return result;
}

/** renderContacts renders rows with the relations `include` names embedded, or answers MOVED when an embedded account or user was deleted after the rows were read. */
async function renderContacts(db: Db, rows: ContactRow[], include: ContactInclude[]): Promise<Contact[] | typeof MOVED> {
  const contacts = rows.map(toContact);
  if (include.length === 0) return contacts;
  const accounts = include.includes("accounts") ? await accountsByIds(db, [...new Set(contacts.flatMap((c) => c.account_ids))]) : new Map();
  const users = await usersByIds(db, [...new Set(contacts.flatMap((c) => [...(include.includes("assigned_users") ? c.assigned_user_ids : []), ...(include.includes("assigned_user") && c.assigned_user_id ? [c.assigned_user_id] : [])]))]);
  const gone = contacts.some(
    (c) =>
      (include.includes("accounts") && c.account_ids.some((id) => !accounts.has(id))) ||
      (include.includes("assigned_users") && c.assigned_user_ids.some((id) => !users.has(id))) ||
      (include.includes("assigned_user") && c.assigned_user_id !== null && !users.has(c.assigned_user_id)),
  );
  if (gone) return MOVED;
  return contacts.map((contact) => {
    const { version, created_at, updated_at, ...rest } = contact;
    return {
      ...rest,
      ...(include.includes("accounts") ? { accounts: contact.account_ids.map((id) => accounts.get(id)!) } : {}),
      ...(include.includes("assigned_user") ? { assigned_user: contact.assigned_user_id ? users.get(contact.assigned_user_id)! : null } : {}),
      ...(include.includes("assigned_users") ? { assigned_users: contact.assigned_user_ids.map((id) => users.get(id)!) } : {}),
      version,
      created_at,
      updated_at,
    };
  });
}

/** findRenderedContact reads one contact with the relations `include` names embedded (null when there is none), or MOVED (renderContacts). */
async function findRenderedContact(db: Db, id: string, include: ContactInclude[]): Promise<Contact | null | typeof MOVED> {
  const row = await findContactById(db, id);
  if (!row) return null;
  const rendered = await renderContacts(db, [row], include);
  return rendered === MOVED ? MOVED : rendered[0]!;
}

/** contactInputErrors lists what a create or PATCH body breaks beyond its schema: read-only fields, object fields, sizes. */
function contactInputErrors(input: Record<string, unknown>): FieldError[] {
  const errors: FieldError[] = READ_ONLY_CONTACT_FIELDS.filter((field) => field in input).map((field) => ({
    pointer: `/${field}`,
    detail: field === "full_name" ? "is derived from first_name and last_name; set those instead" : "is read-only",
  }));
  for (const field of OBJECT_CONTACT_FIELDS) {
    const value = input[field];
    if (value !== undefined && value !== null && (typeof value !== "object" || Array.isArray(value))) {
      errors.push({ pointer: `/${field}`, detail: "must be a JSON object, or null" });
    }
  }
  errors.push(...customFieldsErrors(input.custom_fields), ...consentErrors(input.consent), ...extraPropertiesErrors(input, DECLARED_FIELDS));
  return errors;
}

/**
 * storedForm gives a contact input the form its email is stored in: lowercased with its domain in
 * ASCII form (asciiEmail). Its names and tags had theirs (NFC) before the schema took them (storedText).
 */
function storedForm(input: ContactInput): ContactInput {
  return typeof input.email === "string" ? { ...input, email: asciiEmail(input.email) } : input;
}

function refuseInvalidFields(input: Record<string, unknown>): void {
  const errors = contactInputErrors(input);
  if (errors.length > 0) throw validationProblem(errors);
}

/** IDENTIFYING_FIELDS: a contact needs at least one of them, or it names nobody. */
const IDENTIFYING_FIELDS = ["email", "first_name", "last_name", "phone"] as const;

/** anonymousErrors names the identifying fields when a contact (as it would be stored, or a create's input: what it leaves out is stored null) has none of them, a blank one (spaces alone) counting as none. */
function anonymousErrors(contact: Partial<Pick<ContactRow, (typeof IDENTIFYING_FIELDS)[number]>>): FieldError[] {
  // A name of spaces alone is stored as given, but it names nobody: the console lists such a contact as "(no name)".
  if (IDENTIFYING_FIELDS.some((field) => contact[field]?.trim())) return [];
  return [{ pointer: "", detail: `needs at least one of ${IDENTIFYING_FIELDS.join(", ")}` }];
}

/** tagsOf reads the tags kept in a row's properties. */
function tagsOf(row: ContactRow): string[] {
  return (JSON.parse(row.properties) as { tags?: string[] }).tags ?? [];
}

const contactSchemaErrors = schemaChecker(ContactInput);

/** contactItemErrors lists what is wrong with one contact on its own (schema, then limits), as POST would report it. */
function contactItemErrors(item: unknown): FieldError[] {
  const schemaErrors = contactSchemaErrors(item);
  return schemaErrors.length > 0 ? schemaErrors : contactInputErrors(item as Record<string, unknown>);
}

/**
 * contactItemErrorsBeforeMatch lists what POST /contacts/batch refuses in a contact item whatever
 * contacts are stored, so without the database (the importer checks its rows with it): those of
 * contactItemErrors, then naming nobody when the item has no external_id, since then nothing can
 * match it (no email either) and it would be created. With an external_id it may update a contact
 * that names someone, which only the server knows.
 */
export function contactItemErrorsBeforeMatch(item: unknown): FieldError[] {
  const errors = contactItemErrors(item);
  if (errors.length > 0) return errors;
  const input = item as ContactInput;
  return input.external_id ? [] : anonymousErrors(input);
}

/** unknownRelationErrors names every account or user id the contact refers to that does not exist. */
async function unknownRelationErrors(db: Db, input: ContactInput): Promise<FieldError[]> {
  const errors: FieldError[] = [];
  if (input.account_ids) {
    const found = await findAccountsByIds(db, input.account_ids);
    input.account_ids.forEach((id, i) => {
      if (!found.has(id)) errors.push({ pointer: `/account_ids/${i}`, detail: `no account with id ${id} exists` });
    });
  }
  if (input.assigned_user_id && (await missingUserIds(db, [input.assigned_user_id])).length > 0) {
    errors.push({ pointer: "/assigned_user_id", detail: `no user with id ${input.assigned_user_id} exists` });
  }
  if (input.assigned_user_ids) {
    const missing = new Set(await missingUserIds(db, input.assigned_user_ids));
    input.assigned_user_ids.forEach((id, i) => {
      if (missing.has(id)) errors.push({ pointer: `/assigned_user_ids/${i}`, detail: `no user with id ${id} exists` });
    });
  }
  return errors;
}

/** refuseUnknownRelations throws 422 naming every account or user id that does not exist. */
async function refuseUnknownRelations(db: Db, input: ContactInput): Promise<void> {
  const errors = await unknownRelationErrors(db, input);
  if (errors.length > 0) throw validationProblem(errors, "The contact refers to accounts or users that do not exist.");
}

/** refuseTakenExternalId answers 409 when another contact already has the input's external_id. */
async function refuseTakenExternalId(db: Db, input: ContactInput, ownId: string | null): Promise<void> {
  if (!input.external_id) return;
  const holder = await findContactByExternalId(db, input.external_id);
  if (holder && holder.id !== ownId) {
    throw new ProblemError(409, "external-id-taken", `Contact ${holder.id} already has this external_id.`, [{ pointer: "/external_id", detail: `is already the external_id of contact ${holder.id}` }]);
  }
}

/** applyInput merges a create or PATCH body into a row: given fields replace, null clears. */
function applyInput(row: ContactRow, input: ContactInput): ContactRow {
  const properties = JSON.parse(row.properties) as Record<string, unknown>;
  applyPatch(properties, input, NOT_PROPERTIES);
  const next: ContactRow = { ...row, properties: JSON.stringify(properties) };
  for (const field of COLUMN_FIELDS) {
    if (field in input) next[field] = (input[field] as string | null | undefined) ?? null;
  }
  if (input.account_ids !== undefined) next.account_ids = JSON.stringify(input.account_ids ?? []);
  if (input.assigned_user_ids !== undefined) next.assigned_user_ids = JSON.stringify(input.assigned_user_ids ?? []);
  return next;
}

/** writeNewContact inserts a contact, its relations and its contact.created event (made by the request `origin`), or refuses one that names nobody; call it inside a write. */
async function writeNewContact(db: Db, input: ContactInput, origin: ChangeOrigin, now: number): Promise<{ errors: FieldError[] } | { contact: Contact }> {
  input = storedForm(input);
  const empty: ContactRow = { id: newId("con", now), first_name: null, last_name: null, email: null, phone: null, external_id: null, assigned_user_id: null, properties: "{}", account_ids: "[]", assigned_user_ids: "[]", version: 1, created_at: now, updated_at: now };
  const row = applyInput(empty, input);
  const anonymous = anonymousErrors(row);
  if (anonymous.length > 0) return { errors: anonymous };
  await insertContact(db, row);
  await insertContactAccounts(db, row, input.account_ids ?? []);
  await insertContactAssignedUsers(db, row.id, input.assigned_user_ids ?? []);
  // A new contact has no tag rows: the DELETE of replaceContactTags cost ~13 us of every create.
  await insertContactTags(db, row, input.tags ?? []);
  const contact = toContact(row);
  await recordEvent(db, "contact.created", contact, origin, now);
  return { contact };
}

type ContactChange = { errors: FieldError[] } | { contact: Contact; changed: boolean };

/**
 * writeContactChange applies a PATCH-like input to a stored contact; a change is written with its
 * contact.updated event (made by the request `origin`), an input that changes nothing writes
 * nothing (updated_at stays, no event). Call it inside a write, after the relations are checked.
 */
async function writeContactChange(db: Db, current: ContactRow, input: ContactInput, origin: ChangeOrigin, now: number): Promise<ContactChange> {
  input = storedForm(input);
  // Writes are serialised, so counting up from the stored version gives each change its own number, in commit order.
  const row = { ...applyInput(current, input), version: current.version + 1, updated_at: notBefore(current.updated_at, now) };
  // Further properties add up across PATCHes, so their limit applies to the merged record.
  // Only a change to the identifying fields can leave a contact naming nobody (older contacts may
  // already: a tag or account change to them is not refused for it).
  const identity = IDENTIFYING_FIELDS.some((field) => field in input) ? anonymousErrors(row) : [];
  const merged = [...identity, ...extraPropertiesErrors(JSON.parse(row.properties) as Record<string, unknown>, DECLARED_FIELDS)];
  if (merged.length > 0) return { errors: merged };
  const before = toContact(current);
  const after = toContact(row);
  // Canonical form: the same properties sent in another key order are no change.
  if (canonicalJson({ ...after, version: null, updated_at: null }) === canonicalJson({ ...before, version: null, updated_at: null })) return { contact: before, changed: false };
  await updateContactRow(db, row);
  if (input.account_ids !== undefined) await replaceContactAccounts(db, row, input.account_ids ?? []);
  if (input.assigned_user_ids !== undefined) await replaceContactAssignedUsers(db, current.id, input.assigned_user_ids ?? []);
  if (input.tags !== undefined) await replaceContactTags(db, row, input.tags ?? []);
  // Its event happened at its updated_at: a stamp a clock ahead left on the contact is kept (notBefore).
  await recordEvent(db, "contact.updated", after, origin, row.updated_at);
  return { contact: after, changed: true };
}

/** createContact stores a contact, its relations, its contact.created event (made by the request `origin`) and idempotent response in one commit. */
export async function createContact(rt: Runtime, input: ContactInput, idempotency: IdempotencyScope | null, origin: ChangeOrigin): Promise<{ status: number; body: { data: Contact } }> {
  refuseInvalidFields(input);
  return rt.db.write(async (tx) => {
    await refuseUnknownRelations(tx, input);
    await refuseTakenExternalId(tx, input, null);
    const now = await rt.db.changeClock.stamp(tx);
    const made = await writeNewContact(tx, input, origin, now);
    if ("errors" in made) throw validationProblem(made.errors);
    const body = { data: made.contact };
    await saveIdempotentResponse(tx, idempotency, 201, body, now);
    return { status: 201, body };
  });
}

/** updateContact applies a PATCH (if the stored version meets `condition`, else 412); a change writes contact.updated in the same commit, a no-op writes nothing. */
export async function updateContact(rt: Runtime, id: string, input: ContactInput, condition: VersionCondition | null, origin: ChangeOrigin): Promise<Contact> {
  return rt.db.write(async (tx) => {
    const current = await findContactById(tx, id);
    if (!current) throw notFound("contact", id);
    // RFC 9110 (section 13.2.2) evaluates a precondition before the request's content.
    refuseUnmetCondition(condition, "contact", id, current.version);
    refuseInvalidFields(input);
    await refuseUnknownRelations(tx, input);
    await refuseTakenExternalId(tx, input, id);
    const change = await writeContactChange(tx, current, input, origin, await rt.db.changeClock.stamp(tx));
    if ("errors" in change) throw validationProblem(change.errors);
    return change.contact;
  });
}

/**
 * matchContact finds the contact a batch item upserts: by external_id when the item has one, else
 * by email (DESIGN.md: upserts match on either). When no contact has the item's external_id, the
 * one contact of its email without an external_id is updated and given it (the person known by
 * email until now); contacts of that email with other external ids are other people (a shared
 * mailbox), so without such a contact one is created. Several sharing a key are refused naming
 * them, never guessed. Writes are serialised, so an external_id no contact held at the lookup is
 * still free when it is written.
 */
async function matchContact(db: Db, input: ContactInput): Promise<{ row: ContactRow | null } | { errors: FieldError[] }> {
  if (input.external_id) {
    const row = await findContactByExternalId(db, input.external_id);
    if (row || !input.email) return { row };
    const rows = await findContactsByEmailWithoutExternalId(db, asciiEmail(input.email));
    if (rows.length <= 1) return { row: rows[0] ?? null };
    return { errors: [{ pointer: "/external_id", detail: `no contact has this external_id, and several of this email have none (${rows.map((row) => row.id).join(", ")}): give it to the one it belongs to (PATCH /public/v1/contacts/ID), or create this contact with POST /public/v1/contacts first` }] };
  }
  if (!input.email) return { row: null };
  const rows = await findContactsByEmail(db, asciiEmail(input.email));
  if (rows.length <= 1) return { row: rows[0] ?? null };
  return { errors: [{ pointer: "/email", detail: `matches several contacts (${rows.map((row) => row.id).join(", ")}); send the external_id of the one to update (give it one with PATCH /public/v1/contacts/ID if it has none), or delete the copies` }] };
}

/**
 * withCustomFieldsMerged turns an item that updates `row` into the PATCH-like input keeping the
 * row's custom fields it does not name (a null clears one), or the limits the merged object breaks.
 * An item without a custom_fields object (none, or null to clear them all) is taken as it is.
 */
function withCustomFieldsMerged(row: ContactRow, input: ContactInput): { input: ContactInput } | { errors: FieldError[] } {
  const named = input.custom_fields;
  if (typeof named !== "object" || named === null) return { input };
  const merged = { ...(JSON.parse(row.properties) as { custom_fields?: Record<string, unknown> }).custom_fields };
  applyPatch(merged, named);
  const errors = customFieldsErrors(merged).map((error) => ({ ...error, detail: `with the contact's other custom fields kept, ${error.detail}` }));
  return errors.length > 0 ? { errors } : { input: { ...input, custom_fields: merged } };
}

/**
 * withAccountsAdded turns an item that updates `row` into the PATCH-like input whose account_ids are
 * the row's with the item's not yet linked after them, or the limit the union breaks: an importer
 * naming a contact's company then keeps the accounts linked elsewhere. An item without an
 * account_ids list (none, or null to clear them) is taken as it is.
 */
function withAccountsAdded(row: ContactRow, input: ContactInput): { input: ContactInput } | { errors: FieldError[] } {
  const named = input.account_ids;
  if (!Array.isArray(named)) return { input };
  const linked = idList(row.account_ids);
  const added = [...linked, ...named.filter((id) => !linked.includes(id))];
  if (added.length > MAX_RELATED_IDS) return { errors: [{ pointer: "/account_ids", detail: `with the contact's other accounts kept, would be ${added.length} accounts; the limit is ${MAX_RELATED_IDS}` }] };
  return { input: { ...input, account_ids: added } };
}

/** upsertContact writes one valid batch item: created, updated (its custom fields merged and its accounts added when `options` say so), unchanged, or invalid when its match, relations or merge refuse it. */
async function upsertContact(db: Db, input: ContactInput, now: number, origin: ChangeOrigin, options: ContactBatchOptions): Promise<BatchResult> {
  const match = await matchContact(db, input);
  if ("errors" in match) return { status: "invalid", errors: match.errors };
  const relationErrors = await unknownRelationErrors(db, input);
  if (relationErrors.length > 0) return { status: "invalid", errors: relationErrors };
  if (!match.row) {
    const made = await writeNewContact(db, input, origin, now);
    return "errors" in made ? { status: "invalid", errors: made.errors } : { status: "created", id: made.contact.id };
  }
  const merged = options.merge_custom_fields ? withCustomFieldsMerged(match.row, input) : { input };
  if ("errors" in merged) return { status: "invalid", errors: merged.errors };
  const update = options.add_account_ids ? withAccountsAdded(match.row, merged.input) : merged;
  if ("errors" in update) return { status: "invalid", errors: update.errors };
  const change = await writeContactChange(db, match.row, update.input, origin, now);
  if ("errors" in change) return { status: "invalid", errors: change.errors };
  return { status: change.changed ? "updated" : "unchanged", id: match.row.id };
}

/** CONTACT_BATCH upserts contacts in POST /contacts/batch: keyed by external_id, else (or when no contact has it) email. */
export const CONTACT_BATCH: BatchKind<ContactInput, ContactBatchOptions> = { itemErrors: contactItemErrors, upsert: upsertContact };

/**
 * deleteContact removes a contact (if the stored version meets `condition`, else 412), withdraws the kept answers showing it, and writes its tombstone and contact.deleted, whose version follows the contact's last, in the same commit;
 * `finish` runs in that commit too (the console records its form's answer there).
 */
export async function deleteContact(rt: Runtime, id: string, condition: VersionCondition | null, origin: ChangeOrigin, finish: (tx: Db, now: number) => Promise<void> = async () => {}): Promise<void> {
  return rt.db.write(async (tx) => {
    const now = await rt.db.changeClock.stamp(tx);
    const current = await findContactById(tx, id);
    if (!current) throw notFound("contact", id);
    refuseUnmetCondition(condition, "contact", id, current.version);
    if (!(await deleteContactRow(tx, id))) throw notFound("contact", id);
    await withdrawIdempotencyRecordsOf(tx, { resource: "contact", id });
    await insertTombstone(tx, "contact", id, now, current.version + 1, current.email);
    await recordEvent(tx, "contact.deleted", { id, version: current.version + 1, deleted_at: toTimestamp(now) }, origin, now);
    await finish(tx, now);
  });
}

/**
 * changeRelation applies one relation change to a contact in one write: `change` reads the stored
 * contact and returns the body of the equivalent PATCH, or null when there is nothing to change.
 * Reading the row inside the write is what keeps concurrent additions: each sees the one committed
 * before it. A change is written like a PATCH (one contact.updated); none writes nothing.
 */
async function changeRelation(
  rt: Runtime,
  contactId: string,
  condition: VersionCondition | null,
  change: (row: ContactRow, tx: Db) => Promise<ContactInput | null>,
  idempotency: IdempotencyScope | null,
  origin: ChangeOrigin,
): Promise<Contact> {
  return rt.db.write(async (tx) => {
    const current = await findContactById(tx, contactId);
    if (!current) throw notFound("contact", contactId);
    refuseUnmetCondition(condition, "contact", contactId, current.version);
    const now = await rt.db.changeClock.stamp(tx);
    const input = await change(current, tx);
    const result = input ? await writeContactChange(tx, current, input, origin, now) : { contact: toContact(current), changed: false };
    if ("errors" in result) throw validationProblem(result.errors);
    await saveIdempotentResponse(tx, idempotency, 200, { data: result.contact }, now);
    return result.contact;
  });
}

/** addContactAccount links a contact to one more account (last in account_ids), if its version meets `condition` (else 412); linking it again changes nothing. */
export async function addContactAccount(rt: Runtime, contactId: string, accountId: string, condition: VersionCondition | null, idempotency: IdempotencyScope | null, origin: ChangeOrigin): Promise<Contact> {
  return changeRelation(rt, contactId, condition, async (row, tx) => {
    const ids = idList(row.account_ids);
    if (ids.includes(accountId)) return null;
    if ((await findAccountsByIds(tx, [accountId])).size === 0) throw validationProblem([{ pointer: "/account_id", detail: `no account with id ${accountId} exists` }], "The account does not exist.");
    if (ids.length >= MAX_RELATED_IDS) throw validationProblem([{ pointer: "/account_id", detail: `the contact already has ${MAX_RELATED_IDS} accounts, the limit` }], "Too many accounts.");
    return { account_ids: [...ids, accountId] };
  }, idempotency, origin);
}

/** removeContactAccount unlinks a contact from an account, if its version meets `condition` (else 412); an account it is not linked to changes nothing. */
export async function removeContactAccount(rt: Runtime, contactId: string, accountId: string, condition: VersionCondition | null, origin: ChangeOrigin): Promise<Contact> {
  return changeRelation(rt, contactId, condition, async (row) => {
    const ids = idList(row.account_ids);
    return ids.includes(accountId) ? { account_ids: ids.filter((id) => id !== accountId) } : null;
  }, null, origin);
}

/** addContactTag adds a tag to a contact (last in tags), if its version meets `condition` (else 412); a tag it carries changes nothing. */
export async function addContactTag(rt: Runtime, contactId: string, tag: string, condition: VersionCondition | null, idempotency: IdempotencyScope | null, origin: ChangeOrigin): Promise<Contact> {
  return changeRelation(rt, contactId, condition, async (row) => {
    const tags = tagsOf(row);
    if (tags.includes(tag)) return null;
    if (tags.length >= MAX_TAGS) throw validationProblem([{ pointer: "/tag", detail: `the contact already has ${MAX_TAGS} tags, the limit` }], "Too many tags.");
    return { tags: [...tags, tag] };
  }, idempotency, origin);
}

/** removeContactTag removes a tag from a contact, if its version meets `condition` (else 412); a tag it does not carry changes nothing. */
export async function removeContactTag(rt: Runtime, contactId: string, tag: string, condition: VersionCondition | null, origin: ChangeOrigin): Promise<Contact> {
  tag = tag.normalize("NFC");
  return changeRelation(rt, contactId, condition, async (row) => {
    const tags = tagsOf(row);
    return tags.includes(tag) ? { tags: tags.filter((t) => t !== tag) } : null;
  }, null, origin);
}

/**
 * UNLINK_CHUNK is how many contacts one write of an account's or a user's delete unlinks at most
 * (the Runtime's unlinkChunk; tests choose theirs): the delete commits them a chunk per write, so
 * no write holds the write lock (on SQLite, the event loop) for long, and no change is stamped
 * long before it can be read, which the sync recipe's 5 s overlap relies on. A chunk of 100
 * commits in about 10 ms on SQLite and 35-60 ms on PostgreSQL (medians, 20,000 linked contacts, a
 * 2-core machine at a load of 10); one of 500 took 30 and 270 ms there.
 */
export const UNLINK_CHUNK = 100;

/** contactChange is a contact changed set-wise with its stamp, for recordEvents: its updated_at, which a stamp a clock ahead left on it outlives (as notBefore). */
const contactChange = (row: ContactRow) => ({ data: toContact(row), happenedAt: Number(row.updated_at) });

/**
 * detachAccountFromContacts unlinks at most `chunk` contacts from an account about to be deleted,
 * inside the caller's transaction: each gets a new updated_at and one contact.updated, so a
 * poller and a subscriber both learn that the link is gone. Set-wise, not through
 * writeContactChange: an account may have hundreds of thousands of contacts
 * (unlinkAccountFromContacts counts each one's version up as writeContactChange does). Returns how
 * many it unlinked: fewer than `chunk` leaves none linked.
 */
export async function detachAccountFromContacts(db: Db, accountId: string, now: number, chunk: number, origin: ChangeOrigin): Promise<number> {
  const changed = await unlinkAccountFromContacts(db, accountId, await findContactsLinkedToAccount(db, accountId, chunk), now);
  await recordEvents(db, "contact.updated", changed.map(contactChange), origin);
  return changed.length;
}

/**
 * detachUserFromContacts takes a user about to be deleted off at most `chunk` of the contacts
 * assigned to it, inside the caller's transaction, as detachAccountFromContacts does for an
 * account's links: each gets a new version and updated_at and one contact.updated. Returns how
 * many contacts it changed: fewer than `chunk` leaves none assigned.
 */
export async function detachUserFromContacts(db: Db, userId: string, now: number, chunk: number, origin: ChangeOrigin): Promise<number> {
  const changed = await unassignUserFromContacts(db, userId, await findContactsAssignedToUser(db, userId, chunk), now);
  await recordEvents(db, "contact.updated", changed.map(contactChange), origin);
  return changed.length;
}

function parseInclude(value: unknown): ContactInclude[] {
  return typeof value === "string" ? ([...new Set(value.split(","))] as ContactInclude[]) : [];
}

/** getContact returns one contact with the relations named by the `include` parameter embedded, or throws 404. */
export async function getContact(db: Database, id: string, query: Record<string, unknown>): Promise<Contact> {
  const errors = unknownParameterErrors(query, ["include"], "this contact");
  if (errors.length > 0) throw validationProblem(errors, "The parameters are invalid.");
  const include = parseInclude(query.include);
  const contact = await readConsistently(db, (source) => findRenderedContact(source, id, include));
  if (!contact) throw notFound("contact", id);
  return contact;
}

/** emailFilter reads the `email` parameter, refusing an address the service never stores for its non-ASCII text (it could find nothing): the store compares its ASCII form. */
function emailFilter(value: string | undefined): string | undefined {
  if (value !== undefined && unstorableUnicodeEmail(value)) throw validationProblem([{ parameter: "email", detail: emailError(`must be an email address of at most ${MAX_EMAIL_LENGTH} characters, its domain ${IN_ASCII_FORM}`)({ value }) }]);
  return value;
}

/** parseTagFilter reads the `tag` parameter (comma-separated; the route joins repeated ones) or throws a 422 naming it. */
function parseTagFilter(value: unknown): string[] | undefined {
  if (typeof value !== "string") return undefined;
  // Items and their characters counted as given, as the document's pattern counts them: repeats
  // too (a pattern cannot tell one), and in code points, before NFC (which may change a count).
  const given = value.split(",");
  const limit = `must be at most ${MAX_TAGS} tags of 1 to ${MAX_TAG_LENGTH} characters, comma-separated or repeated`;
  const tooLong = given.findIndex((tag) => codePoints(tag) > MAX_TAG_LENGTH);
  if (tooLong >= 0) throw validationProblem([{ parameter: "tag", detail: `${limit}: tag ${tooLong + 1} has ${codePoints(given[tooLong]!)} characters (Unicode code points, as given)` }]);
  if (given.some((tag) => tag.length === 0) || given.length > MAX_TAGS) throw validationProblem([{ parameter: "tag", detail: limit }]);
  return [...new Set(given.map((tag) => tag.normalize("NFC")))];
}

/**
 * RenderedVersions keeps the JSON texts of contact versions, oldest dropped first, up to a number
 * of versions and of characters: most texts are half a kilobyte, but custom fields can make one
 * about 100 KB, and 20,000 such versions listed by one token held 1.3 GB.
 */
export class RenderedVersions {
  private readonly texts = new Map<string, string>();
  private characters = 0;

  constructor(
    private readonly maxVersions = 20_000,
    private readonly maxCharacters = 16_000_000,
  ) {}

  /** get returns the text kept for a contact's id and version, or undefined. */
  get(id: string, version: number): string | undefined {
    return this.texts.get(`${id}:${version}`);
  }

  /** keep adds a version's text, dropping the oldest kept until both bounds hold; a text beyond the whole budget is not kept. */
  keep(id: string, version: number, text: string): void {
    if (text.length > this.maxCharacters) return;
    while (this.texts.size > 0 && (this.texts.size >= this.maxVersions || this.characters + text.length > this.maxCharacters)) {
      const [oldestKey, oldest] = this.texts.entries().next().value!;
      this.texts.delete(oldestKey);
      this.characters -= oldest.length;
    }
    this.texts.set(`${id}:${version}`, text);
    this.characters += text.length;
  }

  /** size is how many versions are kept, and their characters. */
  get size(): { versions: number; characters: number } {
    return { versions: this.texts.size, characters: this.characters };
  }
}

/** Per database: two databases in one process (tests, a copy) may hold the same id and version with other contents. */
const renderedVersionsOf = new WeakMap<Database, RenderedVersions>();

/**
 * renderedContacts returns the JSON text of each contact of a page. A contact's text depends on
 * its row alone, and every change to the row counts its version up (writeContactChange,
 * unlinkAccountFromContacts), so the text kept for an id and version never goes stale: rows are
 * read, rendered and serialised only for versions not seen before. A row changed or deleted since
 * it was listed answers MOVED: shown newer, it would stand out of its place in the page's order
 * (a page by updated_at out of order, a poller's newest updated_at past changes it has not read).
 * The texts are kept per `database`, whatever `db` reads them.
 */
async function renderedContacts(database: Database, db: Db, versions: ContactVersion[]): Promise<string[] | typeof MOVED> {
  let renderedVersions = renderedVersionsOf.get(database);
  if (!renderedVersions) renderedVersionsOf.set(database, (renderedVersions = new RenderedVersions()));
  const texts = versions.map((v) => renderedVersions.get(v.id, v.version));
  const missing = versions.filter((_, i) => texts[i] === undefined).map((v) => v.id);
  if (missing.length === 0) return texts as string[];
  const rows = new Map((await findContactsByIds(db, missing)).map((row) => [row.id, row]));
  if (versions.some((v, i) => texts[i] === undefined && rows.get(v.id)?.version !== v.version)) return MOVED;
  const out: string[] = [];
  versions.forEach((v, i) => {
    const kept = texts[i];
    if (kept !== undefined) return out.push(kept);
    const row = rows.get(v.id)!;
    const text = JSON.stringify(toContact(row));
    renderedVersions.keep(row.id, row.version, text);
    out.push(text);
  });
  return out;
}

/** NAME_INDEXING_INTERVAL_MS is how often contacts waiting for the name index are indexed (SQLite, migration 0017). */
const NAME_INDEXING_INTERVAL_MS = 250;

/** indexNamesWaiting indexes the names of contacts waiting for the name index, if any: before a name search, so it finds them, and in the background job. */
async function indexNamesWaiting(db: Database): Promise<void> {
  if (await hasUnindexedNames(db)) await db.writeIndex(indexWaitingNames);
}

/**
 * startNameIndexing indexes the names of new contacts in batches, every NAME_INDEXING_INTERVAL_MS
 * while any wait (SQLite; migration 0017 says why); the returned function stops it and waits for a batch under way.
 */
export function startNameIndexing(rt: Runtime): () => Promise<void> {
  let running: Promise<unknown> = Promise.resolve();
  // Storage that refuses writes fails every try, four a second while names wait: a line per cause, then one a minute.
  const failures = new SpacedLines<string>();
  const failed = (error: unknown) => {
    const code = errorCode(error);
    const unlogged = failures.occurred(databaseFailureOf(error) ?? code ?? "failed", performance.now());
    if (unlogged === undefined) return;
    rt.log.error("indexing contact names failed", { error: String(error), ...(code === undefined ? {} : { code }), ...(unlogged === null ? {} : { refused_since_last_line: unlogged }) });
  };
  const timer = setInterval(() => {
    running = running.then(() => indexNamesWaiting(rt.db)).catch(failed);
  }, NAME_INDEXING_INTERVAL_MS);
  timer.unref?.();
  return async () => {
    clearInterval(timer);
    await running;
  };
}

/** SLOW_LIST_RETRY_AFTER_SECONDS is the Retry-After of a slow list refused by a full lane: each takes tens to hundreds of milliseconds. */
const SLOW_LIST_RETRY_AFTER_SECONDS = 1;

/** refuseWhenLaneFull answers a slow list the read lane had no room for (--slow-list-lane) with a 503 problem; other errors pass. */
function refuseWhenLaneFull(error: unknown): never {
  if (!(error instanceof ReadLaneFull)) throw error;
  const why =
    error.held >= error.capacity
      ? `The service is already running or holding ${error.capacity} slow lists`
      : `The service is running or holding ${error.held} slow lists, ${error.yours} of them yours, and keeps the last of its ${error.capacity} places for a client with none there`;
  throw new ProblemError(
    503,
    "slow-lists-busy",
    `${why} (filters whose count reads many contacts: several relations, time filters, a name search). Retry after the Retry-After seconds, one list at a time, or narrow the filters.`,
    undefined,
    { "retry-after": String(SLOW_LIST_RETRY_AFTER_SECONDS) },
  );
}

/** PAGE_ENVELOPE_BYTES is what MAX_INCLUDE_PAGE_BYTES keeps for a page's envelope and meta, whose next_cursor is at most 1,744 characters. */
const PAGE_ENVELOPE_BYTES = 4 * 1024;

/**
 * contactTextsWithin serialises contacts in order while together, with the commas between, they
 * take at most `room` bytes of JSON; the first always, which the limits keep to about 7 MB.
 */
function contactTextsWithin(contacts: Contact[], room: number): string[] {
  const texts: string[] = [];
  let bytes = 0;
  for (const contact of contacts) {
    const text = JSON.stringify(contact);
    bytes += Buffer.byteLength(text) + 1;
    if (texts.length > 0 && bytes > room) break;
    texts.push(text);
  }
  return texts;
}

/** includePageRefusal is the detail of a page by number whose contacts, with what include embeds, pass MAX_INCLUDE_PAGE_BYTES after the first `fit`. */
function includePageRefusal(fit: number): string {
  return `is more than fit in a page with include: a page is at most ${byteSize(MAX_INCLUDE_PAGE_BYTES)} as JSON, and only the first ${fit} contacts of this one fit; ask per_page=${fit} or fewer, or page by cursor (a page by cursor ends before per_page instead, its next_cursor going on from there)`;
}

/** listContactsPage answers `reader`'s GET /contacts, serialised: filters, sort, offset or keyset page, includes. */
export async function listContactsPage(db: Database, secrets: SecretBox, query: Record<string, unknown>, reader: ReaderName): Promise<JsonText<{ data: Contact[]; meta: ListMeta }>> {
  const list = parseListQuery(query, { list: "contacts", sorts: CONTACT_SORTS, defaultSort: "created_at", defaultDirection: "desc", filters: CONTACT_FILTERS, options: ["include"] }, secrets);
  const filters = {
    email: emailFilter(query.email as string | undefined),
    fullName: (query.full_name as string | undefined)?.normalize("NFC"),
    createdAfter: parseTimestampFilter("created_after", query.created_after),
    updatedAfter: parseTimestampFilter("updated_after", query.updated_after),
    accountId: query.account_id as string | undefined,
    tags: parseTagFilter(query.tag),
    assignedUserId: query.assigned_user_id as string | undefined,
  };
  const include = parseInclude(query.include);
  if (filters.fullName !== undefined) await indexNamesWaiting(db);
  const reading = pageWindow(list);
  const needsCount = listNeedsCount(filters, list.sortBy, db.dialect);
  // A page and a count read apart, each in a snapshot of its own on PostgreSQL, can disagree (a
  // contact created between them counted and not shown): a list reads both in one snapshot. A
  // lookup by email, whose page of one contact tells its total, pays no transaction, and reads
  // again in one snapshot should its page be full.
  const pageAndCount = async (source: Db) => {
    const outsideSnapshot = source === db && db.dialect === "postgres";
    if (valueDependentPlans(filters) && !outsideSnapshot) await planPerValue(source);
    const counted = needsCount ? await countContacts(source, filters) : null;
    const page = { sortBy: list.sortBy, direction: list.direction, ...reading, matches: counted };
    // Includes embed accounts and users, which change without the contact's version: rendered anew each time.
    const read = include.length > 0 ? await listContacts(source, filters, page) : await listContactVersions(source, filters, page);
    const rows = pageRows(list, read);
    const told = counted ?? pageTotal(list, read);
    if (told === null && outsideSnapshot) return MOVED;
    const matches = told ?? (await countContacts(source, filters));
    const sortValueOf = (row: ContactVersion) => row[list.sortBy] as SortValue;
    const meta = listMeta(list, matches, read, sortValueOf);
    if (include.length > 0) {
      const data = await renderContacts(source, rows as ContactRow[], include);
      if (data === MOVED) return MOVED;
      const texts = contactTextsWithin(data, MAX_INCLUDE_PAGE_BYTES - PAGE_ENVELOPE_BYTES);
      if (texts.length < data.length) {
        // A page by number that ended early would shift every later one: the next would skip the rest of this one.
        if (!list.cursor) throw validationProblem([{ parameter: "per_page", detail: includePageRefusal(texts.length) }]);
        meta.next_cursor = cursorAfter(list, rows[texts.length - 1]!, sortValueOf);
      }
      return `{"data":[${texts.join(",")}],"meta":${JSON.stringify(meta)}}` as JsonText<{ data: Contact[]; meta: ListMeta }>;
    }
    const texts = await renderedContacts(db, source, rows);
    return texts === MOVED ? MOVED : (`{"data":[${texts.join(",")}],"meta":${JSON.stringify(meta)}}` as JsonText<{ data: Contact[]; meta: ListMeta }>);
  };
  const lookup = !needsCount && filters.email !== undefined;
  // A count that reads its matches one by one takes up to 150 ms: on SQLite, off the main thread.
  if (countReadsMatches(filters)) return inOneSnapshot(db, pageAndCount, reader).catch(refuseWhenLaneFull);
  return db.dialect === "postgres" && !lookup ? inOneSnapshot(db, pageAndCount) : readConsistently(db, pageAndCount);
}

// Typed reads for the operator console (issue 17).

/** findContact returns one contact with its accounts, assigned user and assigned users embedded, or null. */
export async function findContact(db: Database, id: string): Promise<Contact | null> {
  return readConsistently(db, (source) => findRenderedContact(source, id, ["accounts", "assigned_user", "assigned_users"]));
}

/** contactsWithEmail returns the contacts with an email (any case), oldest first, at most a handful. */
export async function contactsWithEmail(db: Db, email: string): Promise<Contact[]> {
  return (await findContactsByEmail(db, asciiEmail(email.trim()))).map(toContact);
}

/** DeletedContact is a contact deleted with an email: its id, and when it was deleted. */
export interface DeletedContact {
  id: string;
  deleted_at: string;
}

/** deletedContactsWithEmail returns up to `limit` contacts deleted with an email (any case), by id, while their tombstone keeps the email: the delivery retention after the delete, unless their events were erased sooner (findContactTombstonesByEmail). */
export async function deletedContactsWithEmail(db: Db, email: string, limit: number): Promise<DeletedContact[]> {
  return (await findContactTombstonesByEmail(db, asciiEmail(email.trim()), limit)).map((row) => ({ id: row.id, deleted_at: toTimestamp(row.deleted_at) }));
}

/**
 * searchContacts returns `reader`'s newest-first page of contacts matching an exact email or part
 * of a name, after a position, with the count of all matches (read in one snapshot; a name's count,
 * which reads its matches one by one, on the read lane like the API's slow lists).
 */
export async function searchContacts(
  db: Database,
  filters: Pick<ContactFilters, "email" | "fullName" | "assignedUserId">,
  after: CursorPosition | null,
  limit: number,
  reader: ReaderName,
): Promise<{ data: Contact[]; total: number; next: CursorPosition | null }> {
  if (filters.fullName !== undefined) await indexNamesWaiting(db);
  return inOneSnapshot(db, async (source) => {
    if (valueDependentPlans(filters)) await planPerValue(source);
    const matches = await countContacts(source, filters);
    const rows = await listContacts(source, filters, { sortBy: "created_at", direction: "desc", cursor: after, limit: limit + 1, offset: 0, matches });
    const page = rows.slice(0, limit);
    const last = page.at(-1);
    return { data: page.map(toContact), total: matches, next: rows.length > limit && last ? { value: last.created_at, id: last.id } : null };
  }, countReadsMatches(filters) ? reader : undefined).catch(refuseWhenLaneFull);
}
