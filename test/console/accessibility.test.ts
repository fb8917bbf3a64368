import { beforeAll, describe, expect, test } from "bun:test";
import type { Page } from "playwright-core";
import { createApiToken } from "../../server/auth/service.ts";
import { newId } from "../../server/shared/ids.ts";
import { waitFor, type Receiver } from "../webhooks/support.ts";
import { accessibleNames, browserFile, colourLayers, contrastRatio, cspViolations, seedDeliveries, type BrowserFile, type ConsoleServer, type SeededDelivery } from "./support.ts";

// The console by keyboard, by screen reader and on a narrow screen: one server whose subscription has
// 51 deliveries (one more than the live table shows), and one browser signed in.
let server: ConsoleServer;
let browser: BrowserFile["browser"];
let page: Page;
let problems: string[];
let receiver: Receiver;
let warehouse: { id: string; target_url: string };

const SLOW = 60_000;
const REFRESH_MS = 3000;
const url = (path: string) => `${server.url}${path}`;

browserFile(async (file) => {
  ({ server, receiver, browser, page, problems } = file);
  warehouse = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, description: "Warehouse", events: ["contact.created"] })).data;
  const now = Date.now();
  const statuses: SeededDelivery["status"][] = ["succeeded", "failed", "pending"];
  await seedDeliveries(server.runtime.db, warehouse, Array.from({ length: 51 }, (_, i) => ({ at: now - 60_000 - i * 1000, status: statuses[i % 3]!, response_status: i % 3 === 1 ? 500 : undefined })));
});

/** headings lists a page's headings as [level, text], the response times charts carry left out (they vary). */
function headings(page: Page): Promise<[number, string][]> {
  return page.locator("h1, h2, h3, h4, h5, h6").evaluateAll((all) =>
    all.map((h) => {
      const copy = h.cloneNode(true) as Element;
      for (const latency of copy.querySelectorAll(".latency")) latency.remove();
      return [Number(h.tagName[1]), copy.textContent!.replace(/\s+/g, " ").trim()] as [number, string];
    }),
  );
}

/** skippedLevels lists the headings that come more than one level below the one before them. */
const skippedLevels = (list: [number, string][]) => list.filter(([level], i) => i > 0 && level > list[i - 1]![0] + 1);

describe("the live deliveries table", () => {
  let live: Page;
  const rowLinks = () => live.locator("table#deliveries tbody tr td:first-child a");
  const refreshes = () => live.evaluate(() => (window as any).__refreshes as number);

  /** newDelivery creates a contact through the API and returns the id of the delivery it makes. */
  async function newDelivery(name: string): Promise<string> {
    await server.api("POST", "/public/v1/contacts", { first_name: name, email: `${name.toLowerCase()}@example.com` });
    return (await server.api("GET", "/public/v1/webhook-deliveries?per_page=1")).data[0].id;
  }

  test("the status line says the state only, not every refresh's time; a row pushed out of the latest 50 hands its focus to the count", async () => {
    live = await browser.context.newPage();
    // Time stands still in this page, and each refresh is counted: the test moves the clock by hand.
    await live.addInitScript(() => {
      (window as any).__refreshes = 0;
      const fetchOnce = window.fetch;
      (window as any).fetch = (...args: Parameters<typeof fetch>) => ((window as any).__refreshes++, fetchOnce(...args));
    });
    await live.clock.install();
    await live.clock.pauseAt(Date.now() + 1000);
    await live.goto(url("/console/"));
    await live.clock.runFor(500); // the island's effects run after a frame
    await live.waitForSelector(".live-live");
    expect(await live.getByRole("status").textContent()).toBe("Live");
    await live.locator("[role=status]").evaluate((status) => {
      const changes: string[] = ((window as any).__statusChanges = []);
      new MutationObserver(() => changes.push(status.textContent!)).observe(status, { subtree: true, childList: true, characterData: true });
    });
    // A keyboard user reads the last row; a new delivery pushes it out of the latest 50.
    await rowLinks().last().focus();
    const before = await refreshes();
    const id = await newDelivery("Pusher");
    await live.clock.runFor(REFRESH_MS);
    await live.waitForSelector(`tr[data-delivery-id="${id}"]`);
    expect(await refreshes()).toBe(before + 1);
    expect(await rowLinks().count()).toBe(50);
    expect(await live.evaluate(() => document.activeElement?.id)).toBe("deliveries-count");
    expect(await live.evaluate(() => (window as any).__statusChanges)).toEqual([]);
    expect(await live.getByRole("status").textContent()).toBe("Live");
  }, SLOW);

  test("a Pause updates toggle (aria-pressed) stops the refreshes until pressed again, by keyboard, and then catches up at once", async () => {
    const pause = live.getByRole("button", { name: "Pause updates" });
    expect(await pause.getAttribute("aria-pressed")).toBe("false");
    await pause.focus();
    await live.keyboard.press("Space");
    expect(await pause.getAttribute("aria-pressed")).toBe("true");
    expect(await live.getByRole("status").textContent()).toBe("Paused");
    const before = await refreshes();
    const id = await newDelivery("Waiting");
    await live.clock.runFor(3 * REFRESH_MS);
    expect(await refreshes()).toBe(before);
    expect(await live.locator(`tr[data-delivery-id="${id}"]`).count()).toBe(0);
    await live.keyboard.press("Enter");
    expect(await pause.getAttribute("aria-pressed")).toBe("false");
    expect(await live.getByRole("status").textContent()).toBe("Live");
    // resumed, the table catches up at once, not at the next tick (the page's clock stands still)
    await live.waitForSelector(`tr[data-delivery-id="${id}"]`, { timeout: 5000 });
    expect(await cspViolations(live)).toEqual([]);
    await live.close();
  }, SLOW);
});

