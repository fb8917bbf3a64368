import type { Database } from "bun:sqlite";

/**
 * probeWrite takes the write lock and changes the database header inside a transaction that is
 * rolled back: it fails when the file is read-only or another writer holds the lock too long.
 * user_version is used because, unlike a schema change, it does not expire prepared statements.
 */
export function probeWrite(db: Database): void {
  db.run("BEGIN IMMEDIATE");
  try {
    const { user_version } = db.query<{ user_version: number }, []>("PRAGMA user_version").get()!;
    db.run(`PRAGMA user_version = ${user_version + 1}`);
  } finally {
    db.run("ROLLBACK");
  }
}

/** vacuumInto writes a consistent, compacted copy of the database to an empty or missing file. */
export function vacuumInto(db: Database, file: string): void {
  db.run("VACUUM INTO ?", [file]);
}

/** quickCheck runs SQLite's structural check and returns its verdict ("ok" when sound). */
export function quickCheck(db: Database): string {
  return db
    .query<{ quick_check: string }, []>("PRAGMA quick_check")
    .all()
    .map((row) => row.quick_check)
    .join("; ");
}
