import { describe, expect, test } from "bun:test";
import type { Page } from "playwright-core";
import { createApiToken } from "../../server/auth/service.ts";
import { openFields, SEALED_ADDRESS_TTL_MS, sealFields } from "../../console/addresses.ts";
import { createLogger } from "../../server/shared/log.ts";
import { waitFor, type Receiver } from "../webhooks/support.ts";
import { accessibleNames, browserFile, ConsoleClient, cspViolations, shoot, shootAtBothWidths, type ConsoleServer } from "./support.ts";

// One server and one browser for the file: contacts changed through the API, their events delivered to a real receiver.
let server: ConsoleServer;
let page: Page;
let problems: string[];
let receiver: Receiver;
let ada: any;
let twin: any;
let account: any;
let user: any;
/** every line the server logs, the request log's included */
const logLines: string[] = [];

const SLOW = 60_000;
const url = (path: string) => `${server.url}${path}`;
const BULK = 60;
/** the search's own address, the search sealed in it */
const SEALED = /^\/console\/search\?s=[A-Za-z0-9_-]+$/;

browserFile(async (file) => {
  ({ server, receiver, page, problems } = file);
  await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, description: "CRM sync", events: ["contact.created", "contact.updated", "contact.deleted"] });
  account = (await server.api("POST", "/public/v1/accounts", { name: "Analytical Engines Ltd" })).data;
  const users = await fetch(url("/public/v1/users"), { method: "POST", headers: { authorization: `Bearer ${server.token}`, "content-type": "application/json" }, body: JSON.stringify({ name: "Charles Babbage", email: "charles@example.com" }) });
  user = ((await users.json()) as any).data;
  ada = (await server.api("POST", "/public/v1/contacts", { first_name: "Ada", last_name: "Lovelace", email: "ada@example.com", tags: ["vip"], account_ids: [account.id], assigned_user_ids: [user.id] })).data;
  await server.api("PATCH", `/public/v1/contacts/${ada.id}`, { phone: "+44 20 7946 0000" });
  twin = (await server.api("POST", "/public/v1/contacts", { first_name: "Ada", last_name: "Twin", email: "twin@example.com" })).data;
  await server.api("POST", "/public/v1/contacts/batch", { items: Array.from({ length: BULK }, (_, i) => ({ first_name: "Bulk", last_name: `Person ${i}`, email: `bulk${i}@example.com` })) });
  await waitFor(() => receiver.received.length >= BULK + 3, "every delivery received", 20_000);
}, { log: createLogger("info", (line) => logLines.push(line)) });

/** find types into the search box of the start page and returns where the browser lands. */
async function find(text: string): Promise<string> {
  await page.goto(url("/console/"));
  await page.fill("#search-q", text);
  await Promise.all([page.waitForURL((u) => u.pathname !== "/console/"), page.click("form.search button")]);
  return page.url().slice(server.url.length);
}

/** deliveriesOf returns the API's deliveries of the events about a contact, as the receiver's log would name them. */
function eventsAbout(contactId: string): { event_id: string; delivery_id: string; type: string }[] {
  return receiver.received.filter((r) => r.json.data?.id === contactId).map((r) => ({ event_id: r.json.event_id, delivery_id: r.headers["webhook-id"]!, type: r.json.type }));
}

/** contactIds lists the ids of the contacts the page lists, in order. */
const contactIds = () => page.locator("#contacts tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-contact-id")));

/**
 * olderThenBack goes from a list's newest page to its older contacts, opens the first of them, and
 * goes Back twice: the contacts listed on the newest and older pages, and the status of each page
 * Back showed (or Chromium's error) with the contacts it listed.
 */
async function olderThenBack() {
  const newest = await contactIds();
  await Promise.all([page.waitForEvent("framenavigated"), page.click("#older-contacts")]);
  await page.waitForLoadState();
  const older = await contactIds();
  await Promise.all([page.waitForURL((u) => u.pathname.startsWith("/console/contacts/")), page.locator("#contacts tbody tr a").first().click()]);
  const back = async () => [await page.goBack({ waitUntil: "load" }).then((answer) => answer?.status(), (error: Error) => error.message.split("\n")[0]), await contactIds()];
  return { newest, older, backs: [await back(), await back()] };
}

