import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createApiToken } from "../../server/auth/service.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { contactCount, eventTypes, expectProblem, validation } from "../foundation/support.ts";

let h: Harness;
beforeEach(async () => {
  h = await createHarness();
});
afterEach(async () => await h.close());

const CONTACTS = "/public/v1/contacts/batch";
const ACCOUNTS = "/public/v1/accounts/batch";
const eventPayloads = async () => (await h.rt.db.all<{ payload: string }>("SELECT payload FROM events ORDER BY id")).map((r) => JSON.parse(r.payload));
const storedKeys = async () => (await h.rt.db.get<{ n: number }>("SELECT count(*) AS n FROM idempotency_keys"))!.n;
const accountCount = async () => (await h.rt.db.get<{ n: number }>("SELECT count(*) AS n FROM accounts"))!.n;

async function created(path: string, body: unknown): Promise<any> {
  const res = await h.json("POST", path, { body });
  expect(res.status).toBe(201);
  return res.body.data;
}

describe("contacts batch: happy paths", () => {
  test("new, changed, unchanged and invalid items get their results in order, and exactly the events of what changed", async () => {
    const ada = await created("/public/v1/contacts", { first_name: "Ada", email: "ada@example.com" });
    const bob = await created("/public/v1/contacts", { first_name: "Bob", external_id: "crm-2" });
    const res = await h.json("POST", CONTACTS, {
      body: {
        items: [
          { email: "ADA@example.com", first_name: "Ada" },
          { external_id: "crm-2", first_name: "Robert" },
          { email: "zoe@example.com", first_name: "Zoë", last_name: "李" },
          { email: "not-an-email", first_name: "Nope" },
          { email: "zoe@example.com", last_name: "Li" },
          { first_name: "Keyless" },
        ],
      },
    });
    expect(res.status).toBe(200);
    const [, , zoe, , , keyless] = res.body.data;
    expect(res.body).toEqual({
      data: [
        { status: "unchanged", id: ada.id },
        { status: "updated", id: bob.id },
        { status: "created", id: zoe.id },
        { status: "invalid", errors: [{ pointer: "/items/3/email", detail: "must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null" }] },
        { status: "updated", id: zoe.id },
        { status: "created", id: keyless.id },
      ],
    });
    expect(await eventTypes(h)).toEqual(["contact.created", "contact.created", "contact.updated", "contact.created", "contact.updated", "contact.created"]);
    const events = await eventPayloads();
    expect(events[2].data).toMatchObject({ id: bob.id, first_name: "Robert", external_id: "crm-2" });
    expect(events[4].data).toMatchObject({ id: zoe.id, first_name: "Zoë", last_name: "Li", full_name: "Zoë Li", email: "zoe@example.com" });
    const stored = await h.json("GET", `/public/v1/contacts/${zoe.id}`);
    expect(stored.body.data).toEqual(events[4].data);
    expect(await contactCount(h)).toBe(4);
  });

  test("a replayed batch key replays the first answer and writes nothing; the same key with another body is 422", async () => {
    const headers = { "idempotency-key": "import:file.csv:1-2" };
    const body = { items: [{ email: "a@example.com" }, { email: "b@example.com" }] };
    const first = await h.json("POST", CONTACTS, { body, headers });
    expect(first.status).toBe(200);
    expect(first.body.data.map((r: any) => r.status)).toEqual(["created", "created"]);
    const again = await h.json("POST", CONTACTS, { body, headers });
    expect(again.status).toBe(200);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body).toEqual(first.body);
    expect(await contactCount(h)).toBe(2);
    expect(await eventTypes(h)).toEqual(["contact.created", "contact.created"]);
    const other = await h.json("POST", CONTACTS, { body: { items: [{ email: "c@example.com" }] }, headers });
    expectProblem(other, 422, "idempotency-key-reused");
    expect(await contactCount(h)).toBe(2);
  });

  test("a batch whose every item is invalid changed nothing and is not kept: the key runs a corrected batch; one with a valid item is kept", async () => {
    const headers = { "idempotency-key": "import:file.csv:3-3" };
    const refused = await h.json("POST", CONTACTS, { body: { items: [{ email: "a@example.com", assigned_user_id: "usr_00000000000000000000000000" }] }, headers });
    expect(refused.status).toBe(200);
    expect(refused.body.data.map((r: any) => r.status)).toEqual(["invalid"]);
    expect(await storedKeys()).toBe(0);
    const corrected = await h.json("POST", CONTACTS, { body: { items: [{ email: "a@example.com" }, { email: "nope" }] }, headers });
    expect(corrected.status).toBe(200);
    expect(corrected.headers.get("idempotent-replayed")).toBeNull();
    expect(corrected.body.data.map((r: any) => r.status)).toEqual(["created", "invalid"]);
    const again = await h.json("POST", CONTACTS, { body: { items: [{ email: "a@example.com" }, { email: "nope" }] }, headers });
    expect([again.headers.get("idempotent-replayed"), again.body]).toEqual(["true", corrected.body]);
    expect(await contactCount(h)).toBe(1);
  });

  test("external_id is returned, set and cleared through POST and PATCH like any field", async () => {
    const contact = await created("/public/v1/contacts", { email: "x@example.com", external_id: "src-9" });
    expect(contact.external_id).toBe("src-9");
    const cleared = await h.json("PATCH", `/public/v1/contacts/${contact.id}`, { body: { external_id: null } });
    expect(cleared.body.data.external_id).toBeNull();
    const again = await created("/public/v1/contacts", { email: "y@example.com", external_id: "src-9" });
    expect(again.external_id).toBe("src-9");
  });

  test("accounts: matched by domain, else by name in any case and script; updated, unchanged or created", async () => {
    const acme = await created("/public/v1/accounts", { name: "Acme", domain: "acme.test" });
    const muller = await created("/public/v1/accounts", { name: "Müller GmbH" });
    const res = await h.json("POST", ACCOUNTS, {
      body: {
        items: [
          { name: "Acme Ltd", domain: "ACME.test" },
          { name: "MÜLLER GMBH" },
          { name: "Globex", domain: "globex.test", tier: "gold" },
          { domain: "nameless.test" },
          { name: "Globex", domain: "globex.test", tier: "gold" },
        ],
      },
    });
    expect(res.status).toBe(200);
    const globex = res.body.data[2].id;
    expect(res.body).toEqual({
      data: [
        { status: "updated", id: acme.id },
        { status: "updated", id: muller.id },
        { status: "created", id: globex },
        { status: "invalid", errors: [{ pointer: "/items/3/name", detail: "must be a string of 1 to 200 characters, not spaces alone (an account needs a name)" }] },
        { status: "unchanged", id: globex },
      ],
    });
    const stored = await h.json("GET", `/public/v1/accounts/${globex}`);
    expect(stored.body.data).toMatchObject({ id: globex, name: "Globex", domain: "globex.test", tier: "gold" });
    expect((await h.json("GET", `/public/v1/accounts/${acme.id}`)).body.data).toMatchObject({ name: "Acme Ltd", domain: "acme.test" });
    expect(await accountCount()).toBe(3);
    // each account that changed sends its event, as POST and PATCH do; the unchanged one sends none
    expect((await eventPayloads()).map((e) => [e.type, e.data.id])).toEqual([
      ["account.created", acme.id],
      ["account.created", muller.id],
      ["account.updated", acme.id],
      ["account.updated", muller.id],
      ["account.created", globex],
    ]);
  });

  test("a new contact needs a name, email or phone, as on POST; an update by external_id does not", async () => {
    const known = await created("/public/v1/contacts", { external_id: "src-9", first_name: "Known" });
    const res = await h.json("POST", CONTACTS, { body: { items: [{ external_id: "src-9", tags: ["vip"] }, { tags: ["vip"] }] } });
    expect(res.body).toEqual({
      data: [
        { status: "updated", id: known.id },
        { status: "invalid", errors: [{ pointer: "/items/1", detail: "needs at least one of email, first_name, last_name, phone" }] },
      ],
    });
    expect((await h.json("GET", "/public/v1/contacts?tag=vip")).body.data.map((c: any) => c.id)).toEqual([known.id]);
    expect(await contactCount(h)).toBe(1);
  });

  test("an account item whose name is spaces alone is invalid, as on POST, whether it would create or update; the others commit", async () => {
    const acme = await created("/public/v1/accounts", { name: "Acme", domain: "acme.test" });
    const res = await h.json("POST", ACCOUNTS, { body: { items: [{ name: "   ", domain: "acme.test" }, { name: " \t" }, { name: "Globex" }] } });
    const nameless = "must be a string of 1 to 200 characters, not spaces alone (an account needs a name)";
    expect(res.body).toEqual({
      data: [
        { status: "invalid", errors: [{ pointer: "/items/0/name", detail: nameless }] },
        { status: "invalid", errors: [{ pointer: "/items/1/name", detail: nameless }] },
        { status: "created", id: res.body.data[2].id },
      ],
    });
    expect((await h.json("GET", `/public/v1/accounts/${acme.id}`)).body.data).toEqual(acme);
    expect(await accountCount()).toBe(2);
  });

  test("a name of spaces alone names nobody, in a new contact's item and in an update's, as on POST and PATCH", async () => {
    const known = await created("/public/v1/contacts", { external_id: "src-9", first_name: "Known" });
    const res = await h.json("POST", CONTACTS, { body: { items: [{ external_id: "src-9", first_name: "   " }, { first_name: "   ", tags: ["vip"] }] } });
    const nobody = "needs at least one of email, first_name, last_name, phone";
    expect(res.body).toEqual({
      data: [
        { status: "invalid", errors: [{ pointer: "/items/0", detail: nobody }] },
        { status: "invalid", errors: [{ pointer: "/items/1", detail: nobody }] },
      ],
    });
    expect((await h.json("GET", `/public/v1/contacts/${known.id}`)).body.data).toEqual(known);
    expect(await contactCount(h)).toBe(1);
    expect(await eventTypes(h)).toEqual(["contact.created"]);
  });

  // s36 ratelimits audit: 1 + floor(n / 100) made 99 items cost 1 write and 100 cost 2, so batches of 99 imported twice the documented 2,500 contacts per second.
  test("a batch counts as one write per 50 items or part of them against the token's write bucket", async () => {
    // A bucket refilling one write in 100 s: what the requests spend is all that changes it.
    const { token } = await createApiToken(h.rt.db, "counted", Date.now(), { readPerSecond: 10, readBurst: 10, writePerSecond: 0.01, writeBurst: 100 });
    const headers = { authorization: `Bearer ${token}` };
    const items = Array.from({ length: 100 }, (_, i) => ({ email: `p${i}@example.com` }));
    const res = await h.json("POST", CONTACTS, { body: { items }, headers });
    expect(res.status).toBe(200);
    expect(res.headers.get("ratelimit")).toMatch(/^"write";r=98;t=\d+$/);
    const charged: (string | null)[] = [];
    for (const n of [99, 50, 51, 1]) charged.push((await h.json("POST", CONTACTS, { body: { items: items.slice(0, n) }, headers })).headers.get("ratelimit"));
    const accounts = await h.json("POST", ACCOUNTS, { body: { items: items.slice(0, 20).map((_, i) => ({ name: `Co ${i}` })) }, headers });
    charged.push(accounts.headers.get("ratelimit"));
    expect(charged.map((header) => header?.replace(/;t=\d+$/, ""))).toEqual(['"write";r=96', '"write";r=95', '"write";r=93', '"write";r=92', '"write";r=91']);
  });
});

