import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createUser } from "../../server/users/service.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { postAccount } from "./support.ts";

// Contacts sorted by first_name or last_name come in the same order on SQLite and PostgreSQL: by
// each name's full case folding (the key accounts' names sort by), in code point order. Each group
// below is one key, the groups in their order; ties within a group go by id. This file runs on
// both backends against the same groups, so both answer alike.
const GROUPS: (string | null)[][] = [
  [null],
  [""],
  ["adam", "Adam"],
  ["Ea"],
  ["Emile"],
  ["İlker", "ilker", "ILKER"],
  ["ıra", "Ira"],
  ["Strauß", "STRAUSS", "strauss", "STRAUẞ"],
  ["Zoe"],
  ["éa"],
  ["Émile", "émile"],
  ["Ǆemal", "ǆemal", "ǅemal"],
  ["ΣΊΣΥΦΟΣ", "σίσυφος"],
];
const NAMES = GROUPS.flat();
const groupOf = (name: string | null) => GROUPS.findIndex((group) => group.includes(name));

type Named = { id: string; first_name: string | null; last_name: string | null };
type NameSort = "first_name" | "last_name";

let h: Harness;
let contacts: Named[] = [];
let account: { id: string };
let user: { id: string };

/** expectedOrder is the contacts' ids in a name sort: by the name's group, then by id; descending reverses both. */
function expectedOrder(sort: NameSort, direction: "asc" | "desc"): string[] {
  const sorted = [...contacts].sort((a, b) => groupOf(a[sort]) - groupOf(b[sort]) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return (direction === "asc" ? sorted : sorted.reverse()).map((contact) => contact.id);
}

/** walkByCursor reads a list three at a time, each page after the last one's next_cursor, and returns every id it was given, in order. */
async function walkByCursor(query: string): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | null = null;
  for (let pages = 0; pages < 100; pages++) {
    const res: { status: number; body: any } = await h.json("GET", `/public/v1/contacts?per_page=3&${query}${cursor ? `&cursor=${cursor}` : ""}`);
    expect(res.status).toBe(200);
    ids.push(...res.body.data.map((contact: Named) => contact.id));
    cursor = res.body.meta.next_cursor;
    if (!cursor) return ids;
  }
  throw new Error(`${query}: more than 100 pages`);
}

/** walkByPage reads a list three at a time by page number and returns every id it was given, in order. */
async function walkByPage(query: string): Promise<string[]> {
  const ids: string[] = [];
  for (let page = 1; ; page++) {
    const res = await h.json("GET", `/public/v1/contacts?per_page=3&page=${page}&${query}`);
    expect(res.status).toBe(200);
    ids.push(...res.body.data.map((contact: Named) => contact.id));
    if (page >= res.body.meta.last_page) return ids;
  }
}

/** expectEveryWalk walks every name sort, both directions, unfiltered and filtered by the tag, account and user all contacts share, by cursor and by page: each is the expected order, no contact skipped or repeated. */
async function expectEveryWalk(): Promise<void> {
  const walks: Record<string, string[]> = {};
  const expected: Record<string, string[]> = {};
  for (const sort of ["first_name", "last_name"] as const) {
    for (const direction of ["asc", "desc"] as const) {
      for (const filter of ["", "tag=everyone", `account_id=${account.id}`, `assigned_user_id=${user.id}`, "tag=everyone&tag=named"]) {
        const query = `sort_by=${sort}&sort_direction=${direction}${filter ? `&${filter}` : ""}`;
        walks[`cursor ${query}`] = await walkByCursor(query);
        walks[`page ${query}`] = await walkByPage(query);
        expected[`cursor ${query}`] = expected[`page ${query}`] = expectedOrder(sort, direction);
      }
    }
  }
  expect(walks).toEqual(expected);
}

beforeAll(async () => {
  h = await createHarness({ rateReadBurst: 100_000, rateWriteBurst: 10_000 });
  account = await postAccount(h, { name: "Everyone GmbH" });
  user = await createUser(h.rt.db, { name: "Owner", email: "owner@crm.test" });
  for (const [i, first] of NAMES.entries()) {
    const last = NAMES[(i * 5 + 3) % NAMES.length]!;
    const body = { first_name: first, last_name: last, email: `c${i}@example.com`, tags: ["everyone", "named"], account_ids: [account.id], assigned_user_id: user.id };
    const res = await h.json("POST", "/public/v1/contacts", { body });
    expect(res.status).toBe(201);
    contacts.push(res.body.data);
  }
});
afterAll(async () => await h.close());

describe("name sorts: one order on both backends", () => {
  test("created one by one: accents, ß and ẞ as ss, Turkish İ and ı as i, Greek case, titlecase Ǆ, empty and null names sort by their full case folding, ties by id, by cursor and by page, in the tag's, account's and user's lists too", async () => {
    await expectEveryWalk();
  });

  test("a rename moves the contact to its new name's place in every list: the keys follow an update, on its tag and account rows too", async () => {
    const renames: [number, Partial<Named>][] = [
      [NAMES.indexOf("Zoe"), { first_name: "ǅemal" }],
      [NAMES.indexOf("adam"), { first_name: null, last_name: "ẞtrauss" }],
      [NAMES.indexOf(null), { first_name: "ILKER", last_name: "" }],
    ];
    GROUPS[7]!.push("ẞtrauss");
    for (const [i, change] of renames) {
      const res = await h.json("PATCH", `/public/v1/contacts/${contacts[i]!.id}`, { body: change });
      expect(res.status).toBe(200);
      contacts[i] = res.body.data;
    }
    await expectEveryWalk();
  });

  test("a batch upsert keys the names it creates and changes", async () => {
    const res = await h.json("POST", "/public/v1/contacts/batch", {
      body: {
        items: [
          { email: "c1@example.com", first_name: "σίσυφος" },
          { email: "new@example.com", first_name: "éa", last_name: "İlker", tags: ["everyone", "named"], account_ids: [account.id], assigned_user_id: user.id },
        ],
      },
    });
    expect(res.body.data.map((item: { status: string }) => item.status)).toEqual(["updated", "created"]);
    for (const item of res.body.data as { id: string }[]) {
      const stored = await h.json("GET", `/public/v1/contacts/${item.id}`);
      const at = contacts.findIndex((contact) => contact.id === item.id);
      if (at < 0) contacts.push(stored.body.data);
      else contacts[at] = stored.body.data;
    }
    await expectEveryWalk();
  });
});