describe("one search box", () => {
  test("a delivery id from a receiver's log opens that delivery", async () => {
    const [created] = eventsAbout(ada.id);
    expect(await find(created!.delivery_id)).toBe(`/console/deliveries/${created!.delivery_id}`);
    expect(await page.textContent("h1")).toContain("contact.created");
  }, SLOW);

  test("an event id opens the event with its deliveries and the contact it is about", async () => {
    const updated = eventsAbout(ada.id).find((e) => e.type === "contact.updated")!;
    expect(await find(updated.event_id)).toBe(`/console/events/${updated.event_id}`);
    expect(await page.locator("#event-deliveries tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-delivery-id")))).toEqual([updated.delivery_id]);
    expect(await page.locator("#event-deliveries .badge").textContent()).toBe("Succeeded");
    expect(await page.locator("dd a[href^='/console/contacts/']").textContent()).toBe("Ada Lovelace");
    await shoot(page, "event");
  }, SLOW);

  test("a contact id, or an email in any case, opens the contact; an email two contacts share lists both", async () => {
    expect(await find(ada.id)).toBe(`/console/contacts/${ada.id}`);
    expect(await find("ADA@Example.com")).toBe(`/console/contacts/${ada.id}`);
    await server.api("POST", "/public/v1/contacts", { first_name: "Ada", last_name: "Again", email: "twin@example.com" });
    // Listed at the search's address, the text sealed: an email is no secret, but the box's text goes in no address.
    expect(await find("twin@example.com")).toMatch(SEALED);
    expect(await page.locator("#contacts tbody tr").count()).toBe(2);
    expect(await page.inputValue("#search-q")).toBe("twin@example.com");
  }, SLOW);

  test("a name lists the contacts whose name contains it; what matches nothing says so (404)", async () => {
    expect(await find("Lovelace")).toMatch(SEALED);
    expect(await page.locator("#contacts tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-contact-id")))).toEqual([ada.id]);
    expect(await page.textContent("#contacts-count")).toBe("Showing all 1 whose name contains “Lovelace”.");
    await page.goto(url("/console/"));
    await page.fill("#search-q", "dlv_01J00000000000000000000000");
    // Find posts the box, and the search's address says what it found.
    const [posted, answer] = await Promise.all([
      page.waitForResponse((r) => r.request().method() === "POST"),
      page.waitForResponse((r) => r.url().includes("/console/search?s=")),
      page.click("form.search button"),
    ]);
    expect([posted.status(), answer.request().method(), answer.status()]).toEqual([303, "GET", 404]);
    expect(await page.textContent(".notice")).toContain("Nothing has the id dlv_01J00000000000000000000000");
    expect(await find("nobody@example.com")).toMatch(SEALED);
    expect(await page.textContent(".notice")).toBe("No contact has the email \u2068nobody@example.com\u2069.");
    expect(await find("Nobody Atall")).toMatch(SEALED);
    expect(await page.textContent(".notice")).toBe("No contact's name contains “Nobody Atall”.");
    expect(await page.inputValue("#search-q")).toBe("Nobody Atall");
    problems.splice(0, problems.length, ...problems.filter((p) => !p.includes("404 (Not Found)")));
    expect(problems).toEqual([]);
  }, SLOW);
});