describe("batch upserts: a key that matches nothing falls back to the other", () => {
  test("a contact item whose external_id no contact has is the one contact with its email and none: updated and given it; of that email only with others, a new contact; several without one make it invalid, naming them", async () => {
    const form = await created("/public/v1/contacts", { first_name: "Ada", last_name: "Form", email: "form.person@example.org" });
    const held = await created("/public/v1/contacts", { email: "held@example.com", external_id: "src-1" });
    const one = await created("/public/v1/contacts", { first_name: "One", email: "twin@example.com" });
    const two = await created("/public/v1/contacts", { first_name: "Two", email: "twin@example.com" });
    const res = await h.json("POST", CONTACTS, {
      body: {
        items: [
          { external_id: "src-15161", email: "FORM.person@example.org", last_name: "Import" },
          { external_id: "src-15161", email: "form.person@example.org", last_name: "Import" },
          { email: "form.person@example.org", phone: "+1 555 0100" },
          { external_id: "src-2", email: "held@example.com", first_name: "Other" },
          { external_id: "src-3", email: "twin@example.com" },
          { email: "twin@example.com", first_name: "Which" },
        ],
      },
    });
    const other = (await h.json("GET", "/public/v1/contacts?email=held@example.com")).body.data.find((c: { id: string }) => c.id !== held.id);
    expect(other).toMatchObject({ external_id: "src-2", email: "held@example.com", first_name: "Other" });
    expect(res.body).toEqual({
      data: [
        { status: "updated", id: form.id },
        { status: "unchanged", id: form.id },
        { status: "updated", id: form.id },
        { status: "created", id: other.id },
        { status: "invalid", errors: [{ pointer: "/items/4/external_id", detail: `no contact has this external_id, and several of this email have none (${one.id}, ${two.id}): give it to the one it belongs to (PATCH /public/v1/contacts/ID), or create this contact with POST /public/v1/contacts first` }] },
        { status: "invalid", errors: [{ pointer: "/items/5/email", detail: `matches several contacts (${one.id}, ${two.id}); send the external_id of the one to update (give it one with PATCH /public/v1/contacts/ID if it has none), or delete the copies` }] },
      ],
    });
    expect((await h.json("GET", `/public/v1/contacts/${form.id}`)).body.data).toMatchObject({ first_name: "Ada", last_name: "Import", email: "form.person@example.org", phone: "+1 555 0100", external_id: "src-15161", version: 3 });
    expect((await h.json("GET", `/public/v1/contacts/${held.id}`)).body.data).toEqual(held);
    expect(await contactCount(h)).toBe(5);
    expect(await eventTypes(h)).toEqual(["contact.created", "contact.created", "contact.created", "contact.created", "contact.updated", "contact.updated", "contact.created"]);

    // The advice works: the refused items, sent again once it is followed, are taken.
    expect((await h.json("PATCH", `/public/v1/contacts/${one.id}`, { body: { external_id: "src-3" } })).status).toBe(200);
    const again = await h.json("POST", CONTACTS, { body: { items: [{ external_id: "src-3", email: "twin@example.com" }, { external_id: "src-3", email: "twin@example.com", first_name: "Which" }] } });
    expect(again.body).toEqual({ data: [{ status: "unchanged", id: one.id }, { status: "updated", id: one.id }] });
  });

  test("people sharing a mailbox, each with an external_id of their own, are each a contact, in one batch as in two", async () => {
    const res = await h.json("POST", CONTACTS, { body: { items: [{ external_id: "hr-1", first_name: "Ann", email: "info@acme.test" }, { external_id: "hr-2", first_name: "Bob", email: "info@acme.test" }] } });
    expect(res.body.data.map((r: { status: string }) => r.status)).toEqual(["created", "created"]);
    const later = await h.json("POST", CONTACTS, { body: { items: [{ external_id: "hr-3", first_name: "Cy", email: "INFO@acme.test" }] } });
    expect(later.body.data.map((r: { status: string }) => r.status)).toEqual(["created"]);
    expect(await contactCount(h)).toBe(3);
  });

  test("the one account of a name without a domain is found behind any number of that name with domains; two such are refused, not guessed", async () => {
    for (let i = 1; i <= 10; i++) await created("/public/v1/accounts", { name: "Acme", domain: `acme${i}.test` });
    const domainless = await created("/public/v1/accounts", { name: "Acme" });
    const res = await h.json("POST", ACCOUNTS, { body: { items: [{ name: "Acme", domain: "acme-new.test" }] } });
    expect(res.body).toEqual({ data: [{ status: "updated", id: domainless.id }] });
    const second = await created("/public/v1/accounts", { name: "ACME" });
    const third = await created("/public/v1/accounts", { name: "acme" });
    const refused = await h.json("POST", ACCOUNTS, { body: { items: [{ name: "Acme", domain: "acme-other.test" }] } });
    expect(refused.body).toEqual({ data: [{ status: "invalid", errors: [{ pointer: "/items/0/domain", detail: `no account has this domain, and several of this name have none (${second.id}, ${third.id}): give it to the one it belongs to (PATCH /public/v1/accounts/ID), or create this account with POST /public/v1/accounts first` }] }] });
    expect(await accountCount()).toBe(13);
  });

  test("an account item whose domain no account has is the one account of its name without one: updated and given it; of that name only with others, a new account; several without one make it invalid, naming them", async () => {
    const initech = await created("/public/v1/accounts", { name: "Initech" });
    const globex = await created("/public/v1/accounts", { name: "Globex", domain: "globex.test" });
    const one = await created("/public/v1/accounts", { name: "Twin Co" });
    const two = await created("/public/v1/accounts", { name: "twin co" });
    const res = await h.json("POST", ACCOUNTS, {
      body: {
        items: [
          { name: "INITECH", domain: "www.initech.test" },
          { name: "Initech" },
          { name: "Globex", domain: "globex.de" },
          { name: "Twin Co", domain: "twin.test" },
          { name: "TWIN CO" },
        ],
      },
    });
    const globexDe = await h.json("GET", `/public/v1/accounts?domain=globex.de`);
    expect(globexDe.body.data).toHaveLength(1);
    expect(res.body).toEqual({
      data: [
        { status: "updated", id: initech.id },
        { status: "updated", id: initech.id },
        { status: "created", id: globexDe.body.data[0].id },
        { status: "invalid", errors: [{ pointer: "/items/3/domain", detail: `no account has this domain, and several of this name have none (${one.id}, ${two.id}): give it to the one it belongs to (PATCH /public/v1/accounts/ID), or create this account with POST /public/v1/accounts first` }] },
        { status: "invalid", errors: [{ pointer: "/items/4/name", detail: `matches several accounts (${one.id}, ${two.id}); send the domain of the one to update (give it one with PATCH /public/v1/accounts/ID if it has none), or delete the copies` }] },
      ],
    });
    expect((await h.json("GET", `/public/v1/accounts/${initech.id}`)).body.data).toMatchObject({ name: "Initech", domain: "www.initech.test", version: 3 });
    expect((await h.json("GET", `/public/v1/accounts/${globex.id}`)).body.data).toEqual(globex);
    expect(await accountCount()).toBe(5);

    // The advice works: the refused item, sent again once it is followed, is taken.
    expect((await h.json("PATCH", `/public/v1/accounts/${two.id}`, { body: { domain: "twin.test" } })).status).toBe(200);
    const again = await h.json("POST", ACCOUNTS, { body: { items: [{ name: "Globex", domain: "globex.de" }, { name: "Twin Co", domain: "twin.test" }] } });
    expect(again.body).toEqual({ data: [{ status: "unchanged", id: globexDe.body.data[0].id }, { status: "updated", id: two.id }] });
  });

  test("an account item whose domain several accounts share is the one of them with its name; with none or several of that name it is invalid, naming them", async () => {
    const hooli = await created("/public/v1/accounts", { name: "Hooli", domain: "hooli.test" });
    const xyz = await created("/public/v1/accounts", { name: "Hooli XYZ", domain: "hooli.test" });
    const res = await h.json("POST", ACCOUNTS, { body: { items: [{ name: "HOOLI XYZ", domain: "hooli.test", tier: "gold" }, { name: "Nucleus", domain: "HOOLI.test" }] } });
    expect(res.body).toEqual({
      data: [
        { status: "updated", id: xyz.id },
        { status: "invalid", errors: [{ pointer: "/items/1/domain", detail: `matches several accounts (${hooli.id}, ${xyz.id}), and none of them has this name; send the name of the one to update, or give them domains of their own (PATCH /public/v1/accounts/ID)` }] },
      ],
    });
    expect((await h.json("GET", `/public/v1/accounts/${xyz.id}`)).body.data).toMatchObject({ name: "HOOLI XYZ", domain: "hooli.test", tier: "gold" });
    expect((await h.json("GET", `/public/v1/accounts/${hooli.id}`)).body.data).toEqual(hooli);
  });

  test("batches racing for one contact by its email, or for one external_id, are each answered 200: the first takes it, the others match by it or are refused naming it", async () => {
    const form = await created("/public/v1/contacts", { first_name: "Ada", email: "form.person@example.org" });
    const batches = [
      [{ external_id: "a-1", email: "form.person@example.org" }],
      [{ external_id: "b-1", email: "form.person@example.org" }],
      [{ external_id: "b-1", email: "else@example.org", first_name: "Else" }],
      [{ external_id: "a-1", email: "form.person@example.org", last_name: "Again" }],
    ];
    const answers = await Promise.all(batches.map((items) => h.json("POST", CONTACTS, { body: { items } })));
    expect(answers.map((res) => res.status)).toEqual([200, 200, 200, 200]);
    expect(answers.map((res) => res.body.data[0].status).filter((status) => !["created", "updated", "unchanged", "invalid"].includes(status))).toEqual([]);
    const holders = await h.rt.db.all<{ external_id: string; n: number }>("SELECT external_id, count(*) AS n FROM contacts WHERE external_id IS NOT NULL GROUP BY external_id ORDER BY external_id");
    expect(holders.every((row) => Number(row.n) === 1)).toBe(true);
    expect((await h.json("GET", `/public/v1/contacts/${form.id}`)).body.data.external_id).toMatch(/^(a-1|b-1)$/);
  });
});

