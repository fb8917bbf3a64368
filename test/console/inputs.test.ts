import { afterAll, beforeAll, expect, test } from "bun:test";
import { createHarness, type Harness } from "../support/harness.ts";
import { LOST_SECRET_REASON } from "../../server/webhooks/service.ts";
import { replaceLostSecret } from "../../server/webhooks/store.ts";
import { addStoredSubscription } from "../webhooks/support.ts";
import { sealedAddress } from "../../console/addresses.ts";
import type { ConsoleSession } from "../../console/model.ts";
import type { ProblemError } from "../../server/shared/problem.ts";
import { addOperator, ConsoleClient, OPERATOR } from "./support.ts";
import { positionOf, positionText } from "../../console/shell.ts";

// What an operator (or a tampered link) can type into the new pages gets a page that says what is
// wrong, never a 500 and never a silent guess.
let h: Harness;
let client: ConsoleClient;
let operator: ConsoleSession["operator"];
beforeAll(async () => {
  h = await createHarness();
  operator = await addOperator(h.rt.db);
  client = new ConsoleClient((r) => h.app.handle(r));
  await client.signIn();
});
afterAll(() => h.close());

/** messageMain is the <main> of the console's page explaining a problem (messagePage). */
const messageMain = (title: string, text: string) => `<section class="card message"><h1>${title}</h1><p>${text}</p><p><a class="button" href="/console/">Back to the console</a></p></section>`;

/** answerOf reduces a console answer to what a test compares whole: status, content type, and for a page its title, its <main> and its error notice (as text: the fields it names are links). */
function answerOf(res: { status: number; headers: Headers; text: string }) {
  const type = res.headers.get("content-type");
  if (type !== "text/html; charset=utf-8") return { status: res.status, type, body: JSON.parse(res.text) };
  return {
    status: res.status,
    type,
    title: /<title>([^<]*)<\/title>/.exec(res.text)?.[1],
    main: /<main[^>]*>([\s\S]*)<\/main>/.exec(res.text)?.[1],
    notice: /<div class="notice notice-error"[^>]*>([\s\S]*?)<\/div>/.exec(res.text)?.[1]!.replace(/<[^>]+>/g, "") ?? null,
  };
}

