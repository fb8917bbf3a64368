import type { ChangeOrigin } from "../shared/made-by.ts";
import { applyPatch } from "../shared/patch.ts";
import { writeInSteps, type Database, type Db } from "../db/sql.ts";
import type { BatchResult } from "../batch/model.ts";
import type { BatchKind } from "../batch/service.ts";
import { notFound, validationProblem, type FieldError } from "../shared/problem.ts";
import { schemaChecker } from "../http/schema-errors.ts";
import { extraPropertiesErrors } from "../limits/service.ts";
import { refuseUnmetCondition, type VersionCondition } from "../shared/version-condition.ts";
import { listMeta, pageRows, pageWindow, parseListQuery, parseTimestampFilter, readListPage, type ListMeta } from "../http/list-query.ts";
import type { SecretBox } from "../webhooks/secrets.ts";
import { canonicalJson, saveIdempotentResponse, type IdempotencyScope } from "../idempotency/service.ts";
import { withdrawIdempotencyRecordsOf } from "../idempotency/store.ts";
import type { Runtime } from "../runtime.ts";
import { newId } from "../shared/ids.ts";
import { asciiDomain, hostName } from "../shared/domains.ts";
import { nameKey } from "../shared/text.ts";
import { notBefore, toTimestamp } from "../shared/time.ts";
import { detachAccountFromContacts } from "../contacts/service.ts";
import { insertTombstone } from "../tombstones/store.ts";
import { recordEvent } from "../webhooks/outbox.ts";
import { ACCOUNT_FILTERS, ACCOUNT_SORTS, AccountInput, READ_ONLY_ACCOUNT_FIELDS, type Account, type AccountPatch } from "./model.ts";
import {
  ACCOUNT_SORT_COLUMNS,
  countAccounts,
  deleteAccount as deleteAccountRow,
  findAccountById,
  findAccountsByIds,
  insertAccount,
  listAccounts,
  updateAccount as updateAccountRow,
  type AccountFilters,
  type AccountRow,
} from "./store.ts";

/** toAccount renders an account row for the API, with its further properties. */
function toAccount(row: AccountRow): Account {
  return {
    id: row.id,
    name: row.name,
    domain: row.domain,
    ...(JSON.parse(row.properties) as Record<string, unknown>),
    version: row.version,
    created_at: toTimestamp(row.created_at),
    updated_at: toTimestamp(row.updated_at),
  };
}

const KNOWN = new Set(["id", "name", "domain", "version", "created_at", "updated_at"]);

const accountSchemaErrors = schemaChecker(AccountInput);

/** accountInputErrors names the read-only fields an account body carries, and its further properties past their limits. */
function accountInputErrors(input: Record<string, unknown>): FieldError[] {
  const readOnly = READ_ONLY_ACCOUNT_FIELDS.filter((field) => field in input).map((field) => ({ pointer: `/${field}`, detail: "is read-only" }));
  return [...readOnly, ...extraPropertiesErrors(input, KNOWN)];
}

/** refuseInvalidAccountInput throws 422 naming what accountInputErrors finds, if anything. */
function refuseInvalidAccountInput(input: Record<string, unknown>): void {
  const errors = accountInputErrors(input);
  if (errors.length > 0) throw validationProblem(errors);
}

/** accountItemErrors lists what is wrong with one account on its own (schema, then read-only fields and size), as POST would report it. */
export function accountItemErrors(item: unknown): FieldError[] {
  const schemaErrors = accountSchemaErrors(item);
  return schemaErrors.length > 0 ? schemaErrors : accountInputErrors(item as Record<string, unknown>);
}

const blankAccount = (now: number): AccountRow => ({ id: newId("acc", now), name: "", name_key: "", domain: null, properties: "{}", version: 1, created_at: now, updated_at: now });

/** accountRowFrom merges an input into a row (given fields replace, null clears a further property); the domain is stored as hostName gives it: lowercased, in ASCII form, without a trailing dot. */
function accountRowFrom(row: AccountRow, input: AccountInput, now: number): AccountRow {
  const properties = JSON.parse(row.properties) as Record<string, unknown>;
  applyPatch(properties, input, KNOWN);
  const domain = "domain" in input ? (input.domain ? hostName(input.domain) : null) : row.domain;
  return { ...row, name: input.name, name_key: nameKey(input.name), domain, properties: JSON.stringify(properties), updated_at: now };
}

/** MAX_MATCHES_NAMED is how many accounts sharing a key an ambiguity error names. */
const MAX_MATCHES_NAMED = 10;

/** accountsWith lists the first MAX_MATCHES_NAMED accounts matching the filters, oldest first. */
function accountsWith(db: Db, filters: AccountFilters): Promise<AccountRow[]> {
  return listAccounts(db, filters, { sortBy: "created_at", direction: "asc", cursor: null, limit: MAX_MATCHES_NAMED, offset: 0 });
}

const idsOf = (rows: AccountRow[]) => rows.map((row) => row.id).join(", ");