describe("a deleted contact in Find", () => {
  // No contact.updated: the deliveries filter's test below lists Ada's alone.
  /** deletedContact creates a contact with an email, deletes it and waits for its two deliveries: none is left pending for an erasure to fail. */
  async function deletedContact(first_name: string, email: string) {
    const contact = (await server.api("POST", "/public/v1/contacts", { first_name, email })).data;
    await server.api("DELETE", `/public/v1/contacts/${contact.id}`);
    await waitFor(() => eventsAbout(contact.id).length === 2, "the two deliveries about it");
    return contact;
  }

  test("its email, in any case, opens its page, which says it was deleted and offers Erase; erased, its email finds it no more", async () => {
    const gone = await deletedContact("Forget", "forget.me@example.com");
    expect(await find("Forget.Me@Example.com")).toBe(`/console/contacts/${gone.id}`);
    expect(await page.textContent(".notice")).toBe("This contact was deleted. What was sent about it is listed below.");
    await Promise.all([page.waitForURL(url(`/console/contacts/${gone.id}/erase`)), page.click("a.button.danger")]);
    await Promise.all([page.waitForURL(url(`/console/contacts/${gone.id}?erased=1&failed=0`)), page.click("button.danger")]);
    expect(await find("forget.me@example.com")).toMatch(SEALED);
    expect(await page.textContent(".notice")).toBe("No contact has the email \u2068forget.me@example.com\u2069.");
    // Its id, which the erasure keeps, still opens its page.
    expect(await find(gone.id)).toBe(`/console/contacts/${gone.id}`);
    problems.splice(0, problems.length, ...problems.filter((p) => !p.includes("404 (Not Found)")));
    expect(problems).toEqual([]);
  }, SLOW);

  test("an email a live and a deleted contact share lists both, the deleted one apart, marked deleted, linking its page with Erase", async () => {
    const live = (await server.api("POST", "/public/v1/contacts", { first_name: "Kept", email: "shared.inbox@example.com" })).data;
    const gone = await deletedContact("Gone", "shared.inbox@example.com");
    expect(await find("shared.inbox@example.com")).toMatch(SEALED);
    const rows = (table: string) => page.locator(`#${table} tbody tr`).evaluateAll((all) => all.map((r) => r.getAttribute("data-contact-id")));
    expect([await rows("contacts"), await rows("deleted-contacts")]).toEqual([[live.id], [gone.id]]);
    expect(await page.textContent("#deleted-contacts-count")).toBe("1 deleted contact had the email shared.inbox@example.com: open one to see what was sent about it, or to erase its events.");
    expect(await accessibleNames(page, "#deleted-contacts a")).toEqual([`${gone.id} deleted`]);
    await Promise.all([page.waitForURL(url(`/console/contacts/${gone.id}`)), page.click(`#deleted-contacts a[href$="${gone.id}"]`)]);
    expect(await page.textContent(".notice")).toBe("This contact was deleted. What was sent about it is listed below.");
    expect(await page.textContent("a.button.danger")).toBe("Erase its events…");
    await shoot(page, "find-deleted");
  }, SLOW);
});

describe("Back to Find's list", () => {
  // The list is the answer to a GET after the post (303): no-store as every page, history
  // navigation reloads it, where the post's own answer could only be posted again (the s33
  // newcode3 audit's reproduction: Chromium showed ERR_CACHE_MISS, "Confirm Form Resubmission").
  test("Back from a contact opened in a name's list, and from its older contacts, shows the list again", async () => {
    await find("Bulk");
    const { newest, older, backs } = await olderThenBack();
    expect([newest.length, older.length]).toEqual([50, BULK - 50]);
    expect(backs).toEqual([
      [200, older],
      [200, newest],
    ]);
    expect(await page.inputValue("#search-q")).toBe("Bulk");
    expect(problems).toEqual([]);
  }, SLOW);
});

describe("a search's sealed address", () => {
  test("opens in the session that searched alone, for an hour: in another, altered or later it says the search expired, with the box", async () => {
    const signedIn = async () => {
      const client = new ConsoleClient((request) => fetch(request, { redirect: "manual" }), server.url);
      expect((await client.signIn()).status).toBe(303);
      await client.get("/console/");
      return client;
    };
    const [mine, other] = [await signedIn(), await signedIn()];
    const location = (await mine.post("/console/search", { q: "Lovelace" })).headers.get("location")!;
    const sealed = new URL(location, server.url).searchParams.get("s")!;
    const altered = `${sealed.slice(0, 20)}${sealed[20] === "A" ? "B" : "A"}${sealed.slice(21)}`;
    const answers = [];
    for (const [client, address] of [[mine, location], [other, location], [mine, `/console/search?s=${altered}`], [mine, "/console/search?s=x"]] as const) {
      const answer = await client.get(address);
      const box = /<input id="search-q"[^>]*>/.exec(answer.text)?.[0];
      answers.push([answer.status, /class="notice[^>]*>([^<]*)</.exec(answer.text)?.[1] ?? null, box === undefined ? null : (/ value="([^"]*)"/.exec(box)?.[1] ?? "")]);
    }
    const expired = [410, "This search has expired: its address opens for an hour after the search, and only in the sign-in that made it. Search again.", ""];
    expect(answers).toEqual([[200, null, "Lovelace"], expired, expired, expired]);
    // The hour, on the clock of whichever instance opens it.
    const session = /name="_csrf" value="([^"]+)"/.exec((await mine.get("/console/")).text)![1]!;
    const made = Date.now();
    const at = sealFields(server.runtime.secrets, "search", session, { q: "Lovelace", before: "1.con_x" }, made);
    expect([openFields(server.runtime.secrets, "search", session, at, made + SEALED_ADDRESS_TTL_MS - 1), openFields(server.runtime.secrets, "search", session, at, made + SEALED_ADDRESS_TTL_MS)]).toEqual([{ q: "Lovelace", before: "1.con_x" }, null]);
    // Nor does it open as another page's filters.
    expect(openFields(server.runtime.secrets, "contacts", session, at, made)).toBeNull();
  }, SLOW);
});

