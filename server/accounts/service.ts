import type { Database } from "bun:sqlite";
import type { BatchResult } from "../batch/model.ts";
import type { BatchKind } from "../batch/service.ts";
import { notFound, validationProblem, type FieldError } from "../shared/problem.ts";
import { schemaChecker } from "../http/schema-errors.ts";
import { extraPropertiesErrors } from "../limits/service.ts";
import { listMeta, parseListQuery, parseTimestampFilter, type ListMeta } from "../http/list-query.ts";
import { canonicalJson, saveIdempotentResponse, type IdempotencyScope } from "../idempotency/service.ts";
import type { Runtime } from "../runtime.ts";
import { newId } from "../shared/ids.ts";
import { toTimestamp } from "../shared/time.ts";
import { detachAccountFromContacts } from "../contacts/service.ts";
import { insertTombstone } from "../tombstones/store.ts";
import { recordEvent } from "../webhooks/outbox.ts";
import { ACCOUNT_FILTERS, ACCOUNT_SORTS, AccountInput, READ_ONLY_ACCOUNT_FIELDS, type Account, type AccountPatch } from "./model.ts";
import {
  ACCOUNT_SORT_COLUMNS,
  accountNameKey,
  countAccounts,
  deleteAccount as deleteAccountRow,
  findAccountById,
  findAccountsByIds,
  insertAccount,
  listAccounts,
  updateAccount as updateAccountRow,
  type AccountRow,
} from "./store.ts";

/** toAccount renders an account row for the API, with its further properties. */
function toAccount(row: AccountRow): Account {
  return {
    id: row.id,
    name: row.name,
    domain: row.domain,
    ...(JSON.parse(row.properties) as Record<string, unknown>),
    created_at: toTimestamp(row.created_at),
    updated_at: toTimestamp(row.updated_at),
  };
}

const KNOWN = new Set(["id", "name", "domain", "created_at", "updated_at"]);

const accountSchemaErrors = schemaChecker(AccountInput);

/** accountItemErrors lists what is wrong with one account on its own (schema, then size), as POST would report it. */
export function accountItemErrors(item: unknown): FieldError[] {
  const schemaErrors = accountSchemaErrors(item);
  return schemaErrors.length > 0 ? schemaErrors : extraPropertiesErrors(item as Record<string, unknown>, KNOWN);
}

const blankAccount = (now: number): AccountRow => ({ id: newId("acc", now), name: "", name_key: "", domain: null, properties: "{}", created_at: now, updated_at: now });

/** accountRowFrom merges an input into a row (given fields replace, null clears a further property); the domain is stored lowercased. */
function accountRowFrom(row: AccountRow, input: AccountInput, now: number): AccountRow {
  const properties = JSON.parse(row.properties) as Record<string, unknown>;
  for (const [key, value] of Object.entries(input)) {
    if (KNOWN.has(key)) continue;
    if (value === null) delete properties[key];
    else properties[key] = value;
  }
  const domain = "domain" in input ? (input.domain?.toLowerCase() ?? null) : row.domain;
  return { ...row, name: input.name, name_key: accountNameKey(input.name), domain, properties: JSON.stringify(properties), updated_at: now };
}

/** MAX_MATCHES_NAMED is how many accounts sharing a key an ambiguity error names. */
const MAX_MATCHES_NAMED = 10;

/** matchAccount finds the account a batch item upserts: by domain when it has one, else by name; several matches are refused, naming them. */
function matchAccount(db: Database, input: AccountInput): { row: AccountRow | null } | { errors: FieldError[] } {
  const domain = input.domain?.toLowerCase();
  const filters = domain ? { domain } : { name: input.name };
  const rows = listAccounts(db, filters, { sortBy: "created_at", direction: "asc", cursor: null, limit: MAX_MATCHES_NAMED, offset: 0 });
  if (rows.length <= 1) return { row: rows[0] ?? null };
  const field = domain ? "domain" : "name";
  return { errors: [{ pointer: `/${field}`, detail: `matches several accounts (${rows.map((row) => row.id).join(", ")}); send the ${domain ? "name" : "domain"} too or merge them first` }] };
}

/** writeNewAccount inserts an account and its account.created event; call it inside a write. */
function writeNewAccount(db: Database, input: AccountInput, now: number): Account {
  const row = accountRowFrom(blankAccount(now), input, now);
  insertAccount(db, row);
  const account = toAccount(row);
  recordEvent(db, "account.created", account, now);
  return account;
}

/**
 * writeAccountChange applies an input to a stored account inside the caller's write: a change is
 * written with updated_at = now and its account.updated event; an input that changes nothing
 * writes nothing. Refuses merged further properties over their limit.
 */
function writeAccountChange(db: Database, current: AccountRow, input: AccountInput, now: number): { errors: FieldError[] } | { account: Account; changed: boolean } {
  const row = accountRowFrom(current, input, now);
  const merged = extraPropertiesErrors(JSON.parse(row.properties) as Record<string, unknown>, KNOWN);
  if (merged.length > 0) return { errors: merged };
  const before = toAccount(current);
  const after = toAccount(row);
  // Canonical form: the same properties sent in another key order are no change.
  if (canonicalJson({ ...after, updated_at: null }) === canonicalJson({ ...before, updated_at: null })) return { account: before, changed: false };
  updateAccountRow(db, row);
  recordEvent(db, "account.updated", after, now);
  return { account: after, changed: true };
}

