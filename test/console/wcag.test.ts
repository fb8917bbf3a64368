import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Page } from "playwright-core";
import { inviteOperator } from "../../server/operators/service.ts";
import { startReceiver, type Receiver } from "../webhooks/support.ts";
import { seedDeliveries, signedInBrowser, startConsoleServer, type ConsoleServer } from "./support.ts";

// What WCAG 2.2 AA asks of the console where the s33 audit found it short. One server, one receiver
// answering 200, one browser signed in.
let server: ConsoleServer;
let browser: Awaited<ReturnType<typeof signedInBrowser>>["browser"];
let page: Page;
let problems: string[];
let receiver: Receiver;
let warehouse: { id: string; target_url: string };

const SLOW = 60_000;
const url = (path: string) => `${server.url}${path}`;

beforeAll(async () => {
  server = await startConsoleServer();
  receiver = startReceiver();
  warehouse = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, description: "Warehouse", events: ["contact.created"] })).data;
  const now = Date.now();
  await seedDeliveries(server.runtime.db, warehouse, Array.from({ length: 6 }, (_, i) => ({ at: now - 60_000 - i * 3_600_000, status: (["succeeded", "failed", "pending"] as const)[i % 3]!, response_status: i % 3 === 1 ? 503 : undefined })));
  ({ browser, page, problems } = await signedInBrowser(server));
}, SLOW);

afterAll(async () => {
  await browser.close();
  await receiver.stop();
  await server.close();
});

/** at320 reloads the page 320 px wide (a 1280 px screen at 400 %), reads it with `read`, and goes back to 1280 px. */
async function at320<T>(read: () => Promise<T>): Promise<T> {
  await page.setViewportSize({ width: 320, height: 700 });
  try {
    await page.reload();
    return await read();
  } finally {
    await page.setViewportSize({ width: 1280, height: 900 });
  }
}

describe("WCAG 2.2 AA", () => {
  test("1.3.1, 4.1.2: an invitation's page shows no unnamed field: the username kept for password managers is not drawn, and Tab goes from the password to the button", async () => {
    const code = await inviteOperator(server.runtime.db, "newbie@example.com", null);
    await page.goto(url(`/console/welcome?code=${code}`));
    const username = await page.locator("input[name=email]").evaluate((input) => ({ display: getComputedStyle(input).display, value: (input as HTMLInputElement).value }));
    await page.focus("#main");
    const stops: string[] = [];
    for (let i = 0; i < 3; i++) {
      await page.keyboard.press("Tab");
      stops.push(await page.evaluate(() => (document.activeElement as HTMLInputElement).name || document.activeElement!.textContent!.trim()));
    }
    expect({ username, stops }).toEqual({ username: { display: "none", value: "newbie@example.com" }, stops: ["password", "password_again", "Create my account and sign in"] });
  }, SLOW);

  test("1.4.10: at 320 px a chart's table of numbers scrolls sideways in a named region of its own, reached by Tab, while the page does not", async () => {
    await page.goto(url(`/console/subscriptions/${warehouse.id}`));
    const chart = page.locator(`#chart-${warehouse.id}-24h`);
    const seen = await at320(async () => {
      await chart.getByText("Show as table").click();
      return chart.locator("table").evaluate((table) => {
        const region = table.parentElement!;
        region.scrollLeft = region.scrollWidth;
        const edge = region.getBoundingClientRect().right;
        return {
          region: { role: region.getAttribute("role"), label: region.getAttribute("aria-label"), tabindex: region.getAttribute("tabindex"), overflowX: getComputedStyle(region).overflowX },
          columnsPastTheEdge: [...table.querySelectorAll("thead th")].filter((th) => th.getBoundingClientRect().right > edge + 0.5).map((th) => th.textContent),
          pageWidth: document.documentElement.scrollWidth,
        };
      });
    });
    expect(seen).toEqual({
      region: { role: "region", label: "Deliveries per hour, last 24 hours: the numbers", tabindex: "0", overflowX: "auto" },
      columnsPastTheEdge: [],
      pageWidth: 320,
    });
  }, SLOW);

  test("2.5.8: every action of a subscription's row is a target of 24 by 24 px at least, on a wide screen and at 320 px", async () => {
    const small = () =>
      page.locator(`tr[data-subscription-id="${warehouse.id}"] td.row-actions`).evaluate((cell) =>
        [...cell.querySelectorAll("a, button")].filter((action) => action.getBoundingClientRect().height < 24 || action.getBoundingClientRect().width < 24).map((action) => action.textContent),
      );
    await page.goto(url("/console/subscriptions"));
    expect({ wide: await small(), narrow: await at320(small) }).toEqual({ wide: [], narrow: [] });
  }, SLOW);
});
