import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { BrowserContext, Page } from "playwright-core";
import { startReceiver, waitFor, type Receiver } from "../webhooks/support.ts";
import { launchBrowser, OPERATOR, shoot, startConsoleServer, watchPage, type ConsoleServer } from "./support.ts";

// One server and one browser for the whole file; the tests run in order and build on each other.
let server: ConsoleServer;
let browser: Awaited<ReturnType<typeof launchBrowser>>;
let context: BrowserContext;
let page: Page;
let problems: string[];
let receiver: Receiver;
let subscriptionId: string;

beforeAll(async () => {
  server = await startConsoleServer();
  browser = await launchBrowser();
  context = browser.context;
  page = await context.newPage();
  problems = watchPage(page);
  receiver = startReceiver();
});

afterAll(async () => {
  await browser.close();
  await receiver.stop();
  await server.close();
});

const url = (path: string) => `${server.url}${path}`;
const SLOW = 60_000; // a browser round trip per step; waits end as soon as the page shows the result
const rows = () => page.locator("table#deliveries tbody tr");

describe("first run, sign-in and sign-out", () => {
  test("the first-run setup link creates an operator and signs in", async () => {
    expect(server.setupUrl).not.toBeNull();
    await page.goto(server.setupUrl!);
    await shoot(page, "setup");
    await page.fill("input[name=email]", OPERATOR.email);
    await page.fill("input[name=password]", OPERATOR.password);
    await page.fill("input[name=password_again]", OPERATOR.password);
    await Promise.all([page.waitForURL(url("/console/")), page.click("button[type=submit]")]);
    expect(await page.textContent("h1")).toBe("Deliveries");
    expect(await page.textContent(".who")).toBe(OPERATOR.email);
    const cookies = await context.cookies(url("/console/"));
    // the session, and the device cookie that trusts this browser for the operator's later sign-ins
    expect(cookies.map((c) => [c.name, c.httpOnly, c.sameSite, c.path]).toSorted()).toEqual([
      ["crm_console_device", true, "Strict", "/console"],
      ["crm_console_session", true, "Strict", "/console"],
    ]);
  }, SLOW);

  test("logout ends the session, and a page request without a session redirects to sign-in", async () => {
    await Promise.all([page.waitForURL(url("/console/login")), page.click("form.signout button")]);
    // the device cookie stays: signing out does not make the browser a stranger
    expect((await context.cookies(url("/console/"))).map((c) => c.name).toSorted()).toEqual(["crm_console_csrf", "crm_console_device"]);
    await page.goto(url("/console/subscriptions"));
    expect(page.url()).toBe(url("/console/login?next=%2Fconsole%2Fsubscriptions"));
    await shoot(page, "login");
  }, SLOW);

  test("a wrong password is refused; the right one signs in and returns to the page asked for", async () => {
    await page.fill("input[name=email]", OPERATOR.email);
    await page.fill("input[name=password]", "not the password");
    const [refused] = await Promise.all([page.waitForResponse((r) => r.url() === url("/console/login") && r.request().method() === "POST"), page.click("button[type=submit]")]);
    expect(refused.status()).toBe(401);
    expect(await page.textContent(".notice-error")).toBe("The email or password is wrong.");
    expect(await page.inputValue("input[name=email]")).toBe(OPERATOR.email);
    await page.fill("input[name=password]", OPERATOR.password);
    await Promise.all([page.waitForURL(url("/console/subscriptions")), page.click("button[type=submit]")]);
    expect(await page.textContent("h1")).toBe("Subscriptions");
    // Chromium logs the refused sign-in's 401 as a failed load; nothing else may show up.
    expect(problems).toEqual(["Failed to load resource: the server responded with a status of 401 (Unauthorized)"]);
    problems.length = 0;
  }, SLOW);
});

