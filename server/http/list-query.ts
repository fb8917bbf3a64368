import { Type } from "@sinclair/typebox";
import { t, type TSchema } from "elysia";
import { parseTimestamp, timestampRefusal, withOffsetPlus } from "../shared/time.ts";
import type { Database, Db } from "../db/sql.ts";
import { documentAs } from "./openapi-docs.ts";
import { validationProblem, type FieldError } from "../shared/problem.ts";
import type { SecretBox } from "../webhooks/secrets.ts";

export type SortDirection = "asc" | "desc";
export type SortValue = string | number | null;

/** CursorPosition is the last row of a page: where the next keyset page starts. */
export interface CursorPosition {
  value: SortValue;
  id: string;
}

export interface ListQuery<S extends string> {
  page: number;
  perPage: number;
  sortBy: S;
  direction: SortDirection;
  cursor: CursorPosition | null;
  /** what this list's next cursors are sealed with: the secrets key, and what they are bound to (cursorBinding) */
  cursorSeal: CursorSeal;
}

/** CursorSeal is the key a list's cursors are sealed with and what they are bound to (cursorBinding). */
interface CursorSeal {
  secrets: SecretBox;
  binding: string;
}

export interface ListMeta {
  current_page: number;
  last_page: number;
  per_page: number;
  total: number;
  next_cursor: string | null;
}

// TypeBox does not check `enum` on a string schema (it is documentation only); the pattern does.
const oneOf = (values: readonly string[]) => `^(${values.map((v) => v.replace(/[^A-Za-z0-9_]/g, "\\$&")).join("|")})$`;

/** paginationQuerySchema documents page, per_page, sort and cursor parameters for a list route. */
export function paginationQuerySchema<S extends string>(sorts: readonly S[] | null, filters: Record<string, TSchema> = {}) {
  return t.Object(
    {
      page: t.Optional(t.String({ pattern: "^[1-9][0-9]{0,8}$", error: "must be a whole number from 1 to 999999999", description: "Page number, from 1 to 999999999.", ...documentAs({ type: "integer", minimum: 1, maximum: 999_999_999 }) })),
      per_page: t.Optional(t.String({ pattern: "^(100|[1-9][0-9]?)$", error: "must be a whole number from 1 to 100", description: "Items per page, 1 to 100 (default 25).", ...documentAs({ type: "integer", minimum: 1, maximum: 100, default: 25 }) })),
      ...(sorts
        ? {
            sort_by: t.Optional(t.String({ enum: [...sorts], pattern: oneOf(sorts), error: `must be one of: ${sorts.join(", ")}`, description: `Sort field: ${sorts.join(", ")}.` })),
            sort_direction: t.Optional(t.String({ enum: ["asc", "desc"], pattern: oneOf(["asc", "desc"]), error: "must be asc or desc", description: "asc or desc." })),
          }
        : {}),
      cursor: t.Optional(t.String({ maxLength: 2000, error: "must be a cursor returned in meta.next_cursor", description: "Opaque keyset cursor from meta.next_cursor (sealed: it shows nothing of the row it ends on, padded so that its length tells its sort value's only to 64 bytes); not combinable with page. One from before an upgrade or a secrets key rotation is 422: read the list again from its first page." })),
      ...filters,
    },
    { additionalProperties: true },
  );
}

/** timestampFilterSchema documents an RFC 3339 filter parameter. */
export function timestampFilterSchema(description: string) {
  // Parsed by the service (422 "must be an RFC 3339 date-time"), so the format is stated for the document only.
  return t.Optional(t.String({ maxLength: 64, ...documentAs({ type: "string", format: "date-time", maxLength: 64 }), description: `${description} RFC 3339, e.g. 2026-11-21T10:00:00Z; an offset's + may also be sent unencoded, which a query string decodes to a space.` }));
}

/** CURSOR_PURPOSE names the key, derived from the secrets key, that list cursors are sealed with. */
const CURSOR_PURPOSE = "list cursor";