/** upsertAccount writes one valid batch item: created, updated or unchanged; invalid when its key is ambiguous or the merged properties too large. */
function upsertAccount(db: Database, input: AccountInput, now: number): BatchResult {
  const match = matchAccount(db, input);
  if ("errors" in match) return { status: "invalid", errors: match.errors };
  if (!match.row) return { status: "created", id: writeNewAccount(db, input, now).id };
  const change = writeAccountChange(db, match.row, input, now);
  if ("errors" in change) return { status: "invalid", errors: change.errors };
  return { status: change.changed ? "updated" : "unchanged", id: match.row.id };
}

/** ACCOUNT_BATCH upserts accounts in POST /accounts/batch: keyed by domain, else name. */
export const ACCOUNT_BATCH: BatchKind<AccountInput> = { itemErrors: accountItemErrors, upsert: upsertAccount };

/** createAccount stores an account, its account.created event and its idempotent response in one group-committed write. */
export function createAccount(rt: Runtime, input: AccountInput, idempotency: IdempotencyScope | null): Promise<{ status: number; body: { data: Account } }> {
  const oversized = extraPropertiesErrors(input, KNOWN);
  if (oversized.length > 0) throw validationProblem(oversized);
  return rt.writes.submit(() => {
    const now = Date.now();
    const body = { data: writeNewAccount(rt.db, input, now) };
    saveIdempotentResponse(rt.db, idempotency, 201, body, now);
    return { status: 201, body };
  });
}

/** getAccount returns one account or throws 404. */
export function getAccount(db: Database, id: string): Account {
  const row = findAccountById(db, id);
  if (!row) throw notFound("account", id);
  return toAccount(row);
}

/** listAccountsPage returns one page of accounts, sorted and filtered as the query asks. */
export function listAccountsPage(db: Database, query: Record<string, unknown>): { data: Account[]; meta: ListMeta } {
  const list = parseListQuery(query, { sorts: ACCOUNT_SORTS, defaultSort: "created_at", defaultDirection: "asc", filters: ACCOUNT_FILTERS });
  const filters = {
    name: query.name as string | undefined,
    domain: (query.domain as string | undefined)?.toLowerCase(),
    createdAfter: parseTimestampFilter("created_after", query.created_after),
    updatedAfter: parseTimestampFilter("updated_after", query.updated_after),
  };
  const rows = listAccounts(db, filters, { sortBy: list.sortBy, direction: list.direction, cursor: list.cursor, limit: list.perPage, offset: list.cursor ? 0 : (list.page - 1) * list.perPage });
  const column = ACCOUNT_SORT_COLUMNS[list.sortBy];
  return { data: rows.map(toAccount), meta: listMeta(list, countAccounts(db, filters), rows, (row: AccountRow) => row[column], query, ACCOUNT_FILTERS) };
}

/** refuseInvalidPatch throws 422 for read-only fields and oversized further properties in a PATCH body. */
function refuseInvalidPatch(input: AccountPatch): void {
  const errors: FieldError[] = READ_ONLY_ACCOUNT_FIELDS.filter((field) => field in input).map((field) => ({ pointer: `/${field}`, detail: "is read-only" }));
  errors.push(...extraPropertiesErrors(input, KNOWN));
  if (errors.length > 0) throw validationProblem(errors);
}

/**
 * applyAccountUpdate applies a PATCH to an account inside the caller's transaction: fields present
 * replace, null clears domain or a further property; a change writes account.updated, none writes
 * nothing. Returns null when no account has the id.
 */
export function applyAccountUpdate(db: Database, id: string, input: AccountPatch, now: number): { account: Account; changed: boolean } | null {
  refuseInvalidPatch(input);
  const current = findAccountById(db, id);
  if (!current) return null;
  const change = writeAccountChange(db, current, { ...input, name: input.name ?? current.name }, now);
  if ("errors" in change) throw validationProblem(change.errors);
  return change;
}

/** updateAccount applies a PATCH in one group-committed write, or throws 404. */
export function updateAccount(rt: Runtime, id: string, input: AccountPatch): Promise<Account> {
  return rt.writes.submit(() => {
    const result = applyAccountUpdate(rt.db, id, input, Date.now());
    if (!result) throw notFound("account", id);
    return result.account;
  });
}

/**
 * deleteAccount removes an account in one commit: its contacts stay and lose the link (each sends
 * contact.updated), then the account's tombstone and account.deleted.
 */
export function deleteAccount(rt: Runtime, id: string): Promise<void> {
  return rt.writes.submit(() => {
    const now = Date.now();
    if (!findAccountById(rt.db, id)) throw notFound("account", id);
    detachAccountFromContacts(rt.db, id, now);
    deleteAccountRow(rt.db, id);
    insertTombstone(rt.db, "account", id, now);
    recordEvent(rt.db, "account.deleted", { id, deleted_at: toTimestamp(now) }, now);
  });
}

/** accountsByIds returns the API form of the accounts with the given ids, keyed by id. */
export function accountsByIds(db: Database, ids: string[]): Map<string, Account> {
  return new Map([...findAccountsByIds(db, ids)].map(([id, row]) => [id, toAccount(row)]));
}
