import type { Database } from "bun:sqlite";
import { keysetOrder } from "../db/keyset.ts";
import type { CursorPosition, SortDirection } from "../http/list-query.ts";
import type { ContactSort } from "./model.ts";

export type ContactRow = {
  id: string;
  first_name: string | null;
  last_name: string | null;
  email: string | null;
  phone: string | null;
  external_id: string | null;
  assigned_user_id: string | null;
  properties: string;
  /** JSON array of account ids, in order (a copy of contact_accounts) */
  account_ids: string;
  /** JSON array of assigned user ids, in order (a copy of contact_assigned_users) */
  assigned_user_ids: string;
  /** 1 on creation, one more with every change (see contacts/service) */
  version: number;
  created_at: number;
  updated_at: number;
}

export interface ContactFilters {
  email?: string;
  fullName?: string;
  createdAfter?: number;
  updatedAfter?: number;
}

const COLUMNS = "c.id, c.first_name, c.last_name, c.email, c.phone, c.external_id, c.assigned_user_id, c.properties, c.account_ids, c.assigned_user_ids, c.version, c.created_at, c.updated_at";

/** insertContact stores a new contact row. */
export function insertContact(db: Database, row: ContactRow): void {
  db.query(
    `INSERT INTO contacts (id, first_name, last_name, email, phone, external_id, assigned_user_id, properties, account_ids, assigned_user_ids, version, created_at, updated_at)
     VALUES ($id, $first_name, $last_name, $email, $phone, $external_id, $assigned_user_id, $properties, $account_ids, $assigned_user_ids, $version, $created_at, $updated_at)`,
  ).run(row);
}

/** updateContact overwrites a contact row's fields. */
export function updateContact(db: Database, row: ContactRow): void {
  db.query(
    `UPDATE contacts SET first_name = $first_name, last_name = $last_name, email = $email, phone = $phone,
       external_id = $external_id, assigned_user_id = $assigned_user_id, properties = $properties, account_ids = $account_ids,
       assigned_user_ids = $assigned_user_ids, version = $version, updated_at = $updated_at WHERE id = $id`,
  ).run({ ...row, created_at: undefined } as never);
}

/** deleteContact removes a contact (its relation rows cascade) and tells whether it existed. */
export function deleteContact(db: Database, id: string): boolean {
  return db.query("DELETE FROM contacts WHERE id = ?").run(id).changes > 0;
}

/** findContactById returns one contact row or null. */
export function findContactById(db: Database, id: string): ContactRow | null {
  return db.query<ContactRow, [string]>(`SELECT ${COLUMNS} FROM contacts c WHERE c.id = ?`).get(id);
}

/** MAX_EMAIL_MATCHES_NAMED is how many contacts sharing an email a lookup returns: enough to name them in an error. */
const MAX_EMAIL_MATCHES_NAMED = 10;

/** findContactsByEmail returns the contacts with this (lowercased) email, oldest first, at most MAX_EMAIL_MATCHES_NAMED. */
export function findContactsByEmail(db: Database, email: string): ContactRow[] {
  return db.query<ContactRow, [string, number]>(`SELECT ${COLUMNS} FROM contacts c WHERE c.email = ? ORDER BY c.id LIMIT ?`).all(email, MAX_EMAIL_MATCHES_NAMED);
}

/** findContactByExternalId returns the contact with this external_id or null. */
export function findContactByExternalId(db: Database, externalId: string): ContactRow | null {
  return db.query<ContactRow, [string]>(`SELECT ${COLUMNS} FROM contacts c WHERE c.external_id = ?`).get(externalId);
}

/** insertContactAccounts relates a contact that has no accounts yet to the given ones, in order (the row's account_ids copy is written with the row). */
export function insertContactAccounts(db: Database, contactId: string, accountIds: string[]): void {
  if (accountIds.length === 0) return;
  const insert = db.query("INSERT INTO contact_accounts (contact_id, account_id, position) VALUES (?, ?, ?)");
  accountIds.forEach((accountId, position) => insert.run(contactId, accountId, position));
}

/** replaceContactAccounts sets the accounts a contact relates to, in the given order (the row's account_ids copy is written with the row). */
export function replaceContactAccounts(db: Database, contactId: string, accountIds: string[]): void {
  db.query("DELETE FROM contact_accounts WHERE contact_id = ?").run(contactId);
  insertContactAccounts(db, contactId, accountIds);
}