describe("contacts batch: merge_custom_fields", () => {
  test("with it, an update sets the custom fields its item names (null clears one) and keeps the others; a new contact is stored as given; without it, custom_fields replaces whole", async () => {
    const ada = await created("/public/v1/contacts", { email: "ada@example.com", first_name: "Ada", custom_fields: { plan: "gold", tier: "t1", note: "keep" } });
    const bob = await created("/public/v1/contacts", { email: "bob@example.com", first_name: "Bob", custom_fields: { plan: "gold", tier: "t1" } });
    const merged = await h.json("POST", CONTACTS, {
      body: {
        merge_custom_fields: true,
        items: [
          { email: "ada@example.com", custom_fields: { plan: "silver", tier: null } },
          { email: "ada@example.com", custom_fields: { plan: "silver" } },
          { email: "ada@example.com", tags: ["vip"] },
          { email: "zoe@example.com", first_name: "Zoë", custom_fields: { plan: "bronze", tier: null } },
        ],
      },
    });
    const zoe = merged.body.data[3].id;
    expect([merged.status, merged.body]).toEqual([200, { data: [{ status: "updated", id: ada.id }, { status: "unchanged", id: ada.id }, { status: "updated", id: ada.id }, { status: "created", id: zoe }] }]);
    const storedAda = (await h.json("GET", `/public/v1/contacts/${ada.id}`)).body.data;
    expect(storedAda).toEqual({ ...ada, custom_fields: { plan: "silver", note: "keep" }, tags: ["vip"], version: 3, updated_at: storedAda.updated_at });
    const storedZoe = (await h.json("GET", `/public/v1/contacts/${zoe}`)).body.data;
    expect(storedZoe.custom_fields).toEqual({ plan: "bronze", tier: null });

    for (const body of [{ items: [{ email: "bob@example.com", custom_fields: { plan: "silver" } }] }, { merge_custom_fields: false, items: [{ email: "bob@example.com", custom_fields: { tier: "t2" } }] }]) {
      expect((await h.json("POST", CONTACTS, { body })).body).toEqual({ data: [{ status: "updated", id: bob.id }] });
    }
    const storedBob = (await h.json("GET", `/public/v1/contacts/${bob.id}`)).body.data;
    expect(storedBob).toEqual({ ...bob, custom_fields: { tier: "t2" }, version: 3, updated_at: storedBob.updated_at });
    // custom_fields: null still clears them all, merging or not
    const cleared = await h.json("POST", CONTACTS, { body: { merge_custom_fields: true, items: [{ email: "bob@example.com", custom_fields: null }] } });
    expect(cleared.body).toEqual({ data: [{ status: "updated", id: bob.id }] });
    expect((await h.json("GET", `/public/v1/contacts/${bob.id}`)).body.data.custom_fields).toEqual({});
    expect(await eventTypes(h)).toEqual(["contact.created", "contact.created", "contact.updated", "contact.updated", "contact.created", "contact.updated", "contact.updated", "contact.updated"]);
  });

  test("a merge past the custom_fields limits makes its item invalid, naming it; the other items commit", async () => {
    const hundred = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`k${i}`, "v"]));
    const full = await created("/public/v1/contacts", { email: "full@example.com", custom_fields: hundred });
    const big = await created("/public/v1/contacts", { email: "big@example.com", custom_fields: { blob: "x".repeat(16_000) } });
    const res = await h.json("POST", CONTACTS, {
      body: {
        merge_custom_fields: true,
        items: [
          { email: "full@example.com", custom_fields: { k100: "v" } },
          { email: "big@example.com", custom_fields: { more: "y".repeat(1_000) } },
          { email: "full@example.com", custom_fields: { k0: null, k100: "v" } },
        ],
      },
    });
    expect([res.status, res.body]).toEqual([
      200,
      {
        data: [
          { status: "invalid", errors: [{ pointer: "/items/0/custom_fields", detail: "with the contact's other custom fields kept, has 101 keys; the limit is 100" }] },
          { status: "invalid", errors: [{ pointer: "/items/1/custom_fields", detail: "with the contact's other custom fields kept, is 17021 bytes as JSON; the limit is 16384 bytes (16 KiB)" }] },
          { status: "updated", id: full.id },
        ],
      },
    ]);
    expect((await h.json("GET", `/public/v1/contacts/${big.id}`)).body.data).toEqual(big);
    const { k0: _, ...kept } = hundred;
    expect((await h.json("GET", `/public/v1/contacts/${full.id}`)).body.data.custom_fields).toEqual({ ...kept, k100: "v" });
  });

  test("merge_custom_fields must be a boolean, and the accounts batch does not take it", async () => {
    const items = [{ email: "a@example.com" }];
    const wrong = await h.json("POST", CONTACTS, { body: { merge_custom_fields: "true", items } });
    expect([wrong.status, wrong.body]).toEqual([422, validation([{ pointer: "/merge_custom_fields", detail: "must be true or false" }])]);
    const accounts = await h.json("POST", ACCOUNTS, { body: { merge_custom_fields: true, items: [{ name: "Acme" }] } });
    expect([accounts.status, accounts.body]).toEqual([422, validation([{ pointer: "/merge_custom_fields", detail: "is not a field here; known: items" }])]);
    expect([await contactCount(h), await accountCount()]).toEqual([0, 0]);
  });
});

