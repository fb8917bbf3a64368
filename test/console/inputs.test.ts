import { afterAll, beforeAll, expect, test } from "bun:test";
import { createHarness, type Harness } from "../support/harness.ts";
import { addOperator, ConsoleClient } from "./support.ts";

// What an operator (or a tampered link) can type into the new pages gets a page that says what is
// wrong, never a 500 and never a silent guess.
let h: Harness;
let client: ConsoleClient;
beforeAll(async () => {
  h = await createHarness();
  await addOperator(h.rt.db);
  client = new ConsoleClient((r) => h.app.handle(r));
  await client.signIn();
});
afterAll(() => h.close());

test("malformed positions, filters, ids and searches answer 4xx with the reason", async () => {
  const cases: [string, number, string][] = [
    ["/console/?before=yesterday", 422, "before must be the position a previous page gave"],
    ["/console/?before=1.dlv_short", 422, "before must be the position a previous page gave"],
    ["/console/?event_id=evt_nope", 422, "event_id must be an event id (evt_...)"],
    ["/console/?until=2026-13-45T99:99", 422, "until must be a date and time (YYYY-MM-DDTHH:MM, UTC)"],
    ["/console/?status=failed&sort=oldest", 422, "sort is not a filter of this page"],
    ["/console/api/deliveries?contact_id=42", 422, "contact_id must be a contact id (con_...)"],
    ["/console/contacts?before=1.con_x", 422, "The page position is invalid."],
    [`/console/contacts?q=${"x".repeat(255)}`, 422, "The search must be at most 254 characters."],
    ["/console/contacts/con_01J00000000000000000000000", 404, "No contact with id"],
    ["/console/contacts/%3Cscript%3E", 404, "No contact with id"],
    ["/console/events/evt_01J00000000000000000000000", 404, "No event with id"],
    ["/console/subscriptions/sub_01J00000000000000000000000", 404, "No webhook subscription with id"],
    ["/console/search?q=evt_01J00000000000000000000000", 404, "Nothing has the id evt_01J00000000000000000000000"],
    ["/console/search?q=%20", 404, "Type a delivery id"],
    ["/console/welcome?code=nope", 403, "This link is invalid, expired or already used."],
    ["/console/operators/opr_nope/reset-password", 404, "No operator with id"],
  ];
  const answers = [];
  for (const [path, , message] of cases) {
    const res = await client.get(path);
    answers.push([path, res.status, res.text.includes(message)]);
  }
  expect(answers).toEqual(cases.map(([path, status]) => [path, status, true]));
});

test("an empty or overlong link code is refused like a wrong one, and creates nothing", async () => {
  const visitor = new ConsoleClient((r) => h.app.handle(r));
  await visitor.get("/console/login"); // a pre-session CSRF token, so the posts reach the link check
  for (const code of ["", "x".repeat(150)]) {
    expect((await visitor.get(`/console/welcome?code=${code}`)).status).toBe(403);
    const posted = await visitor.post("/console/welcome", { code, password: "a long new password", password_again: "a long new password" });
    expect([posted.status, posted.text.includes("This link is invalid, expired or already used.")]).toEqual([403, true]);
  }
  expect(await h.rt.db.get("SELECT count(*) AS n FROM operators")).toEqual({ n: 1 });
});

test("a NUL character in a search, a sign-in or a form field is refused with 4xx, never stored and never a 500", async () => {
  const searches = [];
  for (const path of ["/console/contacts?q=%00", "/console/search?q=a%00b"]) searches.push([path, (await client.get(path)).status]);
  expect(searches).toEqual([["/console/contacts?q=%00", 400], ["/console/search?q=a%00b", 400]]);
  const visitor = new ConsoleClient((r) => h.app.handle(r));
  await visitor.get("/console/login");
  const signIn = await visitor.post("/console/login", { email: "oncall\u0000@example.com", password: "anything at all" });
  const token = await client.post("/console/tokens", { name: "sync\u0000job" });
  expect([signIn.status, token.status, JSON.parse(token.text).errors]).toEqual([422, 422, [{ pointer: "/name", detail: "must be text of at most 10000 characters without the NUL character, given at most 20 times" }]]);
  expect(await h.rt.db.get("SELECT count(*) AS n FROM api_tokens WHERE name LIKE 'sync%'")).toEqual({ n: 0 });
});

test("an address with no console page is a 404 page; one under /console/api is a 404 problem, as the JSON endpoints answer", async () => {
  const page = await client.get("/console/nope");
  const api = await client.get("/console/api/nope");
  expect([page.status, page.headers.get("content-type"), page.text.includes("There is no console page at this address.")]).toEqual([404, "text/html; charset=utf-8", true]);
  expect([api.status, api.headers.get("content-type"), JSON.parse(api.text)]).toEqual([
    404,
    "application/problem+json",
    { type: "urn:crm:problem:not-found", title: "Not Found", status: 404, detail: "There is no console API endpoint at this address." },
  ]);
});
