import { Database as SqliteConnection, SQLiteError, constants as sqliteFlags, type SQLQueryBindings, type Statement } from "bun:sqlite";
import { accessSync, chmodSync, constants, existsSync, rmSync, statSync, type BigIntStats } from "node:fs";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { ConfigError, type Synchronous } from "../config.ts";
import type { Logger } from "../shared/log.ts";
import { createOwnerOnlyFileIfAbsent, fileErrorText, giveToFolderOwner, makeOwnerOnlyDirectory, notOwnedText } from "../shared/files.ts";
import { ChangeClock } from "./change-clock.ts";
import { ReadLane } from "./read-lane.ts";
import type { Database, Db, ReaderName, ReadLimits, SqlValue } from "./sql.ts";
import { runWrites, WriteGroups, type CommittedGroup, type PendingWrite, type StorageFull } from "./write-groups.ts";
import { errorCode } from "../shared/thrown.ts";

/**
 * MAX_CACHED_STATEMENTS and MAX_CACHED_SQL_CHARACTERS bound the statement cache of a connection,
 * by count and by the length of the SQL kept (a long text prepares to a large statement: 150 KB
 * for a list of many filters). The app's everyday SQL stays below both; what a client can vary
 * (filters, sorts) makes more shapes, and 2,000 of them held 300 MB.
 */
const MAX_CACHED_STATEMENTS = 500;
const MAX_CACHED_SQL_CHARACTERS = 1_000_000;

/**
 * StatementCachingDatabase keeps every statement that `query` prepared. bun:sqlite's own cache
 * holds only the 20 most recent, and the API, the delivery loop and the console use many more,
 * so mixed traffic would prepare SQL again on most queries (~3.5 us each for a trivial one).
 */
class StatementCachingDatabase extends SqliteConnection {
  private readonly statements = new Map<string, Statement<any, any>>();
  private cachedSqlCharacters = 0;

  override query<ReturnType, ParamsType extends SQLQueryBindings | SQLQueryBindings[]>(sql: string): Statement<ReturnType, ParamsType extends any[] ? ParamsType : [ParamsType]> {
    let statement = this.statements.get(sql);
    if (!statement) {
      // The oldest go, finalized at once: every caller runs a statement as soon as it has it, and
      // left to the garbage collector, evicted statements piled up by the hundred megabytes.
      while (this.statements.size > 0 && (this.statements.size >= MAX_CACHED_STATEMENTS || this.cachedSqlCharacters + sql.length > MAX_CACHED_SQL_CHARACTERS)) {
        const [oldestSql, oldest] = this.statements.entries().next().value!;
        oldest.finalize();
        this.statements.delete(oldestSql);
        this.cachedSqlCharacters -= oldestSql.length;
      }
      statement = this.prepare(opaqueParameters(sql));
      this.statements.set(sql, statement);
      this.cachedSqlCharacters += sql.length;
    }
    return statement as Statement<ReturnType, ParamsType extends any[] ? ParamsType : [ParamsType]>;
  }

  override close(throwOnError?: boolean): void {
    for (const statement of this.statements.values()) statement.finalize();
    this.statements.clear();
    this.cachedSqlCharacters = 0;
    super.close(throwOnError);
  }
}

/**
 * opaqueParameters writes every `?` placeholder of a statement as `+?`, which binds the same value
 * with the same type and affinity. When the planner looks at a bare `?` (an equality next to an
 * ORDER BY, a LIMIT), SQLite notes that the plan may depend on its value and prepares the
 * statement again every time it is bound: that was 7-8 us of the ~9 us of a by-email page, on
 * every request. Behind `+` the planner sees an expression it cannot look into, and the plan is
 * made once; so a value a plan must see (one matching a partial index's condition, such as
 * status = 'pending') is written into the SQL. Quoted strings, quoted names and comments are left alone.
 */
export function opaqueParameters(sql: string): string {
  if (!sql.includes("?")) return sql;
  let out = "";
  let i = 0;
  while (i < sql.length) {
    const c = sql[i]!;
    if (c === "'" || c === '"' || c === "`") {
      const end = sql.indexOf(c, i + 1);
      const stop = end < 0 ? sql.length : end + 1;
      out += sql.slice(i, stop);
      i = stop;
    } else if (c === "-" && sql[i + 1] === "-") {
      const end = sql.indexOf("\n", i);
      const stop = end < 0 ? sql.length : end;
      out += sql.slice(i, stop);
      i = stop;
    } else if (c === "/" && sql[i + 1] === "*") {
      const end = sql.indexOf("*/", i + 2);
      const stop = end < 0 ? sql.length : end + 2;
      out += sql.slice(i, stop);
      i = stop;
    } else {
      out += c === "?" ? "+?" : c;
      i++;
    }
  }
  return out;
}

