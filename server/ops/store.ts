import type { Database as SqliteConnection } from "bun:sqlite";
import type { Database } from "../db/sql.ts";

/** ProbeRolledBack ends the probe's write so that it is rolled back. */
class ProbeRolledBack extends Error {}

/** PROBE_ROW moves the applied_at of the last migration by its parameter: probeWrite's change. */
const PROBE_ROW = "UPDATE schema_migrations SET applied_at = applied_at + ? WHERE version = (SELECT max(version) FROM schema_migrations)";

/**
 * probeWrite takes the write lock and changes a row: it fails when the database or its storage is
 * read-only or another writer holds the lock too long. PostgreSQL refuses the statement itself on
 * a read-only server, so there the change is rolled back. SQLite writes its files only at the
 * commit, which a file system turned read-only under the running service refuses alone, so there
 * the row is put back as it was and committed: SQLite writes no page for a row rewritten as it is,
 * but does for one changed and put back. A row of schema_migrations is changed because, unlike a
 * schema change, it does not expire prepared statements, and the statement stays the same
 * (cached) on every probe.
 */
export async function probeWrite(db: Database): Promise<void> {
  try {
    await db.write(async (tx) => {
      await tx.run(PROBE_ROW, [1]);
      if (tx.dialect === "postgres") throw new ProbeRolledBack();
      await tx.run(PROBE_ROW, [-1]);
    });
  } catch (error) {
    if (!(error instanceof ProbeRolledBack)) throw error;
  }
}

/** vacuumInto writes a consistent, compacted copy of the database to an empty or missing file. */
// sqlite-only: VACUUM INTO is SQLite's online copy.
export function vacuumInto(db: SqliteConnection, file: string): void {
  db.run("VACUUM INTO ?", [file]);
}

/** quickCheck runs SQLite's structural check and returns its verdict ("ok" when sound). */
// sqlite-only: PRAGMA quick_check.
export function quickCheck(db: SqliteConnection): string {
  return db
    .query<{ quick_check: string }, []>("PRAGMA quick_check")
    .all()
    .map((row) => row.quick_check)
    .join("; ");
}

/** vacuumInPlace rebuilds the database file and empties its WAL: no free page or old log frame keeps what was overwritten or deleted; it throws when either is left undone. */
// sqlite-only: VACUUM and wal_checkpoint rewrite SQLite's own files.
export function vacuumInPlace(db: SqliteConnection): void {
  db.run("VACUUM");
  // A reader's open snapshot holds the checkpoint back without an error: the rebuilt pages stay in the log and the file keeps the old ones.
  const { busy } = db.query<{ busy: number }, []>("PRAGMA wal_checkpoint(TRUNCATE)").get()!;
  if (busy !== 0) throw new Error("another process reads the database (a sqlite3 session, a crm backup), so its log could not be written into the file");
}