test("malformed positions, filters, ids and searches answer 4xx with the reason", async () => {
  const cases: [string, number, string][] = [
    ["/console/?before=yesterday", 422, "before must be the position a previous page gave"],
    ["/console/?before=1.dlv_short", 422, "before must be the position a previous page gave"],
    ["/console/?event_id=evt_nope", 422, "event id must be an event id (evt_...)"],
    ["/console/?until=2026-13-45T99:99", 422, "until must be a date and time (YYYY-MM-DDTHH:MM, UTC)"],
    ["/console/?status=failed&sort=oldest", 422, "sort is not a filter of this page"],
    ["/console/api/deliveries?contact_id=42", 422, "contact_id must be a contact id (con_...)"],
    ["/console/contacts?before=1.con_x", 422, "The page position is invalid."],
    ["/console/contacts?before=1.dlv_01J00000000000000000000000", 422, "The page position is invalid."],
    ["/console/?before=1.con_01J00000000000000000000000", 422, "before must be the position a previous page gave"],
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

test("a list's page position reads back as written, and only for ids of its own list's kind", () => {
  const position = { value: 1_767_225_600_123, id: "dlv_01J00000000000000000000000" };
  const text = positionText(position);
  expect([text, positionOf(text, "dlv"), positionOf(text, "con"), positionOf(`1.5.${position.id}`, "dlv"), positionOf(`1234567890123456.${position.id}`, "dlv")]).toEqual([
    "1767225600123.dlv_01J00000000000000000000000",
    position,
    null,
    null,
    null,
  ]);
});

test("the search box's post is checked as its address is: too long or with a NUL it is 422 naming the field; what matches nothing is said at the search's sealed address", async () => {
  await client.get("/console/");
  const answers = [];
  for (const q of ["x".repeat(301), "a\u0000b", "evt_01J00000000000000000000000", " "]) {
    const posted = await client.post("/console/search", { q });
    const location = posted.headers.get("location");
    const res = location ? await client.get(location) : posted;
    answers.push([posted.status, location && /^\/console\/search\?s=[A-Za-z0-9_-]+$/.test(location), res.status, /<section class="card message"><h1>[^<]*<\/h1><p>([^<]*)<\/p>/.exec(res.text)?.[1] ?? /class="notice[^>]*>([^<]*)</.exec(res.text)?.[1] ?? null]);
  }
  expect(answers).toEqual([
    [422, null, 422, "q must be at most 300 characters."],
    [422, null, 422, "q must not contain the NUL character."],
    [303, true, 404, "Nothing has the id evt_01J00000000000000000000000: it may have been deleted, or pruned by the retention of delivery history."],
    [303, true, 404, "Type a delivery id (dlv_…), an event id (evt_…), a contact id (con_…), an email or a name."],
  ]);
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
  const signIn = answerOf(await visitor.post("/console/login", { email: "oncall\u0000@example.com", password: "anything at all" }));
  const token = answerOf(await client.post("/console/tokens", { name: "sync\u0000job" }));
  // The right password with a NUL in the destination signs no one in: the fields are read first.
  const sessions = await h.rt.db.get("SELECT count(*) AS n FROM operator_sessions");
  const signInElsewhere = answerOf(await visitor.post("/console/login", { email: OPERATOR.email, password: OPERATOR.password, next: "/console/\u0000" }));
  expect([signIn.status, signIn.main, signInElsewhere.status, signInElsewhere.main]).toEqual([
    422,
    messageMain("Check your input", "email must not contain the NUL character."),
    422,
    messageMain("Check your input", "next must not contain the NUL character."),
  ]);
  expect(await h.rt.db.get("SELECT count(*) AS n FROM operator_sessions")).toEqual(sessions);
  expect([token.status, token.title, token.notice]).toEqual([422, "API tokens · CRM console", "name must not contain the NUL character."]);
  expect(await h.rt.db.get("SELECT count(*) AS n FROM api_tokens WHERE name LIKE 'sync%'")).toEqual({ n: 0 });
});

test("a NUL character in a console form is named on the form page, as any other wrong field is", async () => {
  await client.get("/console/users");
  const users = [];
  for (const form of [{ name: "a\u0000b", email: "z@x.io" }, { name: "Zed", email: "bad" }]) users.push(answerOf(await client.post("/console/users", form)));
  const page = { status: 422, type: "text/html; charset=utf-8", title: "Users · CRM console" };
  expect(users.map(({ status, type, title, notice }) => ({ status, type, title, notice }))).toEqual([
    { ...page, notice: "name must not contain the NUL character." },
    { ...page, notice: "email must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de)." },
  ]);
  const subscriptions = [];
  for (const form of [{ target_url: "http://8.8.8.8/nul\u0000", events: "contact.created" }, { target_url: "http://8.8.8.8/hook", events: ["contact.created", "contact.\u0000"] }]) {
    const { status, type, title, notice } = answerOf(await client.post("/console/subscriptions", form));
    subscriptions.push({ status, type, title, notice });
  }
  const subscriptionsPage = { status: 422, type: "text/html; charset=utf-8", title: "Subscriptions · CRM console" };
  expect(subscriptions).toEqual([
    { ...subscriptionsPage, notice: "target url must not contain the NUL character." },
    { ...subscriptionsPage, notice: "events must not contain the NUL character." },
  ]);
  expect([await h.rt.db.get("SELECT count(*) AS n FROM users"), await h.rt.db.get("SELECT count(*) AS n FROM webhook_subscriptions")]).toEqual([{ n: 0 }, { n: 0 }]);
});

test("a form body with a percent escape that does not decode is refused with 400, as such a request target is, and changes nothing", async () => {
  await client.get("/console/users");
  const refused: unknown[] = [];
  for (const encoded of ["name=%E9&email=pct@x.io", "name=50%&email=pct@x.io", "name=%zz&email=pct@x.io", "name=Ann&email=pct%C3@x.io"]) refused.push(answerOf(await client.postEncoded("/console/users", encoded)));
  const text = "The form has a percent escape that does not decode to UTF-8 text (such as %E9 alone, or % not followed by two hex digits); nothing was changed.";
  const page = { status: 400, type: "text/html; charset=utf-8", title: "Not understood · CRM console", main: messageMain("Not understood", text), notice: null };
  expect(refused).toEqual([page, page, page, page]);
  // Escapes that decode are read as before: %C3%A9 is é, + a space.
  expect((await client.postEncoded("/console/users", "name=Ren%C3%A9+Doe&email=rene%40x.io")).status).toBe(303);
  expect(await h.rt.db.all("SELECT name, email FROM users")).toEqual([{ name: "René Doe", email: "rene@x.io" }]);
});

test("the users form drops the spaces around a name and an email; a name of spaces alone comes back empty, beside the reason", async () => {
  await client.get("/console/users");
  const blank = await client.post("/console/users", { name: "   ", email: "blank@x.io" });
  const shownName = /<input [^>]*name="name"[^>]*>/.exec(blank.text)![0];
  expect([answerOf(blank).notice, /value="([^"]*)"/.exec(shownName)?.[1] ?? ""]).toEqual(["name must be a string of 1 to 200 characters, not spaces alone (a user needs a name).", ""]);
  expect((await client.post("/console/users", { name: "  Zoë Ng  ", email: " zoe@x.io " })).status).toBe(303);
  expect(await h.rt.db.all("SELECT name, email FROM users WHERE email IN ('blank@x.io', 'zoe@x.io')")).toEqual([{ name: "Zoë Ng", email: "zoe@x.io" }]);
});

test("a body that is not a urlencoded form is refused with a 415 page, even with the right CSRF token, and changes nothing", async () => {
  await client.get("/console/tokens");
  const bodies: [string, string][] = [
    ["application/json", JSON.stringify({ _csrf: client.csrf, name: "made-from-json" })],
    ["multipart/form-data; boundary=b", `--b\r\nContent-Disposition: form-data; name="_csrf"\r\n\r\n${client.csrf}\r\n--b\r\nContent-Disposition: form-data; name="name"\r\n\r\nmade-from-multipart\r\n--b--\r\n`],
    ["text/plain", `_csrf=${client.csrf}&name=made-from-text`],
  ];
  const refused: unknown[] = [];
  for (const [type, body] of bodies) refused.push(answerOf(await client.postTyped("/console/tokens", type, body)));
  const text = "The console takes forms as its pages send them, as application/x-www-form-urlencoded; nothing was changed.";
  const page = { status: 415, type: "text/html; charset=utf-8", title: "Not a form · CRM console", main: messageMain("Not a form", text), notice: null };
  expect(refused).toEqual([page, page, page]);
  expect(await h.rt.db.get("SELECT count(*) AS n FROM api_tokens WHERE name LIKE 'made-from-%'")).toEqual({ n: 0 });
});

test("the subscription form refuses what the API refuses, with the API's words: an event twice, a max_rate with spaces around it", async () => {
  await client.get("/console/subscriptions");
  const cases: [Record<string, string | string[]>, Record<string, unknown>][] = [
    [{ events: ["contact.created", "contact.created"] }, { events: ["contact.created", "contact.created"] }],
    [{ events: "contact.created", max_rate: " 5" }, { events: ["contact.created"], max_rate: " 5" }],
  ];
  const answers = [];
  const expected = [];
  for (const [form, body] of cases) {
    const api = await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "http://8.8.8.8/hook", ...body } });
    const { pointer, detail } = api.body.errors[0];
    // The form names the field (its boxes have no index); the reason beside it is the API's.
    const field = pointer.split("/")[1];
    expected.push({ status: 422, title: "Subscriptions · CRM console", notice: `${field.replace("_", " ")} ${detail}.`, reason: [field, detail] });
    const res = await client.post("/console/subscriptions", { target_url: "http://8.8.8.8/hook", ...form });
    const { status, title, notice } = answerOf(res);
    const reason = /<p class="field-reason" id="([^"]+)-reason">([^<]*)<\/p>/.exec(res.text)?.slice(1);
    answers.push({ status, title, notice, reason });
  }
  expect(expected.map((e) => e.notice)).toEqual(["events repeats item 0.", "max rate must be a whole number of requests per second from 1 to 1000."]);
  expect(answers).toEqual(expected);
  expect(await h.rt.db.get("SELECT count(*) AS n FROM webhook_subscriptions")).toEqual({ n: 0 });
});