/**
 * cursorBinding is what a cursor is bound to (the additional data it is sealed with): its list's
 * name, filter names, sort, direction and filter values. The name comes first, as lists may share
 * the rest (the three deleted lists: since, deleted_at, asc), and a cursor of one would cut
 * another at its position, skipping rows. The cursor carries none of them, so its size
 * does not grow with the filters (100 tags of 100 characters would not fit the cursor parameter's
 * 2000 characters, nor beside the filters in a 4 KiB query string), and it holds nothing by which
 * a guessed filter value could be confirmed. A time filter's offset binds alike with its "+"
 * encoded or not (withOffsetPlus), as it filters alike; a text filter's space stays a space:
 * "...T10:00:00 05:30" is another name to search for than "...+05:30".
 */
function cursorBinding(list: string, sortBy: string, direction: SortDirection, query: Record<string, unknown>, filterNames: readonly string[]): string {
  const values = filterNames.map((f) => (TIME_FILTERS.includes(f as TimeFilter) ? withOffsetPlus(String(query[f] ?? "")) : String(query[f] ?? "")));
  return [list, filterNames.join(","), sortBy, direction, ...values].join("\u0000");
}

/**
 * sealCursor makes the cursor of a position: the last row's sort value (an email, a name) and id,
 * sealed (AES-256-GCM, a key derived from the secrets key) and bound to the list, so that a
 * cursor found in a proxy's log or a browser's history shows nothing and cannot be altered.
 * Sealed alike each time (sealTextAlike): a page read twice answers the same bytes.
 */
function sealCursor(seal: CursorSeal, position: CursorPosition): string {
  return seal.secrets.sealTextAlike(CURSOR_PURPOSE, seal.binding, JSON.stringify([position.value, position.id]));
}

/**
 * openCursor reads a cursor back, or null when it does not open: altered, made for another list,
 * sort or filters, or sealed with another key (one crm secrets-key rotate replaced, or none: a
 * cursor of a crm from before they were sealed). One that opens was sealed by sealCursor for
 * this very binding, so its sort value has the sort's type.
 */
function openCursor(text: string, seal: CursorSeal): CursorPosition | null {
  const opened = seal.secrets.openText(CURSOR_PURPOSE, seal.binding, text);
  if (opened === null) return null;
  const [value, id] = JSON.parse(opened) as [SortValue, string];
  return { value, id };
}

export interface ListQueryOptions<S extends string> {
  /** the list's path under /public/v1 (contacts/deleted): its cursors open on no other list */
  list: string;
  sorts: readonly S[];
  defaultSort: S;
  defaultDirection: SortDirection;
  /** true for a list in one order clients cannot change: sort_by and sort_direction are then unknown parameters, not ignored */
  fixedOrder?: boolean;
  /** names of the feature's filter parameters (a cursor is bound to their values) */
  filters: readonly string[];
  /** further parameters the list accepts that do not change which rows it returns */
  options?: readonly string[];
}

/** REPEATABLE_PARAMETERS may be given more than once: their values add up (tag=a&tag=b is tag=a,b), there is nothing to guess. */
const REPEATABLE_PARAMETERS = new Set(["tag"]);

/**
 * withRepeatedValues gives each repeatable parameter of a URL all its values, comma-joined (Elysia
 * keeps only the last). The URL is parsed only when one is repeated, which few requests do.
 */
export function withRepeatedValues(query: Record<string, unknown>, url: string): Record<string, unknown> {
  const names = parameterNames(url);
  if (![...REPEATABLE_PARAMETERS].some((name) => names.indexOf(name) !== names.lastIndexOf(name))) return query;
  const params = new URL(url).searchParams;
  const joined = [...REPEATABLE_PARAMETERS].filter((name) => params.getAll(name).length > 1).map((name) => [name, params.getAll(name).join(",")]);
  return { ...query, ...Object.fromEntries(joined) };
}

/** unknownParameterErrors names every query parameter not in `known`, so a typo is a 422 and not silently ignored. */
export function unknownParameterErrors(query: Record<string, unknown>, known: readonly string[], what: string): FieldError[] {
  return Object.keys(query)
    .filter((name) => !known.includes(name))
    .map((name) => ({ parameter: name, detail: `is not a parameter of ${what}; known: ${known.join(", ")}` }));
}

let lastNamesUrl = "";
let lastNames: string[] = [];

