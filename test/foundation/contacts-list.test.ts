import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash, randomBytes } from "node:crypto";
import { createApp } from "../../server/app.ts";
import { RenderedVersions } from "../../server/contacts/service.ts";
import { createUser } from "../../server/users/service.ts";
import { loadSecretsKey, SecretBox } from "../../server/webhooks/secrets.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { call, expectProblem, validation } from "./support.ts";

let h: Harness;
const all: any[] = [];

/** NOT_OURS is the refusal of a cursor that does not open for the list it is given to. */
const NOT_OURS = "is not a cursor from meta.next_cursor of this same list (same sort and filters), or is one from before the service was upgraded or its key replaced: read the list again from its first page";

// Names repeat, differ only by case, or are missing, so sorts meet ties and NULLs.
const FIRST = ["Ada", "ada", null, "Grace", "Alan", null, "Edsger", "Barbara", "Ada", "Linus"];
const LAST = ["Lovelace", null, "Hopper", "Turing", "Dijkstra", null, "Liskov", "Lovelace", "Torvalds", "Kay"];

beforeAll(async () => {
  // This file reads far more than a token's default burst of 200 in well under a second, and
  // writes about as many as its write burst of 100: a clean-up refused 429 would leave a contact behind.
  h = await createHarness({ rateReadBurst: 10_000, rateWriteBurst: 10_000 });
  for (let i = 0; i < 30; i++) {
    const body: Record<string, unknown> = {
      first_name: FIRST[i % FIRST.length],
      last_name: LAST[(i * 3) % LAST.length],
      email: i % 4 === 0 ? null : `person${i % 9}@Example.com`,
    };
    const res = await h.json("POST", "/public/v1/contacts", { body });
    expect(res.status).toBe(201);
    all.push(res.body.data);
    // Several contacts share a millisecond (ties on created_at), some do not.
    if (i % 5 === 0) await Bun.sleep(2);
  }
  // Touch some contacts so updated_at differs from created_at and ties differently.
  for (const i of [3, 7, 11, 19, 27]) {
    await Bun.sleep(2);
    const res = await h.json("PATCH", `/public/v1/contacts/${all[i].id}`, { body: { phone: `+1 555 01${i}` } });
    all[i] = res.body.data;
  }
});
afterAll(async () => await h.close());

type Sort = "created_at" | "updated_at" | "first_name" | "last_name" | "email";
const SORTS: Sort[] = ["created_at", "updated_at", "first_name", "last_name", "email"];

/** expectedOrder sorts like SQLite: NULL first, NOCASE names, binary email, ties by id. */
function expectedOrder(sort: Sort, direction: "asc" | "desc"): string[] {
  const key = (c: any): string | null => {
    const v = c[sort];
    if (v === null) return null;
    return sort === "first_name" || sort === "last_name" ? v.toLowerCase() : v;
  };
  const cmp = (a: any, b: any) => {
    const ka = key(a);
    const kb = key(b);
    let r = 0;
    if (ka === null && kb !== null) r = -1;
    else if (ka !== null && kb === null) r = 1;
    else if (ka !== null && kb !== null) r = ka < kb ? -1 : ka > kb ? 1 : 0;
    if (r === 0) r = a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
    return direction === "asc" ? r : -r;
  };
  return [...all].sort(cmp).map((c) => c.id);
}