const NO_PARAMS: readonly SqlValue[] = [];

/**
 * ConnectionDb runs statements on one connection. The methods are plain functions around the
 * synchronous calls (no async frames): they are on the path of every request.
 */
class ConnectionDb implements Db {
  readonly dialect = "sqlite" as const;

  constructor(private readonly connection: StatementCachingDatabase) {}

  all<T>(sql: string, params: readonly SqlValue[] = NO_PARAMS): Promise<T[]> {
    try {
      return Promise.resolve(this.connection.query<T, SqlValue[]>(sql).all(...(params as SqlValue[])));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  get<T>(sql: string, params: readonly SqlValue[] = NO_PARAMS): Promise<T | null> {
    try {
      return Promise.resolve(this.connection.query<T, SqlValue[]>(sql).get(...(params as SqlValue[])));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  run(sql: string, params: readonly SqlValue[] = NO_PARAMS): Promise<number> {
    try {
      return Promise.resolve(this.connection.query(sql).run(...(params as SqlValue[])).changes);
    } catch (error) {
      return Promise.reject(error);
    }
  }
}

interface Watch {
  generation: number;
  dataVersion: number;
  checkedThisTurn: boolean;
}

/**
 * DatabaseReplaced refuses the writes of a service whose database file was replaced or removed
 * while it ran (SqliteDatabase.watchFile): its connections still hold the file they opened, now
 * unlinked, and a change written there would be lost at the next start, though answered 201.
 */
export class DatabaseReplaced extends Error {}

/**
 * SQLITE_SYNC_FAILED are the codes of a sync to disk that failed (the WAL's or the database's
 * fsync, or their directory's). In WAL mode the commit is rolled back (the frames are written but
 * not made visible), yet they may reach the disk and be read back at the next start unless a later
 * commit overwrites them; and after a failed fsync the kernel may have dropped pages written earlier.
 */
const SQLITE_SYNC_FAILED = /^SQLITE_IOERR_(DIR_)?FSYNC$/;

/** syncFailedCode is the SQLite code of an error that is a failed sync to disk (SQLITE_SYNC_FAILED), or null for any other. */
export function syncFailedCode(error: unknown): string | null {
  const code = errorCode(error);
  return code !== undefined && SQLITE_SYNC_FAILED.test(code) ? code : null;
}

/** isSqliteBusy tells whether an error is SQLite's refusal for a lock another connection holds: SQLITE_BUSY, or one of its extended codes. */
export function isSqliteBusy(error: unknown): boolean {
  return errorCode(error)?.startsWith("SQLITE_BUSY") ?? false;
}

/** FILE_CHECK_INTERVAL_MS is how often a serving database checks that its path still names the file it opened (watchFile): a stat, off the requests' path. */
const FILE_CHECK_INTERVAL_MS = 1000;

/** WRITE_LOCK_WAIT_MS is how long writes wait for a write lock another process holds, as SQLite's busy timeout of the other connections. */
export const WRITE_LOCK_WAIT_MS = 5_000;

/**
 * SqliteDatabase is the embedded backend: a writer connection for `write` and a reader connection
 * on the same file for every read outside it. Write work is async: between its awaits other
 * requests' continuations run, and had they read on the writer they would see a group's
 * uncommitted rows; the reader sees only what was committed.
 */
export class SqliteDatabase implements Database {
  readonly dialect = "sqlite" as const;
  readonly changeClock = new ChangeClock();
  /** sqlite is the writer connection, for SQLite-only work: migrations, backup, PRAGMAs and query plans in tests. */
  readonly sqlite: SqliteConnection;
  private readonly writer: StatementCachingDatabase;
  private readonly readerConnection: StatementCachingDatabase;
  private readonly reader: ConnectionDb;
  private readonly tx: ConnectionDb;
  private readonly groups = new WriteGroups(
    (take) => this.commitGroup(take),
    () => {
      for (const callback of this.afterCommitCallbacks) callback();
    },
  );
  private readonly afterCommitCallbacks: (() => void)[] = [];
  private watch: Watch | null = null;
  private closed = false;
  private readSnapshotOpen = false;
  private lane: ReadLane | null = null;
  /** opened holds the device and inode of each file of the database the connections opened (it, its WAL and shared memory); empty in memory */
  private readonly opened = new Map<string, BigIntStats>();
  private fileWatch: ReturnType<typeof setInterval> | null = null;
  /** replaced is the refusal of every write once watchFile found the file replaced */
  private replaced: DatabaseReplaced | null = null;
  /** syncFailed says what failed, once a sync to disk did */
  private syncFailed: string | null = null;

  /** lockWaitMs is how long a group waits for the write lock another process holds before its writes fail as busy (tests shorten it). */
  lockWaitMs = WRITE_LOCK_WAIT_MS;

  constructor(writer: StatementCachingDatabase, reader: StatementCachingDatabase, private readonly path: string) {
    // SQLite's own busy wait would hold the event loop, and every request with it, while another
    // process (a `crm` command, the sqlite3 shell, a backup tool) holds the write lock: the writer
    // fails at once instead, and beginGroup waits on timers.
    writer.run("PRAGMA busy_timeout = 0");
    this.sqlite = this.writer = writer;
    this.readerConnection = reader;
    this.reader = new ConnectionDb(reader);
    this.tx = new ConnectionDb(writer);
    if (path === ":memory:") return;
    for (const file of [path, `${path}-wal`, `${path}-shm`]) {
      const stat = statSync(file, { bigint: true, throwIfNoEntry: false });
      if (stat) this.opened.set(file, stat);
    }
  }

  /**
   * watchFile checks every FILE_CHECK_INTERVAL_MS that the database's path still names the file
   * the connections opened (its device and inode). An operator who restores a backup over it (mv,
   * install, rsync), or removes it, leaves the service writing to a file no path names: from then
   * on writes are refused (DatabaseReplaced) and storageFault says so, logged once. Reads go on.
   * A file rewritten in place (a plain cp over it) keeps its inode and is not noticed.
   */
  watchFile(log: Logger): void {
    const opened = this.opened.get(this.path);
    if (!opened) return;
    const watch = setInterval(() => {
      let now: BigIntStats | undefined;
      try {
        now = statSync(this.path, { bigint: true, throwIfNoEntry: false });
      } catch {
        // A folder on the way the service may not enter just now: the file may well be there; the next look tells.
        return;
      }
      if (now && sameDeviceAndInode(now, opened)) return;
      clearInterval(watch);
      this.replaced = new DatabaseReplaced(`the database file ${this.path} was replaced or removed while the service ran: it refuses changes until it is restarted, which opens the file now at that path`);
      // The WAL and shared memory at the path are the lost file's: SQLite does not remove them when
      // its file has moved, and the next start, or a crm command meanwhile, would apply that log to
      // the file now there and corrupt it. The connections keep them open for their reads.
      const removed = [`${this.path}-wal`, `${this.path}-shm`].filter((file) => this.removeIfOpened(file));
      log.error("the database file was replaced or removed under the running service: changes are refused (503 database-replaced) and /readyz fails until it is restarted; restart it to serve the file now at the path", {
        path: this.path,
        inode_opened: String(opened.ino),
        inode_now: now ? String(now.ino) : "none: removed",
        removed,
      });
    }, FILE_CHECK_INTERVAL_MS);
    watch.unref();
    this.fileWatch = watch;
  }

  /** removeIfOpened removes `file` when it is still the one the connections opened, and tells whether it did. */
  private removeIfOpened(file: string): boolean {
    const opened = this.opened.get(file);
    try {
      const now = statSync(file, { bigint: true, throwIfNoEntry: false });
      if (!opened || !now || !sameDeviceAndInode(now, opened)) return false;
      rmSync(file);
      return true;
    } catch {
      return false;
    }
  }

  storageFull(): StorageFull | null {
    return this.groups.storageFull();
  }

  /** storageFault says why this database's storage cannot be trusted until the service is restarted (its file replaced, or a sync to disk failed), or null. */
  storageFault(): string | null {
    return this.replaced?.message ?? this.syncFailed;
  }

  /**
   * useReadLane has readAside run its reads on a read lane holding at most `capacity` of them
   * (read-lane.ts), whose thread opens the file the connections opened now, not at the first slow
   * read; 0, or an in-memory database, keeps them on this thread.
   */
  useReadLane(capacity: number, log: Logger): void {
    const file = this.opened.get(this.path);
    if (capacity > 0 && file) this.lane = new ReadLane(this.path, file, capacity, (work) => this.read(work), log);
  }

  /** readAside runs slow reads in one snapshot on the read lane when there is one (useReadLane) and the file was not replaced, else as `read`. */
  readAside<T>(work: (db: Db) => Promise<T>, reader: ReaderName): Promise<T> {
    // Once the file was replaced, reads go on from the lost file, which the main thread's reader holds.
    return this.lane && !this.replaced ? this.lane.read(work, reader) : this.read(work);
  }

  readsAside(): number {
    return this.lane?.held ?? 0;
  }

  all<T>(sql: string, params?: readonly SqlValue[]): Promise<T[]> {
    this.openReadSnapshot();
    return this.reader.all(sql, params);
  }

  get<T>(sql: string, params?: readonly SqlValue[]): Promise<T | null> {
    this.openReadSnapshot();
    return this.reader.get(sql, params);
  }

  /**
   * openReadSnapshot makes the reads of one event-loop turn share one read transaction on the
   * reader. A statement on its own begins and ends a read transaction of its own, taking and
   * releasing the WAL's read lock: ~2.4 us, most of a lookup by email. The snapshot ends at the
   * end of the turn, and before every commit of the writer, so a read made after a write was
   * committed (its request answered, or later in the same request) always sees it.
   */
  private openReadSnapshot(): void {
    if (this.readSnapshotOpen || this.readerConnection === this.writer) return;
    this.readerConnection.query("BEGIN").run();
    this.readSnapshotOpen = true;
    setImmediate(this.closeReadSnapshot);
  }

  private readonly closeReadSnapshot = (): void => {
    if (!this.readSnapshotOpen) return;
    this.readSnapshotOpen = false;
    this.readerConnection.query("COMMIT").run();
  };

  /** refreshReads ends this turn's read snapshot, so the next read sees what was committed on the writer outside `write` (migrations). */
  refreshReads(): void {
    this.closeReadSnapshot();
  }

  /** read needs nothing more here: reads of one turn share a snapshot (openReadSnapshot), and `work` awaits only its reads. */
  read<T>(work: (db: Db) => Promise<T>): Promise<T> {
    return work(this);
  }

  /** readWithin is `read`: in WAL mode a read waits for no lock, and this thread runs it to its end. */
  readWithin<T>(_limits: ReadLimits, work: (db: Db) => Promise<T>): Promise<T> {
    return this.read(work);
  }

  /** run outside `write` is a write of its own: the reader connection does not change data. */
  run(sql: string, params?: readonly SqlValue[]): Promise<number> {
    return this.write((tx) => tx.run(sql, params));
  }

  /** write commits the writes of concurrent requests together (WriteGroups): one transaction and one sync to disk a group. */
  write<T>(work: (tx: Db) => Promise<T>): Promise<T> {
    if (this.replaced) return Promise.reject(this.replaced);
    return this.groups.submit(work);
  }

  /**
   * writeBookkeeping is a `write` that does not wait for another process's lock: within this
   * process writes take their turns, and while another process holds the write lock it is refused
   * with SQLite's busy error (beginGroup), where other writes wait for up to lockWaitMs.
   */
  writeBookkeeping(work: (tx: Db) => Promise<void>): Promise<void> {
    if (this.replaced) return Promise.reject(this.replaced);
    return this.groups.submit(work, true);
  }

  writeIndex(work: (tx: Db) => Promise<void>): Promise<void> {
    return this.groups.submit(work);
  }

  writesWaiting(): number {
    return this.groups.waiting();
  }

  committedRecently(withinMs: number): boolean {
    return this.groups.committedRecently(withinMs);
  }

  /** onCommit registers a callback run after every group commit that changed rows (used to wake the delivery loop). */
  onCommit(callback: () => void): void {
    this.afterCommitCallbacks.push(callback);
  }

  private async commitGroup(take: () => PendingWrite[]): Promise<CommittedGroup> {
    const writer = this.writer;
    // The transaction and savepoint statements are prepared once (db.run would prepare them on every write).
    if (!(await this.beginGroup())) return { outcomes: [], changed: false };
    const changesBefore = this.totalChanges();
    try {
      const outcomes = await runWrites(take(), this.tx, {
        open: () => writer.query("SAVEPOINT write").run(),
        release: () => writer.query("RELEASE write").run(),
        rollBack: () => {
          writer.query("ROLLBACK TO write").run();
          writer.query("RELEASE write").run();
        },
      });
      const changed = this.totalChanges() !== changesBefore;
      this.closeReadSnapshot();
      writer.query("COMMIT").run();
      return { outcomes, changed };
    } catch (error) {
      const syncFailed = syncFailedCode(error);
      if (syncFailed) {
        this.syncFailed ??= `the database's storage failed a sync to disk (${syncFailed}): the disk may be failing, and a change refused then may still reach it; check the disk and its kernel log, then restart the service`;
      }
      if (writer.inTransaction) writer.query("ROLLBACK").run();
      throw error;
    }
  }

  /** waitingForLocks runs synchronous work on the writer (migrations at start-up) with SQLite's own busy wait, which holds the event loop: nothing is served yet. */
  waitingForLocks<T>(work: (writer: SqliteConnection) => T): T {
    this.writer.run(`PRAGMA busy_timeout = ${this.lockWaitMs}`);
    try {
      return work(this.writer);
    } finally {
      this.writer.run("PRAGMA busy_timeout = 0");
    }
  }

  /**
   * beginGroup opens a group's transaction, taking the write lock, and tells whether it did. While
   * another process holds it, it refuses the bookkeeping waiting (writeBookkeeping) with SQLite's
   * busy error and tries again after 1 ms, then 2, 4 and so on up to 50, for lockWaitMs, then
   * throws that error (a 503 to the requests of the group). It opens none once the bookkeeping
   * was all there was to write: an empty group would wait for the lock with nothing to commit,
   * and a write coming meanwhile would join it with what is left of its wait, not a wait of its own.
   */
  private async beginGroup(): Promise<boolean> {
    const deadline = Date.now() + this.lockWaitMs;
    for (let pause = 1; ; pause = Math.min(pause * 2, 50)) {
      try {
        this.writer.query("BEGIN IMMEDIATE").run();
        return true;
      } catch (error) {
        if (!isSqliteBusy(error) || Date.now() >= deadline) throw error;
        this.groups.refuseThoseGivingUp(error);
        if (this.groups.waiting() === 0) return false;
      }
      await Bun.sleep(Math.min(pause, Math.max(0, deadline - Date.now())));
    }
  }

  private totalChanges(): number {
    return this.writer.query<{ n: number }, []>("SELECT total_changes() AS n").get()!.n;
  }

  /** listen has nothing to listen to: one process owns the database and its commits wake it (onCommit). */
  async listen(): Promise<() => Promise<void>> {
    return async () => {};
  }

  /** notify has nobody to tell: no other instance shares a SQLite database. */
  async notify(): Promise<void> {}

  /**
   * outsideWritesGeneration returns a number that changes whenever another connection (a CLI
   * command such as `token revoke`, a second process) has committed to the database, so caches of
   * database rows can tell whether they may still be served. It reads SQLite's data_version at
   * most once per event-loop turn (~2 us each): a request that reached the server after such a
   * commit was read in a later turn's poll than the commit, so its check sees the change. It reads
   * it on the writer: data_version changes for other connections' commits only, and on the reader
   * every one of our own writes would count.
   */
  outsideWritesGeneration(): number {
    let watch = this.watch;
    if (!watch) {
      watch = this.watch = { generation: 0, dataVersion: this.readDataVersion(), checkedThisTurn: true };
      setImmediate(endTurn, watch);
      return watch.generation;
    }
    if (!watch.checkedThisTurn) {
      watch.checkedThisTurn = true;
      setImmediate(endTurn, watch);
      const dataVersion = this.readDataVersion();
      if (dataVersion !== watch.dataVersion) {
        watch.dataVersion = dataVersion;
        watch.generation++;
      }
    }
    return watch.generation;
  }

  private readDataVersion(): number {
    return this.writer.query<{ data_version: number }, []>("PRAGMA data_version").get()!.data_version;
  }

  /** close commits what is queued and closes both connections. */
  async close(): Promise<void> {
    if (this.closed) return;
    if (this.fileWatch) clearInterval(this.fileWatch);
    this.changeClock.stop();
    await this.lane?.close();
    await this.groups.drain();
    this.closed = true;
    this.closeReadSnapshot();
    if (this.readerConnection !== this.writer) this.readerConnection.close();
    this.writer.close();
  }
}

/** FileId names a file whatever path names it: its device and inode. */
export type FileId = Pick<BigIntStats, "dev" | "ino">;

/** sameDeviceAndInode tells whether two stats are of one file, whatever path named each: the same device and inode. */
function sameDeviceAndInode(a: FileId, b: FileId): boolean {
  return a.dev === b.dev && a.ino === b.ino;
}

/**
 * refuseAnotherFile throws DatabaseReplaced unless `path` names `file`. A connection opened on the
 * file now at the path would pair it with the WAL and shared memory the service's connections hold
 * of the file they opened, and seeing no lock of theirs on it, write that log into it at its close.
 */
function refuseAnotherFile(path: string, file: FileId): void {
  const now = statSync(path, { bigint: true, throwIfNoEntry: false });
  if (!now || !sameDeviceAndInode(now, file)) throw new DatabaseReplaced(`the database file ${path} is not the one the service opened: it was replaced or removed`);
}

function endTurn(watch: Watch): void {
  watch.checkedThisTurn = false;
}

/**
 * openConnection opens the SQLite file with the pragmas every connection needs. A file that cannot
 * be opened (another user's, not a database, read-only) is a ConfigError naming the file and the
 * setting, reported as one line; one another user owns says whose it is and the fix, not SQLite's
 * "unable to open database file". `alone`: in EXCLUSIVE locking mode (openDatabaseAlone), its
 * busy error thrown as it is while another process has the file open.
 */
function openConnection(path: string, synchronous: Synchronous, file?: FileId, { alone = false }: { alone?: boolean } = {}): StatementCachingDatabase {
  let db: StatementCachingDatabase | undefined;
  try {
    if (file) {
      // Before any statement: SQLite opens the WAL and shared memory at the path only with the
      // first one, and a connection closed before that writes nothing.
      refuseAnotherFile(path, file);
      db = new StatementCachingDatabase(path, { readwrite: true, strict: true });
      refuseAnotherFile(path, file);
    } else {
      db = new StatementCachingDatabase(path, { create: true, strict: true });
    }
    if (alone) {
      // Before the first read, which takes the lock: refused at once while another process has the file open.
      db.run("PRAGMA busy_timeout = 0");
      db.run("PRAGMA locking_mode = EXCLUSIVE");
    }
    db.run("PRAGMA journal_mode = WAL");
    db.run(synchronous === "full" ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL");
    db.run("PRAGMA foreign_keys = ON");
    db.run(`PRAGMA busy_timeout = ${WRITE_LOCK_WAIT_MS}`);
    // bun:sqlite's default 2 MB page cache would re-read count(*) indexes from disk on every request.
    db.run("PRAGMA cache_size = -16000");
    db.run("PRAGMA temp_store = MEMORY");
    // A deleted row's bytes are overwritten in the pages its delete writes anyway (no extra I/O), so a
    // deleted contact does not stay readable in the file's free space until the space is reused.
    // Whole pages put on the free list keep theirs, and so do WAL frames until the log restarts.
    db.run("PRAGMA secure_delete = FAST");
    return db;
  } catch (error) {
    db?.close();
    if (!(error instanceof SQLiteError) || (alone && isSqliteBusy(error))) throw error;
    // SQLite opens the WAL and shared-memory files too: a stale one of root's fails the open as well.
    const notOwned = [path, `${path}-wal`, `${path}-shm`].map((file) => notOwnedText(file, dirname(path))).find((text) => text !== null);
    throw new ConfigError(`cannot open the database ${path} (--data-dir, CRM_DATA_DIR): ${notOwned ?? error.message}`);
  }
}

/**
 * keepOwnerOnly makes a file of the database 0600 when it is not, whatever the umask it was
 * created under; a file the process may not chmod (another user's: a restore copied by root,
 * a WAL a root process left) is a ConfigError naming its owner and the fix.
 */
function keepOwnerOnly(database: string, file: string): void {
  const stat = statSync(file, { throwIfNoEntry: false });
  if (!stat || (stat.mode & 0o777) === 0o600) return;
  try {
    chmodSync(file, 0o600);
  } catch (error) {
    throw new ConfigError(`cannot open the database ${database} (--data-dir, CRM_DATA_DIR): ${notOwnedText(file, dirname(database)) ?? fileErrorText(error)}`);
  }
}

/** createDatabaseFile creates an absent database file empty and 0600 (SQLite takes an empty file for a new database), and tells whether it did. */
function createDatabaseFile(path: string): boolean {
  try {
    return createOwnerOnlyFileIfAbsent(path);
  } catch (error) {
    throw new ConfigError(`cannot open the database ${path} (--data-dir, CRM_DATA_DIR): ${fileErrorText(error)}`);
  }
}

/**
 * openDatabase opens the service's SQLite file: a writer and a reader connection with the pragmas
 * every connection needs. "full" (the default) syncs the WAL on every commit, so an answered write
 * survives power loss; group commit makes that one sync per batch of concurrent writes rather
 * than one per request. An in-memory database has one connection for both. Its files are made
 * 0600, except for a copy (`copying`: backup), which only reads and may read a file it cannot chmod,
 * or one on a file system that takes no writes (openUnwritable).
 */
export function openDatabase(path: string, synchronous: Synchronous = "full", { copying = false }: { copying?: boolean } = {}): SqliteDatabase {
  if (copying && takesNoWrites(dirname(path))) {
    const file = openUnwritable(path);
    return new SqliteDatabase(file, file, path);
  }
  const owned = path !== ":memory:" && !copying;
  // 0600 before SQLite opens it, not made so after: a descriptor another user took meanwhile would
  // read the file for good. SQLite gives the journal, WAL and shared-memory files it creates the database's mode.
  const created = owned && createDatabaseFile(path);
  if (owned) keepOwnerOnly(path, path);
  const writer = openConnection(path, synchronous);
  if (owned) {
    try {
      for (const part of [path, `${path}-wal`, `${path}-shm`]) {
        if (created && existsSync(part)) giveToFolderOwner(part);
        keepOwnerOnly(path, part);
      }
    } catch (error) {
      writer.close();
      throw error;
    }
  }
  const reader = path === ":memory:" ? writer : openReadOnlyConnection(path, synchronous);
  return new SqliteDatabase(writer, reader, path);
}

/** takesNoWrites tells whether a directory is on a file system that takes no writes: mounted read-only, or turned so by the kernel after a disk error. */
function takesNoWrites(directory: string): boolean {
  try {
    accessSync(directory, constants.W_OK);
    return false;
  } catch (error) {
    return errorCode(error) === "EROFS";
  }
}

/**
 * openUnwritable opens, to copy it, a database on a file system that takes no writes, where SQLite
 * can create no WAL or shared memory to open it otherwise; nothing there can change the file. One
 * closed cleanly (no WAL beside it: all of it is in the file) opens immutable: read as it is, with
 * no lock. A WAL left beside it (a serve killed, or the file system turned read-only under it)
 * holds commits the file lacks, which `immutable=1` would not copy: with no locks (the unix-none
 * VFS) and in EXCLUSIVE locking mode SQLite reads it through an index in memory, without the
 * shared-memory file, which may be missing too (it could not be opened without it).
 */
function openUnwritable(path: string): StatementCachingDatabase {
  const withWal = existsSync(`${path}-wal`);
  let db: StatementCachingDatabase | undefined;
  try {
    db = new StatementCachingDatabase(`${pathToFileURL(path).href}?${withWal ? "vfs=unix-none" : "immutable=1"}`, sqliteFlags.SQLITE_OPEN_READONLY | sqliteFlags.SQLITE_OPEN_URI);
    if (withWal) db.run("PRAGMA locking_mode = EXCLUSIVE");
    return db;
  } catch (error) {
    db?.close();
    if (!(error instanceof SQLiteError)) throw error;
    throw new ConfigError(`cannot open the database ${path} (--data-dir, CRM_DATA_DIR): ${error.message}`);
  }
}

/**
 * openReadOnlyConnection opens a connection that only reads the SQLite file (the reader, the read
 * lane's). Given `file`, the one the service opened, it throws DatabaseReplaced unless the path
 * names that file from before the open to after it (and it creates none).
 */
export function openReadOnlyConnection(path: string, synchronous: Synchronous = "full", file?: FileId): StatementCachingDatabase {
  const reader = openConnection(path, synchronous, file);
  // The reader only reads: a write there would wait on the writer's open group transaction.
  reader.run("PRAGMA query_only = ON");
  return reader;
}

/** STORAGE_FAULTS are the codes of a file system that takes no writes (EROFS) or has no room left (ENOSPC). */
const STORAGE_FAULTS = new Set(["EROFS", "ENOSPC"]);

/**
 * databasePath returns the SQLite file inside a data directory, creating the directory (0700) if
 * needed and making its crm.lock 0600 (tightenLockFile); a directory that cannot be used is a
 * ConfigError, reported as one line naming the setting. A file system that takes no writes (EROFS)
 * or has no room (ENOSPC) is no fault of the setting: its error is thrown as it is, a storage fault
 * the command line tells as such (exit 3).
 */
export function databasePath(dataDir: string): string {
  try {
    makeOwnerOnlyDirectory(dataDir);
    if (!statSync(dataDir).isDirectory()) throw new Error("it is not a directory");
    accessSync(dataDir, constants.R_OK | constants.W_OK);
  } catch (error) {
    if (STORAGE_FAULTS.has(errorCode(error) ?? "")) throw error;
    throw new ConfigError(`invalid data directory ${JSON.stringify(dataDir)} (--data-dir, CRM_DATA_DIR): ${notOwnedText(dataDir, dataDir) ?? (error as Error).message}`);
  }
  tightenLockFile(dataDir);
  return databaseFile(dataDir);
}

/**
 * tightenLockFile makes a data directory's crm.lock 0600 at every start and command: a crm before
 * made it under the umask (0644), and only one that takes the lock (lockDataDirectory) made it
 * 0600, while in a directory others may enter (one made before crm, 0755) a user who may read
 * it may hold a read lock on it, which stops serve's claim.
 * Another user's is left for lockDataDirectory to refuse, naming its owner: a command that takes
 * no lock goes on.
 */
function tightenLockFile(dataDir: string): void {
  const path = dataDirectoryLockFile(dataDir);
  const stat = statSync(path, { throwIfNoEntry: false });
  if (!stat?.isFile() || (stat.mode & 0o777) === 0o600) return;
  try {
    chmodSync(path, 0o600);
  } catch (error) {
    // Another user's lock stays as it is (whatever takes it names its owner), and a read-only file system takes no chmod.
    if (errorCode(error) !== "EPERM" && errorCode(error) !== "EROFS") throw error;
  }
}

/**
 * lockDataDirectory claims a data directory for one process that must have it alone (`serve`,
 * or a command while it changes the schema or copies the database) and returns the function that
 * lets it go; null when another process holds it. The claim is an exclusive SQLite lock on
 * crm.lock: a POSIX lock, which the kernel drops when the process ends, however it ends, so no
 * stale claim outlives a crash. The directory must exist (databasePath makes it).
 */
export function lockDataDirectory(dataDir: string): (() => void) | null {
  const path = dataDirectoryLockFile(dataDir);
  let lock: SqliteConnection | undefined;
  try {
    const created = createOwnerOnlyFileIfAbsent(path);
    if (created) giveToFolderOwner(path);
    else chmodSync(path, 0o600);
    lock = new SqliteConnection(path, { create: true });
    lock.run("PRAGMA locking_mode = EXCLUSIVE");
    // No journal file beside the lock: the transaction never writes.
    lock.run("PRAGMA journal_mode = MEMORY");
    lock.run("BEGIN EXCLUSIVE");
  } catch (error) {
    lock?.close();
    if (isSqliteBusy(error)) return null;
    // Another user's lock file (a command run as root created it) is a setting to fix, told in one line.
    throw new ConfigError(`cannot open the lock file ${path} (--data-dir, CRM_DATA_DIR): ${notOwnedText(path, dataDir) ?? (error instanceof SQLiteError ? error.message : fileErrorText(error))}`);
  }
  const held = lock;
  return () => held.close();
}

/**
 * openDatabaseAlone opens the SQLite file at `path` on one connection that has it to itself, for a
 * schema change, or null when another process has the file open, whether or not it holds crm.lock
 * (a serve from before 2026-11-27 takes none). In WAL mode every connection holds a shared lock on
 * the file from its first read until it closes, and a connection in EXCLUSIVE locking mode takes an
 * exclusive one at its first read, refused while any is held, and keeps it until it closes: what
 * runs on it runs with no other process in the file. A check on a connection of its own, closed
 * before the work's connections opened, left an instant for a serve to open the file unseen.
 * This process must have no connection of its own open on the file: SQLite counts its locks too.
 */
export function openDatabaseAlone(path: string, synchronous: Synchronous = "full"): SqliteDatabase | null {
  let connection: StatementCachingDatabase;
  try {
    connection = openConnection(path, synchronous, undefined, { alone: true });
  } catch (error) {
    if (isSqliteBusy(error)) return null;
    throw error;
  }
  const db = new SqliteDatabase(connection, connection, path);
  try {
    // Takes the exclusive lock now, should the PRAGMAs not have read the file.
    connection.query("SELECT count(*) FROM sqlite_master").get();
    return db;
  } catch (error) {
    connection.close();
    if (isSqliteBusy(error)) return null;
    throw error;
  }
}

/** dataDirectoryLockFile is the file lockDataDirectory holds locked in a data directory. */
export function dataDirectoryLockFile(dataDir: string): string {
  return join(dataDir, "crm.lock");
}

/** databaseFile is where a data directory keeps its SQLite database; nothing is created. */
export function databaseFile(dataDir: string): string {
  return join(dataDir, "crm.sqlite");
}