test("the rotate-secret form refuses a grace period with spaces around it as the API does, as the subscription form refuses such a max_rate, and rotates nothing", async () => {
  const subscription = (await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "http://8.8.8.8/graced", events: ["contact.created"] } })).body.data;
  const api = await h.json("POST", `/public/v1/webhook-subscriptions/${subscription.id}/rotate-secret`, { body: { grace_hours: " 5" } });
  const shown = await client.get(`/console/subscriptions/${subscription.id}/secret-rotation`);
  const secretTag = /name="secret_tag" value="([^"]+)"/.exec(shown.text)![1]!;
  const answers = [];
  for (const grace_hours of [" 5", "5 "]) {
    const res = await client.post(`/console/subscriptions/${subscription.id}/rotate-secret`, { grace_hours, secret_tag: secretTag });
    answers.push({ status: res.status, notice: answerOf(res).notice, reason: /<p class="field-reason" id="([^"]+)-reason">([^<]*)<\/p>/.exec(res.text)?.slice(1) });
  }
  const { pointer, detail } = api.body.errors[0];
  const refused = { status: 422, notice: `grace hours ${detail}.`, reason: ["grace_hours", detail] };
  expect({ api: [api.status, pointer, detail], answers }).toEqual({ api: [422, "/grace_hours", "must be a whole number of hours from 0 to 168"], answers: [refused, refused] });
  expect((await h.json("GET", `/public/v1/webhook-subscriptions/${subscription.id}`)).body.data.secret_rotated_at).toBeNull();
  // The tests after it count deliveries: this subscription would get some.
  expect((await h.request("DELETE", `/public/v1/webhook-subscriptions/${subscription.id}`)).status).toBe(204);
});

