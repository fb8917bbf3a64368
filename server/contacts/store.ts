import type { Database as SqliteConnection } from "bun:sqlite";
import type { Db, Dialect } from "../db/sql.ts";
import { keysetOrder, pageSelect, unindexed } from "../db/keyset.ts";
import { asciiEmail } from "../shared/domains.ts";
import { nameKey } from "../shared/text.ts";
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
  /** contacts linked to this account */
  accountId?: string;
  /** contacts carrying every one of these tags */
  tags?: string[];
  assignedUserId?: string;
}

/** ROW_COLUMNS are a ContactRow's columns, unqualified: what an UPDATE's RETURNING may name (SQLite refuses the table's alias there). */
const ROW_COLUMNS = "id, first_name, last_name, email, phone, external_id, assigned_user_id, properties, account_ids, assigned_user_ids, version, created_at, updated_at";
const COLUMNS = ROW_COLUMNS.replace(/\w+/g, "c.$&");

/** sortKeyOf is the key a name sorts by (migration 0045): nameKey, the same on both backends; none for no name. */
const sortKeyOf = (name: string | null) => (name === null ? null : nameKey(name));

/** insertContact stores a new contact row, with the keys its names sort by. */
export async function insertContact(db: Db, row: ContactRow): Promise<void> {
  await db.run(
    `INSERT INTO contacts (id, first_name, last_name, first_name_key, last_name_key, email, phone, external_id, assigned_user_id, properties, account_ids, assigned_user_ids, version, created_at, updated_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    [row.id, row.first_name, row.last_name, sortKeyOf(row.first_name), sortKeyOf(row.last_name), row.email, row.phone, row.external_id, row.assigned_user_id, row.properties, row.account_ids, row.assigned_user_ids, row.version, row.created_at, row.updated_at],
  );
}

/**
 * updateContact overwrites a contact row's fields, and the keys its names sort by. The caller
 * counts `version` up: every change to a row must, since the list keeps each contact version's
 * rendered JSON (contacts/service.ts).
 */
export async function updateContact(db: Db, row: ContactRow): Promise<void> {
  await db.run(
    `UPDATE contacts SET first_name = ?, last_name = ?, first_name_key = ?, last_name_key = ?, email = ?, phone = ?,
       external_id = ?, assigned_user_id = ?, properties = ?, account_ids = ?,
       assigned_user_ids = ?, version = ?, updated_at = ? WHERE id = ?`,
    [row.first_name, row.last_name, sortKeyOf(row.first_name), sortKeyOf(row.last_name), row.email, row.phone, row.external_id, row.assigned_user_id, row.properties, row.account_ids, row.assigned_user_ids, row.version, row.updated_at, row.id],
  );
}

/** deleteContact removes a contact (its relation rows cascade) and tells whether it existed. */
export async function deleteContact(db: Db, id: string): Promise<boolean> {
  return (await db.run("DELETE FROM contacts WHERE id = ?", [id])) > 0;
}

/** findContactById returns one contact row or null. */
export function findContactById(db: Db, id: string): Promise<ContactRow | null> {
  return db.get<ContactRow>(`SELECT ${COLUMNS} FROM contacts c WHERE c.id = ?`, [id]);
}

/** MAX_EMAIL_MATCHES_NAMED is how many contacts sharing an email a lookup returns: enough to name them in an error. */
const MAX_EMAIL_MATCHES_NAMED = 10;

/** findContactsByIds returns the contacts with the given ids (those that exist), in no particular order. */
export function findContactsByIds(db: Db, ids: readonly string[]): Promise<ContactRow[]> {
  if (ids.length === 0) return Promise.resolve([]);
  return db.all<ContactRow>(`SELECT ${COLUMNS} FROM contacts c WHERE c.id IN (${ids.map(() => "?").join(", ")})`, ids);
}

/** findContactsByEmail returns the contacts with this (lowercased) email, oldest first, at most MAX_EMAIL_MATCHES_NAMED. */
export function findContactsByEmail(db: Db, email: string): Promise<ContactRow[]> {
  return db.all<ContactRow>(`SELECT ${COLUMNS} FROM contacts c WHERE c.email = ? ORDER BY c.id LIMIT ?`, [email, MAX_EMAIL_MATCHES_NAMED]);
}

/** findContactsByEmailWithoutExternalId returns the first contacts with this email that have no external_id, oldest id first. */
export function findContactsByEmailWithoutExternalId(db: Db, email: string): Promise<ContactRow[]> {
  return db.all<ContactRow>(`SELECT ${COLUMNS} FROM contacts c WHERE c.email = ? AND c.external_id IS NULL ORDER BY c.id LIMIT ?`, [email, MAX_EMAIL_MATCHES_NAMED]);
}

/** findContactByExternalId returns the contact with this external_id or null. */
export function findContactByExternalId(db: Db, externalId: string): Promise<ContactRow | null> {
  return db.get<ContactRow>(`SELECT ${COLUMNS} FROM contacts c WHERE c.external_id = ?`, [externalId]);
}

/** RelationSortKeys are the contact's values whose sort keys each of its tag and account rows carries (migrations 0014, 0016 and 0045, its names' keys; triggers keep them current). */
type RelationSortKeys = Pick<ContactRow, "id" | "created_at" | "updated_at" | "first_name" | "last_name" | "email">;

/** insertContactAccounts relates a contact that has no accounts yet to the given ones, in order (the row's account_ids copy is written with the row). */
export async function insertContactAccounts(db: Db, contact: RelationSortKeys, accountIds: string[]): Promise<void> {
  if (accountIds.length === 0) return;
  const [firstNameKey, lastNameKey] = [sortKeyOf(contact.first_name), sortKeyOf(contact.last_name)];
  for (let position = 0; position < accountIds.length; position++) {
    await db.run(
      "INSERT INTO contact_accounts (contact_id, account_id, position, created_at, updated_at, first_name_key, last_name_key, email) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
      [contact.id, accountIds[position]!, position, contact.created_at, contact.updated_at, firstNameKey, lastNameKey, contact.email],
    );
  }
}

/** replaceContactAccounts sets the accounts a contact relates to, in the given order; `contact` is the row as stored after the change. */
export async function replaceContactAccounts(db: Db, contact: RelationSortKeys, accountIds: string[]): Promise<void> {
  await db.run("DELETE FROM contact_accounts WHERE contact_id = ?", [contact.id]);
  await insertContactAccounts(db, contact, accountIds);
}

/** insertContactAssignedUsers assigns a contact that has no assigned users yet to the given ones, in order. */
export async function insertContactAssignedUsers(db: Db, contactId: string, userIds: string[]): Promise<void> {
  for (let position = 0; position < userIds.length; position++) {
    await db.run("INSERT INTO contact_assigned_users (contact_id, user_id, position) VALUES (?, ?, ?)", [contactId, userIds[position]!, position]);
  }
}

/** replaceContactAssignedUsers sets the users a contact is assigned to, in the given order (the row's assigned_user_ids copy is written with the row). */
export async function replaceContactAssignedUsers(db: Db, contactId: string, userIds: string[]): Promise<void> {
  await db.run("DELETE FROM contact_assigned_users WHERE contact_id = ?", [contactId]);
  await insertContactAssignedUsers(db, contactId, userIds);
}

/** insertContactTags records the distinct tags of a contact that has none yet (the row's properties keep `tags` as given). */
export async function insertContactTags(db: Db, contact: RelationSortKeys, tags: readonly string[]): Promise<void> {
  if (tags.length === 0) return;
  const [firstNameKey, lastNameKey] = [sortKeyOf(contact.first_name), sortKeyOf(contact.last_name)];
  for (const tag of tags) {
    await db.run(
      `INSERT INTO contact_tags (contact_id, tag, created_at, updated_at, first_name_key, last_name_key, email) VALUES (?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (contact_id, tag) DO NOTHING`,
      [contact.id, tag, contact.created_at, contact.updated_at, firstNameKey, lastNameKey, contact.email],
    );
  }
}

/** replaceContactTags sets the distinct tags a contact carries; `contact` is the row as stored after the change. */
export async function replaceContactTags(db: Db, contact: RelationSortKeys, tags: readonly string[]): Promise<void> {
  await db.run("DELETE FROM contact_tags WHERE contact_id = ?", [contact.id]);
  await insertContactTags(db, contact, tags);
}

/** findContactsLinkedToAccount returns the ids of at most `limit` contacts linked to an account (any of them: unlinkAccountFromContacts takes them all in turn). */
export async function findContactsLinkedToAccount(db: Db, accountId: string, limit: number): Promise<string[]> {
  return (await db.all<{ contact_id: string }>("SELECT contact_id FROM contact_accounts WHERE account_id = ? LIMIT ?", [accountId, limit])).map((row) => row.contact_id);
}

/**
 * unlinkAccountFromContacts removes an account from the given contacts (found linked to it by
 * findContactsLinkedToAccount), in three statements whatever their number: the rows' account_ids
 * copies and updated_at, then the relation rows. Returns the changed rows. Statements inside the
 * write queue's savepoint grow slower with the pages it has changed, so one statement per contact
 * was quadratic: unlinking 20,000 contacts took 48 s, now 0.27 s.
 */
export async function unlinkAccountFromContacts(db: Db, accountId: string, contactIds: readonly string[], updatedAt: number): Promise<ContactRow[]> {
  if (contactIds.length === 0) return [];
  // sqlite-only: json_group_array builds the account_ids copy; PostgreSQL joins the ids (acc_ and a
  // ULID, nothing to escape) into the text JSON.stringify would write.
  const accountIds =
    db.dialect === "postgres"
      ? `SELECT coalesce('["' || string_agg(account_id, '","' ORDER BY position) || '"]', '[]') FROM contact_accounts WHERE contact_id = contacts.id AND account_id <> ?`
      : "SELECT json_group_array(account_id) FROM (SELECT account_id FROM contact_accounts WHERE contact_id = contacts.id AND account_id <> ? ORDER BY position)";
  const list = contactIds.map(() => "?").join(", ");
  await db.run(
    // As notBefore: a contact stamped by an instance whose clock runs ahead keeps that stamp.
    `UPDATE contacts SET version = version + 1, updated_at = CASE WHEN updated_at > ? THEN updated_at ELSE ? END, account_ids = (${accountIds})
     WHERE id IN (${list})`,
    [updatedAt, updatedAt, accountId, ...contactIds],
  );
  const rows = await db.all<ContactRow>(`SELECT ${COLUMNS} FROM contacts c WHERE c.id IN (${list})`, contactIds);
  await db.run(`DELETE FROM contact_accounts WHERE account_id = ? AND contact_id IN (${list})`, [accountId, ...contactIds]);
  return rows;
}

/**
 * ASSIGNED_TO_USER selects the ids of the contacts assigned to a user (bound twice), as
 * assigned_user_id or in assigned_user_ids: a UNION of the two indexed lookups, where PostgreSQL
 * read every contact for `assigned_user_id = ? OR id IN (...)`.
 */
const ASSIGNED_TO_USER = "SELECT id FROM contacts WHERE assigned_user_id = ? UNION SELECT contact_id FROM contact_assigned_users WHERE user_id = ?";

/** countContactsAssignedToUser counts the contacts assigned to a user as assigned_user_id or in assigned_user_ids: those its delete changes. */
export async function countContactsAssignedToUser(db: Db, userId: string): Promise<number> {
  const row = await db.get<{ n: number }>(`SELECT count(*) AS n FROM (${ASSIGNED_TO_USER}) assigned`, [userId, userId]);
  return Number(row!.n);
}

/**
 * findContactsAssignedToUser returns the ids of at most `limit` contacts assigned to a user, as
 * assigned_user_id or in assigned_user_ids. Each lookup is limited before the UNION, which would
 * otherwise gather every one of them for each call: fewer than `limit` ids means there are no others.
 */
export async function findContactsAssignedToUser(db: Db, userId: string, limit: number): Promise<string[]> {
  const rows = await db.all<{ id: string }>(
    `SELECT id FROM (SELECT id FROM contacts WHERE assigned_user_id = ? LIMIT ?) direct
     UNION SELECT contact_id FROM (SELECT contact_id FROM contact_assigned_users WHERE user_id = ? LIMIT ?) listed LIMIT ?`,
    [userId, limit, userId, limit, limit],
  );
  return rows.map((row) => row.id);
}

/**
 * unassignUserFromContacts takes a user off the given contacts (found assigned to it by
 * findContactsAssignedToUser), as assigned_user_id and in assigned_user_ids, in two statements
 * whatever their number, as unlinkAccountFromContacts does for an account's links: the rows
 * (version, updated_at, assigned_user_id, the assigned_user_ids copy), read back by RETURNING,
 * then the relation rows. Returns the changed rows.
 */
export async function unassignUserFromContacts(db: Db, userId: string, contactIds: readonly string[], updatedAt: number): Promise<ContactRow[]> {
  if (contactIds.length === 0) return [];
  // sqlite-only: json_group_array builds the assigned_user_ids copy; PostgreSQL joins the ids (usr_
  // and a ULID, nothing to escape) into the text JSON.stringify would write.
  const userIds =
    db.dialect === "postgres"
      ? `SELECT coalesce('["' || string_agg(user_id, '","' ORDER BY position) || '"]', '[]') FROM contact_assigned_users WHERE contact_id = contacts.id AND user_id <> ?`
      : "SELECT json_group_array(user_id) FROM (SELECT user_id FROM contact_assigned_users WHERE contact_id = contacts.id AND user_id <> ? ORDER BY position)";
  const list = contactIds.map(() => "?").join(", ");
  const rows = await db.all<ContactRow>(
    // As notBefore: a contact stamped by an instance whose clock runs ahead keeps that stamp.
    `UPDATE contacts SET version = version + 1, updated_at = CASE WHEN updated_at > ? THEN updated_at ELSE ? END,
       assigned_user_id = NULLIF(assigned_user_id, ?), assigned_user_ids = (${userIds})
     WHERE id IN (${list})
     RETURNING ${ROW_COLUMNS}`,
    [updatedAt, updatedAt, userId, userId, ...contactIds],
  );
  await db.run(`DELETE FROM contact_assigned_users WHERE user_id = ? AND contact_id IN (${list})`, [userId, ...contactIds]);
  return rows;
}

/**
 * fullNameMatch is the condition on the search table (alias f) that its rows meet when their full
 * name contains the needle, case-insensitively; `indexed` tells whether the trigram index finds them.
 * Contacts still waiting for that table (migration 0017) are not in it: the service indexes them
 * (indexWaitingNames) before it searches.
 */
function fullNameMatch(needle: string): { condition: string; params: string[]; indexed: boolean } {
  // A quoted phrase of 3+ characters is a substring search in the trigram index, which folds
  // case for every script and takes % and _ literally. LIKE would not: SQLite re-checks each
  // row with its own LIKE, whose case folding knows only ASCII ("élo" missed "Élodie").
  if ([...needle].length >= 3) {
    // sqlite-only: FTS5 MATCH on the trigram table.
    return { condition: "f.contacts_full_name MATCH ?", params: [`"${needle.replaceAll('"', '""')}"`], indexed: true };
  }
  // Too short for a trigram: scan. An ASCII needle needs only ASCII case folding, which SQLite's
  // LIKE does, 2.4x faster than instr over each spelling (9.6 vs 23 ms on 100k names), unless one
  // of its letters has a spelling beyond ASCII (k: the Kelvin sign).
  if (/^[\x00-\x7f]*$/.test(needle) && [...needle].every((ch) => caseSpellings(ch).every((spelling) => spelling <= "\x7f"))) {
    return { condition: "f.full_name LIKE ? ESCAPE '\\'", params: [`%${needle.replace(/[\\%_]/g, "\\$&")}%`], indexed: false };
  }
  // Otherwise try each character in each of its spellings (at most 16 for two characters).
  const spellings = [...needle].reduce<string[]>((prefixes, ch) => caseSpellings(ch).flatMap((variant) => prefixes.map((prefix) => prefix + variant)), [""]);
  return { condition: `(${spellings.map(() => "instr(f.full_name, ?) > 0").join(" OR ")})`, params: spellings, indexed: false };
}

let lowercaseSpellings: Map<string, string[]> | null = null;

/**
 * caseSpellings lists the characters that match `ch` in a search: those with the same lowercase
 * letter, as the trigram index and PostgreSQL's ILIKE match them ("ǅ" finds ǆ, Ǆ and itself, "ß"
 * finds ẞ, the Ohm sign finds ω). Upper-casing instead would make "ı" find I and "ß" find SS.
 */
function caseSpellings(ch: string): string[] {
  const lower = ch.toLowerCase();
  if ([...lower].length !== 1) return [ch];
  // Built on the first short search beyond ASCII (about 10 ms): every cased letter lies below U+20000.
  if (!lowercaseSpellings) {
    lowercaseSpellings = new Map();
    for (let code = 0; code < 0x20000; code++) {
      if (code >= 0xd800 && code <= 0xdfff) continue;
      const letter = String.fromCodePoint(code);
      const itsLower = letter.toLowerCase();
      if (itsLower === letter || [...itsLower].length !== 1) continue;
      const group = lowercaseSpellings.get(itsLower) ?? [itsLower];
      group.push(letter);
      lowercaseSpellings.set(itsLower, group);
    }
  }
  return lowercaseSpellings.get(lower) ?? [ch];
}

/**
 * fullNameContains is the PostgreSQL condition on contacts (or a window of them, `alias`) for a full
 * name containing the needle, case-insensitively in every script, % and _ taken literally: ILIKE on
 * the generated full_name, found through its pg_trgm index from 3 characters on (shorter needles
 * scan, as on SQLite).
 */
function fullNameContains(needle: string, alias = "c"): { condition: string; params: string[] } {
  return { condition: `${alias}.full_name ILIKE ? ESCAPE '\\'`, params: [`%${needle.replace(/[\\%_]/g, "\\$&")}%`] };
}

/** RowidSpan is the lowest and highest rowid of a window's entries (null for an empty window). */
interface RowidSpan {
  lo: number | null;
  hi: number | null;
}

/**
 * nameInWindow is the condition that the contact whose rowid is `rowid`, an entry of a window of the
 * sort index, has the needle in its full name (SQLite). The trigram index's matches are collected
 * once and each entry is probed against them, only those within `span` when it is given: the index
 * seeks to a rowid range, so a window spanning few rowids collects few matches (a needle of 1 in 2
 * of 100,000 contacts collected all 50,000 for a first page of 104 entries). Probing each entry in
 * the index instead costs 0.2 ms or more an entry. A needle too short for trigrams is not collected
 * (a scan of every name): each entry looks up its own name instead.
 */
function nameInWindow(needle: string, rowid: string, span: RowidSpan | null): { condition: string; params: (string | number | null)[] } {
  const match = fullNameMatch(needle);
  if (match.indexed && span) return { condition: `${rowid} IN (SELECT rowid FROM contacts_full_name f WHERE ${match.condition} AND f.rowid BETWEEN ? AND ?)`, params: [...match.params, span.lo, span.hi] };
  if (match.indexed) return { condition: `${rowid} IN (SELECT rowid FROM contacts_full_name f WHERE ${match.condition})`, params: match.params };
  return { condition: `EXISTS (SELECT 1 FROM contacts_full_name f WHERE f.rowid = ${rowid} AND ${match.condition})`, params: match.params };
}

/** windowRowidSpan reads the lowest and highest rowid among the first `rows` entries of a window (SQLite), in the window's covering index. */
async function windowRowidSpan(db: Db, window: string, params: (string | number)[], rows: number): Promise<RowidSpan> {
  return (await db.get<RowidSpan>(`SELECT min(w.rid) AS lo, max(w.rid) AS hi FROM (${window} LIMIT CAST(? AS INTEGER)) w`, [...params, rows]))!;
}

/**
 * planPerValue has PostgreSQL plan the rest of the read transaction's statements for their own
 * parameters; call it inside `db.read` before a list whose filters make valueDependentPlans true.
 * Bun's pooled statements are prepared, and from the 6th run PostgreSQL may keep one generic plan:
 * for a name it read the whole trigram index and rechecked every row (a needle without trigrams
 * took 0.26 to 0.6 s on 300,000 contacts instead of the 0.1 s seq scan its own plan picks); for
 * a tag of 10,000 beside an account of 250,000 it kept the plan of a tag of 500,000 (a count took
 * 270 ms instead of 24 on 1,000,000 contacts). SQLite plans each statement's shape anyway.
 */
export async function planPerValue(db: Db): Promise<void> {
  if (db.dialect !== "postgres") return;
  await db.run("SET LOCAL plan_cache_mode = force_custom_plan");
}

/** valueDependentPlans tells whether the filters' best plans depend on their values: a name search, or two relations or more, whose sizes decide which drives. */
export function valueDependentPlans(filters: ContactFilters): boolean {
  return filters.fullName !== undefined || (filters.tags?.length ?? 0) + (filters.accountId !== undefined ? 1 : 0) + (filters.assignedUserId !== undefined ? 1 : 0) >= 2;
}

/**
 * hasUnindexedNames tells whether contacts wait for the trigram name index (SQLite, migration
 * 0017); PostgreSQL's index is kept in each transaction, so nothing ever waits there.
 */
export async function hasUnindexedNames(db: Db): Promise<boolean> {
  if (db.dialect === "postgres") return false;
  return (await db.get("SELECT 1 FROM contacts_full_name_pending LIMIT 1")) !== null;
}

/** indexWaitingNames adds the waiting contacts' names to the trigram index in one batch; call it inside a write. */
export async function indexWaitingNames(db: Db): Promise<void> {
  // sqlite-only: the FTS5 table and its waiting list (migration 0017). The text is the full_name
  // the API returns, as migration 0027's update trigger writes it.
  await db.run(
    `INSERT INTO contacts_full_name (rowid, full_name)
     SELECT c.rowid, CASE WHEN c.first_name <> '' AND c.last_name <> '' THEN c.first_name || ' ' || c.last_name ELSE coalesce(nullif(c.first_name, ''), c.last_name, '') END
     FROM contacts_full_name_pending p JOIN contacts c ON c.rowid = p.contact_rowid`,
  );
  await db.run("DELETE FROM contacts_full_name_pending");
}

/**
 * everyTag builds the condition that each of `tags` has a row in contact_tags meeting `found` (a
 * condition on `ct`, given the expression of the tag), with its parameter: none of them is
 * missing, each probing a key in turn until the first one missing. Two or more are bound as one
 * JSON array (tagArrayProbe), never one `?` each: every distinct SQL text is a prepared statement kept on each
 * connection (SQLite's statement cache, a named statement on every pooled PostgreSQL connection),
 * and a text per number of tags (up to 100) and per driving tag let one client fill PostgreSQL's
 * backends with 3.1 GB of statements, each planned for up to 10 s. `narrow` names the SQLite index
 * that `found` seeks, where it is narrower than the primary key SQLite would pick.
 */
function everyTag(db: Db, tags: readonly string[], found: (tag: string) => string, narrow?: string): { condition: string; params: string[] } {
  const distinct = [...new Set(tags)];
  // One tag beside the driver (a list of two tags, the usual case) is probed as a bound value: one
  // more text per shape, and no array read for every row probed (on SQLite about 0.15 us a row:
  // two tags of 1 in 100 and 1 in 2 on 1,000,000 contacts, 11 against 13 ms).
  // sqlite-only: INDEXED BY.
  if (distinct.length === 1) return { condition: `EXISTS (SELECT 1 FROM contact_tags ct${db.dialect === "sqlite" && narrow ? ` INDEXED BY ${narrow}` : ""} WHERE ${found("?")})`, params: distinct };
  return tagArrayProbe(db, distinct, found, narrow);
}

/** tagArrayProbe is everyTag's condition with the tags bound as one JSON array, whatever their number. */
function tagArrayProbe(db: Db, tags: readonly string[], found: (tag: string) => string, narrow?: string): { condition: string; params: string[] } {
  const given = JSON.stringify([...new Set(tags)]);
  if (db.dialect === "postgres") {
    // Read through ARRAY(...), which PostgreSQL expects to hold 10 tags where it expects 100 rows of
    // json_array_elements_text: with those it took the anti join to keep half the rows and walked
    // the contacts' sort index for a page, testing each against the window (0.8 s for 5 tags).
    // The array is bound as text: Bun sends a string bound as json as a JSON string, a scalar.
    const tagsGiven = "unnest(ARRAY(SELECT json_array_elements_text(?::text::json))) g(value)";
    return { condition: `NOT EXISTS (SELECT 1 FROM ${tagsGiven} WHERE NOT EXISTS (SELECT 1 FROM contact_tags ct WHERE ${found("g.value")}))`, params: [given] };
  }
  // sqlite-only: json_each, and INDEXED BY (SQLite picks the primary key, whose rows are wider).
  const indexed = narrow ? ` INDEXED BY ${narrow}` : "";
  return { condition: `NOT EXISTS (SELECT 1 FROM json_each(?) g WHERE NOT EXISTS (SELECT 1 FROM contact_tags ct${indexed} WHERE ${found("g.value")}))`, params: [given] };
}

/**
 * tagProbes builds everyTag's condition for `tags`; with `joined`, on PostgreSQL the first of them
 * is an EXISTS of its own, of one tag whatever their number, which PostgreSQL joins with the rows
 * read (a merge or hash join of two indexes) where a probe of every row costs more: a count from a
 * tag of 66,666 took 129 ms probing each against 15 joined, a fetch of 2,000 49 ms against 7. The
 * rest, possibly none, probe the rows the join keeps.
 */
function tagProbes(db: Db, tags: readonly string[], found: (tag: string) => string, { joined = false, narrow }: { joined?: boolean; narrow?: string } = {}): { condition: string; params: string[] } {
  if (!joined || db.dialect !== "postgres" || tags.length === 0) return everyTag(db, tags, found, narrow);
  // The rest are always the array, so that three tags and forty run the same text.
  const rest = tagArrayProbe(db, tags.slice(1), found);
  return { condition: `EXISTS (SELECT 1 FROM contact_tags ct WHERE ${found("?")}) AND ${rest.condition}`, params: [tags[0]!, ...rest.params] };
}

/** RelationFilter names one relation condition of a filter set: a tag, the account or the assigned user, with its value. */
type RelationFilter = Pick<RelationTerm, "kind" | "value">;

/**
 * relationProbes builds the relation conditions on the rows named `alias`: the `driver` (if any)
 * fetched through its relation's index, every other one probing its relation's primary key. The
 * probed tags are one condition and one parameter, whatever their number and whichever tag drives.
 */
function relationProbes(db: Db, filters: ContactFilters, alias: string, driver: RelationFilter | null = null): { where: string[]; params: string[] } {
  const where: string[] = [];
  const params: string[] = [];
  if (filters.accountId !== undefined) {
    where.push(driver?.kind === "account" ? `${alias}.id IN (SELECT contact_id FROM contact_accounts WHERE account_id = ?)` : `EXISTS (SELECT 1 FROM contact_accounts ca WHERE ca.contact_id = ${alias}.id AND ca.account_id = ?)`);
    params.push(filters.accountId);
  }
  const tags = filters.tags ?? [];
  if (driver?.kind === "tag") {
    where.push(`${alias}.id IN (SELECT contact_id FROM contact_tags WHERE tag = ?)`);
    params.push(driver.value);
  }
  const probed = driver?.kind === "tag" ? tags.filter((tag) => tag !== driver.value) : tags;
  if (probed.length > 0) {
    const probe = tagProbes(db, probed, (tag) => `ct.contact_id = ${alias}.id AND ct.tag = ${tag}`, { joined: driver !== null });
    where.push(probe.condition);
    params.push(...probe.params);
  }
  if (filters.assignedUserId !== undefined) {
    where.push(`${driver?.kind === "assigned_user" ? `${alias}.assigned_user_id` : unindexed(db.dialect, `${alias}.assigned_user_id`)} = ?`);
    params.push(filters.assignedUserId);
  }
  return { where, params };
}

/**
 * filterClause builds the WHERE terms of a fetch: `driver` is the relation whose matches are
 * fetched from its index; every other relation condition probes its relation's key for each of them.
 * `ranged` is the time filter read as a range of its index when both are given (rangedTime): the
 * other is checked on each row.
 */
function filterClause(db: Db, filters: ContactFilters, driver: RelationFilter | null = null, ranged?: TimeFilter["column"]): { where: string[]; params: (string | number)[] } {
  const where: string[] = [];
  const params: (string | number)[] = [];
  if (filters.email !== undefined) {
    where.push("c.email = ?");
    params.push(asciiEmail(filters.email));
  }
  if (filters.fullName !== undefined && db.dialect === "postgres") {
    const match = fullNameContains(filters.fullName);
    where.push(match.condition);
    params.push(...match.params);
  } else if (filters.fullName !== undefined) {
    // sqlite-only: the search table is an FTS5 table joined to contacts by rowid.
    const match = fullNameMatch(filters.fullName);
    where.push(`c.rowid IN (SELECT rowid FROM contacts_full_name f WHERE ${match.condition})`);
    params.push(...match.params);
  }
  const timeColumn = (column: TimeFilter["column"]) => (ranged === undefined || ranged === column ? `c.${column}` : unindexed(db.dialect, `c.${column}`));
  if (filters.createdAfter !== undefined) {
    where.push(`${timeColumn("created_at")} > ?`);
    params.push(filters.createdAfter);
  }
  if (filters.updatedAfter !== undefined) {
    where.push(`${timeColumn("updated_at")} > ?`);
    params.push(filters.updatedAfter);
  }
  // The driving relation collects its contacts from the relation's index (then they are sorted);
  // the others, and all of them beside an email or a name, probe the relation's primary key for each row.
  const probes = relationProbes(db, filters, "c", driver);
  where.push(...probes.where);
  params.push(...probes.params);
  return { where, params };
}

/** givenFilterCount counts the filters given. A loop, not Object.entries: it runs several times for every list. */
function givenFilterCount(filters: ContactFilters): number {
  let given = 0;
  for (const key in filters) if (filters[key as keyof ContactFilters] !== undefined) given++;
  return given;
}

const hasFilters = (filters: ContactFilters) => givenFilterCount(filters) > 0;

/** SoleFilter is the one condition of a list filtered by a single name search or relation. */
type SoleFilter = { kind: "full_name"; needle: string } | { kind: "tag" | "account" | "assigned_user"; value: string };

/** soleFilter returns the filters' only condition when it is a name search or a relation, else null. */
function soleFilter(filters: ContactFilters): SoleFilter | null {
  if (givenFilterCount(filters) !== 1) return null;
  if (filters.fullName !== undefined) return { kind: "full_name", needle: filters.fullName };
  if (filters.tags?.length === 1) return { kind: "tag", value: filters.tags[0]! };
  if (filters.accountId !== undefined) return { kind: "account", value: filters.accountId };
  if (filters.assignedUserId !== undefined) return { kind: "assigned_user", value: filters.assignedUserId };
  return null;
}

/** relationCount reads the trigger-kept number of contacts with a tag, account or assigned user. */
async function relationCount(db: Db, kind: "tag" | "account" | "assigned_user", value: string): Promise<number> {
  return (await db.get<{ n: number }>("SELECT n FROM contact_filter_counts WHERE filter = ? AND value = ?", [kind, value]))?.n ?? 0;
}

/** RelationTerm is one relation condition of a filter set with its trigger-kept number of contacts. */
interface RelationTerm {
  kind: "tag" | "account" | "assigned_user";
  value: string;
  contacts: number;
}

/** relationTerms lists the filters' relation conditions, fewest contacts first. */
async function relationTerms(db: Db, filters: ContactFilters): Promise<RelationTerm[]> {
  const terms: Omit<RelationTerm, "contacts">[] = [
    ...(filters.tags ?? []).map((tag) => ({ kind: "tag" as const, value: tag })),
    ...(filters.accountId !== undefined ? [{ kind: "account" as const, value: filters.accountId }] : []),
    ...(filters.assignedUserId !== undefined ? [{ kind: "assigned_user" as const, value: filters.assignedUserId }] : []),
  ];
  const counted: RelationTerm[] = [];
  for (const term of terms) counted.push({ ...term, contacts: await relationCount(db, term.kind, term.value) });
  return counted.sort((a, b) => a.contacts - b.contacts);
}

/**
 * relationsAndTimes tells whether the filters are relations (tag, account, assigned user), one at
 * least, and nothing else but time filters: a page of them walks a relation's own sort index, whose
 * rows carry created_at and updated_at too.
 */
const relationsAndTimes = (filters: ContactFilters) =>
  filters.email === undefined && filters.fullName === undefined && (filters.tags !== undefined || filters.accountId !== undefined || filters.assignedUserId !== undefined);

/** TimeFilter is a created_after or updated_after filter: rows whose `column` is later than `after`. */
interface TimeFilter {
  column: "created_at" | "updated_at";
  after: number;
}

/** timeFilters lists the filters' time filters, updated_after first: a sync polls by it, so it is the range a count reads. */
function timeFilters(filters: ContactFilters): TimeFilter[] {
  return [
    ...(filters.updatedAfter !== undefined ? [{ column: "updated_at" as const, after: filters.updatedAfter }] : []),
    ...(filters.createdAfter !== undefined ? [{ column: "created_at" as const, after: filters.createdAfter }] : []),
  ];
}

/**
 * timeConditions builds the time filters' conditions on the rows named `alias` (a relation's rows
 * carry both columns): the one on `ranged`, if any, is a range of the index read; the others are
 * checked on each row it reads, kept out of SQLite's choice of index.
 */
function timeConditions(db: Db, times: TimeFilter[], alias: string, ranged: TimeFilter["column"] | null): { where: string[]; params: number[] } {
  return {
    where: times.map((time) => `${time.column === ranged ? `${alias}.${time.column}` : unindexed(db.dialect, `${alias}.${time.column}`)} > ?`),
    params: times.map((time) => time.after),
  };
}

/**
 * drivingRelation picks the relation filter with the fewest contacts to fetch the matches from,
 * so two tags on half and on 1 in 100 contacts read the 1 in 100 and probe the other. None when
 * an email or name filter is given: their own index narrows further.
 */
async function drivingRelation(db: Db, filters: ContactFilters): Promise<RelationFilter | null> {
  if (filters.email !== undefined || filters.fullName !== undefined) return null;
  return (await relationTerms(db, filters))[0] ?? null;
}

/** RelationRows is where a relation's contacts are: the table, its key column, the contact id column, and the prefix of its indexes (key, created_at, id) and (key, updated_at, id). */
interface RelationRows {
  table: string;
  key: string;
  id: string;
  index: string;
}

const RELATION_ROWS: Record<RelationTerm["kind"], RelationRows> = {
  tag: { table: "contact_tags", key: "tag", id: "contact_id", index: "contact_tags" },
  account: { table: "contact_accounts", key: "account_id", id: "contact_id", index: "contact_accounts" },
  assigned_user: { table: "contacts", key: "assigned_user_id", id: "id", index: "contacts_assigned_user" },
};

/**
 * countRelationMatches counts the contacts meeting relation filters and time filters in the
 * relations' indexes alone: the rarest relation's time index is read in order (a range of it with a
 * time filter: its rows carry created_at and updated_at) and each entry probes the others' time
 * indexes, without looking up a single row.
 */
async function countRelationMatches(db: Db, terms: RelationTerm[], times: TimeFilter[]): Promise<number> {
  const [driver, ...others] = terms as [RelationTerm, ...RelationTerm[]];
  const ranged = times[0]?.column ?? "created_at";
  const timed = timeConditions(db, times, "d", ranged);
  const driving = RELATION_ROWS[driver.kind];
  // Every relation has an index (key, created_at, id) and (key, updated_at, id). The driver reads
  // the one of the ranged column, and each other relation is probed in its own: narrower than its
  // rows or the contacts' primary key, and entered in the order the driver reads, so consecutive
  // probes share pages (a tag of 10,000 probing an account of 250,000 on 1,000,000 contacts: 8.7 ms
  // against 15.2 through the account's primary key in the order of whichever index SQLite chose).
  const timeIndex = (relation: RelationRows) => `${relation.index}_${ranged === "created_at" ? "created" : "updated"}`;
  const indexed = (relation: RelationRows) => (db.dialect === "sqlite" ? ` INDEXED BY ${timeIndex(relation)}` : "");
  const probeOf = (relation: RelationRows, alias: string, key: string) =>
    `${alias}.${relation.key} = ${key} AND ${alias}.${ranged} = d.${ranged} AND ${alias}.${relation.id} = d.${driving.id}`;
  // The other tags are one probe (rarest first, so the first missing ends it soonest), in the place of the rarest of them.
  const tags = others.filter((term) => term.kind === "tag").map((term) => term.value);
  const firstTag = others.findIndex((term) => term.kind === "tag");
  const probes = others.flatMap((term, i) => {
    // (`narrow` is an INDEXED BY, which the tag probes write on SQLite only)
    if (term.kind === "tag") return i === firstTag ? [tagProbes(db, tags, (tag) => probeOf(RELATION_ROWS.tag, "ct", tag), { joined: true, narrow: timeIndex(RELATION_ROWS.tag) })] : [];
    const probed = RELATION_ROWS[term.kind];
    return [{ condition: `EXISTS (SELECT 1 FROM ${probed.table} p${indexed(probed)} WHERE ${probeOf(probed, "p", "?")})`, params: [term.value] }];
  });
  const sql = `SELECT count(*) AS n FROM ${driving.table} d${indexed(driving)} WHERE d.${driving.key} = ?${[...timed.where, ...probes.map((probe) => probe.condition)].map((condition) => ` AND ${condition}`).join("")}`;
  return (await db.get<{ n: number }>(sql, [driver.value, ...timed.params, ...probes.flatMap((probe) => probe.params)]))!.n;
}

/** countAllContacts reads the trigger-kept number of contacts instead of counting a million rows. */
async function countAllContacts(db: Db): Promise<number> {
  return (await db.get<{ n: number }>("SELECT n FROM row_counts WHERE table_name = 'contacts'"))!.n;
}

/**
 * BROAD_SHARE: time filters keeping at least 1 in this many contacts (of all, or of the relation
 * walked) are checked on each row of a window of a sort index; narrower ones are read as a range
 * of their own index and sorted (timeWindow, walkWindow).
 */
const BROAD_SHARE = 8;

/**
 * NAME_WINDOW_PER_MATCH: a name search reads a window of the sort index while the window's entries
 * are fewer than this many times its matches, else it fetches every match by rowid and sorts them.
 * An entry costs about 0.06 to 0.08 us to walk and probe against the collected matches (0.16 us
 * looking up its own name, for a needle too short for trigrams), a fetched match about 0.5 us: so a
 * window that fills the page costs less than the fetch, and one that misses (the matches crowd the
 * far end of the order) costs the fetch and at most about as much again.
 */
const NAME_WINDOW_PER_MATCH = 8;

/**
 * WALK_WINDOW: a walk for relation filters reads at most this many times the rows it expects to
 * need (matches spread evenly) from the rarest relation's sort index. Where the other relations
 * seldom meet its contacts in that order (a tag of the newest contacts and an account of the
 * oldest) it would otherwise read most of the index; past the window the page is fetched instead,
 * so such a page costs at most the window plus the fetch. A single relation cannot miss: every
 * row of its index is a match.
 */
const WALK_WINDOW = 2;

/**
 * Walk is how a page of a name, relation or time filter is read: `rows` 0 to fetch the matches,
 * else a window's entries; `relation` the relation whose own sort index the window reads (none:
 * the contacts' sort index, for a name search or time filters alone), or with `byTime`
 * its index of that time filter's column: a range whose rows are sorted by the sort keys they carry.
 */
interface Walk {
  rows: number;
  relation: RelationTerm | null;
  byTime?: TimeFilter["column"];
}

/**
 * walkWindow decides whether a page of a name or relation filter reads a sort index in order,
 * given the count of matches. Relation filters always walk the sort index of the relation with the
 * fewest contacts: a tag's or an account's rows carry the sort keys (migrations 0014 and 0016), an
 * assigned user's contacts have their own indexes on contacts. Each of its entries is a candidate;
 * about (offset + limit) * its contacts / matches of them are read, never more than it has, while
 * fetching would read every one of its contacts and sort them. So a page of one relation costs its
 * 25 index entries wherever its contacts lie in the order (an account of only the oldest contacts,
 * newest first, included). Time filters beside relations narrow the same walk: the relation's rows
 * carry created_at and updated_at, so an incremental sync (updated_after, sorted by updated_at) reads
 * one range of the relation's updated_at index, where fetching read every contact of the relation
 * (0.27 s a page for a tag of 150,000). A name search reads a window of the contacts' sort index
 * when it is cheaper than the fetch (nameWindow).
 */
async function walkWindow(db: Db, filters: ContactFilters, page: Pick<ContactPage, "sortBy" | "matches" | "limit" | "offset">): Promise<Walk> {
  if (!listNeedsCount(filters, page.sortBy, db.dialect)) return { rows: 0, relation: null };
  if (page.matches === null) throw new Error("listContacts: this filter needs the count of matches (listNeedsCount)");
  const sole = soleFilter(filters);
  if (sole?.kind === "full_name") return nameWindow(page, page.matches, await countAllContacts(db));
  if (page.matches === 0) return { rows: 0, relation: null };
  if (!relationsAndTimes(filters)) return db.dialect === "postgres" ? { rows: 0, relation: null } : timeWindow(page, page.matches, await countAllContacts(db));
  const terms = await relationTerms(db, filters);
  const rarest = terms[0]!;
  // The window holds the relation's rows within the time filters: alone, every one of them is a
  // match; beside other relations they are at most all its rows.
  const candidates = terms.length === 1 ? Math.min(page.matches, rarest.contacts) : rarest.contacts;
  const rows = windowEntries(page, candidates, page.matches);
  // A time filter on another column than the sort is checked on each row walked; one keeping fewer
  // than 1 in BROAD_SHARE of the relation's contacts is read as a range of the relation's own index
  // of it instead, its rows sorted by the sort keys they carry: a walk could read every row of the
  // relation to find them (0.1 s for a tag of 150,000 whose few matches lay at the far end).
  const times = timeFilters(filters);
  const offSort = times.length > 0 && times.every((time) => time.column !== page.sortBy);
  return { rows, relation: rarest, ...(offSort && page.matches * BROAD_SHARE < rarest.contacts ? { byTime: times[0]!.column } : {}) };
}

/**
 * windowEntries is how many entries of an index a walk reads for a page: WALK_WINDOW times the
 * entries the page's end needs if the `matches` are spread evenly among its `candidates`, and at
 * most one more than there are, which reads them all and tells the window was not cut short (a
 * deep page would otherwise ask for more rows than PostgreSQL's integer LIMIT holds).
 */
function windowEntries(page: Pick<ContactPage, "limit" | "offset">, candidates: number, matches: number): number {
  return Math.min(Math.ceil((WALK_WINDOW * (page.offset + page.limit) * candidates) / matches), candidates + 1);
}

/**
 * nameWindow is the walk of a page of a name search, given the count of its matches among all
 * `contacts`: a window of the contacts' sort index (windowEntries), each entry probed for the
 * needle, while its entries are fewer than NAME_WINDOW_PER_MATCH times the matches; else every
 * match is fetched and sorted. Where the window holds too few matches, the page is fetched after
 * all. No page walks the whole index: a search of 1 in 8 contacts or more did on SQLite, to find
 * matches crowding its far end, and PostgreSQL's own plan walked it for a surname sorted by
 * surname (collectsMatches). A needle matching 1 in 9 of 100,000 contacts fetched and sorted its
 * 11,111 matches for every page on SQLite (5.7 to 10.7 ms); its window is 469 entries for the
 * first page and 18,019 for the 40th (2.0 and 2.6 ms), bench/names.ts.
 */
function nameWindow(page: Pick<ContactPage, "limit" | "offset">, matches: number, contacts: number): Walk {
  const rows = windowEntries(page, contacts, matches);
  return { rows: rows < NAME_WINDOW_PER_MATCH * matches ? rows : 0, relation: null };
}

/**
 * timeWindow is the walk of a page of time filters alone, none of them on the sort's column (see
 * timesBesideSort), given the count of their matches among all `contacts`. Keeping 1 in
 * BROAD_SHARE of them or more, a window of the sort index is read in order, twice the entries the
 * page needs if the matches are spread evenly, and each entry's row is checked: fetching the range
 * read and sorted every match, on every page (updated_after keeping all of 300,000 contacts: 0.15 s
 * on SQLite; a window of 200 entries instead). Where the matches lie beyond the window (contacts
 * updated lately are mostly the newest, so oldest first reaches them last), the page is fetched
 * after all: it costs at most the window more. A narrower range is fetched and sorted: few rows.
 * PostgreSQL is left its own plan for a broad range: it walks the sort index until the page is full
 * (0.1 ms, where a window took 1.5), and its pooled statements keep planning each range (a generic
 * plan is costed far above them). A narrower one is collected first there too (collectsMatches):
 * its own plan walked the sort index for the newest 914 of 200,000 contacts oldest change first,
 * and filtered 198,756 rows before them (0.35 s).
 */
function timeWindow(page: Pick<ContactPage, "limit" | "offset">, matches: number, contacts: number): Walk {
  if (matches * BROAD_SHARE < contacts) return { rows: 0, relation: null };
  return { rows: windowEntries(page, contacts, matches), relation: null };
}

/**
 * timesBesideSort tells whether the filters are time filters alone, none of them on the sort's
 * column: a page of them reads the range of one and sorts it, or walks the sort index (timeWindow).
 * On the sort's column, the range is one of the sort index, read in order: no count is needed.
 */
function timesBesideSort(filters: ContactFilters, sortBy: ContactSort): boolean {
  const times = timeFilters(filters);
  return times.length > 0 && times.length === givenFilterCount(filters) && times.every((time) => time.column !== sortBy);
}

/**
 * listNeedsCount tells whether listContacts must be given the count of matches: name searches,
 * relation filters (with or without time filters) and time filters beside the sort's column plan
 * their page with it; on PostgreSQL a name search beside other filters too (collectsMatches).
 */
export function listNeedsCount(filters: ContactFilters, sortBy: ContactSort, dialect: Dialect): boolean {
  if (dialect === "postgres" && filters.fullName !== undefined && filters.email === undefined) return true;
  return soleFilter(filters) !== null || relationsAndTimes(filters) || timesBesideSort(filters, sortBy);
}

/**
 * countReadsMatches tells whether countContacts reads the matches one by one (several relations,
 * time filters, a name search), its cost growing with them (86 to 156 ms for half a million of
 * 1,000,000 contacts), rather than a trigger-kept number or an email's few contacts.
 */
export function countReadsMatches(filters: ContactFilters): boolean {
  if (!hasFilters(filters) || filters.email !== undefined) return false;
  const sole = soleFilter(filters);
  return sole === null || sole.kind === "full_name";
}

/** countContacts counts the contacts matching the filters. */
export async function countContacts(db: Db, filters: ContactFilters): Promise<number> {
  if (!hasFilters(filters)) return countAllContacts(db);
  const sole = soleFilter(filters);
  if (sole?.kind === "full_name" && db.dialect === "postgres") {
    const match = fullNameContains(sole.needle);
    return (await db.get<{ n: number }>(`SELECT count(*) AS n FROM contacts c WHERE ${match.condition}`, match.params))!.n;
  }
  if (sole?.kind === "full_name") {
    // The search table has exactly one row per contact (kept by triggers), so a name-only count
    // needs no join: 16,667 matches of 100k count in 0.5 ms instead of 6.7 ms.
    const match = fullNameMatch(sole.needle);
    return (await db.get<{ n: number }>(`SELECT count(*) AS n FROM contacts_full_name f WHERE ${match.condition}`, match.params))!.n;
  }
  // Kept by triggers (migration 0013): a tag on half a million contacts is one lookup, not a count of them all.
  if (sole) return relationCount(db, sole.kind, sole.value);
  if (relationsAndTimes(filters)) return countRelationMatches(db, await relationTerms(db, filters), timeFilters(filters));
  // sqlite-only: PostgreSQL weighs the two ranges by its statistics.
  if (db.dialect === "sqlite" && givenFilterCount(filters) === 2 && filters.createdAfter !== undefined && filters.updatedAfter !== undefined) {
    return countCreatedAndUpdatedAfter(db, filters.createdAfter, filters.updatedAfter);
  }
  const { where, params } = filterClause(db, filters, await drivingRelation(db, filters));
  return (await db.get<{ n: number }>(`SELECT count(*) AS n FROM contacts c WHERE ${where.join(" AND ")}`, params))!.n;
}

/** TimeRange is the contacts whose `column` is later than `at` (`later`), or the others: not later. */
interface TimeRange {
  column: TimeFilter["column"];
  at: number;
  later: boolean;
}

const timeCondition = (range: TimeRange, column = `c.${range.column}`) => `${column} ${range.later ? ">" : "<="} ?`;

/** countTimeRangeUpTo counts the contacts of a time range in its index alone, stopping at `limit`. */
async function countTimeRangeUpTo(db: Db, range: TimeRange, limit: number): Promise<number> {
  return (await db.get<{ n: number }>(`SELECT count(*) AS n FROM (SELECT 1 FROM contacts c WHERE ${timeCondition(range)} LIMIT ?) AS kept`, [range.at, limit]))!.n;
}

/** countTimeRangeMeeting counts the contacts of a time range (read through its index) whose row meets another time filter. */
async function countTimeRangeMeeting(db: Db, range: TimeRange, other: TimeRange): Promise<number> {
  const sql = `SELECT count(*) AS n FROM contacts c WHERE ${timeCondition(range)} AND ${timeCondition(other, unindexed(db.dialect, `c.${other.column}`))}`;
  return (await db.get<{ n: number }>(sql, [range.at, other.at]))!.n;
}

/**
 * countCreatedAndUpdatedAfter counts the contacts created after one time and updated after another
 * (SQLite). Each contact of one range is checked for the other, a row read for each: the range
 * read is the smallest of the two and their complements (both columns are NOT NULL), each counted
 * in its index up to the smallest found so far; the smaller of a range and its complement holds
 * at most half the contacts, so a range counted whole needs its complement counted not at all.
 * Read through a complement, the count is the other filter's (known from those counts once either
 * side of it was counted whole) less the contacts of the complement that meet it. Both filters
 * keeping every contact checked 300,000 rows; now none.
 */
async function countCreatedAndUpdatedAfter(db: Db, createdAfter: number, updatedAfter: number): Promise<number> {
  const created: TimeRange = { column: "created_at", at: createdAfter, later: true };
  const updated: TimeRange = { column: "updated_at", at: updatedAfter, later: true };
  const contacts = await countAllContacts(db);
  const wholeCounts = new Map<TimeRange, number>();
  let smallest = { range: updated, other: created };
  let size = Math.floor(contacts / 2) + 1;
  const consider = (range: TimeRange, other: TimeRange, counted: number) => {
    if (counted < size) [smallest, size] = [{ range, other }, counted];
  };
  for (const [range, other] of [[updated, created], [created, updated]] as const) {
    const complement = { ...range, later: false };
    const counted = await countTimeRangeUpTo(db, range, size);
    // A range counted whole holds at most half the contacts: its complement, no smaller, needs no count.
    if (counted < size) {
      wholeCounts.set(range, counted);
      consider(range, other, counted);
    } else {
      const rest = await countTimeRangeUpTo(db, complement, size);
      if (rest < size) wholeCounts.set(range, contacts - rest);
      consider(complement, other, rest);
    }
  }
  const meeting = size === 0 ? 0 : await countTimeRangeMeeting(db, smallest.range, smallest.other);
  if (smallest.range.later) return meeting;
  return (wholeCounts.get(smallest.other) ?? (await countTimeRangeUpTo(db, smallest.other, contacts + 1))) - meeting;
}

/**
 * rangedTime picks which of created_after and updated_after, given together, a page reads as a
 * range of its index, the other checked on each row (SQLite: without statistics it took either,
 * and took contacts_updated for an updated_after keeping every contact beside a created_after
 * keeping 4,567 of 1,000,000: every row read, 2.5 s a page instead of 5 ms). Sorted by one of the
 * two columns, that one's range is walked in order, unless the other keeps fewer contacts than it
 * and fewer than 1 in BROAD_SHARE: then the other's range is read and sorted, as a time filter off
 * the sort is. Otherwise the range keeping fewer contacts. Undefined unless they are the only
 * filters, on SQLite (beside others, those drive).
 */
async function rangedTime(db: Db, filters: ContactFilters, sortBy: ContactSort): Promise<TimeFilter["column"] | undefined> {
  if (db.dialect !== "sqlite" || filters.createdAfter === undefined || filters.updatedAfter === undefined || givenFilterCount(filters) !== 2) return undefined;
  const contacts = await countAllContacts(db);
  const times = timeFilters(filters);
  const sorted = times.find((time) => time.column === sortBy);
  return (await smallerTimeRange(db, times, sorted ? Math.floor(contacts / BROAD_SHARE) : contacts + 1))?.column ?? sorted?.column;
}

/**
 * smallerTimeRange returns the time filter keeping fewer contacts, if it keeps fewer than `cap`.
 * The ranges are counted in their indexes alone up to a bound growing 16-fold from 1,024 to `cap`,
 * so the choice reads at most about 32 times the smaller range's entries (and 2 * `cap`), however
 * large the other.
 */
async function smallerTimeRange(db: Db, times: TimeFilter[], cap: number): Promise<TimeFilter | null> {
  for (let bound = Math.min(1024, cap); ; bound = Math.min(bound * 16, cap)) {
    const sizes: number[] = [];
    for (const time of times) sizes.push(await countTimeRangeUpTo(db, { column: time.column, at: time.after, later: true }, bound));
    const fewest = Math.min(...sizes);
    if (fewest < bound) return times[sizes.indexOf(fewest)]!;
    if (bound >= cap) return null;
  }
}

const NULLABLE_SORTS = new Set<ContactSort>(["first_name", "last_name", "email"]);

/**
 * SORT_COLUMNS maps each sort to the column its indexes hold, on contacts and on the tag and
 * account rows alike: a name sorts by its key (sortKeyOf, migration 0045), so both backends sort
 * names in one order, every letter's case folded.
 */
const SORT_COLUMNS: Record<ContactSort, string> = { created_at: "created_at", updated_at: "updated_at", first_name: "first_name_key", last_name: "last_name_key", email: "email" };

/**
 * keyedPosition is a cursor's position in the order of the sort's column: a name sort's cursor
 * carries the last contact's name (as cursors always did, those of a crm from before the keys
 * included), which is keyed to find its place among the keys.
 */
function keyedPosition(sortBy: ContactSort, cursor: CursorPosition | null): CursorPosition | null {
  if (!cursor || SORT_COLUMNS[sortBy] === sortBy || cursor.value === null) return cursor;
  return { value: sortKeyOf(String(cursor.value)), id: cursor.id };
}

/**
 * collectsMatches tells whether a page fetched on PostgreSQL collects its matches first and sorts
 * them (collectedPageSelect), given the count read just before in the same snapshot. PostgreSQL
 * costs a walk of the sort index as if the matches were spread evenly, but a page's matches often
 * sit together in the sort's order (a surname searched and sorted by surname, the newest contacts
 * oldest change first, a tag pair whose window missed), and its walk filtered every contact before
 * them: `full_name=smith&sort_by=last_name` read 196,000 of 200,000 contacts for 4,003 matches (1 s;
 * collected first, 75 ms). A name search alone is fetched only when its window would read more
 * than NAME_WINDOW_PER_MATCH entries per match, or missed (nameWindow): always collected. Other
 * filters are when they keep under 1 in BROAD_SHARE of the contacts, as SQLite reads a narrow time
 * range and sorts it (timeWindow); broader ones are left to PostgreSQL's plan, whose walk then
 * reads at most about BROAD_SHARE times the rows collecting them would. A lookup by email has few
 * contacts and its own index.
 */
async function collectsMatches(db: Db, filters: ContactFilters, matches: number | null): Promise<boolean> {
  if (db.dialect !== "postgres" || matches === null || filters.email !== undefined) return false;
  return soleFilter(filters)?.kind === "full_name" || matches * BROAD_SHARE < (await countAllContacts(db));
}

/** CollectedPage is what collectedPageSelect builds a page from: the columns read, the filters' conditions on contacts c, the keyset's (or ""), the sort's column and its ORDER BY. */
interface CollectedPage {
  columns: string;
  where: string[];
  keyset: string;
  sortColumn: string;
  orderBy: string;
}

/**
 * collectedPageSelect is a page's SELECT on PostgreSQL with its matches collected first: every
 * contact meeting the filters (its id and sort key), through the filters' own indexes, fenced from
 * the page's order by MATERIALIZED (PostgreSQL would walk the sort index otherwise), then sorted,
 * sliced after the keyset, and only the page's rows read. The parameters are the filters', the
 * keyset's, the limit and the offset. The keyset is applied to the collected matches, not inside:
 * there it could lead PostgreSQL back to a range of the sort index.
 */
function collectedPageSelect(page: CollectedPage): string {
  const matches = `SELECT c.id, c.${page.sortColumn} FROM contacts c${page.where.length ? ` WHERE ${page.where.join(" AND ")}` : ""}`;
  const slice = `WITH matches AS MATERIALIZED (${matches}) SELECT c.id FROM matches c${page.keyset ? ` WHERE ${page.keyset}` : ""} ORDER BY ${page.orderBy} LIMIT CAST(? AS INTEGER) OFFSET ?`;
  return `SELECT ${page.columns} FROM contacts c WHERE c.id IN (${slice}) ORDER BY ${page.orderBy}`;
}

/** ContactPage is what a page of the contact list is read by: its sort, position and size, and the count of matches where listNeedsCount asks for it (else null). */
export interface ContactPage {
  sortBy: ContactSort;
  direction: SortDirection;
  cursor: CursorPosition | null;
  limit: number;
  offset: number;
  matches: number | null;
}

/** listContacts returns one page of contact rows, by offset or after a keyset cursor. */
export function listContacts(db: Db, filters: ContactFilters, page: ContactPage): Promise<ContactRow[]> {
  return listContactColumns<ContactRow>(db, filters, page, COLUMNS);
}

/** ContactVersion names one version of a contact, with its value of the page's sort. */
export type ContactVersion = Pick<ContactRow, "id" | "version"> & Partial<ContactRow>;

/**
 * listContactVersions returns the same page as listContacts, each contact as its id, version and
 * sort value only: a page of 25 reads in 5 us instead of 13 (the rows' other columns are not
 * decoded), for callers that keep what they rendered of each version (contacts/service.ts).
 */
export function listContactVersions(db: Db, filters: ContactFilters, page: ContactPage): Promise<ContactVersion[]> {
  return listContactColumns<ContactVersion>(db, filters, page, `c.id, c.version, c.${page.sortBy}`);
}

async function listContactColumns<Row extends { id: string }>(db: Db, filters: ContactFilters, page: ContactPage, columns: string): Promise<Row[]> {
  // Counted first and none match: reading the page would repeat the count's work for nothing (a
  // name needle too short for trigrams scans every name again, 110 ms on 300,000 contacts).
  if (page.matches === 0) return [];
  const walk = await walkWindow(db, filters, page);
  // A filter on another column than the sort picks the rows through its index and they are sorted
  // (cost: the matching rows); the unary + (which keeps the column's collation) stops SQLite from
  // walking the sort index instead and skipping every row the filter refuses. Otherwise the
  // keyset is one range of the sort index; put first, SQLite seeks on it rather than on the filter.
  // An email filter in the default order reads contacts_email_created (email, created_at, id) in order.
  const sortedByTime = page.sortBy === "created_at" || page.sortBy === "updated_at" ? page.sortBy : null;
  // Beside the other time filter, the sort's own is a range of the sort index only if rangedTime says so.
  const ranged = sortedByTime ? await rangedTime(db, filters, sortedByTime) : undefined;
  const sortFiltered =
    (page.sortBy === "created_at" && ((filters.createdAfter !== undefined && ranged !== "updated_at") || filters.email !== undefined)) ||
    (page.sortBy === "updated_at" && filters.updatedAfter !== undefined && ranged !== "created_at");
  const nullable = NULLABLE_SORTS.has(page.sortBy);
  const keyColumn = SORT_COLUMNS[page.sortBy];
  const position = keyedPosition(page.sortBy, page.cursor);
  // A tag's or an account's rows carry the sort keys under the contacts' own column names
  // (migrations 0014, 0016 and 0045). A window of a time range sorts its rows: SQLite must not walk the sort index instead.
  const walkedColumn = (alias: string) => (walk.byTime ? unindexed(db.dialect, `${alias}.${keyColumn}`) : `${alias}.${keyColumn}`);
  const walked = walk.relation && walk.relation.kind !== "assigned_user"
    ? keysetOrder(walkedColumn("t"), "t.contact_id", page.direction, position, nullable, db.dialect)
    : keysetOrder(walkedColumn("c"), "c.id", page.direction, position, nullable, db.dialect);
  const sortColumn = hasFilters(filters) && !sortFiltered ? unindexed(db.dialect, `c.${keyColumn}`) : `c.${keyColumn}`;
  const fetched = keysetOrder(sortColumn, "c.id", page.direction, position, nullable, db.dialect);
  type Keyset = { after: string; params: (string | number)[] } | null;
  const collected = await collectsMatches(db, filters, page.matches);
  const fetch = async (keyset: Keyset, limit: number) => {
    const { where, params } = filterClause(db, filters, await drivingRelation(db, filters), ranged ?? (await rangedTime(db, filters, page.sortBy)));
    if (collected) {
      const sql = collectedPageSelect({ columns, where, keyset: keyset?.after ?? "", sortColumn: keyColumn, orderBy: fetched.orderBy });
      return db.all<Row>(sql, [...params, ...(keyset?.params ?? []), limit, page.offset]);
    }
    const conditions = [...(keyset?.after ? [keyset.after] : []), ...where];
    // LIMIT CAST(? AS INTEGER), not LIMIT ?: with a bare parameter as the limit this query took
    // ~6 us longer per page (bench/; a constant is as fast as the CAST, but would cache a statement per page size).
    const sql = pageSelect(db.dialect, { columns, from: "contacts c", id: "c.id", where: conditions, orderBy: fetched.orderBy, limit: "CAST(? AS INTEGER)" }, page.offset);
    return db.all<Row>(sql, [...(keyset?.params ?? []), ...params, limit, page.offset]);
  };
  // A walk for relation filters reads a window of the rarest relation's sort index in order (the
  // candidates' ids, from a covering index). Each of them is tested against the other relations,
  // and only then are the matching contacts read. For a name search or time filters alone the
  // window is of the contacts' sort index: each entry is probed for the name, and the time filters
  // are checked on the contacts read.
  const windowRows = walk.rows;
  // A time filter on the sort's column is a range of the walked index (sortedByTime); one on the
  // other column is checked on each row walked, which stops at a full window.
  const windowOf = async (keyset: Keyset) => {
    const relation = walk.relation;
    // SQLite reads a window of contacts as rowids (PostgreSQL has none: ids).
    const byRowid = db.dialect === "sqlite";
    const byContact = byRowid ? { contact: "c.rowid", window: "w.rid" } : { contact: "c.id", window: "w.id" };
    const contactIds = byRowid ? "c.rowid AS rid, c.id" : "c.id";
    if (!relation) {
      // A name search or time filters alone: the window is the sort index's entries; each entry is
      // probed for the name (SQLite: by rowid; PostgreSQL: the window carries the full name, read
      // from each entry's row as its own walk of the sort index would), and the time filters are
      // checked on each row. A name's window carries the sort key, which its index holds, to order its matches by.
      const needle = filters.fullName;
      const named = needle !== undefined && !byRowid ? fullNameContains(needle, "w") : null;
      const sql = `SELECT ${contactIds}${needle !== undefined ? `, c.${keyColumn}` : ""}${named ? ", c.full_name" : ""} FROM contacts c ${keyset?.after ? `WHERE ${keyset.after} ` : ""}ORDER BY ${walked.orderBy}`;
      const params = [...(keyset?.params ?? [])];
      // Rowids are given in order of creation: a window of the created_at order spans few of them,
      // so its needle's matches are collected within that span (nameInWindow); any other order's spans most.
      const span = needle !== undefined && byRowid && page.sortBy === "created_at" && fullNameMatch(needle).indexed ? await windowRowidSpan(db, sql, params, windowRows) : null;
      const probed = needle !== undefined ? (named ?? nameInWindow(needle, "w.rid", span)) : null;
      return {
        sql,
        params,
        match: byContact,
        probes: probed ? { where: [probed.condition], params: probed.params } : { where: [], params: [] },
        checks: timeConditions(db, timeFilters(filters), "c", null),
        inOrder: probed ? keysetOrder(`w.${keyColumn}`, "w.id", page.direction, null, nullable, db.dialect).orderBy : null,
      };
    }
    const after = keyset?.after ? ` AND ${keyset.after}` : "";
    const alias = relation.kind === "assigned_user" ? "c" : "t";
    const timed = timeConditions(db, timeFilters(filters), alias, walk.byTime ?? sortedByTime);
    const within = timed.where.map((condition) => ` AND ${condition}`).join("");
    // A relation's window carries the sort key (its rows hold it, as its indexes do) to slice its matches in order.
    const inOrder = keysetOrder(`w.${keyColumn}`, "w.id", page.direction, null, nullable, db.dialect).orderBy;
    if (relation.kind === "assigned_user") {
      return {
        sql: `SELECT ${contactIds}, c.${keyColumn} FROM contacts c WHERE c.assigned_user_id = ?${within}${after} ORDER BY ${walked.orderBy}`,
        params: [relation.value, ...timed.params, ...(keyset?.params ?? [])],
        match: byContact,
        probes: relationProbes(db, { ...filters, assignedUserId: undefined }, "w"),
        checks: { where: [], params: [] },
        inOrder,
      };
    }
    const { table, key } = RELATION_ROWS[relation.kind];
    const others = relation.kind === "tag" ? { ...filters, tags: filters.tags?.filter((other) => other !== relation.value) } : { ...filters, accountId: undefined };
    const probes = relationProbes(db, { ...others, assignedUserId: undefined }, "w");
    // The relation rows do not hold the assigned user: each entry the other relations keep looks up
    // its contact's, so that the window's matches are known, and sliced, before any contact is read.
    if (filters.assignedUserId !== undefined) {
      probes.where.push(`EXISTS (SELECT 1 FROM contacts a WHERE a.id = w.id AND ${unindexed(db.dialect, "a.assigned_user_id")} = ?)`);
      probes.params.push(filters.assignedUserId);
    }
    return {
      sql: `SELECT t.contact_id AS id, t.${keyColumn} FROM ${table} t WHERE t.${key} = ?${within}${after} ORDER BY ${walked.orderBy}`,
      params: [relation.value, ...timed.params, ...(keyset?.params ?? [])],
      match: { contact: "c.id", window: "w.id" },
      probes,
      checks: { where: [], params: [] },
      inOrder,
    };
  };
  const selectInWindow = async (keyset: Keyset, fallback: Keyset, limit: number) => {
    const window = await windowOf(keyset);
    const probed = window.probes.where.length ? ` WHERE ${window.probes.where.join(" AND ")}` : "";
    // A window of one relation (time filters included) holds nothing but matches, in the page's
    // order: the page is a slice of it, and only the slice's contacts are read. Otherwise every
    // contact of the window was read and sorted to skip the offset (page 1,400 of a tag: 70,000).
    const sliced = probed === "" && window.checks.where.length === 0;
    const skipped = sliced && page.offset > 0;
    const slice = sliced ? [limit, ...(skipped ? [page.offset] : [])] : [windowRows];
    // A window carrying its sort key has its matches put in order and sliced there: only the page's
    // contacts are read (page 40 of a name search: 26 of them, not the window's 2,000 matches), and
    // the window is read in its order only until the slice is full (its entries are in the page's order).
    const ordered = window.inOrder && !sliced ? ` ORDER BY ${window.inOrder} LIMIT CAST(? AS INTEGER) OFFSET ?` : "";
    const conditions = [`${window.match.contact} IN (SELECT ${window.match.window} FROM (${window.sql} LIMIT CAST(? AS INTEGER)${skipped ? " OFFSET ?" : ""}) w${probed}${ordered})`, ...window.checks.where];
    const sql = `SELECT ${columns} FROM contacts c WHERE ${conditions.join(" AND ")} ORDER BY ${fetched.orderBy} LIMIT CAST(? AS INTEGER) OFFSET ?`;
    const rows = await db.all<Row>(sql, [...window.params, ...slice, ...window.probes.params, ...(ordered ? [limit, page.offset] : []), ...window.checks.params, limit, sliced || ordered ? 0 : page.offset]);
    if (rows.length === limit) return rows;
    const read = (await db.get<{ n: number }>(`SELECT count(*) AS n FROM (${window.sql} LIMIT CAST(? AS INTEGER)) AS window_rows`, [...window.params, windowRows]))!.n;
    return read < windowRows ? rows : fetch(fallback, limit);
  };
  // The keyset of each plan: walked keeps the sort column indexable, fetched hides it behind +.
  const group = (walkedKeyset: Keyset, fetchedKeyset: Keyset, limit: number) =>
    windowRows > 0 ? selectInWindow(walkedKeyset, fetchedKeyset, limit) : fetch(fetchedKeyset, limit);
  const rows = await group(walked, fetched, page.limit);
  // walked.then and fetched.then are both set or both null: they depend on the cursor, not the column
  return walked.then && fetched.then && rows.length < page.limit ? rows.concat(await group(walked.then, fetched.then, page.limit - rows.length)) : rows;
}

type StoredNamesRow = Pick<ContactRow, "id" | "first_name" | "last_name"> & { tags: string | null };

/** NfcChange is what a contact stored before names and tags were kept in NFC needs to be: its names, its tags as the properties list them, and its tag rows' forms to replace. */
interface NfcChange {
  id: string;
  /** the NFC names, when either was not */
  names: { first_name: string | null; last_name: string | null } | null;
  /** the properties' tags in NFC, the later of two that become equal left out; null when all were NFC */
  tags: string[] | null;
  /** the tags not in NFC, whose contact_tags rows give way to their NFC form's */
  renamedTags: { from: string; to: string }[];
}

// A \u escape could hide a non-ASCII character in the JSON text of the tags.
const NON_ASCII = /[^\x00-\x7f]|\\u/;
const nfc = (text: string | null) => (text === null ? null : text.normalize("NFC"));

/**
 * nfcChanges lists what the contacts among `rows` whose names or tags are not in NFC need
 * (ASCII text always is): stored before 3fa1225, their own values no longer found them, and a
 * tag added as typed was the same tag twice.
 */
function nfcChanges(rows: StoredNamesRow[]): NfcChange[] {
  const changes: NfcChange[] = [];
  for (const row of rows) {
    const names = { first_name: nfc(row.first_name), last_name: nfc(row.last_name) };
    const namesChanged = names.first_name !== row.first_name || names.last_name !== row.last_name;
    const given = row.tags !== null && NON_ASCII.test(row.tags) ? (JSON.parse(row.tags) as unknown) : null;
    const stored = Array.isArray(given) ? given.filter((tag): tag is string => typeof tag === "string") : [];
    const renamedTags = stored.filter((tag) => tag !== tag.normalize("NFC")).map((tag) => ({ from: tag, to: tag.normalize("NFC") }));
    if (!namesChanged && renamedTags.length === 0) continue;
    changes.push({ id: row.id, names: namesChanged ? names : null, tags: renamedTags.length > 0 ? [...new Set(stored.map((tag) => tag.normalize("NFC")))] : null, renamedTags });
  }
  return changes;
}

const SELECT_STORED_NAMES = (dialect: Dialect) =>
  `SELECT id, first_name, last_name, ${dialect === "postgres" ? "(properties::json -> 'tags')::text" : "json_extract(properties, '$.tags')"} AS tags FROM contacts`;

/** withTags is a contact's stored properties with `tags` replaced, every other property as it was. */
function withTags(properties: string, tags: string[]): string {
  return JSON.stringify({ ...(JSON.parse(properties) as Record<string, unknown>), tags });
}

/**
 * normalizeStoredNamesAndTags rewrites the names and tags a contact was stored with before they
 * were kept in NFC (the backfill of migration 0040): names in place, which the triggers copy to the
 * tag and account rows' sort keys and to the name search; the properties' tags, two that become
 * equal kept once; the tag rows, whose counts their triggers keep. No version, updated_at or event
 * changes: the text is canonically equivalent, the same to every Unicode-aware comparison.
 */
// sqlite-only: migrations run synchronously on the writer connection; FTS5's secure-delete option.
export function normalizeStoredNamesAndTags(db: SqliteConnection): void {
  const changes = nfcChanges(db.query<StoredNamesRow, []>(SELECT_STORED_NAMES("sqlite")).all());
  const updateNames = db.query("UPDATE contacts SET first_name = ?, last_name = ? WHERE id = ?");
  const selectProperties = db.query<{ properties: string }, [string]>("SELECT properties FROM contacts WHERE id = ?");
  const updateProperties = db.query("UPDATE contacts SET properties = ? WHERE id = ?");
  const deleteTag = db.query("DELETE FROM contact_tags WHERE contact_id = ? AND tag = ?");
  // The sort keys copied from the contact as it is now: its names already in NFC.
  const insertTag = db.query(`INSERT INTO contact_tags (contact_id, tag, created_at, updated_at, first_name, last_name, email)
    SELECT id, ?, created_at, updated_at, first_name, last_name, email FROM contacts WHERE id = ? ON CONFLICT (contact_id, tag) DO NOTHING`);
  // A rename in the name index with secure-delete on rewrites its segments each time (7.6 s for
  // 10,000 names against 0.6 s): off for these renames, whose old text is the new one's equivalent,
  // and the merge after them drops that text from the index all the same.
  db.run("INSERT INTO contacts_full_name (contacts_full_name, rank) VALUES ('secure-delete', 0)");
  for (const change of changes) {
    if (change.names) updateNames.run(change.names.first_name, change.names.last_name, change.id);
    if (!change.tags) continue;
    updateProperties.run(withTags(selectProperties.get(change.id)!.properties, change.tags), change.id);
    for (const { from, to } of change.renamedTags) {
      deleteTag.run(change.id, from);
      insertTag.run(to, change.id);
    }
  }
  db.run("INSERT INTO contacts_full_name (contacts_full_name, rank) VALUES ('secure-delete', 1)");
  if (changes.some((change) => change.names)) db.run("INSERT INTO contacts_full_name (contacts_full_name) VALUES ('optimize')");
}

/** BACKFILL_BATCH is how many rows each statement of normalizePostgresNamesAndTags and keyPostgresContactNames writes: one round trip a row made 10,000 changed contacts take 35 s. */
const BACKFILL_BATCH = 500;

/** valuesList is the VALUES list of `rows` rows of `width` parameters each. */
const valuesList = (rows: number, width: number) => Array.from({ length: rows }, () => `(${Array(width).fill("?").join(", ")})`).join(", ");

/** normalizePostgresNamesAndTags is normalizeStoredNamesAndTags on PostgreSQL, inside the migration's transaction, BACKFILL_BATCH rows a statement. */
export async function normalizePostgresNamesAndTags(db: Db): Promise<void> {
  const changes = nfcChanges(await db.all<StoredNamesRow>(SELECT_STORED_NAMES("postgres")));
  for (let at = 0; at < changes.length; at += BACKFILL_BATCH) {
    const batch = changes.slice(at, at + BACKFILL_BATCH);
    const named = batch.filter((change) => change.names);
    if (named.length > 0) {
      await db.run(
        `UPDATE contacts c SET first_name = v.first_name, last_name = v.last_name FROM (VALUES ${valuesList(named.length, 3)}) AS v (id, first_name, last_name) WHERE c.id = v.id`,
        named.flatMap((change) => [change.id, change.names!.first_name, change.names!.last_name]),
      );
    }
    const tagged = batch.filter((change) => change.tags);
    if (tagged.length === 0) continue;
    const ids = tagged.map((change) => change.id);
    const stored = new Map((await db.all<{ id: string; properties: string }>(`SELECT id, properties FROM contacts WHERE id IN (${ids.map(() => "?").join(", ")})`, ids)).map((row) => [row.id, row.properties]));
    await db.run(
      `UPDATE contacts c SET properties = v.properties FROM (VALUES ${valuesList(tagged.length, 2)}) AS v (id, properties) WHERE c.id = v.id`,
      tagged.flatMap((change) => [change.id, withTags(stored.get(change.id)!, change.tags!)]),
    );
    const renamed = tagged.flatMap((change) => change.renamedTags.map(({ from, to }) => ({ id: change.id, from, to })));
    await db.run(`DELETE FROM contact_tags t USING (VALUES ${valuesList(renamed.length, 2)}) AS v (id, tag) WHERE t.contact_id = v.id AND t.tag = v.tag`, renamed.flatMap((r) => [r.id, r.from]));
    // The sort keys copied from the contacts as they are now: their names already in NFC.
    await db.run(
      `INSERT INTO contact_tags (contact_id, tag, created_at, updated_at, first_name, last_name, email)
       SELECT c.id, v.tag, c.created_at, c.updated_at, c.first_name, c.last_name, c.email FROM (VALUES ${valuesList(renamed.length, 2)}) AS v (id, tag) JOIN contacts c ON c.id = v.id
       ON CONFLICT (contact_id, tag) DO NOTHING`,
      renamed.flatMap((r) => [r.id, r.to]),
    );
  }
}

type NamesRow = Pick<ContactRow, "id" | "first_name" | "last_name"> & { first_name_key: string | null; last_name_key: string | null };

/** SELECT_NAMED selects the contacts with a name, whose keys the backfill of migrations 0045 and 0050 writes (a contact without one keeps none). */
const SELECT_NAMED = "SELECT id, first_name, last_name, first_name_key, last_name_key FROM contacts WHERE first_name IS NOT NULL OR last_name IS NOT NULL";

/** rekeyedNames are the rows whose keys nameKey now makes otherwise: 0050 rewrites only those, not every contact with its tag and account rows. */
const rekeyedNames = (rows: NamesRow[]) => rows.filter((row) => sortKeyOf(row.first_name) !== row.first_name_key || sortKeyOf(row.last_name) !== row.last_name_key);

/**
 * keyContactNames gives every contact with a name the keys its names sort by (the backfill of
 * migrations 0045 and 0050), which the triggers copy to its tag and account rows. No version,
 * updated_at or event changes: the contact's own values are as they were.
 */
// sqlite-only: migrations run synchronously on the writer connection.
export function keyContactNames(db: SqliteConnection): void {
  const update = db.query("UPDATE contacts SET first_name_key = ?, last_name_key = ? WHERE id = ?");
  for (const row of rekeyedNames(db.query<NamesRow, []>(SELECT_NAMED).all())) update.run(sortKeyOf(row.first_name), sortKeyOf(row.last_name), row.id);
}

/** keyPostgresContactNames is keyContactNames on PostgreSQL, inside the migration's transaction, BACKFILL_BATCH rows a statement. */
export async function keyPostgresContactNames(db: Db): Promise<void> {
  const rows = rekeyedNames(await db.all<NamesRow>(SELECT_NAMED));
  for (let at = 0; at < rows.length; at += BACKFILL_BATCH) {
    const batch = rows.slice(at, at + BACKFILL_BATCH);
    await db.run(
      `UPDATE contacts c SET first_name_key = v.first_name_key, last_name_key = v.last_name_key FROM (VALUES ${valuesList(batch.length, 3)}) AS v (id, first_name_key, last_name_key) WHERE c.id = v.id`,
      batch.flatMap((row) => [row.id, sortKeyOf(row.first_name), sortKeyOf(row.last_name)]),
    );
  }
}
