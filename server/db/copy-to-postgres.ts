import type { Database as SqliteConnection } from "bun:sqlite";
import { ConfigError, redactedUrl, type Config } from "../config.ts";
import { withoutNul } from "../shared/text.ts";
import { LATEST_TIMESTAMP_MS } from "../shared/time.ts";
import { openPostgres, type PostgresDatabase, type PostgresDb } from "./postgres.ts";
import { migratePostgres } from "./postgres-migrations.ts";
import type { SqlValue } from "./sql.ts";
import { printOut } from "../shared/output.ts";

/** COPY_BATCH_ROWS is how many rows one multi-row INSERT carries at most. */
const COPY_BATCH_ROWS = 1000;

/** MAX_PARAMETERS stays under PostgreSQL's 65,535 parameters per statement. */
const MAX_PARAMETERS = 60_000;

/** PROGRESS_BAR_WIDTH is the number of characters of the bar drawn on a terminal. */
const PROGRESS_BAR_WIDTH = 30;

/** COPY_USAGE is what `crm copy-to-postgres --help` prints. */
export const COPY_USAGE = `usage: CRM_DATABASE_URL=postgres://USER:PASSWORD@HOST:PORT/DATABASE crm copy-to-postgres [--data-dir DIR]

Copies the SQLite database of a data directory (migrated to the latest version first) into an
empty PostgreSQL database: the PostgreSQL migrations are applied, then every table is copied in
one transaction with its ids and timestamps unchanged; pending webhook deliveries stay pending.
Stop the service first, so that nothing changes during the copy. A target that already holds
any row (a one-time setup link and a key's check value aside) is refused (exit 2) and left alone. Progress goes to stderr, the rows copied per table
to stdout. The URL may also come from database_url or database_url_file in the --config file
(a file holding the URL alone on one line). --database-url takes it too, but an argument is
visible to every local user (ps) for as long as the copy runs, password and all.
`;

/** SqliteSource is the opened data directory: its SQLite connection, and how to close it. */
export interface SqliteSource {
  readonly sqlite: SqliteConnection;
  close(): unknown;
}

/** CopyRefused is a target that cannot take the copy (it holds data, or lacks a table); copyToPostgresCommand prints it as one line. */
class CopyRefused extends Error {}

/** CopyFailed is a copy that stopped part-way and was rolled back; copyToPostgresCommand prints it as one line. */
class CopyFailed extends Error {}

/** CopyProgress is where the copy reports, table by table (stderr in the command). */
export interface CopyProgress {
  isTTY?: boolean;
  write(text: string): unknown;
}

/** TableCopy is one table to copy: its shared columns, the key it is read in order of, its row count. */
interface TableCopy {
  name: string;
  columns: string[];
  key: string[];
  rows: number;
}

/** CopyResult is how many rows each table received, in the order they were copied. */
export type CopyResult = { table: string; rows: number }[];

const quote = (name: string) => `"${name.replaceAll('"', '""')}"`;

/**
 * sqliteTablesToCopy lists the service's tables in foreign-key order (a referenced table before
 * the tables pointing at it), without SQLite's own tables, virtual tables such as the FTS5 index
 * and their shadow tables, and schema_migrations (PostgreSQL keeps its own).
 */
function sqliteTablesToCopy(sqlite: SqliteConnection): string[] {
  const all = sqlite.query<{ name: string; sql: string }, []>("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name").all();
  const virtual = all.filter((t) => /^CREATE VIRTUAL TABLE/i.test(t.sql)).map((t) => t.name);
  const names = all
    .map((t) => t.name)
    .filter((name) => !name.startsWith("sqlite_") && name !== "schema_migrations" && !virtual.some((v) => name === v || name.startsWith(`${v}_`)));
  const ordered: string[] = [];
  const visit = (name: string, path: string[]) => {
    if (ordered.includes(name) || path.includes(name)) return;
    const referenced = sqlite.query<{ table: string }, [string]>("SELECT DISTINCT \"table\" FROM pragma_foreign_key_list(?)").all(name);
    for (const { table } of referenced) if (table !== name && names.includes(table)) visit(table, [...path, name]);
    ordered.push(name);
  };
  for (const name of names) visit(name, []);
  return ordered;
}

