import type { Config } from "../config.ts";
import type { SecretBox } from "../webhooks/secrets.ts";
import { databasePath, openDatabase, type SqliteDatabase } from "./database.ts";
import { MIGRATIONS, migrate } from "./migrations.ts";
import { POSTGRES_MIGRATIONS, migratePostgres } from "./postgres-migrations.ts";
import { openPostgres, type PostgresDatabase } from "./postgres.ts";
import type { Dialect } from "./sql.ts";

/** Backend is an opened database of either kind; `dialect` tells which, for the few callers that must know (migrations, backup). */
export type Backend = SqliteDatabase | PostgresDatabase;

/** openBackend opens the configured database: PostgreSQL when --database-url is set, else SQLite in the data directory. */
export async function openBackend(config: Pick<Config, "databaseUrl" | "databasePool" | "dataDir" | "synchronous">): Promise<Backend> {
  if (config.databaseUrl) return openPostgres(config.databaseUrl, config.databasePool);
  return openDatabase(databasePath(config.dataDir), config.synchronous);
}

/**
 * migrateBackend applies the pending migrations of the backend's own list and returns their names.
 * `secrets` opens the signing-secrets key, asked for only by the SQLite migration that seals secrets.
 */
export function migrateBackend(db: Backend, secrets: () => SecretBox): Promise<string[]> {
  if (db.dialect === "postgres") return migratePostgres(db);
  return Promise.resolve(migrate(db.sqlite, MIGRATIONS, { secrets }));
}

/** migrationList lists, by version, every migration a backend's schema is built from (what /readyz expects applied). */
export function migrationList(dialect: Dialect): readonly { version: number; name: string }[] {
  return dialect === "postgres" ? POSTGRES_MIGRATIONS : MIGRATIONS;
}

/** DatabaseFailure is a database's refusal that is no fault of the request: it has no room left, or it cannot be used just now. */
export type DatabaseFailure = "storage-full" | "unavailable";

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
 * standby (25006), or a statement cancelled by the operator's statement_timeout or by hand (57014)
 * or given up on by their lock_timeout (55P03).
 * Class 08 (connection exceptions) is matched by its prefix.
 */
const POSTGRES_UNAVAILABLE_STATES = new Set(["57P01", "57P02", "57P03", "53300", "25006", "57014", "55P03"]);

/**
 * databaseFailureOf tells whether an error is the database's own passing failure, of either
 * backend: "storage-full" for a full disk (SQLITE_FULL, PostgreSQL's 53100), "unavailable" for a
 * database that cannot be reached or used just now (a PostgreSQL server down, restarting or out of
 * connections; SQLite locked by another process past the busy timeout); null for anything else.
 */
export function databaseFailureOf(error: unknown): DatabaseFailure | null {
  const { code, errno } = (error ?? {}) as { code?: unknown; errno?: unknown };
  if (code === "SQLITE_FULL" || errno === "53100") return "storage-full";
  if (typeof code === "string" && (code === "SQLITE_BUSY" || code.startsWith("SQLITE_BUSY_") || POSTGRES_CONNECTION_FAILURES.has(code))) return "unavailable";
  if (typeof errno === "string" && (errno.startsWith("08") || POSTGRES_UNAVAILABLE_STATES.has(errno))) return "unavailable";
  return null;
}
