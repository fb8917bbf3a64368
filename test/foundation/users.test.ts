import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createAccount } from "../../server/accounts/service.ts";
import { deleteUser, updateUser } from "../../server/users/service.ts";
import { gone } from "../support/deleted-before-upgrade.ts";
import { createHarness, UNKNOWN_ORIGIN, type Harness } from "../support/harness.ts";
import { ISO, contactsNow, eventData, expectProblem, onNextCommit, updatedContacts, validation } from "./support.ts";

/** CHUNK is how many contacts each write of a user's delete takes the user off here (UNLINK_CHUNK in production): 35 contacts take four. */
const CHUNK = 10;

let h: Harness;
beforeEach(async () => {
  h = await createHarness({}, { unlinkChunk: CHUNK });
});
afterEach(async () => await h.close());

const MISSING = "usr_00000000000000000000000000";
const userCount = async () => (await h.rt.db.get<{ n: number }>("SELECT count(*) AS n FROM users"))!.n;

describe("users: happy paths", () => {
  test("POST creates a user (201, Location, email lowercased); GET by id and the list return it", async () => {
    const res = await h.json("POST", "/public/v1/users", { body: { name: "Grace Hopper", email: "Grace@Navy.mil" } });
    expect(res.status).toBe(201);
    const { id, created_at } = res.body.data;
    expect(id).toMatch(/^usr_[0-9A-Z]{26}$/);
    expect(created_at).toMatch(ISO);
    expect(res.headers.get("location")).toBe(`/public/v1/users/${id}`);
    expect(res.body).toEqual({ data: { id, name: "Grace Hopper", email: "grace@navy.mil", created_at, updated_at: created_at } });
    expect((await h.json("GET", res.headers.get("location")!)).body).toEqual(res.body);
    expect((await h.json("GET", "/public/v1/users")).body).toEqual({ data: [res.body.data], meta: { current_page: 1, last_page: 1, per_page: 25, total: 1, next_cursor: null } });
  });

  test("PATCH changes the name or email; the same values again keep updated_at", async () => {
    const user = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@navy.mil" } })).body.data;
    await Bun.sleep(2);
    const renamed = await h.json("PATCH", `/public/v1/users/${user.id}`, { body: { name: "Grace Hopper", email: "GH@navy.mil" } });
    expect(renamed.status).toBe(200);
    const expected = { ...user, name: "Grace Hopper", email: "gh@navy.mil", updated_at: renamed.body.data.updated_at };
    expect(renamed.body).toEqual({ data: expected });
    expect(expected.updated_at > user.updated_at).toBe(true);
    expect((await h.json("PATCH", `/public/v1/users/${user.id}`, { body: { email: "gh@navy.mil" } })).body).toEqual({ data: expected });
    expect((await h.json("GET", `/public/v1/users/${user.id}`)).body).toEqual({ data: expected });
  });

  test("a name is stored as given: the spaces around it kept (spaces alone are no name: users: errors)", async () => {
    const user = await h.json("POST", "/public/v1/users", { body: { name: "  Grace  ", email: "grace@navy.mil" } });
    const { id, created_at } = user.body.data;
    expect([user.status, user.body]).toEqual([201, { data: { id, name: "  Grace  ", email: "grace@navy.mil", created_at, updated_at: created_at } }]);
    const renamed = await h.json("PATCH", `/public/v1/users/${id}`, { body: { name: " Grace B. " } });
    expect([renamed.status, renamed.body]).toEqual([200, { data: { id, name: " Grace B. ", email: "grace@navy.mil", created_at, updated_at: renamed.body.data.updated_at } }]);
    expect((await h.json("GET", `/public/v1/users/${id}`)).body).toEqual(renamed.body);
  });

  test("an Idempotency-Key replays the creation with its Location", async () => {
    const first = await h.json("POST", "/public/v1/users", { body: { name: "Ada", email: "ada@example.com" }, headers: { "idempotency-key": "user-1" } });
    const again = await h.json("POST", "/public/v1/users", { body: { name: "Ada", email: "ada@example.com" }, headers: { "idempotency-key": "user-1" } });
    expect([again.status, again.headers.get("idempotent-replayed"), again.headers.get("location"), again.body]).toEqual([201, "true", first.headers.get("location"), first.body]);
    expect(await userCount()).toBe(1);
  });
});

