import type { Db } from "../db/sql.ts";
import { keysetOrder } from "../db/keyset.ts";
import type { CursorPosition, SortDirection } from "../http/list-query.ts";
import type { UserSort } from "./model.ts";

export type UserRow = {
  id: string;
  name: string;
  email: string;
  created_at: number;
  updated_at: number;
}

/** insertUser stores a new user row. */
export async function insertUser(db: Db, row: UserRow): Promise<void> {
  await db.run("INSERT INTO users (id, name, email, created_at, updated_at) VALUES (?, ?, ?, ?, ?)", [row.id, row.name, row.email, row.created_at, row.updated_at]);
}

/** updateUser overwrites a user's name, email and updated_at. */
export async function updateUser(db: Db, row: UserRow): Promise<void> {
  await db.run("UPDATE users SET name = ?, email = ?, updated_at = ? WHERE id = ?", [row.name, row.email, row.updated_at, row.id]);
}

/** deleteUser removes a user row and tells whether it existed (no contact may be assigned to it any more). */
export async function deleteUser(db: Db, id: string): Promise<boolean> {
  return (await db.run("DELETE FROM users WHERE id = ?", [id])) > 0;
}

/** findUserById returns one user row or null. */
export function findUserById(db: Db, id: string): Promise<UserRow | null> {
  return db.get<UserRow>("SELECT * FROM users WHERE id = ?", [id]);
}

/** findUserByEmail returns the user with that (lowercased) email, or null. */
export function findUserByEmail(db: Db, email: string): Promise<UserRow | null> {
  return db.get<UserRow>("SELECT * FROM users WHERE email = ?", [email]);
}

/** findUsersByIds returns the users with the given ids, keyed by id. */
export async function findUsersByIds(db: Db, ids: string[]): Promise<Map<string, UserRow>> {
  if (ids.length === 0) return new Map();
  const rows = await db.all<UserRow>(`SELECT * FROM users WHERE id IN (${ids.map(() => "?").join(", ")})`, ids);
  return new Map(rows.map((row) => [row.id, row]));
}

/** UserFilters are the users list's filters. */
export type UserFilters = { updatedAfter?: number };

function filterClause(filters: UserFilters): { where: string[]; params: number[] } {
  return filters.updatedAfter === undefined ? { where: [], params: [] } : { where: ["updated_at > ?"], params: [filters.updatedAfter] };
}

/** countUsers counts the users matching the filters. */
export async function countUsers(db: Db, filters: UserFilters): Promise<number> {
  const { where, params } = filterClause(filters);
  return (await db.get<{ n: number }>(`SELECT count(*) AS n FROM users ${where.length ? `WHERE ${where.join(" AND ")}` : ""}`, params))!.n;
}

/** listUsers returns one page of the users matching the filters in the given sort; every one with limit null. */
export function listUsers(
  db: Db,
  filters: UserFilters,
  page: { sortBy: UserSort; direction: SortDirection; cursor: CursorPosition | null; limit: number | null; offset: number },
): Promise<UserRow[]> {
  const { where, params } = filterClause(filters);
  const order = keysetOrder(page.sortBy, "id", page.direction, page.cursor);
  const conditions = [...(order.after ? [order.after] : []), ...where];
  // No limit is no LIMIT clause: SQLite reads LIMIT -1 as none, PostgreSQL refuses it.
  const limit = page.limit === null ? "" : "LIMIT ? OFFSET ?";
  return db.all<UserRow>(`SELECT * FROM users ${conditions.length ? `WHERE ${conditions.join(" AND ")}` : ""} ORDER BY ${order.orderBy} ${limit}`, [
    ...order.params,
    ...params,
    ...(page.limit === null ? [] : [page.limit, page.offset]),
  ]);
}
