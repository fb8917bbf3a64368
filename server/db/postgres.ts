import { SQL } from "bun";
import { ConfigError, redactedUrl } from "../config.ts";
import type { Database, Db, SqlValue } from "./sql.ts";

/** MAX_CACHED_REWRITES bounds the cache of rewritten SQL texts; the app's SQL stays well below it. */
const MAX_CACHED_REWRITES = 2000;

/** POSTGRES_MIN_VERSION is the oldest server the schema needs (server_version_num). */
const POSTGRES_MIN_VERSION = 130000;

/**
 * WRITE_LOCK is the advisory lock key (the bytes of "crm-writ") every `write` takes first, so
 * writes commit one at a time across all instances, as on SQLite: a write reads what the one
 * before it committed (two concurrent additions to a contact's accounts both stay), and instants
 * taken inside a write rise in commit order (a poller of updated_after misses nothing).
 */
export const WRITE_LOCK = "7165909999144823156";

/** CONNECT_TIMEOUT_SECONDS is how long opening a connection may take before it is an error. */
const CONNECT_TIMEOUT_SECONDS = 10;

/**
 * IDLE_IN_TRANSACTION_TIMEOUT_MS is how long PostgreSQL lets one of our transactions wait for its
 * next statement before it ends the session. Every write holds WRITE_LOCK, so an instance cut off
 * from the server in mid-transaction (a network partition, a frozen VM) would otherwise stop the
 * writes of every instance until the server's TCP keepalive gives up on it, two hours by default.
 * Our transactions never wait on anything but their own statements and a little JavaScript.
 */
const IDLE_IN_TRANSACTION_TIMEOUT_MS = 10_000;

type Row = Record<string, unknown>;
/** Runner is what both the pool and a transaction handle of Bun's client offer. */
type Runner = Pick<SQL, "unsafe">;

const rewrites = new Map<string, string>();

/**
 * numberPlaceholders rewrites the portable `?` placeholders to PostgreSQL's `$1..$n`, leaving
 * quoted strings, quoted names and comments alone; each SQL text is rewritten once.
 */
export function numberPlaceholders(sql: string): string {
  let rewritten = rewrites.get(sql);
  if (rewritten !== undefined) return rewritten;
  let out = "";
  let n = 0;
  for (let i = 0; i < sql.length; i++) {
    const ch = sql[i]!;
    if (ch === "'" || ch === '"') {
      const end = sql.indexOf(ch, i + 1);
      const stop = end === -1 ? sql.length : end + 1;
      out += sql.slice(i, stop);
      i = stop - 1;
    } else if (ch === "-" && sql[i + 1] === "-") {
      const end = sql.indexOf("\n", i);
      const stop = end === -1 ? sql.length : end;
      out += sql.slice(i, stop);
      i = stop - 1;
    } else {
      out += ch === "?" ? `$${++n}` : ch;
    }
  }
  if (rewrites.size >= MAX_CACHED_REWRITES) rewrites.delete(rewrites.keys().next().value!);
  rewrites.set(sql, out);
  return out;
}

/**
 * portableRow gives a row the value types bun:sqlite gives: int8 columns (read as BigInt so no
 * digit is lost in transit) become numbers, booleans (`a < b`, EXISTS) 1 or 0, and bytea (a Node
 * Buffer) a plain Uint8Array. numeric stays a string, as Bun reads it: portable SQL casts sum()
 * and avg() (`CAST(sum(n) AS bigint)`), which are numeric on PostgreSQL.
 */
function portableRow(row: Row): Row {
  for (const key in row) {
    const value = row[key];
    if (typeof value === "bigint") row[key] = Number(value);
    else if (typeof value === "boolean") row[key] = value ? 1 : 0;
    else if (value instanceof Uint8Array && value.constructor !== Uint8Array) row[key] = new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  }
  return row;
}

/** Result is what Bun's client answers a statement with: the rows, and the command tag's count. */
type Result = Row[] & { command?: string; count: number | null };

/** PostgresDb runs statements on the pool or, inside `write`, on the transaction's connection. */
export class PostgresDb implements Db {
  readonly dialect = "postgres" as const;

  /** changed is told of every statement that changed rows (an INSERT ... RETURNING read with `all` too). */
  constructor(
    private readonly runner: Runner,
    private readonly changed: () => void,
  ) {}

  private async execute(sql: string, params: readonly SqlValue[]): Promise<Result> {
    const result: Result = await this.runner.unsafe(numberPlaceholders(sql), params as SqlValue[]);
    if (result.command !== "SELECT" && (result.count ?? 0) > 0) this.changed();
    return result;
  }

  async all<T>(sql: string, params: readonly SqlValue[] = []): Promise<T[]> {
    const result = await this.execute(sql, params);
    const rows = new Array<T>(result.length);
    for (let i = 0; i < result.length; i++) rows[i] = portableRow(result[i]!) as T;
    return rows;
  }

  async get<T>(sql: string, params: readonly SqlValue[] = []): Promise<T | null> {
    const result = await this.execute(sql, params);
    return result.length === 0 ? null : (portableRow(result[0]!) as T);
  }