describe("contact list: happy paths", () => {
  test("default list: newest first, 25 per page, meta with next_cursor", async () => {
    const res = await h.json("GET", "/public/v1/contacts");
    expect(res.status).toBe(200);
    expect(res.body.data.map((c: any) => c.id)).toEqual(expectedOrder("created_at", "desc").slice(0, 25));
    expect(res.body.meta).toEqual({ current_page: 1, last_page: 2, per_page: 25, total: 30, next_cursor: expect.any(String) });
    const byId = new Map(all.map((c) => [c.id, c]));
    for (const c of res.body.data) expect(c).toEqual(byId.get(c.id));
  });

  test("page and per_page pick a slice; past the end is an empty page", async () => {
    const res = await h.json("GET", "/public/v1/contacts?page=2&per_page=10&sort_by=created_at&sort_direction=asc");
    expect(res.body.data.map((c: any) => c.id)).toEqual(expectedOrder("created_at", "asc").slice(10, 20));
    expect(res.body.meta).toEqual({ current_page: 2, last_page: 3, per_page: 10, total: 30, next_cursor: expect.any(String) });
    const past = await h.json("GET", "/public/v1/contacts?page=9&per_page=10");
    expect(past.status).toBe(200);
    expect(past.body).toEqual({ data: [], meta: { current_page: 9, last_page: 3, per_page: 10, total: 30, next_cursor: null } });
    const edge = await h.json("GET", "/public/v1/contacts?per_page=100");
    expect(edge.body.data.length).toBe(30);
    expect(edge.body.meta).toEqual({ current_page: 1, last_page: 1, per_page: 100, total: 30, next_cursor: null });
    const one = await h.json("GET", "/public/v1/contacts?per_page=1");
    expect(one.body.meta).toEqual({ current_page: 1, last_page: 30, per_page: 1, total: 30, next_cursor: expect.any(String) });
  });

  for (const sort of SORTS) {
    for (const direction of ["asc", "desc"] as const) {
      test(`paging 7 at a time by ${sort} ${direction} sees every contact once, by page and by cursor`, async () => {
        const expected = expectedOrder(sort, direction);
        const byPage: string[] = [];
        for (let page = 1; page <= 5; page++) {
          const res = await h.json("GET", `/public/v1/contacts?per_page=7&page=${page}&sort_by=${sort}&sort_direction=${direction}`);
          expect(res.status).toBe(200);
          expect(res.body.meta.current_page).toBe(page);
          expect(res.body.meta.last_page).toBe(5);
          expect(res.body.meta.total).toBe(30);
          byPage.push(...res.body.data.map((c: any) => c.id));
        }
        expect(byPage).toEqual(expected);

        const byCursor: string[] = [];
        let cursor: string | null = null;
        let pages = 0;
        do {
          const q: string = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
          const res = await h.json("GET", `/public/v1/contacts?per_page=7&sort_by=${sort}&sort_direction=${direction}${q}`);
          expect(res.status).toBe(200);
          expect(res.body.meta.current_page).toBe(cursor ? 0 : 1);
          byCursor.push(...res.body.data.map((c: any) => c.id));
          cursor = res.body.meta.next_cursor;
          pages++;
        } while (cursor && pages < 10);
        expect(byCursor).toEqual(expected);
        expect(new Set(byCursor).size).toBe(30);
      });
    }
  }

  test("meta.total counts every match on any page: a last page, a page past the end, a cursor's short page, a filtered page", async () => {
    const last = await h.json("GET", "/public/v1/contacts?page=5&per_page=7&sort_by=created_at&sort_direction=asc");
    expect(last.body.data.map((c: any) => c.id)).toEqual(expectedOrder("created_at", "asc").slice(28));
    expect(last.body.meta).toEqual({ current_page: 5, last_page: 5, per_page: 7, total: 30, next_cursor: null });
    const first = await h.json("GET", "/public/v1/contacts?per_page=28&sort_by=created_at&sort_direction=asc");
    const byCursor = await h.json("GET", `/public/v1/contacts?per_page=28&sort_by=created_at&sort_direction=asc&cursor=${first.body.meta.next_cursor}`);
    expect(byCursor.body.data.map((c: any) => c.id)).toEqual(expectedOrder("created_at", "asc").slice(28));
    expect(byCursor.body.meta).toEqual({ current_page: 0, last_page: 2, per_page: 28, total: 30, next_cursor: null });
    const email = "person3@example.com";
    const matches = all.filter((c) => c.email === email).length;
    expect(matches).toBeGreaterThan(1);
    for (const page of [1, matches, matches + 1]) {
      const res = await h.json("GET", `/public/v1/contacts?email=${encodeURIComponent(email)}&per_page=1&page=${page}`);
      expect(res.body.meta.total).toBe(matches);
    }
  });

  test("a last page that is exactly full has no next_cursor, by page and by cursor: no empty page to fetch after it", async () => {
    const order = expectedOrder("created_at", "asc");
    const whole = await h.json("GET", "/public/v1/contacts?per_page=30&sort_by=created_at&sort_direction=asc");
    const lastByPage = await h.json("GET", "/public/v1/contacts?page=3&per_page=10&sort_by=created_at&sort_direction=asc");
    expect([whole.body.meta.next_cursor, lastByPage.body.data.map((c: any) => c.id), lastByPage.body.meta.next_cursor]).toEqual([null, order.slice(20), null]);
    const seen: string[] = [];
    let cursor: string | null = "";
    let pages = 0;
    while (cursor !== null) {
      const res: { body: any } = await h.json("GET", `/public/v1/contacts?per_page=10&sort_by=created_at&sort_direction=asc${cursor ? `&cursor=${cursor}` : ""}`);
      seen.push(...res.body.data.map((c: any) => c.id));
      cursor = res.body.meta.next_cursor;
      pages++;
    }
    expect({ pages, seen }).toEqual({ pages: 3, seen: order });
  });

  test("email filter is exact and case-insensitive", async () => {
    const want = all.filter((c) => c.email === "person3@example.com").map((c) => c.id).sort().reverse();
    expect(want.length).toBeGreaterThan(1);
    for (const email of ["person3@example.com", "PERSON3@EXAMPLE.COM", "Person3@Example.Com"]) {
      const res = await h.json("GET", `/public/v1/contacts?email=${encodeURIComponent(email)}`);
      expect(res.body.data.map((c: any) => c.id)).toEqual(want);
      expect(res.body.meta).toEqual({ current_page: 1, last_page: 1, per_page: 25, total: want.length, next_cursor: null });
    }
    for (const email of ["person3@example", "erson3@example.com", "person3@example.com "]) {
      const res = await h.json("GET", `/public/v1/contacts?email=${encodeURIComponent(email)}`);
      expect(res.body).toEqual({ data: [], meta: { current_page: 1, last_page: 1, per_page: 25, total: 0, next_cursor: null } });
    }
  });

  test("full_name filter is a case-insensitive substring, short needles included", async () => {
    const match = (needle: string) =>
      all
        .filter((c) => c.full_name.toLowerCase().includes(needle.toLowerCase()))
        .map((c) => c.id)
        .sort()
        .reverse();
    for (const needle of ["lovelace", "ADA LOVE", "a", "Ad", "e T", "ra", "Kay", "zzz", " "]) {
      const res = await h.json("GET", `/public/v1/contacts?per_page=100&full_name=${encodeURIComponent(needle)}`);
      expect(res.status).toBe(200);
      expect(res.body.data.map((c: any) => c.id)).toEqual(match(needle));
      expect(res.body.meta.total).toBe(match(needle).length);
    }
  });

  test("full_name filter finds a substring of the full_name returned, its names' outer spaces included, after a create and after a rename", async () => {
    const odd = [];
    for (const [first, last] of [[" Lead", "Smith"], ["Trail ", null], ["Ann", "Lee  "], [null, "  Solo"]]) {
      odd.push((await h.json("POST", "/public/v1/contacts", { body: { first_name: first, last_name: last } })).body.data);
    }
    const found = async (needle: string) => (await h.json("GET", `/public/v1/contacts?per_page=100&full_name=${encodeURIComponent(needle)}`)).body.data.map((c: any) => c.full_name);
    try {
      const created = [[" Lead", " Lead Smith"], [" lead smith", " Lead Smith"], ["Trail ", "Trail "], ["l ", "Trail "], ["Lee  ", "Ann Lee  "], ["e  ", "Ann Lee  "], ["  Solo", "  Solo"], ["  s", "  Solo"]] as const;
      for (const [needle, want] of created) expect({ needle, found: await found(needle) }).toEqual({ needle, found: [want] });
      // a rename of a contact already in the search index
      await h.json("PATCH", `/public/v1/contacts/${odd[0].id}`, { body: { first_name: "Lead", last_name: "Smith " } });
      for (const [needle, want] of [[" Lead", []], ["Smith ", ["Lead Smith "]], ["h ", ["Lead Smith "]]] as const) expect({ needle, found: await found(needle) }).toEqual({ needle, found: [...want] });
    } finally {
      for (const c of odd) await h.request("DELETE", `/public/v1/contacts/${c.id}`);
    }
  });

  test("full_name needles with % and _ match them literally", async () => {
    const odd = [];
    for (const [first, last] of [["50%", "Off"], ["snake_case", "Name"], ["Plain", "Person"]]) {
      odd.push((await h.json("POST", "/public/v1/contacts", { body: { first_name: first, last_name: last } })).body.data.id);
    }
    try {
      for (const [needle, want] of [["%", [odd[0]]], ["0%", [odd[0]]], ["50% o", [odd[0]]], ["_", [odd[1]]], ["e_c", [odd[1]]], ["snake_c", [odd[1]]], ["%_", []]] as const) {
        const res = await h.json("GET", `/public/v1/contacts?per_page=100&full_name=${encodeURIComponent(needle)}`);
        expect({ needle, ids: res.body.data.map((c: any) => c.id) }).toEqual({ needle, ids: [...want] });
      }
    } finally {
      for (const id of odd) await h.request("DELETE", `/public/v1/contacts/${id}`);
    }
  });

  test("full_name filter folds case beyond ASCII and takes quotes and operators literally", async () => {
    const odd = [];
    for (const [first, last] of [["Élodie", "Durand"], ["ÖDÖN", "Straße"], ['Quote "Q"', "Man"], ["a*b", "(c) -d: OR e"]]) {
      odd.push((await h.json("POST", "/public/v1/contacts", { body: { first_name: first, last_name: last } })).body.data.id);
    }
    try {
      for (const [needle, want] of [["élo", [odd[0]]], ["ÉLODIE D", [odd[0]]], ["él", [odd[0]]], ["É", [odd[0]]], ["ödön", [odd[1]]], ["öd", [odd[1]]], ["STRAßE", [odd[1]]], ['"q"', [odd[2]]], ['"', [odd[2]]], ["a*b", [odd[3]]], ["-d: OR", [odd[3]]], ["(c)", [odd[3]]], ["OR e", [odd[3]]]] as const) {
        const res = await h.json("GET", `/public/v1/contacts?per_page=100&full_name=${encodeURIComponent(needle)}`);
        expect({ needle, ids: res.body.data.map((c: any) => c.id) }).toEqual({ needle, ids: [...want] });
      }
    } finally {
      for (const id of odd) await h.request("DELETE", `/public/v1/contacts/${id}`);
    }
  });

  test("full_name needles of any length match a letter by its lowercase: ǅ finds Ǆ and ǆ, ß finds ẞ, ı does not find I", async () => {
    const names = ["Straße", "ẞig", "ßig", "SSig", "ıx", "Ix", "ſx", "Sx", "µx", "Μx", "ǅemal", "ǆemal", "Ǆemal", "ᾈx", "ᾀx", "\u2126hm", "ωx", "Kö", "\u212Aö", "Kx", "\u212Ax"];
    const ids = new Map<string, string>();
    for (const name of names) ids.set(name, (await h.json("POST", "/public/v1/contacts", { body: { first_name: name } })).body.data.id);
    try {
      const found = async (needle: string) => {
        const res = await h.json("GET", `/public/v1/contacts?per_page=100&full_name=${encodeURIComponent(needle)}`);
        const byId = new Map([...ids].map(([name, id]) => [id, name]));
        return res.body.data.map((c: { id: string }) => byId.get(c.id) ?? c.id).sort();
      };
      const cases: [string, string[]][] = [
        ["ß", ["Straße", "ßig", "ẞig"]],
        ["ẞi", ["ßig", "ẞig"]],
        ["ßig", ["ßig", "ẞig"]],
        ["ı", ["ıx"]],
        ["ıx", ["ıx"]],
        ["ſ", ["ſx"]],
        ["µ", ["µx"]],
        ["Μ", ["Μx"]],
        ["ǅ", ["Ǆemal", "ǅemal", "ǆemal"]],
        ["ǅe", ["Ǆemal", "ǅemal", "ǆemal"]],
        ["ǅem", ["Ǆemal", "ǅemal", "ǆemal"]],
        ["ᾈ", ["ᾀx", "ᾈx"]],
        ["ω", ["ωx", "\u2126hm"]],
        ["\u2126h", ["\u2126hm"]],
        ["kö", ["Kö", "\u212Aö"]],
        ["kx", ["Kx", "\u212Ax"]],
      ];
      for (const [needle, want] of cases) expect({ needle, found: await found(needle) }).toEqual({ needle, found: [...want].sort() });
    } finally {
      for (const id of ids.values()) await h.request("DELETE", `/public/v1/contacts/${id}`);
    }
  });

  test("created_after and updated_after take RFC 3339 and are exclusive", async () => {
    const sorted = [...all].sort((a, b) => (a.created_at < b.created_at ? -1 : a.created_at > b.created_at ? 1 : 0));
    const pivot = sorted[14].created_at;
    const want = all.filter((c) => c.created_at > pivot).map((c) => c.id).sort().reverse();
    const res = await h.json("GET", `/public/v1/contacts?per_page=100&created_after=${pivot}`);
    expect(res.body.data.map((c: any) => c.id)).toEqual(want);
    // the same instant written with an offset
    const ms = Date.parse(pivot);
    const offset = new Date(ms + 2 * 3600_000).toISOString().replace("Z", "+02:00");
    const res2 = await h.json("GET", `/public/v1/contacts?per_page=100&created_after=${encodeURIComponent(offset)}`);
    expect(res2.body.data.map((c: any) => c.id)).toEqual(want);
    // with more fraction digits than the milliseconds kept (RFC 3339 allows any number): cut to the millisecond, up to the parameter's 64 characters
    for (const digits of ["1234567891", "9".repeat(40)]) {
      const finer = `${pivot.slice(0, -1)}${digits}Z`;
      const res3 = await h.json("GET", `/public/v1/contacts?per_page=100&created_after=${finer}`);
      expect({ finer, status: res3.status, ids: res3.body.data?.map((c: any) => c.id) }).toEqual({ finer, status: 200, ids: want });
    }

    const touched = [3, 7, 11, 19, 27].map((i) => all[i]);
    const firstTouch = touched.map((c) => c.updated_at).sort()[0];
    const before = new Date(Date.parse(firstTouch) - 1).toISOString();
    const upd = await h.json("GET", `/public/v1/contacts?per_page=100&updated_after=${before}&sort_by=updated_at&sort_direction=asc`);
    expect(upd.body.data.map((c: any) => c.id)).toEqual(all.filter((c) => c.updated_at > before).sort((a, b) => (a.updated_at < b.updated_at ? -1 : a.updated_at > b.updated_at ? 1 : a.id < b.id ? -1 : 1)).map((c) => c.id));
    expect(upd.body.data.length).toBeGreaterThanOrEqual(5);
  });

  test("an offset's + sent unencoded, which a query string decodes to a space, is read as +, by every time filter; a cursor from one spelling pages on under the other", async () => {
    const pivot = Date.parse([...all].map((c) => c.created_at).sort()[14]);
    const offset = new Date(pivot + 5.5 * 3600_000).toISOString().replace("Z", "+05:30");
    const lists = ["contacts?created_after=", "contacts?updated_after=", "accounts?created_after=", "accounts?updated_after=", "users?updated_after=", "contacts/deleted?since=", "webhook-deliveries?created_after="];
    for (const list of lists) {
      const encoded = await h.json("GET", `/public/v1/${list}${encodeURIComponent(offset)}`);
      const unencoded = await h.json("GET", `/public/v1/${list}${offset}`);
      expect([list, unencoded.status, unencoded.body]).toEqual([list, 200, encoded.body]);
    }

    // After the pivot, in the list's order: created_at, then id.
    const after = all.filter((c) => Date.parse(c.created_at) > pivot).sort((a, b) => (a.created_at < b.created_at ? -1 : a.created_at > b.created_at ? 1 : a.id < b.id ? -1 : 1));
    const page = (spelling: string, cursor = "") => h.json("GET", `/public/v1/contacts?per_page=3&sort_by=created_at&sort_direction=asc&created_after=${spelling}${cursor && `&cursor=${encodeURIComponent(cursor)}`}`);
    for (const [firstSpelling, nextSpelling] of [[offset, encodeURIComponent(offset)], [encodeURIComponent(offset), offset]]) {
      const first = await page(firstSpelling!);
      const next = await page(nextSpelling!, first.body.meta.next_cursor);
      expect([next.status, next.body.data?.map((c: any) => c.id)]).toEqual([200, after.slice(3, 6).map((c) => c.id)]);
    }

    // A space anywhere else is no offset's sign: still 422.
    for (const wrong of ["2026-11-21 10:00:00Z", "2026-11-21T10:00:00 0530", "2026-11-21T10:00:00  05:30", "2026-11-21T10:00:00 05:30 "]) {
      expect([wrong, (await h.json("GET", `/public/v1/contacts?updated_after=${encodeURIComponent(wrong)}`)).status]).toEqual([wrong, 422]);
    }
  });

  test("filters combine, and a cursor pages through a filtered list", async () => {
    const want = all.filter((c) => c.email === "person1@example.com" && c.full_name.toLowerCase().includes("a")).map((c) => c.id).sort();
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const q: string = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
      const res = await h.json("GET", `/public/v1/contacts?per_page=1&sort_by=created_at&sort_direction=asc&email=person1@example.com&full_name=a${q}`);
      expect(res.body.meta.total).toBe(want.length);
      seen.push(...res.body.data.map((c: any) => c.id));
      cursor = res.body.meta.next_cursor;
    } while (cursor);
    expect(seen).toEqual(want);
  });

  test("a next_cursor is accepted whatever the filters: 30 tags of 100 characters, or a 200-character name filter and sort, page to the end", async () => {
    const tags = Array.from({ length: 30 }, (_, i) => String(i).padStart(2, "0").padEnd(100, "x"));
    // a control character is 6 bytes of JSON: the longest sort value a 200-character name makes
    const name = "\u0001".repeat(200);
    const made: string[] = [];
    for (let i = 0; i < 3; i++) made.push((await h.json("POST", "/public/v1/contacts", { body: { first_name: name, tags } })).body.data.id);
    try {
      // each page: its status, its contacts, and whether its next_cursor is within the README's 1,687 characters
      const walk = async (list: string) => {
        const pages: { status: number; ids: string[]; short: boolean }[] = [];
        let cursor: string | null = null;
        do {
          const res: any = await h.json("GET", `${list}&per_page=1${cursor ? `&cursor=${cursor}` : ""}`);
          cursor = res.body.meta?.next_cursor ?? null;
          pages.push({ status: res.status, ids: res.body.data?.map((c: any) => c.id), short: (cursor ?? "").length <= 1687 });
        } while (cursor);
        return pages;
      };
      const pages = (ids: string[]) => ids.map((id) => ({ status: 200, ids: [id], short: true }));
      expect(await walk(`/public/v1/contacts?tag=${tags.join(",")}&sort_direction=asc`)).toEqual(pages(made));
      expect(await walk(`/public/v1/contacts?full_name=${encodeURIComponent(name)}&sort_by=first_name`)).toEqual(pages([...made].reverse()));
      // the cursor still belongs to its filters: the same list less one tag refuses it
      const first = await h.json("GET", `/public/v1/contacts?tag=${tags.join(",")}&per_page=1`);
      const fewer = await h.json("GET", `/public/v1/contacts?tag=${tags.slice(1).join(",")}&per_page=1&cursor=${first.body.meta.next_cursor}`);
      expect(fewer.body).toEqual(validation([{ parameter: "cursor", detail: NOT_OURS }]));
    } finally {
      for (const id of made) await h.request("DELETE", `/public/v1/contacts/${id}`);
    }
  });

  test("include embeds accounts, assigned_user and assigned_users", async () => {
    const u1 = await createUser(h.rt.db, { name: "Owner One", email: "one@crm.test" });
    const u2 = await createUser(h.rt.db, { name: "Owner Two", email: "two@crm.test" });
    const acc = (await h.json("POST", "/public/v1/accounts", { body: { name: "Acme", domain: "acme.test" } })).body.data;
    const created = await h.json("POST", "/public/v1/contacts", {
      body: { first_name: "Incl", account_ids: [acc.id], assigned_user_id: u2.id, assigned_user_ids: [u2.id, u1.id] },
    });
    const id = created.body.data.id;
    try {
      const res = await h.json("GET", `/public/v1/contacts?per_page=1&include=accounts,assigned_user,assigned_users`);
      expect(res.body.data).toEqual([{ ...created.body.data, accounts: [acc], assigned_user: u2, assigned_users: [u2, u1] }]);
      const one = await h.json("GET", `/public/v1/contacts/${id}?include=assigned_user`);
      expect(one.body).toEqual({ data: { ...created.body.data, assigned_user: u2 } });
      const none = await h.json("GET", `/public/v1/contacts?per_page=2&include=assigned_user,accounts`);
      expect(none.body.data[1].assigned_user).toBeNull();
      expect(none.body.data[1].accounts).toEqual([]);
      expect("assigned_users" in none.body.data[1]).toBe(false);
    } finally {
      await h.request("DELETE", `/public/v1/contacts/${id}`);
    }
  });

  test("a list page is byte for byte the single-contact bodies, further properties and includes in place, as application/json", async () => {
    const u = await createUser(h.rt.db, { name: "Bytes Owner", email: "bytes@crm.test" });
    const acc = (await h.json("POST", "/public/v1/accounts", { body: { name: "Bytes Ltd" } })).body.data;
    const created = await h.json("POST", "/public/v1/contacts", {
      body: { first_name: "Bytes", tags: ["x"], consent: { email: true }, zeta: { deep: [1, null] }, alpha: "\u2028é\"", "10": 1, account_ids: [acc.id], assigned_user_ids: [u.id] },
    });
    const id = created.body.data.id;
    try {
      const include = "include=assigned_users,accounts,assigned_user";
      const list = await h.request("GET", `/public/v1/contacts?per_page=2&${include}`);
      expect(list.status).toBe(200);
      expect(list.headers.get("content-type")).toBe("application/json;charset=utf-8");
      const text = await list.text();
      const page = JSON.parse(text);
      // The single-contact route still goes through Elysia's own serialisation and validation.
      const singles = await Promise.all(page.data.map(async (c: any) => (await h.request("GET", `/public/v1/contacts/${c.id}?${include}`)).text()));
      expect(singles.length).toBe(2);
      expect(text).toBe(`{"data":[${singles.map((one) => one.slice('{"data":'.length, -1)).join(",")}],"meta":${JSON.stringify(page.meta)}}`);
      expect(Object.keys(page.data[0])).toEqual(["10", "id", "first_name", "last_name", "full_name", "email", "phone", "external_id", "tags", "custom_fields", "consent", "account_ids", "assigned_user_id", "assigned_user_ids", "zeta", "alpha", "accounts", "assigned_user", "assigned_users", "version", "created_at", "updated_at"]);
    } finally {
      await h.request("DELETE", `/public/v1/contacts/${id}`);
    }
  });
});

