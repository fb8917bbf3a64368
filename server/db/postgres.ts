import { SQL } from "bun";
import { randomUUID } from "node:crypto";
import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { ConfigError, DEFAULT_CONFIG, redactedUrl, type Config } from "../config.ts";
import { SpacedLine, type Logger } from "../shared/log.ts";
import { settlesWithin } from "../shared/time.ts";
import { ChangeClock } from "./change-clock.ts";
import { SlowReads } from "./slow-reads.ts";
import type { Database, Db, ReaderName, ReadLimits, SqlValue } from "./sql.ts";
import { runWrites, WriteGroups, type CommittedGroup, type PendingWrite, type StorageFull } from "./write-groups.ts";
import { errorCode, sqlStateOf } from "../shared/thrown.ts";

/** MAX_CACHED_REWRITES bounds the cache of rewritten SQL texts; the app's SQL stays well below it. */
const MAX_CACHED_REWRITES = 2000;

/** POSTGRES_MIN_VERSION is the oldest server the schema needs (server_version_num). */
const POSTGRES_MIN_VERSION = 130000;

/**
 * WRITE_LOCK is the advisory lock key (the bytes of "crm-writ") every `write` takes first, so
 * writes commit one at a time across all instances, as on SQLite: a write reads what the one
 * before it committed (two concurrent additions to a contact's accounts both stay), and instants
 * taken inside a write rise in commit order as far as the instances' clocks agree (a poller of
 * updated_after misses nothing within its overlap; it compares versions, not instants).
 */
export const WRITE_LOCK = "7165909999144823156";

/** CONNECT_TIMEOUT_SECONDS is how long opening a connection may take before it is an error. */
const CONNECT_TIMEOUT_SECONDS = 10;

/**
 * POOLED_CONNECTION_LIFETIME_SECONDS is how long a pooled connection serves before it is replaced
 * (once idle): each keeps a prepared statement per distinct SQL text it ran (up to 1,024), which
 * its server process holds in memory until the connection ends, hundreds of megabytes for varied lists.
 */
const POOLED_CONNECTION_LIFETIME_SECONDS = 1800;

/**
 * SERVER_KEEPALIVES has the server probe each of our connections after 60 s without traffic, then
 * every 10 s: the probes keep the flow open in the firewalls and NAT gateways between (the
 * listening connection is idle between notifications, for hours), and a connection whose client
 * is gone ends after 90 s instead of the system's two hours.
 */
const SERVER_KEEPALIVES = { tcp_keepalives_idle: 60, tcp_keepalives_interval: 10, tcp_keepalives_count: 3 };

/**
 * SESSION_SETTINGS are the settings the service's SQL relies on, asked for by every session
 * whatever an operator made the database's or role's defaults:
 * - READ COMMITTED: a statement outside a write (an Idempotency-Key's reservation) waits on a
 *   row another instance changes, and under REPEATABLE READ it would then fail (40001) instead
 *   of going on with the committed row;
 * - bytea in hex: Bun's client cannot read the `escape` format, and token hashes are bytea;
 * - standard strings: a backslash in a literal (the name search's `ESCAPE '\'`) is itself.
 * openPostgres adds search_path, which it reads from the database: --database-schema alone, then
 * the schemas of the extensions the tables use.
 */
const SESSION_SETTINGS = { default_transaction_isolation: "read committed", bytea_output: "hex", standard_conforming_strings: "on" };

/**
 * IDLE_IN_TRANSACTION_TIMEOUT_MS is how long PostgreSQL lets one of our transactions wait for its
 * next statement before it ends the session. Every write holds WRITE_LOCK, so an instance cut off
 * from the server in mid-transaction (a network partition, a frozen VM) would otherwise stop the
 * writes of every instance until the server's TCP keepalive gives up on it, two hours by default.
 * Our transactions never wait on anything but their own statements and a little JavaScript.
 */
const IDLE_IN_TRANSACTION_TIMEOUT_MS = 10_000;

/** LOCK_TIMEOUT_STATE is PostgreSQL's SQLSTATE for a statement given up on by lock_timeout (lock_not_available). */
export const LOCK_TIMEOUT_STATE = "55P03";

/**
 * BUSY_LOCK_TIMEOUT_MS is the lock_timeout of write transactions for
 * --database-answer-timeout-seconds after a statement waited that long for a lock another session
 * holds (an ALTER TABLE, a VACUUM FULL, a reporting tool's EXCLUSIVE lock). The writes of a group
 * run one after another under the write lock, and one waiting the whole timeout moves those after
 * it to the next group (GROUP_TIME_MS): each group would spend the timeout on its first write that
 * needs the table, so the k-th queued write would wait about k timeouts. Instead, those that need
 * the table are refused within this, and the others commit.
 */
const BUSY_LOCK_TIMEOUT_MS = 50;

/**
 * BOOKKEEPING_LOCK_TIMEOUT_MS is the lock_timeout of bookkeeping (writeBookkeeping): the request
 * that records its token's last use or its console session's visit waits no longer for a table
 * lock another session holds (an ALTER TABLE, a LOCK TABLE), and the record is left for a later use.
 */
const BOOKKEEPING_LOCK_TIMEOUT_MS = 50;

/**
 * LOCK_HOLDERS lists the sessions other than this one holding a lock on a relation of the
 * service's schema in a mode that stops writes (SHARE and stronger; ACCESS EXCLUSIVE stops reads
 * too), those longest in their transaction first. Read after a lock timeout only, at most once a
 * minute. The query text is left out: another session's statement may hold personal data.
 */
const LOCK_HOLDERS = `SELECT l.pid, c.relname AS "table", l.mode, a.usename AS role, a.application_name AS application,
       host(a.client_addr) AS client, a.state, CAST(extract(epoch FROM now() - a.xact_start) AS integer) AS transaction_seconds
  FROM pg_locks l
  JOIN pg_class c ON c.oid = l.relation
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.granted AND l.locktype = 'relation' AND l.pid <> pg_backend_pid()
   AND c.relnamespace = CAST(current_schema() AS regnamespace)
   AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
 ORDER BY a.xact_start, l.pid, c.relname
 LIMIT 10`;

/**
 * BLOCKING_SESSIONS lists the sessions a waiting backend ($1) waits for (pg_blocking_pids): those
 * holding a row it needs (psql's SELECT ... FOR UPDATE, a transaction that changed the row and
 * stays open), which hold no lock LOCK_HOLDERS lists, or a table lock. Their statements are left
 * out, as LOCK_HOLDERS leaves them out: they may hold personal data, and the pid finds them.
 */