describe("focus and contrast", () => {
  test("every focus ring is opaque and at least 3:1 against what surrounds it: checkboxes, links on cards and on the page, the top bar", async () => {
    await page.goto(url("/console/subscriptions"));
    await page.focus("input[name=description]");
    while (!(await page.evaluate(() => (document.activeElement as HTMLInputElement).type === "checkbox"))) await page.keyboard.press("Tab");
    const focused = page.locator(":focus");
    // shown, solid and at least 2 px wide
    const ring = () => focused.evaluate((element) => [element.matches(":focus-visible"), getComputedStyle(element).outlineStyle, parseFloat(getComputedStyle(element).outlineWidth) >= 2]);
    expect(await ring()).toEqual([true, "solid", true]);
    expect(contrastRatio(await colourLayers(focused, "outline", "parent"))).toBeGreaterThanOrEqual(3);
    for (const [where, selector] of [
      ["a link on a white card", `tr[data-subscription-id="${warehouse.id}"] a >> nth=0`],
      ["a link on the page", ".page-head a.button"],
      ["a link in the top bar", ".topbar nav a >> nth=0"],
    ]) {
      await page.focus(selector!);
      await page.keyboard.press("Shift+Tab");
      await page.keyboard.press("Tab");
      expect([where, ...(await ring())]).toEqual([where, true, "solid", true]);
      expect([where, contrastRatio(await colourLayers(focused, "outline", "parent")) >= 3]).toEqual([where, true]);
    }
  }, SLOW);

  test("text fields and selects are outlined at 3:1 or more", async () => {
    await page.goto(url("/console/users"));
    for (const selector of ["input[name=name]", "input[name=email]"]) {
      expect([selector, contrastRatio(await colourLayers(page.locator(selector), "border", "parent")) >= 3]).toEqual([selector, true]);
    }
    await page.goto(url("/console/"));
    expect(contrastRatio(await colourLayers(page.locator("select[name=status]"), "border", "parent"))).toBeGreaterThanOrEqual(3);
  }, SLOW);

  test("the rotation wizard's current step number is at least 4.5:1", async () => {
    await page.goto(url("/console/rotations/new"));
    expect(contrastRatio(await colourLayers(page.locator(".stepper li.current .step-no"), "color", "self"))).toBeGreaterThanOrEqual(4.5);
  }, SLOW);
});

