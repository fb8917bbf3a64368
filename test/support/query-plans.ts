import type { Database as SqliteConnection } from "bun:sqlite";
import type { Database, Db, SqlValue } from "../../server/db/sql.ts";

/** Captured is one statement run through a capturing database, with its parameters. */
export interface Captured {
  sql: string;
  params: unknown[];
}

/** capturingReads wraps `db` so every read run through it is pushed onto `captured` with its parameters. */
function capturingReads(db: Db, captured: Captured[]): Db {
  return {
    dialect: db.dialect,
    all<T>(sql: string, params: readonly SqlValue[] = []) {
      captured.push({ sql, params: [...params] });
      return db.all<T>(sql, params);
    },
    get<T>(sql: string, params: readonly SqlValue[] = []) {
      captured.push({ sql, params: [...params] });
      return db.get<T>(sql, params);
    },
    run: (sql, params) => db.run(sql, params),
  };
}

/** capturing wraps the database so every read run through it is recorded with its parameters (writes pass through). */
export function capturing(db: Database): { db: Database; captured: Captured[] } {
  const captured: Captured[] = [];
  // Reads inside `read` are captured too: on SQLite, whose turn is one snapshot, through this
  // wrapper; on PostgreSQL in the database's own snapshot, as the service reads a list and its count.
  const inSnapshot: Database["read"] = (work) => (db.dialect === "postgres" ? db.read((tx) => work(capturingReads(tx, captured))) : work(spy));
  const spy: Database = {
    ...capturingReads(db, captured),
    changeClock: db.changeClock,
    write: (work) => db.write(work),
    writeBookkeeping: (work) => db.writeBookkeeping(work),
    writeIndex: (work) => db.writeIndex(work),
    read: inSnapshot,
    readWithin: (_limits, work) => inSnapshot(work),
    readAside: inSnapshot,
    readsAside: () => db.readsAside(),
    useReadLane: (capacity, log) => db.useReadLane(capacity, log),
    writesWaiting: () => db.writesWaiting(),
    committedRecently: (withinMs) => db.committedRecently(withinMs),
    onCommit: (callback) => db.onCommit(callback),
    outsideWritesGeneration: () => db.outsideWritesGeneration(),
    listen: (channel, onNotify, onRefused) => db.listen(channel, onNotify, onRefused),
    notify: (channel, payload) => db.notify(channel, payload),
    storageFault: () => db.storageFault(),
    storageFull: () => db.storageFull(),
    close: () => db.close(),
  };
  return { db: spy, captured };
}

/** queryPlan returns the lines of EXPLAIN QUERY PLAN for a captured statement. */
export function queryPlan(db: SqliteConnection, statement: Captured): string[] {
  return db
    .query<{ detail: string }, never[]>(`EXPLAIN QUERY PLAN ${statement.sql}`)
    .all(...(statement.params as never[]))
    .map((r) => r.detail);
}

/** postgresPlan returns the lines of PostgreSQL's EXPLAIN for a captured statement, planned with its own costs for its parameters (as the lists plan theirs, planPerValue). */
export function postgresPlan(db: Database, statement: Captured): Promise<string[]> {
  return db.read(async (tx) => {
    await tx.run("SET LOCAL plan_cache_mode = force_custom_plan");
    return (await tx.all<{ "QUERY PLAN": string }>(`EXPLAIN ${statement.sql}`, statement.params as SqlValue[])).map((r) => r["QUERY PLAN"]);
  });
}