const BLOCKING_SESSIONS = `SELECT a.pid, a.usename AS role, a.application_name AS application, host(a.client_addr) AS client, a.state,
       a.query_start, CAST(extract(epoch FROM now() - a.xact_start) AS integer) AS transaction_seconds
  FROM pg_stat_activity a
 WHERE a.pid = ANY (pg_blocking_pids(?))
 ORDER BY a.xact_start, a.pid
 LIMIT 10`;

type Row = Record<string, unknown>;

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

/** Runner runs one statement: on the pool, or on a transaction's connection. */
interface Runner {
  unsafe(sql: string, params?: SqlValue[]): Promise<Result>;
}

/**
 * DatabaseNotAnswering refuses a statement or transaction that PostgreSQL left without any answer
 * for the answer timeout (--database-answer-timeout-seconds): its connection was closed, so nothing
 * more of it reaches the server once the network is back; a COMMIT already sent may have been made.
 */
export class DatabaseNotAnswering extends Error {
  override readonly name = "DatabaseNotAnswering";

  /** statement names what went unanswered (LISTEN), when it is not a request's statement. */
  constructor(timeoutMs: number, statement?: string) {
    super(`PostgreSQL did not answer ${statement ? `${statement} ` : ""}within ${timeoutMs / 1000} s`);
  }
}

/**
 * DatabaseNewer is the refusal of a write group that found, once it held WRITE_LOCK, migrations
 * recorded that this build does not know (refuseWritesAfter): a newer crm migrated the database
 * while the writes waited, and they were written for the older schema.
 */
export class DatabaseNewer extends Error {
  override readonly name = "DatabaseNewer";

  /** newer names the migrations found, in order. */
  constructor(readonly newer: string[]) {
    super(`the database was migrated by a newer crm (${newer.join(", ")}) while the writes waited for the write lock`);
  }
}

/**
 * schemaChangedUnder tells whether PostgreSQL refused a prepared statement because a table it reads
 * changed since it was prepared (SQLSTATE 0A000, "cached plan must not change result type"): a
 * newer crm's migration altered a column under this instance's statements.
 */
export function schemaChangedUnder(error: unknown): boolean {
  return sqlStateOf(error) === "0A000" && error instanceof Error && error.message.includes("cached plan must not change result type");
}

/** READ_ONLY_HINT says what to do when PostgreSQL refuses a write as read-only (SQLSTATE 25006). */
export const READ_ONLY_HINT = "the server or the role is read-only (a standby, or default_transaction_read_only): point the database URL at the primary, with a role that may write";

/**
 * readOnlyWriteRefusal gives a command's write that PostgreSQL refused in a read-only transaction
 * (a standby, a role with default_transaction_read_only) the one line main prints for a
 * ConfigError, naming the setting and what to do; any other error is returned as it is.
 */
export function readOnlyWriteRefusal(error: unknown): unknown {
  if (sqlStateOf(error) !== "25006") return error;
  // Where the URL was given is not known here, in main's last catch: the refusal names none rather than a wrong one.
  return new ConfigError(`cannot write to the PostgreSQL database: ${(error as Error).message}; ${READ_ONLY_HINT}`, { cause: error });
}

/** metLockTimeout tells whether PostgreSQL gave a statement up for its lock_timeout. */
function metLockTimeout(error: unknown): boolean {
  return sqlStateOf(error) === LOCK_TIMEOUT_STATE;
}

/** answeredByServer tells whether an error is one PostgreSQL sent (it carries a SQLSTATE), not one of the client's own. */
function answeredByServer(error: unknown): boolean {
  return sqlStateOf(error) !== undefined;
}

/** WATCH_TICKS is how many times per answer timeout the watch looks at what waits: it gives up at most a tenth late. */
const WATCH_TICKS = 10;

/** RoundTrip passes one statement sent to the server through, timing the wait for its answer. */
type RoundTrip = <R>(statement: Promise<R>) => Promise<R>;

/** Waiting is one statement or transaction under way. */
interface Waiting {
  /** when it last started waiting for the server (began, or sent a statement), on performance.now()'s clock */
  since: number;
  /** set once the watch gave up on it */
  givenUp: boolean;
}

/**
 * AnswerWatch bounds the wait for a PostgreSQL server that stopped answering (a network partition
 * drops packets without a reset): Bun's client has no deadline of its own, so a statement would
 * wait until TCP gives up on its connection, minutes later, and query.cancel() asks the server on a
 * second connection, which gets through no better. Silence alone is no failure, though: a
 * statement may wait for a lock (the write lock, behind another instance) or take its time. So
 * once something has waited half the timeout, a probe asks the server for `SELECT 1` on a
 * connection of its own, and any answer, to any statement or to a probe, starts every wait afresh.
 * Once something has waited the whole timeout, no connection to the server can be trusted (the
 * probe's did not get through either): `giveUp` closes them all, as a restart of the server would,
 * and everything under way fails with DatabaseNotAnswering.
 */
class AnswerWatch {
  private lastAnswer = -Infinity;
  private readonly waiting = new Set<Waiting>();
  private ticker: Timer | null = null;
  private probing = false;

  /** probe asks the server for an answer on a connection of its own, given up on once `signal` aborts; giveUp closes every connection in use. */
  constructor(
    private readonly timeoutMs: number,
    private readonly probe: (signal: AbortSignal) => Promise<void>,
    private readonly giveUp: () => void,
  ) {}

  /**
   * run runs `operation` (one statement, or a transaction passing each statement it sends through
   * `roundTrip`: its time between statements is its own, not the server's silence) and throws
   * DatabaseNotAnswering if the watch gave up on it.
   */
  async run<T>(operation: (roundTrip: RoundTrip) => Promise<T>): Promise<T> {
    const waiting: Waiting = { since: performance.now(), givenUp: false };
    const roundTrip: RoundTrip = (statement) => {
      waiting.since = performance.now();
      return this.noted(statement);
    };
    this.waiting.add(waiting);
    if (!this.ticker) {
      // Looked at after the event loop's pending I/O, so that answers which came while it was busy count.
      this.ticker = setInterval(() => setImmediate(() => this.look()), this.timeoutMs / WATCH_TICKS);
      this.ticker.unref();
    }
    try {
      return await this.noted(operation(roundTrip));
    } catch (error) {
      throw waiting.givenUp ? new DatabaseNotAnswering(this.timeoutMs) : error;
    } finally {
      this.waiting.delete(waiting);
    }
  }

  /** noted passes a statement's outcome through, recording an answer when the server gave one (a result or its own error). */
  private noted<T>(statement: Promise<T>): Promise<T> {
    return statement.then(
      (result) => {
        this.lastAnswer = performance.now();
        return result;
      },
      (error: unknown) => {
        if (answeredByServer(error)) this.lastAnswer = performance.now();
        throw error;
      },
    );
  }