describe("a secret pasted into Find", () => {
  test("an API token or a signing secret is not searched, and stays out of the address, the tab's history and the request log", async () => {
    const logged = logLines.length;
    const { token } = await createApiToken(server.runtime.db, "pasted by mistake");
    const { secret } = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: `${receiver.url}/pasted`, events: ["contact.created"] })).data;
    const said = {
      [token]: "This looks like an API token (crm_…): it was not searched, and it was not logged or put in the page's address. If it is a real token, revoke it (API tokens, Revoke) and create another.",
      [secret]: "This looks like a webhook signing secret (whsec_…): it was not searched, and it was not logged or put in the page's address. If it is a real secret, rotate it (Subscriptions, Rotate, Rotate the secret).",
    };
    for (const pasted of [token, secret]) {
      await page.goto(url("/console/"));
      await page.fill("#search-q", ` Bearer ${pasted}`);
      // By keyboard, as an operator pastes and presses Enter.
      const [answer] = await Promise.all([page.waitForResponse((r) => r.url().includes("/console/search")), page.press("#search-q", "Enter")]);
      expect([answer.request().method(), answer.status(), page.url()]).toEqual(["POST", 422, url("/console/search")]);
      expect(await page.textContent(".notice-error")).toBe(said[pasted]!);
      expect(await page.inputValue("#search-q")).toBe("");
      expect(await page.content()).not.toContain(pasted);
    }
    const cdp = await page.context().newCDPSession(page);
    const { entries } = await cdp.send("Page.getNavigationHistory");
    await cdp.detach();
    const visited = entries.map((entry) => decodeURIComponent(entry.url));
    expect(visited.slice(-4)).toEqual([url("/console/"), url("/console/search"), url("/console/"), url("/console/search")]);
    expect(visited.filter((address) => address.includes(token) || address.includes(secret))).toEqual([]);
    // The request log has the posts, without what was posted; no line of the log has it.
    const posts = logLines.slice(logged).map((line) => JSON.parse(line)).filter((line) => line.msg === "request" && line.method === "POST" && line.path.startsWith("/console/search"));
    expect(posts.map((line) => [line.path, line.status])).toEqual([["/console/search", 422], ["/console/search", 422]]);
    expect(logLines.filter((line) => line.includes(token) || line.includes(secret) || line.includes(encodeURIComponent(secret)))).toEqual([]);
    problems.splice(0, problems.length, ...problems.filter((p) => !p.includes("422 (Unprocessable")));
    expect(problems).toEqual([]);
  }, SLOW);

  test("text of any other shape (a metrics token, a password, a database URL) is answered at the search's address, sealed: in no address, link or log line", async () => {
    const logged = logLines.length;
    const client = new ConsoleClient((request) => fetch(request, { redirect: "manual" }), server.url);
    expect((await client.signIn()).status).toBe(303);
    await client.get("/console/");
    // What the s33 newcode audit pasted: each was 303 to an address holding it.
    const pasted = [
      "Zq8-metrics-2b7f1c9e0a4d",
      "correct horse battery staple",
      "postgres://crm:Hunter2-prod@db.internal:5432/crm",
      "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
      "crm_AbCdEfGhIjKlMnOpQrStUvWxYz01234",
      "Bulk",
    ];
    const answers = [];
    const addresses: string[] = [];
    const linksOf = (html: string) => [...html.matchAll(/(?:href|action)="([^"]*)"/g)].map((m) => decodeURIComponent(m[1]!.replaceAll("&amp;", "&").replaceAll("+", " ")));
    for (const q of pasted) {
      const posted = await client.post("/console/search", { q });
      const location = posted.headers.get("location") ?? "";
      const answer = await client.get(location);
      addresses.push(location, ...linksOf(answer.text));
      answers.push([posted.status, SEALED.test(location), answer.status, /id="search-q"[^>]* value="([^"]*)"/.exec(answer.text)?.[1] ?? null]);
    }
    expect(answers).toEqual(pasted.map((q) => [303, true, q === "Bulk" ? 200 : 404, q]));
    // Fifty of the bulk contacts, and the older ones a link away, to the search sealed again with its position.
    const bulk = await client.get((await client.post("/console/search", { q: "Bulk" })).headers.get("location")!);
    const older = await client.get(/href="([^"]+)" rel="next" id="older-contacts"/.exec(bulk.text)![1]!);
    expect([older.status, [...older.text.matchAll(/data-contact-id=/g)].length]).toEqual([200, BULK - 50]);
    addresses.push(...linksOf(older.text));
    expect(addresses.filter((address) => pasted.some((q) => address.includes(q)))).toEqual([]);
    // The request log's line may follow the answer.
    const searches = () => logLines.slice(logged).map((line) => JSON.parse(line)).filter((line) => line.msg === "request" && String(line.path).startsWith("/console/search"));
    await waitFor(() => searches().length === 2 * pasted.length + 3, "a request log line for each post and each search's address");
    expect(searches().map((line) => [line.method, line.path])).toEqual([...Array(pasted.length).fill([["POST", "/console/search"], ["GET", "/console/search"]]).flat(), ["POST", "/console/search"], ["GET", "/console/search"], ["GET", "/console/search"]]);
    expect(logLines.slice(logged).filter((line) => pasted.slice(0, -1).some((q) => line.includes(q) || line.includes(encodeURIComponent(q))))).toEqual([]);
  }, SLOW);

  test("one in a link to the search is not searched either, and the page says where it has been", async () => {
    const { token } = await createApiToken(server.runtime.db, "linked by mistake");
    const answer = await page.goto(url(`/console/search?q=${token}`));
    expect(answer!.status()).toBe(422);
    expect(await page.textContent(".notice-error")).toBe(
      "This looks like an API token (crm_…): it was not searched or logged, but it is in this page's address, and so in the browser's history and the log of any proxy on the way. If it is a real token, revoke it (API tokens, Revoke) and create another.",
    );
    expect(await page.inputValue("#search-q")).toBe("");
    problems.splice(0, problems.length, ...problems.filter((p) => !p.includes("422 (Unprocessable")));
  }, SLOW);
});

