import type { Database } from "bun:sqlite";

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


/** insertOperator stores a new operator. */
export function insertOperator(db: Database, row: OperatorRow): void {
  db.query("INSERT INTO operators (id, email, password_hash, created_at, updated_at) VALUES ($id, $email, $password_hash, $created_at, $updated_at)").run(row);
}

/** findOperatorByEmail returns the operator with that (lowercased) email, or null. */
export function findOperatorByEmail(db: Database, email: string): OperatorRow | null {
  return db.query<OperatorRow, [string]>("SELECT * FROM operators WHERE email = ?").get(email);
}

/** countOperators counts all operators. */
export function countOperators(db: Database): number {
  return db.query<{ n: number }, []>("SELECT count(*) AS n FROM operators").get()!.n;
}

/** replaceSetupCodes drops every earlier setup code and stores a new one, so only the latest link works. */
export function replaceSetupCodes(db: Database, codeHash: Uint8Array, createdAt: number, expiresAt: number): void {
  db.transaction(() => {
    db.run("DELETE FROM operator_setup_codes");
    db.query("INSERT INTO operator_setup_codes (code_hash, created_at, expires_at) VALUES (?, ?, ?)").run(codeHash, createdAt, expiresAt);
  })();
}

/** setupCodeIsValid tells whether a setup code with this hash exists and is unexpired at `now`. */
export function setupCodeIsValid(db: Database, codeHash: Uint8Array, now: number): boolean {
  return db.query("SELECT 1 FROM operator_setup_codes WHERE code_hash = ? AND expires_at > ?").get(codeHash, now) !== null;
}

/** insertFirstOperator stores the first operator and uses up the setup codes, unless an operator already exists. */
export function insertFirstOperator(db: Database, row: OperatorRow): boolean {
  return db.transaction(() => {
    if (countOperators(db) > 0) return false;
    insertOperator(db, row);
    db.run("DELETE FROM operator_setup_codes");
    return true;
  }).immediate();
}

/** insertSession stores a session by the hash of its id. */
export function insertSession(db: Database, row: SessionRow): void {
  db.query("INSERT INTO operator_sessions (id_hash, operator_id, created_at, last_seen_at) VALUES ($id_hash, $operator_id, $created_at, $last_seen_at)").run(row);
}

/** findSessionWithOperator returns a session seen after `idleSince` and its operator, or null. */
export function findSessionWithOperator(db: Database, idHash: Uint8Array, idleSince: number): (SessionRow & { email: string }) | null {
  return db
    .query<SessionRow & { email: string }, [Uint8Array, number]>(
      `SELECT s.*, o.email FROM operator_sessions s JOIN operators o ON o.id = s.operator_id
       WHERE s.id_hash = ? AND s.last_seen_at > ?`,
    )
    .get(idHash, idleSince);
}

/** touchSession records that a session was used. */
export function touchSession(db: Database, idHash: Uint8Array, at: number): void {
  db.query("UPDATE operator_sessions SET last_seen_at = ? WHERE id_hash = ?").run(at, idHash);
}

/** deleteSession removes one session. */
export function deleteSession(db: Database, idHash: Uint8Array): void {
  db.query("DELETE FROM operator_sessions WHERE id_hash = ?").run(idHash);
}

/** deleteIdleSessions removes sessions not used since `idleSince`. */
export function deleteIdleSessions(db: Database, idleSince: number): void {
  db.query("DELETE FROM operator_sessions WHERE last_seen_at <= ?").run(idleSince);
}

/** findLoginFailures returns the failure count of one scope and subject, or null. */
export function findLoginFailures(db: Database, scope: string, subject: string): LoginFailureRow | null {
  return db.query<LoginFailureRow, [string, string]>("SELECT * FROM login_failures WHERE scope = ? AND subject = ?").get(scope, subject);
}

/** recordLoginFailure counts a failure, starting a new window when the current one began before `windowStartAfter`. */
export function recordLoginFailure(db: Database, scope: string, subject: string, now: number, windowStartAfter: number): void {
  db.query(
    `INSERT INTO login_failures (scope, subject, failures, window_start_at, last_failure_at) VALUES (?1, ?2, 1, ?3, ?3)
     ON CONFLICT (scope, subject) DO UPDATE SET
       failures = CASE WHEN window_start_at > ?4 THEN failures + 1 ELSE 1 END,
       window_start_at = CASE WHEN window_start_at > ?4 THEN window_start_at ELSE ?3 END,
       last_failure_at = ?3`,
  ).run(scope, subject, now, windowStartAfter);
}