describe("contacts batch: errors", () => {
  test("an email shared by several contacts is invalid, naming them; the other items commit", async () => {
    const one = await created("/public/v1/contacts", { first_name: "One", email: "twin@example.com" });
    const two = await created("/public/v1/contacts", { first_name: "Two", email: "twin@example.com" });
    const res = await h.json("POST", CONTACTS, { body: { items: [{ email: "solo@example.com" }, { email: "Twin@example.com", first_name: "Which" }] } });
    expect(res.status).toBe(200);
    expect(res.body.data[1]).toEqual({
      status: "invalid",
      errors: [{ pointer: "/items/1/email", detail: `matches several contacts (${one.id}, ${two.id}); send the external_id of the one to update (give it one with PATCH /public/v1/contacts/ID if it has none), or delete the copies` }],
    });
    expect(res.body.data[0].status).toBe("created");
    expect(await eventTypes(h)).toEqual(["contact.created", "contact.created", "contact.created"]);
  });

  test("items are checked like POST bodies: read-only fields, unknown accounts, limits, non-objects", async () => {
    const res = await h.json("POST", CONTACTS, {
      body: { items: [{ id: "con_x", email: "a@example.com" }, { account_ids: ["acc_01JDB7Y1Q7A6T5ZV3C8W9X0K2M"] }, "just a string", { custom_fields: [] }] },
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      data: [
        { status: "invalid", errors: [{ pointer: "/items/0/id", detail: "is read-only" }] },
        { status: "invalid", errors: [{ pointer: "/items/1/account_ids/0", detail: "no account with id acc_01JDB7Y1Q7A6T5ZV3C8W9X0K2M exists" }] },
        { status: "invalid", errors: [{ pointer: "/items/2", detail: "must be an object" }] },
        { status: "invalid", errors: [{ pointer: "/items/3/custom_fields", detail: "must be a JSON object, or null" }] },
      ],
    });
    expect(await contactCount(h)).toBe(0);
    expect(await eventTypes(h)).toEqual([]);
  });

  test("account items and POST /accounts refuse read-only fields as contacts do, instead of dropping them", async () => {
    const readOnly = { id: "acc_fake", version: 99, created_at: "2000-01-01T00:00:00Z" };
    const batch = await h.json("POST", ACCOUNTS, { body: { items: [{ name: "Acme", ...readOnly }, { name: "Globex", updated_at: "2000-01-01T00:00:00Z" }] } });
    expect(batch.body).toEqual({
      data: [
        { status: "invalid", errors: ["id", "version", "created_at"].map((field) => ({ pointer: `/items/0/${field}`, detail: "is read-only" })) },
        { status: "invalid", errors: [{ pointer: "/items/1/updated_at", detail: "is read-only" }] },
      ],
    });
    const created = await h.json("POST", "/public/v1/accounts", { body: { name: "Acme", ...readOnly } });
    expect([created.status, created.body]).toEqual([422, validation(["id", "version", "created_at"].map((field) => ({ pointer: `/${field}`, detail: "is read-only" })))]);
    expect([await accountCount(), await eventTypes(h)]).toEqual([0, []]);
  });

  test("101 items, no items, or no list is 422 and writes nothing", async () => {
    const items = Array.from({ length: 101 }, (_, i) => ({ email: `p${i}@example.com` }));
    for (const body of [{ items }, { items: [] }, {}]) {
      for (const path of [CONTACTS, ACCOUNTS]) {
        const res = await h.json("POST", path, { body });
        expectProblem(res, 422, "validation");
        expect(res.body).toEqual(validation([{ pointer: "/items", detail: "must be a list of 1 to 100 items" }]));
      }
    }
    expect(await contactCount(h)).toBe(0);
    expect(await accountCount()).toBe(0);
  });

  test("a batch whose commit fails leaves nothing behind, and the same key then succeeds", async () => {
    if (h.rt.db.dialect === "postgres") {
      await h.rt.db.run("CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.email = 'boom@example.com' THEN RAISE EXCEPTION 'disk on fire'; END IF; RETURN NEW; END $$");
      await h.rt.db.run("CREATE TRIGGER refuse_boom BEFORE INSERT ON contacts FOR EACH ROW EXECUTE FUNCTION refuse_boom()");
    } else {
      await h.rt.db.run("CREATE TRIGGER refuse_boom BEFORE INSERT ON contacts WHEN new.email = 'boom@example.com' BEGIN SELECT RAISE(ABORT, 'disk on fire'); END");
    }
    const headers = { "idempotency-key": "batch-1" };
    const body = { items: [{ email: "ok1@example.com" }, { email: "boom@example.com" }, { email: "ok2@example.com" }] };
    const res = await h.json("POST", CONTACTS, { body, headers });
    expectProblem(res, 500);
    expect(await contactCount(h)).toBe(0);
    expect(await eventTypes(h)).toEqual([]);
    expect(await storedKeys()).toBe(0);
    await h.rt.db.run(h.rt.db.dialect === "postgres" ? "DROP TRIGGER refuse_boom ON contacts" : "DROP TRIGGER refuse_boom");
    const retry = await h.json("POST", CONTACTS, { body, headers });
    expect(retry.status).toBe(200);
    expect(retry.body.data.map((r: any) => r.status)).toEqual(["created", "created", "created"]);
    expect(await contactCount(h)).toBe(3);
  });

  test("an account name shared by several accounts is invalid, naming them", async () => {
    const one = await created("/public/v1/accounts", { name: "Twin Co" });
    const two = await created("/public/v1/accounts", { name: "twin co" });
    const res = await h.json("POST", ACCOUNTS, { body: { items: [{ name: "TWIN CO" }] } });
    expect(res.body).toEqual({
      data: [{ status: "invalid", errors: [{ pointer: "/items/0/name", detail: `matches several accounts (${one.id}, ${two.id}); send the domain of the one to update (give it one with PATCH /public/v1/accounts/ID if it has none), or delete the copies` }] }],
    });
  });

  test("an external_id already held by another contact is 409 on POST and PATCH, and changes nothing", async () => {
    const holder = await created("/public/v1/contacts", { external_id: "src-1", first_name: "Holder" });
    const other = await created("/public/v1/contacts", { email: "o@example.com" });
    const post = await h.json("POST", "/public/v1/contacts", { body: { external_id: "src-1" } });
    expectProblem(post, 409, "external-id-taken");
    expect(post.body.errors).toEqual([{ pointer: "/external_id", detail: `is already the external_id of contact ${holder.id}` }]);
    const patch = await h.json("PATCH", `/public/v1/contacts/${other.id}`, { body: { external_id: "src-1", first_name: "X" } });
    expectProblem(patch, 409, "external-id-taken");
    expect((await h.json("GET", `/public/v1/contacts/${other.id}`)).body.data).toEqual(other);
    expect(await contactCount(h)).toBe(2);
  });
});