test("the contacts and users pages refuse a parameter they do not take with the 422 page, as the deliveries page refuses an unknown filter", async () => {
  const answers = [];
  for (const path of ["/console/contacts?zzz=1", "/console/contacts?page=-1", "/console/users?zzz=1", "/console/users?page=-1"]) {
    const { status, main } = answerOf(await client.get(path));
    answers.push([path, status, main]);
  }
  expect(answers).toEqual([
    ["/console/contacts?zzz=1", 422, messageMain("Check your input", "zzz is not a parameter of the contacts page; known: q, before, assigned_user_id.")],
    ["/console/contacts?page=-1", 422, messageMain("Check your input", "page is not a parameter of the contacts page; known: q, before, assigned_user_id.")],
    ["/console/users?zzz=1", 422, messageMain("Check your input", "zzz is not a parameter of the users page; known: page, added, deleted, unassigned.")],
    ["/console/users?page=-1", 422, messageMain("Check your input", "The page number must be a whole number from 1 to 999999999.")],
  ]);
  expect([(await client.get("/console/contacts?q=ada&before=")).status, (await client.get("/console/users?page=1&added=1")).status]).toEqual([200, 200]);
});

test("a users page past the last says so, and a hand-made recovered count shows no notice", async () => {
  await h.json("POST", "/public/v1/users", { body: { name: "Only One", email: "only.one@example.com" } });
  const past = (await client.get("/console/users?page=7")).text;
  expect(/<p class="empty">([^<]*)<\/p>/.exec(past)?.[1]).toBe("No users on page 7: the last page is 1.");
  const notices = [];
  for (const value of ["2", "1e20", "-1", "0x10", "1.5"]) notices.push([value, /class="notice notice-success"[^>]*>([^<]*)</.exec((await client.get(`/console/subscriptions?recovered=${value}`)).text)?.[1] ?? null]);
  expect(notices).toEqual([
    ["2", "2 failed deliveries queued again, oldest first."],
    ["1e20", null],
    ["-1", null],
    ["0x10", null],
    ["1.5", null],
  ]);
});

test("a value past a console route's schema limit gets the 422 page naming the field, or problem+json under /console/api, never the API's bare problem on a page", async () => {
  const page = answerOf(await client.get(`/console/contacts?q=${"x".repeat(301)}`));
  const id = answerOf(await client.get(`/console/contacts/${"c".repeat(70)}`));
  const api = answerOf(await client.get(`/console/api/deliveries?status=${"x".repeat(30)}`));
  // Posted to the filters, held to the same limits before they are sealed into an address.
  await client.get("/console/");
  const posted = [answerOf(await client.post("/console/contacts", { q: "x".repeat(5000) })), answerOf(await client.post("/console/", { event_id: "x".repeat(5000) }))];
  expect([page.status, page.type, page.main, id.main, ...posted.map((answer) => [answer.status, answer.main])]).toEqual([
    422,
    "text/html; charset=utf-8",
    messageMain("Check your input", "q must be at most 300 characters."),
    messageMain("Check your input", "id must be at most 64 characters."),
    [422, messageMain("Check your input", "q must be at most 300 characters.")],
    [422, messageMain("Check your input", "event id must be at most 64 characters.")],
  ]);
  expect(api).toEqual({
    status: 422,
    type: "application/problem+json",
    body: {
      type: "urn:crm:problem:validation",
      title: "Unprocessable Content",
      status: 422,
      detail: "status must be at most 20 characters.",
      errors: [{ parameter: "status", detail: "must be at most 20 characters" }],
    },
  });
});

