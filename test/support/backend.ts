import { test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Config } from "../../server/config.ts";
import { migratePostgres } from "../../server/db/postgres-migrations.ts";
import { openPostgres } from "../../server/db/postgres.ts";
import { createTestDatabase, inBackground, type TestDatabase } from "./postgres.ts";

/**
 * TEST_BACKEND is the database the test apps run on: SQLite unless CRM_TEST_BACKEND=postgres.
 * test/run.ts runs the API, webhook, console, import and limits folders once on each.
 */
export const TEST_BACKEND: "sqlite" | "postgres" = process.env.CRM_TEST_BACKEND === "postgres" ? "postgres" : "sqlite";

let migrated: Promise<string> | null = null;
let nextCopy: Promise<TestDatabase> | null = null;

/**
 * migratedTemplate creates one migrated database per test run that every test app's database is
 * copied from: a copy takes about a third of the time of migrating an empty one.
 */
async function migratedTemplate(): Promise<string> {
  const template = await createTestDatabase();
  const db = await openPostgres(template.url, 1);
  try {
    await migratePostgres(db);
  } finally {
    await db.close();
  }
  return template.name;
}

/**
 * templateCopy returns a fresh copy of the migrated template and starts making the next one: a
 * copy (its files copied between two checkpoints) is then made while the test before runs, most
 * of which waits, instead of before each test.
 */
function templateCopy(): Promise<TestDatabase> {
  migrated ??= migratedTemplate();
  const template = migrated;
  const makeCopy = () => template.then((name) => createTestDatabase(name));
  const copy = nextCopy ?? makeCopy();
  nextCopy = copy.then(makeCopy, makeCopy);
  // Settled before the server stops; its failure is the next test's, which takes it.
  inBackground(nextCopy.catch(() => {}));
  return copy;
}

/** TestBackend is the configuration that points one test app at its database, and how to remove it. */
export interface TestBackend {
  config: Pick<Config, "databaseUrl" | "secretsKeyFile">;
  drop(): Promise<void>;
}

/**
 * testBackend prepares the database of one test app: nothing on SQLite (the app opens the data
 * directory's file), a fresh database on the shared PostgreSQL test server otherwise, with a
 * secrets key file in the data directory (PostgreSQL needs one named explicitly).
 */
export async function testBackend(dataDir: string): Promise<TestBackend> {
  if (TEST_BACKEND === "sqlite") return { config: { databaseUrl: "", secretsKeyFile: "" }, drop: async () => {} };
  const database = await templateCopy();
  const secretsKeyFile = writeSecretsKeyFile(join(dataDir, "secrets.key"));
  // Nothing connects to a dropped test database again: the next test need not wait for the drop.
  return { config: { databaseUrl: database.url, secretsKeyFile }, drop: async () => inBackground(database.drop()) };
}

/**
 * writeSecretsKeyFile writes a secrets key file (0600) as an operator makes one, base64 of 32
 * bytes: random, or each byte `fill` for a key a test tells apart; it returns the path.
 */
export function writeSecretsKeyFile(path: string, fill?: number): string {
  const key = fill === undefined ? crypto.getRandomValues(new Uint8Array(32)) : new Uint8Array(32).fill(fill);
  writeFileSync(path, `${Buffer.from(key).toString("base64")}\n`, { mode: 0o600 });
  return path;
}

/**
 * sqliteOnly is `test` on SQLite and registers nothing on PostgreSQL: for the tests of a shared
 * file that are about SQLite itself (its files, PRAGMAs, query plans). Whole files about SQLite
 * are listed in test/run.ts instead.
 */
export const sqliteOnly: typeof test = TEST_BACKEND === "sqlite" ? test : (Object.assign(() => {}, test) as typeof test);

/** postgresOnly is `test` on PostgreSQL and registers nothing on SQLite: for the tests of a shared file that need a PostgreSQL feature. */
export const postgresOnly: typeof test = TEST_BACKEND === "postgres" ? test : (Object.assign(() => {}, test) as typeof test);

/** databaseArgs are the command-line options that point a `crm` command at a test app's database, and on PostgreSQL at its secrets key file (`operator unlock` and `reset-password` read it). */
export function databaseArgs(config: Pick<Config, "databaseUrl" | "dataDir" | "secretsKeyFile">): string[] {
  return config.databaseUrl ? ["--database-url", config.databaseUrl, "--secrets-key-file", config.secretsKeyFile] : ["--data-dir", config.dataDir];
}
