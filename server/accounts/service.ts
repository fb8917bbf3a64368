import type { Database } from "bun:sqlite";
import { notFound, validationProblem, type FieldError } from "../shared/problem.ts";
import { extraPropertiesErrors } from "../limits/service.ts";
import { listMeta, parseListQuery, parseTimestampFilter, type ListMeta } from "../http/list-query.ts";
import { canonicalJson, saveIdempotentResponse, type IdempotencyScope } from "../idempotency/service.ts";
import type { Runtime } from "../runtime.ts";
import { newId } from "../shared/ids.ts";
import { toTimestamp } from "../shared/time.ts";
import { detachAccountFromContacts } from "../contacts/service.ts";
import { insertTombstone } from "../tombstones/store.ts";
import { recordEvent } from "../webhooks/outbox.ts";
import { ACCOUNT_FILTERS, ACCOUNT_SORTS, READ_ONLY_ACCOUNT_FIELDS, type Account, type AccountInput, type AccountPatch } from "./model.ts";
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

/** createAccount stores an account, its account.created event and its idempotent response in one group-committed write. */
export function createAccount(rt: Runtime, input: AccountInput, idempotency: IdempotencyScope | null): Promise<{ status: number; body: { data: Account } }> {
  const oversized = extraPropertiesErrors(input, KNOWN);
  if (oversized.length > 0) throw validationProblem(oversized);
  return rt.writes.submit(() => {
    const now = Date.now();
    const properties = Object.fromEntries(Object.entries(input).filter(([key]) => !KNOWN.has(key)));
    const row: AccountRow = { id: newId("acc", now), name: input.name, name_key: accountNameKey(input.name), domain: input.domain?.toLowerCase() ?? null, properties: JSON.stringify(properties), created_at: now, updated_at: now };
    insertAccount(rt.db, row);
    const body = { data: toAccount(row) };
    recordEvent(rt.db, "account.created", body.data, now);
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
 * replace, null clears domain or a further property. A change writes the row with updated_at =
 * now and account.updated; none writes nothing. Returns the account, or null when no account has
 * the id. Batch writers (imports) call it for each item in their own transaction.
 */
export function applyAccountUpdate(db: Database, id: string, input: AccountPatch, now: number): { account: Account; changed: boolean } | null {
  refuseInvalidPatch(input);
  const current = findAccountById(db, id);
  if (!current) return null;
  const properties = JSON.parse(current.properties) as Record<string, unknown>;
  for (const [key, value] of Object.entries(input)) {
    if (KNOWN.has(key)) continue;
    if (value === null) delete properties[key];
    else properties[key] = value;
  }
  const oversized = extraPropertiesErrors(properties, KNOWN);
  if (oversized.length > 0) throw validationProblem(oversized);
  const name = input.name ?? current.name;
  const domain = input.domain === undefined ? current.domain : (input.domain?.toLowerCase() ?? null);
  const row: AccountRow = { ...current, name, name_key: accountNameKey(name), domain, properties: JSON.stringify(properties), updated_at: now };
  const before = toAccount(current);
  const after = toAccount(row);
  // Canonical form: the same properties sent in another key order are no change.
  if (canonicalJson({ ...after, updated_at: null }) === canonicalJson({ ...before, updated_at: null })) return { account: before, changed: false };
  updateAccountRow(db, row);
  recordEvent(db, "account.updated", after, now);
  return { account: after, changed: true };
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
