import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Page } from "playwright-core";
import { startReceiver, waitFor, type Receiver } from "../webhooks/support.ts";
import { colourLayers, contrastRatio, cspViolations, launchBrowser, seedDeliveries, signedInBrowser, startConsoleServer, type ConsoleServer, type SeededDelivery } from "./support.ts";

// The console by keyboard, by screen reader and on a narrow screen: one server whose subscription has
// 51 deliveries (one more than the live table shows), and one browser signed in.
let server: ConsoleServer;
let browser: Awaited<ReturnType<typeof launchBrowser>>;
let page: Page;
let problems: string[];
let receiver: Receiver;
let warehouse: { id: string; target_url: string };

const SLOW = 60_000;
const REFRESH_MS = 3000;
const url = (path: string) => `${server.url}${path}`;

beforeAll(async () => {
  server = await startConsoleServer();
  receiver = startReceiver();
  warehouse = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, description: "Warehouse", events: ["contact.created"] })).data;
  const now = Date.now();
  const statuses: SeededDelivery["status"][] = ["succeeded", "failed", "pending"];
  await seedDeliveries(server.runtime.db, warehouse, Array.from({ length: 51 }, (_, i) => ({ at: now - 60_000 - i * 1000, status: statuses[i % 3]!, response_status: i % 3 === 1 ? 500 : undefined })));
  ({ browser, page, problems } = await signedInBrowser(server));
}, SLOW);

afterAll(async () => {
  await browser.close();
  await receiver.stop();
  await server.close();
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
