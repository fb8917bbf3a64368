import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { CONTACT_SORTS } from "../../server/contacts/model.ts";
import { createUser } from "../../server/users/service.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { eventData, eventTypes, expectProblem, postAccount, validation } from "./support.ts";

let h: Harness;
beforeEach(async () => {
  h = await createHarness({ rateReadBurst: 10_000, rateWriteBurst: 10_000 });
});
afterEach(async () => await h.close());

const MISSING_CON = "con_00000000000000000000000000";
const MISSING_ACC = "acc_00000000000000000000000000";
const page = (total: number, perPage = 25) => ({ current_page: 1, last_page: Math.max(1, Math.ceil(total / perPage)), per_page: perPage, total, next_cursor: null });
const notFound = (kind: string, id: string) => ({ type: "urn:crm:problem:not-found", title: "Not Found", status: 404, detail: `No ${kind} with id "${id}" exists.` });

const account = (name: string) => postAccount(h, { name });
async function contact(body: Record<string, unknown>) {
  const res = await h.json("POST", "/public/v1/contacts", { body });
  expect(res.status).toBe(201);
  return res.body.data;
}

const SORT_KEYS = "created_at, updated_at, first_name_key, last_name_key, email";
type SortKeys = { created_at: number; updated_at: number; first_name_key: string | null; last_name_key: string | null; email: string | null };

/** relationCopiesAgree checks each contact row's account ids and tags against the relation tables, and that its tag and account rows carry its sort keys. */
async function relationCopiesAgree() {
  const rows = await h.rt.db.all<{ id: string; account_ids: string; properties: string } & SortKeys>(`SELECT id, account_ids, properties, ${SORT_KEYS} FROM contacts ORDER BY id`);
  for (const row of rows) {
    const accountRows = await h.rt.db.all<{ account_id: string } & SortKeys>(`SELECT account_id, ${SORT_KEYS} FROM contact_accounts WHERE contact_id = ? ORDER BY position`, [row.id]);
    const tagRows = await h.rt.db.all<{ tag: string } & SortKeys>(`SELECT tag, ${SORT_KEYS} FROM contact_tags WHERE contact_id = ? ORDER BY tag`, [row.id]);
    const ownTags = [...new Set((JSON.parse(row.properties).tags ?? []) as string[])].sort();
    const keys: SortKeys = { created_at: row.created_at, updated_at: row.updated_at, first_name_key: row.first_name_key, last_name_key: row.last_name_key, email: row.email };
    const ownAccounts = (JSON.parse(row.account_ids) as string[]).map((account_id) => ({ account_id, ...keys }));
    expect({ id: row.id, accounts: ownAccounts, tags: ownTags.map((tag) => ({ tag, ...keys })) }).toEqual({ id: row.id, accounts: accountRows, tags: tagRows });
  }
}

