// A support engineer's day in the console (s36 audit `support`): what the console says of held,
// paused, rotated and backlogged subscriptions, and of times, in the words an operator reads.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Page } from "playwright-core";
import { createApiToken } from "../../server/auth/service.ts";
import { operatorByEmail } from "../../server/operators/service.ts";
import { madeByOperator } from "../../server/shared/made-by.ts";
import { accessibleNames, launchBrowser, OPERATOR, seedDeliveries, signedInBrowser, startConsoleServer, type ConsoleServer } from "./support.ts";

let server: ConsoleServer;
let browser: Awaited<ReturnType<typeof launchBrowser>>;
let page: Page;
const HOUR = 3_600_000;
const SLOW = 60_000;

beforeAll(async () => {
  server = await startConsoleServer();
  ({ browser, page } = await signedInBrowser(server));
}, SLOW);

afterAll(async () => {
  await browser.close();
  await server.close();
});

/** follow clicks a link and returns the address it led to, and what a screen reader names the link. */
async function follow(link: string): Promise<{ name: string; landed: string }> {
  const [name] = await accessibleNames(page, link);
  const from = page.url();
  await Promise.all([page.waitForURL((u) => u.href !== from), page.click(link)]);
  return { name: name!, landed: page.url().slice(server.url.length) };
}

// First: the wizard's step 1 before any subscription exists.
test("the rotation wizard's step 1 links to what it says to do: with no subscription, the form that creates one", async () => {
  await page.goto(`${server.url}/console/rotations/new`);
  expect(await page.textContent(".step p")).toBe("There are no subscriptions to rotate. Create one on the Subscriptions page.");
  expect(await follow(".step p a")).toEqual({ name: "Create one on the Subscriptions page", landed: "/console/subscriptions#new-subscription" });
  expect(await page.locator("#new-subscription h2").textContent()).toBe("New subscription");
}, SLOW);

