import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createUser } from "../../server/users/service.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { ISO, contactCount, eventTypes, expectProblem, postAccount, validation } from "./support.ts";

let h: Harness;
beforeEach(async () => {
  h = await createHarness();
});
afterEach(async () => await h.close());

const MISSING_ACC = "acc_00000000000000000000000000";
const MISSING_USR = "usr_00000000000000000000000000";

const account = (body: Record<string, unknown>) => postAccount(h, body);

describe("accounts: happy paths", () => {
  test("POST creates an account; GET by id returns it", async () => {
    const res = await h.json("POST", "/public/v1/accounts", { body: { name: "Acme Ltd", domain: "ACME.example", industry: "anvils" } });
    expect(res.status).toBe(201);
    const { id, created_at } = res.body.data;
    expect(id).toMatch(/^acc_[0-9A-Z]{26}$/);
    expect(created_at).toMatch(ISO);
    expect(res.body).toEqual({ data: { id, name: "Acme Ltd", domain: "acme.example", industry: "anvils", version: 1, created_at, updated_at: created_at } });
    expect((await h.json("GET", `/public/v1/accounts/${id}`)).body).toEqual(res.body);
  });

  test("list filters by name and domain, exact and case-insensitive", async () => {
    const a = await account({ name: "Acme Ltd", domain: "acme.example" });
    const b = await account({ name: "Acme", domain: "acme.test" });
    const c = await account({ name: "Globex" });
    const list = async (q: string) => (await h.json("GET", `/public/v1/accounts${q}`)).body;
    expect(await list("")).toEqual({ data: [a, b, c], meta: { current_page: 1, last_page: 1, per_page: 25, total: 3, next_cursor: null } });
    expect(await list("?name=acme")).toEqual({ data: [b], meta: { current_page: 1, last_page: 1, per_page: 25, total: 1, next_cursor: null } });
    expect((await list("?name=ACME%20LTD")).data).toEqual([a]);
    expect((await list("?domain=ACME.TEST")).data).toEqual([b]);
    expect((await list("?name=Acme&domain=acme.example")).data).toEqual([]);
    expect((await list("?name=Acm")).data).toEqual([]);
    const page = await list("?per_page=2");
    expect(page.data).toEqual([a, b]);
    const next = await list(`?per_page=2&cursor=${page.meta.next_cursor}`);
    expect(next).toEqual({ data: [c], meta: { current_page: 0, last_page: 2, per_page: 2, total: 3, next_cursor: null } });
  });

  test("the name filter folds case in every script and matches composed and decomposed accents alike", async () => {
    const muller = await account({ name: "Müller GmbH" });
    const greek = await account({ name: "Ωμέγα Α.Ε." });
    await account({ name: "Muller GmbH" });
    const names = async (name: string) => (await h.json("GET", `/public/v1/accounts?name=${encodeURIComponent(name)}`)).body.data.map((a: { id: string }) => a.id);
    expect(await names("MÜLLER GMBH")).toEqual([muller.id]);
    expect(await names("müller gmbh")).toEqual([muller.id]);
    expect(await names("Mu\u0308ller GmbH")).toEqual([muller.id]);
    expect(await names("ΩΜΈΓΑ α.ε.")).toEqual([greek.id]);
    expect(await names("Müller")).toEqual([]);
  });

  test("users made on the command line are listed", async () => {
    const u1 = await createUser(h.rt.db, { name: "Grace Hopper", email: "Grace@Navy.mil" });
    const u2 = await createUser(h.rt.db, { name: "Alan Turing", email: "alan@bletchley.uk" });
    expect(u1).toEqual({ id: expect.stringMatching(/^usr_[0-9A-Z]{26}$/), name: "Grace Hopper", email: "grace@navy.mil", created_at: expect.stringMatching(ISO), updated_at: u1.created_at });
    const res = await h.json("GET", "/public/v1/users");
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: [u1, u2], meta: { current_page: 1, last_page: 1, per_page: 25, total: 2, next_cursor: null } });
    const paged = await h.json("GET", "/public/v1/users?per_page=1&page=2");
    expect(paged.body).toEqual({ data: [u2], meta: { current_page: 2, last_page: 2, per_page: 1, total: 2, next_cursor: null } });
  });
});