describe("users: deletion", () => {
  test("DELETE answers 204; the contacts assigned to the user (assigned_user_id, assigned_user_ids) stay, each losing it with a new version and updated_at and sending contact.updated; the others are untouched", async () => {
    const grace = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@navy.mil" } })).body.data;
    const alan = (await h.json("POST", "/public/v1/users", { body: { name: "Alan", email: "alan@example.com" } })).body.data;
    const owned = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", assigned_user_id: grace.id } })).body.data;
    const shared = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Bob", assigned_user_id: alan.id, assigned_user_ids: [alan.id, grace.id] } })).body.data;
    const both = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Cy", assigned_user_id: grace.id, assigned_user_ids: [grace.id, alan.id] } })).body.data;
    const other = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Dee", assigned_user_id: alan.id, assigned_user_ids: [alan.id] } })).body.data;
    await Bun.sleep(2);
    const res = await h.request("DELETE", `/public/v1/users/${grace.id}`, { headers: { "idempotency-key": "ignored-by-deletes" } });
    expect([res.status, await res.text()]).toEqual([204, ""]);
    const notFound = { type: "urn:crm:problem:not-found", title: "Not Found", status: 404, detail: `No user with id "${grace.id}" exists.` };
    expect((await h.json("GET", `/public/v1/users/${grace.id}`)).body).toEqual(notFound);
    expect((await h.json("DELETE", `/public/v1/users/${grace.id}`)).body).toEqual(notFound);
    expect((await h.json("GET", "/public/v1/users")).body.data).toEqual([alan]);
    const after = async (id: string) => (await h.json("GET", `/public/v1/contacts/${id}`)).body.data;
    const [ownedAfter, sharedAfter, bothAfter] = [await after(owned.id), await after(shared.id), await after(both.id)];
    const deletedAt = ownedAfter.updated_at;
    expect(deletedAt > owned.updated_at).toBe(true);
    expect([ownedAfter, sharedAfter, bothAfter]).toEqual([
      { ...owned, assigned_user_id: null, version: 2, updated_at: deletedAt },
      { ...shared, assigned_user_ids: [alan.id], version: 2, updated_at: deletedAt },
      { ...both, assigned_user_id: null, assigned_user_ids: [alan.id], version: 2, updated_at: deletedAt },
    ]);
    expect(await after(other.id)).toEqual(other);
    const events = (await eventData(h)).slice(4);
    expect(events.sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)))).toEqual(
      [ownedAfter, sharedAfter, bothAfter].map((data) => ({ type: "contact.updated", data })).sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b))),
    );
    // The relation table and the rows' copies agree: the user's contacts are found by it no more, with or without include.
    expect(await h.rt.db.all("SELECT contact_id, user_id FROM contact_assigned_users ORDER BY contact_id, position")).toEqual([
      { contact_id: shared.id, user_id: alan.id },
      { contact_id: both.id, user_id: alan.id },
      { contact_id: other.id, user_id: alan.id },
    ].sort((a, b) => a.contact_id.localeCompare(b.contact_id)));
    expect((await h.json("GET", `/public/v1/contacts?assigned_user_id=${grace.id}`)).body).toEqual({ data: [], meta: { current_page: 1, last_page: 1, per_page: 25, total: 0, next_cursor: null } });
    const { version, created_at, updated_at, ...rest } = bothAfter;
    expect((await h.json("GET", `/public/v1/contacts/${both.id}?include=assigned_user,assigned_users`)).body.data).toEqual({ ...rest, assigned_user: null, assigned_users: [alan], version, created_at, updated_at });
  });

  test("an unknown id is 404 and changes nothing", async () => {
    const grace = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@navy.mil" } })).body.data;
    const res = await h.json("DELETE", `/public/v1/users/${MISSING}`);
    expect([res.status, res.body]).toEqual([404, { type: "urn:crm:problem:not-found", title: "Not Found", status: 404, detail: `No user with id "${MISSING}" exists.` }]);
    expect((await h.json("GET", "/public/v1/users")).body.data).toEqual([grace]);
  });

  test("users carry no version: If-Match with entity tags is 412 and deletes nothing, * deletes, If-None-Match: * is 412; an unknown id stays 404", async () => {
    const grace = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@navy.mil" } })).body.data;
    const contact = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", assigned_user_id: grace.id } })).body.data;
    const tagged = await h.json("DELETE", `/public/v1/users/${grace.id}`, { headers: { "if-match": '"1"' } });
    expect([tagged.status, tagged.body]).toEqual([
      412,
      {
        type: "urn:crm:problem:precondition-failed",
        title: "Precondition Failed",
        status: 412,
        detail: "Users carry no version (their reads have no ETag), so no entity tag in If-Match can match: send the request without If-Match, or with *.",
      },
    ]);
    const absent = await h.json("DELETE", `/public/v1/users/${grace.id}`, { headers: { "if-none-match": "*" } });
    expect([absent.status, absent.body.detail]).toEqual([412, `The user ${grace.id} exists, and If-None-Match: * asks that it does not, so nothing changed.`]);
    expect((await h.json("GET", `/public/v1/users/${grace.id}`)).body.data).toEqual(grace);
    expect((await h.json("GET", `/public/v1/contacts/${contact.id}`)).body.data).toEqual(contact);
    expect((await h.json("DELETE", `/public/v1/users/${MISSING}`, { headers: { "if-match": '"1"' } })).status).toBe(404);
    expect((await h.request("DELETE", `/public/v1/users/${grace.id}`, { headers: { "if-match": "*" } })).status).toBe(204);
    expect((await h.json("GET", `/public/v1/users/${grace.id}`)).status).toBe(404);
  });

  test("a replay of the user's create after the delete is 410 replay-resource-deleted, its kept answer holding nothing of the user, and the user is not made again", async () => {
    const body = { name: "Erase Me", email: "erase.me@example.com" };
    const created = await h.json("POST", "/public/v1/users", { body, headers: { "idempotency-key": "user-1" } });
    const other = await h.json("POST", "/public/v1/users", { body: { name: "Kept", email: "kept@example.com" }, headers: { "idempotency-key": "user-2" } });
    const id = created.body.data.id as string;
    expect((await h.request("DELETE", `/public/v1/users/${id}`)).status).toBe(204);
    const replay = await h.json("POST", "/public/v1/users", { body, headers: { "idempotency-key": "user-1" } });
    expect([replay.status, replay.headers.get("idempotent-replayed"), replay.body]).toEqual([410, null, gone("user", id)]);
    expect(await userCount()).toBe(1);
    expect(await h.rt.db.all("SELECT idem_key, status, response_body FROM idempotency_keys ORDER BY idem_key")).toEqual([
      { idem_key: "user-1", status: 410, response_body: JSON.stringify({ resource: "user", id }) },
      { idem_key: "user-2", status: 201, response_body: JSON.stringify(other.body) },
    ]);
  });
});