describe("charts beyond colour", () => {
  test("failed and pending bars are patterned, succeeded solid, and the legend is read by screen readers", async () => {
    await page.goto(url("/console/"));
    const fills = await page.locator(`#chart-${warehouse.id}-24h svg`).evaluate((svg) =>
      Object.fromEntries(
        ["succeeded", "failed", "pending"].map((status) => {
          const fill = getComputedStyle(svg.querySelector(`rect[data-status=${status}]`)!).fill;
          const pattern = /^url\("#(.+)"\)$/.exec(fill)?.[1];
          return [status, pattern ? svg.querySelector(`pattern[id="${pattern}"]`)?.getAttribute("data-pattern") : "solid"];
        }),
      ),
    );
    expect(fills).toEqual({ succeeded: "solid", failed: "hatched", pending: "dotted" });
    expect(await page.locator(".chart-legend").ariaSnapshot()).toBe('- list "Legend":\n  - listitem: succeeded (solid)\n  - listitem: failed (hatched)\n  - listitem: pending (dotted)');
    expect(await cspViolations(page)).toEqual([]);
  }, SLOW);

  test("a subscription's page shows each chart's numbers as a table on request", async () => {
    await page.goto(url(`/console/subscriptions/${warehouse.id}`));
    const table = page.locator(`#chart-${warehouse.id}-24h table`);
    expect(await table.isVisible()).toBe(false);
    await page.locator(`#chart-${warehouse.id}-24h`).getByText("Show as table").click();
    expect(await table.isVisible()).toBe(true);
    expect((await table.boundingBox())!.width).toBeGreaterThan(200);
  }, SLOW);
});

describe("structure", () => {
  test("the start page's headings name the deliveries table and each health card's subscription, without skipping a level", async () => {
    await page.goto(url("/console/"));
    expect(await headings(page)).toEqual([
      [1, "Deliveries"],
      [2, "Health at a glance"],
      [3, `Warehouse${receiver.url}`],
      [4, "Last 24 hours"],
      [4, "Last 7 days"],
      [2, "Latest deliveries"],
    ]);
    expect(await page.locator("#deliveries").evaluate((table) => table.closest("section")!.querySelector("h2")!.textContent)).toBe("Latest deliveries");
  }, SLOW);

  test("a delivery's page steps down one heading level at a time", async () => {
    await server.api("POST", "/public/v1/contacts", { first_name: "Reader", email: "reader@example.com" });
    const id = (await server.api("GET", "/public/v1/webhook-deliveries?per_page=1")).data[0].id;
    await waitFor(async () => (await server.api("GET", `/public/v1/webhook-deliveries/${id}`)).data.attempts > 0, "the delivery's attempt");
    await page.goto(url(`/console/deliveries/${id}`));
    const list = await headings(page);
    expect(list.map(([level]) => level)).toEqual([1, 2, 2, 3, 4, 4, 4]);
    expect(skippedLevels(list)).toEqual([]);
  }, SLOW);

  test("a pager without another page is no navigation landmark", async () => {
    const navigations = () => page.getByRole("navigation").evaluateAll((navs) => navs.map((nav) => nav.getAttribute("aria-label")));
    await page.goto(url("/console/?status=failed&event=contact.deleted"));
    expect(await navigations()).toEqual(["Console"]);
    await page.goto(url("/console/contacts"));
    expect(await navigations()).toEqual(["Console"]);
    await page.goto(url("/console/"));
    expect(await navigations()).toEqual(["Console", "Deliveries pages"]);
  }, SLOW);

  test("the rotation's choice of subscription is a named group", async () => {
    await page.goto(url("/console/rotations/new"));
    expect(await page.getByRole("group", { name: "Subscription to replace" }).getByRole("radio").count()).toBe(1);
    expect(skippedLevels(await headings(page))).toEqual([]);
    expect(problems).toEqual([]);
  }, SLOW);
});

describe("narrow screens", () => {
  test("at 320 px a subscription card's actions wrap inside it: none lies past the card's edge", async () => {
    await page.setViewportSize({ width: 320, height: 700 });
    await page.goto(url("/console/subscriptions"));
    const overflow = await page.locator(`tr[data-subscription-id="${warehouse.id}"] td.row-actions`).evaluate((cell) => {
      const edge = cell.getBoundingClientRect().right;
      return [...cell.querySelectorAll("a, button")].filter((action) => action.getBoundingClientRect().right > edge + 0.5).map((action) => action.textContent);
    });
    expect(overflow).toEqual([]);
    const wrap = await page.locator("#subscriptions").evaluate((table) => [table.parentElement!.scrollWidth, table.parentElement!.clientWidth]);
    expect(wrap[0]).toBe(wrap[1]!);
    await page.setViewportSize({ width: 1280, height: 900 });
    expect(problems).toEqual([]);
  }, SLOW);
});