describe("a secret pasted into a filter", () => {
  // The contacts page's name filter and the deliveries filters were GET forms: what was typed was
  // in the address, and so in the tab's history, a proxy's log and the request log.
  /** visited is every address of the tab's history, decoded. */
  async function visited(): Promise<string[]> {
    const cdp = await page.context().newCDPSession(page);
    const { entries } = await cdp.send("Page.getNavigationHistory");
    await cdp.detach();
    return entries.map((entry) => decodeURIComponent(entry.url.replaceAll("+", " ")));
  }
  /** filter fills the fields of the page's filter form and presses Enter in the last, as an operator pastes; returns the answer's method and status and where the tab is. */
  async function filter(fields: Record<string, string>): Promise<[string, number, string]> {
    const names = Object.keys(fields);
    for (const name of names) await page.fill(`form.filters [name=${name}]`, fields[name]!);
    const [answer] = await Promise.all([page.waitForResponse((r) => r.request().isNavigationRequest() && r.request().method() === "POST"), page.press(`form.filters [name=${names.at(-1)}]`, "Enter")]);
    await page.waitForLoadState();
    const landed = await page.waitForURL((u) => u.pathname.startsWith("/console/")).then(() => page.url().slice(server.url.length));
    return [answer.request().method(), answer.status(), landed];
  }
  const SEALED_CONTACTS = /^\/console\/contacts\?s=[A-Za-z0-9_-]+$/;

  test("the contacts page's filter answers at an address with the text sealed; its pages, Back and Reload work, and a token is refused", async () => {
    const logged = logLines.length;
    const typed = "correct horse battery staple";
    await page.goto(url("/console/contacts"));
    const [method, status, landed] = await filter({ q: typed });
    expect([method, status, SEALED_CONTACTS.test(landed), await page.inputValue("form.filters [name=q]")]).toEqual(["POST", 303, true, typed]);
    await filter({ q: "Bulk" });
    expect(SEALED_CONTACTS.test(page.url().slice(server.url.length))).toBe(true);
    expect(await page.getAttribute("#older-contacts", "href")).toMatch(SEALED_CONTACTS);
    const { newest, older, backs } = await olderThenBack();
    expect([newest.length, older.length]).toEqual([50, BULK - 50]);
    expect(backs).toEqual([
      [200, older],
      [200, newest],
    ]);
    expect(await page.inputValue("form.filters [name=q]")).toBe("Bulk");
    expect((await page.reload())!.status()).toBe(200);
    expect(await contactIds()).toEqual(newest);
    expect(await page.locator("a[href]").evaluateAll((links) => links.map((a) => decodeURIComponent(a.getAttribute("href")!)).filter((href) => href.includes("Bulk")))).toEqual([]);
    // A token is not searched, and never sealed: the post's own answer says so.
    const { token } = await createApiToken(server.runtime.db, "pasted into contacts");
    await page.goto(url("/console/contacts"));
    expect(await filter({ q: ` Bearer ${token}` })).toEqual(["POST", 422, "/console/contacts"]);
    expect(await page.textContent(".notice-error")).toBe(
      "This looks like an API token (crm_…): it was not searched, and it was not logged or put in the page's address. If it is a real token, revoke it (API tokens, Revoke) and create another.",
    );
    expect(await page.inputValue("form.filters [name=q]")).toBe("");
    expect(await page.content()).not.toContain(token);
    expect((await visited()).filter((address) => address.includes(typed) || address.includes("Bulk") || address.includes(token))).toEqual([]);
    expect(logLines.slice(logged).filter((line) => [typed, token, encodeURIComponent(typed), "Bulk"].some((text) => line.includes(text)))).toEqual([]);
    problems.splice(0, problems.length, ...problems.filter((p) => !p.includes("422 (Unprocessable")));
    expect(problems).toEqual([]);
  }, SLOW);

  test("the deliveries filters: ids and times go in the address, other text sealed, a token nowhere", async () => {
    const logged = logLines.length;
    const typed = "correct horse battery staple";
    await page.goto(url("/console/"));
    const [method, status, landed] = await filter({ contact_id: typed });
    expect([method, status, /^\/console\/\?s=[A-Za-z0-9_-]+$/.test(landed)]).toEqual(["POST", 303, true]);
    // Refused as a link's would be, the text in its field to be corrected; Reload shows it again.
    const refused = async () => [await page.locator(".notice-error li").allTextContents(), await page.inputValue("form.filters [name=contact_id]")];
    expect(await refused()).toEqual([["contact id must be a contact id (con_...)."], typed]);
    expect((await page.reload())!.status()).toBe(422);
    expect(await refused()).toEqual([["contact id must be a contact id (con_...)."], typed]);
    expect(await filter({ contact_id: ada.id })).toEqual(["POST", 303, `/console/?contact_id=${ada.id}`]);
    expect(await page.locator("table#deliveries tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-delivery-id")))).toEqual(eventsAbout(ada.id).map((e) => e.delivery_id).reverse());
    const { token } = await createApiToken(server.runtime.db, "pasted into the deliveries filter");
    expect(await filter({ contact_id: "", event_id: token })).toEqual(["POST", 422, "/console/"]);
    expect(await page.locator(".notice-error li").allTextContents()).toEqual([
      "event id looks like an API token (crm_…): it was not used, logged or put in the page's address; if it is a real token, revoke it (API tokens, Revoke) and create another.",
    ]);
    expect(await page.inputValue("form.filters [name=event_id]")).toBe("");
    expect(await page.content()).not.toContain(token);
    expect((await visited()).filter((address) => address.includes(typed) || address.includes(token))).toEqual([]);
    expect(logLines.slice(logged).filter((line) => [typed, token, encodeURIComponent(typed)].some((text) => line.includes(text)))).toEqual([]);
    problems.splice(0, problems.length, ...problems.filter((p) => !p.includes("422 (Unprocessable")));
    expect(problems).toEqual([]);
  }, SLOW);
});

