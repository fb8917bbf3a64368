import type { Database } from "bun:sqlite";
import { ProblemError } from "../shared/problem.ts";
import { listMeta, parseListQuery, type ListMeta } from "../http/list-query.ts";
import { newId } from "../shared/ids.ts";
import { toTimestamp } from "../shared/time.ts";
import type { User } from "./model.ts";
import { countUsers, findUserByEmail, findUsersByIds, insertUser, listUsers, type UserRow } from "./store.ts";

/** toUser renders a user row for the API. */
function toUser(row: UserRow): User {
  return { id: row.id, name: row.name, email: row.email, created_at: toTimestamp(row.created_at), updated_at: toTimestamp(row.updated_at) };
}

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

/** createUser adds a person contacts can be assigned to; emails are unique and lowercased. */
export function createUser(db: Database, input: { name: string; email: string }, now = Date.now()): User {
  const name = input.name.trim();
  const email = input.email.trim().toLowerCase();
  if (name === "" || name.length > 200) throw new ProblemError(422, "validation", "name must be 1 to 200 characters.", [{ pointer: "/name", detail: "must be 1 to 200 characters" }]);
  if (!EMAIL.test(email) || email.length > 254) throw new ProblemError(422, "validation", "email must be an email address.", [{ pointer: "/email", detail: "must be an email address" }]);
  if (findUserByEmail(db, email)) throw new ProblemError(409, "user-exists", `A user with email ${email} already exists.`);
  const row: UserRow = { id: newId("usr", now), name, email, created_at: now, updated_at: now };
  insertUser(db, row);
  return toUser(row);
}

/** listUsersPage returns one page of users for the list endpoint. */
export function listUsersPage(db: Database, query: Record<string, unknown>): { data: User[]; meta: ListMeta } {
  const list = parseListQuery(query, { sorts: ["id"], defaultSort: "id", defaultDirection: "asc", filters: [] });
  const rows = listUsers(db, { cursor: list.cursor, limit: list.perPage, offset: list.cursor ? 0 : (list.page - 1) * list.perPage });
  return { data: rows.map(toUser), meta: listMeta(list, countUsers(db), rows, (row: UserRow) => row.id, query, []) };
}

/** missingUserIds returns the given ids that name no user. */
export function missingUserIds(db: Database, ids: string[]): string[] {
  const found = findUsersByIds(db, ids);
  return ids.filter((id) => !found.has(id));
}

/** usersByIds returns the API form of the users with the given ids, keyed by id. */
export function usersByIds(db: Database, ids: string[]): Map<string, User> {
  return new Map([...findUsersByIds(db, ids)].map(([id, row]) => [id, toUser(row)]));
}
