import { ConfigError, type Config, type Synchronous } from "../config.ts";
import { BUILD } from "../version.ts";
import type { SecretBox } from "../webhooks/secrets.ts";
import { DatabaseReplaced, databasePath, isSqliteBusy, openDatabase, openDatabaseAlone, syncFailedCode, type SqliteDatabase } from "./database.ts";
import { MIGRATIONS, migrate } from "./migrations.ts";
import { POSTGRES_MIGRATIONS, migratePostgres } from "./postgres-migrations.ts";
import { DatabaseNewer, DatabaseNotAnswering, LOCK_TIMEOUT_STATE, openPostgres, schemaChangedUnder, type PostgresDatabase } from "./postgres.ts";
import type { Db, Dialect, MigrationWarn } from "./sql.ts";
import { isStorageFull } from "./write-groups.ts";
import { errorCode, sqlStateOf } from "../shared/thrown.ts";

/** Backend is an opened database of either kind; `dialect` tells which, for the few callers that must know (migrations, backup). */
export type Backend = SqliteDatabase | PostgresDatabase;

/** openBackend opens the configured database: PostgreSQL when --database-url is set, else SQLite in the data directory. */
export async function openBackend(config: Pick<Config, "databaseUrl" | "databaseUrlFrom" | "databaseSchema" | "databasePool" | "databaseAnswerTimeoutSeconds" | "databaseIdleTimeoutSeconds" | "dataDir" | "synchronous">): Promise<Backend> {
  if (config.databaseUrl) return openPostgres(config.databaseUrl, config.databasePool, config);
  return openDatabase(databasePath(config.dataDir), config.synchronous);
}

/**
 * migrateBackend applies the pending migrations of the backend's own list and returns their names,
 * after refuseNewerDatabase. `secrets` opens the signing-secrets key, asked for only by the SQLite
 * migration that seals secrets; `warn` gets what a migration tells the operator, once it committed.
 */
export async function migrateBackend(db: Backend, secrets: () => SecretBox, warn: MigrationWarn): Promise<string[]> {
  const { pending } = await refuseNewerDatabase(db);
  // Only the pending ones are looked at again under the lock: with none, no write is made, and a
  // read-only role (a standby's, or default_transaction_read_only) runs the commands that only read.
  if (db.dialect === "postgres") return migratePostgres(db, POSTGRES_MIGRATIONS.filter((m) => pending.includes(m.name)), warn);
  const applied = db.waitingForLocks((writer) => migrate(writer, MIGRATIONS, { secrets, warn }));
  // The check above read in this turn's snapshot, which does not see the tables just created.
  db.refreshReads();
  return applied;
}

/**
 * migrateAlone applies the migrations pending in the SQLite file at `path` (`pending`, as found on
 * a connection since closed) on a connection that has the file to itself (openDatabaseAlone), and
 * returns their names. While another process has the file open the change is refused: a serve
 * still running there (the old version, during an upgrade) would have its schema changed under it.
 */
export async function migrateAlone(path: string, synchronous: Synchronous, pending: string[], secrets: () => SecretBox, warn: MigrationWarn): Promise<string[]> {
  const alone = openDatabaseAlone(path, synchronous);
  if (!alone) {
    throw new ConfigError(
      `the database ${path} is open in another process that holds no crm.lock (a crm serve from before 2026-11-27, a crm command under way, or another program such as sqlite3): stop it before the schema is changed (pending: ${pending.join(", ")})`,
    );
  }
  try {
    return await migrateBackend(alone, secrets, warn);
  } finally {
    await alone.close();
  }
}

/** findAppliedMigrations returns the migrations a database records as applied, by version; null before the first migration (no schema_migrations). */
async function findAppliedMigrations(db: Db): Promise<{ version: number; name: string }[] | null> {
  const present =
    db.dialect === "postgres"
      ? // In the sessions' own schema: the extensions' schema after it on their search_path may hold another installation's.
        await db.get("SELECT 1 AS present WHERE to_regclass(format('%I.schema_migrations', current_schema())) IS NOT NULL")
      : await db.get("SELECT 1 AS present FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'");
  return present ? db.all<{ version: number; name: string }>("SELECT version, name FROM schema_migrations ORDER BY version") : null;
}

