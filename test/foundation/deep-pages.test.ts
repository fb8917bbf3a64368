import { afterAll, beforeAll, expect, test } from "bun:test";
import { ACCOUNT_SORTS } from "../../server/accounts/model.ts";
import { CONTACT_SORTS } from "../../server/contacts/model.ts";
import { createHarness, type Harness } from "../support/harness.ts";

// A page by number past the first reads the same rows as the keyset pages do, in every sort and
// direction: on PostgreSQL it skips its offset in ids alone and then reads its rows (pageSelect).

let h: Harness;
const PER_PAGE = 4;
const CONTACTS = 23;
const FIRST = ["Ada", "ada", null, "Grace", "Alan", null, "Edsger"];
const LAST = ["Lovelace", null, "Hopper", "Turing", null, "Liskov", "lovelace"];

beforeAll(async () => {
  h = await createHarness({ rateReadBurst: 10_000, rateWriteBurst: 10_000 });
  for (let i = 0; i < CONTACTS; i++) {
    const firstName = FIRST[i % FIRST.length];
    // A contact needs a name or an email: those without a first name keep theirs.
    const body = { first_name: firstName, last_name: LAST[(i * 3) % LAST.length], email: i % 4 === 0 && firstName ? null : `person${i % 9}@example.com` };
    expect((await h.json("POST", "/public/v1/contacts", { body })).status).toBe(201);
  }
  for (let i = 0; i < 15; i++) {
    const body = { name: `Account ${i % 6}`, domain: i % 3 === 0 ? null : `d${i % 5}.example.com` };
    expect((await h.json("POST", "/public/v1/accounts", { body })).status).toBe(201);
  }
});
afterAll(async () => await h.close());

/** readByCursor reads a whole list in one sort by keyset pages of PER_PAGE. */
async function readByCursor(path: string, sortBy: string, direction: string): Promise<unknown[]> {
  const rows: unknown[] = [];
  let cursor: string | null = null;
  do {
    const res: { status: number; body: any } = await h.json("GET", `${path}?per_page=${PER_PAGE}&sort_by=${sortBy}&sort_direction=${direction}${cursor ? `&cursor=${cursor}` : ""}`);
    expect(res.status).toBe(200);
    rows.push(...res.body.data);
    cursor = res.body.meta.next_cursor;
  } while (cursor);
  return rows;
}

/** expectPagesByNumber checks every page by number of a list, each sort and direction, against the same list read by cursor. */
async function expectPagesByNumber(path: string, sorts: readonly string[]) {
  for (const sortBy of sorts) {
    for (const direction of ["asc", "desc"]) {
      const rows = await readByCursor(path, sortBy, direction);
      const lastPage = Math.ceil(rows.length / PER_PAGE);
      for (let page = 1; page <= lastPage; page++) {
        const res = await h.json("GET", `${path}?page=${page}&per_page=${PER_PAGE}&sort_by=${sortBy}&sort_direction=${direction}`);
        const { next_cursor: _, ...meta } = res.body.meta;
        expect({ sortBy, direction, status: res.status, data: res.body.data, meta }).toEqual({
          sortBy,
          direction,
          status: 200,
          data: rows.slice((page - 1) * PER_PAGE, page * PER_PAGE),
          meta: { current_page: page, last_page: lastPage, per_page: PER_PAGE, total: rows.length },
        });
      }
    }
  }
}

test("every contacts page by number holds the contacts the cursor pages hold there, in every sort and direction", async () => {
  await expectPagesByNumber("/public/v1/contacts", CONTACT_SORTS);
});

test("every accounts page by number holds the accounts the cursor pages hold there, in every sort and direction", async () => {
  await expectPagesByNumber("/public/v1/accounts", ACCOUNT_SORTS);
});

test("the last page by number in one direction is the first page of the reverse sort, reversed", async () => {
  for (const sortBy of CONTACT_SORTS) {
    const lastPage = Math.ceil(CONTACTS / 3);
    const first = await h.json("GET", `/public/v1/contacts?page=1&per_page=3&sort_by=${sortBy}&sort_direction=desc`);
    const last = await h.json("GET", `/public/v1/contacts?page=${lastPage}&per_page=3&sort_by=${sortBy}&sort_direction=asc`);
    expect({ sortBy, data: last.body.data }).toEqual({ sortBy, data: first.body.data.slice(0, CONTACTS - 3 * (lastPage - 1)).reverse() });
  }
});