describe("contact relations: happy paths", () => {
  test("POST and DELETE of an account link change account_ids, each change sends one contact.updated, and repeating one changes nothing", async () => {
    const [a, b] = [await account("A"), await account("B")];
    const c = await contact({ first_name: "Ada", account_ids: [a.id] });
    const path = `/public/v1/contacts/${c.id}/accounts`;
    const added = await h.json("POST", path, { body: { account_id: b.id } });
    expect(added.status).toBe(200);
    expect(added.headers.get("location")).toBeNull();
    const withB = { ...c, account_ids: [a.id, b.id], version: 2, updated_at: added.body.data.updated_at };
    expect(added.body).toEqual({ data: withB });
    expect((await h.json("POST", path, { body: { account_id: b.id } })).body).toEqual({ data: withB });
    const removed = await h.json("DELETE", `${path}/${a.id}`);
    const withoutA = { ...withB, account_ids: [b.id], version: 3, updated_at: removed.body.data.updated_at };
    expect([removed.status, removed.body]).toEqual([200, { data: withoutA }]);
    expect((await h.json("DELETE", `${path}/${a.id}`)).body).toEqual({ data: withoutA });
    expect((await h.json("GET", `/public/v1/contacts/${c.id}`)).body).toEqual({ data: withoutA });
    expect((await eventData(h)).filter((e) => e.type.startsWith("contact."))).toEqual([
      { type: "contact.created", data: c },
      { type: "contact.updated", data: withB },
      { type: "contact.updated", data: withoutA },
    ]);
    await relationCopiesAgree();
  });

  test("POST and DELETE of a tag change tags (a tag with a slash and spaces too), one event per change, none for a repeat", async () => {
    const c = await contact({ first_name: "Ada", tags: ["vip"] });
    const path = `/public/v1/contacts/${c.id}/tags`;
    const added = await h.json("POST", path, { body: { tag: "a/b c" } });
    const tagged = { ...c, tags: ["vip", "a/b c"], version: 2, updated_at: added.body.data.updated_at };
    expect([added.status, added.body]).toEqual([200, { data: tagged }]);
    expect((await h.json("POST", path, { body: { tag: "a/b c" } })).body).toEqual({ data: tagged });
    expect((await h.json("GET", "/public/v1/contacts?tag=a/b%20c")).body).toEqual({ data: [tagged], meta: page(1) });
    const removed = await h.json("DELETE", `${path}/${encodeURIComponent("a/b c")}`);
    const untagged = { ...tagged, tags: ["vip"], version: 3, updated_at: removed.body.data.updated_at };
    expect([removed.status, removed.body]).toEqual([200, { data: untagged }]);
    expect((await h.json("DELETE", `${path}/absent`)).body).toEqual({ data: untagged });
    expect(await eventTypes(h)).toEqual(["contact.created", "contact.updated", "contact.updated"]);
    await relationCopiesAgree();
  });

  test("a contact stored before names were required can still be tagged, linked and unlinked", async () => {
    const a = await account("A");
    await h.rt.db.run("INSERT INTO contacts (id, properties, created_at, updated_at) VALUES ('con_01JDB7Y1Q7A6T5ZV3C8W9X0K2M', '{}', 1, 1)");
    const path = "/public/v1/contacts/con_01JDB7Y1Q7A6T5ZV3C8W9X0K2M";
    expect((await h.json("POST", `${path}/tags`, { body: { tag: "legacy" } })).body.data.tags).toEqual(["legacy"]);
    expect((await h.json("POST", `${path}/accounts`, { body: { account_id: a.id } })).body.data.account_ids).toEqual([a.id]);
    expect((await h.request("DELETE", `/public/v1/accounts/${a.id}`)).status).toBe(204);
    expect((await h.json("GET", path)).body.data).toMatchObject({ tags: ["legacy"], account_ids: [], first_name: null, email: null });
    await relationCopiesAgree();
  });

  test("an Idempotency-Key replays a relation POST", async () => {
    const a = await account("A");
    const c = await contact({ first_name: "Ada" });
    const first = await h.json("POST", `/public/v1/contacts/${c.id}/accounts`, { body: { account_id: a.id }, headers: { "idempotency-key": "link-1" } });
    const again = await h.json("POST", `/public/v1/contacts/${c.id}/accounts`, { body: { account_id: a.id }, headers: { "idempotency-key": "link-1" } });
    expect([again.status, again.headers.get("idempotent-replayed"), again.body]).toEqual([200, "true", first.body]);
  });

  test("concurrent additions of different accounts and tags to one contact lose none, and each sends its event", async () => {
    const accounts = [];
    for (let i = 0; i < 30; i++) accounts.push(await account(`Account ${i}`));
    const c = await contact({ first_name: "Busy" });
    const results = await Promise.all([
      ...accounts.map((a) => h.json("POST", `/public/v1/contacts/${c.id}/accounts`, { body: { account_id: a.id } })),
      ...accounts.map((_, i) => h.json("POST", `/public/v1/contacts/${c.id}/tags`, { body: { tag: `t${i}` } })),
    ]);
    expect(results.map((r) => r.status)).toEqual(results.map(() => 200));
    const final = (await h.json("GET", `/public/v1/contacts/${c.id}`)).body.data;
    expect([...final.account_ids].sort()).toEqual(accounts.map((a) => a.id).sort());
    expect([...final.tags].sort()).toEqual(accounts.map((_, i) => `t${i}`).sort());
    expect((await eventTypes(h)).filter((t) => t === "contact.updated")).toHaveLength(60);
    await relationCopiesAgree();
  });

  test("filters account_id, tag (comma-separated or repeated, all must match) and assigned_user_id, alone and together, with every sort and by cursor", async () => {
    const [a, b] = [await account("A"), await account("B")];
    const u = await createUser(h.rt.db, { name: "U", email: "u@example.com" });
    const made = [];
    for (let i = 0; i < 12; i++) {
      made.push(
        await contact({
          first_name: `N${(i * 7) % 12}`,
          last_name: i % 3 ? `L${i % 4}` : null,
          email: `e${(i * 5) % 12}@example.com`,
          tags: [...(i % 2 ? ["odd"] : ["even"]), ...(i % 3 === 0 ? ["three"] : [])],
          account_ids: i % 4 === 0 ? [a.id] : [b.id],
          assigned_user_id: i % 3 === 1 ? u.id : null,
        }),
      );
    }
    // a change after creation (in a later millisecond than every creation): updated_at order differs from created_at order
    await Bun.sleep(2);
    made[2] = (await h.json("POST", `/public/v1/contacts/${made[2].id}/tags`, { body: { tag: "odd" } })).body.data;
    const cases: [string, (c: any) => boolean][] = [
      [`account_id=${a.id}`, (c) => c.account_ids.includes(a.id)],
      ["tag=odd", (c) => c.tags.includes("odd")],
      ["tag=odd,three", (c) => c.tags.includes("odd") && c.tags.includes("three")],
      ["tag=odd&tag=three", (c) => c.tags.includes("odd") && c.tags.includes("three")],
      [`assigned_user_id=${u.id}`, (c) => c.assigned_user_id === u.id],
      [`tag=even&account_id=${b.id}&assigned_user_id=${u.id}`, (c) => c.tags.includes("even") && c.account_ids.includes(b.id) && c.assigned_user_id === u.id],
      ["tag=nobody", () => false],
    ];
    // time filters beside relations: a range of the relation's own index when on the sort's column, else checked on each row walked
    const after = (time: string) => (c: any) => Date.parse(c.updated_at) > Date.parse(time);
    const createdAfter = (time: string) => (c: any) => Date.parse(c.created_at) > Date.parse(time);
    const [updatedMid, createdMid, createdFirst, createdLast] = [made[5].updated_at, made[5].created_at, made[0].created_at, made[11].created_at];
    cases.push(
      [`tag=odd&updated_after=${updatedMid}`, (c) => c.tags.includes("odd") && after(updatedMid)(c)],
      [`account_id=${b.id}&created_after=${createdMid}`, (c) => c.account_ids.includes(b.id) && createdAfter(createdMid)(c)],
      [`assigned_user_id=${u.id}&updated_after=${updatedMid}&created_after=${createdFirst}`, (c) => c.assigned_user_id === u.id && after(updatedMid)(c) && createdAfter(createdFirst)(c)],
      [`tag=odd,three&created_after=${createdFirst}`, (c) => c.tags.includes("odd") && c.tags.includes("three") && createdAfter(createdFirst)(c)],
      [`tag=even&account_id=${b.id}&updated_after=${createdFirst}`, (c) => c.tags.includes("even") && c.account_ids.includes(b.id) && after(createdFirst)(c)],
      // one of the account's 9 contacts: in the other sorts, a range of the account's updated_at index
      [`account_id=${b.id}&updated_after=${createdLast}`, (c) => c.account_ids.includes(b.id) && after(createdLast)(c)],
    );
    for (const [query, matches] of cases) {
      const expected = made.filter(matches);
      for (const sort of CONTACT_SORTS) {
        for (const direction of ["asc", "desc"] as const) {
          const all = (await h.json("GET", `/public/v1/contacts?${query}&sort_by=${sort}&sort_direction=${direction}&per_page=100`)).body;
          expect({ query, sort, total: all.meta.total, ids: [...all.data.map((c: any) => c.id)].sort() }).toEqual({ query, sort, total: expected.length, ids: expected.map((c) => c.id).sort() });
          const walked: string[] = [];
          let cursor: string | null = null;
          do {
            const res: any = (await h.json("GET", `/public/v1/contacts?${query}&sort_by=${sort}&sort_direction=${direction}&per_page=2${cursor ? `&cursor=${cursor}` : ""}`)).body;
            walked.push(...res.data.map((c: any) => c.id));
            cursor = res.meta.next_cursor;
          } while (cursor);
          expect({ query, sort, direction, ids: walked }).toEqual({ query, sort, direction, ids: all.data.map((c: any) => c.id) });
        }
      }
    }
    expect((await h.json("GET", `/public/v1/contacts?tag=three&account_id=${a.id}&sort_by=created_at&sort_direction=asc`)).body).toEqual({ data: [made[0], made[8]].filter((c) => c.tags.includes("three")), meta: page(made.filter((c) => c.tags.includes("three") && c.account_ids.includes(a.id)).length) });
  });
  test("a tag's, an account's and an assigned user's lists keep their contacts' own order in every sort, by cursor too, after names, emails, other fields, tags, accounts and assignments change", async () => {
    const [a, b] = [await account("A"), await account("B")];
    const u = await createUser(h.rt.db, { name: "U", email: "u@example.com" });
    const made = [];
    for (let i = 0; i < 8; i++) {
      made.push(
        await contact({
          first_name: `N${(i * 3) % 8}`,
          last_name: i % 4 ? `L${(i * 5) % 8}` : null,
          email: `e${(i * 7) % 8}@example.com`,
          tags: i % 2 ? ["t"] : [],
          account_ids: [...(i < 4 ? [a.id] : []), ...(i % 3 ? [b.id] : [])],
          assigned_user_id: i % 2 ? null : u.id,
        }),
      );
    }
    // each change moves updated_at; names and emails move a contact in the other sorts
    await h.json("PATCH", `/public/v1/contacts/${made[1]!.id}`, { body: { first_name: null, last_name: "aardvark", assigned_user_id: u.id } });
    await h.json("PATCH", `/public/v1/contacts/${made[3]!.id}`, { body: { email: "zz@example.com" } });
    await h.json("PATCH", `/public/v1/contacts/${made[5]!.id}`, { body: { phone: "+44 20 7946 0000" } });
    await h.json("PATCH", `/public/v1/contacts/${made[6]!.id}`, { body: { assigned_user_id: null } });
    await h.json("POST", `/public/v1/contacts/${made[2]!.id}/tags`, { body: { tag: "t" } });
    await h.json("POST", `/public/v1/contacts/${made[3]!.id}/accounts`, { body: { account_id: b.id } });
    await h.json("DELETE", `/public/v1/contacts/${made[4]!.id}/accounts/${b.id}`);
    await h.json("PATCH", `/public/v1/contacts/${made[4]!.id}`, { body: { first_name: "Late", tags: ["u", "t"], account_ids: [b.id] } });
    await h.json("PATCH", `/public/v1/contacts/${made[7]!.id}`, { body: { last_name: "later", tags: [], account_ids: [] } });
    // the account's deletion unlinks its contacts in one statement, moving their updated_at
    expect((await h.request("DELETE", `/public/v1/accounts/${a.id}`)).status).toBe(204);
    await relationCopiesAgree();
    const filters: [string, (c: any) => boolean][] = [
      ["tag=t", (c) => c.tags.includes("t")],
      [`account_id=${b.id}`, (c) => c.account_ids.includes(b.id)],
      [`assigned_user_id=${u.id}`, (c) => c.assigned_user_id === u.id],
    ];
    for (const [filter, matches] of filters) {
      for (const sort of CONTACT_SORTS) {
        for (const direction of ["asc", "desc"] as const) {
          const order = `sort_by=${sort}&sort_direction=${direction}`;
          const everyone = (await h.json("GET", `/public/v1/contacts?${order}&per_page=100`)).body.data;
          const expected = everyone.filter(matches).map((c: any) => c.id);
          const listed = (await h.json("GET", `/public/v1/contacts?${filter}&${order}&per_page=100`)).body;
          expect({ filter, sort, direction, ids: listed.data.map((c: any) => c.id) }).toEqual({ filter, sort, direction, ids: expected });
          const walked: string[] = [];
          let cursor: string | null = null;
          do {
            const res: any = (await h.json("GET", `/public/v1/contacts?${filter}&${order}&per_page=2${cursor ? `&cursor=${cursor}` : ""}`)).body;
            walked.push(...res.data.map((c: any) => c.id));
            cursor = res.meta.next_cursor;
          } while (cursor);
          expect({ filter, sort, direction, ids: walked }).toEqual({ filter, sort, direction, ids: expected });
        }
      }
    }
    const totals = [];
    for (const [filter] of filters) totals.push((await h.json("GET", `/public/v1/contacts?${filter}&per_page=100`)).body.meta.total);
    expect(totals).toEqual([5, 5, 4]);
  });
});

