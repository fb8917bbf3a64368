import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createHarness, type Harness } from "../support/harness.ts";
import { ISO, expectProblem, validation } from "./support.ts";

let h: Harness;
beforeEach(async () => {
  h = await createHarness();
});
afterEach(async () => await h.close());

const MISSING = "usr_00000000000000000000000000";
const userCount = async () => (await h.rt.db.get<{ n: number }>("SELECT count(*) AS n FROM users"))!.n;

describe("users: happy paths", () => {
  test("POST creates a user (201, Location, email lowercased); GET by id and the list return it", async () => {
    const res = await h.json("POST", "/public/v1/users", { body: { name: "Grace Hopper", email: "Grace@Navy.mil" } });
    expect(res.status).toBe(201);
    const { id, created_at } = res.body.data;
    expect(id).toMatch(/^usr_[0-9A-Z]{26}$/);
    expect(created_at).toMatch(ISO);
    expect(res.headers.get("location")).toBe(`/public/v1/users/${id}`);
    expect(res.body).toEqual({ data: { id, name: "Grace Hopper", email: "grace@navy.mil", created_at, updated_at: created_at } });
    expect((await h.json("GET", res.headers.get("location")!)).body).toEqual(res.body);
    expect((await h.json("GET", "/public/v1/users")).body).toEqual({ data: [res.body.data], meta: { current_page: 1, last_page: 1, per_page: 25, total: 1, next_cursor: null } });
  });

  test("PATCH changes the name or email; the same values again keep updated_at", async () => {
    const user = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@navy.mil" } })).body.data;
    await Bun.sleep(2);
    const renamed = await h.json("PATCH", `/public/v1/users/${user.id}`, { body: { name: "Grace Hopper", email: "GH@navy.mil" } });
    expect(renamed.status).toBe(200);
    const expected = { ...user, name: "Grace Hopper", email: "gh@navy.mil", updated_at: renamed.body.data.updated_at };
    expect(renamed.body).toEqual({ data: expected });
    expect(expected.updated_at > user.updated_at).toBe(true);
    expect((await h.json("PATCH", `/public/v1/users/${user.id}`, { body: { email: "gh@navy.mil" } })).body).toEqual({ data: expected });
    expect((await h.json("GET", `/public/v1/users/${user.id}`)).body).toEqual({ data: expected });
  });

  test("a name is stored as given: the spaces around it kept (spaces alone are no name: users: errors)", async () => {
    const user = await h.json("POST", "/public/v1/users", { body: { name: "  Grace  ", email: "grace@navy.mil" } });
    const { id, created_at } = user.body.data;
    expect([user.status, user.body]).toEqual([201, { data: { id, name: "  Grace  ", email: "grace@navy.mil", created_at, updated_at: created_at } }]);
    const renamed = await h.json("PATCH", `/public/v1/users/${id}`, { body: { name: " Grace B. " } });
    expect([renamed.status, renamed.body]).toEqual([200, { data: { id, name: " Grace B. ", email: "grace@navy.mil", created_at, updated_at: renamed.body.data.updated_at } }]);
    expect((await h.json("GET", `/public/v1/users/${id}`)).body).toEqual(renamed.body);
  });

  test("an Idempotency-Key replays the creation with its Location", async () => {
    const first = await h.json("POST", "/public/v1/users", { body: { name: "Ada", email: "ada@example.com" }, headers: { "idempotency-key": "user-1" } });
    const again = await h.json("POST", "/public/v1/users", { body: { name: "Ada", email: "ada@example.com" }, headers: { "idempotency-key": "user-1" } });
    expect([again.status, again.headers.get("idempotent-replayed"), again.headers.get("location"), again.body]).toEqual([201, "true", first.headers.get("location"), first.body]);
    expect(await userCount()).toBe(1);
  });
});

describe("users: errors", () => {
  test("a taken email is 409 on create and on PATCH; bad fields are 422; an unknown id is 404; nothing changes", async () => {
    const grace = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@navy.mil" } })).body.data;
    const alan = (await h.json("POST", "/public/v1/users", { body: { name: "Alan", email: "alan@example.com" } })).body.data;
    const taken = { type: "urn:crm:problem:user-exists", title: "Conflict", status: 409, detail: "A user with email grace@navy.mil already exists." };
    expect((await h.json("POST", "/public/v1/users", { body: { name: "Other", email: "GRACE@navy.mil" } })).body).toEqual(taken);
    expect((await h.json("PATCH", `/public/v1/users/${alan.id}`, { body: { email: "grace@navy.mil" } })).body).toEqual(taken);
    expect((await h.json("POST", "/public/v1/users", { body: { name: "", email: "x" } })).body).toEqual(
      validation([
        { pointer: "/name", detail: "must be a string of 1 to 200 characters, not spaces alone (a user needs a name)" },
        { pointer: "/email", detail: "must be an email address of at most 254 characters" },
      ]),
    );
    expect((await h.json("PATCH", `/public/v1/users/${alan.id}`, { body: { name: "x".repeat(201) } })).body).toEqual(validation([{ pointer: "/name", detail: "must be a string of 1 to 200 characters, not spaces alone (a user needs a name)" }]));
    const noName = validation([{ pointer: "/name", detail: "must be a string of 1 to 200 characters, not spaces alone (a user needs a name)" }]);
    expect((await h.json("POST", "/public/v1/users", { body: { name: "   ", email: "blank@example.com" } })).body).toEqual(noName);
    expect((await h.json("PATCH", `/public/v1/users/${alan.id}`, { body: { name: " \t " } })).body).toEqual(noName);
    const notFound = { type: "urn:crm:problem:not-found", title: "Not Found", status: 404, detail: `No user with id "${MISSING}" exists.` };
    expect((await h.json("GET", `/public/v1/users/${MISSING}`)).body).toEqual(notFound);
    expect((await h.json("PATCH", `/public/v1/users/${MISSING}`, { body: { name: "X" } })).body).toEqual(notFound);
    expect((await h.json("GET", "/public/v1/users")).body.data).toEqual([grace, alan]);
  });
});

describe("users: security", () => {
  test("creating, reading and changing users needs a token", async () => {
    const user = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@navy.mil" } })).body.data;
    for (const [method, path, body] of [
      ["POST", "/public/v1/users", { name: "Evil", email: "evil@example.com" }],
      ["GET", `/public/v1/users/${user.id}`, undefined],
      ["PATCH", `/public/v1/users/${user.id}`, { name: "Evil" }],
    ] as const) {
      expectProblem(await h.json(method, path, { body, headers: { authorization: "Bearer crm_wrong" } }), 401, "unauthorized");
    }
    expect((await h.json("GET", `/public/v1/users/${user.id}`)).body).toEqual({ data: user });
    expect(await userCount()).toBe(1);
  });

  test("browser calls are refused before anything is stored", async () => {
    expectProblem(await h.json("POST", "/public/v1/users", { body: { name: "Evil", email: "evil@example.com" }, headers: { origin: "https://evil.example" } }), 403, "browser-request");
    expect(await userCount()).toBe(0);
  });
});