/** planCopy pairs each SQLite table with its PostgreSQL counterpart; a missing one refuses the copy. */
async function planCopy(sqlite: SqliteConnection, target: PostgresDb): Promise<TableCopy[]> {
  const plan: TableCopy[] = [];
  for (const name of sqliteTablesToCopy(sqlite)) {
    const sqliteColumns = sqlite.query<{ name: string; pk: number }, [string]>("SELECT name, pk FROM pragma_table_info(?) ORDER BY cid").all(name);
    const targetColumns = new Set(
      (await target.all<{ name: string }>(
        "SELECT column_name AS name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ? AND is_generated = 'NEVER'",
        [name],
      )).map((c) => c.name),
    );
    if (targetColumns.size === 0) throw new CopyRefused(`the PostgreSQL database has no table ${name}; is this binary older than the data directory?`);
    const key = sqliteColumns.filter((c) => c.pk > 0).sort((a, b) => a.pk - b.pk).map((c) => c.name);
    if (key.length === 0) throw new CopyRefused(`table ${name} has no primary key to read it in order by`);
    const { rows } = sqlite.query<{ rows: number }, []>(`SELECT count(*) AS rows FROM ${quote(name)}`).get()!;
    plan.push({ name, columns: sqliteColumns.map((c) => c.name).filter((c) => targetColumns.has(c)), key, rows });
  }
  return plan;
}

/**
 * REPLACED_TABLES hold rows the copy replaces rather than refuses: the counts a migration seeds, and
 * what a `serve` stores on its first start, the one-time setup link (without operators) and the
 * check value of its secrets key (a start made to check the connection would otherwise make the
 * database refuse every copy). The copied data is sealed with the data directory's key, so its
 * check value, or none (a data directory never served since the check value), replaces the target's.
 */
const REPLACED_TABLES = new Set(["row_counts", "operator_setup_codes", "secrets_key_check"]);

/**
 * refuseNonEmptyTarget checks that none of the service's tables that exist on the target holds a
 * row (schema_migrations and REPLACED_TABLES aside): before the migrations, and again inside the
 * copy's write, which holds the service's write lock, so a row written in between is refused too.
 */
async function refuseNonEmptyTarget(tables: string[], target: PostgresDb, url: string): Promise<void> {
  const occupied: string[] = [];
  for (const table of tables) {
    if (REPLACED_TABLES.has(table)) continue;
    // In the sessions' own schema: before the migrations, a name it lacks would be found in the extensions' schema after it on their search_path, another application's table.
    const exists = await target.get<{ exists: string | null }>("SELECT to_regclass(format('%I.%I', current_schema(), ?::text))::text AS exists", [table]);
    if (exists?.exists && (await target.get(`SELECT 1 AS found FROM ${quote(table)} LIMIT 1`))) occupied.push(table);
  }
  if (occupied.length > 0) {
    throw new CopyRefused(`the PostgreSQL database at ${redactedUrl(url)} already holds data (in ${occupied.join(", ")}); copy-to-postgres copies only into an empty database`);
  }
}

/**
 * JSON_COLUMNS hold JSON the service serialised from request bodies, in which versions before
 * 2026-11-27 (they took the NUL character in bodies) wrote a NUL as the escape `\u0000`: PostgreSQL
 * stores that in text, but jsonb refuses it, and events' payloads are read as jsonb.
 */
const JSON_COLUMNS = new Set(["accounts.properties", "contacts.properties", "events.payload", "idempotency_keys.response_body"]);

/**
 * JSON_ESCAPE walks the escapes of JSON text one at a time, so that an escaped backslash followed
 * by "u0000" (the text \u0000, no NUL) is not taken for a NUL's escape.
 */
const JSON_ESCAPE = /\\(u0000|[^])/g;

/**
 * UNBOUNDED_TIME_COLUMNS hold instants that versions before retry delays were capped (30 days)
 * could store past any date: a pending delivery's next attempt, after a delay of any size, up to
 * 1e23 ms, which PostgreSQL's bigint refuses. The copy stores such an instant as the last one a
 * timestamp writes (LATEST_TIMESTAMP_MS), the next attempt the API already shows for it: the
 * delivery stays pending and still never comes due, as on SQLite, rather than being attempted
 * again, long stale, at a date the copy would make up.
 */
const UNBOUNDED_TIME_COLUMNS = new Set(["webhook_deliveries.next_attempt_at"]);

/** ColumnKind is what a column holds that PostgreSQL may refuse as SQLite stored it. */
type ColumnKind = "json" | "unbounded-time" | "other";

/** columnKind is the kind of `table`.`column` (JSON_COLUMNS, UNBOUNDED_TIME_COLUMNS). */
function columnKind(table: string, column: string): ColumnKind {
  const name = `${table}.${column}`;
  return JSON_COLUMNS.has(name) ? "json" : UNBOUNDED_TIME_COLUMNS.has(name) ? "unbounded-time" : "other";
}

