import type { Database as SqliteConnection } from "bun:sqlite";
import type { Db, MigrationWarn } from "../db/sql.ts";
import { keysetOrder, pageSelect, unindexed } from "../db/keyset.ts";
import type { CursorPosition, SortDirection } from "../http/list-query.ts";
import type { AccountSort } from "./model.ts";
import { hostName } from "../shared/domains.ts";
import { nameKey } from "../shared/text.ts";

export type AccountRow = {
  id: string;
  name: string;
  /** nameKey(name): what the name filter compares */
  name_key: string;
  domain: string | null;
  properties: string;
  /** 1 on creation, one more with every change (see accounts/service) */
  version: number;
  created_at: number;
  updated_at: number;
}

export interface AccountFilters {
  name?: string;
  domain?: string;
  /** withoutDomain keeps only accounts that have no domain (a batch item's fallback by name). */
  withoutDomain?: boolean;
  createdAfter?: number;
  updatedAfter?: number;
}

/** insertAccount stores a new account row. */
export async function insertAccount(db: Db, row: AccountRow): Promise<void> {
  await db.run("INSERT INTO accounts (id, name, name_key, domain, properties, version, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [
    row.id,
    row.name,
    row.name_key,
    row.domain,
    row.properties,
    row.version,
    row.created_at,
    row.updated_at,
  ]);
}

/** updateAccount overwrites an account row's fields. */
export async function updateAccount(db: Db, row: AccountRow): Promise<void> {
  await db.run("UPDATE accounts SET name = ?, name_key = ?, domain = ?, properties = ?, version = ?, updated_at = ? WHERE id = ?", [
    row.name,
    row.name_key,
    row.domain,
    row.properties,
    row.version,
    row.updated_at,
    row.id,
  ]);
}

/** deleteAccount removes an account row and tells whether it existed (its contact links must be gone first). */
export async function deleteAccount(db: Db, id: string): Promise<boolean> {
  return (await db.run("DELETE FROM accounts WHERE id = ?", [id])) > 0;
}

type NameKeyRow = Pick<AccountRow, "id" | "name" | "name_key">;

/** NAME_KEYS_JOINED is the warning of a rekey that gave accounts with different keys one key. */
const NAME_KEYS_JOINED =
  "migration: these accounts' names are one name under the new case or white space folding, so a batch upsert or crm import of that name without a domain now refuses it as matching several accounts: rename or delete all but one (README, Upgrading)";

/**
 * accountNameRekeys computes every account's name_key anew: the keys that change, and the groups
 * of accounts that share a key now, a changed one among them. Such a group's names matched one
 * account each before (ß and SS apart), in batch upserts and imports without a domain; now they
 * are refused as matching several, and there is no merge: the operator is warned of each.
 */
function accountNameRekeys(rows: NameKeyRow[]): { changes: { id: string; key: string }[]; joined: Pick<AccountRow, "id" | "name">[][] } {
  const byKey = new Map<string, { row: NameKeyRow; changed: boolean }[]>();
  const changes: { id: string; key: string }[] = [];
  for (const row of rows) {
    const key = nameKey(row.name);
    const changed = key !== row.name_key;
    if (changed) changes.push({ id: row.id, key });
    const group = byKey.get(key);
    if (group) group.push({ row, changed });
    else byKey.set(key, [{ row, changed }]);
  }
  const joined = [...byKey.values()].filter((group) => group.length > 1 && group.some((member) => member.changed)).map((group) => group.map(({ row }) => ({ id: row.id, name: row.name })));
  return { changes, joined };
}

/** warnJoinedNames warns of each group of accounts a rekey gave one key (accountNameRekeys). */
function warnJoinedNames(joined: Pick<AccountRow, "id" | "name">[][], warn: MigrationWarn): void {
  for (const accounts of joined) warn(NAME_KEYS_JOINED, { accounts });
}

/** keyAccountNames rekeys every account whose name_key nameKey now makes otherwise, warning of the accounts it gives one key (the backfill of migrations 0007, 0034, 0042 and 0050). */
// sqlite-only: migrations run synchronously on the writer connection.
export function keyAccountNames(db: SqliteConnection, warn: MigrationWarn): void {
  const update = db.query("UPDATE accounts SET name_key = ? WHERE id = ?");
  const { changes, joined } = accountNameRekeys(db.query<NameKeyRow, []>("SELECT id, name, name_key FROM accounts ORDER BY id").all());
  for (const { id, key } of changes) update.run(key, id);
  warnJoinedNames(joined, warn);
}