/**
 * matchAccount finds the account a batch item upserts: by domain when it has one, the name
 * choosing among several with that domain; else by name. When no account has the domain, the one
 * account of that name without a domain is updated and given it, and none makes a new account
 * (those of that name with other domains are other companies); several without one are refused
 * naming them, never guessed, and so is a domain whose accounts the name does not tell apart.
 */
async function matchAccount(db: Db, input: AccountInput): Promise<{ row: AccountRow | null } | { errors: FieldError[] }> {
  const domain = input.domain ? hostName(input.domain) : null;
  if (!domain) {
    const rows = await accountsWith(db, { name: input.name });
    if (rows.length <= 1) return { row: rows[0] ?? null };
    return { errors: [{ pointer: "/name", detail: `matches several accounts (${idsOf(rows)}); send the domain of the one to update (give it one with PATCH /public/v1/accounts/ID if it has none), or delete the copies` }] };
  }
  const rows = await accountsWith(db, { domain });
  if (rows.length === 1) return { row: rows[0]! };
  if (rows.length > 1) {
    const named = await accountsWith(db, { domain, name: input.name });
    if (named.length === 1) return { row: named[0]! };
    const which = named.length === 0 ? "none of them has" : "several of them have";
    return { errors: [{ pointer: "/domain", detail: `matches several accounts (${idsOf(rows)}), and ${which} this name; send the name of the one to update, or give them domains of their own (PATCH /public/v1/accounts/ID)` }] };
  }
  // A domain no account has: the one account of this name still without a domain is the company
  // known by name until now; accounts of this name with other domains are other companies.
  const domainless = await accountsWith(db, { name: input.name, withoutDomain: true });
  if (domainless.length <= 1) return { row: domainless[0] ?? null };
  return { errors: [{ pointer: "/domain", detail: `no account has this domain, and several of this name have none (${idsOf(domainless)}): give it to the one it belongs to (PATCH /public/v1/accounts/ID), or create this account with POST /public/v1/accounts first` }] };
}

/** writeNewAccount inserts an account and its account.created event (made by the request `origin`); call it inside a write. */
async function writeNewAccount(db: Db, input: AccountInput, origin: ChangeOrigin, now: number): Promise<Account> {
  const row = accountRowFrom(blankAccount(now), input, now);
  await insertAccount(db, row);
  const account = toAccount(row);
  await recordEvent(db, "account.created", account, origin, now);
  return account;
}

/**
 * writeAccountChange applies an input to a stored account inside the caller's write: a change is
 * written with updated_at = now and its account.updated event (made by the request `origin`);
 * an input that changes nothing writes nothing. Refuses merged further properties over their limit.
 */
async function writeAccountChange(db: Db, current: AccountRow, input: AccountInput, origin: ChangeOrigin, now: number): Promise<{ errors: FieldError[] } | { account: Account; changed: boolean }> {
  // Writes are serialised, so counting up from the stored version gives each change its own number, in commit order.
  const row = { ...accountRowFrom(current, input, now), version: current.version + 1, updated_at: notBefore(current.updated_at, now) };
  const merged = extraPropertiesErrors(JSON.parse(row.properties) as Record<string, unknown>, KNOWN);
  if (merged.length > 0) return { errors: merged };
  const before = toAccount(current);
  const after = toAccount(row);
  // Canonical form: the same properties sent in another key order are no change.
  if (canonicalJson({ ...after, version: null, updated_at: null }) === canonicalJson({ ...before, version: null, updated_at: null })) return { account: before, changed: false };
  await updateAccountRow(db, row);
  // Its event happened at its updated_at: a stamp a clock ahead left on the account is kept (notBefore).
  await recordEvent(db, "account.updated", after, origin, row.updated_at);
  return { account: after, changed: true };
}

/** upsertAccount writes one valid batch item: created, updated or unchanged; invalid when its key is ambiguous or the merged properties too large. */
async function upsertAccount(db: Db, input: AccountInput, now: number, origin: ChangeOrigin): Promise<BatchResult> {
  const match = await matchAccount(db, input);
  if ("errors" in match) return { status: "invalid", errors: match.errors };
  if (!match.row) return { status: "created", id: (await writeNewAccount(db, input, origin, now)).id };
  const change = await writeAccountChange(db, match.row, input, origin, now);
  if ("errors" in change) return { status: "invalid", errors: change.errors };
  return { status: change.changed ? "updated" : "unchanged", id: match.row.id };
}

/** ACCOUNT_BATCH upserts accounts in POST /accounts/batch: keyed by domain (the name choosing among several), else (or when no account has it) name. */
export const ACCOUNT_BATCH: BatchKind<AccountInput> = { itemErrors: accountItemErrors, upsert: upsertAccount };

/** createAccount stores an account, its account.created event (made by the request `origin`) and its idempotent response in one group-committed write. */
export async function createAccount(rt: Runtime, input: AccountInput, idempotency: IdempotencyScope | null, origin: ChangeOrigin): Promise<{ status: number; body: { data: Account } }> {
  refuseInvalidAccountInput(input);
  return rt.db.write(async (tx) => {
    const now = await rt.db.changeClock.stamp(tx);
    const body = { data: await writeNewAccount(tx, input, origin, now) };
    await saveIdempotentResponse(tx, idempotency, 201, body, now);
    return { status: 201, body };
  });
}