const create = async (body: object) =>
  (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/support", events: ["contact.updated"], ...body })).data;

test("a held subscription's pending delivery, in the deliveries list, says it waits for its receiver, not a due time in the past", async () => {
  const held = await create({ description: "Held by its receiver" });
  const until = Date.now() + HOUR;
  await server.runtime.db.run("UPDATE webhook_subscriptions SET held_until = ? WHERE id = ?", [until, held.id]);
  const [id] = await seedDeliveries(server.runtime.db, held, [{ at: Date.now() - HOUR, status: "pending" }]);
  await server.runtime.db.run("UPDATE webhook_deliveries SET next_attempt_at = ? WHERE id = ?", [Date.now() - 60_000, id!]);
  const shown = `waits for its receiver until ${new Date(until).toISOString().slice(0, 19).replace("T", " ")}`;
  await page.goto(`${server.url}/console/deliveries/${id}`);
  expect(await page.locator("#next-retry").innerText()).toContain(shown);
  // The list says it as the delivery's page does, on the server and after the live table's refresh.
  await page.goto(`${server.url}/console/?subscription_id=${held.id}`);
  const nextRetry = page.locator(`tr:has(a[href='/console/deliveries/${id}']) td[data-label='Next retry']`);
  expect(await nextRetry.innerText()).toContain(shown);
  const refreshed = await page.evaluate(async (query) => (await (await fetch(`/console/api/deliveries${query}`)).json()).data, `?subscription_id=${held.id}`);
  expect(refreshed.map((row: { id: string; held_until: string | null }) => [row.id, row.held_until])).toEqual([[id, new Date(until).toISOString()]]);
}, SLOW);

test("a chart's text gives how many deliveries succeeded, failed and are still pending, not only the total and the failed", async () => {
  const backlog = await create({ description: "Backlog" });
  await seedDeliveries(server.runtime.db, backlog, [
    { at: Date.now() - HOUR, status: "succeeded" },
    { at: Date.now() - HOUR, status: "pending" },
    { at: Date.now() - HOUR, status: "pending" },
    { at: Date.now() - HOUR, status: "pending" },
  ]);
  await page.goto(`${server.url}/console/subscriptions/${backlog.id}`);
  const summary = `#chart-${backlog.id}-24h figcaption`;
  expect(await page.locator(summary).textContent()).toBe("Deliveries per hour, last 24 hours: 4 deliveries: 1 succeeded, 0 failed, 3 pending.");
}, SLOW);

test("failures by reason say when each reason was last met and link the delivery that met it last, not the newest-made one", async () => {
  const old = await create({ description: "Old backlog failing now" });
  const threeDaysAgo = Date.now() - 72 * HOUR;
  const [early, late] = await seedDeliveries(server.runtime.db, old, [
    { at: threeDaysAgo, status: "pending", response_status: 429 },
    { at: threeDaysAgo + HOUR, status: "pending", response_status: 429 },
  ]);
  // The earlier-made delivery's attempt (the 429) was made a minute ago, the later-made one's two days ago.
  const attemptAt = Date.now() - 60_000;
  await server.runtime.db.run("UPDATE webhook_deliveries SET updated_at = ? WHERE id = ?", [attemptAt, early!]);
  await server.runtime.db.run("UPDATE webhook_deliveries SET updated_at = ? WHERE id = ?", [threeDaysAgo + 2 * HOUR, late!]);
  await page.goto(`${server.url}/console/subscriptions/${old.id}`);
  expect(await page.locator("#failures thead th").allTextContents()).toEqual(["Reason", "Deliveries", "Last seen (UTC)"]);
  const row = page.locator("#failures tbody tr", { hasText: "HTTP 429" });
  expect(await row.locator("td[data-label='Deliveries']").innerText()).toBe("2");
  expect(await row.locator("time").innerText()).toBe(new Date(attemptAt).toISOString().slice(0, 19).replace("T", " "));
  expect(await row.locator("a").getAttribute("href")).toBe(`/console/deliveries/${early}`);
}, SLOW);

const shown = (iso: string) => `${iso.slice(0, 19).replace("T", " ")} UTC`;

test("a paused subscription says since when, on its page, its Subscriptions row and its card, though nothing waits for its resume", async () => {
  const sub = await create({ description: "Maintenance window" });
  const paused = (await server.api("POST", `/public/v1/webhook-subscriptions/${sub.id}/pause`)).data;
  const note = `Paused since ${shown(paused.paused_at)}: nothing is sent to it, its deliveries are kept and go out on Resume.`;
  await page.goto(`${server.url}/console/subscriptions/${sub.id}`);
  expect(await page.locator(".page-head .paused-note").innerText()).toBe(note);
  await page.goto(`${server.url}/console/subscriptions`);
  expect(await page.locator(`tr[data-subscription-id="${sub.id}"] .paused-note`).innerText()).toBe(note);
  await page.goto(`${server.url}/console/`);
  expect(await page.locator(`article[data-subscription-id="${sub.id}"] .paused-note`).innerText()).toBe(note);
}, SLOW);

test("a secret the API rotated shows on the subscription's page and in the wizard, whose step 2 says a receiver still on the secret before it verifies neither signature", async () => {
  const sub = await create({ description: "Billing" });
  const rotated = (await server.api("POST", `/public/v1/webhook-subscriptions/${sub.id}/rotate-secret`, { grace_hours: 0 })).data;
  const note = `Secret rotated at ${shown(rotated.secret_rotated_at)}, the previous one retired at once.`;
  await page.goto(`${server.url}/console/subscriptions/${sub.id}`);
  expect(await page.locator(".page-head .secret-note").innerText()).toBe(note);
  await page.goto(`${server.url}/console/rotations/new`);
  expect(await page.locator(`label.choice:has(input[value="${sub.id}"]) .secret-note`).innerText()).toBe(note);
  // Step 2 promises a receiver that keeps verifying only to one that has the current secret ...
  await page.goto(`${server.url}/console/subscriptions/${sub.id}/secret-rotation`);
  expect(await page.locator("main").innerText()).toContain("so a receiver that has the current secret keeps verifying while it switches");
  expect(await page.locator(".rotation-warning").count()).toBe(0);
  // ... and once every attempt has failed since the rotation, says what one still on the secret before it gets.
  await server.runtime.db.run("UPDATE webhook_subscriptions SET failing_since = ? WHERE id = ?", [Date.parse(rotated.secret_rotated_at) + 1000, sub.id]);
  await page.reload();
  expect(await page.locator(".rotation-warning").innerText()).toBe(
    `Every attempt has failed since the secret was rotated at ${shown(rotated.secret_rotated_at)}, and the previous one is no longer accepted: a receiver still on the secret before that rotation verifies neither signature of this one (the new secret's and the current one's), and goes on refusing until it is given the new secret.`,
  );
}, SLOW);

test("a previous secret still accepted says until when", async () => {
  const sub = await create({ description: "Grace" });
  const rotated = (await server.api("POST", `/public/v1/webhook-subscriptions/${sub.id}/rotate-secret`, { grace_hours: 2 })).data;
  await page.goto(`${server.url}/console/subscriptions/${sub.id}`);
  expect(await page.locator(".page-head .secret-note").innerText()).toBe(
    `Secret rotated at ${shown(rotated.secret_rotated_at)}; the previous one still signs too until ${shown(rotated.previous_secret_expires_at)}.`,
  );
}, SLOW);

test("times say their zone where they are shown, once: after a time in a sentence or a record's facts, in the heading of a table's column", async () => {
  const sub = await create({ description: "Zone" });
  const at = Date.now() - HOUR;
  const [id] = await seedDeliveries(server.runtime.db, sub, [{ at, status: "failed", response_status: 500 }]);
  const time = new Date(at).toISOString().slice(0, 19).replace("T", " ");
  await page.goto(`${server.url}/console/deliveries/${id}`);
  expect(await page.locator("main dt:has-text('Created') + dd").innerText()).toBe(`${time} UTC`);
  await page.goto(`${server.url}/console/?subscription_id=${sub.id}`);
  expect(await page.locator("#deliveries thead th").first().textContent()).toBe("Time (UTC)");
  expect(await page.locator(`#deliveries a[href='/console/deliveries/${id}'] time`).innerText()).toBe(time);
  // The charts' hours and days are UTC's too.
  expect(await page.locator(`#chart-${sub.id}-24h .chart-zone`).textContent()).toBe("UTC");
}, SLOW);

test("a delivery's subscription links the subscription's page, its deliveries beside it; the contact's and the event's delivery tables name each delivery's subscription, linking its page", async () => {
  const sub = await create({ description: "Acme", events: ["contact.created"] });
  const contact = (await server.api("POST", "/public/v1/contacts", { email: "links@example.com" })).data;
  const delivered = await server.api("GET", `/public/v1/webhook-deliveries?subscription_id=${sub.id}`);
  const delivery = delivered.data[0];
  await page.goto(`${server.url}/console/deliveries/${delivery.id}`);
  const subscription = page.locator("main dt:has-text('Subscription') + dd");
  expect(await subscription.locator("a").evaluateAll((links) => links.map((a) => [a.textContent, a.getAttribute("href")]))).toEqual([
    ["Acmehttp://127.0.0.1:9/support", `/console/subscriptions/${sub.id}`],
    ["its deliveries", `/console/?subscription_id=${sub.id}`],
  ]);
  for (const address of [`/console/contacts/${contact.id}`, `/console/events/${delivery.event_id}`]) {
    await page.goto(`${server.url}${address}`);
    const cell = page.locator(`tr[data-delivery-id="${delivery.id}"] td[data-label="Subscription"] a`);
    expect([address, await cell.textContent(), await cell.getAttribute("href")]).toEqual([address, "Acmehttp://127.0.0.1:9/support", `/console/subscriptions/${sub.id}`]);
  }
}, SLOW);

test("the support paths link on: a delivery's next retry, an event's request and maker, a subscription's and a token's maker, a rotation under way", async () => {
  const sub = await create({ description: "Linked", events: ["contact.created"] });
  // A list's next retry opens the delivery at its own, beside Retry now.
  const [pending] = await seedDeliveries(server.runtime.db, sub, [{ at: Date.now() - HOUR, status: "pending" }]);
  await page.goto(`${server.url}/console/?subscription_id=${sub.id}`);
  const nextRetry = await follow(`tr[data-delivery-id="${pending}"] td[data-label="Next retry"] a`);
  expect(nextRetry).toEqual({ name: expect.stringMatching(new RegExp(`^in \\d+ [hd] next retry of delivery ${pending}$`)), landed: `/console/deliveries/${pending}#next-retry` });
  expect(await page.locator("button:has-text('Retry now')").count()).toBe(1);
  // An event's request opens the deliveries of that request (the Request id filter, sealed).
  const contact = await fetch(`${server.url}/public/v1/contacts`, { method: "POST", headers: { authorization: `Bearer ${server.token}`, "content-type": "application/json", "x-request-id": "support-links-7" }, body: JSON.stringify({ email: "request.links@example.com" }) });
  const made = ((await contact.json()) as { data: { id: string } }).data;
  const ofRequest: { id: string; event_id: string }[] = (await server.api("GET", `/public/v1/webhook-deliveries?request_id=support-links-7`)).data;
  const delivery = ofRequest[0]!;
  await page.goto(`${server.url}/console/events/${delivery.event_id}`);
  expect(await page.locator("#request-id").innerText()).toBe("support-links-7 deliveries of this request (the X-Request-Id of the request that made the event)");
  expect(await follow("#request-id a")).toEqual({ name: "deliveries of this request", landed: expect.stringMatching(/^\/console\/\?s=[A-Za-z0-9_-]+$/) });
  expect(await page.locator("#deliveries tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-delivery-id")).sort())).toEqual(ofRequest.map((d) => d.id).sort());
  // Its maker, and a subscription's, open the token's row; a token's maker opens the operator's row.
  const tokenId = (await server.runtime.db.get<{ token_id: string }>("SELECT token_id FROM events WHERE subject_id = ?", [made.id]))!.token_id;
  const prefix = (await server.runtime.db.get<{ prefix: string }>("SELECT prefix FROM api_tokens WHERE id = ?", [tokenId]))!.prefix;
  for (const [address, link] of [[`/console/events/${delivery.event_id}`, "dl.facts dd a[href^='/console/tokens']"], [`/console/subscriptions/${sub.id}`, "#made-by a"]]) {
    await page.goto(`${server.url}${address}`);
    expect([address, await follow(link!)]).toEqual([address, { name: `API token console-test (${prefix}…)`, landed: `/console/tokens#${tokenId}` }]);
    expect(await page.locator(`tr[id="${tokenId}"] td`).first().innerText()).toBe("console-test");
  }
  const operator = await operatorByEmail(server.runtime.db, OPERATOR.email);
  const theirs = await createApiToken(server.runtime.db, "made-on-console", Date.now(), null, madeByOperator(operator));
  await page.goto(`${server.url}/console/tokens`);
  expect(await follow(`tr[id="${theirs.info.id}"] td[data-label="Made by"] a`)).toEqual({ name: OPERATOR.email, landed: `/console/operators#${operator.id}` });
  expect(await page.locator(`tr[id="${operator.id}"] td`).first().innerText()).toContain(OPERATOR.email);
  // A rotation under way: step 1 resumes it (named with its URL and id: its new subscription has the same description and URL).
  await page.goto(`${server.url}/console/rotations/new?from=${sub.id}&kind=url`);
  await Promise.all([page.waitForNavigation(), page.click("button:has-text('Create new subscription')")]);
  const rotation = `/console/rotations/${(await server.runtime.db.get<{ id: string }>("SELECT new_subscription_id AS id FROM subscription_rotations WHERE old_subscription_id = ?", [sub.id]))!.id}`;
  await page.goto(`${server.url}/console/rotations/new`);
  expect(await follow(`a[href="${rotation}"]`)).toEqual({ name: `Resume rotation of subscription Linked to http://127.0.0.1:9/support ${sub.id}`, landed: rotation });
}, SLOW);