/** keyPostgresAccountNames is keyAccountNames on PostgreSQL, inside the migration's transaction (the backfill of migrations 0034, 0042 and 0050). */
export async function keyPostgresAccountNames(db: Db, warn: MigrationWarn): Promise<void> {
  const { changes, joined } = accountNameRekeys(await db.all<NameKeyRow>("SELECT id, name, name_key FROM accounts ORDER BY id"));
  for (const { id, key } of changes) await db.run("UPDATE accounts SET name_key = ? WHERE id = ?", [key, id]);
  warnJoinedNames(joined, warn);
}

type DomainRow = Pick<AccountRow, "id" | "name" | "domain">;

/** SELECT_DOMAINS lists the accounts that have a domain. */
const SELECT_DOMAINS = "SELECT id, name, domain FROM accounts WHERE domain IS NOT NULL ORDER BY id";
/** SELECT_BY_DOMAIN lists the accounts of one domain, by id. */
const SELECT_BY_DOMAIN = "SELECT id, name FROM accounts WHERE domain = ? ORDER BY id";

/** DOMAINS_JOINED is the warning of migration 0048 when the domain it gives an account is another's too. */
const DOMAINS_JOINED =
  "migration: these accounts have one domain now that a trailing dot is dropped from it, so a batch upsert or crm import of that domain picks among them by name, and refuses an item whose name none or several of them have: give each its own domain, or keep one and delete the others (README, Upgrading)";

/** NOT_HOST_NAMES is the warning of migration 0048 naming the stored domains that are no host name. */
const NOT_HOST_NAMES =
  "migration: these accounts' domains are no host name, kept as they are: a batch upsert or crm import no longer matches an account by such a domain, and a PATCH sending it is refused; give each its real domain or null (README, Upgrading)";

/** NOT_HOST_NAMES_LISTED is how many accounts the NOT_HOST_NAMES warning names; `count` says how many there are. */
const NOT_HOST_NAMES_LISTED = 100;

/**
 * domainRepairs reads the stored domains as hostName does: the host names spelt with a trailing
 * dot get the domain it stores (no version, updated_at or event changes: with or without the dot
 * it is the same DNS name); the others hostName refuses are left as stored, and named.
 */
function domainRepairs(rows: DomainRow[]): { changes: { id: string; domain: string }[]; notHostNames: DomainRow[] } {
  const changes: { id: string; domain: string }[] = [];
  const notHostNames: DomainRow[] = [];
  for (const row of rows) {
    const domain = hostName(row.domain!);
    if (domain === null) notHostNames.push(row);
    else if (domain !== row.domain) changes.push({ id: row.id, domain });
  }
  return { changes, notHostNames };
}

type DomainAccounts = { domain: string; accounts: Pick<AccountRow, "id" | "name">[] };

/** changedDomains are the domains domainRepairs gives, once each, in order. */
const changedDomains = (repairs: ReturnType<typeof domainRepairs>) => [...new Set(repairs.changes.map((change) => change.domain))];

/** warnOfDomains warns of each changed domain several accounts now have, and of the domains that are no host name. */
function warnOfDomains(changed: DomainAccounts[], notHostNames: DomainRow[], warn: MigrationWarn): void {
  for (const { domain, accounts } of changed) if (accounts.length > 1) warn(DOMAINS_JOINED, { domain, accounts });
  if (notHostNames.length > 0) warn(NOT_HOST_NAMES, { count: notHostNames.length, accounts: notHostNames.slice(0, NOT_HOST_NAMES_LISTED) });
}

/** dropDomainTrailingDots stores without its trailing dot each account domain that is a host name spelt with one, warning of a domain several accounts then share and of the domains that are no host name (the backfill of migration 0048). */
// sqlite-only: migrations run synchronously on the writer connection.
export function dropDomainTrailingDots(db: SqliteConnection, warn: MigrationWarn): void {
  const repairs = domainRepairs(db.query<DomainRow, []>(SELECT_DOMAINS).all());
  const update = db.query("UPDATE accounts SET domain = ? WHERE id = ?");
  for (const { id, domain } of repairs.changes) update.run(domain, id);
  const byDomain = db.query<Pick<AccountRow, "id" | "name">, [string]>(SELECT_BY_DOMAIN);
  warnOfDomains(changedDomains(repairs).map((domain) => ({ domain, accounts: byDomain.all(domain) })), repairs.notHostNames, warn);
}

/** dropPostgresDomainTrailingDots is dropDomainTrailingDots on PostgreSQL, inside the migration's transaction. */
export async function dropPostgresDomainTrailingDots(db: Db, warn: MigrationWarn): Promise<void> {
  const repairs = domainRepairs(await db.all<DomainRow>(SELECT_DOMAINS));
  for (const { id, domain } of repairs.changes) await db.run("UPDATE accounts SET domain = ? WHERE id = ?", [domain, id]);
  const changed: DomainAccounts[] = [];
  for (const domain of changedDomains(repairs)) changed.push({ domain, accounts: await db.all<Pick<AccountRow, "id" | "name">>(SELECT_BY_DOMAIN, [domain]) });
  warnOfDomains(changed, repairs.notHostNames, warn);
}