describe("contacts", () => {
  test("a contact's page shows its fields, accounts and assigned users, and every event about it with its deliveries, newest first", async () => {
    await page.goto(url(`/console/contacts/${ada.id}`));
    expect(await page.textContent("h1")).toBe("Ada Lovelace");
    expect(await page.textContent("#contact-accounts")).toBe("Analytical Engines Ltd");
    expect(await page.textContent("#contact-user")).toBe("none");
    expect(await page.textContent("#contact-users")).toBe("Charles Babbage <charles@example.com>");
    const events = eventsAbout(ada.id).reverse();
    expect(await page.locator("article.contact-event").evaluateAll((articles) => articles.map((a) => a.getAttribute("data-event-id")))).toEqual(events.map((e) => e.event_id));
    const deliveries = await page.locator("article.contact-event").evaluateAll((articles) =>
      articles.map((a) => [...a.querySelectorAll("tbody tr")].map((tr) => [tr.getAttribute("data-delivery-id"), tr.querySelector(".badge")!.textContent])),
    );
    expect(deliveries).toEqual(events.map((e) => [[e.delivery_id, "Succeeded"]]));
    expect(await shootAtBothWidths(page, "contact")).toBe(390);
  }, SLOW);

  test("a contact's page shows its owner (assigned_user_id) apart from its assigned users (assigned_user_ids)", async () => {
    const owned = (await server.api("POST", "/public/v1/contacts", { first_name: "Owned", last_name: "Contact", assigned_user_id: user.id })).data;
    await page.goto(url(`/console/contacts/${owned.id}`));
    expect(await page.locator("#contact-fields dt").allTextContents()).toContain("Assigned user (assigned_user_id)");
    expect(await page.textContent("#contact-user")).toBe("Charles Babbage <charles@example.com>");
    expect(await page.textContent("#contact-users")).toBe("none");
  }, SLOW);

  test("a deleted contact's page still lists what was sent about it, the deletion included", async () => {
    await fetch(url(`/public/v1/contacts/${twin.id}`), { method: "DELETE", headers: { authorization: `Bearer ${server.token}` } });
    await waitFor(() => eventsAbout(twin.id).length === 2, "the contact.deleted delivery");
    await page.goto(url(`/console/contacts/${twin.id}`));
    expect(await page.textContent(".notice")).toBe("This contact was deleted. What was sent about it is listed below.");
    expect(await page.locator("article.contact-event header code").allTextContents()).toEqual(["contact.deleted", "contact.created"]);
  }, SLOW);

  test("the contacts page lists the newest 50 and pages on to older ones", async () => {
    await page.goto(url("/console/contacts?q=Bulk"));
    expect(await page.textContent("#contacts-count")).toBe(`Showing the newest 50 of ${BULK} whose name contains “Bulk”.`);
    const first = await page.locator("#contacts tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-contact-id")));
    // A list filtered by text has its older pages at sealed addresses, even when a link carried the text.
    await Promise.all([page.waitForURL(/\/console\/contacts\?s=/), page.click("#older-contacts")]);
    const second = await page.locator("#contacts tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-contact-id")));
    const api = await server.api("GET", `/public/v1/contacts?full_name=Bulk&per_page=100`);
    expect([...first, ...second]).toEqual(api.data.map((c: any) => c.id));
    expect(await page.locator("#older-contacts").count()).toBe(0);
  }, SLOW);
});

