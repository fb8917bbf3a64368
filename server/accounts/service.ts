import type { Database } from "bun:sqlite";
import { notFound, validationProblem } from "../shared/problem.ts";
import { extraPropertiesErrors } from "../limits/service.ts";
import { listMeta, parseListQuery, type ListMeta } from "../http/list-query.ts";
import { saveIdempotentResponse, type IdempotencyScope } from "../idempotency/service.ts";
import type { Runtime } from "../runtime.ts";
import { newId } from "../shared/ids.ts";
import { toTimestamp } from "../shared/time.ts";
import { ACCOUNT_FILTERS, type Account, type AccountInput } from "./model.ts";
import { accountNameKey, countAccounts, findAccountById, findAccountsByIds, insertAccount, listAccounts, type AccountRow } from "./store.ts";

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

/** createAccount stores an account (and its idempotent response) in one group-committed write. */
export function createAccount(rt: Runtime, input: AccountInput, idempotency: IdempotencyScope | null): Promise<{ status: number; body: { data: Account } }> {
  const oversized = extraPropertiesErrors(input, KNOWN);
  if (oversized.length > 0) throw validationProblem(oversized);
  return rt.writes.submit(() => {
    const now = Date.now();
    const properties = Object.fromEntries(Object.entries(input).filter(([key]) => !KNOWN.has(key)));
    const row: AccountRow = { id: newId("acc", now), name: input.name, name_key: accountNameKey(input.name), domain: input.domain?.toLowerCase() ?? null, properties: JSON.stringify(properties), created_at: now, updated_at: now };
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
