import type { Database as SqliteConnection } from "bun:sqlite";
import type { Database } from "../db/sql.ts";

/** ProbeRolledBack ends the probe's write so that it is rolled back. */
class ProbeRolledBack extends Error {}

/**
 * probeWrite takes the write lock and changes a row inside a savepoint that is rolled back: it
 * fails when the file is read-only or another writer holds the lock too long. A row of
 * schema_migrations is rewritten because, unlike a schema change, it does not expire prepared
 * statements, and the statement stays the same (cached) on every probe.
 */
export async function probeWrite(db: Database): Promise<void> {
  try {
    await db.write(async (tx) => {
      await tx.run("UPDATE schema_migrations SET applied_at = applied_at WHERE version = (SELECT max(version) FROM schema_migrations)");
      throw new ProbeRolledBack();
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