test("a deliveries filters post with a field the page has no filter of is refused by the post, naming it, at any length: never sealed into an address", async () => {
  await client.get("/console/");
  const answers = [];
  for (const fields of [{ note: "y".repeat(9000) }, { status: "failed", sort: "oldest" }, { s: "x" }] as Record<string, string>[]) {
    const res = await client.post("/console/", fields);
    const location = res.headers.get("location");
    answers.push({ status: res.status, location, notice: location === null ? answerOf(res).notice : null });
  }
  const unknown = (name: string) => ({ status: 422, location: null, notice: `The filter is invalid: ${name} is not a filter of this page (filters: status, event, subscription_id, event_id, contact_id, request_id, since, until, before).` });
  expect(answers).toEqual([unknown("note"), unknown("sort"), unknown("s")]);
});

test("a sealed address holds at most what the query string's limit leaves after s=: a longer seal is refused (422 naming the field), not redirected to an address answered 414", async () => {
  await client.get("/console/");
  const session = { operator, csrfToken: client.csrf };
  // The seal is base64url of a 12-byte nonce, [fields, expiry] in JSON and a 16-byte tag: 3042 to
  // 3044 bytes of JSON seal to 4094 to 4096 characters (the expiry has 13 digits).
  const valueOf = (json: number) => json - JSON.stringify([{ event_id: "" }, Date.now()]).length;
  const answers = [];
  for (const json of [3042, 3043, 3044]) {
    try {
      const address = sealedAddress(h.rt.secrets, "deliveries", session, { event_id: "x".repeat(valueOf(json)) });
      answers.push({ sealed: new URL(address, "http://console").searchParams.get("s")!.length, opened: (await client.get(address)).status });
    } catch (error) {
      answers.push({ refused: (error as ProblemError).status, detail: (error as ProblemError).message });
    }
  }
  const refused = (sealed: number) => ({ refused: 422, detail: `event id is too long for the page's address: what was typed takes ${sealed} characters sealed, and the address holds 4094.` });
  // The longest opens (its event id, shaped as none, is refused by name on the page), not 414.
  expect(answers).toEqual([{ sealed: 4094, opened: 422 }, refused(4095), refused(4096)]);
});

