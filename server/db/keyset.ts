import type { CursorPosition, SortDirection } from "../http/list-query.ts";
import type { Dialect } from "./sql.ts";

export interface OrderClause {
  /** SQL fragment continuing a WHERE clause for rows after the cursor, or "" without one */
  after: string;
  params: (string | number)[];
  orderBy: string;
  /** the group that follows once `after` runs out (the NULLs, or the non-NULLs), or null */
  then: { after: string; params: (string | number)[] } | null;
}

/**
 * unindexed keeps a column out of SQLite's choice of index (a unary +, which keeps the column's
 * collation) where a filter's index must drive; PostgreSQL has no unary + on text and plans alone.
 */
export function unindexed(dialect: Dialect, column: string): string {
  return dialect === "sqlite" ? `+${column}` : column;
}

/**
 * keysetOrder builds a stable ORDER BY (tie-break on id) and the condition for rows after a
 * cursor. `column` must be a trusted column name; NULLs sort first ascending and last descending,
 * as SQLite does, which PostgreSQL is told in so many words (its default is the opposite). Each condition
 * is one index range (a row-value comparison), so a page costs the same at any depth: an OR that
 * also reached the NULL group made SQLite read and sort every later row. Callers sorting by a
 * `nullable` column query `after` first and, if the page is not full, `then` for the rest.
 */
export function keysetOrder(column: string, idColumn: string, direction: SortDirection, cursor: CursorPosition | null, nullable = false, dialect: Dialect = "sqlite"): OrderClause {
  const dir = direction === "asc" ? "ASC" : "DESC";
  // sqlite-only: SQLite's NULL order is the default there; spelled out, it could cost SQLite its index order.
  const nulls = nullable && dialect === "postgres" ? (direction === "asc" ? " NULLS FIRST" : " NULLS LAST") : "";
  const cmp = direction === "asc" ? ">" : "<";
  if (column === idColumn) {
    return { after: cursor ? `${idColumn} ${cmp} ?` : "", params: cursor ? [cursor.id] : [], orderBy: `${idColumn} ${dir}`, then: null };
  }
  const orderBy = `${column} ${dir}${nulls}, ${idColumn} ${dir}`;
  if (!cursor) return { after: "", params: [], orderBy, then: null };
  if (cursor.value === null) {
    return {
      after: `(${column} IS NULL AND ${idColumn} ${cmp} ?)`,
      params: [cursor.id],
      orderBy,
      then: nullable && direction === "asc" ? { after: `${column} IS NOT NULL`, params: [] } : null,
    };
  }
  return {
    after: `(${column}, ${idColumn}) ${cmp} (?, ?)`,
    params: [cursor.value, cursor.id],
    orderBy,
    then: nullable && direction === "desc" ? { after: `${column} IS NULL`, params: [] } : null,
  };
}

/** PageQuery is the parts of a page's SELECT: its columns, its table (with an alias or not), conditions, order and LIMIT (a parameter). */
export interface PageQuery {
  columns: string;
  from: string;
  /** the id column, as the conditions and order name it */
  id: string;
  where: string[];
  orderBy: string;
  limit: string;
}

/**
 * pageSelect builds a page's SELECT, its parameters the conditions', then the limit and the
 * offset. On PostgreSQL a page past the first skips its offset in ids alone, sorted in a subquery
 * (an Index Only Scan of the sort index), and reads the rows of the page only: read whole, the
 * skipped rows' heap visits priced a deep page above a scan and sort of the whole table (the last
 * page of 195,000 contacts by last_name: 0.65 to 2.7 s, the sort spilling to disk; 36 ms skipped
 * in the index). SQLite walks the sort index at any depth and reads no row it skips.
 */
export function pageSelect(dialect: Dialect, query: PageQuery, offset: number): string {
  const where = query.where.length ? `WHERE ${query.where.join(" AND ")} ` : "";
  if (dialect === "postgres" && offset > 0) {
    const skipped = `SELECT ${query.id} FROM ${query.from} ${where}ORDER BY ${query.orderBy} LIMIT ${query.limit} OFFSET ?`;
    return `SELECT ${query.columns} FROM ${query.from} WHERE ${query.id} IN (${skipped}) ORDER BY ${query.orderBy}`;
  }
  return `SELECT ${query.columns} FROM ${query.from} ${where}ORDER BY ${query.orderBy} LIMIT ${query.limit} OFFSET ?`;
}
