import { expect, test } from "bun:test";
import type { Page } from "playwright-core";
import { ISO } from "../foundation/support.ts";
import { tablesHolding } from "../support/personal-data.ts";
import { waitFor, type Receiver } from "../webhooks/support.ts";
import { browserFile, cspViolations, type ConsoleServer } from "./support.ts";

// The console's Erase, in Chromium: on a deleted contact's or account's page, asked first, sent
// with the session's CSRF token and a form key, through the API's erasure. And the Delete before it,
// on a live contact's page, so a "forget me" request is finished without an API token.
let server: ConsoleServer;
let page: Page;
let problems: string[];
let receiver: Receiver;

const SLOW = 60_000;
const url = (path: string) => `${server.url}${path}`;
const EMAIL = "erased.in.console7@example.com";

browserFile(async (file) => {
  ({ server, receiver, page, problems } = file);
  await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created", "contact.updated", "contact.deleted", "account.created", "account.deleted"] });
  // A paused subscription's deliveries wait: the erasure fails them unsent.
  const paused = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: `${receiver.url}/paused`, events: ["contact.created", "contact.updated"] })).data;
  await server.api("POST", `/public/v1/webhook-subscriptions/${paused.id}/pause`);
});

const deletedEvents = (id: string) => server.runtime.db.all<{ id: string; request_id: string | null }>("SELECT id, request_id FROM events WHERE type = 'contact.deleted' AND payload LIKE ?", [`%${id}%`]);
const stillThere = async (id: string) => (await fetch(url(`/public/v1/contacts/${id}`), { headers: { authorization: `Bearer ${server.token}` } })).status;

/** sendAgain posts a confirmation's form once more, as a browser's resend does (its fields, from the page now shown), and returns the status of where it led and that address. */
async function sendAgain(action: string, fields: Record<string, string>): Promise<[number | undefined, string]> {
  const [answer] = await Promise.all([
    page.waitForNavigation(),
    page.evaluate(
      ({ action, fields }) => {
        const form = document.createElement("form");
        form.method = "post";
        form.action = action;
        for (const [name, value] of Object.entries(fields)) form.append(Object.assign(document.createElement("input"), { type: "hidden", name, value }));
        document.body.append(form);
        // Sent once this evaluation has returned: the navigation ends its page.
        setTimeout(() => form.submit());
      },
      { action, fields },
    ),
  ]);
  return [answer?.status(), page.url()];
}

test("a deleted contact's page erases its events after a confirmation, says how many, and the form sent again answers as the first did", async () => {
  const contact = (await server.api("POST", "/public/v1/contacts", { first_name: "Erin", email: EMAIL })).data;
  await server.api("PATCH", `/public/v1/contacts/${contact.id}`, { first_name: "Erin2" });
  await fetch(url(`/public/v1/contacts/${contact.id}`), { method: "DELETE", headers: { authorization: `Bearer ${server.token}` } });
  await waitFor(() => receiver.received.filter((r) => r.json?.data?.id === contact.id).length === 3, "the three events at the live receiver");

  await page.goto(url(`/console/contacts/${contact.id}`));
  expect(await page.textContent(".notice")).toBe("This contact was deleted. What was sent about it is listed below.");
  await Promise.all([page.waitForURL(url(`/console/contacts/${contact.id}/erase`)), page.click("a.button.danger")]);
  expect(await page.textContent("h1")).toBe("Erase the deleted contact's events?");
  // The confirmation's form is the console's: the session's CSRF token and a form key of its own.
  expect(await page.locator("form.actions input[type=hidden]").evaluateAll((inputs) => inputs.map((i) => (i as HTMLInputElement).name))).toEqual(["_csrf", "form_key"]);
  const formKey = await page.inputValue("input[name=form_key]");
  await Promise.all([page.waitForURL(url(`/console/contacts/${contact.id}?erased=2&failed=2`)), page.click("button.danger")]);
  expect(await page.textContent(".notice")).toBe("Erased the payloads of 2 earlier events; 2 pending deliveries of them failed unsent.");
  expect(await page.locator("article.contact-event .tag").allTextContents()).toEqual(["payload erased", "payload erased"]);
  expect(await tablesHolding(server.runtime.db, [EMAIL])).toEqual({ [EMAIL]: {} });

  // The same form sent again (a double click, a browser's resend): its form key replays the first answer.
  await page.goto(url(`/console/contacts/${contact.id}/erase`));
  await page.locator("input[name=form_key]").evaluate((input, key) => ((input as HTMLInputElement).value = key), formKey);
  await Promise.all([page.waitForURL(url(`/console/contacts/${contact.id}?erased=2&failed=2`)), page.click("button.danger")]);
  // A new confirmation erases what is left: nothing.
  await page.goto(url(`/console/contacts/${contact.id}/erase`));
  await Promise.all([page.waitForURL(url(`/console/contacts/${contact.id}?erased=0&failed=0`)), page.click("button.danger")]);
  expect(await page.textContent(".notice")).toBe("Erased the payloads of 0 earlier events; 0 pending deliveries of them failed unsent.");
  expect([problems, await cspViolations(page)]).toEqual([[], []]);
}, SLOW);

