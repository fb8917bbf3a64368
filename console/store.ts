import type { Db } from "../server/db/sql.ts";

export type OperatorRow = {
  id: string;
  email: string;
  password_hash: string;
  created_at: number;
  updated_at: number;
};

export type SessionRow = {
  id_hash: Uint8Array;
  operator_id: string;
  created_at: number;
  last_seen_at: number;
};

export type LoginFailureRow = {
  scope: string;
  subject: string;
  failures: number;
  window_start_at: number;
  last_failure_at: number;
};

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

/** insertOperator stores a new operator. */
export async function insertOperator(db: Db, row: OperatorRow): Promise<void> {
  await db.run("INSERT INTO operators (id, email, password_hash, created_at, updated_at) VALUES (?, ?, ?, ?, ?)", [row.id, row.email, row.password_hash, row.created_at, row.updated_at]);
}

/** findOperatorByEmail returns the operator with that (lowercased) email, or null. */
export function findOperatorByEmail(db: Db, email: string): Promise<OperatorRow | null> {
  return db.get<OperatorRow>("SELECT * FROM operators WHERE email = ?", [email]);
}

/** countOperators counts all operators. */
export async function countOperators(db: Db): Promise<number> {
  return (await db.get<{ n: number }>("SELECT count(*) AS n FROM operators"))!.n;
}

/** replaceSetupCodes drops every earlier setup code and stores a new one, so only the latest link works; call it inside one write. */
export async function replaceSetupCodes(db: Db, codeHash: Uint8Array, createdAt: number, expiresAt: number): Promise<void> {
  await db.run("DELETE FROM operator_setup_codes");
  await db.run("INSERT INTO operator_setup_codes (code_hash, created_at, expires_at) VALUES (?, ?, ?)", [codeHash, createdAt, expiresAt]);
}

/** setupCodeIsValid tells whether a setup code with this hash exists and is unexpired at `now`. */
export async function setupCodeIsValid(db: Db, codeHash: Uint8Array, now: number): Promise<boolean> {
  return (await db.get("SELECT 1 FROM operator_setup_codes WHERE code_hash = ? AND expires_at > ?", [codeHash, now])) !== null;
}

/** insertFirstOperator stores the first operator and uses up the setup codes, unless an operator already exists; call it inside one write. */
export async function insertFirstOperator(db: Db, row: OperatorRow): Promise<boolean> {
  if ((await countOperators(db)) > 0) return false;
  await insertOperator(db, row);
  await db.run("DELETE FROM operator_setup_codes");
  return true;
}

/** insertSession stores a session by the hash of its id. */
export async function insertSession(db: Db, row: SessionRow): Promise<void> {
  await db.run("INSERT INTO operator_sessions (id_hash, operator_id, created_at, last_seen_at) VALUES (?, ?, ?, ?)", [row.id_hash, row.operator_id, row.created_at, row.last_seen_at]);
}

/** findSessionWithOperator returns a session seen after `idleSince` and its operator, or null. */
export function findSessionWithOperator(db: Db, idHash: Uint8Array, idleSince: number): Promise<(SessionRow & { email: string }) | null> {
  return db.get<SessionRow & { email: string }>(
    `SELECT s.*, o.email FROM operator_sessions s JOIN operators o ON o.id = s.operator_id
     WHERE s.id_hash = ? AND s.last_seen_at > ?`,
    [idHash, idleSince],
  );
}

/** touchSession records that a session was used. */
export async function touchSession(db: Db, idHash: Uint8Array, at: number): Promise<void> {
  await db.run("UPDATE operator_sessions SET last_seen_at = ? WHERE id_hash = ?", [at, idHash]);
}

/** deleteSession removes one session. */
export async function deleteSession(db: Db, idHash: Uint8Array): Promise<void> {
  await db.run("DELETE FROM operator_sessions WHERE id_hash = ?", [idHash]);
}

/** deleteIdleSessions removes sessions not used since `idleSince`. */
export async function deleteIdleSessions(db: Db, idleSince: number): Promise<void> {
  await db.run("DELETE FROM operator_sessions WHERE last_seen_at <= ?", [idleSince]);
}

/** findLoginFailures returns the failure count of one scope and subject, or null. */
export function findLoginFailures(db: Db, scope: string, subject: string): Promise<LoginFailureRow | null> {
  return db.get<LoginFailureRow>("SELECT * FROM login_failures WHERE scope = ? AND subject = ?", [scope, subject]);
}

/** recordLoginFailure counts a failure, starting a new window when the current one began before `windowStartAfter`. */
export async function recordLoginFailure(db: Db, scope: string, subject: string, now: number, windowStartAfter: number): Promise<void> {
  await db.run(
    `INSERT INTO login_failures (scope, subject, failures, window_start_at, last_failure_at) VALUES (?, ?, 1, ?, ?)
     ON CONFLICT (scope, subject) DO UPDATE SET
       failures = CASE WHEN login_failures.window_start_at > ? THEN login_failures.failures + 1 ELSE 1 END,
       window_start_at = CASE WHEN login_failures.window_start_at > ? THEN login_failures.window_start_at ELSE excluded.window_start_at END,
       last_failure_at = excluded.last_failure_at`,
    [scope, subject, now, now, windowStartAfter, windowStartAfter],
  );
}

/** clearLoginFailures forgets the failures of one scope and subject. */
export async function clearLoginFailures(db: Db, scope: string, subject: string): Promise<void> {
  await db.run("DELETE FROM login_failures WHERE scope = ? AND subject = ?", [scope, subject]);
}

/** clearLoginFailuresOfAccount forgets every failure counted against an account, from any address; returns how many records went. */
export function clearLoginFailuresOfAccount(db: Db, email: string, pairSubjectPrefix: string): Promise<number> {
  return db.run("DELETE FROM login_failures WHERE (scope = 'account' AND subject = ?) OR (scope = 'pair' AND substr(subject, 1, length(?)) = ?)", [email, pairSubjectPrefix, pairSubjectPrefix]);
}

/** deleteLoginFailuresBefore forgets failure windows that started before `cutoff`. */
export async function deleteLoginFailuresBefore(db: Db, cutoff: number): Promise<void> {
  await db.run("DELETE FROM login_failures WHERE window_start_at < ?", [cutoff]);
}

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

/** listOpenRotations returns every unfinished rotation, newest first. */
export function listOpenRotations(db: Db): Promise<RotationRow[]> {
  return db.all<RotationRow>("SELECT * FROM subscription_rotations WHERE completed_at IS NULL ORDER BY created_at DESC");
}

/** setRotationTestDelivery records the test event delivery sent to a rotation's new subscription. */
export async function setRotationTestDelivery(db: Db, newSubscriptionId: string, deliveryId: string, at: number): Promise<void> {
  await db.run("UPDATE subscription_rotations SET test_delivery_id = ?, updated_at = ? WHERE new_subscription_id = ?", [deliveryId, at, newSubscriptionId]);
}

/** markRotationCompleted records that the old subscription was deleted. */
export async function markRotationCompleted(db: Db, newSubscriptionId: string, at: number): Promise<void> {
  await db.run("UPDATE subscription_rotations SET completed_at = ?, updated_at = ? WHERE new_subscription_id = ? AND completed_at IS NULL", [at, at, newSubscriptionId]);
}