describe("contact list: never a stale contact", () => {
  test("after every kind of change the listed contact is the one GET /contacts/:id answers, byte for byte", async () => {
    const own = await createHarness();
    try {
      const created = (await own.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", email: "ada@example.com", tags: ["a"] } })).body.data;
      const account = (await own.json("POST", "/public/v1/accounts", { body: { name: "Acme" } })).body.data;
      const listed = async () => {
        const res = await own.app.handle(new Request("http://localhost/public/v1/contacts?email=ada%40example.com", { headers: { authorization: `Bearer ${own.token}` } }));
        return (await res.text()).match(/^\{"data":\[(.*)\],"meta":/)![1];
      };
      const single = async () => (await (await own.app.handle(new Request(`http://localhost/public/v1/contacts/${created.id}`, { headers: { authorization: `Bearer ${own.token}` } }))).text()).match(/^\{"data":(.*)\}$/)![1];
      const changes: [string, () => Promise<unknown>][] = [
        ["a PATCH", () => own.json("PATCH", `/public/v1/contacts/${created.id}`, { body: { first_name: "Ada B.", custom_fields: { plan: "pro" } } })],
        ["a tag added", () => own.json("POST", `/public/v1/contacts/${created.id}/tags`, { body: { tag: "b" } })],
        ["a tag removed", () => own.json("DELETE", `/public/v1/contacts/${created.id}/tags/a`)],
        ["an account linked", () => own.json("POST", `/public/v1/contacts/${created.id}/accounts`, { body: { account_id: account.id } })],
        ["the account deleted", () => own.json("DELETE", `/public/v1/accounts/${account.id}`)],
      ];
      expect(await listed()).toBe(await single());
      for (const [what, change] of changes) {
        const before = await listed();
        await change();
        const after = await listed();
        expect({ what, changed: after !== before }).toEqual({ what, changed: true });
        expect(after).toBe(await single());
      }
    } finally {
      await own.close();
    }
  });
});

describe("contact list: errors", () => {
  const parameterError = (parameter: string, detail: string) => validation([{ parameter, detail }]);

  test("per_page outside 1..100 or not a number names the parameter", async () => {
    for (const value of ["0", "101", "abc", "-1", "1.5", "", "007", "1e2"]) {
      const res = await h.json("GET", `/public/v1/contacts?per_page=${value}`);
      expect({ value, body: res.body }).toEqual({ value, body: parameterError("per_page", "must be a whole number from 1 to 100") });
    }
  });

  test("page below 1, past 999999999 or not a number names the parameter and its range", async () => {
    for (const value of ["0", "-3", "x", "1.0", "1000000000"]) {
      const res = await h.json("GET", `/public/v1/contacts?page=${value}`);
      expect({ value, body: res.body }).toEqual({ value, body: parameterError("page", "must be a whole number from 1 to 999999999") });
    }
  });

  test("unknown sort_by, sort_direction or include are 422", async () => {
    for (const value of ["phone", "id", "properties", "toString", "(SELECT 1)", "email DESC", "created_at\n"]) {
      const res = await h.json("GET", `/public/v1/contacts?sort_by=${encodeURIComponent(value)}`);
      expect(res.body).toEqual(parameterError("sort_by", "must be one of: created_at, updated_at, first_name, last_name, email"));
    }
    for (const value of ["up", "ASC", ""]) {
      const res = await h.json("GET", `/public/v1/contacts?sort_direction=${value}`);
      expect(res.body).toEqual(parameterError("sort_direction", "must be asc or desc"));
    }
    for (const value of ["owner", "accounts,", "accounts,,assigned_user", ""]) {
      const res = await h.json("GET", `/public/v1/contacts?include=${value}`);
      expect(res.body).toEqual(parameterError("include", "must be a comma-separated list of: accounts, assigned_user, assigned_users"));
    }
  });

  test("created_after and updated_after that are not RFC 3339 are 422", async () => {
    for (const name of ["created_after", "updated_after"]) {
      for (const value of ["yesterday", "2026-01-01", "2026-01-01 10:00:00Z", "1700000000", "2026-13-01T00:00:00Z", "2026-01-01T00:00:00"]) {
        const res = await h.json("GET", `/public/v1/contacts?${name}=${encodeURIComponent(value)}`);
        expect({ value, body: res.body }).toEqual({ value, body: parameterError(name, "must be an RFC 3339 date-time, e.g. 2026-11-21T10:00:00Z") });
      }
    }
  });

  test("an empty email or full_name filter is 422, not a search for nothing", async () => {
    for (const [name, max] of [["email", 254], ["full_name", 200]] as const) {
      const res = await h.json("GET", `/public/v1/contacts?${name}=`);
      expect({ name, status: res.status, body: res.body }).toEqual({ name, status: 422, body: parameterError(name, `must be 1 to ${max} characters`) });
    }
  });

  test("an unknown parameter is 422 naming it", async () => {
    const res = await h.json("GET", "/public/v1/contacts?limit=5");
    expectProblem(res, 422, "validation");
    expect(res.body).toEqual(
      parameterError("limit", "is not a parameter of this list; known: page, per_page, sort_by, sort_direction, cursor, email, full_name, created_after, updated_after, account_id, tag, assigned_user_id, include"),
    );
  });

  test("a parameter given more than once is 422 naming it, even with the same value twice", async () => {
    const once = (...names: string[]) => validation(names.map((parameter) => ({ parameter, detail: "must be given once" })));
    expect((await h.json("GET", "/public/v1/contacts?page=1&page=2")).body).toEqual(once("page"));
    expect((await h.json("GET", "/public/v1/contacts?per_page=5&sort_by=email&per_page=5")).body).toEqual(once("per_page"));
    expect((await h.json("GET", "/public/v1/contacts?pag%65=1&page=2")).body).toEqual(once("page"));
    expect((await h.json("GET", "/public/v1/contacts?include=accounts&email=a@b.c&include=assigned_user&email=a@b.c")).body).toEqual(once("include", "email"));
    const res = await h.json("GET", `/public/v1/contacts/${all[0].id}?include=accounts&include=assigned_user`);
    expectProblem(res, 422, "validation");
    expect(res.body).toEqual(once("include"));
  });

  test("cursor with page, tampered, forged, or from another sort or filter is 422", async () => {
    const first = await h.json("GET", "/public/v1/contacts?per_page=5&sort_by=email");
    const cursor = first.body.meta.next_cursor as string;
    const last = first.body.data[4];
    const bad = (detail: string) => parameterError("cursor", detail);
    expect((await h.json("GET", `/public/v1/contacts?per_page=5&sort_by=email&page=2&cursor=${cursor}`)).body).toEqual(bad("cannot be combined with page"));
    expect((await h.json("GET", `/public/v1/contacts?per_page=5&sort_by=first_name&cursor=${cursor}`)).body).toEqual(bad(NOT_OURS));
    expect((await h.json("GET", `/public/v1/contacts?per_page=5&sort_by=email&sort_direction=asc&cursor=${cursor}`)).body).toEqual(bad(NOT_OURS));
    expect((await h.json("GET", `/public/v1/contacts?per_page=5&sort_by=email&email=x@y.z&cursor=${cursor}`)).body).toEqual(bad(NOT_OURS));
    // What a client can make: the clear form cursors had before they were sealed (sort, direction,
    // the unkeyed digest of the filters, the last row's sort value and id), true or not; a real one with a byte changed.
    const clear = (parts: unknown[]) => Buffer.from(JSON.stringify(parts)).toString("base64url");
    const noFilters = createHash("sha256").update("\u0000".repeat(6)).digest("base64url");
    const sealed = Buffer.from(cursor, "base64url");
    const changed = (at: number) => Buffer.from(sealed.map((byte, i) => (i === at ? byte ^ 1 : byte))).toString("base64url");
    for (const tampered of [
      clear(["email", "desc", noFilters, last.email, last.id]),
      clear(["email", "desc", noFilters, last.email, 42]),
      clear(["email", "desc", noFilters, { $gt: 1 }, last.id]),
      clear(["email", "desc", noFilters, last.email]),
      Buffer.from("not json").toString("base64url"),
      "!!!",
      cursor.slice(0, -3),
      changed(0),
      changed(20),
      changed(sealed.length - 1),
    ]) {
      const res = await h.json("GET", `/public/v1/contacts?per_page=5&sort_by=email&cursor=${encodeURIComponent(tampered)}`);
      expect({ tampered, body: res.body }).toEqual({ tampered, body: bad(NOT_OURS) });
    }
  });

  test("a text filter shaped like a time with a space before its offset is its own filter for a cursor: only time filters read that space as a +", async () => {
    const spaced = "2026-11-21T10:00:00 05:30";
    const made = [];
    for (let i = 0; i < 2; i++) made.push((await h.json("POST", "/public/v1/contacts", { body: { first_name: spaced } })).body.data);
    try {
      const first = await h.json("GET", `/public/v1/contacts?per_page=1&full_name=${encodeURIComponent(spaced)}`);
      const cursor = encodeURIComponent(first.body.meta.next_cursor);
      const next = await h.json("GET", `/public/v1/contacts?per_page=1&full_name=${encodeURIComponent(spaced)}&cursor=${cursor}`);
      expect([next.status, next.body.data.length]).toEqual([200, 1]);
      const plus = await h.json("GET", `/public/v1/contacts?per_page=1&full_name=${encodeURIComponent(spaced.replace(" ", "+"))}&cursor=${cursor}`);
      expect(plus.body).toEqual(parameterError("cursor", NOT_OURS));
    } finally {
      for (const contact of made) expect((await h.json("DELETE", `/public/v1/contacts/${contact.id}`)).status).toBe(204);
    }
  });
});

describe("contact list: security", () => {
  test("a list needs a token", async () => {
    expectProblem(await h.json("GET", "/public/v1/contacts", { headers: { authorization: "" } }), 401, "unauthorized");
  });

  test("filter values are data, never SQL", async () => {
    for (const q of ["email=' OR 1=1 --", "full_name=' OR 1=1 --", "full_name=%25", "email=%25"]) {
      const res = await h.json("GET", `/public/v1/contacts?${q.replaceAll(" ", "%20")}`);
      expect(res.status).toBe(200);
      expect(res.body.meta.total).toBe(0);
    }
    expect((await h.json("GET", "/public/v1/contacts")).body.meta.total).toBe(30);
  });

  test("a cursor shows nothing of the row it ends on nor of the filters: no email, no name, no unkeyed digest to confirm a guessed email with", async () => {
    const accounts = [];
    for (const suffix of ["Holdings", "Trading"]) accounts.push((await h.json("POST", "/public/v1/accounts", { body: { name: `Zygmunt Vexhollow ${suffix}`, domain: `zz-vexhollow-${suffix.toLowerCase()}.example` } })).body.data);
    try {
      // shows tells whether `text` can be read in a cursor, as it is or base64url-decoded, in any case.
      const shows = (cursor: string, text: string) => [cursor, Buffer.from(cursor, "base64url").toString("utf8")].some((form) => form.toLowerCase().includes(text.toLowerCase()));
      const lists = [
        "/public/v1/contacts?sort_by=email&sort_direction=desc",
        "/public/v1/contacts?sort_by=first_name&sort_direction=desc",
        "/public/v1/contacts?sort_by=last_name&sort_direction=desc",
        "/public/v1/contacts?email=person1@example.com",
        "/public/v1/accounts?sort_by=name&sort_direction=desc",
        "/public/v1/accounts?sort_by=domain&sort_direction=desc",
      ];
      for (const list of lists) {
        const page = await h.json("GET", `${list}&per_page=1`);
        const row = page.body.data[0];
        const personal = [row.email, row.first_name, row.last_name, row.name, row.domain].filter((value) => typeof value === "string");
        expect({ list, rows: page.body.data.length, shown: personal.filter((text) => shows(page.body.meta.next_cursor, text)) }).toEqual({ list, rows: 1, shown: [] });
      }
      // The digest cursors carried: SHA-256 of the filter values, which anyone can compute for a guessed email.
      const cursor = (await h.json("GET", "/public/v1/contacts?email=person1@example.com&per_page=1")).body.meta.next_cursor;
      const digest = createHash("sha256").update(["person1@example.com", "", "", "", "", "", ""].join("\u0000")).digest();
      expect([shows(cursor, digest.toString("base64url")), Buffer.from(cursor, "base64url").includes(digest)]).toEqual([false, false]);
    } finally {
      for (const account of accounts) expect((await h.request("DELETE", `/public/v1/accounts/${account.id}`)).status).toBe(204);
    }
  });

  test("a cursor pages on at every instance sharing the secrets key, and at none once the key is replaced (crm secrets-key rotate): 422, read the list from its first page", async () => {
    const path = "/public/v1/contacts?per_page=5&sort_by=last_name";
    const next = `${path}&cursor=${(await h.json("GET", path)).body.meta.next_cursor}`;
    const withKey = (key: Uint8Array) => call(createApp({ ...h.rt, secrets: new SecretBox(key) }), "GET", next, { headers: { authorization: `Bearer ${h.token}` } });
    const ids = (res: { status: number; body: any }) => [res.status, res.body.data?.map((c: any) => c.id)];
    expect(ids(await withKey(loadSecretsKey(h.rt.config).key))).toEqual(ids(await h.json("GET", next)));
    expect((await withKey(randomBytes(32))).body).toEqual(validation([{ parameter: "cursor", detail: NOT_OURS }]));
  });
});

describe("contacts list: the rendered versions kept", () => {
  test("are bounded by their number and by their characters, the oldest dropped first; a text longer than the whole budget is not kept", () => {
    const kept = new RenderedVersions(3, 100);
    kept.keep("a", 1, "x".repeat(10));
    kept.keep("b", 1, "x".repeat(10));
    kept.keep("c", 1, "x".repeat(10));
    kept.keep("d", 1, "x".repeat(10));
    expect([kept.get("a", 1), kept.get("d", 1), kept.size]).toEqual([undefined, "x".repeat(10), { versions: 3, characters: 30 }]);
    // one version of 81 characters pushes out the two oldest: one for the number, one more for the characters
    kept.keep("e", 1, "y".repeat(81));
    expect([kept.get("b", 1), kept.get("c", 1), kept.get("d", 1), kept.size]).toEqual([undefined, undefined, "x".repeat(10), { versions: 2, characters: 91 }]);
    kept.keep("f", 1, "z".repeat(101));
    expect([kept.get("f", 1), kept.size]).toEqual([undefined, { versions: 2, characters: 91 }]);
    expect(kept.get("d", 2)).toBeUndefined();
  });
});
