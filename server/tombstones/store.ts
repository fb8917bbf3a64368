import type { Db } from "../db/sql.ts";
import { keysetOrder } from "../db/keyset.ts";
import type { CursorPosition } from "../http/list-query.ts";

/** Resource is a kind of record whose deletions are kept as tombstones. */
export type Resource = "contact" | "account";

export type TombstoneRow = {
  id: string;
  deleted_at: number;
}

/** insertTombstone records that a contact or account was deleted. */
export async function insertTombstone(db: Db, resource: Resource, id: string, deletedAt: number): Promise<void> {
  await db.run("INSERT INTO tombstones (resource, id, deleted_at) VALUES (?, ?, ?) ON CONFLICT (resource, id) DO UPDATE SET deleted_at = excluded.deleted_at", [resource, id, deletedAt]);
}

/** countTombstonesSince counts the deletions of a resource after `since`. */
export async function countTombstonesSince(db: Db, resource: Resource, since: number): Promise<number> {
  return (await db.get<{ n: number }>("SELECT count(*) AS n FROM tombstones WHERE resource = ? AND deleted_at > ?", [resource, since]))!.n;
}

/** listTombstonesSince returns one page of the deletions of a resource after `since`, oldest first. */
export function listTombstonesSince(db: Db, resource: Resource, since: number, page: { cursor: CursorPosition | null; limit: number; offset: number }): Promise<TombstoneRow[]> {
  const order = keysetOrder("deleted_at", "id", "asc", page.cursor);
  return db.all<TombstoneRow>(
    `SELECT id, deleted_at FROM tombstones WHERE resource = ? AND deleted_at > ? ${order.after ? `AND ${order.after}` : ""} ORDER BY ${order.orderBy} LIMIT ? OFFSET ?`,
    [resource, since, ...order.params, page.limit, page.offset],
  );
}

/** deleteTombstonesBefore deletes up to `limit` tombstones older than the cutoff and returns how many. */
export function deleteTombstonesBefore(db: Db, cutoff: number, limit: number): Promise<number> {
  return db.run("DELETE FROM tombstones WHERE (resource, id) IN (SELECT resource, id FROM tombstones WHERE deleted_at < ? LIMIT ?)", [cutoff, limit]);
}
