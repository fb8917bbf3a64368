import type { Database } from "bun:sqlite";
import { keysetOrder } from "../db/keyset.ts";
import type { CursorPosition } from "../http/list-query.ts";

export type UserRow = {
  id: string;
  name: string;
  email: string;
  created_at: number;
  updated_at: number;
}

/** insertUser stores a new user row. */
export function insertUser(db: Database, row: UserRow): void {
  db.query("INSERT INTO users (id, name, email, created_at, updated_at) VALUES ($id, $name, $email, $created_at, $updated_at)").run(row);
}

/** updateUser overwrites a user's name, email and updated_at. */
export function updateUser(db: Database, row: UserRow): void {
  db.query("UPDATE users SET name = $name, email = $email, updated_at = $updated_at WHERE id = $id").run({ id: row.id, name: row.name, email: row.email, updated_at: row.updated_at });
}

/** findUserById returns one user row or null. */
export function findUserById(db: Database, id: string): UserRow | null {
  return db.query<UserRow, [string]>("SELECT * FROM users WHERE id = ?").get(id);
}

/** findUserByEmail returns the user with that (lowercased) email, or null. */
export function findUserByEmail(db: Database, email: string): UserRow | null {
  return db.query<UserRow, [string]>("SELECT * FROM users WHERE email = ?").get(email);
}

/** findUsersByIds returns the users with the given ids, keyed by id. */
export function findUsersByIds(db: Database, ids: string[]): Map<string, UserRow> {
  if (ids.length === 0) return new Map();
  const rows = db.query<UserRow, string[]>(`SELECT * FROM users WHERE id IN (${ids.map(() => "?").join(", ")})`).all(...ids);
  return new Map(rows.map((row) => [row.id, row]));
}

/** countUsers counts all users. */
export function countUsers(db: Database): number {
  return db.query<{ n: number }, []>("SELECT count(*) AS n FROM users").get()!.n;
}

/** listUsers returns one page of users, oldest first. */
export function listUsers(db: Database, page: { cursor: CursorPosition | null; limit: number; offset: number }): UserRow[] {
  const order = keysetOrder("id", "id", "asc", page.cursor);
  return db
    .query<UserRow, (string | number)[]>(`SELECT * FROM users ${order.after ? `WHERE ${order.after}` : ""} ORDER BY ${order.orderBy} LIMIT ? OFFSET ?`)
    .all(...order.params, page.limit, page.offset);
}