describe("links that tell rows apart", () => {
  // Two deliveries made at the same instant, failing for different reasons: their times read alike.
  let shownAt: string;
  let pair: { id: string; event_id: string; contact_id: string; reason: string }[];

  beforeAll(async () => {
    const at = Date.now();
    shownAt = new Date(at).toISOString().replace("T", " ").slice(0, 19);
    const seeded: SeededDelivery[] = [
      { at, status: "failed", response_status: 502, contact_id: newId("con") },
      { at, status: "failed", error: "connection refused", contact_id: newId("con") },
    ];
    const ids = await seedDeliveries(server.runtime.db, warehouse, seeded);
    pair = await Promise.all(
      ids.map(async (id, i) => ({ id, event_id: (await server.api("GET", `/public/v1/webhook-deliveries/${id}`)).data.event_id, contact_id: seeded[i]!.contact_id!, reason: i === 0 ? "HTTP 502" : "connection refused" })),
    );
  });

  test("a delivery row's links are named with its delivery, its event and its contact, in words hidden from sight; no two links of the table share a name", async () => {
    await page.goto(url("/console/"));
    const shown = await page.locator("#deliveries tbody tr").evaluateAll((rows) => rows.slice(0, 2).map((row) => row.getAttribute("data-delivery-id")));
    const expected = shown.flatMap((id) => {
      const d = pair.find((p) => p.id === id)!;
      return [`${shownAt} delivery ${d.id}`, `contact.updated event ${d.event_id}`, `contact ${d.contact_id}`];
    });
    const named = await accessibleNames(page, "#deliveries tbody tr a");
    expect({ firstRows: named.slice(0, 6), repeated: named.filter((name, i) => named.indexOf(name) !== i) }).toEqual({ firstRows: expected, repeated: [] });
    // The words added to the names take no room on the page: a 1 px box each, clipped.
    const boxes = await page.locator("#deliveries tbody tr").first().evaluate((row) => [...row.querySelectorAll("a .visually-hidden")].map((span) => [span.getBoundingClientRect().width, span.getBoundingClientRect().height]));
    expect(boxes).toEqual([[1, 1], [1, 1], [1, 1]]);
  }, SLOW);

  test("a contact without a name, or named by spaces alone, is listed by its email, or else its id, after \"(no name)\", and so titled on its page; a contact's events are named with their ids", async () => {
    const quiet = (await server.api("POST", "/public/v1/contacts", { email: "quiet@example.com" })).data;
    const phoned = (await server.api("POST", "/public/v1/contacts", { phone: "+44 20 7946 0000" })).data;
    const blank = (await server.api("POST", "/public/v1/contacts", { first_name: "   ", email: "blank@example.com" })).data;
    for (const phone of ["+44 20 7946 0001", "+44 20 7946 0002"]) await server.api("PATCH", `/public/v1/contacts/${quiet.id}`, { phone });
    await page.goto(url("/console/contacts"));
    const listed = await accessibleNames(page, "#contacts tbody tr:nth-child(-n+3) a");
    await page.goto(url(`/console/contacts/${blank.id}`));
    const blankHeading = (await page.locator("h1").innerText()).trim();
    await page.goto(url(`/console/contacts/${quiet.id}`));
    const events = await page.locator("article.contact-event").evaluateAll((articles) => articles.map((a) => a.getAttribute("data-event-id")));
    expect({ listed, blankHeading, events: await accessibleNames(page, "article.contact-event header a") }).toEqual({
      listed: ["(no name) contact blank@example.com", `(no name) contact ${phoned.id}`, "(no name) contact quiet@example.com"],
      blankHeading: "blank@example.com",
      events: [`contact.updated event ${events[0]}`, `contact.updated event ${events[1]}`, `contact.created event ${events[2]}`],
    });
  }, SLOW);

  test("contacts of the same name are named apart: by their email, or their id when they have none or another row shows the same name and email", async () => {
    const create = async (email?: string) => (await server.api("POST", "/public/v1/contacts", { first_name: "Ada", last_name: "Lovelace", ...(email ? { email } : {}) })).data;
    const [first, twin, , unreachable] = [await create("ada@example.com"), await create("ada@example.com"), await create("countess@example.com"), await create()];
    await page.goto(url("/console/contacts?q=Lovelace"));
    expect(await accessibleNames(page, "#contacts tbody tr a")).toEqual([
      `Ada Lovelace contact ${unreachable.id}`,
      "Ada Lovelace contact countess@example.com",
      `Ada Lovelace contact ${twin.id}`,
      `Ada Lovelace contact ${first.id}`,
    ]);
  }, SLOW);

  test("tokens of the same name are named apart in their Revoke links by the start they are shown by; a token whose name is its own keeps its name alone", async () => {
    const [first, twin] = [(await createApiToken(server.runtime.db, "t1")).info, (await createApiToken(server.runtime.db, "t1")).info];
    await page.goto(url("/console/tokens"));
    expect((await accessibleNames(page, "#tokens tbody tr a")).sort()).toEqual(["Revoke token console-test", `Revoke token t1 starting ${first.prefix}`, `Revoke token t1 starting ${twin.prefix}`].sort());
  }, SLOW);

  test("subscriptions with the same description are named apart in their row actions by their URL, or their id when the URL repeats too; one whose description is its own keeps it alone", async () => {
    const create = async (target_url: string) => (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url, description: "Ledger", events: ["contact.created"] })).data;
    // Another integration (or a compromised one) names its subscriptions alike.
    const [ledger, copy, twin] = [await create("https://ledger.example/hook"), await create("https://evil.example/hook"), await create("https://evil.example/hook")];
    await page.goto(url("/console/subscriptions"));
    const pauses = await accessibleNames(page, "#subscriptions .row-actions button");
    const deletes = await accessibleNames(page, "#subscriptions .row-actions a.danger-link");
    for (const s of [ledger, copy, twin]) await server.api("DELETE", `/public/v1/webhook-subscriptions/${s.id}`);
    expect({ pauses: pauses.toSorted(), deletes: deletes.toSorted() }).toEqual({
      pauses: ["Pause subscription Ledger to https://ledger.example/hook", `Pause subscription Ledger to https://evil.example/hook ${copy.id}`, `Pause subscription Ledger to https://evil.example/hook ${twin.id}`, "Pause subscription Warehouse"].toSorted(),
      deletes: ["Delete subscription Ledger to https://ledger.example/hook", `Delete subscription Ledger to https://evil.example/hook ${copy.id}`, `Delete subscription Ledger to https://evil.example/hook ${twin.id}`, "Delete subscription Warehouse"].toSorted(),
    });
  }, SLOW);

  test("a subscription's failures name each latest delivery with its reason", async () => {
    await page.goto(url(`/console/subscriptions/${warehouse.id}`));
    const named = await accessibleNames(page, "#failures tbody tr a");
    expect({ sameInstant: named.filter((name) => name.startsWith(shownAt)).toSorted(), repeated: named.filter((name, i) => named.indexOf(name) !== i) }).toEqual({
      sameInstant: pair.map((d) => `${shownAt} latest delivery failing with ${d.reason}`).toSorted(),
      repeated: [],
    });
    expect(problems).toEqual([]);
  }, SLOW);
});