test("a deleted account's page, reached from its event's page, erases its events; a live record offers no Erase and its confirmation is refused", async () => {
  const account = (await server.api("POST", "/public/v1/accounts", { name: "Erased Engines Ltd", domain: "erased-engines.example" })).data;
  await fetch(url(`/public/v1/accounts/${account.id}`), { method: "DELETE", headers: { authorization: `Bearer ${server.token}` } });
  const created = await waitFor(() => receiver.received.find((r) => r.json?.type === "account.created" && r.json.data.id === account.id), "account.created at the receiver");

  await page.goto(url(`/console/events/${created.json.event_id}`));
  await Promise.all([page.waitForURL(url(`/console/accounts/${account.id}`)), page.click(`a[href="/console/accounts/${account.id}"]`)]);
  expect(await page.textContent(".notice")).toBe("This account was deleted. What was sent about it is listed below.");
  await Promise.all([page.waitForURL(url(`/console/accounts/${account.id}/erase`)), page.click("a.button.danger")]);
  await Promise.all([page.waitForURL(url(`/console/accounts/${account.id}?erased=1&failed=0`)), page.click("button.danger")]);
  expect(await page.textContent(".notice")).toBe("Erased the payloads of 1 earlier event; 0 pending deliveries of them failed unsent.");
  expect(await tablesHolding(server.runtime.db, ["Erased Engines", "erased-engines.example"])).toEqual({ "Erased Engines": {}, "erased-engines.example": {} });

  const live = (await server.api("POST", "/public/v1/contacts", { first_name: "Staying", email: "staying7@example.com" })).data;
  await page.goto(url(`/console/contacts/${live.id}`));
  expect(await page.locator(`a[href="/console/contacts/${live.id}/erase"]`).count()).toBe(0);
  const refused = await page.goto(url(`/console/contacts/${live.id}/erase`));
  expect([refused?.status(), await page.locator("form button.danger").count()]).toEqual([409, 0]);
}, SLOW);