test("a malformed request target under /console is the 400 of /public/v1: the same problem+json under /console/api, the page explaining it elsewhere", async () => {
  const nul = (await h.json("GET", "/public/v1/contacts?q=a%00b")).body;
  const escape = (await h.json("GET", "/public/v1/contacts/con_%E9")).body;
  expect([nul, escape]).toEqual([
    {
      type: "urn:crm:problem:invalid-request-target",
      title: "Bad Request",
      status: 400,
      detail: "The request target contains %00, an encoded NUL character, which no path segment or query parameter may hold.",
    },
    {
      type: "urn:crm:problem:invalid-request-target",
      title: "Bad Request",
      status: 400,
      detail: "The request target has a percent escape that does not decode to UTF-8 text (such as %E9 alone, or % not followed by two hex digits).",
    },
  ]);
  const visitor = new ConsoleClient((r) => h.app.handle(r));
  const answers = [];
  for (const [who, path] of [[client, "/console/api/deliveries?status=%00"], [client, "/console/api/deliveries/dlv_%E9"], [client, "/console/contacts?q=a%00b"], [client, "/console/%zz"], [visitor, "/console/%zz"]] as const) {
    const res = await who.get(path);
    answers.push([path, { ...answerOf(res), csp: res.headers.get("content-security-policy") !== null }]);
  }
  // Found before routing, these come without the session: the page has no navigation.
  const page = (text: string) => ({ status: 400, type: "text/html; charset=utf-8", title: "Not understood · CRM console", main: messageMain("Not understood", text), notice: null, csp: true });
  expect(answers).toEqual([
    ["/console/api/deliveries?status=%00", { status: 400, type: "application/problem+json", body: nul, csp: true }],
    ["/console/api/deliveries/dlv_%E9", { status: 400, type: "application/problem+json", body: escape, csp: true }],
    ["/console/contacts?q=a%00b", page(nul.detail)],
    ["/console/%zz", page(escape.detail)],
    ["/console/%zz", page(escape.detail)],
  ]);
  // The other limits checked before routing are answered the same way.
  const title = "Address too long";
  expect(answerOf(await client.get(`/console/?status=${"x".repeat(5000)}`))).toEqual({
    status: 414,
    type: "text/html; charset=utf-8",
    title: `${title} · CRM console`,
    main: messageMain(title, "The query string is 5007 bytes; the limit is 4096 bytes (4 KiB)."),
    notice: null,
  });
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

test("an address with no console page is 404 for any method, not 405 as if it were a page that takes GET; a method a page does not take is the 405 page with Allow", async () => {
  await client.get("/console/");
  const post = answerOf(await client.post("/console/nope", {}));
  const api = answerOf(await client.post("/console/api/nope", {}));
  const put = await client.send("/console/contacts", { method: "PUT" });
  expect([post, api]).toEqual([
    { status: 404, type: "text/html; charset=utf-8", title: "Not found · CRM console", main: messageMain("Not found", "No route matches POST /console/nope."), notice: null },
    { status: 404, type: "application/problem+json", body: { type: "urn:crm:problem:not-found", title: "Not Found", status: 404, detail: "No route matches POST /console/api/nope." } },
  ]);
  expect([answerOf(put), put.headers.get("allow")]).toEqual([
    { status: 405, type: "text/html; charset=utf-8", title: "Method not allowed · CRM console", main: messageMain("Method not allowed", "PUT is not allowed on /console/contacts; allowed: GET, POST, HEAD."), notice: null },
    "GET, POST, HEAD",
  ]);
});

test("the start page answers another method than GET and POST (its filters' form) with the 405 page and Allow at /console as at /console/, where the router serves both at both", async () => {
  const answers = [];
  for (const path of ["/console", "/console/"]) {
    for (const method of ["PUT", "DELETE"]) {
      const res = await client.send(path, { method });
      answers.push([answerOf(res), res.headers.get("allow")]);
    }
  }
  const refused = (method: string, path: string) => [
    { status: 405, type: "text/html; charset=utf-8", title: "Method not allowed · CRM console", main: messageMain("Method not allowed", `${method} is not allowed on ${path}; allowed: GET, POST, HEAD.`), notice: null },
    "GET, POST, HEAD",
  ];
  expect(answers).toEqual(["/console", "/console/"].flatMap((path) => ["PUT", "DELETE"].map((method) => refused(method, path))));
  expect([(await client.get("/console")).status, (await client.get("/console/")).status]).toEqual([200, 200]);
  // A post is the filters' form: without its CSRF token, the 403 page of any form.
  expect([(await client.send("/console", { method: "POST" })).status, (await client.send("/console/", { method: "POST" })).status]).toEqual([403, 403]);
});

test("a signed-out request with a value past a route's schema limit is sent to sign in, or answered 401 under /console/api, as any signed-out request is, not told 422", async () => {
  const signedOut = new ConsoleClient((r) => h.app.handle(r));
  const page = await signedOut.get(`/console/contacts?q=${"x".repeat(301)}`);
  const id = await signedOut.get(`/console/subscriptions/${"s".repeat(65)}`);
  const api = await signedOut.get(`/console/api/deliveries/${"d".repeat(65)}`);
  expect([page.status, page.headers.get("location"), id.status, id.headers.get("location"), api.status, JSON.parse(api.text).type]).toEqual([
    303,
    `/console/login?next=${encodeURIComponent(`/console/contacts?q=${"x".repeat(301)}`)}`,
    303,
    `/console/login?next=${encodeURIComponent(`/console/subscriptions/${"s".repeat(65)}`)}`,
    401,
    "urn:crm:problem:unauthorized",
  ]);
});

/** filtersOf reduces a deliveries page to its status, its time fields (whole tags), its rows and its error notice. */
function filtersOf(res: { status: number; text: string }) {
  return {
    status: res.status,
    fields: res.text.match(/<input type="datetime-local"[^>]*>/g) ?? [],
    rows: [...res.text.matchAll(/data-delivery-id="([^"]+)"/g)].map((m) => m[1]!),
    notice: answerOf({ ...res, headers: new Headers({ "content-type": "text/html; charset=utf-8" }) }).notice,
  };
}

test("a since or until a link carries as any RFC 3339 time shows in its field as the time applied (UTC, the field's format), sent again it applies the same filter; a year the field cannot show is refused", async () => {
  await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "http://8.8.8.8/times", events: ["contact.created"] } });
  const contact = (await h.json("POST", "/public/v1/contacts", { body: { email: "timed@example.com" } })).body.data;
  const delivery = (await h.json("GET", "/public/v1/webhook-deliveries?per_page=1")).body.data[0];
  const at = Date.parse(delivery.created_at);
  /** field is how a datetime-local field writes a UTC time: without the Z, a zero fraction, then zero seconds. */
  const field = (ms: number) => new Date(ms).toISOString().slice(0, -1).replace(/\.000$/, "").replace(/^(.{16}):00$/, "$1");
  /** withOffset writes an instant as RFC 3339 at UTC+02:00. */
  const withOffset = (ms: number) => `${new Date(ms + 2 * 3_600_000).toISOString().slice(0, -1)}+02:00`;
  // An empty value is rendered as a bare attribute; a value with seconds or a fraction steps by them, as a browser then sends it.
  const step = (value: string) => (value.length === 23 ? ' step="0.001"' : value.length === 19 ? ' step="1"' : "");
  const tags = (since: string, until: string) =>
    [["since", since], ["until", until]].map(([name, value]) => `<input type="datetime-local" name="${name}" ${value ? `value="${value}"` : "value"}${step(value!)}/>`);
  const cases: [string, string, string, string[]][] = [
    [`until=${delivery.created_at}`, "", field(at), []],
    [`until=${encodeURIComponent(withOffset(at + 1))}`, "", field(at + 1), [delivery.id]],
    [`since=${encodeURIComponent(withOffset(at))}&until=${new Date(at + 1).toISOString().replace("Z", "000000Z")}`, field(at), field(at + 1), [delivery.id]],
    [`since=${encodeURIComponent(withOffset(at + 1))}`, field(at + 1), "", []],
    ["until=2000-01-01T00:00:00Z", "", "2000-01-01T00:00", []],
    ["since=2000-01-01T00:00:30.5%2B00:00", "2000-01-01T00:00:30.500", "", [delivery.id]],
    // An offset's + sent unencoded, which the query decodes to a space, as the API's time filters read it.
    [`since=${withOffset(at + 1)}`, field(at + 1), "", []],
  ];
  const answers: unknown[] = [];
  for (const [filter] of cases) {
    const linked = filtersOf(await client.get(`/console/?contact_id=${contact.id}&${filter}`));
    const [since, until] = linked.fields.map((tag) => /value="([^"]*)"/.exec(tag)?.[1] ?? "");
    // The form sends its fields as they show.
    const submitted = filtersOf(await client.get(`/console/?contact_id=${contact.id}&since=${encodeURIComponent(since!)}&until=${encodeURIComponent(until!)}`));
    answers.push([filter, linked, submitted]);
  }
  expect(answers).toEqual(
    cases.map(([filter, since, until, rows]) => {
      const page = { status: 200, fields: tags(since, until), rows, notice: null };
      return [filter, page, page];
    }),
  );
  // Years 0000 and 10000 in UTC: a datetime-local field holds 0001 to 9999.
  const unshowable = ["until=0000-12-31T23:59:59Z", "since=0001-01-01T00:59:59%2B01:00", "until=9999-12-31T23:30:00-01:00"];
  const refused: unknown[] = [];
  for (const filter of unshowable) refused.push([filter, filtersOf(await client.get(`/console/?${filter}`))]);
  // The refused field keeps the value sent (a browser shows such a field empty), marked so and described by its reason.
  const marked = (tag: string, name: string) => (tag.includes(`name="${name}"`) ? tag.replace("/>", ` id="field-${name}" aria-invalid="true" aria-describedby="${name}-reason"/>`) : tag);
  expect(refused).toEqual(
    unshowable.map((filter) => {
      const [name, value] = decodeURIComponent(filter).split("=") as [string, string];
      const fields = name === "since" ? tags(value, "") : tags("", value);
      return [filter, { status: 422, fields: fields.map((tag) => marked(tag, name)), rows: [delivery.id], notice: `${name} must be a date and time (YYYY-MM-DDTHH:MM, UTC).` }];
    }),
  );
});

