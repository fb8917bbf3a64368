import { afterAll, beforeAll, expect, test } from "bun:test";
import { CONTACT_SORTS } from "../../server/contacts/model.ts";
import { countContacts, listContacts, type ContactFilters } from "../../server/contacts/store.ts";
import { createUser } from "../../server/users/service.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { capturing } from "../support/query-plans.ts";
import { random } from "../support/random.ts";
import { postAccount } from "./support.ts";

// Every plan a filtered list may take (a window of a relation's or the contacts' sort index, each
// entry probed for the other filters and sliced in order, a name's window within its rowids, the
// fetch, the window then the fetch) reads the page and total that the whole list, filtered here,
// holds there: random filters, sorts, directions, page sizes and pages, by number and by cursor.

const CONTACTS = 160;
let h: Harness;
let accounts: string[] = [];
let users: string[] = [];

type Listed = { id: string; first_name: string | null; last_name: string | null; tags: string[]; account_ids: string[]; assigned_user_id: string | null; created_at: string; updated_at: string };

beforeAll(async () => {
  h = await createHarness({ rateReadBurst: 100_000, rateWriteBurst: 10_000 });
  accounts = [(await postAccount(h, { name: "Big" })).id, (await postAccount(h, { name: "Small" })).id];
  users = [(await createUser(h.rt.db, { name: "Broad", email: "broad@example.com" })).id, (await createUser(h.rt.db, { name: "Few", email: "few@example.com" })).id];
  const rnd = random(7);
  for (let from = 0; from < CONTACTS; from += 40) {
    const items = Array.from({ length: 40 }, (_, k) => from + k).map((i) => ({
      first_name: rnd.pick(["Ann", "bob", "Cleo", null]),
      last_name: [...(i % 2 === 0 ? ["Halfway"] : []), ...(i % 9 === 0 ? ["Ninthly"] : []), ...(i % 40 === 1 ? ["Rarely"] : []), "Zed"].join(" "),
      email: i % 5 ? `p${(i * 37) % CONTACTS}@example.com` : null,
      tags: [...(rnd.chance(0.5) ? ["half"] : []), ...(i % 10 < 2 ? ["fifth"] : []), ...(i < 24 ? ["oldest"] : [])],
      account_ids: [...(rnd.chance(0.4) ? [accounts[0]!] : []), ...(i % 16 === 3 ? [accounts[1]!] : [])],
      assigned_user_id: rnd.chance(0.5) ? users[0]! : rnd.chance(0.1) ? users[1]! : null,
    }));
    expect((await h.json("POST", "/public/v1/contacts/batch", { body: { items } })).status).toBe(200);
    await Bun.sleep(2);
  }
  // later changes: updated_at order differs from created_at order
  const all = await everyContact("created_at", "asc");
  for (let i = 0; i < CONTACTS; i += 7) {
    await Bun.sleep(1);
    expect((await h.json("PATCH", `/public/v1/contacts/${all[i]!.id}`, { body: { phone: `+1 555 0100 ${i}` } })).status).toBe(200);
  }
});
afterAll(async () => await h.close());

/** everyContact reads the unfiltered list in one sort, by cursor: the reference order. */
async function everyContact(sortBy: string, direction: string): Promise<Listed[]> {
  const rows: Listed[] = [];
  let cursor: string | null = null;
  do {
    const body: any = (await h.json("GET", `/public/v1/contacts?per_page=100&sort_by=${sortBy}&sort_direction=${direction}${cursor ? `&cursor=${cursor}` : ""}`)).body;
    rows.push(...body.data);
    cursor = body.meta.next_cursor;
  } while (cursor);
  return rows;
}

const fullName = (c: Listed) => [c.first_name, c.last_name].filter((part) => part).join(" ").toLowerCase();

