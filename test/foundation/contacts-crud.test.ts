import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createHarness, type Harness } from "../support/harness.ts";
import { CONTACT_ID, ISO, contactCount, eventTypes, expectProblem, validation } from "./support.ts";

let h: Harness;
beforeEach(async () => {
  h = await createHarness();
});
afterEach(async () => await h.close());

const ada = {
  first_name: "Ada",
  last_name: "Lovelace",
  email: "Ada@Example.COM",
  phone: "+44 20 7946 0000",
  external_id: null,
  tags: ["vip", "engine"],
  custom_fields: { plan: "pro", seats: 3 },
  consent: { email: { granted: true, at: "2026-01-01T00:00:00Z" } },
  source: { system: "import", row: 17 },
  nickname: "Countess",
};

function expectedContact(id: string, at: string, updated = at, version = 1) {
  return {
    id,
    first_name: "Ada",
    last_name: "Lovelace",
    full_name: "Ada Lovelace",
    email: "ada@example.com",
    phone: "+44 20 7946 0000",
    external_id: null,
    tags: ["vip", "engine"],
    custom_fields: { plan: "pro", seats: 3 },
    consent: { email: { granted: true, at: "2026-01-01T00:00:00Z" } },
    account_ids: [],
    assigned_user_id: null,
    assigned_user_ids: [],
    source: { system: "import", row: 17 },
    nickname: "Countess",
    version,
    created_at: at,
    updated_at: updated,
  };
}

describe("contacts CRUD: happy paths", () => {
  test("POST creates a contact and returns the full record", async () => {
    const res = await h.json("POST", "/public/v1/contacts", { body: ada });
    expect(res.status).toBe(201);
    expect(res.headers.get("content-type")).toStartWith("application/json");
    expect(res.headers.get("idempotent-replayed")).toBeNull();
    const { id, created_at } = res.body.data;
    expect(id).toMatch(CONTACT_ID);
    expect(created_at).toMatch(ISO);
    expect(res.body).toEqual({ data: expectedContact(id, created_at) });
    expect(await contactCount(h)).toBe(1);
    expect(await eventTypes(h)).toEqual(["contact.created"]);
  });

  test("POST with only a phone creates a contact with every other field empty, and Location names it", async () => {
    const res = await h.json("POST", "/public/v1/contacts", { body: { phone: "+1 555 0100" } });
    expect(res.status).toBe(201);
    const { id, created_at } = res.body.data;
    expect(res.headers.get("location")).toBe(`/public/v1/contacts/${id}`);
    expect(res.body.data).toEqual({
      id,
      first_name: null,
      last_name: null,
      full_name: "",
      email: null,
      phone: "+1 555 0100",
      external_id: null,
      tags: [],
      custom_fields: {},
      consent: null,
      account_ids: [],
      assigned_user_id: null,
      assigned_user_ids: [],
      version: 1,
      created_at,
      updated_at: created_at,
    });
  });

  test("GET by id returns what POST returned", async () => {
    const created = await h.json("POST", "/public/v1/contacts", { body: ada });
    const res = await h.json("GET", `/public/v1/contacts/${created.body.data.id}`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual(created.body);
  });

  test("PATCH replaces given fields, null clears, other properties are kept", async () => {
    const created = await h.json("POST", "/public/v1/contacts", { body: ada });
    const { id, created_at } = created.body.data;
    await Bun.sleep(3); // updated_at has millisecond resolution
    const res = await h.json("PATCH", `/public/v1/contacts/${id}`, {
      body: { last_name: "King", phone: null, tags: ["countess"], custom_fields: null, nickname: null, extra: [1, 2] },
    });
    expect(res.status).toBe(200);
    const updated_at = res.body.data.updated_at;
    expect(updated_at).toMatch(ISO);
    expect(updated_at > created_at).toBe(true);
    const { nickname: _dropped, ...rest } = expectedContact(id, created_at, updated_at, 2);
    const expected = { ...rest, last_name: "King", full_name: "Ada King", phone: null, tags: ["countess"], custom_fields: {}, extra: [1, 2] };
    expect(res.body).toEqual({ data: expected });
    expect((await h.json("GET", `/public/v1/contacts/${id}`)).body).toEqual({ data: expected });
    expect(await eventTypes(h)).toEqual(["contact.created", "contact.updated"]);
    const payload = JSON.parse((await h.rt.db.get<{ payload: string }>("SELECT payload FROM events WHERE type = 'contact.updated'"))!.payload);
    expect(payload).toEqual({ type: "contact.updated", event_id: expect.stringMatching(/^evt_[0-9A-Z]{26}$/), timestamp: updated_at, data: expected });
  });

  test("PATCH that changes nothing keeps updated_at and writes no event", async () => {
    const created = await h.json("POST", "/public/v1/contacts", { body: ada });
    const { id } = created.body.data;
    await Bun.sleep(3);
    for (const body of [{}, { first_name: "Ada" }, { email: "ADA@example.com", tags: ["vip", "engine"] }, { nickname: "Countess", custom_fields: { seats: 3, plan: "pro" } }]) {
      const res = await h.json("PATCH", `/public/v1/contacts/${id}`, { body });
      expect(res.status).toBe(200);
      expect(res.body).toEqual(created.body);
    }
    expect(await eventTypes(h)).toEqual(["contact.created"]);
    expect((await h.json("GET", `/public/v1/contacts/${id}`)).body).toEqual(created.body);
  });

  test("PATCH clearing an unset property is a no-op", async () => {
    const created = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Grace" } });
    const res = await h.json("PATCH", `/public/v1/contacts/${created.body.data.id}`, { body: { never_set: null, phone: null } });
    expect(res.body).toEqual(created.body);
    expect(await eventTypes(h)).toEqual(["contact.created"]);
  });

  test("DELETE answers 204 with no body, then the contact is gone", async () => {
    const created = await h.json("POST", "/public/v1/contacts", { body: ada });
    const { id } = created.body.data;
    const res = await h.request("DELETE", `/public/v1/contacts/${id}`);
    expect(res.status).toBe(204);
    expect(await res.text()).toBe("");
    expectProblem(await h.json("GET", `/public/v1/contacts/${id}`), 404, "not-found");
    expectProblem(await h.json("DELETE", `/public/v1/contacts/${id}`), 404, "not-found");
    expectProblem(await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: "X" } }), 404, "not-found");
    expect(await contactCount(h)).toBe(0);
    expect(await eventTypes(h)).toEqual(["contact.created", "contact.deleted"]);
    const payload = JSON.parse((await h.rt.db.get<{ payload: string }>("SELECT payload FROM events WHERE type = 'contact.deleted'"))!.payload);
    expect(payload.data).toEqual({ id, version: 2, deleted_at: payload.timestamp });
  });
});