test("the recover page refusing a window shows a since or until given with an offset in UTC, as its fields are labelled, so the next count asks for the same window; text that is no time stays as sent", async () => {
  const sub = (await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "http://8.8.8.8/recover-times", events: ["contact.created"] } })).body.data;
  const day = (daysAgo: number) => new Date(Date.now() - daysAgo * 86_400_000).toISOString().slice(0, 10);
  const cases: [string, string, string][] = [
    // More than 14 days ago: refused for its age.
    [`since=${day(15)}T10:00:00%2B05:30&until=${day(14)}T10:00:00Z`, `${day(15)}T04:30`, `${day(14)}T10:00`],
    // Its + sent unencoded, which the query decodes to a space: read as the + it was.
    [`since=${day(15)}T10:00:00+05:30&until=${day(14)}T10:00:00Z`, `${day(15)}T04:30`, `${day(14)}T10:00`],
    // Refused for the until: the since is shown as applied, the until rounded up to the minute as a window's end is.
    [`since=${day(1)}T10:00:00%2B05:30&until=not-a-time`, `${day(1)}T04:30`, "not-a-time"],
    [`since=${day(1)}T10:00:00-02:00&until=${day(20)}T23:59:30.5-02:00`, `${day(1)}T12:00`, `${day(19)}T02:00`],
    [`since=yesterday&until=${day(1)}T12:00`, "yesterday", `${day(1)}T12:00`],
  ];
  const answers: unknown[] = [];
  for (const [query] of cases) {
    const page = await client.get(`/console/subscriptions/${sub.id}/recover?${query}`);
    const field = (name: string) => new RegExp(`name="${name}"[^>]*value="([^"]*)"`).exec(page.text)?.[1];
    answers.push([query, page.status, field("since"), field("until")]);
  }
  expect(answers).toEqual(cases.map(([query, since, until]) => [query, 422, since, until]));
});