test("a live contact's page deletes it after a confirmation, contact.deleted goes out, its page then offers Erase, and the form sent again answers as the first did", async () => {
  // This test's own console errors only: the one before was refused a confirmation on purpose.
  problems.length = 0;
  const contact = (await server.api("POST", "/public/v1/contacts", { first_name: "Forget", last_name: "Me", email: "forget.me.in.console@example.com" })).data;
  await waitFor(() => receiver.received.some((r) => r.json?.type === "contact.created" && r.json.data.id === contact.id), "contact.created at the receiver");

  await page.goto(url(`/console/contacts/${contact.id}`));
  expect(await page.locator(`a[href="/console/contacts/${contact.id}/erase"]`).count()).toBe(0);
  await Promise.all([page.waitForURL(url(`/console/contacts/${contact.id}/delete`)), page.click(`a[href="/console/contacts/${contact.id}/delete"]`)]);
  expect(await page.textContent("h1")).toBe("Delete the contact?");
  expect(await page.textContent("section.message p")).toBe(
    `Delete the contact Forget Me (forget.me.in.console@example.com, ${contact.id})? Its subscribers are sent contact.deleted. For an erasure request, then erase what its earlier events hold of it: its page offers that once it is deleted. This cannot be undone.`,
  );
  // The confirmation's form is the console's: the session's CSRF token and a form key of its own.
  expect(await page.locator("form.actions input[type=hidden]").evaluateAll((inputs) => inputs.map((i) => (i as HTMLInputElement).name))).toEqual(["_csrf", "form_key"]);
  const fields = { _csrf: await page.inputValue("form.actions input[name=_csrf]"), form_key: await page.inputValue("input[name=form_key]") };
  // The event is made by the console's request, as the API's delete's is by its own.
  await page.setExtraHTTPHeaders({ "x-request-id": "forget-me-ticket-7" });
  await Promise.all([page.waitForURL(url(`/console/contacts/${contact.id}`)), page.click("button.danger")]);
  await page.setExtraHTTPHeaders({});

  expect(await page.textContent(".notice")).toBe("This contact was deleted. What was sent about it is listed below.");
  expect(await page.textContent(`a[href="/console/contacts/${contact.id}/erase"]`)).toBe("Erase its events…");
  expect(await page.locator(`a[href="/console/contacts/${contact.id}/delete"]`).count()).toBe(0);
  expect(await stillThere(contact.id)).toBe(404);
  const [event] = await deletedEvents(contact.id);
  expect(await deletedEvents(contact.id)).toEqual([{ id: event!.id, request_id: "forget-me-ticket-7" }]);
  const sent = await waitFor(() => receiver.received.find((r) => r.json?.type === "contact.deleted" && r.json.data.id === contact.id), "contact.deleted at the receiver");
  expect(sent.json).toEqual({ type: "contact.deleted", event_id: event!.id, timestamp: expect.stringMatching(ISO), data: { id: contact.id, version: 2, deleted_at: expect.stringMatching(ISO) } });

  // The same form sent again (a double click, a browser's resend) answers as the first did, and deletes nothing more.
  expect(await sendAgain(`/console/contacts/${contact.id}/delete`, fields)).toEqual([200, url(`/console/contacts/${contact.id}`)]);
  // A confirmation opened before the delete (another tab) finds it done.
  expect(await sendAgain(`/console/contacts/${contact.id}/delete`, { ...fields, form_key: crypto.randomUUID() })).toEqual([200, url(`/console/contacts/${contact.id}`)]);
  expect(await page.textContent(`a[href="/console/contacts/${contact.id}/erase"]`)).toBe("Erase its events…");
  // The confirmation's address, once the contact is gone, leads to its page too.
  await Promise.all([page.waitForURL(url(`/console/contacts/${contact.id}`)), page.goto(url(`/console/contacts/${contact.id}/delete`))]);
  expect((await deletedEvents(contact.id)).length).toBe(1);
  expect([problems, await cspViolations(page)]).toEqual([[], []]);
}, SLOW);

test("a confirmation sent without the session's CSRF token deletes nothing; an unknown contact's is 404", async () => {
  const contact = (await server.api("POST", "/public/v1/contacts", { first_name: "Kept", email: "kept.in.console@example.com" })).data;
  await page.goto(url(`/console/contacts/${contact.id}/delete`));
  await page.locator("form.actions input[name=_csrf]").evaluate((input) => ((input as HTMLInputElement).value = "forged"));
  const [refused] = await Promise.all([page.waitForNavigation(), page.click("button.danger")]);
  expect([refused?.status(), await page.textContent("h1")]).toEqual([403, "Form expired"]);
  expect([await stillThere(contact.id), await deletedEvents(contact.id)]).toEqual([200, []]);

  const unknown = await page.goto(url("/console/contacts/con_000000000000000000000000/delete"));
  expect([unknown?.status(), await page.locator("form button.danger").count()]).toEqual([404, 0]);
}, SLOW);