/**
 * addMissingAccountVersion adds accounts.version to a database whose migration 0010 ran as first
 * released, without it (the backfill of migration 0018); 1, as 0010 gives the accounts it finds.
 */
// sqlite-only: migrations run synchronously on the writer connection.
export function addMissingAccountVersion(db: SqliteConnection): void {
  const columns = db.query<{ name: string }, []>("SELECT name FROM pragma_table_info('accounts')").all();
  if (!columns.some((column) => column.name === "version")) db.run("ALTER TABLE accounts ADD COLUMN version INTEGER NOT NULL DEFAULT 1");
}

/** findAccountById returns one account row or null. */
export function findAccountById(db: Db, id: string): Promise<AccountRow | null> {
  return db.get<AccountRow>("SELECT * FROM accounts WHERE id = ?", [id]);
}

/** findAccountsByIds returns the accounts with the given ids, keyed by id. */
export async function findAccountsByIds(db: Db, ids: string[]): Promise<Map<string, AccountRow>> {
  if (ids.length === 0) return new Map();
  const rows = await db.all<AccountRow>(`SELECT * FROM accounts WHERE id IN (${ids.map(() => "?").join(", ")})`, ids);
  return new Map(rows.map((row) => [row.id, row]));
}

function filterClause(filters: AccountFilters): { where: string[]; params: (string | number)[] } {
  const where: string[] = [];
  const params: (string | number)[] = [];
  if (filters.name !== undefined) {
    where.push("name_key = ?");
    params.push(nameKey(filters.name));
  }
  if (filters.domain !== undefined) {
    where.push("domain = ?");
    params.push(filters.domain);
  }
  if (filters.withoutDomain) where.push("domain IS NULL");
  if (filters.createdAfter !== undefined) {
    where.push("created_at > ?");
    params.push(filters.createdAfter);
  }
  if (filters.updatedAfter !== undefined) {
    where.push("updated_at > ?");
    params.push(filters.updatedAfter);
  }
  return { where, params };
}

/** countAccounts counts the accounts matching the filters. */
export async function countAccounts(db: Db, filters: AccountFilters): Promise<number> {
  const { where, params } = filterClause(filters);
  return (await db.get<{ n: number }>(`SELECT count(*) AS n FROM accounts ${where.length ? `WHERE ${where.join(" AND ")}` : ""}`, params))!.n;
}

/** ACCOUNT_SORT_COLUMNS maps each sort to its indexed column: a name sorts by its case-folded key. */
export const ACCOUNT_SORT_COLUMNS: Record<AccountSort, "created_at" | "updated_at" | "name_key" | "domain"> = { created_at: "created_at", updated_at: "updated_at", name: "name_key", domain: "domain" };

/** listAccounts returns one page of accounts in the given sort, by offset or after a keyset cursor. */
export async function listAccounts(
  db: Db,
  filters: AccountFilters,
  page: { sortBy: AccountSort; direction: SortDirection; cursor: CursorPosition | null; limit: number; offset: number },
): Promise<AccountRow[]> {
  const { where, params } = filterClause(filters);
  const sortColumn = ACCOUNT_SORT_COLUMNS[page.sortBy];
  // As for contacts: a filter on another column than the sort picks its rows through its own index
  // (the unary + keeps SQLite from walking the sort index and skipping what the filter refuses).
  const sortFiltered = (sortColumn === "created_at" && filters.createdAfter !== undefined) || (sortColumn === "updated_at" && filters.updatedAfter !== undefined);
  const column = where.length > 0 && !sortFiltered ? unindexed(db.dialect, sortColumn) : sortColumn;
  const order = keysetOrder(column, "id", page.direction, page.cursor, sortColumn === "domain", db.dialect);
  const select = (keyset: { after: string; params: (string | number)[] } | null, limit: number) => {
    const conditions = [...(keyset?.after ? [keyset.after] : []), ...where];
    return db.all<AccountRow>(pageSelect(db.dialect, { columns: "*", from: "accounts", id: "id", where: conditions, orderBy: order.orderBy, limit: "?" }, page.offset), [
      ...(keyset?.params ?? []),
      ...params,
      limit,
      page.offset,
    ]);
  };
  const rows = await select(order, page.limit);
  return order.then && rows.length < page.limit ? rows.concat(await select(order.then, page.limit - rows.length)) : rows;
}