test("random filters, sorts and pages read the page and total of the whole list filtered", async () => {
  const orders = new Map<string, Listed[]>();
  for (const sortBy of CONTACT_SORTS) for (const direction of ["asc", "desc"]) orders.set(`${sortBy} ${direction}`, await everyContact(sortBy, direction));
  const everyone = orders.get("created_at asc")!;
  const times = everyone.map((c) => c.created_at);
  const updates = everyone.map((c) => c.updated_at);
  const rnd = random(11);
  for (let round = 0; round < 150; round++) {
    const query: string[] = [];
    const tests: ((c: Listed) => boolean)[] = [];
    const relations = rnd.subset(["tag", "tag2", "account", "user"] as const, 3);
    if (relations.includes("tag")) {
      const tag = rnd.pick(["half", "fifth", "oldest"]);
      query.push(`tag=${tag}`);
      tests.push((c) => c.tags.includes(tag));
    }
    if (relations.includes("tag2")) {
      const tag = rnd.pick(["half", "fifth"]);
      query.push(`tag=${tag}`);
      tests.push((c) => c.tags.includes(tag));
    }
    if (relations.includes("account")) {
      const account = rnd.pick(accounts);
      query.push(`account_id=${account}`);
      tests.push((c) => c.account_ids.includes(account));
    }
    if (relations.includes("user")) {
      const user = rnd.pick(users);
      query.push(`assigned_user_id=${user}`);
      tests.push((c) => c.assigned_user_id === user);
    }
    if (rnd.chance(relations.length ? 0.15 : 0.6)) {
      const needle = rnd.pick(["halfway", "NINTHLY", "rarely", "zed", "ly", "ann h"]);
      query.push(`full_name=${encodeURIComponent(needle)}`);
      tests.push((c) => fullName(c).includes(needle.toLowerCase()));
    }
    if (rnd.chance(0.3)) {
      const after = rnd.pick(times);
      query.push(`created_after=${after}`);
      tests.push((c) => Date.parse(c.created_at) > Date.parse(after));
    }
    if (rnd.chance(0.3)) {
      const after = rnd.pick(updates);
      query.push(`updated_after=${after}`);
      tests.push((c) => Date.parse(c.updated_at) > Date.parse(after));
    }
    const sortBy = rnd.pick(CONTACT_SORTS);
    const direction = rnd.pick(["asc", "desc"]);
    const perPage = rnd.pick([1, 3, 5, 10, 25]);
    const expected = orders.get(`${sortBy} ${direction}`)!.filter((c) => tests.every((meets) => meets(c)));
    const lastPage = Math.max(1, Math.ceil(expected.length / perPage));
    const list = `/public/v1/contacts?${[...query, `sort_by=${sortBy}`, `sort_direction=${direction}`, `per_page=${perPage}`].join("&")}`;
    const label = { round, list };
    if (rnd.chance(0.25)) {
      const walked: string[] = [];
      let cursor: string | null = null;
      do {
        const body: any = (await h.json("GET", `${list}${cursor ? `&cursor=${cursor}` : ""}`)).body;
        expect({ ...label, total: body.meta.total }).toEqual({ ...label, total: expected.length });
        walked.push(...body.data.map((c: Listed) => c.id));
        cursor = body.meta.next_cursor;
      } while (cursor);
      expect({ ...label, ids: walked }).toEqual({ ...label, ids: expected.map((c) => c.id) });
      continue;
    }
    const page = 1 + rnd.int(lastPage + 1);
    const body: any = (await h.json("GET", `${list}&page=${page}`)).body;
    expect({ ...label, page, total: body.meta.total, ids: body.data.map((c: Listed) => c.id) }).toEqual({
      ...label,
      page,
      total: expected.length,
      ids: expected.slice((page - 1) * perPage, page * perPage).map((c) => c.id),
    });
  }
});

test("a window of a relation whose entries are probed for the other filters slices its matches in its own order: only the page's contacts are read, beside an assigned user too", async () => {
  const cases: [string, ContactFilters][] = [
    ["a tag beside an account", { tags: ["half"], accountId: accounts[0]! }],
    ["a tag beside an assigned user", { tags: ["fifth"], assignedUserId: users[0]! }],
  ];
  for (const [name, filters] of cases) {
    const matches = await countContacts(h.rt.db, filters);
    const { db, captured } = capturing(h.rt.db);
    const rows = await listContacts(db, filters, { sortBy: "created_at", direction: "desc", cursor: null, limit: 3, offset: 3, matches });
    const read = captured.find((c) => c.sql.startsWith("SELECT c.id"))!;
    // the window's matches in order, 3 after 3 of them, then those 3 contacts sorted, none skipped
    expect({ name, inOrder: read.sql.includes("ORDER BY w.created_at DESC, w.id DESC LIMIT CAST(? AS INTEGER) OFFSET ?)"), slices: read.params.slice(-4), read: rows.length }).toEqual({ name, inOrder: true, slices: [3, 3, 3, 0], read: Math.min(3, matches - 3) });
  }
});