describe("users: a delete unassigns its contacts a chunk per write", () => {
  /** assignedContacts creates 35 contacts assigned to the user: as assigned_user_id alone, in assigned_user_ids alone (after `also`), or both. */
  async function assignedContacts(userId: string, also: string): Promise<any[]> {
    const made = [];
    for (let i = 0; i < 35; i++) {
      const assigned = [{ assigned_user_id: userId }, { assigned_user_ids: [also, userId] }, { assigned_user_id: userId, assigned_user_ids: [userId, also] }][i % 3]!;
      made.push((await h.json("POST", "/public/v1/contacts", { body: { first_name: `C${i}`, ...assigned } })).body.data);
    }
    return made;
  }

  /** unassigned is a contact as the delete leaves it: the user gone from assigned_user_id and assigned_user_ids, one version more. */
  const unassigned = (contact: any, userId: string, updatedAt: string) => ({
    ...contact,
    assigned_user_id: contact.assigned_user_id === userId ? null : contact.assigned_user_id,
    assigned_user_ids: contact.assigned_user_ids.filter((id: string) => id !== userId),
    version: contact.version + 1,
    updated_at: updatedAt,
  });
  const byId = (a: { id: string }, b: { id: string }) => a.id.localeCompare(b.id);
  const updates = (n: number) => Array<string>(n).fill("contact.updated");

  test("35 contacts are unassigned 10 per write: a write sent once the first chunk commits commits before the next chunk; each contact ends unassigned with one contact.updated", async () => {
    const grace = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@navy.mil" } })).body.data;
    const alan = (await h.json("POST", "/public/v1/users", { body: { name: "Alan", email: "alan@example.com" } })).body.data;
    const assigned = await assignedContacts(grace.id, alan.id);
    const before = (await eventData(h)).length;
    // The first commit after the delete begins sends another write, which waits for one chunk, not the whole delete.
    const meanwhile = onNextCommit(h, () => createAccount(h.rt, { name: "Meanwhile" }, null, UNKNOWN_ORIGIN));
    const res = await h.request("DELETE", `/public/v1/users/${grace.id}`);
    expect([res.status, await res.text()]).toEqual([204, ""]);
    const created = (await meanwhile()).body.data;
    const after = await contactsNow(h, assigned);
    expect(after).toEqual(assigned.map((c, i) => unassigned(c, grace.id, after[i].updated_at)));
    const events = (await eventData(h)).slice(before);
    expect(events.map((e) => e.type)).toEqual([...updates(CHUNK), "account.created", ...updates(35 - CHUNK)]);
    expect(updatedContacts(events)).toEqual([...after].sort(byId));
    expect(events[CHUNK]).toEqual({ type: "account.created", data: created });
    expect((await h.json("GET", `/public/v1/users/${grace.id}`)).status).toBe(404);
    expect(await h.rt.db.all("SELECT contact_id FROM contact_assigned_users WHERE user_id = ?", [grace.id])).toEqual([]);
  });

  test("If-Match: * is checked once, before the first write: a rename between chunks does not stop the delete", async () => {
    const grace = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@navy.mil" } })).body.data;
    const alan = (await h.json("POST", "/public/v1/users", { body: { name: "Alan", email: "alan@example.com" } })).body.data;
    const assigned = await assignedContacts(grace.id, alan.id);
    const renamed = onNextCommit(h, () => updateUser(h.rt, grace.id, { name: "Grace Hopper" }));
    const res = await h.request("DELETE", `/public/v1/users/${grace.id}`, { headers: { "if-match": "*" } });
    expect([res.status, await res.text()]).toEqual([204, ""]);
    expect((await renamed()).name).toBe("Grace Hopper");
    expect((await h.json("GET", `/public/v1/users/${grace.id}`)).status).toBe(404);
    const after = await contactsNow(h, assigned);
    expect(after).toEqual(assigned.map((c, i) => unassigned(c, grace.id, after[i].updated_at)));
  });

  test("each write finds the user again: one deleted by another delete between chunks is 404, and every contact still loses it once", async () => {
    const grace = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@navy.mil" } })).body.data;
    const alan = (await h.json("POST", "/public/v1/users", { body: { name: "Alan", email: "alan@example.com" } })).body.data;
    const assigned = await assignedContacts(grace.id, alan.id);
    const before = (await eventData(h)).length;
    const other = onNextCommit(h, () => deleteUser(h.rt.db, grace.id, CHUNK, UNKNOWN_ORIGIN));
    const res = await h.json("DELETE", `/public/v1/users/${grace.id}`);
    // Its first write committed: the 404 says so, as every refusal after the first write does.
    expect([res.status, res.body.detail]).toEqual([
      404,
      `No user with id "${grace.id}" exists. Part of this request was done before this refusal, and stays done: ${2 * CHUNK} of the user's contacts lost the assignment (each sends contact.updated).`,
    ]);
    // The two deletes took turns, 10 contacts a write each; the other found none left and deleted the user.
    expect((await other()).unassigned).toBe(35 - 2 * CHUNK);
    const after = await contactsNow(h, assigned);
    expect(after).toEqual(assigned.map((c, i) => unassigned(c, grace.id, after[i].updated_at)));
    const events = (await eventData(h)).slice(before);
    expect([events.every((e) => e.type === "contact.updated"), updatedContacts(events)]).toEqual([true, [...after].sort(byId)]);
    expect((await h.json("GET", `/public/v1/users/${grace.id}`)).status).toBe(404);
  });
});