describe("deliveries page", () => {
  test("shows exactly the latest 50 of 60 deliveries, newest first, and a new one appears without a reload", async () => {
    const sub = await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, description: "CRM sync", events: ["contact.created", "contact.updated"] });
    subscriptionId = sub.data.id;
    for (let i = 0; i < 60; i++) await server.api("POST", "/public/v1/contacts", { first_name: `Person ${i}`, email: `person${i}@example.com` });
    const latest = await server.api("GET", "/public/v1/webhook-deliveries?per_page=50");
    expect(latest.meta.total).toBe(60);
    await page.goto(url("/console/"));
    expect(await rows().count()).toBe(50);
    expect(await rows().evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-delivery-id")))).toEqual(latest.data.map((d: any) => d.id));
    expect(await page.textContent("#deliveries-count")).toBe("Showing the latest 50 of 60, newest first.");
    expect(await rows().first().textContent()).toContain("CRM sync");
    await page.waitForSelector(".live-live");
    await page.evaluate(() => ((window as any).__sameDocument = true));

    await server.api("POST", "/public/v1/contacts", { first_name: "Newest", email: "newest@example.com" });
    const [newest] = (await server.api("GET", "/public/v1/webhook-deliveries?per_page=1")).data;
    await page.waitForSelector(`tr[data-delivery-id="${newest.id}"]`, { timeout: 15_000 });
    expect(await rows().first().getAttribute("data-delivery-id")).toBe(newest.id);
    expect(await rows().count()).toBe(50);
    expect(await page.textContent("#deliveries-count")).toBe("Showing the latest 50 of 61, newest first.");
    expect(await page.evaluate(() => (window as any).__sameDocument)).toBe(true);
    await waitFor(() => receiver.received.length >= 61, "all deliveries received");
    await page.waitForFunction(() => document.querySelectorAll("#deliveries .badge-succeeded").length === 50, undefined, { timeout: 15_000 });
    await shoot(page, "deliveries");
    expect(problems).toEqual([]);
  }, SLOW);

  test("filters by status, event and subscription", async () => {
    await page.selectOption("select[name=event]", "contact.updated");
    await Promise.all([page.waitForURL(/event=contact.updated/), page.click(".filters button[type=submit]")]);
    expect(await page.textContent("#deliveries-count")).toBe("No deliveries match.");
    await page.goto(url(`/console/?status=succeeded&subscription_id=${subscriptionId}`));
    expect(await page.inputValue("select[name=status]")).toBe("succeeded");
    expect(await page.inputValue("select[name=subscription_id]")).toBe(subscriptionId);
    expect(await rows().count()).toBe(50);
    await page.goto(url("/console/?status=failed"));
    expect(await page.textContent("#deliveries-count")).toBe("No deliveries match.");
  }, SLOW);

  test("a delivery's page shows the payload, request headers with the signature shortened, each attempt, and Retry now", async () => {
    await page.goto(url("/console/"));
    const id = await rows().first().getAttribute("data-delivery-id");
    await Promise.all([page.waitForURL(url(`/console/deliveries/${id}`)), rows().first().locator("a").first().click()]);
    expect(await page.textContent("pre.code")).toContain('"email": "newest@example.com"');
    const signature = await page.locator("table.kv tr", { hasText: "webhook-signature" }).locator("td").textContent();
    expect(signature).toMatch(/^v1,[A-Za-z0-9+/]{13}…$/);
    expect(await page.locator("article.attempt").count()).toBe(1);
    await Promise.all([page.waitForURL(url(`/console/deliveries/${id}?retried=1`)), page.click("text=Retry now")]);
    expect(await page.locator("article.attempt").count()).toBe(2);
    expect(await page.locator("article.attempt").first().textContent()).toContain("manual");
    await shoot(page, "delivery");
    expect(problems).toEqual([]);
  }, SLOW);
});

