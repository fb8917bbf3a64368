import { NotRecorded, unlessHeld, type Db } from "../db/sql.ts";

export type OperatorRow = {
  id: string;
  email: string;
  password_hash: string;
  created_at: number;
  updated_at: number;
  /** when they last signed in or used the console (null: never); kept here, as their sessions end */
  last_seen_at: number | null;
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


/** insertOperator stores a new operator. */
export async function insertOperator(db: Db, row: OperatorRow): Promise<void> {
  await db.run("INSERT INTO operators (id, email, password_hash, created_at, updated_at, last_seen_at) VALUES (?, ?, ?, ?, ?, ?)", [
    row.id,
    row.email,
    row.password_hash,
    row.created_at,
    row.updated_at,
    row.last_seen_at,
  ]);
}

/** findOperatorByEmail returns the operator with that (lowercased) email, or null. */
export function findOperatorByEmail(db: Db, email: string): Promise<OperatorRow | null> {
  return db.get<OperatorRow>("SELECT * FROM operators WHERE email = ?", [email]);
}

/** countOperators counts all operators. */
export async function countOperators(db: Db): Promise<number> {
  return (await db.get<{ n: number }>("SELECT count(*) AS n FROM operators"))!.n;
}

/**
 * addSetupCode stores a setup code and drops the expired ones; the others stay valid until they
 * expire or the first operator is created: each instance sharing a database logs a link of its own
 * at start, and none may end another's. Call it inside one write.
 */
export async function addSetupCode(db: Db, codeHash: Uint8Array, createdAt: number, expiresAt: number): Promise<void> {
  await deleteExpiredSetupCodes(db, createdAt);
  await db.run("INSERT INTO operator_setup_codes (code_hash, created_at, expires_at) VALUES (?, ?, ?)", [codeHash, createdAt, expiresAt]);
}

/** deleteExpiredSetupCodes drops the setup codes expired at `now` and returns how many. */
function deleteExpiredSetupCodes(db: Db, now: number): Promise<number> {
  return db.run("DELETE FROM operator_setup_codes WHERE expires_at <= ?", [now]);
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

/** insertSession stores a session by the hash of its id, and its start as its operator's last use; call it inside one write. */
export async function insertSession(db: Db, row: SessionRow): Promise<void> {
  await db.run("INSERT INTO operator_sessions (id_hash, operator_id, created_at, last_seen_at) VALUES (?, ?, ?, ?)", [row.id_hash, row.operator_id, row.created_at, row.last_seen_at]);
  await recordOperatorSeen(db, row.operator_id, row.last_seen_at);
}

/** findSessionWithOperator returns a session seen after `idleSince` and started after `startedSince`, and its operator, or null. */
export function findSessionWithOperator(db: Db, idHash: Uint8Array, idleSince: number, startedSince: number): Promise<(SessionRow & { email: string }) | null> {
  return db.get<SessionRow & { email: string }>(
    `SELECT s.*, o.email FROM operator_sessions s JOIN operators o ON o.id = s.operator_id
     WHERE s.id_hash = ? AND s.last_seen_at > ? AND s.created_at > ?`,
    [idHash, idleSince, startedSince],
  );
}

/**
 * touchSession records that a session of an operator was used, on the session and on the operator,
 * as bookkeeping (writeBookkeeping): a row held elsewhere is skipped, and NotRecorded names its table.
 */
export async function touchSession(db: Db, idHash: Uint8Array, operatorId: string, at: number): Promise<void> {
  const sessions = await db.run(`UPDATE operator_sessions SET last_seen_at = ? WHERE ${unlessHeld(db, "operator_sessions", "id_hash")}`, [at, idHash]);
  const operators = await recordOperatorSeen(db, operatorId, at, unlessHeld(db, "operators", "id"));
  const skipped = [...(sessions === 0 ? ["operator_sessions"] : []), ...(operators === 0 ? ["operators"] : [])];
  if (skipped.length > 0) throw new NotRecorded(skipped.join(" and "));
}

/**
 * recordOperatorSeen moves an operator's last use forward to `at`, never back: another instance's
 * clock may be behind this one's. `byId` selects the operator's row (unlessHeld for bookkeeping);
 * it returns how many rows it updated.
 */
async function recordOperatorSeen(db: Db, operatorId: string, at: number, byId = "id = ?"): Promise<number> {
  return db.run(`UPDATE operators SET last_seen_at = CASE WHEN last_seen_at > ? THEN last_seen_at ELSE ? END WHERE ${byId}`, [at, at, operatorId]);
}

/** deleteSession removes one session. */
export async function deleteSession(db: Db, idHash: Uint8Array): Promise<void> {
  await db.run("DELETE FROM operator_sessions WHERE id_hash = ?", [idHash]);
}

/** deleteEndedSessions removes sessions not used since `idleSince` or started before `startedSince`. */
export async function deleteEndedSessions(db: Db, idleSince: number, startedSince: number): Promise<void> {
  await db.run("DELETE FROM operator_sessions WHERE last_seen_at <= ? OR created_at <= ?", [idleSince, startedSince]);
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

/**
 * pullBackLoginFailures moves every failure stamp later than `now` back to it: this clock went back
 * since it was written, or an instance whose clock runs ahead wrote it.
 */
export async function pullBackLoginFailures(db: Db, now: number): Promise<void> {
  await db.run(
    `UPDATE login_failures SET
       window_start_at = CASE WHEN window_start_at > ? THEN ? ELSE window_start_at END,
       last_failure_at = CASE WHEN last_failure_at > ? THEN ? ELSE last_failure_at END
     WHERE window_start_at > ? OR last_failure_at > ?`,
    [now, now, now, now, now, now],
  );
}

/** clearLoginFailures forgets the failures of one scope and subject. */
export async function clearLoginFailures(db: Db, scope: string, subject: string): Promise<void> {
  await db.run("DELETE FROM login_failures WHERE scope = ? AND subject = ?", [scope, subject]);
}

/** clearLoginFailuresOfAccount forgets every failure counted against an account (its subject), from any address; returns how many records went. */
export function clearLoginFailuresOfAccount(db: Db, account: string, pairSubjectPrefix: string): Promise<number> {
  return db.run("DELETE FROM login_failures WHERE (scope = 'account' AND subject = ?) OR (scope = 'pair' AND substr(subject, 1, length(?)) = ?)", [account, pairSubjectPrefix, pairSubjectPrefix]);
}

/** deleteLoginFailuresBefore forgets failure windows that started before `cutoff`. */
export async function deleteLoginFailuresBefore(db: Db, cutoff: number): Promise<void> {
  await db.run("DELETE FROM login_failures WHERE window_start_at < ?", [cutoff]);
}

/**
 * takeSignInTurn gives the paced key its next turn, unless that is later than `latest`: returns the
 * turn's time (its next one comes `paceMs` after it), or null. One statement, so checks racing for
 * the key on any instance each get their own turn.
 */
export async function takeSignInTurn(db: Db, key: string, now: number, paceMs: number, latest: number): Promise<number | null> {
  const taken = await db.get<{ next_turn_at: number }>(
    `INSERT INTO sign_in_turns (pace_key, next_turn_at) VALUES (?, ?)
     ON CONFLICT (pace_key) DO UPDATE SET next_turn_at = CASE WHEN sign_in_turns.next_turn_at > ? THEN sign_in_turns.next_turn_at ELSE ? END + ?
     WHERE sign_in_turns.next_turn_at <= ?
     RETURNING next_turn_at`,
    [key, now + paceMs, now, now, paceMs, latest],
  );
  return taken ? taken.next_turn_at - paceMs : null;
}

/** findSignInTurn returns when a paced key's next turn comes, or null when it has none. */
export async function findSignInTurn(db: Db, key: string): Promise<number | null> {
  return (await db.get<{ next_turn_at: number }>("SELECT next_turn_at FROM sign_in_turns WHERE pace_key = ?", [key]))?.next_turn_at ?? null;
}

/** pullBackSignInTurns moves the next turns later than `horizon` to `to`: no turn is given that far ahead, so this clock went back since. */
export async function pullBackSignInTurns(db: Db, horizon: number, to: number): Promise<void> {
  await db.run("UPDATE sign_in_turns SET next_turn_at = ? WHERE next_turn_at > ?", [to, horizon]);
}

/** deleteLapsedSignInTurns forgets the keys whose next turn is at or before `now`: their pacing has lapsed. */
export async function deleteLapsedSignInTurns(db: Db, now: number): Promise<void> {
  await db.run("DELETE FROM sign_in_turns WHERE next_turn_at <= ?", [now]);
}

/** listOperators returns every operator, oldest first. */
export function listOperators(db: Db): Promise<OperatorRow[]> {
  return db.all<OperatorRow>("SELECT * FROM operators ORDER BY created_at, id");
}

/** findOperatorById returns one operator, or null. */
export function findOperatorById(db: Db, id: string): Promise<OperatorRow | null> {
  return db.get<OperatorRow>("SELECT * FROM operators WHERE id = ?", [id]);
}

/** deleteOperator removes an operator (their sessions go with them) unless they are the last one; false when nothing was removed. */
export async function deleteOperator(db: Db, id: string): Promise<boolean> {
  // The count is in the statement, so two operators removing each other at once cannot both succeed.
  return (await db.run("DELETE FROM operators WHERE id = ? AND (SELECT count(*) FROM operators) > 1", [id])) > 0;
}

/**
 * updateOperatorPassword sets an operator's password hash, ends every session of theirs, forgets
 * their device cookies and withdraws their pending reset links (a link made before the change
 * would undo it); false when no such operator. Call it inside one write.
 */
export async function updateOperatorPassword(db: Db, id: string, passwordHash: string, now: number): Promise<boolean> {
  const changed = (await db.run("UPDATE operators SET password_hash = ?, updated_at = ? WHERE id = ?", [passwordHash, now, id])) > 0;
  await db.run("DELETE FROM operator_sessions WHERE operator_id = ?", [id]);
  await db.run("DELETE FROM operator_devices WHERE operator_id = ?", [id]);
  await db.run("DELETE FROM operator_links WHERE purpose = 'reset' AND email IN (SELECT email FROM operators WHERE id = ?)", [id]);
  return changed;
}

/** DeviceRow is a device cookie of the console sign-in, by the hash of its nonce. */
export type DeviceRow = {
  id_hash: Uint8Array;
  operator_id: string;
  failures: number;
  created_at: number;
  expires_at: number;
};

/**
 * insertDevice stores a device cookie, first dropping every expired one and those with `spent`
 * checks counted, and then an operator's oldest beyond their newest `keep` (a script signing in
 * without keeping cookies would otherwise add one a sign-in). Call it inside one write.
 */
export async function insertDevice(db: Db, row: DeviceRow, spent: number, keep: number): Promise<void> {
  await db.run("DELETE FROM operator_devices WHERE expires_at <= ? OR failures >= ?", [row.created_at, spent]);
  await db.run("INSERT INTO operator_devices (id_hash, operator_id, failures, created_at, expires_at) VALUES (?, ?, ?, ?, ?)", [row.id_hash, row.operator_id, row.failures, row.created_at, row.expires_at]);
  await db.run(
    `DELETE FROM operator_devices WHERE operator_id = ? AND id_hash NOT IN
       (SELECT id_hash FROM operator_devices WHERE operator_id = ? ORDER BY created_at DESC, id_hash LIMIT ?)`,
    [row.operator_id, row.operator_id, keep],
  );
}

/**
 * claimDeviceCheck counts a password check against an unexpired device cookie of the operator
 * with `email`, unless `budget` were counted already; false when no such cookie could take it.
 * One statement, so sign-ins racing with one cookie, on any instance, cannot all take the last check.
 */
export async function claimDeviceCheck(db: Db, idHash: Uint8Array, operatorId: string, email: string, budget: number, now: number): Promise<boolean> {
  const claimed = await db.run(
    `UPDATE operator_devices SET failures = failures + 1
     WHERE id_hash = ? AND operator_id = ? AND expires_at > ? AND failures < ? AND operator_id IN (SELECT id FROM operators WHERE email = ?)`,
    [idHash, operatorId, now, budget, email],
  );
  return claimed > 0;
}

/** deleteDevice forgets one device cookie (replaced by a new one when it signs in). */
export async function deleteDevice(db: Db, idHash: Uint8Array): Promise<void> {
  await db.run("DELETE FROM operator_devices WHERE id_hash = ?", [idHash]);
}

/** OperatorLinkRow is a one-time link to become an operator (invite) or to set a new password (reset). */
export type OperatorLinkRow = {
  code_hash: Uint8Array;
  purpose: "invite" | "reset";
  email: string;
  created_by: string | null;
  created_at: number;
  expires_at: number;
};

/** replaceOperatorLink stores a link, and drops earlier links for the same email and purpose so only the newest works. Call it inside one write. */
export async function replaceOperatorLink(db: Db, row: OperatorLinkRow): Promise<void> {
  await db.run("DELETE FROM operator_links WHERE email = ? AND purpose = ?", [row.email, row.purpose]);
  await db.run("INSERT INTO operator_links (code_hash, purpose, email, created_by, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)", [
    row.code_hash,
    row.purpose,
    row.email,
    row.created_by,
    row.created_at,
    row.expires_at,
  ]);
}

/** findOperatorLink returns an unexpired link by the hash of its code, or null. */
export function findOperatorLink(db: Db, codeHash: Uint8Array, now: number): Promise<OperatorLinkRow | null> {
  return db.get<OperatorLinkRow>("SELECT * FROM operator_links WHERE code_hash = ? AND expires_at > ?", [codeHash, now]);
}

/** PendingLinkRow is a pending one-time link and the email of the operator who made it (null: made from the command line). */
export type PendingLinkRow = OperatorLinkRow & { created_by_email: string | null };

/**
 * listPendingLinks returns the unexpired links, invitations and password resets, newest first (by
 * purpose and email within a millisecond), with who made each; an invitation of an email that is
 * an operator's (made by `operator create` meanwhile) is left out.
 */
export function listPendingLinks(db: Db, now: number): Promise<PendingLinkRow[]> {
  return db.all<PendingLinkRow>(
    `SELECT l.*, m.email AS created_by_email FROM operator_links l LEFT JOIN operators m ON m.id = l.created_by
     WHERE l.expires_at > ? AND (l.purpose = 'reset' OR NOT EXISTS (SELECT 1 FROM operators o WHERE o.email = l.email))
     ORDER BY l.created_at DESC, l.purpose, l.email`,
    [now],
  );
}

/** deleteOperatorLink uses up a link; false when it was already used (two tabs racing). */
export async function deleteOperatorLink(db: Db, codeHash: Uint8Array): Promise<boolean> {
  return (await db.run("DELETE FROM operator_links WHERE code_hash = ?", [codeHash])) > 0;
}

/** deleteExpiredOperatorLinks drops the one-time links (invitations, password resets, setup codes) expired at `now`, which nothing accepts any more, and returns how many. */
export async function deleteExpiredOperatorLinks(db: Db, now: number): Promise<number> {
  return (await db.run("DELETE FROM operator_links WHERE expires_at <= ?", [now])) + (await deleteExpiredSetupCodes(db, now));
}

/** deleteOperatorLinksOf drops every link naming an email (an operator removed). */
export async function deleteOperatorLinksOf(db: Db, email: string): Promise<void> {
  await db.run("DELETE FROM operator_links WHERE email = ?", [email]);
}

/** deleteOperatorLinksMadeBy drops every link an operator made (the operator removed: what they handed out goes with them). */
export async function deleteOperatorLinksMadeBy(db: Db, operatorId: string): Promise<void> {
  await db.run("DELETE FROM operator_links WHERE created_by = ?", [operatorId]);
}

/**
 * deleteShownOperatorLink withdraws the link of a purpose and email made at `createdAt`, as the
 * operators page showed it; a newer link made for that email since is left alone. False when there
 * was none (used, withdrawn, replaced or expired meanwhile).
 */
export async function deleteShownOperatorLink(db: Db, purpose: OperatorLinkRow["purpose"], email: string, createdAt: number): Promise<boolean> {
  return (await db.run("DELETE FROM operator_links WHERE purpose = ? AND email = ? AND created_at = ?", [purpose, email, createdAt])) > 0;
}