describe("users: errors", () => {
  test("a taken email is 409 on create and on PATCH; bad fields are 422; an unknown id is 404; nothing changes", async () => {
    const grace = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@navy.mil" } })).body.data;
    const alan = (await h.json("POST", "/public/v1/users", { body: { name: "Alan", email: "alan@example.com" } })).body.data;
    const taken = { type: "urn:crm:problem:user-exists", title: "Conflict", status: 409, detail: "A user with email grace@navy.mil already exists." };
    expect((await h.json("POST", "/public/v1/users", { body: { name: "Other", email: "GRACE@navy.mil" } })).body).toEqual(taken);
    expect((await h.json("PATCH", `/public/v1/users/${alan.id}`, { body: { email: "grace@navy.mil" } })).body).toEqual(taken);
    expect((await h.json("POST", "/public/v1/users", { body: { name: "", email: "x" } })).body).toEqual(
      validation([
        { pointer: "/name", detail: "must be a string of 1 to 200 characters, not spaces alone (a user needs a name)" },
        { pointer: "/email", detail: "must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de)" },
      ]),
    );
    expect((await h.json("PATCH", `/public/v1/users/${alan.id}`, { body: { name: "x".repeat(201) } })).body).toEqual(validation([{ pointer: "/name", detail: "must be a string of 1 to 200 characters, not spaces alone (a user needs a name)" }]));
    const noName = validation([{ pointer: "/name", detail: "must be a string of 1 to 200 characters, not spaces alone (a user needs a name)" }]);
    expect((await h.json("POST", "/public/v1/users", { body: { name: "   ", email: "blank@example.com" } })).body).toEqual(noName);
    expect((await h.json("PATCH", `/public/v1/users/${alan.id}`, { body: { name: " \t " } })).body).toEqual(noName);
    const notFound = { type: "urn:crm:problem:not-found", title: "Not Found", status: 404, detail: `No user with id "${MISSING}" exists.` };
    expect((await h.json("GET", `/public/v1/users/${MISSING}`)).body).toEqual(notFound);
    expect((await h.json("PATCH", `/public/v1/users/${MISSING}`, { body: { name: "X" } })).body).toEqual(notFound);
    expect((await h.json("GET", "/public/v1/users")).body.data).toEqual([grace, alan]);
  });
});

