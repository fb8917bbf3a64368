import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { createContact } from "../../server/contacts/service.ts";
import { createUser } from "../../server/users/service.ts";
import { createHarness, UNKNOWN_ORIGIN, type Harness } from "../support/harness.ts";
import { contactCount } from "./support.ts";

let h: Harness;
let routes: { method: string; path: string }[];
const ids: string[] = [];

beforeAll(async () => {
  h = await createHarness();
  routes = h.app.routes.map((r) => ({ method: r.method, path: r.path }));
  for (let i = 0; i < 3; i++) ids.push((await h.json("POST", "/public/v1/contacts", { body: { first_name: `Seed${i}` } })).body.data.id);
  ids.push((await h.json("POST", "/public/v1/accounts", { body: { name: "Seed" } })).body.data.id);
  ids.push((await createUser(h.rt.db, { name: "Seed", email: "seed@crm.test" })).id);
});
afterAll(async () => await h.close());

const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"];
const PARAMS = ["page", "per_page", "sort_by", "sort_direction", "include", "email", "full_name", "created_after", "updated_after", "cursor", "name", "domain", "event", "status"];
const FIELDS = ["first_name", "last_name", "email", "phone", "tags", "custom_fields", "consent", "account_ids", "assigned_user_id", "assigned_user_ids", "name", "domain", "target_url", "events", "description", "id", "full_name", "__proto__", "constructor"];

// Printable ASCII only: anything else cannot be sent as a header value at all.
const headerText = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 300 });

// Paths the route table does not hold, and placeholders for seeded ids (swapped in by resolve).
const EXTRA_PATHS = ["/public/v1/nope", "/nope", "/public/v1/contacts/:id/extra", "/public/v2/contacts", "/"];
const ID_PLACEHOLDERS = ["SEED0", "SEED1", "SEED2", "SEED3", "SEED4", "con_00000000000000000000000000"];

const queryArb = fc.oneof(
  fc.constant(""),
  fc.dictionary(fc.oneof(fc.constantFrom(...PARAMS), fc.string({ maxLength: 10 })), fc.oneof(fc.string({ maxLength: 30 }), fc.constantFrom("1", "0", "100", "101", "asc", "email", "accounts", "2026-01-01T00:00:00Z", "-1", "%", "_")), { maxKeys: 4 }).map((d) => `?${new URLSearchParams(d)}`),
  fc.string({ maxLength: 60 }).map((s) => `?${s}`),
);

const bodyArb: fc.Arbitrary<string | Uint8Array | undefined> = fc.oneof(
  fc.constant(undefined),
  fc.json(),
  fc.anything().map((v) => JSON.stringify(v)),
  fc.dictionary(fc.constantFrom(...FIELDS), fc.oneof(fc.jsonValue(), fc.constantFrom("SEED0", "SEED3", "SEED4", "ada@example.com", null, [], {}))).map((d) => JSON.stringify(d)),
  fc.uint8Array({ maxLength: 200 }),
  // well-formed contacts and accounts with arbitrary extra properties, so creates succeed too
  {
    weight: 3,
    arbitrary: fc
      .tuple(
        fc.record({ first_name: fc.string({ maxLength: 20 }), email: fc.emailAddress(), tags: fc.array(fc.string({ minLength: 1, maxLength: 5 }), { maxLength: 3 }), name: fc.string({ minLength: 1, maxLength: 20 }) }, { requiredKeys: [] }),
        fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue(), { maxKeys: 3 }),
      )
      .map(([known, extra]) => JSON.stringify({ ...extra, ...known })),
  },
);

