import { afterAll, beforeAll, expect, test } from "bun:test";
import { CONTACT_SORTS } from "../../server/contacts/model.ts";
import { countContacts, listContacts, type ContactFilters } from "../../server/contacts/store.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { capturing } from "../support/query-plans.ts";

let h: Harness;
const TAGS = Array.from({ length: 40 }, (_, i) => `shape-${i}`);

beforeAll(async () => {
  h = await createHarness();
  // Every tag on three contacts, the last 20 on a fourth too: which tag is the rarest, and drives, differs between lists.
  for (let i = 0; i < 3; i++) expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: `Shape${i}`, tags: TAGS } })).status).toBe(201);
  expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Shape3", tags: TAGS.slice(20) } })).status).toBe(201);
});
afterAll(async () => await h.close());

/** statementsOf lists the distinct SQL texts that count and list the contacts of each tag list, in every sort and direction, by offset and by cursor. */
async function statementsOf(tagLists: string[][], extra: ContactFilters = {}): Promise<string[]> {
  const { db, captured } = capturing(h.rt.db);
  for (const tags of tagLists) {
    const filters = { ...extra, tags };
    const matches = await countContacts(db, filters);
    for (const sortBy of CONTACT_SORTS) {
      for (const direction of ["asc", "desc"] as const) {
        for (const cursor of [null, { value: sortBy.endsWith("_at") ? 1 : "m", id: "con_0" }]) {
          await listContacts(db, filters, { sortBy, direction, cursor, limit: 2, offset: 0, matches });
        }
      }
    }
  }
  return [...new Set(captured.map((c) => c.sql))].sort();
}

test("a list by tags runs the same SQL texts for 3, 7 or 40 tags, whichever drives, and for any 2 tags: each text is a statement kept on every connection (PostgreSQL keeps one per text on each)", async () => {
  for (const extra of [{}, { updatedAfter: 0 }, { createdAfter: 0, updatedAfter: 0 }] as ContactFilters[]) {
    const three = await statementsOf([TAGS.slice(0, 3), TAGS.slice(20, 23).reverse()], extra);
    const more = await statementsOf([TAGS.slice(0, 3), TAGS.slice(20, 23).reverse(), TAGS.slice(10, 17), TAGS, [...TAGS].reverse()], extra);
    expect({ extra, statements: more }).toEqual({ extra, statements: three });
    const two = await statementsOf([[TAGS[0]!, TAGS[1]!]], extra);
    const otherTwo = await statementsOf([[TAGS[0]!, TAGS[1]!], [TAGS[39]!, TAGS[1]!], [TAGS[25]!, TAGS[5]!]], extra);
    expect({ extra, statements: otherTwo }).toEqual({ extra, statements: two });
  }
  // and the lists find the contacts carrying every tag given
  expect([await countContacts(h.rt.db, { tags: TAGS }), await countContacts(h.rt.db, { tags: TAGS.slice(20) }), await countContacts(h.rt.db, { tags: [TAGS[0]!, TAGS[0]!, TAGS[39]!] })]).toEqual([3, 4, 3]);
});