describe("relations on contacts: happy paths", () => {
  test("account_ids, assigned_user_id and assigned_user_ids are stored in order and embedded on request", async () => {
    const a1 = await account({ name: "One" });
    const a2 = await account({ name: "Two" });
    const u1 = await createUser(h.rt.db, { name: "U1", email: "u1@crm.test" });
    const u2 = await createUser(h.rt.db, { name: "U2", email: "u2@crm.test" });
    const res = await h.json("POST", "/public/v1/contacts", {
      body: { first_name: "Rel", account_ids: [a2.id, a1.id], assigned_user_id: u1.id, assigned_user_ids: [u2.id, u1.id] },
    });
    expect(res.status).toBe(201);
    const c = res.body.data;
    expect(c.account_ids).toEqual([a2.id, a1.id]);
    expect(c.assigned_user_id).toBe(u1.id);
    expect(c.assigned_user_ids).toEqual([u2.id, u1.id]);
    const full = await h.json("GET", `/public/v1/contacts/${c.id}?include=accounts,assigned_user,assigned_users`);
    expect(full.body).toEqual({ data: { ...c, accounts: [a2, a1], assigned_user: u1, assigned_users: [u2, u1] } });
  });

  test("PATCH replaces relations, null clears them, and omitted relations stay", async () => {
    const a1 = await account({ name: "One" });
    const a2 = await account({ name: "Two" });
    const u1 = await createUser(h.rt.db, { name: "U1", email: "u1@crm.test" });
    const u2 = await createUser(h.rt.db, { name: "U2", email: "u2@crm.test" });
    const c = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Rel", account_ids: [a1.id], assigned_user_id: u1.id, assigned_user_ids: [u1.id] } })).body.data;
    const path = `/public/v1/contacts/${c.id}`;
    let res = await h.json("PATCH", path, { body: { account_ids: [a1.id, a2.id] } });
    expect(res.body.data).toEqual({ ...c, account_ids: [a1.id, a2.id], version: 2, updated_at: res.body.data.updated_at });
    res = await h.json("PATCH", path, { body: { assigned_user_id: u2.id, assigned_user_ids: [u2.id] } });
    expect(res.body.data).toEqual({ ...c, account_ids: [a1.id, a2.id], assigned_user_id: u2.id, assigned_user_ids: [u2.id], version: 3, updated_at: res.body.data.updated_at });
    res = await h.json("PATCH", path, { body: { account_ids: null, assigned_user_id: null, assigned_user_ids: [] } });
    expect(res.body.data).toEqual({ ...c, account_ids: [], assigned_user_id: null, assigned_user_ids: [], version: 4, updated_at: res.body.data.updated_at });
    const events = await eventTypes(h);
    // the same relations again are no change
    res = await h.json("PATCH", path, { body: { account_ids: [], assigned_user_ids: null } });
    expect(await eventTypes(h)).toEqual(events);
    expect(events).toEqual(["account.created", "account.created", "contact.created", "contact.updated", "contact.updated", "contact.updated"]);
  });

  test("each contact row's copy of its relation ids equals the relation tables after creates, changes, refusals and no-ops", async () => {
    const [a1, a2, a3] = [await account({ name: "One" }), await account({ name: "Two" }), await account({ name: "Three" })];
    const [u1, u2] = [await createUser(h.rt.db, { name: "U1", email: "u1@crm.test" }), await createUser(h.rt.db, { name: "U2", email: "u2@crm.test" })];
    const created = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Rel", account_ids: [a3.id, a1.id], assigned_user_ids: [u2.id, u1.id] } });
    const other = await h.json("POST", "/public/v1/contacts", { body: { first_name: "No relations" } });
    const path = `/public/v1/contacts/${created.body.data.id}`;
    const steps: [unknown, number][] = [
      [{ account_ids: [a2.id, a3.id, a1.id] }, 200],
      [{ account_ids: [a1.id, MISSING_ACC] }, 422],
      [{ assigned_user_ids: [u1.id] }, 200],
      [{ assigned_user_ids: [u1.id] }, 200],
      [{ first_name: "Only a name" }, 200],
      [{ account_ids: null, assigned_user_ids: [u2.id, u1.id] }, 200],
    ];
    for (const [body, status] of steps) expect((await h.request("PATCH", path, { body })).status).toBe(status);
    const copies = (await h.rt.db.all<{ id: string; account_ids: string; assigned_user_ids: string }>("SELECT id, account_ids, assigned_user_ids FROM contacts ORDER BY id"));
    const ofRecord = async (table: string, column: string, id: string) =>
      (await h.rt.db.all<{ related: string }>(`SELECT ${column} AS related FROM ${table} WHERE contact_id = ? ORDER BY position`, [id])).map((r) => r.related);
    expect(copies.map((c) => ({ id: c.id, account_ids: JSON.parse(c.account_ids), assigned_user_ids: JSON.parse(c.assigned_user_ids) }))).toEqual(
      await Promise.all(copies.map(async (c) => ({ id: c.id, account_ids: await ofRecord("contact_accounts", "account_id", c.id), assigned_user_ids: await ofRecord("contact_assigned_users", "user_id", c.id) }))),
    );
    expect(copies.map((c) => [c.account_ids, c.assigned_user_ids])).toEqual([
      ["[]", JSON.stringify([u2.id, u1.id])],
      ["[]", "[]"],
    ]);
    expect((await h.json("GET", path)).body.data).toMatchObject({ first_name: "Only a name", account_ids: [], assigned_user_ids: [u2.id, u1.id] });
    expect((await h.json("GET", `/public/v1/contacts/${other.body.data.id}`)).body).toEqual(other.body);
  });

  test("an account referred to by a contact stays; deleting the contact removes its links", async () => {
    const a1 = await account({ name: "One" });
    const c = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Rel", account_ids: [a1.id] } })).body.data;
    expect((await h.request("DELETE", `/public/v1/contacts/${c.id}`)).status).toBe(204);
    expect((await h.rt.db.get("SELECT count(*) AS n FROM contact_accounts"))).toEqual({ n: 0 });
    expect((await h.json("GET", `/public/v1/accounts/${a1.id}`)).body).toEqual({ data: a1 });
  });
});

