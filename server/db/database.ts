import { Database, type SQLQueryBindings, type Statement } from "bun:sqlite";
import { accessSync, chmodSync, constants, existsSync, mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { ConfigError, type Synchronous } from "../config.ts";

/** MAX_CACHED_STATEMENTS bounds the statement cache; the app's SQL, filters and IN-list lengths included, stays well below it. */
const MAX_CACHED_STATEMENTS = 2000;

/**
 * StatementCachingDatabase keeps every statement that `query` prepared. bun:sqlite's own cache
 * holds only the 20 most recent, and the API, the delivery loop and the console use many more,
 * so mixed traffic would prepare SQL again on most queries (~3.5 us each for a trivial one).
 */
class StatementCachingDatabase extends Database {
  private readonly statements = new Map<string, Statement<any, any>>();

  override query<ReturnType, ParamsType extends SQLQueryBindings | SQLQueryBindings[]>(sql: string): Statement<ReturnType, ParamsType extends any[] ? ParamsType : [ParamsType]> {
    let statement = this.statements.get(sql);
    if (!statement) {
      // The oldest is dropped, not finalized: a caller may still hold it; the garbage collector frees it.
      if (this.statements.size >= MAX_CACHED_STATEMENTS) this.statements.delete(this.statements.keys().next().value!);
      statement = this.prepare(sql);
      this.statements.set(sql, statement);
    }
    return statement as Statement<ReturnType, ParamsType extends any[] ? ParamsType : [ParamsType]>;
  }

  override close(throwOnError?: boolean): void {
    for (const statement of this.statements.values()) statement.finalize();
    this.statements.clear();
    super.close(throwOnError);
  }
}

/**
 * openDatabase opens the service's SQLite file once with the pragmas every connection needs.
 * "full" (the default) syncs the WAL on every commit, so an answered write survives power loss;
 * group commit makes that one sync per batch of concurrent writes rather than one per request.
 */
export function openDatabase(path: string, synchronous: Synchronous = "full"): Database {
  const db = new StatementCachingDatabase(path, { create: true, strict: true });
  db.run("PRAGMA journal_mode = WAL");
  db.run(synchronous === "full" ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL");
  db.run("PRAGMA foreign_keys = ON");
  db.run("PRAGMA busy_timeout = 5000");
  // bun:sqlite's default 2 MB page cache would re-read count(*) indexes from disk on every request.
  db.run("PRAGMA cache_size = -16000");
  db.run("PRAGMA temp_store = MEMORY");
  if (path !== ":memory:") {
    for (const file of [path, `${path}-wal`, `${path}-shm`]) {
      if (existsSync(file)) chmodSync(file, 0o600);
    }
  }
  return db;
}

/**
 * databasePath returns the SQLite file inside a data directory, creating the directory (0700) if
 * needed; a directory that cannot be used is a ConfigError, reported as one line naming the setting.
 */
export function databasePath(dataDir: string): string {
  try {
    if (!existsSync(dataDir)) mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    if (!statSync(dataDir).isDirectory()) throw new Error("it is not a directory");
    accessSync(dataDir, constants.R_OK | constants.W_OK);
  } catch (error) {
    throw new ConfigError(`invalid data directory ${JSON.stringify(dataDir)} (--data-dir, CRM_DATA_DIR): ${(error as Error).message}`);
  }
  return databaseFile(dataDir);
}

/** databaseFile is where a data directory keeps its SQLite database; nothing is created. */
export function databaseFile(dataDir: string): string {
  return join(dataDir, "crm.sqlite");
}
