import type { Database } from "bun:sqlite";
import { keysetOrder } from "../db/keyset.ts";
import type { CursorPosition } from "../http/list-query.ts";

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

function filterClause(filters: AccountFilters): { where: string[]; params: string[] } {
  const where: string[] = [];
  const params: string[] = [];
  if (filters.name !== undefined) {
    where.push("name_key = ?");
    params.push(accountNameKey(filters.name));
  }
  if (filters.domain !== undefined) {
    where.push("domain = ?");
    params.push(filters.domain);
  }
  return { where, params };
}

/** countAccounts counts the accounts matching the filters. */
export function countAccounts(db: Database, filters: AccountFilters): number {
  const { where, params } = filterClause(filters);
  return db.query<{ n: number }, string[]>(`SELECT count(*) AS n FROM accounts ${where.length ? `WHERE ${where.join(" AND ")}` : ""}`).get(...params)!.n;
}

/** listAccounts returns one page of accounts, oldest first. */
export function listAccounts(db: Database, filters: AccountFilters, page: { cursor: CursorPosition | null; limit: number; offset: number }): AccountRow[] {
  const { where, params } = filterClause(filters);
  const order = keysetOrder("id", "id", "asc", page.cursor);
  if (order.after) where.push(order.after);
  return db
    .query<AccountRow, (string | number)[]>(`SELECT * FROM accounts ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY ${order.orderBy} LIMIT ? OFFSET ?`)
    .all(...params, ...order.params, page.limit, page.offset);
}