/**
 * storableInPostgres is a value as PostgreSQL can hold it: a NUL character, which PostgreSQL's text
 * refuses and older versions stored in SQLite (from request bodies and receivers' answers),
 * becomes U+FFFD, as the delivery code records new answers; in a JSON column its escape becomes
 * `\ufffd` too, so the service's JSON holds no NUL in either form. An instant past the year 9999
 * in an unbounded time column becomes the last of 9999.
 */
function storableInPostgres(value: SqlValue, kind: ColumnKind): SqlValue {
  if (typeof value === "number") return kind === "unbounded-time" ? Math.min(value, LATEST_TIMESTAMP_MS) : value;
  if (typeof value !== "string") return value;
  const text = withoutNul(value);
  return kind === "json" && text.includes("\\u0000") ? text.replace(JSON_ESCAPE, (escape, escaped) => (escaped === "u0000" ? "\\ufffd" : escape)) : text;
}

/** copyTable copies one table in batches read in key order, reporting progress after each. */
async function copyTable(sqlite: SqliteConnection, tx: PostgresDb, table: TableCopy, report: (copied: number) => void): Promise<number> {
  const columnList = table.columns.map(quote).join(", ");
  const keyList = table.key.map(quote).join(", ");
  const keyIndexes = table.key.map((k) => table.columns.indexOf(k));
  const kinds = table.columns.map((c) => columnKind(table.name, c));
  const perBatch = Math.max(1, Math.min(COPY_BATCH_ROWS, Math.floor(MAX_PARAMETERS / table.columns.length)));
  const firstPage = sqlite.query<SqlValue[], [number]>(`SELECT ${columnList} FROM ${quote(table.name)} ORDER BY ${keyList} LIMIT ?`);
  const nextPage = sqlite.query<SqlValue[], SqlValue[]>(
    `SELECT ${columnList} FROM ${quote(table.name)} WHERE (${keyList}) > (${table.key.map(() => "?").join(", ")}) ORDER BY ${keyList} LIMIT ?`,
  );
  const rowPlaceholders = `(${table.columns.map(() => "?").join(", ")})`;
  let copied = 0;
  let last: SqlValue[] | null = null;
  for (;;) {
    // Without safeIntegers, bun:sqlite reads no bigint: every value is a SqlValue.
    const rows = (last === null ? firstPage.values(perBatch) : nextPage.values(...keyIndexes.map((i) => last![i]!), perBatch)) as SqlValue[][];
    if (rows.length === 0) break;
    // The next page is read after the last key as SQLite holds it, NUL and all.
    const values = rows.flatMap((row) => row.map((value, i) => storableInPostgres(value, kinds[i]!)));
    await tx.run(`INSERT INTO ${quote(table.name)} (${columnList}) VALUES ${rows.map(() => rowPlaceholders).join(", ")}`, values);
    copied += rows.length;
    last = rows[rows.length - 1]!;
    report(copied);
    if (rows.length < perBatch) break;
  }
  return copied;
}

/** progressReporter draws a bar on a terminal, or writes one line per finished table elsewhere. */
function progressReporter(progress: CopyProgress, table: TableCopy): { update(copied: number): void; done(copied: number): void } {
  if (!progress.isTTY) return { update() {}, done: (copied) => progress.write(`copied ${table.name}: ${copied} rows\n`) };
  const draw = (copied: number) => {
    const share = table.rows === 0 ? 1 : copied / table.rows;
    const filled = Math.round(share * PROGRESS_BAR_WIDTH);
    progress.write(`\r${table.name.padEnd(28)} [${"#".repeat(filled)}${" ".repeat(PROGRESS_BAR_WIDTH - filled)}] ${copied}/${table.rows}`);
  };
  // Drawn at 0 first and after every batch, so the bar already shows the last count when done.
  draw(0);
  return { update: draw, done: () => progress.write("\n") };
}

/**
 * copyToPostgres copies every table of a migrated SQLite database into an empty PostgreSQL
 * database, which it migrates first. All rows go in one transaction, so a failure leaves the
 * target without data; the counting triggers are off during the copy (the counts are copied as
 * they are) and identity sequences are moved past the copied ids.
 */