/**
 * refuseNewerDatabase throws a ConfigError when the database records a migration this binary does
 * not know: a newer crm migrated it (an upgrade rolled back by binary alone, or an old instance
 * started beside upgraded ones), and this code would read and write a schema it was not written for.
 * Otherwise it returns the migration state it read.
 */
export async function refuseNewerDatabase(db: Db): Promise<MigrationState> {
  const state = await migrationState(db);
  const { newer } = state;
  if (newer.length === 0) return state;
  throw new ConfigError(
    `the database was migrated by a newer crm: it has ${newer.join(", ")}, which crm ${BUILD} does not know. Run the newer crm, or restore the backup taken before the upgrade`,
  );
}

/** MigrationState compares a database's applied migrations with this binary's list, by name. */
export interface MigrationState {
  /** this binary's migrations the database has not applied */
  pending: string[];
  /** migrations the database has applied that this binary does not know: a newer crm applied them */
  newer: string[];
  /** whether the database records migrations at all (has schema_migrations): not before the first, nor once its tables are gone */
  recorded: boolean;
}

/** migrationState reads which migrations a database lacks and which it has that this binary does not know. */
export async function migrationState(db: Db): Promise<MigrationState> {
  const recorded = await findAppliedMigrations(db);
  const applied = recorded ?? [];
  const known = migrationList(db.dialect);
  const appliedVersions = new Set(applied.map((m) => m.version));
  const knownVersions = new Set(known.map((m) => m.version));
  return {
    pending: known.filter((m) => !appliedVersions.has(m.version)).map((m) => m.name),
    newer: applied.filter((m) => !knownVersions.has(m.version)).map((m) => m.name),
    recorded: recorded !== null,
  };
}

/** migrationList lists, by version, every migration a backend's schema is built from (what /readyz expects applied). */
function migrationList(dialect: Dialect): readonly { version: number; name: string }[] {
  return dialect === "postgres" ? POSTGRES_MIGRATIONS : MIGRATIONS;
}

/**
 * DatabaseFailure is a database's refusal that is no fault of the request: it has no room left, its
 * storage takes no writes or failed a sync to disk, its file was replaced under the service, it
 * cannot be used just now, another session holds a lock the request needs, or a newer crm migrated
 * it under this instance (found by a write under the write lock, or by a statement whose table changed).
 */
export type DatabaseFailure = "storage-full" | "storage-read-only" | "storage-failed" | "replaced" | "unavailable" | "busy" | "newer";

/**
 * SQLITE_UNWRITABLE are the SQLite codes of a write its storage refused: the file opened read-only
 * (SQLITE_READONLY and its extended codes), or a write to the file failing, as every write does on
 * a file system the kernel turned read-only under the running service (errors=remount-ro), whose
 * EROFS SQLite reports as SQLITE_IOERR_WRITE. Either rolls the transaction back.
 */
const SQLITE_UNWRITABLE = /^SQLITE_(READONLY(_\w+)?|IOERR_WRITE)$/;

/** POSTGRES_CONNECTION_FAILURES are Bun's client's codes for a connection that could not be opened or was lost. */
const POSTGRES_CONNECTION_FAILURES = new Set([
  "ERR_POSTGRES_CONNECTION_CLOSED",
  "ERR_POSTGRES_CONNECTION_FAILED",
  "ERR_POSTGRES_CONNECTION_REFUSED",
  "ERR_POSTGRES_CONNECTION_TIMEOUT",
  "ERR_POSTGRES_IDLE_TIMEOUT",
  "ERR_POSTGRES_LIFETIME_TIMEOUT",
]);

/**
 * POSTGRES_UNAVAILABLE_STATES are the SQLSTATEs of a server that cannot serve just now: shutting
 * down or restarting (57P01-57P03), out of connections (53300), read-only after a failover to a
 * standby (25006), or a statement cancelled by the operator's statement_timeout or by hand (57014).
 * Class 08 (connection exceptions) is matched by its prefix.
 */
