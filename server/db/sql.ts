/**
 * The storage interface every feature's store is written against. Two implementations: SQLite
 * (bun:sqlite, the embedded default) and PostgreSQL (Bun's SQL client, several instances). Stores
 * take a `Db` and stay ignorant of which one runs; services open writes with `Database.write`.
 *
 * SQL written for both backends follows these rules:
 * - placeholders are positional `?` only (the PostgreSQL implementation numbers them `$1`, `$2`...;
 *   never put a literal `?` inside a quoted string);
 * - booleans are integers 0/1, JSON is text, instants are integer milliseconds since the epoch;
 * - `INSERT ... ON CONFLICT (...) DO NOTHING / DO UPDATE SET x = excluded.x` and `RETURNING`, not
 *   `INSERT OR IGNORE/REPLACE`; `IS NOT DISTINCT FROM` is spelled out where NULLs compare;
 * - where the dialects really differ (full-text search, JSON functions, PRAGMA), branch on
 *   `db.dialect` inside the store function, never in a service.
 */

import type { Logger } from "../shared/log.ts";
import type { ChangeClock } from "./change-clock.ts";
import type { StorageFull } from "./write-groups.ts";

/** SqlValue is what a statement parameter may be on both backends. */
export type SqlValue = string | number | null | Uint8Array;

/** Dialect names the backend a Db talks to. */
export type Dialect = "sqlite" | "postgres";

/** ReaderName names who submits a slow read (an API token's id): the read lane serves its readers in turn. */
export type ReaderName = string;

/** ReadLimits bound the statements of a readWithin on PostgreSQL (lock_timeout, statement_timeout). */
export interface ReadLimits {
  lockTimeoutMs: number;
  statementTimeoutMs: number;
}

/** Db runs statements: the Database itself for reads, or the transaction handle inside `write`. */
export interface Db {
  readonly dialect: Dialect;
  /** all returns every row of a query. */
  all<T>(sql: string, params?: readonly SqlValue[]): Promise<T[]>;
  /** get returns the first row of a query, or null. */
  get<T>(sql: string, params?: readonly SqlValue[]): Promise<T | null>;
  /** run executes a statement and returns how many rows it changed. */
  run(sql: string, params?: readonly SqlValue[]): Promise<number>;
}

/** Database is an open backend: reads through its Db methods, changes through `write`. */
export interface Database extends Db {
  /** changeClock stamps the changes of contacts, accounts and users: the wall clock, never going back within this process */
  readonly changeClock: ChangeClock;
  /**
   * write runs `work` in a transaction and resolves with its result once committed. Work does only
   * database work through `tx` (no network, no timers): both backends run concurrent writes one
   * after the other inside one group commit (WriteGroups), each in its own savepoint, so a work
   * that throws rolls back alone and is answered with its error.
   */
  write<T>(work: (tx: Db) => Promise<T>): Promise<T>;
  /**
   * writeBookkeeping runs the bookkeeping a request does in passing (a token's last use, a console
   * session's visit), which no other write reads, and which gives up on a lock held elsewhere
   * rather than keep the request waiting: on PostgreSQL in a transaction of its own outside the
   * write lock, where it skips a row another session holds (unlessHeld) and, after a 50 ms
   * lock_timeout, the whole of `work` while a table it needs is locked (resolving, the skip logged
   * by the database at most once a minute); on SQLite as `write`, refused at once while another
   * process holds the write lock instead of waiting for it.
   */
  writeBookkeeping(work: (tx: Db) => Promise<void>): Promise<void>;
  /**
   * writeIndex runs a `write` that only brings an index up to date with rows the database holds
   * (the name search's waiting names). On SQLite it goes on after the file was replaced, where
   * `write` is refused: the reads that go on from the lost file need it, and it answers no change
   * that the restart would lose.
   */
  writeIndex(work: (tx: Db) => Promise<void>): Promise<void>;
  /**
   * read runs reads that must agree with each other (a row and its children) in one snapshot.
   * SQLite's reads of one event-loop turn already share one; on PostgreSQL each statement on the
   * pool sees every commit made before it, so a row and its children could disagree.
   */
  read<T>(work: (db: Db) => Promise<T>): Promise<T>;
  /**
   * readWithin is `read` for reads that would rather fail than wait (the scrape's gauges): on
   * PostgreSQL each statement waits at most `lockTimeoutMs` for a lock another session holds (a
   * VACUUM FULL, an ALTER TABLE) and runs at most `statementTimeoutMs`, so its connection is given
   * back; SQLite's reads wait for no lock.
   */
  readWithin<T>(limits: ReadLimits, work: (db: Db) => Promise<T>): Promise<T>;
  /**
   * useReadLane bounds the reads of readAside to `capacity` held at once (0: unbounded, run as
   * `read`): SQLite runs them on a thread of their own, PostgreSQL on at most half its pool.
   */
  useReadLane(capacity: number, log: Logger): void;
  /**
   * readAside is `read` for reads that take long (a count of many rows), on the read lane when one
   * is set (useReadLane): off SQLite's thread answering requests, on part of PostgreSQL's pool. The
   * lane serves its readers (`reader`, an API token's id) in turn.
   */
  readAside<T>(work: (db: Db) => Promise<T>, reader: ReaderName): Promise<T>;
  /** readsAside counts the reads on the read lane, waiting or running; always 0 without one. */
  readsAside(): number;
  /** committedRecently tells whether a `write` of this process committed a change within `withinMs`, its group refusing none, and none was refused since (WriteGroups). */
  committedRecently(withinMs: number): boolean;
  /** writesWaiting counts the writes of this process not committed yet: queued for their group, or in the one being committed. */
  writesWaiting(): number;
  /** onCommit registers a callback run after each commit of `write` in this process (wakes the delivery loop). */
  onCommit(callback: () => void): void;
  /**
   * outsideWritesGeneration returns a number that changes whenever another process or instance may
   * have changed the data, so caches of rows (API tokens) can tell whether they may still be served.
   */
  outsideWritesGeneration(): number;
  /**
   * listen calls `onNotify` with the payload whenever an instance notifies `channel`, and once
   * more with null after a lost listening connection is back (notifications may have been missed
   * meanwhile); it resolves with a function that stops listening. A first subscribe the server
   * refuses is told to `onRefused`, and tried again until it succeeds (then null follows). A SQLite
   * database has one process: nothing ever arrives.
   */
  listen(channel: string, onNotify: (payload: string | null) => void, onRefused: (error: unknown) => void): Promise<() => Promise<void>>;
  /** notify tells every instance listening on `channel` (outside any transaction), with `payload` ("" without); nothing on SQLite. */
  notify(channel: string, payload?: string): Promise<void>;
  /** storageFault says why the database's storage cannot be trusted until the service is restarted (on SQLite: its file replaced, a sync to disk failed), or null; /readyz fails with it. */
  storageFault(): string | null;
  /** storageFull is the last write refused for want of room since no write has succeeded (WriteGroups.storageFull), or null; /readyz fails with it. */
  storageFull(): StorageFull | null;
  /** close commits what is queued and closes the connections. */
  close(): Promise<void>;
}

