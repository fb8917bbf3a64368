import { describe, expect, test } from "bun:test";
import type { Page } from "playwright-core";
import { inviteOperator } from "../../server/operators/service.ts";
import type { Receiver } from "../webhooks/support.ts";
import { browserFile, colourLayers, contrastRatio, cspViolations, seedDeliveries, shoot, type ConsoleServer } from "./support.ts";

// What WCAG 2.2 AA asks of the console where the s33 audit found it short. One server, one receiver
// answering 200, one browser signed in.
let server: ConsoleServer;
let page: Page;
let problems: string[];
let receiver: Receiver;
let warehouse: { id: string; target_url: string };
/** ledger is taken through both wizards by the focus tests (its URL rotation deletes it); warehouse stays for the other tests */
let ledger: { id: string; target_url: string };

const SLOW = 60_000;
const url = (path: string) => `${server.url}${path}`;

browserFile(async (file) => {
  ({ server, receiver, page, problems } = file);
  warehouse = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, description: "Warehouse", events: ["contact.created"] })).data;
  ledger = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: `${receiver.url}?ledger`, description: "Ledger", events: ["contact.created"] })).data;
  const now = Date.now();
  await seedDeliveries(server.runtime.db, warehouse, Array.from({ length: 6 }, (_, i) => ({ at: now - 60_000 - i * 3_600_000, status: (["succeeded", "failed", "pending"] as const)[i % 3]!, response_status: i % 3 === 1 ? 503 : undefined })));
});

/**
 * focused is what has the focus once the page has moved it (autofocus, which a loaded machine can
 * leave past the load event), as a screen reader is given it: its role and name in Chromium's
 * accessibility tree, the page itself (RootWebArea) when nothing in it has the focus.
 */
async function focused(): Promise<{ role: string; name: string }> {
  await page.waitForFunction(() => document.activeElement !== document.body, null, { timeout: 10_000 }).catch(() => undefined);
  const cdp = await page.context().newCDPSession(page);
  try {
    const { nodes } = (await cdp.send("Accessibility.getFullAXTree")) as { nodes: any[] };
    const node = nodes.findLast((n) => n.properties?.some((p: any) => p.name === "focused" && p.value.value === true));
    return { role: node?.role?.value, name: node?.name?.value ?? "" };
  } finally {
    await cdp.detach();
  }
}

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

/** submit clicks a form's button and waits for the page it answers with. */
const submit = (selector: string) => Promise.all([page.waitForNavigation(), page.click(selector)]);

/** headingLevels lists the levels of the headings in `main`, in order. */
const headingLevels = () => page.locator("main h1, main h2, main h3, main h4, main h5, main h6").evaluateAll((all) => all.map((h) => Number(h.tagName[1])));