/** insertContactAssignedUsers assigns a contact that has no assigned users yet to the given ones, in order. */
export function insertContactAssignedUsers(db: Database, contactId: string, userIds: string[]): void {
  if (userIds.length === 0) return;
  const insert = db.query("INSERT INTO contact_assigned_users (contact_id, user_id, position) VALUES (?, ?, ?)");
  userIds.forEach((userId, position) => insert.run(contactId, userId, position));
}

/** replaceContactAssignedUsers sets the users a contact is assigned to, in the given order (the row's assigned_user_ids copy is written with the row). */
export function replaceContactAssignedUsers(db: Database, contactId: string, userIds: string[]): void {
  db.query("DELETE FROM contact_assigned_users WHERE contact_id = ?").run(contactId);
  insertContactAssignedUsers(db, contactId, userIds);
}

/**
 * fullNameMatch is the condition on the search table (alias f) that its rows meet when their full
 * name contains the needle, case-insensitively; `indexed` tells whether the trigram index finds them.
 */
function fullNameMatch(needle: string): { condition: string; params: string[]; indexed: boolean } {
  // A quoted phrase of 3+ characters is a substring search in the trigram index, which folds
  // case for every script and takes % and _ literally. LIKE would not: SQLite re-checks each
  // row with its own LIKE, whose case folding knows only ASCII ("élo" missed "Élodie").
  if ([...needle].length >= 3) {
    return { condition: "f.contacts_full_name MATCH ?", params: [`"${needle.replaceAll('"', '""')}"`], indexed: true };
  }
  // Too short for a trigram: scan. An ASCII needle needs only ASCII case folding, which SQLite's
  // LIKE does, 2.4x faster than instr over each spelling (9.6 vs 23 ms on 100k names).
  if (/^[\x00-\x7f]*$/.test(needle)) {
    return { condition: "f.full_name LIKE ? ESCAPE '\\'", params: [`%${needle.replace(/[\\%_]/g, "\\$&")}%`], indexed: false };
  }
  // Otherwise try each character in either case (at most 4 spellings).
  const spellings = [...needle].reduce<string[]>(
    (prefixes, ch) => [...new Set([ch.toLowerCase(), ch.toUpperCase()])].flatMap((variant) => prefixes.map((prefix) => prefix + variant)),
    [""],
  );
  return { condition: `(${spellings.map(() => "instr(f.full_name, ?) > 0").join(" OR ")})`, params: spellings, indexed: false };
}

/** filterClause builds the WHERE terms; `probeNames` tests rows against the name matches instead of fetching each match by rowid. */
function filterClause(filters: ContactFilters, probeNames = false): { where: string[]; params: (string | number)[] } {
  const where: string[] = [];
  const params: (string | number)[] = [];
  if (filters.email !== undefined) {
    where.push("c.email = ?");
    params.push(filters.email.toLowerCase());
  }
  if (filters.fullName !== undefined) {
    const match = fullNameMatch(filters.fullName);
    const rowids = `SELECT rowid FROM contacts_full_name f WHERE ${match.condition}`;
    if (!probeNames) {
      where.push(`c.rowid IN (${rowids})`);
    } else if (match.indexed) {
      // The index's matches are collected once, then each row of the sort index is probed.
      where.push(`+c.rowid IN (${rowids})`);
    } else {
      // A scan is not collected in full: each row of the sort index looks up its own name, and the
      // walk stops at a full page (a 1-letter needle on 100k contacts: 20 ms -> 0.02 ms). Only if
      // the matches crowd the far end of the sort order does it read most of the index, at about
      // 0.4 us a row, up to twice the cost of collecting them.
      where.push(`EXISTS (SELECT 1 FROM contacts_full_name f WHERE f.rowid = c.rowid AND ${match.condition})`);
    }
    params.push(...match.params);
  }
  if (filters.createdAfter !== undefined) {
    where.push("c.created_at > ?");
    params.push(filters.createdAfter);
  }
  if (filters.updatedAfter !== undefined) {
    where.push("c.updated_at > ?");
    params.push(filters.updatedAfter);
  }
  return { where, params };
}

const hasFilters = (filters: ContactFilters) => Object.values(filters).some((v) => v !== undefined);
const isNameOnly = (filters: ContactFilters): filters is ContactFilters & { fullName: string } => filters.fullName !== undefined && !hasFilters({ ...filters, fullName: undefined });