describe("contacts CRUD: errors", () => {
  test("a contact needs at least one of email, first_name, last_name or phone, on create and after a PATCH", async () => {
    const anonymous = validation([{ pointer: "", detail: "needs at least one of email, first_name, last_name, phone" }]);
    for (const body of [{}, { tags: ["vip"], custom_fields: { plan: "pro" } }, { first_name: "", email: null }]) {
      const res = await h.json("POST", "/public/v1/contacts", { body });
      expect({ body, status: res.status, problem: res.body }).toEqual({ body, status: 422, problem: anonymous });
    }
    expect(await contactCount(h)).toBe(0);
    const created = (await h.json("POST", "/public/v1/contacts", { body: { email: "only@example.com" } })).body;
    const cleared = await h.json("PATCH", `/public/v1/contacts/${created.data.id}`, { body: { email: null } });
    expect([cleared.status, cleared.body]).toEqual([422, anonymous]);
    expect((await h.json("GET", `/public/v1/contacts/${created.data.id}`)).body).toEqual(created);
    expect(await eventTypes(h)).toEqual(["contact.created"]);
  });

  test("a name or phone of spaces alone names nobody: refused alone on create and as a PATCH would store it", async () => {
    const anonymous = validation([{ pointer: "", detail: "needs at least one of email, first_name, last_name, phone" }]);
    for (const body of [{ first_name: "   " }, { last_name: "\t\n" }, { phone: " ", first_name: "", last_name: "\u00a0" }]) {
      const res = await h.json("POST", "/public/v1/contacts", { body });
      expect({ body, status: res.status, problem: res.body }).toEqual({ body, status: 422, problem: anonymous });
    }
    expect(await contactCount(h)).toBe(0);
    const created = (await h.json("POST", "/public/v1/contacts", { body: { email: "only@example.com", first_name: "  Ann  " } })).body;
    const blanked = await h.json("PATCH", `/public/v1/contacts/${created.data.id}`, { body: { email: null, first_name: "   " } });
    expect([blanked.status, blanked.body]).toEqual([422, anonymous]);
    expect((await h.json("GET", `/public/v1/contacts/${created.data.id}`)).body).toEqual(created);
    expect(await eventTypes(h)).toEqual(["contact.created"]);
  });

  test("GET of an unknown id is a 404 problem naming it", async () => {
    const res = await h.json("GET", "/public/v1/contacts/con_00000000000000000000000000");
    expectProblem(res, 404);
    expect(res.body).toEqual({ type: "urn:crm:problem:not-found", title: "Not Found", status: 404, detail: 'No contact with id "con_00000000000000000000000000" exists.' });
  });

  test("invalid known fields are 422 with a pointer per field and change nothing", async () => {
    const res = await h.json("POST", "/public/v1/contacts", { body: { email: "not-an-email", first_name: 5, tags: "vip", phone: ["1"] } });
    expectProblem(res, 422, "validation");
    expect(res.body.errors.map((e: { pointer: string }) => e.pointer).sort()).toEqual(["/email", "/first_name", "/phone", "/tags"]);
    expect(await contactCount(h)).toBe(0);
    expect(await eventTypes(h)).toEqual([]);
  });

  test("custom_fields and consent must be objects: never reshaped into one", async () => {
    for (const value of [[1, 2], "abc", 5, true, [{ a: 1 }]]) {
      for (const field of ["custom_fields", "consent"]) {
        const res = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", [field]: value } });
        expect({ value, body: res.body }).toEqual({ value, body: validation([{ pointer: `/${field}`, detail: "must be a JSON object, or null" }]) });
      }
    }
    const created = await h.json("POST", "/public/v1/contacts", { body: ada });
    const patch = await h.json("PATCH", `/public/v1/contacts/${created.body.data.id}`, { body: { custom_fields: "abc", consent: [true] } });
    expect(patch.body).toEqual(
      validation([
        { pointer: "/custom_fields", detail: "must be a JSON object, or null" },
        { pointer: "/consent", detail: "must be a JSON object, or null" },
      ]),
    );
    expect((await h.json("GET", `/public/v1/contacts/${created.body.data.id}`)).body).toEqual(created.body);
    expect(await contactCount(h)).toBe(1);
  });

  test("read-only fields are refused on create and on PATCH", async () => {
    const res = await h.json("POST", "/public/v1/contacts", { body: { id: "con_X", full_name: "A B", created_at: "2020-01-01T00:00:00Z", version: 7 } });
    expect(res.body).toEqual(
      validation([
        { pointer: "/id", detail: "is read-only" },
        { pointer: "/version", detail: "is read-only" },
        { pointer: "/created_at", detail: "is read-only" },
        { pointer: "/full_name", detail: "is derived from first_name and last_name; set those instead" },
      ]),
    );
    const created = await h.json("POST", "/public/v1/contacts", { body: ada });
    const patch = await h.json("PATCH", `/public/v1/contacts/${created.body.data.id}`, { body: { updated_at: "2020-01-01T00:00:00Z" } });
    expect(patch.body).toEqual(validation([{ pointer: "/updated_at", detail: "is read-only" }]));
    expect(await eventTypes(h)).toEqual(["contact.created"]);
  });

  test("GET by id refuses unknown parameters, so a mistyped include is not silently ignored", async () => {
    const created = await h.json("POST", "/public/v1/contacts", { body: ada });
    const res = await h.json("GET", `/public/v1/contacts/${created.body.data.id}?includes=accounts`);
    expect(res.body).toEqual(validation([{ parameter: "includes", detail: "is not a parameter of this contact; known: include" }], "The parameters are invalid."));
    const bad = await h.json("GET", `/public/v1/contacts/${created.body.data.id}?include=owner`);
    expect(bad.body).toEqual(validation([{ parameter: "include", detail: "must be a comma-separated list of: accounts, assigned_user, assigned_users" }]));
    expect((await h.json("GET", `/public/v1/contacts/${created.body.data.id}?include=accounts`)).body).toEqual({ data: { ...created.body.data, accounts: [] } });
  });

  test("a body that is not an object is 422", async () => {
    for (const body of ["[1,2]", '"text"', "42", "null", "true"]) {
      const res = await h.json("POST", "/public/v1/contacts", { body });
      expectProblem(res, 422, "validation");
      expect(res.body.errors).toEqual([{ pointer: "", detail: "must be a JSON object" }]);
    }
    expect(await contactCount(h)).toBe(0);
  });

  test("POST and PATCH without a body are 422", async () => {
    expectProblem(await h.json("POST", "/public/v1/contacts"), 422);
    const created = await h.json("POST", "/public/v1/contacts", { body: ada });
    expectProblem(await h.json("PATCH", `/public/v1/contacts/${created.body.data.id}`), 422);
    expect(await contactCount(h)).toBe(1);
  });
});