/** MigrationWarn tells the operator of what a migration did that needs them (the service's log at warn, stderr on the command line), once it committed. */
export type MigrationWarn = (message: string, fields: Record<string, unknown>) => void;

/**
 * PartlyDone is a writeInSteps ended by a step that threw after steps before it committed: `cause`
 * is the step's error, and `done` says what the committed steps did, which stays done. A request's
 * answer is the cause's, saying so (the same request sent again finishes the change).
 */
export class PartlyDone extends Error {
  override readonly name = "PartlyDone";

  constructor(
    override readonly cause: unknown,
    readonly done: string,
  ) {
    super(`${(cause as Error | null)?.message ?? String(cause)} (before it, ${done})`);
  }
}

/**
 * BATCH_ROWS is how many rows one write of a bulk change of webhook deliveries or records changes
 * at most (the Runtime's batchRows; tests choose theirs). Each such write is short, so other
 * writes (on SQLite, every request) take their turns in between: one UPDATE of 200,000 deliveries
 * held SQLite's event loop for 5 s, PostgreSQL's write lock for 23 s.
 */
export const BATCH_ROWS = 1000;

/**
 * writeInSteps runs `step` in one write after another until it returns something other than null,
 * and resolves with that: a change too large for one short write (an account's or a user's
 * contacts unlinked) commits a bounded part at a time, and other writes, which wait for the write
 * lock (on SQLite, every request, which waits for the event loop), take their turns in between.
 * A step that throws ends it: the first with its error, a later one with PartlyDone, its error and
 * `done(committed)`, which says what the steps already committed (`committed` of them) did: they
 * stay. `first` tells a step whether it is the first write, the one that decides whether the
 * change happens at all.
 */
export async function writeInSteps<T>(db: Database, step: (tx: Db, first: boolean) => Promise<T | null>, done: (committed: number) => string): Promise<T> {
  for (let committed = 0; ; committed++) {
    let result: T | null;
    try {
      result = await db.write((tx) => step(tx, committed === 0));
    } catch (error) {
      throw committed === 0 ? error : new PartlyDone(error, done(committed));
    }
    if (result !== null) return result;
  }
}

/**
 * unlessHeld is the condition `key = ?` of an UPDATE of bookkeeping (writeBookkeeping): on
 * PostgreSQL it skips the row while another session holds it, rather than wait for it (NO KEY, so
 * a transaction that only references the row, inserting a child of it, is no obstacle).
 */
export function unlessHeld(db: Db, table: string, key: string): string {
  return db.dialect === "postgres" ? `${key} = (SELECT ${key} FROM ${table} WHERE ${key} = ? FOR NO KEY UPDATE SKIP LOCKED)` : `${key} = ?`;
}

/** NotRecorded is bookkeeping left unwritten because another session held its row (unlessHeld), or the row was gone by then. */
export class NotRecorded extends Error {
  constructor(tables: string) {
    super(`not recorded in ${tables}: the row is locked by another session, or was removed meanwhile`);
  }
}