export async function copyToPostgres(sqlite: SqliteConnection, target: PostgresDatabase, url: string, progress: CopyProgress): Promise<CopyResult> {
  const tables = sqliteTablesToCopy(sqlite);
  await refuseNonEmptyTarget(tables, target, url);
  await migratePostgres(target);
  const copied = target.write(async (tx) => {
    // Locks are waited for as long as they are held, as the migrations do: a one-time copy rolled
    // back for a wait would have to start over (the write transaction's lock_timeout is for requests).
    await tx.run("SET LOCAL lock_timeout = 0");
    // Another command (a token create, a second copy) may have written while this one waited for the lock.
    await refuseNonEmptyTarget(tables, tx, url);
    return readingOneSnapshot(sqlite, () => copyAll(sqlite, tx, progress));
  });
  // A failure outside a table's rows (a trigger switched, a sequence moved) rolls back all the same.
  const result = await copied.catch((error: Error) => {
    if (error instanceof CopyRefused || error instanceof CopyFailed) throw error;
    throw new CopyFailed(error.message.split("\n")[0]!);
  });
  // Statistics for the planner now: until autovacuum's next pass (a minute or more) PostgreSQL
  // would plan the copied tables as it found them, empty.
  await target.run("ANALYZE");
  return result;
}

/**
 * readingOneSnapshot runs `read` inside one SQLite read transaction, so every table comes from
 * the same moment: a token or user created in the data directory meanwhile, or a contact and the
 * count its trigger keeps, is copied whole or not at all.
 */
async function readingOneSnapshot<T>(sqlite: SqliteConnection, read: () => Promise<T>): Promise<T> {
  sqlite.run("BEGIN");
  try {
    // A deferred transaction takes its snapshot at its first read, not at BEGIN.
    sqlite.query("SELECT count(*) FROM sqlite_master").get();
    return await read();
  } finally {
    sqlite.run("ROLLBACK");
  }
}

/** copyAll copies every table in `tx`, its counting triggers off, and moves the identity sequences past the copied ids. */
async function copyAll(sqlite: SqliteConnection, tx: PostgresDb, progress: CopyProgress): Promise<CopyResult> {
  const plan = await planCopy(sqlite, tx);
  const result: CopyResult = [];
  for (const table of plan) await tx.run(`ALTER TABLE ${quote(table.name)} DISABLE TRIGGER USER`);
  for (const table of plan) {
    // Rows a migration seeds (the zero contact count), a setup link and a key's check value are replaced by the copied ones.
    if (REPLACED_TABLES.has(table.name)) await tx.run(`DELETE FROM ${quote(table.name)}`);
    const reporter = progressReporter(progress, table);
    const rows = await copyTable(sqlite, tx, table, reporter.update).catch((error: Error) => {
      throw new CopyFailed(`copying ${table.name}: ${error.message.split("\n")[0]}`);
    });
    reporter.done(rows);
    result.push({ table: table.name, rows });
  }
  for (const table of plan) await tx.run(`ALTER TABLE ${quote(table.name)} ENABLE TRIGGER USER`);
  const identities = await tx.all<{ table_name: string; column_name: string }>(
    "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() AND is_identity = 'YES'",
  );
  for (const { table_name, column_name } of identities) {
    await tx.get(
      `SELECT setval(pg_get_serial_sequence(?, ?), max_id) FROM (SELECT max(${quote(column_name)}) AS max_id FROM ${quote(table_name)}) m WHERE max_id IS NOT NULL`,
      [quote(table_name), column_name],
    );
  }
  return result;
}

/**
 * copyToPostgresCommand runs `crm copy-to-postgres`: it opens (and migrates) the data directory's
 * database with `openSqlite`, copies it and prints the rows per table; a refused target exits 2,
 * a copy that failed part-way (and was rolled back) 1.
 */
export async function copyToPostgresCommand(config: Config, openSqlite: () => Promise<SqliteSource>): Promise<number> {
  if (config.databaseUrl === "") {
    throw new ConfigError("copy-to-postgres needs the PostgreSQL database's URL: CRM_DATABASE_URL=postgres://..., or database_url or database_url_file in the --config file (or --database-url, which ps shows); see copy-to-postgres --help");
  }
  const source = await openSqlite();
  try {
    // A one-time command an operator watches: its reads and its closing ANALYZE wait for a lock as long as it is held, as its copy does.
    const target = await openPostgres(config.databaseUrl, config.databasePool, { ...config, waitOutLocks: true });
    try {
      const result = await copyToPostgres(source.sqlite, target, config.databaseUrl, process.stderr);
      const total = result.reduce((sum, table) => sum + table.rows, 0);
      printOut(`copied ${total} rows into ${redactedUrl(config.databaseUrl)}\n`);
      for (const { table, rows } of result) printOut(`${table.padEnd(28)} ${rows}\n`);
      return 0;
    } catch (error) {
      if (error instanceof CopyFailed) {
        process.stderr.write(`crm: copy-to-postgres stopped and rolled back, no row was written: ${error.message}\n`);
        return 1;
      }
      if (!(error instanceof CopyRefused)) throw error;
      process.stderr.write(`crm: ${error.message}\n`);
      return 2;
    } finally {
      await target.close();
    }
  } finally {
    await source.close();
  }
}
