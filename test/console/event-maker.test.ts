import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Page } from "playwright-core";
import { createApiToken } from "../../server/auth/service.ts";
import { cspViolations, launchBrowser, signedInBrowser, startConsoleServer, type ConsoleServer } from "./support.ts";

// "Which integration deleted this contact?": an event's page names the API token whose request
// made it and links that token's row, in Chromium.
let server: ConsoleServer;
let browser: Awaited<ReturnType<typeof launchBrowser>>;
let page: Page;
let problems: string[];

const SLOW = 60_000;
const url = (path: string) => `${server.url}${path}`;

beforeAll(async () => {
  server = await startConsoleServer();
  ({ browser, page, problems } = await signedInBrowser(server));
}, SLOW);

afterAll(async () => {
  await browser.close();
  await server.close();
});

test("a deleted contact's event page says which API token deleted it and links its row on the Tokens page", async () => {
  const zapier = await createApiToken(server.runtime.db, "zapier-sync");
  const contact = (await server.api("POST", "/public/v1/contacts", { first_name: "Omar", email: "omar.garcia.17@customer.example" })).data;
  const deleted = await fetch(url(`/public/v1/contacts/${contact.id}`), { method: "DELETE", headers: { authorization: `Bearer ${zapier.token}`, "x-request-id": "nightly-cleanup-42" } });
  expect(deleted.status).toBe(204);
  const event = await server.runtime.db.get<{ id: string }>("SELECT id FROM events WHERE type = 'contact.deleted' AND request_id = 'nightly-cleanup-42'");

  await page.goto(url(`/console/events/${event!.id}`));
  const facts = await page.locator("dl.facts dt").allTextContents();
  const madeBy = page.locator("dl.facts dd").nth(facts.indexOf("Made by"));
  expect(await madeBy.innerText()).toBe(`API token zapier-sync (${zapier.info.prefix}…) (${zapier.info.id})`);
  await Promise.all([page.waitForURL(url(`/console/tokens#${zapier.info.id}`)), madeBy.locator("a").click()]);
  expect(await page.locator(`tr[id="${zapier.info.id}"] td`).first().innerText()).toBe("zapier-sync");
  expect([problems, await cspViolations(page)]).toEqual([[], []]);
}, SLOW);