/** parameterNames lists the names of a URL's query parameters in order, decoded as the router decodes them. */
function parameterNames(url: string): string[] {
  // The transform hook and the list route both ask for the same request's URL.
  if (url === lastNamesUrl) return lastNames;
  lastNames = scanParameterNames(url);
  lastNamesUrl = url;
  return lastNames;
}

function scanParameterNames(url: string): string[] {
  const start = url.indexOf("?");
  if (start < 0) return [];
  // Every request with a query string passes here: one scan, no URL parsing.
  const names: string[] = [];
  let escaped = false;
  for (let at = start + 1; at <= url.length; ) {
    const next = url.indexOf("&", at);
    const end = next < 0 ? url.length : next;
    if (end > at) {
      const eq = url.indexOf("=", at);
      const name = url.slice(at, eq < 0 || eq > end ? end : eq);
      escaped ||= name.includes("%") || name.includes("+");
      names.push(name);
    }
    at = end + 1;
  }
  // A name with an escape (p%61ge is page) is decoded as the router decodes it.
  return escaped ? [...new URLSearchParams(url.slice(start + 1)).keys()] : names;
}

/** repeatedParameterErrors names every query parameter a URL gives more than once: which value was meant would be a guess. */
export function repeatedParameterErrors(url: string): FieldError[] {
  const start = url.indexOf("?");
  if (start < 0 || url.indexOf("&", start) < 0) return [];
  const names = parameterNames(url);
  const repeated: string[] = [];
  names.forEach((name, i) => {
    if (!REPEATABLE_PARAMETERS.has(name) && names.indexOf(name) < i && !repeated.includes(name)) repeated.push(name);
  });
  return repeated.map((name) => ({ parameter: name, detail: "must be given once" }));
}

/**
 * parseListQuery turns validated query strings into a ListQuery, refusing unknown parameters,
 * a cursor combined with page, and a cursor that does not open for this list, sort and filters
 * with `secrets` (422): it was altered, or made before an upgrade or a key rotation.
 */
export function parseListQuery<S extends string>(query: Record<string, unknown>, options: ListQueryOptions<S>, secrets: SecretBox): ListQuery<S> {
  const sortParameters = options.fixedOrder ? [] : ["sort_by", "sort_direction"];
  const errors = unknownParameterErrors(query, ["page", "per_page", ...sortParameters, "cursor", ...options.filters, ...(options.options ?? [])], "this list");
  const chosen = options.fixedOrder ? {} : query;
  const sortBy = (chosen.sort_by as S | undefined) ?? options.defaultSort;
  const direction = (chosen.sort_direction as SortDirection | undefined) ?? options.defaultDirection;
  // sort_by becomes an SQL column name: never trust that the schema alone kept it to the list.
  if (!options.sorts.includes(sortBy)) errors.push({ parameter: "sort_by", detail: `must be one of: ${options.sorts.join(", ")}` });
  const cursorSeal = { secrets, binding: cursorBinding(options.list, sortBy, direction, query, options.filters) };
  let cursor: CursorPosition | null = null;
  if (typeof query.cursor === "string") {
    if (query.page !== undefined) errors.push({ parameter: "cursor", detail: "cannot be combined with page" });
    cursor = openCursor(query.cursor, cursorSeal);
    if (!cursor) errors.push({ parameter: "cursor", detail: "is not a cursor from meta.next_cursor of this same list (same sort and filters), or is one from before the service was upgraded or its key replaced: read the list again from its first page" });
  }
  if (errors.length > 0) throw validationProblem(errors);
  return {
    page: query.page === undefined ? 1 : Number(query.page),
    perPage: query.per_page === undefined ? 25 : Number(query.per_page),
    sortBy,
    direction,
    cursor,
    cursorSeal,
  };
}

/** TIME_FILTERS are the lists' time filter parameters, the ones parseTimestampFilter reads: only their values are date-times. */
const TIME_FILTERS = ["created_after", "updated_after", "since"] as const;
type TimeFilter = (typeof TIME_FILTERS)[number];

