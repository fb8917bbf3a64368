import { afterEach, beforeEach, expect, test } from "bun:test";
import { MAX_EXTRA_PROPERTIES_BYTES, MAX_INCLUDE_PAGE_BYTES } from "../../server/limits/limits.ts";
import { validation } from "../foundation/support.ts";
import { createHarness, type Harness } from "../support/harness.ts";

let h: Harness;
beforeEach(async () => {
  h = await createHarness({ rateWriteBurst: 1000 });
});
afterEach(async () => await h.close());

/** linkedContacts makes `contacts` contacts each linked to the same `accounts` accounts of 64 KiB of further properties: every value within its limit. */
async function linkedContacts(accounts: number, contacts: number) {
  const notes = MAX_EXTRA_PROPERTIES_BYTES - JSON.stringify({ legacy_notes: "" }).length;
  const created: { id: string }[] = [];
  for (let i = 0; i < accounts; i++) created.push((await h.json("POST", "/public/v1/accounts", { body: { name: `Account ${i}`, legacy_notes: "x".repeat(notes) } })).body.data);
  const items = Array.from({ length: contacts }, (_, i) => ({ email: `c${i}@example.com`, account_ids: created.map((a) => a.id) }));
  expect((await h.json("POST", "/public/v1/contacts/batch", { body: { items } })).status).toBe(200);
  return created;
}

/** page reads a page of the contact list and its size as sent, in bytes. */
async function page(query: string) {
  const res = await h.request("GET", `/public/v1/contacts?${query}`);
  const bytes = new Uint8Array(await res.arrayBuffer());
  return { status: res.status, bytes: bytes.byteLength, body: JSON.parse(new TextDecoder().decode(bytes)) };
}

test("a page of contacts with include=accounts stays within its size: by cursor it ends before per_page, by number it is refused naming per_page", async () => {
  // 20 contacts, each embedding 10 accounts of 64 KiB: 657 KB each, 13 MB a page of 20; 12 fit in 8 MiB.
  const accounts = await linkedContacts(10, 20);
  const order = (await h.json("GET", "/public/v1/contacts?per_page=20")).body.data.map((c: { id: string }) => c.id);

  const byNumber = await page("per_page=20&include=accounts");
  expect({ status: byNumber.status, body: byNumber.body }).toEqual({
    status: 422,
    body: validation([
      {
        parameter: "per_page",
        detail:
          "is more than fit in a page with include: a page is at most 8 MiB as JSON, and only the first 12 contacts of this one fit; ask per_page=12 or fewer, or page by cursor (a page by cursor ends before per_page instead, its next_cursor going on from there)",
      },
    ]),
  });
  expect((await page("per_page=12&include=accounts")).body.data.map((c: { id: string }) => c.id)).toEqual(order.slice(0, 12));

  // A walk by cursor at per_page=20 gets every contact once, in order, each page within the bound.
  const first = await page("per_page=1&include=accounts");
  const pages = [first];
  while (pages.at(-1)!.body.meta.next_cursor) pages.push(await page(`per_page=20&include=accounts&cursor=${pages.at(-1)!.body.meta.next_cursor}`));
  expect(pages.map((p) => [p.status, p.body.data.length, p.bytes <= MAX_INCLUDE_PAGE_BYTES])).toEqual([
    [200, 1, true],
    [200, 12, true],
    [200, 7, true],
  ]);
  expect(pages[1]!.body.meta).toEqual({ current_page: 0, last_page: 1, per_page: 20, total: 20, next_cursor: expect.any(String) });
  const walked = pages.flatMap((p) => p.body.data);
  expect(walked.map((c: { id: string }) => c.id)).toEqual(order);
  // The shape is the documented one: every contact with its accounts embedded in full.
  for (const contact of walked) expect(contact.accounts).toEqual(accounts);
}, 120_000);

test("a page that fits is unchanged by the bound", async () => {
  const accounts = await linkedContacts(2, 3);
  const res = await page("per_page=3&include=accounts");
  expect(res.status).toBe(200);
  expect(res.body.data.map((c: { accounts: unknown }) => c.accounts)).toEqual([accounts, accounts, accounts]);
  expect(res.body.meta).toEqual({ current_page: 1, last_page: 1, per_page: 3, total: 3, next_cursor: null });
});
