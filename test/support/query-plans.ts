import type { Database as SqliteConnection } from "bun:sqlite";
import type { Database, SqlValue } from "../../server/db/sql.ts";

/** Captured is one statement run through a capturing database, with its parameters. */
export interface Captured {
  sql: string;
  params: unknown[];
}

/** capturing wraps the database so every read run through it is recorded with its parameters (writes pass through). */
export function capturing(db: Database): { db: Database; captured: Captured[] } {
  const captured: Captured[] = [];
  const spy: Database = {
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
    write: (work) => db.write(work),
    writeBookkeeping: (work) => db.writeBookkeeping(work),
    // Reads inside `read` are captured too (this wrapper serves SQLite, whose turn is one snapshot).
    read: (work) => work(spy),
    readAside: (work) => work(spy),
    readsAside: () => db.readsAside(),
    useReadLane: (capacity, log) => db.useReadLane(capacity, log),
    writesWaiting: () => db.writesWaiting(),
    onCommit: (callback) => db.onCommit(callback),
    outsideWritesGeneration: () => db.outsideWritesGeneration(),
    listen: (channel, onNotify, onRefused) => db.listen(channel, onNotify, onRefused),
    notify: (channel, payload) => db.notify(channel, payload),
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