/** parseTimestampFilter reads an RFC 3339 filter parameter (its offset's "+" sent unencoded too: withOffsetPlus) or throws a 422 naming it. */
export function parseTimestampFilter(name: TimeFilter, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  const text = typeof value === "string" ? withOffsetPlus(value) : null;
  const ms = text === null ? null : parseTimestamp(text);
  if (ms === null) throw validationProblem([{ parameter: name, detail: timestampRefusal(text, ", e.g. 2026-11-21T10:00:00Z") }]);
  return ms;
}

/**
 * pageWindow is what a list reads for its page: the page and one row more, whose presence tells
 * whether rows follow, so the last page's next_cursor is null even when that page is full. Not
 * meta.total: a page that ends early tells the total without it (pageTotal).
 */
export function pageWindow<S extends string>(list: ListQuery<S>): { cursor: CursorPosition | null; limit: number; offset: number } {
  return { cursor: list.cursor, limit: list.perPage + 1, offset: list.cursor ? 0 : pageOffset(list) };
}

/** pageOffset is how many matches come before a page read by page number. */
function pageOffset(list: ListQuery<string>): number {
  return (list.page - 1) * list.perPage;
}

/**
 * pageTotal is the number of matches a page read by offset (pageWindow's rows) shows there are:
 * one with no row after it, and not past the end, holds the last match. Null when it cannot tell
 * (a cursor's page, rows following, an empty page after the first).
 */
export function pageTotal(list: ListQuery<string>, read: readonly unknown[]): number | null {
  if (list.cursor || read.length > list.perPage) return null;
  const offset = pageOffset(list);
  return read.length > 0 || offset === 0 ? offset + read.length : null;
}

/**
 * readListPage reads a list's rows (pageWindow's) and the number of its matches in one snapshot,
 * so meta.total counts what the page shows: on PostgreSQL a commit could land between two
 * statements on the pool. It counts only when the page does not tell the total (pageTotal).
 */
export function readListPage<R>(db: Database, list: ListQuery<string>, rows: (db: Db) => Promise<R[]>, count: (db: Db) => Promise<number>): Promise<{ read: R[]; total: number }> {
  return db.read(async (snapshot) => {
    const read = await rows(snapshot);
    return { read, total: pageTotal(list, read) ?? (await count(snapshot)) };
  });
}

/** pageRows drops the row beyond the page that pageWindow read to learn whether more follow. */
export function pageRows<R>(list: ListQuery<string>, rows: R[]): R[] {
  return rows.length > list.perPage ? rows.slice(0, list.perPage) : rows;
}

/** listMeta builds the pagination metadata for the rows pageWindow read (the extra row included). */
export function listMeta<S extends string>(list: ListQuery<S>, total: number, read: { id: string }[], sortValueOf: (row: never) => SortValue): ListMeta {
  // Found in place, not by cutting the page off `read` again: the caller cuts it for its data.
  const last = read[Math.min(read.length, list.perPage) - 1];
  const hasMore = read.length > list.perPage;
  return {
    current_page: list.cursor ? 0 : list.page,
    last_page: Math.max(1, Math.ceil(total / list.perPage)),
    per_page: list.perPage,
    total,
    next_cursor: last && hasMore ? cursorAfter(list, last, sortValueOf) : null,
  };
}

/** cursorAfter is the cursor of the page that follows `row` in a list: listMeta's next_cursor, or that of a page ending before per_page. */
export function cursorAfter<S extends string>(list: ListQuery<S>, row: { id: string }, sortValueOf: (row: never) => SortValue): string {
  return sealCursor(list.cursorSeal, { value: sortValueOf(row as never), id: row.id });
}

/** ListMetaSchema documents the pagination metadata. */
export const ListMetaSchema = t.Object({
  // Type.Integer, not Elysia's t.Integer: that one is a transform accepting numeric strings, meant
  // for query input; here it would document a string-or-integer and add an encode step to every list.
  current_page: Type.Integer({ description: "Page returned; 0 when the page was chosen by cursor." }),
  last_page: Type.Integer(),
  per_page: Type.Integer(),
  total: Type.Integer({ description: "Rows matching the filters." }),
  next_cursor: t.Union([t.String(), t.Null()], { description: "Pass as `cursor` for the next page (keyset pagination); null on the last page." }),
});