/** rowActionsOf is where each link and form of a subscription's row on the Subscriptions page leads. */
async function rowActionsOf(id: string): Promise<string[]> {
  const page = (await client.get("/console/subscriptions")).text;
  const row = new RegExp(`<tr data-subscription-id="${id}">[\\s\\S]*?</tr>`).exec(page)![0];
  const cell = /<td class="row-actions">([\s\S]*?)<\/td>/.exec(row)![1]!;
  return [...cell.matchAll(/<(?:a [^>]*?href|form method="post" action)="([^"]+)"/g)].map((m) => m[1]!);
}

test("after a secrets-key reset a subscription's row offers Rotate secret, not Enable; Enable sent from an older page is refused saying why, and changes nothing; once rotated it enables", async () => {
  const id = await addStoredSubscription(h.rt.db, Date.now());
  // What the reset does to each subscription: a new secret, sealed with the key it records, that no one was shown.
  await h.rt.db.write((tx) => replaceLostSecret(tx, id, h.rt.secrets.seal(id, "whsec_bm8gcmVjZWl2ZXIga25vd3MgdGhpcw=="), LOST_SECRET_REASON, Date.now(), null));

  const actions = [`/console/subscriptions/${id}`, `/console/?subscription_id=${id}`, `/console/rotations/new?from=${id}`, `/console/subscriptions/${id}/edit`];
  expect(await rowActionsOf(id)).toEqual([...actions, `/console/subscriptions/${id}/secret-rotation`, `/console/subscriptions/${id}/delete`]);
  const refused = await client.post(`/console/subscriptions/${id}/enable`, {});
  expect([refused.status, /class="notice notice-error"[^>]*>([^<]*)</.exec(refused.text)?.[1]]).toEqual([
    409,
    "Not enabled: its signing secret was lost with the secrets key (crm secrets-key reset), and the one it has now is known to no receiver. Rotate its secret (Rotate secret), give the new one to its receiver, then enable it.",
  ]);
  expect((await h.json("GET", `/public/v1/webhook-subscriptions/${id}`)).body.data.status).toBe("disabled");

  expect((await h.json("POST", `/public/v1/webhook-subscriptions/${id}/rotate-secret`, { body: { grace_hours: 0 } })).status).toBe(200);
  expect(await rowActionsOf(id)).toEqual([...actions, `/console/subscriptions/${id}/enable`, `/console/subscriptions/${id}/delete`]);
  const enabled = await client.post(`/console/subscriptions/${id}/enable`, {});
  expect([enabled.status, enabled.headers.get("location")]).toEqual([303, "/console/subscriptions?enabled=1"]);
  expect((await h.json("GET", `/public/v1/webhook-subscriptions/${id}`)).body.data.status).toBe("active");
});