/** findAccount returns one account, or null. */
export async function findAccount(db: Db, id: string): Promise<Account | null> {
  const row = await findAccountById(db, id);
  return row ? toAccount(row) : null;
}

/** getAccount returns one account or throws 404. */
export async function getAccount(db: Db, id: string): Promise<Account> {
  const account = await findAccount(db, id);
  if (!account) throw notFound("account", id);
  return account;
}

/**
 * domainFilter reads the `domain` parameter in its stored form (hostName), refusing a name in Unicode
 * that IDNA cannot convert (it could find nothing). A value that is no host name is compared in its
 * ASCII form as given: domains stored before hostName was enforced ("..") are still found by it.
 */
function domainFilter(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const domain = hostName(value) ?? asciiDomain(value);
  if (domain === null) throw validationProblem([{ parameter: "domain", detail: "must be a domain name like example.com" }]);
  return domain;
}

/** listAccountsPage returns one page of accounts, sorted and filtered as the query asks. */
export async function listAccountsPage(db: Database, secrets: SecretBox, query: Record<string, unknown>): Promise<{ data: Account[]; meta: ListMeta }> {
  const list = parseListQuery(query, { list: "accounts", sorts: ACCOUNT_SORTS, defaultSort: "created_at", defaultDirection: "asc", filters: ACCOUNT_FILTERS }, secrets);
  const filters = {
    name: query.name as string | undefined,
    domain: domainFilter(query.domain as string | undefined),
    createdAfter: parseTimestampFilter("created_after", query.created_after),
    updatedAfter: parseTimestampFilter("updated_after", query.updated_after),
  };
  const { read, total } = await readListPage(
    db,
    list,
    (source) => listAccounts(source, filters, { sortBy: list.sortBy, direction: list.direction, ...pageWindow(list) }),
    (source) => countAccounts(source, filters),
  );
  const column = ACCOUNT_SORT_COLUMNS[list.sortBy];
  return { data: pageRows(list, read).map(toAccount), meta: listMeta(list, total, read, (row: AccountRow) => row[column]) };
}

/**
 * updateAccount applies a PATCH in one group-committed write: fields present replace, null clears
 * domain or a further property; a change writes account.updated, none writes nothing. A missing
 * account is 404; a stored version that does not meet `condition` is 412, checked before the body
 * (RFC 9110 section 13.2.2), and nothing changes.
 */
export async function updateAccount(rt: Runtime, id: string, input: AccountPatch, condition: VersionCondition | null, origin: ChangeOrigin): Promise<Account> {
  return rt.db.write(async (tx) => {
    const current = await findAccountById(tx, id);
    if (!current) throw notFound("account", id);
    refuseUnmetCondition(condition, "account", id, current.version);
    refuseInvalidAccountInput(input);
    const change = await writeAccountChange(tx, current, { ...input, name: input.name ?? current.name }, origin, await rt.db.changeClock.stamp(tx));
    if ("errors" in change) throw validationProblem(change.errors);
    return change.account;
  });
}

/**
 * deleteAccount removes an account in short writes (writeInSteps): each unlinks at most
 * rt.unlinkChunk of its contacts, which stay (each sends contact.updated), and the write that
 * leaves none linked also withdraws the kept answers showing the account, and writes its tombstone
 * and account.deleted. The first write decides: it checks `condition` against the stored version
 * (412, nothing changed); the writes after it do not, so a change of the account between them does
 * not stop the delete, which wins as if sent just after it. Each write checks that the account is
 * there (404): one deleted meanwhile leaves the contacts unlinked so far unlinked, as a crash
 * between the writes does, and a DELETE sent again finishes the job. A write after the first
 * refused for any reason ends it with PartlyDone, which says how many the writes before it unlinked.
 */
export async function deleteAccount(rt: Runtime, id: string, condition: VersionCondition | null, origin: ChangeOrigin): Promise<void> {
  await writeInSteps(rt.db, async (tx, first) => {
    const now = await rt.db.changeClock.stamp(tx);
    const current = await findAccountById(tx, id);
    if (!current) throw notFound("account", id);
    if (first) refuseUnmetCondition(condition, "account", id, current.version);
    if ((await detachAccountFromContacts(tx, id, now, rt.unlinkChunk, origin)) === rt.unlinkChunk) return null;
    await deleteAccountRow(tx, id);
    await withdrawIdempotencyRecordsOf(tx, { resource: "account", id });
    await insertTombstone(tx, "account", id, now, current.version + 1, null);
    await recordEvent(tx, "account.deleted", { id, version: current.version + 1, deleted_at: toTimestamp(now) }, origin, now);
    return id;
  }, (committed) => `${committed * rt.unlinkChunk} of the account's contacts lost the link to it (each sends contact.updated)`);
}

/** accountsByIds returns the API form of the accounts with the given ids, keyed by id. */
export async function accountsByIds(db: Db, ids: string[]): Promise<Map<string, Account>> {
  return new Map([...(await findAccountsByIds(db, ids))].map(([id, row]) => [id, toAccount(row)]));
}
