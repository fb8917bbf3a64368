import type { Db } from "../db/sql.ts";
import { keysetOrder } from "../db/keyset.ts";
import type { CursorPosition } from "../http/list-query.ts";

/** RESOURCES are the kinds of record whose deletions are kept as tombstones. */
export const RESOURCES = ["contact", "account", "user"] as const;
export type Resource = (typeof RESOURCES)[number];

export type TombstoneRow = {
  id: string;
  deleted_at: number;
  /** the version the deletion's event carries; null for a user (users carry none) and for tombstones written before migration 0035 */
  version: number | null;
}

/** insertTombstone records that a record was deleted, with the version its deletion's event carries (null for a user) and a contact's email (null for others), by which Find finds it. */
export async function insertTombstone(db: Db, resource: Resource, id: string, deletedAt: number, version: number | null, email: string | null): Promise<void> {
  await db.run(
    `INSERT INTO tombstones (resource, id, deleted_at, version, email) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT (resource, id) DO UPDATE SET deleted_at = excluded.deleted_at, version = excluded.version, email = excluded.email`,
    [resource, id, deletedAt, version, email],
  );
}

/** findContactTombstonesByEmail returns up to `limit` tombstones of contacts deleted with this (stored, lowercased) email, by id, through their email index (migration 0053). */
export function findContactTombstonesByEmail(db: Db, email: string, limit: number): Promise<{ id: string; deleted_at: number }[]> {
  return db.all("SELECT t.id, t.deleted_at FROM tombstones t WHERE t.email = ? AND t.resource = 'contact' ORDER BY t.id LIMIT ?", [email, limit]);
}

/** forgetTombstoneEmail drops the email a deleted record's tombstone keeps: its erasure leaves nothing that finds it by its email. */
export async function forgetTombstoneEmail(db: Db, resource: Resource, id: string): Promise<void> {
  await db.run("UPDATE tombstones SET email = NULL WHERE resource = ? AND id = ? AND email IS NOT NULL", [resource, id]);
}

/** forgetTombstoneEmailsBefore drops the email of up to `limit` tombstones of deletions before the cutoff, oldest first, through their index of deletion times (migration 0053), and returns how many it dropped. */
export function forgetTombstoneEmailsBefore(db: Db, cutoff: number, limit: number): Promise<number> {
  return db.run(
    `UPDATE tombstones SET email = NULL WHERE (resource, id) IN (
       SELECT resource, id FROM tombstones WHERE email IS NOT NULL AND deleted_at < ? ORDER BY deleted_at LIMIT ?)`,
    [cutoff, limit],
  );
}

/** hasTombstone tells whether a record's deletion is still kept as a tombstone. */
export async function hasTombstone(db: Db, resource: Resource, id: string): Promise<boolean> {
  return (await db.get<{ one: number }>("SELECT 1 AS one FROM tombstones WHERE resource = ? AND id = ?", [resource, id])) !== null;
}

/** countTombstonesSince counts the deletions of a resource after `since`. */
export async function countTombstonesSince(db: Db, resource: Resource, since: number): Promise<number> {
  return (await db.get<{ n: number }>("SELECT count(*) AS n FROM tombstones WHERE resource = ? AND deleted_at > ?", [resource, since]))!.n;
}

/** listTombstonesSince returns one page of the deletions of a resource after `since`, oldest first. */
export function listTombstonesSince(db: Db, resource: Resource, since: number, page: { cursor: CursorPosition | null; limit: number; offset: number }): Promise<TombstoneRow[]> {
  const order = keysetOrder("deleted_at", "id", "asc", page.cursor);
  return db.all<TombstoneRow>(
    `SELECT id, deleted_at, version FROM tombstones WHERE resource = ? AND deleted_at > ? ${order.after ? `AND ${order.after}` : ""} ORDER BY ${order.orderBy} LIMIT ? OFFSET ?`,
    [resource, since, ...order.params, page.limit, page.offset],
  );
}

/** deleteTombstonesBefore deletes up to `limit` of a resource's tombstones older than the cutoff and returns the deletion times they held. */
export async function deleteTombstonesBefore(db: Db, resource: Resource, cutoff: number, limit: number): Promise<number[]> {
  const rows = await db.all<{ deleted_at: number }>(
    "DELETE FROM tombstones WHERE (resource, id) IN (SELECT resource, id FROM tombstones WHERE resource = ? AND deleted_at < ? LIMIT ?) RETURNING deleted_at",
    [resource, cutoff, limit],
  );
  return rows.map((row) => row.deleted_at);
}

/** raisePrunedHorizon records that a resource's tombstones up to `newestPruned` were pruned, unless a later one was already. */
export async function raisePrunedHorizon(db: Db, resource: Resource, newestPruned: number): Promise<void> {
  await db.run(
    `INSERT INTO tombstone_horizons (resource, newest_pruned) VALUES (?, ?)
     ON CONFLICT (resource) DO UPDATE SET newest_pruned = excluded.newest_pruned WHERE tombstone_horizons.newest_pruned < excluded.newest_pruned`,
    [resource, newestPruned],
  );
}

/** findPrunedHorizon returns the newest deletion time pruned from a resource's tombstones, or null when none was. */
export async function findPrunedHorizon(db: Db, resource: Resource): Promise<number | null> {
  return (await db.get<{ newest_pruned: number }>("SELECT newest_pruned FROM tombstone_horizons WHERE resource = ?", [resource]))?.newest_pruned ?? null;
}