describe("relations: errors", () => {
  test("unknown account and user ids are 422 with one pointer per bad id, nothing stored", async () => {
    const a1 = await account({ name: "One" });
    const u1 = await createUser(h.rt.db, { name: "U1", email: "u1@crm.test" });
    const res = await h.json("POST", "/public/v1/contacts", {
      body: { first_name: "Rel", account_ids: [a1.id, MISSING_ACC], assigned_user_id: MISSING_USR, assigned_user_ids: [MISSING_USR, u1.id, "usr_11111111111111111111111111"] },
    });
    expect(res.body).toEqual(
      validation(
        [
          { pointer: "/account_ids/1", detail: `no account with id ${MISSING_ACC} exists` },
          { pointer: "/assigned_user_id", detail: `no user with id ${MISSING_USR} exists` },
          { pointer: "/assigned_user_ids/0", detail: `no user with id ${MISSING_USR} exists` },
          { pointer: "/assigned_user_ids/2", detail: "no user with id usr_11111111111111111111111111 exists" },
        ],
        "The contact refers to accounts or users that do not exist.",
      ),
    );
    expect(await contactCount(h)).toBe(0);
    expect(await eventTypes(h)).toEqual(["account.created"]);
  });

  test("unknown ids on PATCH are 422 and change nothing", async () => {
    const a1 = await account({ name: "One" });
    const c = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "X", account_ids: [a1.id] } })).body;
    const res = await h.json("PATCH", `/public/v1/contacts/${c.data.id}`, { body: { first_name: "Y", account_ids: [MISSING_ACC] } });
    expect(res.body).toEqual(validation([{ pointer: "/account_ids/0", detail: `no account with id ${MISSING_ACC} exists` }], "The contact refers to accounts or users that do not exist."));
    expect((await h.json("GET", `/public/v1/contacts/${c.data.id}`)).body).toEqual(c);
    expect(await eventTypes(h)).toEqual(["account.created", "contact.created"]);
  });

  test("malformed or repeated relation ids are 422 from the schema", async () => {
    // A bad id is named at its index, a repeat at the repeat; a value that is no list, at the field.
    for (const [body, pointer] of [
      [{ account_ids: ["nope"] }, "/account_ids/0"],
      [{ account_ids: "acc_00000000000000000000000000" }, "/account_ids"],
      [{ account_ids: [MISSING_ACC, MISSING_ACC] }, "/account_ids/1"],
      [{ assigned_user_id: "acc_00000000000000000000000000" }, "/assigned_user_id"],
      [{ assigned_user_ids: [1] }, "/assigned_user_ids/0"],
    ] as const) {
      const res = await h.json("POST", "/public/v1/contacts", { body });
      expectProblem(res, 422, "validation");
      expect(res.body.errors[0].pointer).toBe(pointer);
    }
    expect(await contactCount(h)).toBe(0);
  });

  test("accounts: missing name, bad domain and unknown id", async () => {
    expect((await h.json("POST", "/public/v1/accounts", { body: { domain: "x.test" } })).body).toEqual(
      validation([{ pointer: "/name", detail: "must be a string of 1 to 200 characters, not spaces alone (an account needs a name)" }]),
    );
    expect((await h.json("POST", "/public/v1/accounts", { body: { name: "X", domain: "not a domain" } })).body).toEqual(
      validation([{ pointer: "/domain", detail: "must be a domain name like example.com of at most 253 characters, counted in ASCII form (müller.de as xn--mller-kva.de), or null" }]),
    );
    expect((await h.json("GET", "/public/v1/accounts/acc_nope")).body).toEqual({ type: "urn:crm:problem:not-found", title: "Not Found", status: 404, detail: 'No account with id "acc_nope" exists.' });
    expectProblem(await h.json("GET", "/public/v1/accounts?industry=x"), 422, "validation");
    expectProblem(await h.json("GET", "/public/v1/accounts?sort_by=id"), 422, "validation");
    expectProblem(await h.json("GET", "/public/v1/users?per_page=0"), 422, "validation");
    expectProblem(await h.json("GET", "/public/v1/users?email=x"), 422, "validation");
  });

  test("users made twice with one email are refused", async () => {
    await createUser(h.rt.db, { name: "A", email: "a@crm.test" });
    await expect(createUser(h.rt.db, { name: "B", email: "A@CRM.TEST" })).rejects.toThrow("A user with email a@crm.test already exists.");
    await expect(createUser(h.rt.db, { name: "", email: "b@crm.test" })).rejects.toThrow("name must be a string of 1 to 200 characters, not spaces alone (a user needs a name).");
    await expect(createUser(h.rt.db, { name: "B", email: "b" })).rejects.toThrow("email must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de).");
  });
});

describe("relations: security", () => {
  test("accounts and users need a token", async () => {
    const a1 = await account({ name: "One" });
    for (const [method, path] of [["GET", "/public/v1/accounts"], ["GET", `/public/v1/accounts/${a1.id}`], ["POST", "/public/v1/accounts"], ["GET", "/public/v1/users"]]) {
      expectProblem(await h.json(method!, path!, { body: method === "POST" ? { name: "x" } : undefined, headers: { authorization: "Bearer nope" } }), 401, "unauthorized");
    }
    expect((await h.json("GET", "/public/v1/accounts")).body.meta.total).toBe(1);
  });
});
