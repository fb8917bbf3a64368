import type { CursorPosition, SortDirection } from "../http/list-query.ts";

export interface OrderClause {
  /** SQL fragment continuing a WHERE clause for rows after the cursor, or "" without one */
  after: string;
  params: (string | number)[];
  orderBy: string;
}

/**
 * keysetOrder builds a stable ORDER BY (tie-break on id) and the condition for rows strictly
 * after a cursor. `column` must be a trusted column name; NULLs sort first, as SQLite does.
 */
export function keysetOrder(column: string, idColumn: string, direction: SortDirection, cursor: CursorPosition | null): OrderClause {
  const dir = direction === "asc" ? "ASC" : "DESC";
  const orderBy = `${column} ${dir}, ${idColumn} ${dir}`;
  if (!cursor) return { after: "", params: [], orderBy };
  const cmp = direction === "asc" ? ">" : "<";
  if (cursor.value === null) {
    // NULL is the smallest value: ascending, everything non-NULL comes after; descending, nothing does.
    return direction === "asc"
      ? { after: `((${column} IS NULL AND ${idColumn} > ?) OR ${column} IS NOT NULL)`, params: [cursor.id], orderBy }
      : { after: `(${column} IS NULL AND ${idColumn} < ?)`, params: [cursor.id], orderBy };
  }
  const tail = direction === "desc" ? ` OR ${column} IS NULL` : "";
  return {
    after: `(${column} ${cmp} ? OR (${column} = ? AND ${idColumn} ${cmp} ?)${tail})`,
    params: [cursor.value, cursor.value, cursor.id],
    orderBy,
  };
}
