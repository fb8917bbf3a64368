import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ISLANDS } from "../../console/bundle.ts";
import { databasePath } from "../../server/db/database.ts";
import { createLogger } from "../../server/shared/log.ts";
import { sqliteOnly } from "../support/backend.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { addOperator, ConsoleClient, expectSecurityHeaders, OPERATOR } from "./support.ts";

// One console with data on every page: a subscription, a delivery, a rotation, a token, a user.
let h: Harness;
let client: ConsoleClient;
let ids: { subscription: string; delivery: string; rotation: string; token: string; user: string; live: string; gone: string };
let consoleToken: string;

const count = async (table: string) => (await h.rt.db.get<{ n: number }>(`SELECT count(*) AS n FROM ${table}`))!.n;

beforeAll(async () => {
  // The failures provoked below are logged at error: kept off the test output.
  h = await createHarness({ allowPrivateTargets: true }, { log: createLogger("error", () => {}) });
  await addOperator(h.rt.db);
  client = new ConsoleClient((r) => h.app.handle(r));
  await client.signIn();
  const sub = await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "http://127.0.0.1:9/old", description: "Old receiver", events: ["contact.created"] } });
  const ada = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", email: "ada@example.com" } });
  const deliveries = await h.json("GET", "/public/v1/webhook-deliveries");
  await client.get(`/console/rotations/new?from=${sub.body.data.id}`);
  const rotation = await client.post("/console/rotations", { from: sub.body.data.id, target_url: "http://127.0.0.1:9/new", description: "New receiver", events: ["contact.created"] });
  expect(rotation.status).toBe(201);
  await client.get("/console/tokens");
  const created = await client.post("/console/tokens", { name: "made in the console" });
  expect(created.status).toBe(201);
  consoleToken = /value="(crm_[A-Za-z0-9]+)"/.exec(created.text)![1]!;
  await client.get("/console/users");
  await client.post("/console/users", { name: "Grace Hopper", email: "grace@example.com" });
  ids = {
    subscription: sub.body.data.id,
    delivery: deliveries.body.data[0].id,
    rotation: (await h.rt.db.get<{ id: string }>("SELECT new_subscription_id AS id FROM subscription_rotations"))!.id,
    token: (await h.rt.db.get<{ id: string }>("SELECT id FROM api_tokens WHERE name = ?", ["made in the console"]))!.id,
    user: (await h.rt.db.get<{ id: string }>("SELECT id FROM users"))!.id,
    live: ada.body.data.id,
    gone: (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Gone", email: "gone@example.com" } })).body.data.id,
  };
  expect((await h.request("DELETE", `/public/v1/contacts/${ids.gone}`)).status).toBe(204);
});

afterAll(async () => await h.close());

function pages(): string[] {
  return [
    "/console/",
    "/console/?status=pending&event=contact.created",
    `/console/?subscription_id=${ids.subscription}`,
    `/console/deliveries/${ids.delivery}`,
    "/console/subscriptions",
    `/console/subscriptions/${ids.subscription}/delete`,
    `/console/subscriptions/${ids.subscription}/edit`,
    `/console/subscriptions/${ids.subscription}/recover`,
    `/console/subscriptions/${ids.subscription}/secret-rotation`,
    "/console/rotations/new",
    `/console/rotations/${ids.rotation}`,
    "/console/tokens",
    `/console/tokens/${ids.token}/revoke`,
    "/console/users",
    `/console/users/${ids.user}/delete`,
    `/console/contacts/${ids.live}`,
    `/console/contacts/${ids.live}/delete`,
    `/console/contacts/${ids.gone}`,
    `/console/contacts/${ids.gone}/erase`,
    "/console/no-such-page",
  ];
}

function postRoutes(): string[] {
  return [
    "/console/logout",
    "/console/subscriptions",
    `/console/subscriptions/${ids.subscription}/delete`,
    `/console/deliveries/${ids.delivery}/retry`,
    "/console/rotations",
    `/console/rotations/${ids.rotation}/test`,
    `/console/rotations/${ids.rotation}/delete-old`,
    "/console/tokens",
    `/console/tokens/${ids.token}/revoke`,
    "/console/users",
    `/console/users/${ids.user}/delete`,
    `/console/contacts/${ids.live}/delete`,
    `/console/contacts/${ids.gone}/erase`,
    "/console/search",
  ];
}

