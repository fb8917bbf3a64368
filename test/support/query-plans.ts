import type { Database as SqliteConnection } from "bun:sqlite";
import type { Db, SqlValue } from "../../server/db/sql.ts";

/** Captured is one statement run through a capturing database, with its parameters. */
export interface Captured {
  sql: string;
  params: unknown[];
}

/** capturing wraps the database so every query run through it is recorded with its parameters. */
export function capturing(db: Db): { db: Db; captured: Captured[] } {
  const captured: Captured[] = [];
  const spy: Db = {
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
  return { db: spy, captured };
}

/** queryPlan returns the lines of EXPLAIN QUERY PLAN for a captured statement. */
export function queryPlan(db: SqliteConnection, statement: Captured): string[] {
  return db
    .query<{ detail: string }, never[]>(`EXPLAIN QUERY PLAN ${statement.sql}`)
    .all(...(statement.params as never[]))
    .map((r) => r.detail);
}
