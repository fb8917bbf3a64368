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