describe("contacts batch: security", () => {
  test("a batch costs its items even when admitted on the last write: the next write waits for the debt", async () => {
    const { token } = await createApiToken(h.rt.db, "slow", Date.now(), { readPerSecond: 10, readBurst: 10, writePerSecond: 1, writeBurst: 1 });
    const headers = { authorization: `Bearer ${token}` };
    const items = Array.from({ length: 100 }, (_, i) => ({ email: `p${i}@example.com` }));
    const res = await h.json("POST", CONTACTS, { body: { items }, headers });
    expect(res.status).toBe(200);
    const next = await h.json("POST", "/public/v1/contacts", { body: { email: "late@example.com" }, headers });
    expectProblem(next, 429, "rate-limited");
    expect(Number(next.headers.get("retry-after"))).toBeGreaterThanOrEqual(2);
    expect(await contactCount(h)).toBe(100);
  });
});

describe("contacts batch: add_account_ids", () => {
  test("with it, an update adds the item's accounts after the contact's (one already linked changes nothing); a new contact is stored as given; without it, account_ids replaces whole", async () => {
    const [acme, partner, globex] = (await h.json("POST", ACCOUNTS, { body: { items: [{ name: "Acme" }, { name: "Partner Ltd" }, { name: "Globex" }] } })).body.data.map((r: { id: string }) => r.id);
    const ada = await created("/public/v1/contacts", { email: "ada@example.com", first_name: "Ada", account_ids: [acme, partner] });
    const bob = await created("/public/v1/contacts", { email: "bob@example.com", first_name: "Bob", account_ids: [acme, partner] });
    const added = await h.json("POST", CONTACTS, {
      body: {
        add_account_ids: true,
        items: [
          { email: "ada@example.com", account_ids: [acme] },
          { email: "ada@example.com", account_ids: [globex, partner] },
          { email: "ada@example.com", first_name: "Ada", account_ids: [] },
          { email: "zoe@example.com", first_name: "Zoë", account_ids: [globex] },
        ],
      },
    });
    const zoe = added.body.data[3].id;
    expect([added.status, added.body]).toEqual([200, { data: [{ status: "unchanged", id: ada.id }, { status: "updated", id: ada.id }, { status: "unchanged", id: ada.id }, { status: "created", id: zoe }] }]);
    const storedAda = (await h.json("GET", `/public/v1/contacts/${ada.id}`)).body.data;
    expect(storedAda).toEqual({ ...ada, account_ids: [acme, partner, globex], version: 2, updated_at: storedAda.updated_at });
    expect((await h.json("GET", `/public/v1/contacts/${zoe}`)).body.data.account_ids).toEqual([globex]);

    for (const body of [{ items: [{ email: "bob@example.com", account_ids: [globex] }] }, { add_account_ids: false, items: [{ email: "bob@example.com", account_ids: [partner] }] }]) {
      expect((await h.json("POST", CONTACTS, { body })).body).toEqual({ data: [{ status: "updated", id: bob.id }] });
    }
    expect((await h.json("GET", `/public/v1/contacts/${bob.id}`)).body.data.account_ids).toEqual([partner]);
    // account_ids: null still clears them all, adding or not
    const cleared = await h.json("POST", CONTACTS, { body: { add_account_ids: true, items: [{ email: "bob@example.com", account_ids: null }] } });
    expect(cleared.body).toEqual({ data: [{ status: "updated", id: bob.id }] });
    expect((await h.json("GET", `/public/v1/contacts/${bob.id}`)).body.data.account_ids).toEqual([]);
    expect(await eventTypes(h)).toEqual(["account.created", "account.created", "account.created", "contact.created", "contact.created", "contact.updated", "contact.created", "contact.updated", "contact.updated", "contact.updated"]);
  });

  test("an addition past the accounts limit makes its item invalid, naming it; add_account_ids must be a boolean, and the accounts batch does not take it", async () => {
    const firms = async (from: number, n: number): Promise<string[]> => (await h.json("POST", ACCOUNTS, { body: { items: Array.from({ length: n }, (_, i) => ({ name: `Firm ${from + i}` })) } })).body.data.map((r: { id: string }) => r.id);
    const ids = [...(await firms(0, 100)), ...(await firms(100, 1))];
    const full = await created("/public/v1/contacts", { email: "full@example.com", account_ids: ids.slice(0, 100) });
    const res = await h.json("POST", CONTACTS, { body: { add_account_ids: true, items: [{ email: "full@example.com", account_ids: [ids[100]] }, { email: "full@example.com", account_ids: [ids[0]] }] } });
    expect([res.status, res.body]).toEqual([
      200,
      { data: [{ status: "invalid", errors: [{ pointer: "/items/0/account_ids", detail: "with the contact's other accounts kept, would be 101 accounts; the limit is 100" }] }, { status: "unchanged", id: full.id }] },
    ]);
    expect((await h.json("GET", `/public/v1/contacts/${full.id}`)).body.data).toEqual(full);
    const items = [{ email: "a@example.com" }];
    const wrong = await h.json("POST", CONTACTS, { body: { add_account_ids: "true", items } });
    expect([wrong.status, wrong.body]).toEqual([422, validation([{ pointer: "/add_account_ids", detail: "must be true or false" }])]);
    const accounts = await h.json("POST", ACCOUNTS, { body: { add_account_ids: true, items: [{ name: "Acme" }] } });
    expect([accounts.status, accounts.body]).toEqual([422, validation([{ pointer: "/add_account_ids", detail: "is not a field here; known: items" }])]);
    expect(await contactCount(h)).toBe(1);
  });
});