describe("contacts CRUD: security", () => {
  test("every contacts route needs a token", async () => {
    const created = await h.json("POST", "/public/v1/contacts", { body: ada });
    const id = created.body.data.id;
    for (const [method, path, body] of [
      ["POST", "/public/v1/contacts", ada],
      ["GET", "/public/v1/contacts", undefined],
      ["GET", `/public/v1/contacts/${id}`, undefined],
      ["PATCH", `/public/v1/contacts/${id}`, { first_name: "Eve" }],
      ["DELETE", `/public/v1/contacts/${id}`, undefined],
    ] as const) {
      const res = await h.json(method, path, { body, headers: { authorization: "Bearer crm_wrongwrongwrongwrongwrongwrongwrongwrong" } });
      expectProblem(res, 401, "unauthorized");
    }
    expect((await h.json("GET", `/public/v1/contacts/${id}`)).body).toEqual(created.body);
  });

  test("property names like __proto__ are refused (safe JSON, issue 6) and nothing is stored", async () => {
    const res = await h.json("POST", "/public/v1/contacts", { body: '{"__proto__":{"polluted":true},"constructor":{"prototype":{"x":1}}}' });
    expectProblem(res, 400, "invalid-json");
    expect(res.body.errors).toEqual([{ pointer: "/__proto__", detail: 'uses the key "__proto__", which is refused to protect object prototypes' }]);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(await contactCount(h)).toBe(0);
  });
});
