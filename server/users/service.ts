import type { ChangeOrigin } from "../shared/made-by.ts";
import { writeInSteps, type Database, type Db } from "../db/sql.ts";
import { notFound, ProblemError } from "../shared/problem.ts";
import { saveIdempotentResponse, type IdempotencyScope } from "../idempotency/service.ts";
import { withdrawIdempotencyRecordsOf } from "../idempotency/store.ts";
import { detachUserFromContacts } from "../contacts/service.ts";
import { fieldsChecker } from "../http/schema-errors.ts";
import type { Runtime } from "../runtime.ts";
import { listMeta, pageRows, pageWindow, parseListQuery, parseTimestampFilter, readListPage, type ListMeta } from "../http/list-query.ts";
import type { SecretBox } from "../webhooks/secrets.ts";
import { newId } from "../shared/ids.ts";
import { asciiEmail } from "../shared/domains.ts";
import { notBefore, toTimestamp } from "../shared/time.ts";
import { insertTombstone } from "../tombstones/store.ts";
import { USER_FILTERS, USER_SORTS, UserInput, type User, type UserPatch } from "./model.ts";
import { countUsers, deleteUser as deleteUserRow, findUserByEmail, findUserById, findUsersByIds, insertUser, listUsers, updateUser as updateUserRow, type UserRow } from "./store.ts";

/** toUser renders a user row for the API. */
function toUser(row: UserRow): User {
  return { id: row.id, name: row.name, email: row.email, created_at: toTimestamp(row.created_at), updated_at: toTimestamp(row.updated_at) };
}

const checkUserInput = fieldsChecker(UserInput);

async function refuseTakenEmail(db: Db, email: string, ownId: string | null): Promise<void> {
  const holder = await findUserByEmail(db, email);
  if (holder && holder.id !== ownId) throw new ProblemError(409, "user-exists", `A user with email ${email} already exists.`);
}

/**
 * createUser adds a person contacts can be assigned to, its name as given and its email lowercased
 * (unique), or throws 422 naming each field UserInput refuses. Call it inside a write, with the
 * write's stamp (changeClock.stamp) as `now`. The API's route checks the same schema first; the
 * command line's user create has only this check.
 */
export async function createUser(db: Db, input: { name: string; email: string }, now = Date.now()): Promise<User> {
  const { name } = checkUserInput(input);
  const email = asciiEmail(input.email);
  await refuseTakenEmail(db, email, null);
  const row: UserRow = { id: newId("usr", now), name, email, created_at: now, updated_at: now };
  await insertUser(db, row);
  return toUser(row);
}

/** createUserOnce stores a user and its idempotent response in one group-committed write. */
export async function createUserOnce(rt: Runtime, input: { name: string; email: string }, idempotency: IdempotencyScope | null): Promise<{ status: number; body: { data: User } }> {
  return rt.db.write(async (tx) => {
    const now = await rt.db.changeClock.stamp(tx);
    const body = { data: await createUser(tx, input, now) };
    await saveIdempotentResponse(tx, idempotency, 201, body, now);
    return { status: 201, body };
  });
}

/** updateUser changes a user's name or email (still unique); a request that changes nothing keeps updated_at. */
export async function updateUser(rt: Runtime, id: string, input: UserPatch): Promise<User> {
  return rt.db.write(async (tx) => {
    const current = await findUserById(tx, id);
    if (!current) throw notFound("user", id);
    // The route's UserPatch schema has checked the fields given.
    const name = input.name ?? current.name;
    const email = asciiEmail(input.email ?? current.email);
    if (name === current.name && email === current.email) return toUser(current);
    await refuseTakenEmail(tx, email, id);
    const row: UserRow = { ...current, name, email, updated_at: notBefore(current.updated_at, await rt.db.changeClock.stamp(tx)) };
    await updateUserRow(tx, row);
    return toUser(row);
  });
}