/** clearLoginFailures forgets the failures of one scope and subject. */
export function clearLoginFailures(db: Database, scope: string, subject: string): void {
  db.query("DELETE FROM login_failures WHERE scope = ? AND subject = ?").run(scope, subject);
}

/** clearLoginFailuresOfAccount forgets every failure counted against an account, from any address; returns how many records went. */
export function clearLoginFailuresOfAccount(db: Database, email: string, pairSubjectPrefix: string): number {
  return db
    .query("DELETE FROM login_failures WHERE (scope = 'account' AND subject = ?1) OR (scope = 'pair' AND substr(subject, 1, length(?2)) = ?2)")
    .run(email, pairSubjectPrefix).changes;
}

/** deleteLoginFailuresBefore forgets failure windows that started before `cutoff`. */
export function deleteLoginFailuresBefore(db: Database, cutoff: number): void {
  db.query("DELETE FROM login_failures WHERE window_start_at < ?").run(cutoff);
}

/** listOperators returns every operator, oldest first, with when each last used the console. */
export function listOperators(db: Database): (OperatorRow & { last_seen_at: number | null })[] {
  return db
    .query<OperatorRow & { last_seen_at: number | null }, []>(
      `SELECT o.*, (SELECT max(s.last_seen_at) FROM operator_sessions s WHERE s.operator_id = o.id) AS last_seen_at
       FROM operators o ORDER BY o.created_at, o.id`,
    )
    .all();
}

/** findOperatorById returns one operator, or null. */
export function findOperatorById(db: Database, id: string): OperatorRow | null {
  return db.query<OperatorRow, [string]>("SELECT * FROM operators WHERE id = ?").get(id);
}

/** deleteOperator removes an operator (their sessions go with them) unless they are the last one; false when nothing was removed. */
export function deleteOperator(db: Database, id: string): boolean {
  // The count is in the statement, so two operators removing each other at once cannot both succeed.
  return db.query("DELETE FROM operators WHERE id = ? AND (SELECT count(*) FROM operators) > 1").run(id).changes > 0;
}

/** updateOperatorPassword sets an operator's password hash and ends every session of theirs; false when no such operator. */
export function updateOperatorPassword(db: Database, id: string, passwordHash: string, now: number): boolean {
  return db.transaction(() => {
    const changed = db.query("UPDATE operators SET password_hash = ?, updated_at = ? WHERE id = ?").run(passwordHash, now, id).changes > 0;
    db.query("DELETE FROM operator_sessions WHERE operator_id = ?").run(id);
    return changed;
  })();
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

/** replaceOperatorLink stores a link, and drops earlier links for the same email and purpose so only the newest works. */
export function replaceOperatorLink(db: Database, row: OperatorLinkRow): void {
  db.transaction(() => {
    db.query("DELETE FROM operator_links WHERE email = ? AND purpose = ?").run(row.email, row.purpose);
    db.query("INSERT INTO operator_links (code_hash, purpose, email, created_by, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)").run(
      row.code_hash,
      row.purpose,
      row.email,
      row.created_by,
      row.created_at,
      row.expires_at,
    );
  })();
}

/** findOperatorLink returns an unexpired link by the hash of its code, or null. */
export function findOperatorLink(db: Database, codeHash: Uint8Array, now: number): OperatorLinkRow | null {
  return db.query<OperatorLinkRow, [Uint8Array, number]>("SELECT * FROM operator_links WHERE code_hash = ? AND expires_at > ?").get(codeHash, now);
}

/** listPendingInvites returns the unexpired invitations, newest first. */
export function listPendingInvites(db: Database, now: number): OperatorLinkRow[] {
  return db.query<OperatorLinkRow, [number]>("SELECT * FROM operator_links WHERE purpose = 'invite' AND expires_at > ? ORDER BY created_at DESC").all(now);
}

/** deleteOperatorLink uses up a link; false when it was already used (two tabs racing). */
export function deleteOperatorLink(db: Database, codeHash: Uint8Array): boolean {
  return db.query("DELETE FROM operator_links WHERE code_hash = ?").run(codeHash).changes > 0;
}

/** deleteOperatorLinksOf drops every link naming an email (an operator removed, or an invitation withdrawn). */
export function deleteOperatorLinksOf(db: Database, email: string): void {
  db.query("DELETE FROM operator_links WHERE email = ?").run(email);
}