  async run(sql: string, params: readonly SqlValue[] = []): Promise<number> {
    return (await this.execute(sql, params)).count ?? 0;
  }

  /** script runs several statements without parameters as they are (a migration file). */
  async script(sql: string): Promise<void> {
    await this.runner.unsafe(sql);
  }
}

/**
 * PostgresDatabase is the PostgreSQL backend: a pool of Bun's SQL client connections, each `write`
 * one transaction on one of them. Several instances may share the database. As on SQLite, the
 * onCommit callbacks run after a commit that changed rows (a statement outside `write` commits on
 * its own); a transaction that changed nothing, such as a claim finding nothing due, wakes nobody.
 */
export class PostgresDatabase extends PostgresDb implements Database {
  private readonly afterCommitCallbacks: (() => void)[] = [];
  private generation = 0;

  constructor(private readonly sql: SQL) {
    super(sql, () => this.committed());
  }

  async write<T>(work: (tx: PostgresDb) => Promise<T>): Promise<T> {
    let changed = false;
    // READ COMMITTED whatever the database's default_transaction_isolation: each statement must see
    // what the writes before the lock committed. Under REPEATABLE READ the snapshot is taken by the
    // lock's own statement, before the lock is granted, so a write would read stale rows (a batch
    // creating a second contact for an email just created) or fail on a row changed meanwhile.
    const result = (await this.sql.begin("isolation level read committed", async (tx) => {
      await tx.unsafe("SELECT pg_advisory_xact_lock($1::bigint)", [WRITE_LOCK]);
      return work(new PostgresDb(tx, () => (changed = true)));
    })) as T;
    if (changed) this.committed();
    return result;
  }

  /** read runs `work` in one read-only REPEATABLE READ transaction: every statement sees the same snapshot. */
  async read<T>(work: (db: Db) => Promise<T>): Promise<T> {
    return (await this.sql.begin("isolation level repeatable read read only", (tx) => work(new PostgresDb(tx, () => {})))) as T;
  }

  private committed(): void {
    for (const callback of this.afterCommitCallbacks) callback();
  }

  onCommit(callback: () => void): void {
    this.afterCommitCallbacks.push(callback);
  }

  /**
   * Another instance may revoke a token at any moment and no notification reaches this one before
   * its next request could be served from a cache, so the cache is never trusted here: every call
   * returns a new number and each request reads its token (one primary-key lookup).
   */
  outsideWritesGeneration(): number {
    return ++this.generation;
  }

  /** listen subscribes on the client's dedicated listening connection, which Bun reconnects (and re-subscribes) when it drops. */
  async listen(channel: string, onNotify: () => void): Promise<() => Promise<void>> {
    let subscribed = false;
    const subscription = await this.sql.listen(channel, onNotify, () => {
      // Called once the LISTEN is acknowledged, and again after every reconnect: only then may notifications have been missed.
      if (subscribed) onNotify();
      subscribed = true;
    });
    return () => subscription.unlisten();
  }

  async notify(channel: string): Promise<void> {
    await this.sql.notify(channel);
  }

  async close(): Promise<void> {
    await this.sql.close();
  }
}

/** connectFailure says in one line why the server could not be used. */
function connectFailure(error: unknown): string {
  const { message, code } = error as { message?: string; code?: string };
  const text = (message || String(error)).split("\n")[0]!;
  if (code === "ERR_POSTGRES_CONNECTION_REFUSED") return "connection refused (is the server running and the host and port right?)";
  if (code === "ERR_POSTGRES_CONNECTION_TIMEOUT") return `no connection within ${CONNECT_TIMEOUT_SECONDS} s`;
  return code && code !== "ERR_POSTGRES_SERVER_ERROR" ? `${text} (${code})` : text;
}

/**
 * openPostgres connects a pool of at most `pool` connections and checks the server; a server that
 * cannot be reached or used is a ConfigError naming --database-url (one line, no stack trace).
 */
export async function openPostgres(url: string, pool: number): Promise<PostgresDatabase> {
  const sql = new SQL({
    url,
    max: pool,
    bigint: true,
    connectionTimeout: CONNECT_TIMEOUT_SECONDS,
    // application_name names the service's sessions in pg_stat_activity.
    connection: { idle_in_transaction_session_timeout: IDLE_IN_TRANSACTION_TIMEOUT_MS, application_name: "crm" },
  });
  try {
    const [server] = await sql`SELECT current_setting('server_version_num')::int AS version, current_setting('server_version') AS name`;
    if (server.version < POSTGRES_MIN_VERSION) {
      throw new Error(`the server runs PostgreSQL ${server.name}; the service needs ${POSTGRES_MIN_VERSION / 10000} or later`);
    }
  } catch (error) {
    await sql.close().catch(() => {});
    const reason = connectFailure(error);
    throw new ConfigError(`cannot use the PostgreSQL database at ${redactedUrl(url)} (--database-url, CRM_DATABASE_URL): ${reason}`);
  }
  return new PostgresDatabase(sql);
}