describe("deliveries: triage beyond the latest 50", () => {
  test("the table pages on to older deliveries and shows each row's event and contact", async () => {
    await page.goto(url("/console/"));
    const total = (await server.api("GET", "/public/v1/webhook-deliveries?per_page=1")).meta.total;
    expect(await page.textContent("#deliveries-count")).toBe(`Showing the latest 50 of ${total}, newest first.`);
    const first = await page.locator("table#deliveries tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-delivery-id")));
    await Promise.all([page.waitForURL(/before=/), page.click("#older-deliveries")]);
    expect(await page.textContent("#deliveries-count")).toBe(`Showing ${Math.min(50, total - 50)} older of ${total}, newest first.`);
    const second = await page.locator("table#deliveries tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-delivery-id")));
    const api = await server.api("GET", "/public/v1/webhook-deliveries?per_page=100");
    expect([...first, ...second]).toEqual(api.data.slice(0, first.length + second.length).map((d: any) => d.id));
    const row = page.locator("table#deliveries tbody tr").first();
    expect(await row.locator("a.subject").getAttribute("href")).toMatch(/^\/console\/contacts\/con_/);
    expect(await row.locator("a[href^='/console/events/']").count()).toBe(1);
  }, SLOW);

  test("filters by contact, event id and time range; an unknown or malformed filter is refused by name", async () => {
    await page.goto(url(`/console/?contact_id=${ada.id}`));
    const ids = await page.locator("table#deliveries tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-delivery-id")));
    expect(ids).toEqual(eventsAbout(ada.id).map((e) => e.delivery_id).reverse());
    const updated = eventsAbout(ada.id).find((e) => e.type === "contact.updated")!;
    await page.goto(url(`/console/?event_id=${updated.event_id}`));
    expect(await page.locator("table#deliveries tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-delivery-id")))).toEqual([updated.delivery_id]);
    await page.goto(url("/console/?since=2000-01-01T00:00&until=2000-01-02T00:00"));
    expect(await page.textContent("#deliveries-count")).toBe("No deliveries match.");
    const unknown = await page.goto(url("/console/?colour=red"));
    expect(unknown!.status()).toBe(422);
    expect(await page.textContent(".notice-error")).toContain("colour is not a filter of this page");
    const malformed = await page.goto(url("/console/?since=yesterday&contact_id=ada"));
    expect(malformed!.status()).toBe(422);
    // Both are fields of the filter form: each is named, in a list.
    expect(await page.locator(".notice-error li").allTextContents()).toEqual(["contact id must be a contact id (con_...).", "since must be a date and time (YYYY-MM-DDTHH:MM, UTC)."]);
    problems.splice(0, problems.length, ...problems.filter((p) => !p.includes("422 (Unprocessable")));
    expect(problems).toEqual([]);
  }, SLOW);

  test("a time range a link carries as RFC 3339 (an offset, milliseconds) shows in its fields in UTC, and the next Filter keeps it", async () => {
    await page.goto(url("/console/?since=2000-01-01T00:00:00Z&until=2099-12-31T23:59:30.250%2B01:00"));
    // The browser writes the fraction at its shortest.
    const fields = () => Promise.all([page.inputValue("input[name=since]"), page.inputValue("input[name=until]")]);
    expect(await fields()).toEqual(["2000-01-01T00:00", "2099-12-31T22:59:30.25"]);
    await page.selectOption("select[name=event]", "contact.updated");
    await Promise.all([page.waitForURL(/event=contact.updated/), page.click(".filters button[type=submit]")]);
    expect(new URL(page.url()).search).toBe("?event=contact.updated&since=2000-01-01T00%3A00&until=2099-12-31T22%3A59%3A30.25");
    expect(await fields()).toEqual(["2000-01-01T00:00", "2099-12-31T22:59:30.25"]);
    const updated = eventsAbout(ada.id).filter((e) => e.type === "contact.updated").map((e) => e.delivery_id);
    expect(await page.locator("table#deliveries tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-delivery-id")))).toEqual(updated);
    expect(problems).toEqual([]);
  }, SLOW);
});