describe("users: kept in step", () => {
  const list = async (query: string) => (await h.json("GET", `/public/v1/users?${query}`)).body;
  const meta = (total: number, next_cursor: unknown) => ({ current_page: 1, last_page: Math.max(1, Math.ceil(total / 2)), per_page: 2, total, next_cursor });

  test("updated_after and sort_by=updated_at list the users changed since, oldest change first, by cursor; created_at is the default sort, and sort_direction turns it", async () => {
    const users: any[] = [];
    for (const [name, email] of [["Ada", "ada@example.com"], ["Grace", "grace@navy.mil"], ["Alan", "alan@example.com"]]) {
      users.push((await h.json("POST", "/public/v1/users", { body: { name, email } })).body.data);
      await Bun.sleep(2);
    }
    const since = users[2].updated_at;
    await Bun.sleep(2);
    const renamed = (await h.json("PATCH", `/public/v1/users/${users[0].id}`, { body: { name: "Ada Lovelace" } })).body.data;
    await Bun.sleep(2);
    const moved = (await h.json("PATCH", `/public/v1/users/${users[1].id}`, { body: { email: "grace@example.com" } })).body.data;

    const first = await list(`updated_after=${since}&sort_by=updated_at&sort_direction=asc&per_page=1`);
    expect(first.data).toEqual([renamed]);
    expect(first.meta.next_cursor).toEqual(expect.any(String));
    const second = await list(`updated_after=${since}&sort_by=updated_at&sort_direction=asc&per_page=1&cursor=${encodeURIComponent(first.meta.next_cursor)}`);
    expect(second).toEqual({ data: [moved], meta: { current_page: 0, last_page: 2, per_page: 1, total: 2, next_cursor: null } });
    expect(await list(`updated_after=${moved.updated_at}&sort_by=updated_at`)).toEqual({ data: [], meta: { current_page: 1, last_page: 1, per_page: 25, total: 0, next_cursor: null } });

    expect(await list("per_page=2")).toEqual({ data: [renamed, moved], meta: meta(3, expect.any(String)) });
    expect((await list("sort_by=created_at&sort_direction=desc")).data).toEqual([users[2], moved, renamed]);
    expect((await list("sort_by=updated_at&sort_direction=desc")).data).toEqual([moved, renamed, users[2]]);
  });

  test("a bad sort, direction or updated_after is 422, and a cursor is bound to its filter", async () => {
    await h.json("POST", "/public/v1/users", { body: { name: "Ada", email: "ada@example.com" } });
    await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@navy.mil" } });
    expect(await list("sort_by=name")).toEqual(validation([{ parameter: "sort_by", detail: "must be one of: created_at, updated_at" }]));
    expect(await list("sort_direction=up")).toEqual(validation([{ parameter: "sort_direction", detail: "must be asc or desc" }]));
    expect(await list("updated_after=yesterday")).toEqual(validation([{ parameter: "updated_after", detail: "must be an RFC 3339 date-time, e.g. 2026-11-21T10:00:00Z" }]));
    const cursor = (await list("per_page=1&updated_after=2020-01-01T00:00:00Z")).meta.next_cursor;
    expect((await h.json("GET", `/public/v1/users?per_page=1&cursor=${encodeURIComponent(cursor)}`)).status).toBe(422);
  });

  test("a deleted user is listed in GET /users/deleted with its deletion time (users carry no version: null), after since, as contacts and accounts are; 410 past the retention", async () => {
    const grace = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@navy.mil" } })).body.data;
    const since = new Date().toISOString();
    await Bun.sleep(2);
    expect((await h.request("DELETE", `/public/v1/users/${grace.id}`)).status).toBe(204);
    const listed = (await h.json("GET", `/public/v1/users/deleted?since=${since}`)).body;
    expect(listed).toEqual({ data: [{ id: grace.id, deleted_at: listed.data[0]?.deleted_at, version: null }], meta: { current_page: 1, last_page: 1, per_page: 25, total: 1, next_cursor: null } });
    expect(listed.data[0].deleted_at > since).toBe(true);
    expect((await h.json("GET", `/public/v1/users/deleted?since=${listed.data[0].deleted_at}`)).body.data).toEqual([]);
    expect((await h.json("GET", "/public/v1/contacts/deleted")).body.data).toEqual([]);
    expectProblem(await h.json("GET", `/public/v1/users/deleted?since=${new Date(Date.now() - 91 * 86_400_000).toISOString()}`), 410, "deletions-expired");
    expectProblem(await h.json("GET", "/public/v1/users/deleted", { headers: { authorization: "Bearer crm_wrong" } }), 401, "unauthorized");
  });
});

describe("users: security", () => {
  test("creating, reading, changing and deleting users needs a token", async () => {
    const user = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@navy.mil" } })).body.data;
    for (const [method, path, body] of [
      ["POST", "/public/v1/users", { name: "Evil", email: "evil@example.com" }],
      ["GET", `/public/v1/users/${user.id}`, undefined],
      ["PATCH", `/public/v1/users/${user.id}`, { name: "Evil" }],
      ["DELETE", `/public/v1/users/${user.id}`, undefined],
    ] as const) {
      expectProblem(await h.json(method, path, { body, headers: { authorization: "Bearer crm_wrong" } }), 401, "unauthorized");
    }
    expect((await h.json("GET", `/public/v1/users/${user.id}`)).body).toEqual({ data: user });
    expect(await userCount()).toBe(1);
  });

  test("browser calls are refused before anything is stored", async () => {
    expectProblem(await h.json("POST", "/public/v1/users", { body: { name: "Evil", email: "evil@example.com" }, headers: { origin: "https://evil.example" } }), 403, "browser-request");
    expect(await userCount()).toBe(0);
  });
});
