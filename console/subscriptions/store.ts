import type { Database } from "bun:sqlite";

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
export function insertRotation(db: Database, row: Omit<RotationRow, "test_delivery_id" | "completed_at" | "updated_at">): void {
  db.query(
    `INSERT INTO subscription_rotations (new_subscription_id, old_subscription_id, old_target_url, old_description, created_at, updated_at)
     VALUES ($new_subscription_id, $old_subscription_id, $old_target_url, $old_description, $created_at, $created_at)`,
  ).run(row);
}

/** findRotation returns the rotation to the given new subscription, or null. */
export function findRotation(db: Database, newSubscriptionId: string): RotationRow | null {
  return db.query<RotationRow, [string]>("SELECT * FROM subscription_rotations WHERE new_subscription_id = ?").get(newSubscriptionId);
}

/** listOpenRotations returns every unfinished rotation, newest first. */
export function listOpenRotations(db: Database): RotationRow[] {
  return db.query<RotationRow, []>("SELECT * FROM subscription_rotations WHERE completed_at IS NULL ORDER BY created_at DESC").all();
}

/** setRotationTestDelivery records the test event delivery sent to a rotation's new subscription. */
export function setRotationTestDelivery(db: Database, newSubscriptionId: string, deliveryId: string, at: number): void {
  db.query("UPDATE subscription_rotations SET test_delivery_id = ?, updated_at = ? WHERE new_subscription_id = ?").run(deliveryId, at, newSubscriptionId);
}

/** markRotationCompleted records that the old subscription was deleted. */
export function markRotationCompleted(db: Database, newSubscriptionId: string, at: number): void {
  db.query("UPDATE subscription_rotations SET completed_at = ?, updated_at = ? WHERE new_subscription_id = ? AND completed_at IS NULL").run(at, at, newSubscriptionId);
}