describe("after an action, by keyboard", () => {
  /** focused says what has the keyboard focus: its tag, id, role, tabindex and text. */
  const focused = () =>
    page.evaluate(() => {
      const element = document.activeElement!;
      return { tag: element.tagName, id: element.id, role: element.getAttribute("role"), tabindex: element.getAttribute("tabindex"), text: element.textContent!.trim() };
    });

  test("the first Tab stop skips to the main content; a row action's notice takes the focus as the page loads, announced, and the next Tab goes on from it", async () => {
    await page.goto(url("/console/subscriptions"));
    await page.keyboard.press("Tab");
    expect(await page.evaluate(() => [document.activeElement!.textContent, document.activeElement!.getAttribute("href"), document.activeElement!.matches(":focus-visible")])).toEqual(["Skip to main content", "#main", true]);
    await page.keyboard.press("Enter");
    expect((await focused()).id).toBe("main");
    const row = `tr[data-subscription-id="${warehouse.id}"]`;
    for (const [action, flag, text] of [
      ["Pause", "paused", "Subscription paused. Its deliveries wait until it is resumed."],
      ["Resume", "resumed", "Subscription resumed. The deliveries that waited are sent now."],
    ] as const) {
      await page.focus(`${row} button:has-text('${action}')`);
      await Promise.all([page.waitForURL(url(`/console/subscriptions?${flag}=1`)), page.keyboard.press("Enter")]);
      // The console's script moves the focus once it runs, which a loaded machine can leave past the load event.
      await page.waitForFunction(() => document.activeElement !== document.body, null, { timeout: 10_000 }).catch(() => undefined);
      expect(await focused()).toEqual({ tag: "DIV", id: "", role: "status", tabindex: "-1", text });
      await page.keyboard.press("Tab");
      // On from the notice, not from the top bar: the first row's Health link (the notice holds no link).
      expect(await page.evaluate(() => !!document.activeElement!.closest("#subscriptions, main"))).toBe(true);
    }
    expect(problems).toEqual([]);
  }, SLOW);
});