describe("subscriptions, API tokens and users", () => {
  test("subscriptions list counts per subscription; a new one shows its secret once; deletion names the URL", async () => {
    await page.goto(url("/console/subscriptions"));
    const row = page.locator(`tr[data-subscription-id="${subscriptionId}"]`);
    expect(await row.locator(".counts").textContent()).toBe("61 succeeded0 failed");
    await page.fill("input[name=target_url]", `${receiver.url}/second`);
    await page.fill("input[name=description]", "Second receiver");
    await page.uncheck("input[value='contact.deleted']");
    await page.click("button:has-text('Create subscription')");
    await page.waitForSelector("#new-secret");
    const secret = await page.inputValue("#new-secret");
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    await page.waitForSelector("[data-copy-for=new-secret] button");
    await shoot(page, "subscription-created");
    await page.goto(url("/console/subscriptions"));
    expect(await page.content()).not.toContain(secret);
    expect(await page.locator("#subscriptions tbody tr").count()).toBe(2);
    await shoot(page, "subscriptions");

    const second = page.locator("#subscriptions tbody tr", { hasText: "Second receiver" });
    await second.locator("text=Delete").click();
    expect(await page.textContent("main")).toContain(`Delete the subscription to ${receiver.url}/second`);
    await shoot(page, "subscription-delete");
    await Promise.all([page.waitForURL(url("/console/subscriptions?deleted=1")), page.click("button.danger")]);
    expect(await page.locator("#subscriptions tbody tr").count()).toBe(1);
    expect(problems).toEqual([]);
  }, SLOW);

  test("API tokens: created and shown once, listed without the token, revoked after confirmation", async () => {
    await page.goto(url("/console/tokens"));
    await page.fill("input[name=name]", "nightly-import");
    await page.click("button:has-text('Create token')");
    await page.waitForSelector("#new-token");
    const token = await page.inputValue("#new-token");
    expect(token).toMatch(/^crm_[A-Za-z0-9]{40}$/);
    await shoot(page, "token-created");
    const api = await fetch(url("/public/v1/contacts?per_page=1"), { headers: { authorization: `Bearer ${token}` } });
    expect(api.status).toBe(200);
    await page.goto(url("/console/tokens"));
    expect(await page.content()).not.toContain(token);
    await shoot(page, "tokens");
    await page.locator("#tokens tr", { hasText: "nightly-import" }).locator("text=Revoke").click();
    await Promise.all([page.waitForURL(url("/console/tokens?revoked=1")), page.click("button.danger")]);
    expect(await page.locator("#tokens tr", { hasText: "nightly-import" }).locator(".badge").textContent()).toBe("Revoked");
    expect((await fetch(url("/public/v1/contacts"), { headers: { authorization: `Bearer ${token}` } })).status).toBe(401);
  }, SLOW);

  test("users: added in the console and listed for assignment", async () => {
    await page.goto(url("/console/users"));
    await page.fill("input[name=name]", "Grace Hopper");
    await page.fill("input[name=email]", "grace@example.com");
    await Promise.all([page.waitForURL(url("/console/users?added=1")), page.click("button:has-text('Add user')")]);
    expect(await page.textContent("#users tbody")).toContain("grace@example.com");
    const users = await server.api("GET", "/public/v1/users");
    expect(users.data.map((u: any) => u.email)).toEqual(["grace@example.com"]);
    await shoot(page, "users");
    expect(problems).toEqual([]);
  }, SLOW);

  test("the number fields (a subscription's requests per second, a secret rotation's grace hours) look as the text fields do", async () => {
    const look = (selector: string) =>
      page.locator(selector).evaluate((input) => {
        const style = getComputedStyle(input);
        return ["display", "width", "padding", "border", "border-radius", "background-color", "font-family", "font-size", "font-weight", "color"].map((name) => `${name}: ${style.getPropertyValue(name)}`);
      });
    await page.goto(url("/console/subscriptions"));
    const [receiverUrl, rate] = [await look("input[name=target_url]"), await look("input[name=max_rate]")];
    await page.goto(url(`/console/subscriptions/${subscriptionId}/secret-rotation`));
    expect({ rate, grace: await look("input[name=grace_hours]") }).toEqual({ rate: receiverUrl, grace: receiverUrl });
    expect(problems).toEqual([]);
  }, SLOW);

  test("every page fits a 390 px wide phone screen without sideways scrolling", async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    const id = (await server.api("GET", "/public/v1/webhook-deliveries?per_page=1")).data[0].id;
    for (const [name, path] of [
      ["deliveries", "/console/"],
      ["delivery", `/console/deliveries/${id}`],
      ["subscriptions", "/console/subscriptions"],
      ["rotation-pick", "/console/rotations/new"],
      ["tokens", "/console/tokens"],
      ["users", "/console/users"],
    ]) {
      await page.goto(url(path!));
      expect([name, await page.evaluate(() => document.documentElement.scrollWidth)]).toEqual([name, 390]);
      await shoot(page, `mobile-${name}`);
    }
    await page.setViewportSize({ width: 1280, height: 900 });
    expect(problems).toEqual([]);
  }, SLOW);

  test("at 390 px a delivery row's contact link stays on its event's line, one line high, and keeps the contact's id in its title", async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(url("/console/"));
    const cells = await page.locator("#deliveries td[data-label=Event]").evaluateAll((tds) =>
      tds.slice(0, 3).map((td) => {
        const [event, contact] = [...td.querySelectorAll("a")];
        const [around, box] = [event!.getBoundingClientRect(), contact!.getBoundingClientRect()];
        return {
          onEventsLine: box.top < around.bottom && box.bottom > around.top,
          lines: Math.round(box.height / parseFloat(getComputedStyle(contact!).lineHeight)),
          inCell: box.right <= td.getBoundingClientRect().right,
          title: /^Contact con_[0-9A-Z]{26}$/.test(contact!.title),
        };
      }),
    );
    await page.setViewportSize({ width: 1280, height: 900 });
    expect(cells).toEqual([0, 1, 2].map(() => ({ onEventsLine: true, lines: 1, inCell: true, title: true })));
    expect(problems).toEqual([]);
  }, SLOW);
});