/** countAllContacts reads the trigger-kept number of contacts instead of counting a million rows. */
function countAllContacts(db: Database): number {
  return db.query<{ n: number }, []>("SELECT n FROM row_counts WHERE table_name = 'contacts'").get()!.n;
}

/**
 * BROAD_NAME_SHARE: a name search matching at least 1 in this many contacts walks the sort index.
 * Fetching every match by rowid and sorting costs about 0.5 us per match; walking the index and
 * probing the matches about 0.06 us per row, and a page is found long before the end (16,667 of
 * 100k matches: 1.9 ms instead of 8.7 ms). At 1 in 8 even a walk through the whole index (matches
 * all at its far end) costs no more than fetching them, so no search gets slower.
 */
const BROAD_NAME_SHARE = 8;

/** walksSortIndex decides whether a page of a name-only search reads the sort index in order, given the count of matches. */
function walksSortIndex(db: Database, filters: ContactFilters, matches: number): boolean {
  if (!isNameOnly(filters)) return false;
  return matches * BROAD_NAME_SHARE >= countAllContacts(db);
}

/** countContacts counts the contacts matching the filters. */
export function countContacts(db: Database, filters: ContactFilters): number {
  if (!hasFilters(filters)) return countAllContacts(db);
  if (isNameOnly(filters)) {
    // The search table has exactly one row per contact (kept by triggers), so a name-only count
    // needs no join: 16,667 matches of 100k count in 0.5 ms instead of 6.7 ms.
    const match = fullNameMatch(filters.fullName);
    return db.query<{ n: number }, string[]>(`SELECT count(*) AS n FROM contacts_full_name f WHERE ${match.condition}`).get(...match.params)!.n;
  }
  const { where, params } = filterClause(filters);
  return db.query<{ n: number }, (string | number)[]>(`SELECT count(*) AS n FROM contacts c WHERE ${where.join(" AND ")}`).get(...params)!.n;
}

const NULLABLE_SORTS = new Set<ContactSort>(["first_name", "last_name", "email"]);

/** listContacts returns one page of contact rows, by offset or after a keyset cursor; `matches` is countContacts for the same filters. */
export function listContacts(
  db: Database,
  filters: ContactFilters,
  page: { sortBy: ContactSort; direction: SortDirection; cursor: CursorPosition | null; limit: number; offset: number; matches: number },
): ContactRow[] {
  const walk = walksSortIndex(db, filters, page.matches);
  const { where, params } = filterClause(filters, walk);
  // A filter on another column than the sort picks the rows through its index and they are sorted
  // (cost: the matching rows); the unary + (which keeps the column's collation) stops SQLite from
  // walking the sort index instead and skipping every row the filter refuses. Otherwise the
  // keyset is one range of the sort index; put first, SQLite seeks on it rather than on the filter.
  // An email filter in the default order reads contacts_email_created (email, created_at, id) in order.
  const sortFiltered =
    (page.sortBy === "created_at" && (filters.createdAfter !== undefined || filters.email !== undefined)) ||
    (page.sortBy === "updated_at" && filters.updatedAfter !== undefined);
  const column = hasFilters(filters) && !sortFiltered && !walk ? `+c.${page.sortBy}` : `c.${page.sortBy}`;
  const order = keysetOrder(column, "c.id", page.direction, page.cursor, NULLABLE_SORTS.has(page.sortBy));
  const select = (keyset: { after: string; params: (string | number)[] } | null, limit: number) => {
    const conditions = [...(keyset?.after ? [keyset.after] : []), ...where];
    // LIMIT CAST(? AS INTEGER), not LIMIT ?: with a bare parameter as the limit this query took
    // ~6 us longer per page (bench/; a constant is as fast as the CAST, but would cache a statement per page size).
    const sql = `SELECT ${COLUMNS} FROM contacts c ${conditions.length ? `WHERE ${conditions.join(" AND ")}` : ""} ORDER BY ${order.orderBy} LIMIT CAST(? AS INTEGER) OFFSET ?`;
    return db.query<ContactRow, (string | number)[]>(sql).all(...(keyset?.params ?? []), ...params, limit, page.offset);
  };
  const rows = select(order, page.limit);
  return order.then && rows.length < page.limit ? rows.concat(select(order.then, page.limit - rows.length)) : rows;
}