describe("CSRF", () => {
  test("a form post without the CSRF token is refused with a 403 page and changes nothing", async () => {
    const before = await Promise.all(["webhook_subscriptions", "api_tokens", "users", "contacts", "operator_sessions", "events"].map(count));
    for (const path of postRoutes()) {
      const res = await client.post(path, {
        _csrf: null,
        name: "x",
        email: "x@example.com",
        target_url: "http://127.0.0.1:9/x",
        events: "contact.created",
        from: ids.subscription,
        confirm: "yes",
      });
      expect([path, res.status]).toEqual([path, 403]);
      expect(res.text).toContain("Form expired");
      expectSecurityHeaders(res.headers);
    }
    expect(await Promise.all(["webhook_subscriptions", "api_tokens", "users", "contacts", "operator_sessions", "events"].map(count))).toEqual(before);
    expect(Number((await h.rt.db.get<{ n: number }>("SELECT count(*) AS n FROM events WHERE erased_at IS NOT NULL"))!.n)).toBe(0);
    expect((await h.rt.db.get("SELECT revoked_at FROM api_tokens WHERE id = ?", [ids.token]))).toEqual({ revoked_at: null });
    expect((await client.get("/console/")).status).toBe(200);
  });

  test("another session's token, a made-up token and a sign-in without its pre-session cookie are refused", async () => {
    const other = new ConsoleClient((r) => h.app.handle(r));
    await other.signIn();
    await other.get("/console/users");
    await client.get("/console/users");
    for (const token of [other.csrf, "forged", client.csrf.slice(0, -1)]) {
      expect((await client.post("/console/users", { _csrf: token, name: "Mallory", email: "mallory@example.com" })).status).toBe(403);
    }
    const cookieless = new ConsoleClient((r) => h.app.handle(r));
    await cookieless.get("/console/login");
    cookieless.cookies.clear();
    expect((await cookieless.post("/console/login", OPERATOR)).status).toBe(403);
    expect(await count("users")).toBe(1);
  });

  test("every form that posts carries the CSRF token of the session", async () => {
    let forms = 0;
    for (const path of pages()) {
      const { text } = await client.get(path);
      for (const form of text.match(/<form[^>]*method="post"[\s\S]*?<\/form>/g) ?? []) {
        forms++;
        expect([path, form.includes(`name="_csrf" value="${client.csrf}"`)]).toEqual([path, true]);
      }
    }
    expect(forms).toBeGreaterThan(15);
  });
});

describe("headers and markup", () => {
  test("every page, JSON endpoint, asset and redirect carries the CSP, X-Frame-Options, nosniff and Referrer-Policy", async () => {
    const anonymous = new ConsoleClient((r) => h.app.handle(r));
    const responses = [
      ...(await Promise.all(pages().map((p) => client.get(p)))),
      ...(await Promise.all(["/console/api/deliveries", `/console/api/deliveries/${ids.delivery}`, "/console/assets/console.css", ...ISLANDS.map((i) => `/console/assets/${i}.js`)].map((p) => client.get(p)))),
      ...(await Promise.all(["/console/login", "/console/setup?code=nope", "/console/", "/console/api/deliveries"].map((p) => anonymous.get(p)))),
    ];
    const assets = Array<number>(3 + ISLANDS.length).fill(200);
    expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 404, ...assets, 200, 403, 303, 401]);
    for (const res of responses) expectSecurityHeaders(res.headers);
    for (const res of responses.filter((r) => r.headers.get("content-type")?.startsWith("text/html"))) {
      expect(res.headers.get("cache-control")).toBe("no-store");
    }
  });

  test("/console without its slash is the console's too: without a session it is the redirect to sign-in with the console's headers, not the API's 401", async () => {
    const anonymous = new ConsoleClient((r) => h.app.handle(r));
    const res = await anonymous.get("/console");
    expect({ status: res.status, type: res.headers.get("content-type"), location: res.headers.get("location"), cache: res.headers.get("cache-control"), body: res.text }).toEqual({
      status: 303,
      type: null,
      location: "/console/login",
      cache: "no-store",
      body: "",
    });
    expectSecurityHeaders(res.headers);
    const page = await client.get("/console");
    expect([page.status, /<h1>([^<]*)<\/h1>/.exec(page.text)?.[1]]).toEqual([200, "Deliveries"]);
  });

  test("pages have no inline script, inline style or event handler attribute (the CSP would block them)", async () => {
    for (const path of [...pages(), "/console/login"]) {
      const { text } = await client.get(path);
      for (const script of text.match(/<script[^>]*>/g) ?? []) expect(script).toMatch(/ src="\/console\/assets\/[a-z-]+\.js"| type="application\/json"/);
      expect(text).not.toMatch(/<style|\sstyle="|\son[a-z]+="/i);
    }
  });
});

