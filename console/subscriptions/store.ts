import type { Db } from "../../server/db/sql.ts";
import type { MadeByColumns } from "../../server/shared/made-by.ts";

/** RotationRow is a guided replacement of one subscription by a new one, keyed by the new subscription. */
export type RotationRow = {
  new_subscription_id: string;
  old_subscription_id: string;
  old_target_url: string;
  old_description: string;
  test_delivery_id: string | null;
  created_at: number;
  updated_at: number;
  completed_at: number | null;
};

/** insertRotation stores a rotation that has just created its new subscription. */
export async function insertRotation(db: Db, row: Omit<RotationRow, "test_delivery_id" | "completed_at" | "updated_at">): Promise<void> {
  await db.run(
    `INSERT INTO subscription_rotations (new_subscription_id, old_subscription_id, old_target_url, old_description, created_at, updated_at)
     VALUES (?, ?, ?, ?, ?, ?)`,
    [row.new_subscription_id, row.old_subscription_id, row.old_target_url, row.old_description, row.created_at, row.created_at],
  );
}

/** findRotation returns the rotation to the given new subscription, or null. */
export function findRotation(db: Db, newSubscriptionId: string): Promise<RotationRow | null> {
  return db.get<RotationRow>("SELECT * FROM subscription_rotations WHERE new_subscription_id = ?", [newSubscriptionId]);
}

/** listOpenRotations returns every unfinished rotation, newest first (by id within a millisecond). */
export function listOpenRotations(db: Db): Promise<RotationRow[]> {
  return db.all<RotationRow>("SELECT * FROM subscription_rotations WHERE completed_at IS NULL ORDER BY created_at DESC, new_subscription_id DESC");
}

/** setRotationTestDelivery records the test event delivery sent to a rotation's new subscription. */
export async function setRotationTestDelivery(db: Db, newSubscriptionId: string, deliveryId: string, at: number): Promise<void> {
  await db.run("UPDATE subscription_rotations SET test_delivery_id = ?, updated_at = ? WHERE new_subscription_id = ?", [deliveryId, at, newSubscriptionId]);
}

/**
 * deleteRotationsWithoutReplacementBefore drops the rotations whose new subscription was deleted
 * and whose last step came before `cutoff`, and returns how many: an unfinished one can only say
 * it was abandoned, and a finished one names two deleted subscriptions, whose deliveries and
 * statistics retention removes as well. A finished rotation to a subscription still there stays.
 */
export function deleteRotationsWithoutReplacementBefore(db: Db, cutoff: number): Promise<number> {
  return db.run("DELETE FROM subscription_rotations WHERE updated_at < ? AND NOT EXISTS (SELECT 1 FROM webhook_subscriptions WHERE id = new_subscription_id)", [cutoff]);
}

/** markRotationCompleted records that the old subscription was deleted. */
export async function markRotationCompleted(db: Db, newSubscriptionId: string, at: number): Promise<void> {
  await db.run("UPDATE subscription_rotations SET completed_at = ?, updated_at = ? WHERE new_subscription_id = ? AND completed_at IS NULL", [at, at, newSubscriptionId]);
}

/** listSubscriptionMakers returns who made each subscription (migration 0047), by its id. */
export function listSubscriptionMakers(db: Db): Promise<({ id: string } & MadeByColumns)[]> {
  return db.all<{ id: string } & MadeByColumns>("SELECT id, created_by, created_by_email FROM webhook_subscriptions");
}