const POSTGRES_UNAVAILABLE_STATES = new Set(["57P01", "57P02", "57P03", "53300", "25006", "57014"]);

/**
 * DatabaseFault is a PostgreSQL refusal of what the service was set up with, rather than of the
 * moment: its login (a changed password, LOGIN revoked, a pg_hba.conf change: class 28), its
 * database (3D000: dropped or renamed) or its tables (42P01: the database made again empty; the
 * service's SQL names no other table, as every test runs it). Every request meets it until the operator acts, and
 * each is refused as "unavailable", so the service recovers by itself once it is mended.
 */
export type DatabaseFault = "login-refused" | "database-missing" | "tables-missing";

/** databaseFaultOf tells which DatabaseFault an error is, or null for any other. */
export function databaseFaultOf(error: unknown): DatabaseFault | null {
  const state = sqlStateOf(error);
  if (state === undefined) return null;
  if (state.startsWith("28")) return "login-refused";
  if (state === "3D000") return "database-missing";
  if (state === "42P01") return "tables-missing";
  return null;
}

/** tablesHomeOf names the PostgreSQL database and schema the settings give the service's tables (the database is the user's when the URL names none, as the server takes it). */
export function tablesHomeOf(config: Pick<Config, "databaseUrl" | "databaseSchema">): string {
  const url = new URL(config.databaseUrl);
  const database = decodeURIComponent(url.pathname.slice(1)) || decodeURIComponent(url.username);
  return `database ${JSON.stringify(database)}, schema ${JSON.stringify(config.databaseSchema || "public")}`;
}

/**
 * tablesMissing says that the service's tables are gone from `home` (tablesHomeOf): the database
 * was dropped and made again empty, or restored without them. An instance never makes them again
 * by itself: it would serve an empty CRM to clients that hold ids and tokens of the old one.
 */
export function tablesMissing(home: string): string {
  return `the service's tables are missing from ${home}: was the database recreated? run crm migrate, or restore a backup`;
}

/**
 * databaseFailureOf tells whether an error is the database's own passing failure, of either
 * backend: "storage-full" for a full disk (SQLITE_FULL, PostgreSQL's 53100), "storage-read-only"
 * for a SQLite file or file system that takes no writes (SQLITE_UNWRITABLE), "storage-failed" for a
 * failed sync to disk (syncFailedCode), "replaced" for a write refused since the SQLite file was
 * replaced under the service (DatabaseReplaced), "unavailable" for a
 * database that cannot be reached or used just now (a PostgreSQL server down, restarting, out of
 * connections, not answering, or refusing the service's login or database: databaseFaultOf;
 * SQLite locked by another process past the busy timeout), "busy" for a PostgreSQL statement
 * that waited for a lock another session holds until its lock_timeout (55P03:
 * PostgresDatabase); null for anything else.
 */
export function databaseFailureOf(error: unknown): DatabaseFailure | null {
  if (error instanceof DatabaseNotAnswering) return "unavailable";
  if (error instanceof DatabaseReplaced) return "replaced";
  if (error instanceof DatabaseNewer || schemaChangedUnder(error)) return "newer";
  if (syncFailedCode(error) !== null) return "storage-failed";
  const code = errorCode(error);
  const state = sqlStateOf(error);
  if (isStorageFull(error)) return "storage-full";
  if (state === LOCK_TIMEOUT_STATE) return "busy";
  if (code !== undefined && SQLITE_UNWRITABLE.test(code)) return "storage-read-only";
  if (isSqliteBusy(error) || (code !== undefined && POSTGRES_CONNECTION_FAILURES.has(code))) return "unavailable";
  if (state !== undefined && (state.startsWith("08") || POSTGRES_UNAVAILABLE_STATES.has(state))) return "unavailable";
  if (databaseFaultOf(error) !== null) return "unavailable";
  return null;
}
