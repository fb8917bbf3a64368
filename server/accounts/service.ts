import type { Database } from "bun:sqlite";
import type { BatchResult } from "../batch/model.ts";
import type { BatchKind } from "../batch/service.ts";
import { notFound, validationProblem, type FieldError } from "../shared/problem.ts";
import { schemaChecker } from "../http/schema-errors.ts";
import { extraPropertiesErrors } from "../limits/service.ts";
import { listMeta, parseListQuery, type ListMeta } from "../http/list-query.ts";
import { canonicalJson, saveIdempotentResponse, type IdempotencyScope } from "../idempotency/service.ts";
import type { Runtime } from "../runtime.ts";
import { newId } from "../shared/ids.ts";
import { toTimestamp } from "../shared/time.ts";
import { ACCOUNT_FILTERS, AccountInput, type Account } from "./model.ts";
import { accountNameKey, countAccounts, findAccountById, findAccountsByIds, insertAccount, listAccounts, updateAccount, type AccountRow } from "./store.ts";

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
  const rows = listAccounts(db, filters, { cursor: null, limit: MAX_MATCHES_NAMED, offset: 0 });
  if (rows.length <= 1) return { row: rows[0] ?? null };
  const field = domain ? "domain" : "name";
  return { errors: [{ pointer: `/${field}`, detail: `matches several accounts (${rows.map((row) => row.id).join(", ")}); send the ${domain ? "name" : "domain"} too or merge them first` }] };
}

/** upsertAccount writes one valid batch item: created, updated or unchanged; invalid when its key is ambiguous or the merged properties too large. */
function upsertAccount(db: Database, input: AccountInput, now: number): BatchResult {
  const match = matchAccount(db, input);
  if ("errors" in match) return { status: "invalid", errors: match.errors };
  const row = accountRowFrom(match.row ?? blankAccount(now), input, now);
  if (!match.row) {
    insertAccount(db, row);
    return { status: "created", id: row.id };
  }
  const merged = extraPropertiesErrors(JSON.parse(row.properties) as Record<string, unknown>, KNOWN);
  if (merged.length > 0) return { status: "invalid", errors: merged };
  const same = canonicalJson({ ...toAccount(row), updated_at: null }) === canonicalJson({ ...toAccount(match.row), updated_at: null });
  if (same) return { status: "unchanged", id: row.id };
  updateAccount(db, row);
  return { status: "updated", id: row.id };
}

/** ACCOUNT_BATCH upserts accounts in POST /accounts/batch: keyed by domain, else name. */
export const ACCOUNT_BATCH: BatchKind<AccountInput> = { itemErrors: accountItemErrors, upsert: upsertAccount };

/** createAccount stores an account (and its idempotent response) in one group-committed write. */
export function createAccount(rt: Runtime, input: AccountInput, idempotency: IdempotencyScope | null): Promise<{ status: number; body: { data: Account } }> {
  const oversized = extraPropertiesErrors(input, KNOWN);
  if (oversized.length > 0) throw validationProblem(oversized);
  return rt.writes.submit(() => {
    const now = Date.now();
    const row = accountRowFrom(blankAccount(now), input, now);
    insertAccount(rt.db, row);
    const body = { data: toAccount(row) };
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

/** listAccountsPage returns one page of accounts filtered by name and domain. */
export function listAccountsPage(db: Database, query: Record<string, unknown>): { data: Account[]; meta: ListMeta } {
  const list = parseListQuery(query, { sorts: ["id"], defaultSort: "id", defaultDirection: "asc", filters: ACCOUNT_FILTERS });
  const filters = { name: query.name as string | undefined, domain: (query.domain as string | undefined)?.toLowerCase() };
  const rows = listAccounts(db, filters, { cursor: list.cursor, limit: list.perPage, offset: list.cursor ? 0 : (list.page - 1) * list.perPage });
  return { data: rows.map(toAccount), meta: listMeta(list, countAccounts(db, filters), rows, (row: AccountRow) => row.id, query, ACCOUNT_FILTERS) };
}

/** accountsByIds returns the API form of the accounts with the given ids, keyed by id. */
export function accountsByIds(db: Database, ids: string[]): Map<string, Account> {
  return new Map([...findAccountsByIds(db, ids)].map(([id, row]) => [id, toAccount(row)]));
}
