import type { Database } from "bun:sqlite";
import { keysetOrder } from "../db/keyset.ts";
import type { CursorPosition } from "../http/list-query.ts";

/** Resource is a kind of record whose deletions are kept as tombstones. */
export type Resource = "contact" | "account";

export type TombstoneRow = {
  id: string;
  deleted_at: number;
}

/** insertTombstone records that a contact or account was deleted. */
export function insertTombstone(db: Database, resource: Resource, id: string, deletedAt: number): void {
  db.query("INSERT OR REPLACE INTO tombstones (resource, id, deleted_at) VALUES (?, ?, ?)").run(resource, id, deletedAt);
}

/** countTombstonesSince counts the deletions of a resource after `since`. */
export function countTombstonesSince(db: Database, resource: Resource, since: number): number {
  return db.query<{ n: number }, [Resource, number]>("SELECT count(*) AS n FROM tombstones WHERE resource = ? AND deleted_at > ?").get(resource, since)!.n;
}

/** listTombstonesSince returns one page of the deletions of a resource after `since`, oldest first. */
export function listTombstonesSince(db: Database, resource: Resource, since: number, page: { cursor: CursorPosition | null; limit: number; offset: number }): TombstoneRow[] {
  const order = keysetOrder("deleted_at", "id", "asc", page.cursor);
  return db
    .query<TombstoneRow, (string | number)[]>(
      `SELECT id, deleted_at FROM tombstones WHERE resource = ? AND deleted_at > ? ${order.after ? `AND ${order.after}` : ""} ORDER BY ${order.orderBy} LIMIT ? OFFSET ?`,
    )
    .all(resource, since, ...order.params, page.limit, page.offset);
}

/** deleteTombstonesBefore deletes up to `limit` tombstones older than the cutoff and returns how many. */
export function deleteTombstonesBefore(db: Database, cutoff: number, limit: number): number {
  return db
    .query("DELETE FROM tombstones WHERE (resource, id) IN (SELECT resource, id FROM tombstones WHERE deleted_at < ? LIMIT ?)")
    .run(cutoff, limit).changes;
}