describe("API tokens and console sessions stay apart", () => {
  test("an API token opens nothing in the console", async () => {
    const bearer = { authorization: `Bearer ${h.token}` };
    const page = await h.app.handle(new Request("http://localhost/console/tokens", { headers: bearer }));
    expect(page.status).toBe(303);
    expect(page.headers.get("location")).toBe("/console/login?next=%2Fconsole%2Ftokens");
    const json = await h.app.handle(new Request("http://localhost/console/api/deliveries", { headers: bearer }));
    expect(json.status).toBe(401);
    expect(json.headers.get("content-type")).toBe("application/problem+json");
    expect(await json.json()).toEqual({
      type: "urn:crm:problem:unauthorized",
      title: "Unauthorized",
      status: 401,
      detail: "Sign in to the console first; console endpoints take the session cookie, not API tokens.",
    });
  });

  test("a console session opens nothing in the public API", async () => {
    const cookie = `crm_console_session=${client.cookies.get("crm_console_session")}`;
    for (const path of ["/public/v1/contacts", "/public/v1/webhook-deliveries"]) {
      const res = await h.app.handle(new Request(`http://localhost${path}`, { headers: { cookie } }));
      expect(res.status).toBe(401);
    }
    // The session cookie is scoped to /console: a browser never sends it to the API at all.
    const login = new ConsoleClient((r) => h.app.handle(r));
    const res = await login.signIn();
    expect(res.headers.getSetCookie()[0]).toContain("; Path=/console;");
  });

  test("no API token appears in any HTML, JS or cookie the console serves (a new token only once, when created)", async () => {
    const tokens = [h.token, consoleToken];
    const served: string[] = [];
    const anonymous = new ConsoleClient((r) => h.app.handle(r));
    for (const path of [...pages(), "/console/api/deliveries", `/console/api/deliveries/${ids.delivery}`, "/console/assets/console.css", ...ISLANDS.map((i) => `/console/assets/${i}.js`)]) {
      const res = await client.get(path);
      served.push(res.text, ...res.headers.getSetCookie());
    }
    for (const path of ["/console/login", "/console/setup?code=x"]) {
      const res = await anonymous.get(path);
      served.push(res.text, ...res.headers.getSetCookie());
    }
    const signIn = await new ConsoleClient((r) => h.app.handle(r)).signIn();
    served.push(...signIn.headers.getSetCookie(), ...client.cookies.values());
    for (const text of served) for (const token of tokens) expect(text.includes(token)).toBe(false);
    const { text } = await client.get("/console/tokens");
    expect(text).toContain(`<code>${consoleToken.slice(0, 12)}…</code>`);
  });
});

describe("bad input gets an answer, never a 500", () => {
  test("wrong filters, unknown ids and page numbers get a page or problem that says what is wrong", async () => {
    const cases: [string, number, string][] = [
      ["/console/?status=bogus", 422, "status must be one of: pending, succeeded, failed"],
      ["/console/?event=contact.exploded", 422, "event must be one of: contact.created, contact.updated, contact.deleted, account.created, account.updated, account.deleted, webhook.ping, subscription.disabled, delivery.exhausted"],
      ["/console/?subscription_id=nope", 422, "subscription id must be a subscription id (sub_...)"],
      ["/console/api/deliveries?status=bogus", 422, "status must be one of: pending, succeeded, failed"],
      ["/console/api/deliveries/dlv_nope", 404, "No webhook delivery with id \\\"dlv_nope\\\" exists."],
      ["/console/deliveries/dlv_nope", 404, "No webhook delivery with id &quot;dlv_nope&quot; exists."],
      ["/console/rotations/sub_nope", 404, "No rotation with id &quot;sub_nope&quot; exists."],
      ["/console/rotations/new?from=sub_nope", 404, "No webhook subscription with id &quot;sub_nope&quot; exists."],
      ["/console/subscriptions/sub_nope/delete", 404, "No webhook subscription with id &quot;sub_nope&quot; exists."],
      ["/console/tokens/tok_nope/revoke", 404, "No active API token with this id exists."],
      ["/console/users?page=abc", 422, "The page number must be a whole number from 1 to 999999999."],
    ];
    for (const [path, status, message] of cases) {
      const res = await client.get(path);
      expect([path, res.status, res.text.includes(message)]).toEqual([path, status, true]);
    }
  });

  test("invalid forms are shown again with the problem and create nothing", async () => {
    const before = await Promise.all(["webhook_subscriptions", "api_tokens", "users"].map(count));
    const cases: [string, Record<string, string | string[]>, number, string][] = [
      ["/console/subscriptions", { target_url: "ftp://example.com/x", events: "contact.created" }, 422, "target_url"],
      ["/console/subscriptions", { target_url: "https://example.com/x", events: ["contact.created", "contact.exploded"] }, 422, "events must be one of: contact.created"],
      ["/console/subscriptions", { target_url: "https://example.com/x" }, 422, "events must be a non-empty list of distinct event kinds"],
      ["/console/tokens", { name: "  " }, 422, "name must be 1 to 100 characters."],
      ["/console/tokens", { name: "tab\tnew\nline" }, 422, "name must not contain control characters (U+0009 at character 4)."],
      ["/console/tokens", { name: "\x1b[31mred" }, 422, "name must not contain control characters (U+001B at character 1)."],
      ["/console/tokens", { name: "csi\u009b31m" }, 422, "name must not contain control characters (U+009B at character 4)."],
      ["/console/users", { name: "Grace again", email: "GRACE@example.com" }, 409, "A user with email grace@example.com already exists."],
      ["/console/users", { name: "", email: "x@example.com" }, 422, "name must be a string of 1 to 200 characters, not spaces alone (a user needs a name)."],
    ];
    for (const [path, fields, status, message] of cases) {
      await client.get(path);
      const res = await client.post(path, fields);
      expect([path, res.status, res.text.includes(message)]).toEqual([path, status, true]);
    }
    expect(await Promise.all(["webhook_subscriptions", "api_tokens", "users"].map(count))).toEqual(before);
  });
});

