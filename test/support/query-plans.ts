import type { Database } from "bun:sqlite";

/** Captured is one statement run through a capturing database, with its parameters. */
export interface Captured {
  sql: string;
  params: unknown[];
}

/** capturing wraps the database so every statement run through it is recorded with its parameters. */
export function capturing(db: Database): { db: Database; captured: Captured[] } {
  const captured: Captured[] = [];
  const proxy = new Proxy(db, {
    get(target, prop) {
      if (prop === "query") {
        return (sql: string) => {
          const statement = target.query(sql);
          const record =
            (method: "all" | "get") =>
            (...params: unknown[]) => {
              captured.push({ sql, params });
              return (statement[method] as (...p: unknown[]) => unknown)(...params);
            };
          return { all: record("all"), get: record("get") };
        };
      }
      const value = Reflect.get(target, prop);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { db: proxy, captured };
}

/** queryPlan returns the lines of EXPLAIN QUERY PLAN for a captured statement. */
export function queryPlan(db: Database, statement: Captured): string[] {
  return db
    .query<{ detail: string }, never[]>(`EXPLAIN QUERY PLAN ${statement.sql}`)
    .all(...(statement.params as never[]))
    .map((r) => r.detail);
}