describe("contact relations: errors", () => {
  test("an unknown contact is 404, an unknown account 422, a malformed body 422; nothing changes and no event is sent", async () => {
    const a = await account("A");
    const c = await contact({ first_name: "Ada" });
    expect((await h.json("POST", `/public/v1/contacts/${MISSING_CON}/accounts`, { body: { account_id: a.id } })).body).toEqual(notFound("contact", MISSING_CON));
    expect((await h.json("DELETE", `/public/v1/contacts/${MISSING_CON}/accounts/${a.id}`)).body).toEqual(notFound("contact", MISSING_CON));
    expect((await h.json("POST", `/public/v1/contacts/${MISSING_CON}/tags`, { body: { tag: "x" } })).body).toEqual(notFound("contact", MISSING_CON));
    expect((await h.json("DELETE", `/public/v1/contacts/${MISSING_CON}/tags/x`)).body).toEqual(notFound("contact", MISSING_CON));
    expect((await h.json("POST", `/public/v1/contacts/${c.id}/accounts`, { body: { account_id: MISSING_ACC } })).body).toEqual(
      validation([{ pointer: "/account_id", detail: `no account with id ${MISSING_ACC} exists` }], "The account does not exist."),
    );
    expect((await h.json("POST", `/public/v1/contacts/${c.id}/accounts`, { body: { account_id: "acme" } })).body).toEqual(validation([{ pointer: "/account_id", detail: "must be an account id (acc_...)" }]));
    expect((await h.json("POST", `/public/v1/contacts/${c.id}/accounts`, { body: {} })).body).toEqual(validation([{ pointer: "/account_id", detail: "must be an account id (acc_...)" }]));
    expect((await h.json("POST", `/public/v1/contacts/${c.id}/tags`, { body: { tag: "" } })).body).toEqual(validation([{ pointer: "/tag", detail: 'must be a tag of 1 to 100 characters, not "." or ".."' }]));
    expect((await h.json("POST", `/public/v1/contacts/${c.id}/tags`, { body: { tag: "x".repeat(101) } })).body).toEqual(validation([{ pointer: "/tag", detail: 'must be a tag of 1 to 100 characters, not "." or ".."' }]));
    expect((await h.json("GET", `/public/v1/contacts/${c.id}`)).body).toEqual({ data: c });
    expect(await eventTypes(h)).toEqual(["account.created", "contact.created"]);
  });

  test("the deepest page of a relation filter is an empty page, as any page past the end is: never a 500", async () => {
    const a = await account("Acme");
    const user = await createUser(h.rt.db, { name: "Ulla", email: "ulla@example.com" });
    const c = await contact({ first_name: "Ada", tags: ["vip"], account_ids: [a.id], assigned_user_id: user.id });
    await contact({ first_name: "Bea", tags: ["vip"] });
    // The walk's window grows with the page: 999,999,999 pages of 100 would ask for more rows than a 32-bit LIMIT holds.
    const filters = [`tag=vip`, `account_id=${a.id}`, `assigned_user_id=${user.id}`, `tag=vip&account_id=${a.id}`, `tag=vip&assigned_user_id=${user.id}`];
    for (const filter of filters) {
      for (const page of [10737419, 999999999]) {
        const res = await h.json("GET", `/public/v1/contacts?${filter}&page=${page}&per_page=100`);
        const total = filter === "tag=vip" ? 2 : 1;
        expect({ filter, page, status: res.status, body: res.body }).toEqual({ filter, page, status: 200, body: { data: [], meta: { current_page: page, last_page: 1, per_page: 100, total, next_cursor: null } } });
      }
      expect((await h.json("GET", `/public/v1/contacts?${filter}&per_page=100`)).body.data.map((found: { id: string }) => found.id)).toContain(c.id);
    }
  });

  test("the 101st account or tag is 422 naming the limit", async () => {
    const c = await contact({ first_name: "Full", tags: Array.from({ length: 100 }, (_, i) => `t${i}`) });
    expect((await h.json("POST", `/public/v1/contacts/${c.id}/tags`, { body: { tag: "one-more" } })).body).toEqual(validation([{ pointer: "/tag", detail: "the contact already has 100 tags, the limit" }], "Too many tags."));
    const accounts = [];
    for (let i = 0; i < 101; i++) accounts.push(await account(`A${i}`));
    const d = await contact({ first_name: "Linked", account_ids: accounts.slice(0, 100).map((a) => a.id) });
    expect((await h.json("POST", `/public/v1/contacts/${d.id}/accounts`, { body: { account_id: accounts[100].id } })).body).toEqual(
      validation([{ pointer: "/account_id", detail: "the contact already has 100 accounts, the limit" }], "Too many accounts."),
    );
  });

  test("malformed filter values are 422 naming the parameter", async () => {
    const invalid = (parameter: string, detail: string) => validation([{ parameter, detail }]);
    expect((await h.json("GET", "/public/v1/contacts?account_id=acme")).body).toEqual(invalid("account_id", "must be an account id (acc_...)"));
    expect((await h.json("GET", "/public/v1/contacts?assigned_user_id=bob")).body).toEqual(invalid("assigned_user_id", "must be a user id (usr_...)"));
    expect((await h.json("GET", "/public/v1/contacts?tag=a,,b")).body).toEqual(
      validation([{ parameter: "tag", detail: "must be at most 100 tags of 1 to 100 characters, comma-separated or repeated" }]),
    );
    expect((await h.json("GET", `/public/v1/contacts?tag=a,${"x".repeat(101)}`)).body).toEqual(
      validation([{ parameter: "tag", detail: "must be at most 100 tags of 1 to 100 characters, comma-separated or repeated: tag 2 has 101 characters (Unicode code points, as given)" }]),
    );
    // other parameters still may not repeat
    expect((await h.json("GET", "/public/v1/contacts?tag=a&email=x@y.z&email=x@y.z")).body).toEqual(validation([{ parameter: "email", detail: "must be given once" }]));
  });

  test("the tag filter counts a tag's characters as the OpenAPI document's pattern does, in code points as given: 100 emoji are taken (and find nothing), 101 are refused saying how they were counted", async () => {
    const pattern = new RegExp((await h.json("GET", "/docs/json")).body.paths["/public/v1/contacts"].get.parameters.find((p: { name: string }) => p.name === "tag").schema.pattern, "u");
    // Each is one code point, two UTF-16 code units; "e" and a combining acute are two code points that NFC makes one.
    const taken = [`${"\u{1F600}".repeat(100)},b`, "e\u0301".repeat(50)];
    const refused = "\u{1F600}".repeat(101);
    expect([...taken, refused].map((tag) => pattern.test(tag))).toEqual([true, true, false]);
    for (const tag of taken) expect((await h.json("GET", `/public/v1/contacts?tag=${encodeURIComponent(tag)}`)).body).toEqual({ data: [], meta: page(0) });
    expect((await h.json("GET", `/public/v1/contacts?tag=${encodeURIComponent(refused)}`)).body).toEqual(
      validation([{ parameter: "tag", detail: "must be at most 100 tags of 1 to 100 characters, comma-separated or repeated: tag 1 has 101 characters (Unicode code points, as given)" }]),
    );
  });

  test("the deleted list answers a page of tombstones after since, refuses a bad since, and 410 past the retention", async () => {
    const c = await contact({ first_name: "Gone" });
    const start = new Date().toISOString();
    await Bun.sleep(2);
    expect((await h.request("DELETE", `/public/v1/contacts/${c.id}`)).status).toBe(204);
    const deleted = (await eventData(h)).at(-1)!.data as { deleted_at: string; version: number };
    const deletedAt = deleted.deleted_at;
    // the tombstone carries contact.deleted's version: a copy marks the id deleted with it, and drops a late contact.updated
    expect((await h.json("GET", `/public/v1/contacts/deleted?since=${start}`)).body).toEqual({ data: [{ id: c.id, deleted_at: deletedAt, version: deleted.version }], meta: page(1) });
    expect((await h.json("GET", `/public/v1/contacts/deleted?since=${deletedAt}`)).body).toEqual({ data: [], meta: page(0) });
    expect((await h.json("GET", "/public/v1/contacts/deleted?since=2026-13-01T00:00:00Z")).body).toEqual(validation([{ parameter: "since", detail: "must be an RFC 3339 date-time, e.g. 2026-11-21T10:00:00Z" }]));
    expect((await h.json("GET", "/public/v1/contacts/deleted?sort_by=id")).status).toBe(422);
    const gone = await h.json("GET", `/public/v1/contacts/deleted?since=${new Date(Date.now() - 91 * 86_400_000).toISOString()}`);
    expectProblem(gone, 410, "deletions-expired");
  });
});

