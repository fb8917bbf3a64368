import { Database } from "bun:sqlite";
import { accessSync, chmodSync, constants, existsSync, mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { ConfigError } from "../config.ts";

/** openDatabase opens the service's SQLite file once with the pragmas every connection needs. */
export function openDatabase(path: string): Database {
  const db = new Database(path, { create: true, strict: true });
  db.run("PRAGMA journal_mode = WAL");
  db.run("PRAGMA synchronous = NORMAL");
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
  return join(dataDir, "crm.sqlite");
}
