import type { Database } from "bun:sqlite";
import { keysetOrder } from "../db/keyset.ts";
import type { CursorPosition, SortDirection } from "../http/list-query.ts";
import type { AccountSort } from "./model.ts";

export type AccountRow = {
  id: string;
  name: string;
  /** accountNameKey(name): what the name filter compares */
  name_key: string;
  domain: string | null;
  properties: string;
  created_at: number;
  updated_at: number;
}

export interface AccountFilters {
  name?: string;
  domain?: string;
  createdAfter?: number;
  updatedAfter?: number;
}

/** accountNameKey is the form of an account name that lookups compare: NFC, lowercased in every script. */
export function accountNameKey(name: string): string {
  return name.normalize("NFC").toLowerCase();
}

/** insertAccount stores a new account row. */
export function insertAccount(db: Database, row: AccountRow): void {
  db.query("INSERT INTO accounts (id, name, name_key, domain, properties, created_at, updated_at) VALUES ($id, $name, $name_key, $domain, $properties, $created_at, $updated_at)").run(row);
}

/** updateAccount overwrites an account row's fields. */
export function updateAccount(db: Database, row: AccountRow): void {
  db.query("UPDATE accounts SET name = $name, name_key = $name_key, domain = $domain, properties = $properties, updated_at = $updated_at WHERE id = $id").run({ ...row, created_at: undefined } as never);
}

/** deleteAccount removes an account row and tells whether it existed (its contact links must be gone first). */
export function deleteAccount(db: Database, id: string): boolean {
  return db.query("DELETE FROM accounts WHERE id = ?").run(id).changes > 0;
}

/** keyAccountNames fills name_key for every account (the backfill of migration 0007). */
export function keyAccountNames(db: Database): void {
  const update = db.query("UPDATE accounts SET name_key = ? WHERE id = ?");
  for (const { id, name } of db.query<{ id: string; name: string }, []>("SELECT id, name FROM accounts").all()) update.run(accountNameKey(name), id);
}

/** findAccountById returns one account row or null. */
export function findAccountById(db: Database, id: string): AccountRow | null {
  return db.query<AccountRow, [string]>("SELECT * FROM accounts WHERE id = ?").get(id);
}

/** findAccountsByIds returns the accounts with the given ids, keyed by id. */
export function findAccountsByIds(db: Database, ids: string[]): Map<string, AccountRow> {
  if (ids.length === 0) return new Map();
  const rows = db.query<AccountRow, string[]>(`SELECT * FROM accounts WHERE id IN (${ids.map(() => "?").join(", ")})`).all(...ids);
  return new Map(rows.map((row) => [row.id, row]));
}

function filterClause(filters: AccountFilters): { where: string[]; params: (string | number)[] } {
  const where: string[] = [];
  const params: (string | number)[] = [];
  if (filters.name !== undefined) {
    where.push("name_key = ?");
    params.push(accountNameKey(filters.name));
  }
  if (filters.domain !== undefined) {
    where.push("domain = ?");
    params.push(filters.domain);
  }
  if (filters.createdAfter !== undefined) {
    where.push("created_at > ?");
    params.push(filters.createdAfter);
  }
  if (filters.updatedAfter !== undefined) {
    where.push("updated_at > ?");
    params.push(filters.updatedAfter);
  }
  return { where, params };
}

/** countAccounts counts the accounts matching the filters. */
export function countAccounts(db: Database, filters: AccountFilters): number {
  const { where, params } = filterClause(filters);
  return db.query<{ n: number }, (string | number)[]>(`SELECT count(*) AS n FROM accounts ${where.length ? `WHERE ${where.join(" AND ")}` : ""}`).get(...params)!.n;
}

/** ACCOUNT_SORT_COLUMNS maps each sort to its indexed column: a name sorts by its case-folded key. */
export const ACCOUNT_SORT_COLUMNS: Record<AccountSort, "created_at" | "updated_at" | "name_key" | "domain"> = { created_at: "created_at", updated_at: "updated_at", name: "name_key", domain: "domain" };

/** listAccounts returns one page of accounts in the given sort, by offset or after a keyset cursor. */
export function listAccounts(
  db: Database,
  filters: AccountFilters,
  page: { sortBy: AccountSort; direction: SortDirection; cursor: CursorPosition | null; limit: number; offset: number },
): AccountRow[] {
  const { where, params } = filterClause(filters);
  const sortColumn = ACCOUNT_SORT_COLUMNS[page.sortBy];
  // As for contacts: a filter on another column than the sort picks its rows through its own index
  // (the unary + keeps SQLite from walking the sort index and skipping what the filter refuses).
  const sortFiltered = (sortColumn === "created_at" && filters.createdAfter !== undefined) || (sortColumn === "updated_at" && filters.updatedAfter !== undefined);
  const column = where.length > 0 && !sortFiltered ? `+${sortColumn}` : sortColumn;
  const order = keysetOrder(column, "id", page.direction, page.cursor, sortColumn === "domain");
  const select = (keyset: { after: string; params: (string | number)[] } | null, limit: number) => {
    const conditions = [...(keyset?.after ? [keyset.after] : []), ...where];
    return db
      .query<AccountRow, (string | number)[]>(`SELECT * FROM accounts ${conditions.length ? `WHERE ${conditions.join(" AND ")}` : ""} ORDER BY ${order.orderBy} LIMIT ? OFFSET ?`)
      .all(...(keyset?.params ?? []), ...params, limit, page.offset);
  };
  const rows = select(order, page.limit);
  return order.then && rows.length < page.limit ? rows.concat(select(order.then, page.limit - rows.length)) : rows;
}