describe("contact relations: security", () => {
  test("relation routes and the deleted list need a token, and change nothing without one", async () => {
    const a = await account("A");
    const c = await contact({ first_name: "Ada", tags: ["vip"], account_ids: [a.id] });
    for (const [method, path, body] of [
      ["POST", `/public/v1/contacts/${c.id}/accounts`, { account_id: a.id }],
      ["DELETE", `/public/v1/contacts/${c.id}/accounts/${a.id}`, undefined],
      ["POST", `/public/v1/contacts/${c.id}/tags`, { tag: "evil" }],
      ["DELETE", `/public/v1/contacts/${c.id}/tags/vip`, undefined],
      ["GET", "/public/v1/contacts/deleted", undefined],
    ] as const) {
      const res = await h.json(method, path, { body, headers: { authorization: "Bearer crm_not_a_token" } });
      expectProblem(res, 401, "unauthorized");
    }
    expect((await h.json("GET", `/public/v1/contacts/${c.id}`)).body).toEqual({ data: c });
    expect(await eventTypes(h)).toEqual(["account.created", "contact.created"]);
  });

  test("tags and ids in paths and filters are data, never SQL", async () => {
    const evil = "x' OR '1'='1";
    const c = await contact({ first_name: "Ada" });
    const tagged = (await h.json("POST", `/public/v1/contacts/${c.id}/tags`, { body: { tag: evil } })).body.data;
    expect(tagged.tags).toEqual([evil]);
    expect((await h.json("GET", `/public/v1/contacts?tag=${encodeURIComponent(evil)}`)).body.data).toEqual([tagged]);
    expect((await h.json("GET", `/public/v1/contacts?tag=${encodeURIComponent("x' OR 1=1 --")}`)).body.data).toEqual([]);
    expect((await h.json("DELETE", `/public/v1/contacts/${c.id}/tags/${encodeURIComponent(evil)}`)).body.data.tags).toEqual([]);
  });
});