describe("the service's own failures get the console's pages too", () => {
  sqliteOnly("a database locked past its busy timeout: the form gets a 503 page with Retry-After that says to try again, and nothing is created", async () => {
    const before = await count("users");
    await client.get("/console/users");
    // Another process (a `crm` command, a backup tool) holding the write lock, for longer than the writer waits.
    const other = new Database(databasePath(h.dataDir));
    other.run("BEGIN IMMEDIATE");
    h.db.lockWaitMs = 50;
    try {
      const res = await client.post("/console/users", { name: "Locked Out", email: "locked@example.com" });
      expect({ status: res.status, type: res.headers.get("content-type"), retryAfter: res.headers.get("retry-after") }).toEqual({ status: 503, type: "text/html; charset=utf-8", retryAfter: "5" });
      expect(res.text).toContain("<h1>Try again soon</h1>");
      expect(res.text).toContain("The service cannot use its database just now (it is unreachable, restarting or busy).");
      expectSecurityHeaders(res.headers);
    } finally {
      other.run("ROLLBACK");
      other.close();
      h.db.lockWaitMs = 5_000;
    }
    expect(await count("users")).toBe(before);
  });

  sqliteOnly("a write the database's read-only storage refuses: the form gets a 503 page with Retry-After that says so, nothing is created, and once writable the form creates", async () => {
    const before = await count("users");
    await client.get("/console/users");
    // query_only stands in for the read-only file: SQLite refuses the write with SQLITE_READONLY, as on one.
    h.db.sqlite.run("PRAGMA query_only = ON");
    try {
      const res = await client.post("/console/users", { name: "Read Only", email: "read-only@example.com" });
      expect({ status: res.status, type: res.headers.get("content-type"), retryAfter: res.headers.get("retry-after") }).toEqual({ status: 503, type: "text/html; charset=utf-8", retryAfter: "60" });
      expect(res.text).toContain("<h1>Try again soon</h1>");
      expect(res.text).toContain("The service's database cannot write to its storage (its file or file system is read-only, or refused the write), so nothing was changed.");
    } finally {
      h.db.sqlite.run("PRAGMA query_only = OFF");
    }
    expect(await count("users")).toBe(before);
    await client.get("/console/users");
    expect((await client.post("/console/users", { name: "Read Only", email: "read-only@example.com" })).status).toBe(303);
    expect(await count("users")).toBe(before + 1);
  });

  // SQLite only: on PostgreSQL a service table gone is the missing-tables 503, and renamed columns
  // gave the start page a 200 in one loaded CI run of three (cause not found); the 500 page itself
  // is the same code on both backends, and foundation/errors.test.ts checks PostgreSQL's 500.
  sqliteOnly("an unexpected error is a 500 page naming the request id on pages, and problem+json on the JSON endpoints", async () => {
    await h.rt.db.run("ALTER TABLE webhook_deliveries RENAME TO webhook_deliveries_moved");
    try {
      const page = await client.get("/console/");
      const requestId = page.headers.get("x-request-id");
      expect({ status: page.status, type: page.headers.get("content-type") }).toEqual({ status: 500, type: "text/html; charset=utf-8" });
      expect(page.text).toContain("<h1>Something went wrong</h1>");
      expect(page.text).toContain(`An unexpected error occurred. Quote request id ${requestId} when reporting it.`);
      expect(page.text).not.toMatch(/webhook_deliveries|no such table|does not exist|stack/i);
      const api = await client.get("/console/api/deliveries");
      expect({ status: api.status, type: api.headers.get("content-type"), body: JSON.parse(api.text) }).toEqual({
        status: 500,
        type: "application/problem+json",
        body: { type: "urn:crm:problem:internal", title: "Internal Server Error", status: 500, detail: `An unexpected error occurred. Quote request id ${api.headers.get("x-request-id")} when reporting it.` },
      });
    } finally {
      await h.rt.db.run("ALTER TABLE webhook_deliveries_moved RENAME TO webhook_deliveries");
    }
  });
});