/** skipsALevel says whether a heading comes more than one level below the one before it. */
const skipsALevel = (levels: number[]) => levels.some((level, i) => i > 0 && level > levels[i - 1]! + 1);

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

  describe("2.4.3, 4.1.3: what a form did has the focus as the page loads", () => {
    test("a secret shown once: its section, named with what was done (a token, an invitation, a reset link, either wizard's step 2)", async () => {
      const seen: Record<string, { role: string; name: string }> = {};
      await page.goto(url("/console/tokens"));
      await page.fill("input[name=name]", "nightly-import");
      await submit("main form:has(input[name=name]) button[type=submit]");
      seen.token = await focused();
      await page.goto(url("/console/operators"));
      await page.fill("main input[name=email]", "invitee@example.com");
      await submit("main form:has(input[name=email]) button[type=submit]");
      seen.invitation = await focused();
      await page.goto(url("/console/operators"));
      await page.click("#operators tbody tr a:has-text('Reset password')");
      await submit("main form button[type=submit]");
      seen.reset = await focused();
      await page.goto(url(`/console/subscriptions/${ledger.id}/secret-rotation`));
      await submit("main form button[type=submit]");
      seen.newSecret = await focused();
      await page.goto(url(`/console/rotations/new?from=${ledger.id}&kind=url`));
      await page.fill("input[name=target_url]", `${receiver.url}?v=2`);
      await submit("main form button[type=submit]");
      seen.newSubscription = await focused();
      expect(seen).toEqual({
        token: { role: "region", name: "API token “nightly-import” created" },
        invitation: { role: "region", name: "Invitation for invitee@example.com made" },
        reset: { role: "region", name: "Password reset link for oncall@example.com made" },
        newSecret: { role: "region", name: "Step 2 done: the secret is rotated" },
        newSubscription: { role: "region", name: "Step 2 done: the new subscription is created" },
      });
      expect(await cspViolations(page)).toEqual([]);
    }, SLOW);

    test("a wizard's test event: its step, with the live result; a wizard's last step: its summary", async () => {
      const seen: Record<string, { role: string; name: string }> = {};
      // the URL rotation the test before started, at step 3; ledger's secret rotation first, as the URL rotation deletes ledger
      const rotation = (await page.locator("#send-test").evaluate((button) => (button as HTMLButtonElement).form!.getAttribute("action")!)).replace(/\/test$/, "");
      for (const [wizard, path, last] of [
        ["secret", `/console/subscriptions/${ledger.id}/secret-rotation`, "#retire-previous"],
        ["url", rotation, "#delete-old"],
      ] as const) {
        await page.goto(url(path));
        await submit("#send-test");
        seen[`${wizard}Test`] = await focused();
        await page.waitForSelector(`${last}:not([disabled])`, { timeout: 20_000 });
        await page.check("input[name=confirm]");
        await submit(last);
        seen[`${wizard}Summary`] = await focused();
      }
      expect(seen).toEqual({
        secretTest: { role: "region", name: "3 Send a test event" },
        secretSummary: { role: "region", name: "5 Secret rotation finished" },
        urlTest: { role: "region", name: "3 Send a test event" },
        urlSummary: { role: "region", name: "5 Rotation finished" },
      });
      expect(problems).toEqual([]);
    }, SLOW);

    test("a search that finds nothing: the notice saying so, and the page is titled so", async () => {
      await page.goto(url("/console/"));
      await page.fill("#search-q", "dlv_00000000000000000000000000");
      await Promise.all([page.waitForNavigation(), page.press("#search-q", "Enter")]);
      await page.waitForFunction(() => document.activeElement !== document.body, null, { timeout: 10_000 }).catch(() => undefined);
      const notice = await page.evaluate(() => [document.activeElement!.getAttribute("role"), document.activeElement!.textContent]);
      expect({ title: await page.title(), notice }).toEqual({ title: "No match · Search · CRM console", notice: ["alert", "Nothing has the id dlv_00000000000000000000000000: it may have been deleted, or pruned by the retention of delivery history."] });
    }, SLOW);
  });

  test("1.4.1, 1.3.1: the wizards' steps say which are done with a mark and a word, not a colour alone, at 1280 px and at 320 px", async () => {
    const steps = () =>
      page.locator(".stepper").evaluate((list) =>
        [...list.querySelectorAll("li")].map((li) => ({ mark: [...li.querySelectorAll(".step-mark")].map((mark) => mark.getBoundingClientRect().width > 0 && getComputedStyle(mark).borderBottomStyle === "solid"), current: li.getAttribute("aria-current") })),
      );
    const read = async () => ({ snapshot: await page.locator(".stepper").ariaSnapshot(), steps: await steps() });
    await page.goto(url(`/console/rotations/new?from=${warehouse.id}&kind=url`));
    const wide = await read();
    const narrow = await at320(read);
    const shown = { snapshot: '- list "Rotation steps":\n  - listitem: 1 Pick done\n  - listitem: 2 New subscription\n  - listitem: 3 Test to come\n  - listitem: 4 Delete old to come\n  - listitem: 5 Summary to come', steps: [{ mark: [true], current: null }, { mark: [], current: "step" }, { mark: [], current: null }, { mark: [], current: null }, { mark: [], current: null }] };
    expect({ wide, narrow }).toEqual({ wide: shown, narrow: shown });
  }, SLOW);

  test("1.4.11: a wizard's done steps and its steps to come are 3:1 apart, and the words on each 4.5:1, in the light scheme and the dark", async () => {
    await page.goto(url(`/console/rotations/new?from=${warehouse.id}&kind=url`));
    await shoot(page, "rotation-steps");
    const ratios = [];
    for (const colorScheme of ["light", "dark"] as const) {
      await page.emulateMedia({ colorScheme });
      const done = page.locator(".stepper li.done").first();
      const toCome = page.locator(".stepper li:not(.done):not(.current)").first();
      const doneBackground = await done.evaluate((li) => getComputedStyle(li).backgroundColor);
      ratios.push({
        colorScheme,
        apart: contrastRatio([doneBackground, ...(await colourLayers(toCome, "color", "self")).slice(1)]) >= 3,
        words: await Promise.all(
          [done, toCome].flatMap((step) => [step.locator(".step-label"), step.locator(".step-no")]).map(async (words) => contrastRatio(await colourLayers(words, "color", "self")) >= 4.5),
        ),
      });
    }
    await page.emulateMedia({ colorScheme: null });
    expect(ratios).toEqual((["light", "dark"] as const).map((colorScheme) => ({ colorScheme, apart: true, words: [true, true, true, true] })));
  }, SLOW);

  test("2.4.2, 1.3.1: each of a wizard's steps has a title of its own, and its headings skip no level", async () => {
    const billing = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: `${receiver.url}?billing`, description: "Billing", events: ["contact.created"] })).data;
    const seen: { title: string; skips: boolean }[] = [];
    const look = async () => seen.push({ title: await page.title(), skips: skipsALevel(await headingLevels()) });
    const startUrlRotation = async () => {
      await page.goto(url("/console/rotations/new"));
      await look();
      await page.check(`input[name=from][value="${billing.id}"]`);
      await submit("main form button[type=submit]");
      await look();
      await page.fill("input[name=target_url]", `${receiver.url}?v=3`);
      await submit("main form button[type=submit]");
      await look();
    };
    const startSecretRotation = async () => {
      const replacement = (await server.api("GET", "/public/v1/webhook-subscriptions")).data.find((s: { target_url: string }) => s.target_url.endsWith("?v=3"));
      await page.goto(url(`/console/subscriptions/${replacement.id}/secret-rotation`));
      await look();
      await submit("main form button[type=submit]");
      await look();
    };
    for (const [start, finish] of [
      [startUrlRotation, "#delete-old"],
      [startSecretRotation, "#retire-previous"],
    ] as const) {
      await start();
      await submit("#send-test");
      await page.waitForSelector(`${finish}:not([disabled])`, { timeout: 20_000 });
      await look();
      await page.check("input[name=confirm]");
      await submit(finish);
      await look();
    }
    expect(seen).toEqual(
      [
        "Rotate: pick a subscription (step 1 of 5)",
        "Rotate: new subscription (step 2 of 5)",
        "Rotate: test the new subscription (step 3 of 5)",
        "Rotate: delete the old subscription (step 4 of 5)",
        "Rotate: finished (step 5 of 5)",
        "Rotate the secret: new secret (step 2 of 5)",
        "Rotate the secret: test the new secret (step 3 of 5)",
        "Rotate the secret: retire the previous secret (step 4 of 5)",
        "Rotate the secret: finished (step 5 of 5)",
      ].map((title) => ({ title: `${title} · CRM console`, skips: false })),
    );
  }, SLOW);

  test("2.5.8: every action of a subscription's row is a target of 24 by 24 px at least, on a wide screen and at 320 px", async () => {
    const small = () =>
      page.locator(`tr[data-subscription-id="${warehouse.id}"] td.row-actions`).evaluate((cell) =>
        [...cell.querySelectorAll("a, button")].filter((action) => action.getBoundingClientRect().height < 24 || action.getBoundingClientRect().width < 24).map((action) => action.textContent),
      );
    await page.goto(url("/console/subscriptions"));
    expect({ wide: await small(), narrow: await at320(small) }).toEqual({ wide: [], narrow: [] });
  }, SLOW);

  /** copyButtonOfNewToken creates an API token on the tokens page, lets the page use the clipboard, and returns the copy button beside the token shown once. */
  async function copyButtonOfNewToken(name: string) {
    await page.goto(url("/console/tokens"));
    await page.fill("input[name=name]", name);
    await submit("main form:has(input[name=name]) button[type=submit]");
    await page.context().grantPermissions(["clipboard-read", "clipboard-write"]);
    const copy = page.locator(".secret-row button");
    await copy.waitFor();
    return copy;
  }

  test("4.1.3: what the copy button did is said in a status region beside it, there before the click, and the button keeps its name", async () => {
    const copy = await copyButtonOfNewToken("copy-me");
    const status = () => page.locator(".secret-row [role=status]").evaluateAll((all) => all.map((region) => region.textContent));
    const before = { button: await copy.textContent(), status: await status() };
    await copy.click();
    await page.waitForFunction(() => document.querySelector(".secret-row [role=status]")?.textContent !== "", null, { timeout: 10_000 });
    expect({ before, after: { button: await copy.textContent(), status: await status(), copied: await page.evaluate(() => navigator.clipboard.readText()) } }).toEqual({
      before: { button: "Copy", status: [""] },
      after: { button: "Copy", status: ["Copied to the clipboard."], copied: await page.inputValue("#new-token") },
    });
  }, SLOW);

  test("4.1.3: each press of the copy button is said, the second as the first", async () => {
    const copy = await copyButtonOfNewToken("copy-me-twice");
    // What the status region is given to say: text added to it, or its text changed (a screen
    // reader reads a live region on either, and on nothing else).
    await page.locator(".secret-row [role=status]").evaluate((region) => {
      const said: string[] = ((window as any).__said = []);
      new MutationObserver((records) => {
        for (const record of records) {
          if (record.type === "characterData" && record.target.textContent) said.push(record.target.textContent);
          for (const node of record.addedNodes) if (node.textContent) said.push(node.textContent);
        }
      }).observe(region, { childList: true, subtree: true, characterData: true });
    });
    const said = async (count: number) => {
      await page.waitForFunction((count) => (window as any).__said.length >= count, count, { timeout: 10_000 }).catch(() => undefined);
      return page.evaluate(() => (window as any).__said as string[]);
    };
    await copy.click();
    expect(await said(1)).toEqual(["Copied to the clipboard."]);
    await copy.click();
    expect(await said(2)).toEqual(["Copied to the clipboard.", "Copied to the clipboard."]);
    expect(await page.locator(".secret-row [role=status]").textContent()).toBe("Copied to the clipboard.");
  }, SLOW);
});
