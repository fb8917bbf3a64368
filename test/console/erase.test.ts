import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Page } from "playwright-core";
import { tablesHolding } from "../support/personal-data.ts";
import { startReceiver, waitFor, type Receiver } from "../webhooks/support.ts";
import { cspViolations, launchBrowser, signedInBrowser, startConsoleServer, type ConsoleServer } from "./support.ts";

// The console's Erase, in Chromium: on a deleted contact's or account's page, asked first, sent
// with the session's CSRF token and a form key, through the API's erasure.
let server: ConsoleServer;
let browser: Awaited<ReturnType<typeof launchBrowser>>;
let page: Page;
let problems: string[];
let receiver: Receiver;

const SLOW = 60_000;
const url = (path: string) => `${server.url}${path}`;
const EMAIL = "erased.in.console7@example.com";

beforeAll(async () => {
  server = await startConsoleServer();
  receiver = startReceiver();
  await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created", "contact.updated", "contact.deleted", "account.created", "account.deleted"] });
  // A paused subscription's deliveries wait: the erasure fails them unsent.
  const paused = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: `${receiver.url}/paused`, events: ["contact.created", "contact.updated"] })).data;
  await server.api("POST", `/public/v1/webhook-subscriptions/${paused.id}/pause`);
  ({ browser, page, problems } = await signedInBrowser(server));
}, SLOW);

afterAll(async () => {
  await browser.close();
  await receiver.stop();
  await server.close();
});

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
  expect(await page.locator("a.button.danger").count()).toBe(0);
  const refused = await page.goto(url(`/console/contacts/${live.id}/erase`));
  expect([refused?.status(), await page.locator("form button.danger").count()]).toEqual([409, 0]);
}, SLOW);