const headersArb = fc.record(
  {
    authorization: fc.oneof({ arbitrary: fc.constant("VALID"), weight: 8 }, headerText.map((t) => `Bearer ${t}`), headerText),
    "content-type": fc.oneof(
      { arbitrary: fc.constant("application/json"), weight: 6 },
      fc.constantFrom("application/json; charset=utf-8", "application/merge-patch+json", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"),
    ),
    "idempotency-key": headerText,
    "x-request-id": headerText,
  },
  { requiredKeys: ["authorization"] },
);

/** resolve swaps the placeholders for the seeded ids. */
function resolve(text: string): string {
  return text.replace(/SEED(\d)/g, (_, i: string) => ids[Number(i)]!);
}

describe("property: arbitrary requests to every route", () => {
  test("never a 5xx; every 4xx is problem+json with status equal; contacts change only on a 2xx create or delete", async () => {
    // every registered route, so new routes are covered without edits
    // (not /readyz: it answers 503 by design here, where no delivery loop runs)
    const allPaths = [...new Set([...routes.map((r) => r.path).filter((p) => p !== "/readyz"), ...EXTRA_PATHS])];
    const idArb = fc.oneof(fc.constantFrom(...ID_PLACEHOLDERS), fc.string({ maxLength: 40 }));
    const withId = (path: string, id: string) => path.replace(/:[a-zA-Z]+/g, encodeURIComponent(id));
    // Mostly a real route with its own method (and a token), so requests get past routing and auth.
    const apiRoutes = routes.filter((r) => r.path.startsWith("/public/v1"));
    const targetArb = fc.oneof(
      { arbitrary: fc.tuple(fc.constantFrom(...apiRoutes), idArb).map(([r, id]) => ({ method: r.method, path: withId(r.path, id) })), weight: 4 },
      fc.tuple(fc.constantFrom(...METHODS), fc.constantFrom(...allPaths), idArb).map(([method, path, id]) => ({ method, path: withId(path, id) })),
    );
    const requestArb = fc.record({ target: targetArb, query: queryArb, body: bodyArb, headers: headersArb }).map(({ target, ...rest }) => ({ ...target, ...rest }));
    await fc.assert(
      fc.asyncProperty(requestArb, async ({ method, path, query, body, headers }) => {
        const realPath = resolve(path);
        const sent: Record<string, string> = {};
        for (const [name, value] of Object.entries(headers)) if (value !== undefined) sent[name] = name === "authorization" && value === "VALID" ? `Bearer ${h.token}` : value;
        const canHaveBody = method !== "GET" && method !== "HEAD";
        const payload = canHaveBody && body !== undefined ? (typeof body === "string" ? resolve(body) : new Blob([new Uint8Array(body)])) : undefined;
        const before = await contactCount(h);
        const res = await h.app.handle(new Request(`http://localhost${realPath}${query}`, { method, headers: sent, body: payload }));
        const text = await res.text();
        const after = await contactCount(h);
        const label = `${method} ${realPath}${query} -> ${res.status} ${text.slice(0, 300)}`;
        expect({ label, serverError: res.status >= 500 }).toEqual({ label, serverError: false });
        // The operator console answers people with HTML pages; everything else answers with problems.
        if (res.status >= 400 && method !== "HEAD" && !realPath.startsWith("/console")) {
          expect({ label, type: res.headers.get("content-type") }).toEqual({ label, type: "application/problem+json" });
          const problem = JSON.parse(text);
          expect({ label, status: problem.status, type: typeof problem.type, title: typeof problem.title, detail: typeof problem.detail }).toEqual({ label, status: res.status, type: "string", title: "string", detail: "string" });
        }
        const ok = res.status >= 200 && res.status < 300;
        const created = ok && method === "POST" && realPath === "/public/v1/contacts" && res.headers.get("idempotent-replayed") !== "true";
        const deleted = ok && method === "DELETE" && /^\/public\/v1\/contacts\/[^/]+$/.test(realPath);
        expect({ label, delta: after - before }).toEqual({ label, delta: created ? 1 : deleted ? -1 : 0 });
        // Keep the seeded contacts alive for later runs. Created through the service, not HTTP: the
        // requests above may have spent the token's write burst, and a 429 here would be no reseed.
        if (deleted) ids.splice(ids.indexOf(realPath.split("/").pop()!), 1, (await createContact(h.rt, { first_name: "Reseed" }, null, UNKNOWN_ORIGIN)).body.data.id);
      }),
      { numRuns: 400 },
    );
  }, 60_000);
});