  /** look gives up once something has waited the timeout without an answer, and probes the server once something has waited half of it. */
  private look(): void {
    const now = performance.now();
    let longest = 0;
    for (const waiting of this.waiting) if (!waiting.givenUp) longest = Math.max(longest, now - Math.max(this.lastAnswer, waiting.since));
    if (longest >= this.timeoutMs) {
      for (const waiting of this.waiting) waiting.givenUp = true;
      this.giveUp();
    } else if (longest >= this.timeoutMs / 2 && !this.probing) {
      this.probing = true;
      void this.noted(this.probe(AbortSignal.timeout(this.timeoutMs / 2)))
        .catch(() => {})
        .finally(() => (this.probing = false));
    }
    if (this.waiting.size === 0 && this.ticker) {
      clearInterval(this.ticker);
      this.ticker = null;
    }
  }
}

/** PostgresDb runs statements on the pool or, inside `write`, on the transaction's connection. */
export class PostgresDb implements Db {
  readonly dialect = "postgres" as const;

  /** changed is told of every statement that changed rows (an INSERT ... RETURNING read with `all` too). */
  constructor(
    private readonly runner: Runner,
    private readonly changed: () => void,
  ) {}

  private async execute(sql: string, params: readonly SqlValue[]): Promise<Result> {
    const result = await this.runner.unsafe(numberPlaceholders(sql), params as SqlValue[]);
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

/** PostgresOptions are the settings every connection to the server is opened with. */
type PostgresOptions = Bun.SQL.PostgresOrMySQLOptions;

/** LISTENER_CHECK_PREFIX starts the payload of the notifications an instance sends itself to check its listening connection; every instance ignores them. */
const LISTENER_CHECK_PREFIX = "listener-check:";

/** Registration is one `listen` call: re-subscribed on a new listening connection when the old one is lost or found dead. */
interface Registration {
  channel: string;
  onNotify: (payload: string | null) => void;
  /** told of each try to subscribe that the server refused */
  onRefused: (error: unknown) => void;
  subscription: Bun.SQL.ListenSubscription | null;
}

/** RESUBSCRIBE_FIRST_DELAY_MS is the wait after a refused try to subscribe again on a new listening connection; it doubles up to RESUBSCRIBE_LONGEST_DELAY_MS. */
const RESUBSCRIBE_FIRST_DELAY_MS = 500;
const RESUBSCRIBE_LONGEST_DELAY_MS = 30_000;

/**
 * PostgresDatabase is the PostgreSQL backend: a pool of Bun's SQL client connections, each `write`
 * one transaction on one of them, all closed and replaced once the server stops answering
 * (AnswerWatch). Several instances may share the database. As on SQLite, the onCommit callbacks
 * run after a commit that changed rows (a statement outside `write` commits on its own); a
 * transaction that changed nothing, such as a claim finding nothing due, wakes nobody.
 */
export class PostgresDatabase extends PostgresDb implements Database {
  readonly changeClock = new ChangeClock();
  private readonly afterCommitCallbacks: (() => void)[] = [];
  private generation = 0;
  private readonly groups = new WriteGroups(
    (take) => this.commitGroup(take),
    () => this.committed(),
  );
  private pool: SQL;
  /** the client listen subscribes on: its connection is its own, left alone when the pool's are replaced */
  private listener: SQL | null = null;
  private readonly registrations = new Set<Registration>();
  /** set while resubscribe subscribes the registrations again on a new listening connection */
  private resubscribing = false;
  private listenerChecks: Timer | null = null;
  /** the payload of this instance's listener checks, and what its arrival resolves */
  private readonly checkPayload = `${LISTENER_CHECK_PREFIX}${randomUUID()}`;
  private checkArrived: (() => void) | null = null;
  private closed = false;
  private readonly watch: AnswerWatch;
  private slowReads: SlowReads | null = null;
  /** until when (performance.now()) write transactions wait BUSY_LOCK_TIMEOUT_MS for a lock, after a lock timeout */
  private busyUntil = -Infinity;
  /** where lock timeouts are logged (logLocksTo) */
  private lockLog: Logger | null = null;
  /** the newest migration this build knows and who is told of newer ones, once writes look for them (refuseWritesAfter) */
  private newerCheck: { version: number; found: (newer: string[]) => void } | null = null;
  /** the lines of writes' lock timeouts (lockTimedOut) and of skipped bookkeeping (bookkeepingSkipped) */
  private readonly lockLine = new SpacedLine();
  private readonly bookkeepingLine = new SpacedLine();
  /** the sessions a write's statement waits for, read while it waited (blockersWatched) for lockTimedOut's line */
  private blocking: Promise<Row> | null = null;
  /**
   * apart runs each statement on a connection of its own (onConnectionOfItsOwn), given up after the
   * answer timeout: the reads of the lock lines, which must not wait for a connection of the pool.
   * With a pool of 1 the waiting write holds the only one, and a read of the sessions it waits for
   * ran once the lock timeout had ended the wait, when pg_blocking_pids names none.
   */
  private readonly apart: PostgresDb;

  /**
   * options include the pool's size (max); a statement the server leaves without any answer for
   * answerTimeoutMs is given up; the listening connection is checked every listenerCheckMs;
   * `home` is the schema the sessions keep the tables in.
   */
  constructor(
    private readonly options: PostgresOptions,
    private readonly answerTimeoutMs: number,
    private readonly listenerCheckMs: number,
    private readonly home: TablesHome,
  ) {
    super({ unsafe: (text, params) => this.onThePool(text, params) }, () => this.committed());
    this.pool = new SQL(options);
    this.watch = new AnswerWatch(answerTimeoutMs, (signal) => probeServer(options, signal), () => this.replacePool());
    this.apart = new PostgresDb({ unsafe: (text, params) => onConnectionOfItsOwn(options, text, params, AbortSignal.timeout(answerTimeoutMs)) }, () => {});
  }

  /** urlFrom names where the database URL was given (DatabaseUrlFrom's named), for the migrations' refusals. */
  get urlFrom(): string {
    return this.home.urlFrom;
  }

  /** onThePool runs one statement on the pool, timed by the watch. */
  private onThePool(text: string, params?: SqlValue[]): Promise<Result> {
    return this.lockWaitNoted(this.watch.run(() => this.pool.unsafe(text, params)));
  }

  /** lockWaitNoted passes a statement's outcome through, noting a lock timeout (lockTimedOut). */
  private lockWaitNoted<T>(statement: Promise<T>): Promise<T> {
    return statement.catch((error: unknown) => {
      if (metLockTimeout(error)) this.lockTimedOut();
      throw error;
    });
  }

  /**
   * lockTimedOut has write transactions wait BUSY_LOCK_TIMEOUT_MS for locks for the answer timeout, and
   * logs the sessions holding locks on the service's tables, and those the write waited for
   * (blockersWatched), at most once a minute.
   */
  private lockTimedOut(): void {
    const now = performance.now();
    this.busyUntil = now + this.answerTimeoutMs;
    const blocking = this.blocking;
    this.blocking = null;
    const log = this.lockLog;
    const unlogged = log ? this.lockLine.occurred(now) : undefined;
    if (!log || unlogged === undefined) return;
    void Promise.all([this.lockHolders(), blocking]).then(([found, blockers]) =>
      log.warn("a lock another PostgreSQL session holds outlasted the lock timeout (--database-answer-timeout-seconds): requests that need it are refused (503 database-busy) while it is held", {
        lock_timeout_ms: this.answerTimeoutMs,
        ...found,
        ...blockers,
        ...(unlogged === null ? {} : { lock_timeouts_since_last_line: unlogged }),
      }),
    );
  }

  /** lockHolders reads LOCK_HOLDERS for a line: `holders`, or `holders_unknown` saying why not. */
  private lockHolders(): Promise<Row> {
    return this.apart.all<Row>(LOCK_HOLDERS).then(
      (holders) => ({ holders }),
      (error: unknown) => ({ holders_unknown: String(error) }),
    );
  }

  /**
   * blockersWatched passes a statement of a write transaction on backend `backend` through. Should
   * it still wait at half its lock timeout while a lock line is due, the sessions it waits for are
   * read then (BLOCKING_SESSIONS) for lockTimedOut's line: once the lock timeout ended the wait,
   * pg_blocking_pids no longer tells who caused it, and a row lock's holder is in no other view.
   */
  private blockersWatched<T>(backend: number, lockTimeoutMs: number, statement: Promise<T>): Promise<T> {
    if (!this.lockLog || !this.lockLine.due(performance.now())) return statement;
    let read: Promise<Row> | null = null;
    return this.blockersReadHalfway(backend, lockTimeoutMs, statement, (sessions) => (read = this.blocking = sessions)).finally(() => {
      // A statement given up for its lock timeout had it taken by lockTimedOut already.
      if (this.blocking === read) this.blocking = null;
    });
  }

  /**
   * blockersReadHalfway passes `statement`, sent on backend `backend` under a lock_timeout of
   * `lockTimeoutMs`, through; should it still be under way at half that, the sessions the backend
   * waits for are read then on a connection apart (BLOCKING_SESSIONS) and handed to `read`, as
   * `blocking_sessions` or `blocking_sessions_unknown` saying why not.
   */
  blockersReadHalfway<T>(backend: number, lockTimeoutMs: number, statement: Promise<T>, read: (sessions: Promise<Row>) => void): Promise<T> {
    const timer = setTimeout(() => {
      read(
        this.apart.all<Row>(BLOCKING_SESSIONS, [backend]).then(
          (sessions) => ({ blocking_sessions: sessions }),
          (error: unknown) => ({ blocking_sessions_unknown: String(error) }),
        ),
      );
    }, lockTimeoutMs / 2);
    return statement.finally(() => clearTimeout(timer));
  }

  /** bookkeepingSkipped logs, at most once a minute, that bookkeeping was given up for a table lock (writeBookkeeping), naming the sessions holding one. */
  private bookkeepingSkipped(): void {
    const log = this.lockLog;
    const unlogged = log ? this.bookkeepingLine.occurred(performance.now()) : undefined;
    if (!log || unlogged === undefined) return;
    void this.lockHolders().then((found) =>
      log.warn("a lock another PostgreSQL session holds kept a token's last use or a console session's visit from being recorded (bookkeeping, given up after lock_timeout_ms): it is recorded at a later use", {
        lock_timeout_ms: BOOKKEEPING_LOCK_TIMEOUT_MS,
        ...found,
        ...(unlogged === null ? {} : { skipped_since_last_line: unlogged }),
      }),
    );
  }

  /**
   * refuseWritesAfter has every write group, once it holds WRITE_LOCK, look for migrations
   * recorded after `version` (the newest this build knows; set once the database is migrated) and,
   * finding any, roll back and refuse its writes with DatabaseNewer, telling `found`. A newer crm's
   * migrations run as writes, under the same lock: a write this instance admitted before it
   * noticed them, and that waited behind them, would otherwise commit the old way after them.
   */
  refuseWritesAfter(version: number, found: (newer: string[]) => void): void {
    this.newerCheck = { version, found };
  }

  /** logLocksTo has lock timeouts and skipped bookkeeping logged to `log` (lockTimedOut, bookkeepingSkipped): a serving instance's log; a command's are errors of their own. */
  logLocksTo(log: Logger): void {
    this.lockLog = log;
  }

  /** lockTimeoutMs is the lock_timeout for the statements of a write transaction begun now: BUSY_LOCK_TIMEOUT_MS after a lock timeout, the answer timeout otherwise. */
  private lockTimeoutMs(): number {
    return performance.now() < this.busyUntil ? BUSY_LOCK_TIMEOUT_MS : this.answerTimeoutMs;
  }

  /** replacePool closes every connection of the pool at once, failing what runs on them, and opens new ones for what comes next. */
  private replacePool(): void {
    const replaced = this.pool;
    if (!this.closed) this.pool = new SQL(this.options);
    void replaced.close({ timeout: 0 });
  }

  /** transaction runs `work` in one transaction of `mode`, its statements timed by the watch and, unless `noteLockTimeouts` is false, their lock timeouts noted (lockWaitNoted). */
  private transaction<T>(mode: string, work: (tx: Runner) => Promise<T>, noteLockTimeouts = true): Promise<T> {
    const noted = noteLockTimeouts ? <R>(statement: Promise<R>) => this.lockWaitNoted(statement) : <R>(statement: Promise<R>) => statement;
    return this.watch.run((roundTrip) => this.pool.begin(mode, (tx) => work({ unsafe: (text, params) => noted(roundTrip(tx.unsafe(text, params))) }))) as Promise<T>;
  }

  /**
   * write commits the writes of concurrent requests together (WriteGroups): one transaction holds
   * WRITE_LOCK for a whole group, so the lock, the transaction and the commit's flush to disk are
   * paid once per group rather than once per write, while other instances' writes wait for the lock.
   */
  write<T>(work: (tx: PostgresDb) => Promise<T>): Promise<T> {
    return this.groups.submit(work as (tx: Db) => Promise<T>);
  }

  private commitGroup(take: () => PendingWrite[]): Promise<CommittedGroup> {
    let changed = false;
    // READ COMMITTED whatever the database's default_transaction_isolation: each statement must see
    // what the writes before the lock committed. Under REPEATABLE READ the snapshot is taken by the
    // lock's own statement, before the lock is granted, so a write would read stale rows (a batch
    // creating a second contact for an email just created) or fail on a row changed meanwhile.
    return this.transaction("isolation level read committed", async (tx) => {
      // The write lock is waited for as long as the other instances' groups hold it (lock_timeout
      // 0; the watch still gives up on a silent server); the writes' own locks as lockTimeoutMs says.
      const lockTimeoutMs = this.lockTimeoutMs();
      // A statement per result: the lock's holds the backend's pid, which blockersWatched asks about.
      // The migrations are read by a statement of their own, in the same round trip: under READ
      // COMMITTED it sees what committed before the lock was granted, where one beside the lock
      // would read in the snapshot taken before its wait.
      const check = this.newerCheck;
      const newer = check ? `SELECT name FROM schema_migrations WHERE version > ${check.version} ORDER BY version; ` : "";
      const results = (await tx.unsafe(
        `SET LOCAL lock_timeout = 0; SELECT pg_advisory_xact_lock(${WRITE_LOCK}), pg_backend_pid() AS backend; ${newer}SET LOCAL lock_timeout = ${lockTimeoutMs}`,
      )) as unknown as Row[][];
      const backend = Number(results[1]![0]!.backend);
      const found = check ? results[2]!.map((row) => String(row.name)) : [];
      if (check && found.length > 0) {
        check.found(found);
        throw new DatabaseNewer(found);
      }
      const watched: Runner = { unsafe: (text, params) => this.blockersWatched(backend, lockTimeoutMs, tx.unsafe(text, params)) };
      const batch = take();
      // A write alone needs no savepoint: should it fail, its transaction is rolled back.
      if (batch.length === 1) return { outcomes: [{ ok: true, value: await batch[0]!.work(new PostgresDb(watched, () => (changed = true))) }], changed };
      // Each statement is a round trip (Bun's client does not pipeline), so a savepoint's release
      // travels with the next one's opening (the COMMIT releases the last), and a failed statement
      // is noted here: a work that caught one and returned left the transaction aborted.
      let failedStatement: { error: unknown } | null = null;
      const writeDb = new PostgresDb(
        { unsafe: (text, params) => watched.unsafe(text, params).catch((error: unknown) => Promise.reject((failedStatement = { error }).error)) },
        () => (changed = true),
      );
      let changedBefore = false;
      let releaseOwed = false;
      const outcomes = await runWrites(batch, writeDb, {
        open: () => {
          changedBefore = changed;
          failedStatement = null;
          const open = releaseOwed ? "RELEASE write; SAVEPOINT write" : "SAVEPOINT write";
          releaseOwed = false;
          return tx.unsafe(open);
        },
        release: () => {
          if (failedStatement) throw failedStatement.error;
          releaseOwed = true;
        },
        rollBack: async () => {
          await tx.unsafe("ROLLBACK TO write; RELEASE write");
          changed = changedBefore;
        },
      });
      return { outcomes, changed };
    });
  }

  /**
   * writeBookkeeping runs `work` in a transaction of its own, without WRITE_LOCK (no other write
   * reads what it writes). It skips a row held elsewhere (unlessHeld) rather than wait for it, and
   * waits for a table lock another session holds (an ALTER TABLE, a LOCK TABLE) no longer than
   * BOOKKEEPING_LOCK_TIMEOUT_MS, set in the transaction (the BEGIN, the SET LOCAL and the COMMIT
   * are three round trips more, once a minute per token or session): `work` is then skipped, left
   * for a later use, and logged at most once a minute (bookkeepingSkipped), not as a lock timeout
   * of the writes, which would have them wait only 50 ms for a while. It wakes nobody: it makes
   * no deliveries.
   */
  async writeBookkeeping(work: (tx: Db) => Promise<void>): Promise<void> {
    try {
      await this.transaction(
        "isolation level read committed",
        async (tx) => {
          await tx.unsafe(`SET LOCAL lock_timeout = ${BOOKKEEPING_LOCK_TIMEOUT_MS}`);
          await work(new PostgresDb(tx, () => {}));
        },
        false,
      );
    } catch (error) {
      if (!metLockTimeout(error)) throw error;
      this.bookkeepingSkipped();
    }
  }

  /**
   * read runs `work` in one read-only REPEATABLE READ transaction: every statement sees the same
   * snapshot. Its statements wait for a lock no longer than the sessions' lock_timeout, sent at
   * connect (openPostgres), and a lock timeout is noted as the writes' are (lockTimedOut).
   */
  read<T>(work: (db: Db) => Promise<T>): Promise<T> {
    return this.transaction("isolation level repeatable read read only", (tx) => work(new PostgresDb(tx, () => {})));
  }

  /** readWithin is `read` with its statements' lock_timeout and statement_timeout set (one round trip more); its lock timeouts are its own, not the writes' (lockTimedOut). */
  readWithin<T>({ lockTimeoutMs, statementTimeoutMs }: ReadLimits, work: (db: Db) => Promise<T>): Promise<T> {
    return this.transaction(
      "isolation level repeatable read read only",
      async (tx) => {
        await tx.unsafe(`SET LOCAL lock_timeout = ${lockTimeoutMs}; SET LOCAL statement_timeout = ${statementTimeoutMs}`);
        return work(new PostgresDb(tx, () => {}));
      },
      false,
    );
  }

  /**
   * useReadLane has readAside run slow reads on at most half the pool at once, at least one
   * connection (SlowReads: in turns, at most `capacity` held), so a client sending many cannot take
   * every connection the other requests need; 0 runs them as `read`, on any connection.
   */
  useReadLane(capacity: number): void {
    if (capacity > 0) this.slowReads = new SlowReads(capacity, Math.max(1, Math.floor((this.options.max ?? 10) / 2)), (work) => this.read(work));
  }

  readAside<T>(work: (db: Db) => Promise<T>, reader: ReaderName): Promise<T> {
    return this.slowReads ? this.slowReads.read(work, reader) : this.read(work);
  }

  readsAside(): number {
    return this.slowReads?.held ?? 0;
  }

  private committed(): void {
    for (const callback of this.afterCommitCallbacks) callback();
  }

  /** writeIndex is `write`: PostgreSQL keeps its indexes in each transaction, and never has its file replaced. */
  writeIndex(work: (tx: Db) => Promise<void>): Promise<void> {
    return this.write(work);
  }

  writesWaiting(): number {
    return this.groups.waiting();
  }

  committedRecently(withinMs: number): boolean {
    return this.groups.committedRecently(withinMs);
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

  /**
   * listen subscribes on a client of its own (its connection outlives the pool's). When that
   * connection is lost (listenerLost) or dead without knowing it (checkListener), or the first
   * subscribe was refused (a server at max_connections refuses exactly this connection, the one
   * beyond the pool), resubscribe subscribes again on a new one.
   */
  async listen(channel: string, onNotify: (payload: string | null) => void, onRefused: (error: unknown) => void): Promise<() => Promise<void>> {
    const registration: Registration = { channel, onNotify, onRefused, subscription: null };
    this.registrations.add(registration);
    if (!this.listenerChecks) {
      this.listenerChecks = setInterval(() => void this.checkListener(), this.listenerCheckMs);
      this.listenerChecks.unref();
    }
    await this.subscribe(registration).catch(onRefused);
    return async () => {
      this.registrations.delete(registration);
      await registration.subscription?.unlisten();
    };
  }

  /**
   * subscribe sends a registration's LISTEN on the listening connection. Bun's client gives it no
   * deadline: on a connection that stopped passing anything just then (a path dropping packets),
   * it would wait until TCP gives up, many minutes, and resubscribe and the listener check with
   * it. Unanswered within the answer timeout, the connection is closed (which fails the LISTEN)
   * and DatabaseNotAnswering thrown: resubscribe, or the listener check after a first subscribe,
   * tries again on a new one.
   */
  private async subscribe(registration: Registration): Promise<void> {
    const client = this.listenerClient();
    const subscribing = client.listen(registration.channel, (payload) => {
      if (!payload.startsWith(LISTENER_CHECK_PREFIX)) registration.onNotify(payload);
      else if (payload === this.checkPayload) this.checkArrived?.();
    });
    if (!(await settlesWithin(subscribing, this.answerTimeoutMs))) {
      subscribing.catch(() => {});
      if (client === this.listener) this.dropListener();
      throw new DatabaseNotAnswering(this.answerTimeoutMs, "LISTEN");
    }
    registration.subscription = await subscribing;
  }

  /** listenerClient is the client the channels are subscribed on, made when there is none. */
  private listenerClient(): SQL {
    if (this.listener) return this.listener;
    // Never closed for being idle: between notifications it is, for hours (the server's keepalives keep its flow open).
    const client: SQL = new SQL({ ...this.options, max: 1, idleTimeout: 0, maxLifetime: 0, onclose: () => this.listenerLost(client) });
    this.listener = client;
    return client;
  }

  /**
   * listenerLost replaces a listening connection that closed (the server restarted or ended it).
   * Bun's client would reconnect and subscribe again by itself, but writes a plain-text line to
   * stderr for every try the server refuses (console.warn, with no option to silence it), where
   * the log is one JSON object per line: every subscription is dropped, which stops Bun's tries,
   * and resubscribe makes its own, each refusal logged through `onRefused`.
   */
  private listenerLost(client: SQL): void {
    if (client !== this.listener || this.closed) return;
    this.dropListener();
    void this.resubscribe();
  }

  /** dropListener unsubscribes every registration and closes the listening client. */
  private dropListener(): void {
    const dropped = this.listener;
    this.listener = null;
    for (const registration of this.registrations) {
      void registration.subscription?.unlisten().catch(() => {});
      registration.subscription = null;
    }
    void dropped?.close({ timeout: 0 }).catch(() => {});
  }

  /**
   * resubscribe subscribes every registration without a subscription on a new listening
   * connection, trying again after each refusal (RESUBSCRIBE_FIRST_DELAY_MS, doubling), then tells
   * each registration that notifications may have been missed meanwhile.
   */
  private async resubscribe(): Promise<void> {
    if (this.resubscribing) return;
    this.resubscribing = true;
    try {
      let delay = RESUBSCRIBE_FIRST_DELAY_MS;
      // Until every registration is subscribed: the new connection may be lost again meanwhile.
      while (!this.closed && [...this.registrations].some((registration) => !registration.subscription)) {
        try {
          for (const registration of this.registrations) if (!registration.subscription) await this.subscribe(registration);
        } catch (error) {
          if (this.closed) return;
          for (const registration of this.registrations) registration.onRefused(error);
          // Unreferenced: a stopping process does not wait out the delay.
          await new Promise((resolve) => setTimeout(resolve, delay).unref());
          delay = Math.min(delay * 2, RESUBSCRIBE_LONGEST_DELAY_MS);
          continue;
        }
        if ([...this.registrations].every((registration) => registration.subscription)) for (const registration of this.registrations) registration.onNotify(null);
      }
    } finally {
      this.resubscribing = false;
    }
  }

  /**
   * checkListener sends this instance a notification through the pool. One that has not arrived
   * within the answer timeout means the listening connection is dead without knowing it (a
   * firewall forgot it, or a partition outlasted the server's keepalives): nothing would tell Bun,
   * as a listening client never sends. It is then closed and replaced (resubscribe).
   */
  private async checkListener(): Promise<void> {
    const [first] = this.registrations;
    if (!first || this.checkArrived || this.resubscribing || this.closed) return;
    const arrived = new Promise<void>((resolve) => (this.checkArrived = resolve));
    try {
      // A pool in trouble is the answer watch's to handle: the check tells nothing then.
      const sent = await this.notify(first.channel, this.checkPayload).then(() => true, () => false);
      if (!sent || (await settlesWithin(arrived, this.answerTimeoutMs)) || this.closed || this.resubscribing) return;
      this.dropListener();
      void this.resubscribe();
    } finally {
      this.checkArrived = null;
    }
  }

  /** notify sends a notification through the pool, with `payload` (the listener check's mark, a deleted subscription's id) or none. */
  async notify(channel: string, payload?: string): Promise<void> {
    await this.watch.run(() => this.pool.notify(channel, payload));
  }

  /**
   * refuseTablesElsewhere throws openPostgres's refusal when, as `tx` sees the database now, the
   * service's tables are in another schema (refusalOf). migratePostgres asks under the migration
   * lock: two first starts at once with different --database-schema both found no tables before
   * they opened their pools, and the one that waited must see the other's rather than make its own.
   */
  async refuseTablesElsewhere(tx: Db): Promise<void> {
    const facts = await tx.get<ServerFacts>(SERVER_FACTS, [this.home.schema]);
    const refusal = refusalOf(facts!, this.home.schema, this.home.chosen);
    if (refusal) throw unusableDatabase(this.home, refusal);
  }

  storageFull(): StorageFull | null {
    return this.groups.storageFull();
  }

  /** storageFault is null: the server keeps its own storage, and a failure there is told in its answers to each statement. */
  storageFault(): null {
    return null;
  }

  /** close commits what is queued and closes the connections. */
  async close(): Promise<void> {
    await this.groups.drain();
    this.closed = true;
    this.changeClock.stop();
    if (this.listenerChecks) clearInterval(this.listenerChecks);
    await Promise.all([this.pool.close(), this.listener?.close()]);
  }
}

/** connectFailure says in one line why the server could not be used. */
function connectFailure(error: unknown): string {
  const code = errorCode(error);
  const text = ((error as Error).message || String(error)).split("\n")[0]!;
  if (error instanceof URIError) return "the user name or password is not percent-encoded: write each character of them other than letters, digits and -._~ as %XX (a % as %25)";
  if (code === "ERR_POSTGRES_CONNECTION_REFUSED") return "connection refused (is the server running and the host and port right?)";
  if (code === "ERR_POSTGRES_CONNECTION_TIMEOUT") return `no connection within ${CONNECT_TIMEOUT_SECONDS} s`;
  return code && code !== "ERR_POSTGRES_SERVER_ERROR" ? `${text} (${code})` : text;
}

/**
 * hostLookupFailure looks up the host of a URL whose connection was refused: Bun's client reports a
 * name that does not resolve as a refused connection too, and a mistyped name is no server to wait
 * for. A name server that did not answer (EAI_AGAIN) is `temporary`, as a server down is; null when
 * the name resolves, or the URL names an address or no host: the refusal was the server's.
 */
async function hostLookupFailure(url: string): Promise<{ reason: string; temporary: boolean } | null> {
  const host = URL.canParse(url) ? new URL(url).hostname.replace(/^\[(.*)\]$/, "$1") : "";
  if (host === "" || isIP(host) !== 0 || /[%/]/.test(host)) return null;
  const code = await lookup(host).then(() => null, (error: unknown) => errorCode(error) ?? String(error));
  if (code === null) return null;
  if (code === "EAI_AGAIN") return { reason: `the host ${host} could not be looked up just now (EAI_AGAIN: the name server did not answer)`, temporary: true };
  return { reason: `the host ${host} does not resolve (${code}): is the host name in the URL right?`, temporary: false };
}

/** onConnectionOfItsOwn runs one statement on a connection of its own, opened with `options` and closed once answered or once `signal` aborts. */
async function onConnectionOfItsOwn(options: PostgresOptions, sql: string, params: SqlValue[] = [], signal?: AbortSignal): Promise<Result> {
  const client = new SQL({ ...options, max: 1 });
  const close = () => void client.close({ timeout: 0 });
  signal?.addEventListener("abort", close, { once: true });
  try {
    return await client.unsafe(sql, params);
  } finally {
    signal?.removeEventListener("abort", close);
    close();
  }
}

/** probeServer asks the server for `SELECT 1` on a connection of its own, closed once answered or once `signal` aborts. */
async function probeServer(options: PostgresOptions, signal: AbortSignal): Promise<void> {
  await onConnectionOfItsOwn(options, "SELECT 1", [], signal);
}

/** TablesHome is where a pool's sessions keep the service's tables, as openPostgres checked it. */
interface TablesHome {
  /** url is --database-url, named in a refusal */
  url: string;
  /** urlFrom names where the URL was given (DatabaseUrlFrom's named), in a refusal */
  urlFrom: string;
  /** schema is the sessions' current schema */
  schema: string;
  /** chosen tells whether --database-schema named the schema or it is the default */
  chosen: boolean;
}

/** unusableDatabase is the one-line ConfigError of a database the service cannot use, for `reason`, naming where its URL was given. */
function unusableDatabase({ url, urlFrom }: Pick<TablesHome, "url" | "urlFrom">, reason: string, cause?: unknown): ConfigError {
  // The cause tells the command line a server that cannot be reached just now (exit 3) from one refused for good.
  return new ConfigError(`cannot use the PostgreSQL database at ${redactedUrl(url)} (${urlFrom}): ${reason}`, { cause });
}

/** DEFAULT_DATABASE_SCHEMA holds the service's tables when --database-schema is not given. */
const DEFAULT_DATABASE_SCHEMA = "public";

/**
 * SERVER_FACTS reads, on a session of the role's own settings, what openPostgres checks before it
 * opens the pool ($1 is the schema of the tables): the server's version and encoding, whether the
 * schema exists and has a table named schema_migrations, the schemas the role may use that hold
 * the service's tables, and the search_path the pool's sessions get: the schema, then the schemas
 * of the extensions the tables use (their types' operators are looked up by name).
 * The service's tables are told by what only they have together: a schema_migrations with the
 * service's columns (Rails, golang-migrate and dbmate make one of their own) beside
 * webhook_subscriptions, both made by the first migration's transaction. Schemas the role may not
 * use are another installation's.
 */
const SERVER_FACTS = `SELECT current_setting('server_version_num')::int AS version, current_setting('server_version') AS name,
  current_setting('server_encoding') AS encoding,
  EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1::text) AS schema_exists,
  EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1::text AND c.relname = 'schema_migrations') AS named_there,
  ARRAY(SELECT n.nspname::text FROM pg_namespace n
        WHERE has_schema_privilege(n.oid, 'USAGE')
          AND EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'webhook_subscriptions')
          AND (SELECT count(*) FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
               WHERE c.relnamespace = n.oid AND c.relname = 'schema_migrations' AND a.attname IN ('version', 'name', 'applied_at') AND NOT a.attisdropped) = 3
        ORDER BY n.nspname) AS homes,
  (SELECT string_agg(quote_ident(s.name), ', ' ORDER BY s.rank, s.name)
     FROM (SELECT $1::text AS name, 0 AS rank
           UNION SELECT n.nspname::text, 1 FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
                  WHERE e.extname IN ('citext', 'pg_trgm') AND n.nspname <> $1::text) s) AS search_path`;

/** ServerFacts is what SERVER_FACTS reads. */
interface ServerFacts {
  version: number;
  name: string;
  encoding: string;
  schema_exists: boolean;
  named_there: boolean;
  homes: string[];
  search_path: string;
}

/**
 * readServerFacts reads SERVER_FACTS on a connection of its own, opened with `options` but none of
 * the pool's session settings.
 */
async function readServerFacts(options: PostgresOptions, schema: string): Promise<ServerFacts> {
  const [facts] = await onConnectionOfItsOwn(options, SERVER_FACTS, [schema]);
  return facts as unknown as ServerFacts;
}

/**
 * refusalOf says in one line why the service cannot use a server and database of these facts, or
 * null when it can; `chosen` tells whether --database-schema named `schema` or it is the default.
 */
function refusalOf(facts: ServerFacts, schema: string, chosen: boolean): string | null {
  if (facts.version < POSTGRES_MIN_VERSION) return `the server runs PostgreSQL ${facts.name}; the service needs ${POSTGRES_MIN_VERSION / 10000} or later`;
  // Another encoding fails later, at run time: LATIN1 cannot store a Greek name (a 500), and
  // SQL_ASCII stores any bytes unchecked and folds no letter beyond ASCII in name searches.
  if (facts.encoding !== "UTF8") {
    return `its encoding is ${facts.encoding}, and the service needs UTF8: create the database with createdb --encoding=UTF8 --locale=C.UTF-8 --template=template0`;
  }
  if (!facts.schema_exists) {
    return `it has no schema ${JSON.stringify(schema)} (--database-schema, CRM_DATABASE_SCHEMA): create it (CREATE SCHEMA ... AUTHORIZATION the service's role), or name the schema that holds the service's tables`;
  }
  const { homes } = facts;
  // Two copies: an older crm followed the role's search_path into a schema named like the role,
  // made after its first start. Which one the instances used last only the operator can tell.
  if (homes.length > 1 && !(chosen && homes.includes(schema))) {
    return `the service's tables are in more than one schema (${homes.map((home) => JSON.stringify(home)).join(", ")}): set --database-schema (CRM_DATABASE_SCHEMA) to the one in use (the README's Upgrading says how to tell which)`;
  }
  // The tables are elsewhere: made before --database-schema pinned the sessions, or --database-schema
  // is missing. Tables made again in `schema` would serve an empty CRM, and the extensions' schema
  // on the sessions' search_path would let unqualified names reach the others meanwhile.
  if (homes.length === 1 && homes[0] !== schema) {
    return `the service's tables are in schema ${JSON.stringify(homes[0])}, not in ${JSON.stringify(schema)} that --database-schema (CRM_DATABASE_SCHEMA) names: set it to ${homes[0]}`;
  }
  if (homes.length === 0 && facts.named_there) {
    return `schema ${JSON.stringify(schema)} holds a table schema_migrations that is not the service's (another tool's migrations?): set --database-schema (CRM_DATABASE_SCHEMA) to a schema of the service's own (CREATE SCHEMA ... AUTHORIZATION the service's role)`;
  }
  return null;
}

/**
 * openPostgres checks the server and connects a pool of at most `pool` connections, whose sessions
 * find the service's tables in `databaseSchema` (public when "") alone, whatever the role's
 * search_path (a schema named like the role made later would otherwise take the unqualified names,
 * and the next start would make every table again there). A database whose other schemas hold the
 * service's tables is refused (refusalOf). A server that cannot be reached or used is a
 * ConfigError naming where its URL was given (one line, no stack trace).
 * A statement the server leaves without any answer for `databaseAnswerTimeoutSeconds` is given up
 * (AnswerWatch); a pooled connection idle for `databaseIdleTimeoutSeconds` is closed, before a
 * firewall can forget it: a statement sent on a forgotten connection would wait for TCP to give
 * up (minutes), as the server still answers the watch's check on a new one.
 * The sessions wait `databaseAnswerTimeoutSeconds` at most for a lock another session holds, or,
 * with `waitOutLocks` (a one-time command such as copy-to-postgres), as long as it is held.
 */
export async function openPostgres(
  url: string,
  pool: number,
  {
    databaseSchema = DEFAULT_CONFIG.databaseSchema,
    databaseAnswerTimeoutSeconds = DEFAULT_CONFIG.databaseAnswerTimeoutSeconds,
    databaseIdleTimeoutSeconds = DEFAULT_CONFIG.databaseIdleTimeoutSeconds,
    databaseUrlFrom = DEFAULT_CONFIG.databaseUrlFrom,
    waitOutLocks = false,
  }: Partial<Pick<Config, "databaseSchema" | "databaseAnswerTimeoutSeconds" | "databaseIdleTimeoutSeconds" | "databaseUrlFrom">> & { waitOutLocks?: boolean } = {},
): Promise<PostgresDatabase> {
  const schema = databaseSchema || DEFAULT_DATABASE_SCHEMA;
  const chosen = databaseSchema !== "";
  const options: PostgresOptions = {
    url,
    max: pool,
    bigint: true,
    connectionTimeout: CONNECT_TIMEOUT_SECONDS,
    idleTimeout: databaseIdleTimeoutSeconds,
    maxLifetime: POOLED_CONNECTION_LIFETIME_SECONDS,
  };
  let db: PostgresDatabase | undefined;
  try {
    // Bun's client reads the URL as it is made (it decodes the user and password, and checks
    // sslmode), so a URL it refuses is told in the one line below too.
    const facts = await readServerFacts(options, schema);
    const refusal = refusalOf(facts, schema, chosen);
    if (refusal) throw new Error(refusal);
    db = new PostgresDatabase(
      // application_name names the service's sessions in pg_stat_activity. lock_timeout bounds
      // the reads (a read under an ALTER TABLE or a VACUUM FULL would hold its pooled connection
      // for as long, and a SET LOCAL in each would cost it a round trip); the writes, bookkeeping,
      // readWithin and migrations set their own in their transaction. PgBouncer refuses it unless
      // its ignore_startup_parameters lists it, and then drops it: the README has the role set it.
      {
        ...options,
        connection: {
          idle_in_transaction_session_timeout: IDLE_IN_TRANSACTION_TIMEOUT_MS,
          application_name: "crm",
          search_path: facts.search_path,
          ...SESSION_SETTINGS,
          ...SERVER_KEEPALIVES,
          lock_timeout: waitOutLocks ? 0 : databaseAnswerTimeoutSeconds * 1000,
        },
      },
      databaseAnswerTimeoutSeconds * 1000,
      databaseIdleTimeoutSeconds * 1000,
      { url, urlFrom: databaseUrlFrom.named, schema, chosen },
    );
    // A pooler that drops startup parameters (PgBouncer's ignore_startup_parameters) leaves the role's.
    const pinned = await db.get<{ schema: string | null }>("SELECT current_schema() AS schema");
    if (pinned?.schema !== schema) {
      throw new Error(`the sessions' search_path leads to schema ${JSON.stringify(pinned?.schema ?? null)}, not to ${JSON.stringify(schema)}: a connection pooler dropped the search_path the service asks for, set it on the role (ALTER ROLE ... SET search_path = ${facts.search_path})`);
    }
  } catch (error) {
    await db?.close().catch(() => {});
    const unresolved = errorCode(error) === "ERR_POSTGRES_CONNECTION_REFUSED" ? await hostLookupFailure(url) : null;
    // Without the client's error as its cause, a name that does not exist is refused for good (exit 2), not retried.
    const given = { url, urlFrom: databaseUrlFrom.named };
    if (unresolved) throw unusableDatabase(given, unresolved.reason, unresolved.temporary ? error : undefined);
    throw unusableDatabase(given, connectFailure(error), error);
  }
  return db;
}