test("every console page loads with no console error and no CSP violation", async () => {
  const delivery = eventsAbout(ada.id)[0]!;
  const subscription = (await server.api("GET", "/public/v1/webhook-subscriptions")).data[0];
  const operator = (await page.goto(url("/console/operators")), await page.locator("#operators tbody tr").first().getAttribute("data-operator-id"));
  const paths = [
    "/console/",
    `/console/?before=${encodeURIComponent("9999999999999.dlv_01J00000000000000000000000")}`,
    `/console/deliveries/${delivery.delivery_id}`,
    `/console/events/${delivery.event_id}`,
    "/console/subscriptions",
    `/console/subscriptions/${subscription.id}`,
    `/console/subscriptions/${subscription.id}/edit`,
    `/console/subscriptions/${subscription.id}/delete`,
    `/console/subscriptions/${subscription.id}/recover`,
    `/console/subscriptions/${subscription.id}/secret-rotation`,
    "/console/rotations/new",
    `/console/rotations/new?from=${subscription.id}`,
    "/console/contacts",
    `/console/contacts/${ada.id}`,
    "/console/tokens",
    "/console/users",
    `/console/users/${user.id}/delete`,
    "/console/operators",
    `/console/operators/${operator}/reset-password`,
    `/console/operators/${operator}/remove`,
  ];
  const seen: [string, number, string[], string[]][] = [];
  for (const path of paths) {
    problems.length = 0;
    const res = await page.goto(url(path));
    await page.waitForLoadState("networkidle");
    seen.push([path, res!.status(), [...problems], await cspViolations(page)]);
  }
  expect(seen).toEqual(paths.map((path) => [path, 200, [], []]));
}, SLOW);