/** DeletedUser is what a user's delete answers: the user, and how many contacts lost it. */
export interface DeletedUser {
  user: User;
  unassigned: number;
}

/**
 * deleteUser deletes a user in short writes (writeInSteps): each takes the user off at most
 * `chunk` of its contacts, which stay (each sends contact.updated), and the write that leaves none
 * assigned also deletes the user and withdraws the kept answers showing it; `finish` runs in that
 * write with the answer (the console records its form's answer there), with the user's tombstone
 * (without a version: users carry none), which tells pollers. Users send no events of their own:
 * there is no user.deleted. Each write throws 404 for a user
 * that is not there (deleted meanwhile): the contacts changed so far stay changed, as after a
 * crash between the writes, which a delete sent again finishes; a write after the first refused
 * for any reason ends it with PartlyDone, which says how many the writes before it changed. Takes the Database, not the
 * Runtime: the command line deletes too, its events made by the command (commandOrigin).
 */
export function deleteUser(db: Database, id: string, chunk: number, origin: ChangeOrigin, finish: (tx: Db, deleted: DeletedUser, now: number) => Promise<void> = async () => {}): Promise<DeletedUser> {
  let unassigned = 0;
  return writeInSteps(db, async (tx) => {
    const now = await db.changeClock.stamp(tx);
    const current = await findUserById(tx, id);
    if (!current) throw notFound("user", id);
    const changed = await detachUserFromContacts(tx, id, now, chunk, origin);
    // Counted as the step runs: a step that fails ends the delete, so no count outlives its rollback.
    unassigned += changed;
    if (changed === chunk) return null;
    await deleteUserRow(tx, id);
    await withdrawIdempotencyRecordsOf(tx, { resource: "user", id });
    await insertTombstone(tx, "user", id, now, null, null);
    const deleted = { user: toUser(current), unassigned };
    await finish(tx, deleted, now);
    return deleted;
  }, (committed) => `${committed * chunk} of the user's contacts lost the assignment (each sends contact.updated)`);
}

/** getUser returns one user or throws 404. */
export async function getUser(db: Db, id: string): Promise<User> {
  const row = await findUserById(db, id);
  if (!row) throw notFound("user", id);
  return toUser(row);
}

/** allUsers returns every user, oldest first (for the command line). */
export async function allUsers(db: Db): Promise<User[]> {
  return (await listUsers(db, {}, { sortBy: "created_at", direction: "asc", cursor: null, limit: null, offset: 0 })).map(toUser);
}

/** listUsersPage returns one page of users for the list endpoint, sorted and filtered as the query asks. */
export async function listUsersPage(db: Database, secrets: SecretBox, query: Record<string, unknown>): Promise<{ data: User[]; meta: ListMeta }> {
  const list = parseListQuery(query, { list: "users", sorts: USER_SORTS, defaultSort: "created_at", defaultDirection: "asc", filters: USER_FILTERS }, secrets);
  const filters = { updatedAfter: parseTimestampFilter("updated_after", query.updated_after) };
  const { read, total } = await readListPage(
    db,
    list,
    (source) => listUsers(source, filters, { sortBy: list.sortBy, direction: list.direction, ...pageWindow(list) }),
    (source) => countUsers(source, filters),
  );
  return { data: pageRows(list, read).map(toUser), meta: listMeta(list, total, read, (row: UserRow) => row[list.sortBy]) };
}

/** missingUserIds returns the given ids that name no user. */
export async function missingUserIds(db: Db, ids: string[]): Promise<string[]> {
  const found = await findUsersByIds(db, ids);
  return ids.filter((id) => !found.has(id));
}

/** usersByIds returns the API form of the users with the given ids, keyed by id. */
export async function usersByIds(db: Db, ids: string[]): Promise<Map<string, User>> {
  return new Map([...(await findUsersByIds(db, ids))].map(([id, row]) => [id, toUser(row)]));
}
