import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Page } from "playwright-core";
import { createApiToken } from "../../server/auth/service.ts";
import { startReceiver, waitFor, type Receiver } from "../webhooks/support.ts";
import { cspViolations, signedInBrowser, startConsoleServer, type ConsoleServer } from "./support.ts";

// What an API client or a webhook receiver chooses is shown to operators: in real Chromium it must
// stay text, and must not change how the console's own words read.
let server: ConsoleServer;
let b: Awaited<ReturnType<typeof signedInBrowser>>;
let receiver: Receiver;
/** requests a page made to the "attacker's" server: an injected image or script would call it */
const calls: string[] = [];
let attacker: ReturnType<typeof Bun.serve>;

beforeAll(async () => {
  attacker = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (request) => (calls.push(request.url), new Response("")) });
  server = await startConsoleServer();
  receiver = startReceiver();
  b = await signedInBrowser(server);
}, 60_000);

afterAll(async () => {
  await b.browser.close();
  await receiver.stop();
  attacker.stop(true);
  await server.close();
});

/** RLO is U+202E RIGHT-TO-LEFT OVERRIDE: text after it shows reversed until the end of its paragraph or isolate. */
const RLO = "\u202E";
/** PDF is U+202C POP DIRECTIONAL FORMATTING: the console closes an override the client left open at the end of the client's text. */
const PDF = "\u202C";
/** PDI is U+2069 POP DIRECTIONAL ISOLATE: in client text it would close the console's own isolate around that text early. */
const PDI = "\u2069";

/** leftToRight tells, for each word, whether Chromium draws its first letter left of its last (as English reads) in the first element matching `selector`. */
function leftToRight(page: Page, selector: string, words: string[]): Promise<Record<string, boolean>> {
  return page.$eval(
    selector,
    (element, words) => {
      const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
      const found: Record<string, boolean> = {};
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const word of words) {
          const at = node.textContent!.indexOf(word);
          if (at < 0 || word in found) continue;
          const x = (offset: number) => {
            const range = document.createRange();
            range.setStart(node!, offset);
            range.setEnd(node!, offset + 1);
            return range.getBoundingClientRect().left;
          };
          found[word] = x(at) < x(at + word.length - 1);
        }
      }
      return found;
    },
    words,
  );
}

test("a right-to-left override in a subscription's URL or description reorders only itself, never the console's sentence around it", async () => {
  const { page } = b;
  // Typed backwards after the override, these show as "https://hooks.partner.example/crm" and "Partner sync".
  const sub = await server.api("POST", "/public/v1/webhook-subscriptions", {
    target_url: `https://evil.example/${RLO}mrc/elpmaxe.rentrap.skooh//:sptth`,
    description: `${RLO}cnys rentraP`,
    events: ["contact.created"],
  });
  await page.goto(`${server.url}/console/subscriptions/${sub.data.id}/delete`);
  expect(await page.textContent("main p")).toBe(
    `Delete the subscription to https://evil.example/${RLO}mrc/elpmaxe.rentrap.skooh//:sptth${PDF} (${RLO}cnys rentraP${PDF})? Nothing more is sent to it; its pending deliveries end as failed. Its delivery history stays.`,
  );
  // Without isolation the override ran on to the end of the paragraph: "...deliveries end as failed" drawn backwards.
  const words = ["Delete", "subscription", "Nothing", "pending", "deliveries", "failed", "history", "stays"];
  expect(await leftToRight(page, "main p", words)).toEqual(Object.fromEntries(words.map((w) => [w, true])));
  // An option's label cannot hold markup: the description is wrapped in FSI ... PDI, so its override stops before the URL.
  await page.goto(`${server.url}/console/`);
  expect(await page.$eval(`select[name=subscription_id] option[value="${sub.data.id}"]`, (option) => option.textContent)).toBe(
    `\u2068${RLO}cnys rentraP${PDF}\u2069 — https://evil.example/${RLO}mrc/elpmaxe.rentrap.skooh//:sptth${PDF}`,
  );
  await server.api("DELETE", `/public/v1/webhook-subscriptions/${sub.data.id}`);
}, 60_000);

test("a right-to-left override in what a notice repeats (a new subscription's URL, a searched email) reorders only itself, never the notice's sentence", async () => {
  const { page } = b;
  // Typed backwards after the override, it shows as "https://hooks.partner.example/crm".
  const url = `https://evil.example/${RLO}mrc/elpmaxe.rentrap.skooh//:sptth`;
  await page.goto(`${server.url}/console/subscriptions`);
  await page.fill("input[name=target_url]", url);
  await Promise.all([page.waitForURL(`${server.url}/console/subscriptions`), page.click("form[action='/console/subscriptions'] button[type=submit]")]);
  // A notice is text, so the URL is wrapped in FSI ... PDI: without them the override ran on, and "created." was drawn backwards.
  expect(await page.textContent(".notice")).toBe(`Subscription to \u2068${url}${PDF}\u2069 created.`);
  expect(await leftToRight(page, ".notice", ["Subscription", "created"])).toEqual({ Subscription: true, created: true });
  const email = `${RLO}moc.elpmaxe@ydobon`;
  await page.goto(`${server.url}/console/search?q=${encodeURIComponent(email)}`);
  expect(await page.textContent(".notice")).toBe(`No contact has the email \u2068${email}${PDF}\u2069.`);
  expect(await leftToRight(page, ".notice", ["contact", "email"])).toEqual({ contact: true, email: true });
  const sub = (await server.api("GET", "/public/v1/webhook-subscriptions")).data.find((s: { target_url: string }) => s.target_url === url);
  await server.api("DELETE", `/public/v1/webhook-subscriptions/${sub.id}`);
  b.problems.splice(0, b.problems.length, ...b.problems.filter((p) => !p.includes("404 (Not Found)")));
}, 60_000);

test("markup and script in contacts, accounts, users, subscriptions, token names and a receiver's answer show as text on every page", async () => {
  const { page } = b;
  const hostile = (where: string) =>
    `"'><img src=http://127.0.0.1:${attacker.port}/${where} onerror="window.__pwned='${where}'"><script>window.__pwned='${where}'</script></script><!--<svg onload="window.__pwned='${where}'">`;
  receiver.respond(
    () =>
      new Response(`${hostile("body")}{"a":"</script><script>window.__pwned='json'</script>"}`, {
        status: 500,
        headers: { "content-type": `text/html; x="</script><script>window.__pwned='ct'</script>"`, server: hostile("server"), location: "javascript:window.__pwned='location'" },
      }),
  );
  const user = await server.api("POST", "/public/v1/users", { name: hostile("user"), email: "mallory@example.com" });
  const account = await server.api("POST", "/public/v1/accounts", { name: hostile("account"), domain: "evil.example", note: hostile("account-extra") });
  const sub = await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: `${receiver.url}?q=</script><script>x</script>`, description: hostile("description"), events: ["contact.created", "webhook.ping"] });
  const contact = await server.api("POST", "/public/v1/contacts", {
    first_name: hostile("first-name"),
    last_name: hostile("last-name"),
    phone: hostile("phone").slice(0, 50),
    external_id: hostile("external-id"),
    tags: [hostile("tag").slice(0, 100)],
    custom_fields: { "</script>": hostile("custom-field") },
    further: hostile("further"),
    account_ids: [account.data.id],
    assigned_user_ids: [user.data.id],
  });
  const delivery = await waitFor(async () => (await server.api("GET", `/public/v1/webhook-deliveries?subscription_id=${sub.data.id}`)).data.find((d: any) => d.attempts > 0), "an answered attempt");
  await page.goto(`${server.url}/console/tokens`);
  await page.fill("input[name=name]", hostile("token").slice(0, 100));
  await Promise.all([page.waitForURL(`${server.url}/console/tokens`), page.click("form[action='/console/tokens'] button[type=submit]")]);
  // The rotation wizard's island carries the receiver's answer in its JSON data block.
  await page.goto(`${server.url}/console/rotations/new?from=${sub.data.id}`);
  await page.fill("input[name=target_url]", receiver.url);
  await Promise.all([page.waitForURL(`${server.url}/console/rotations`), page.click("form[action='/console/rotations'] button[type=submit]")]);
  const rotation = (await server.runtime.db.get<{ id: string }>("SELECT new_subscription_id AS id FROM subscription_rotations"))!.id;
  await page.goto(`${server.url}/console/rotations/${rotation}`);
  await Promise.all([page.waitForURL(`${server.url}/console/rotations/${rotation}#step-test`), page.click("#send-test")]);
  await page.waitForSelector("#test-result .badge-pending, #test-result .badge-failed");
  await waitFor(async () => (await page.textContent("#test-result"))?.includes("window.__pwned='body'"), "the receiver's answer in the wizard");
  const pages = [
    "/console/",
    `/console/deliveries/${delivery.id}`,
    `/console/events/${delivery.event_id}`,
    "/console/subscriptions",
    `/console/subscriptions/${sub.data.id}`,
    `/console/subscriptions/${sub.data.id}/delete`,
    `/console/subscriptions/${sub.data.id}/edit`,
    `/console/subscriptions/${sub.data.id}/secret-rotation`,
    `/console/rotations/${rotation}`,
    "/console/contacts",
    `/console/contacts/${contact.data.id}`,
    "/console/tokens",
    "/console/users",
    `/console/users/${user.data.id}/delete`,
  ];
  const found: Record<string, unknown> = {};
  for (const path of pages) {
    await page.goto(`${server.url}${path}`);
    found[path] = {
      pwned: await page.evaluate(() => (window as any).__pwned ?? null),
      injected: await page.evaluate(() => document.querySelectorAll("img, svg:not(.chart-drawing svg), script:not([src]):not([type='application/json']), [onerror], [onload]").length),
      csp: await cspViolations(page),
    };
  }
  expect(found).toEqual(Object.fromEntries(pages.map((path) => [path, { pwned: null, injected: 0, csp: [] }])));
  await page.goto(`${server.url}/console/contacts/${contact.data.id}`);
  expect(await page.textContent("#contact-users")).toBe(`${hostile("user")} <mallory@example.com>`);
  expect(calls).toEqual([]);
  expect(b.problems).toEqual([]);
}, 120_000);

/** marks is `n` combining marks (U+0300 onwards): all of them sit on the letter before them, one grapheme that no line can break. */
const marks = (n: number) => Array.from({ length: n }, (_, i) => String.fromCodePoint(0x300 + (i % 0x30))).join("");

/** layoutOf measures a page: how wide it is, the tables that scroll sideways, and the status badges and actions (links and buttons) not wholly in view: outside the viewport, or cut off by a box that clips what overflows it. */
function layoutOf(page: Page) {
  return page.evaluate(() => {
    const cutOff = (el: Element) => {
      const box = el.getBoundingClientRect();
      if (box.left < 0 || box.right > innerWidth + 0.5) return true;
      for (let up = el.parentElement; up && up !== document.body; up = up.parentElement) {
        if (getComputedStyle(up).overflowX === "visible") continue;
        const clip = up.getBoundingClientRect();
        if (box.left < clip.left - 0.5 || box.right > clip.right + 0.5) return true;
      }
      return false;
    };
    return {
      width: document.documentElement.scrollWidth,
      scrollingTables: [...document.querySelectorAll<HTMLElement>(".table-wrap")].filter((wrap) => wrap.scrollWidth > wrap.clientWidth).map((wrap) => wrap.querySelector("table")!.id),
      actionsOutOfView: [...document.querySelectorAll<HTMLElement>("main .badge, main a, main button")]
        .filter((el) => el.getClientRects().length > 0 && !el.closest(".visually-hidden") && cutOff(el))
        .map((el) => el.textContent!.trim().slice(0, 40)),
    };
  });
}

/** drawnOutside lists the subscription labels whose text is drawn past their card or cell: its box cut by every ancestor that clips what overflows it. */
function drawnOutside(page: Page, container: string) {
  return page.$$eval(container, (boxes) =>
    boxes.flatMap((box) =>
      [...box.querySelectorAll(".sub-label > *")].flatMap((label) => {
        const range = document.createRange();
        range.selectNodeContents(label);
        let { left, right, top, bottom } = range.getBoundingClientRect();
        for (let el: Element | null = label; el && el !== document.body; el = el.parentElement) {
          if (getComputedStyle(el).overflowX === "visible" && getComputedStyle(el).overflowY === "visible") continue;
          const clip = el.getBoundingClientRect();
          [left, right, top, bottom] = [Math.max(left, clip.left), Math.min(right, clip.right), Math.max(top, clip.top), Math.min(bottom, clip.bottom)];
        }
        const edge = box.getBoundingClientRect();
        return left < edge.left - 1 || right > edge.right + 1 || top < edge.top - 1 || bottom > edge.bottom + 1 ? [label.textContent!.slice(0, 20)] : [];
      }),
    ),
  );
}

test("client text without a break point (500 letters, a letter under hundreds of combining marks) wraps or is clipped: at 1280 and 390 px every page keeps the viewport's width, and the subscriptions' status and actions stay in view", async () => {
  const { page } = b;
  receiver.respond(() => new Response("X".repeat(3000), { status: 500, headers: { server: `nginx ${"A".repeat(3000)}`, "x-request-id": "B".repeat(2000) } }));
  const ledger = await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "https://ledger.example/hook", description: "Ledger", events: ["contact.created"] });
  const long = await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: `${receiver.url}?${"q".repeat(1900)}`, description: "W".repeat(500), events: ["contact.created"] });
  const tower = await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: `https://marks.example/${"p".repeat(10)}${marks(300)}`, description: `S${marks(499)}`, events: ["contact.created"] });
  const user = await server.api("POST", "/public/v1/users", { name: "X".repeat(200), email: `${"u".repeat(60)}@example.com` });
  const towering = await server.api("POST", "/public/v1/users", { name: `G${marks(199)}`, email: "towering@example.com" });
  const account = await server.api("POST", "/public/v1/accounts", { name: "Y".repeat(200), domain: `${"d".repeat(60)}.example` });
  const contact = await server.api("POST", "/public/v1/contacts", {
    first_name: `A${marks(199)}`,
    last_name: "Z".repeat(200),
    email: `${"e".repeat(60)}@example.com`,
    phone: "P".repeat(50),
    external_id: "E".repeat(255),
    tags: ["T".repeat(100), `V${marks(99)}`],
    custom_fields: { ["K".repeat(100)]: "V".repeat(3000) },
    account_ids: [account.data.id],
    assigned_user_ids: [user.data.id, towering.data.id],
  });
  const delivery = await waitFor(async () => (await server.api("GET", `/public/v1/webhook-deliveries?subscription_id=${long.data.id}`)).data.find((d: any) => d.attempts > 0), "an answered attempt");
  await createApiToken(server.runtime.db, "N".repeat(100));
  const pages = [
    "/console/",
    `/console/?subscription_id=${long.data.id}`,
    `/console/deliveries/${delivery.id}`,
    `/console/events/${delivery.event_id}`,
    "/console/subscriptions",
    ...[long, tower].flatMap(({ data: s }) => [`/console/subscriptions/${s.id}`, `/console/subscriptions/${s.id}/delete`, `/console/subscriptions/${s.id}/edit`, `/console/subscriptions/${s.id}/recover`, `/console/subscriptions/${s.id}/secret-rotation`, `/console/rotations/new?from=${s.id}`]),
    "/console/rotations/new",
    "/console/contacts",
    `/console/contacts/${contact.data.id}`,
    "/console/users",
    `/console/users/${user.data.id}/delete`,
    `/console/users/${towering.data.id}/delete`,
    "/console/tokens",
  ];
  const found: Record<string, unknown> = {};
  const expected: Record<string, unknown> = {};
  for (const width of [1280, 390]) {
    await page.setViewportSize({ width, height: 900 });
    for (const path of pages) {
      await page.goto(`${server.url}${path}`);
      found[`${width} ${path}`] = await layoutOf(page);
      expected[`${width} ${path}`] = { width, scrollingTables: [], actionsOutOfView: [] };
    }
    await page.goto(`${server.url}/console/`);
    found[`${width} health cards`] = await drawnOutside(page, ".health-card");
    await page.goto(`${server.url}/console/subscriptions`);
    found[`${width} subscription cells`] = await drawnOutside(page, "#subscriptions td");
    expected[`${width} health cards`] = expected[`${width} subscription cells`] = [];
  }
  await page.setViewportSize({ width: 1280, height: 900 });
  for (const s of [ledger, long, tower]) await server.api("DELETE", `/public/v1/webhook-subscriptions/${s.data.id}`);
  expect(found).toEqual(expected);
}, 120_000);

test("a receiver URL whose host is a lookalike (a Cyrillic һ) is shown with the ASCII host deliveries go to, wherever the console shows a target URL", async () => {
  const { page } = b;
  const genuine = "https://hooks.partner.example/crm";
  const lookalike = "https://\u04bbooks.partner.example/crm"; // U+04BB CYRILLIC SMALL LETTER SHHA
  const shown = "https://xn--ooks-zoe.partner.example/crm";
  const real = await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: genuine, description: "Partner sync", events: ["contact.created"] });
  const rogue = await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: lookalike, description: "Partner sync", events: ["contact.created"] });
  expect(rogue.data.target_url).toBe(lookalike);
  const contact = await server.api("POST", "/public/v1/contacts", { first_name: "Ada", email: "ada.lookalike@example.com" });
  await page.goto(`${server.url}/console/subscriptions`);
  const rows = Object.fromEntries(await Promise.all([real, rogue].map(async ({ data: s }) => [s.id, await page.textContent(`#subscriptions tr[data-subscription-id="${s.id}"] .url`)])));
  await page.goto(`${server.url}/console/`);
  const card = await page.textContent(`.health-card[data-subscription-id="${rogue.data.id}"] .url`);
  const option = await page.textContent(`select[name=subscription_id] option[value="${rogue.data.id}"]`);
  const deliveries = await page.$$eval(`#deliveries tbody tr:has(a[href="/console/contacts/${contact.data.id}"]) .url`, (urls) => urls.map((url) => url.textContent!).filter((url) => url.includes("partner.example")).sort());
  await page.goto(`${server.url}/console/contacts/${contact.data.id}`);
  const sent = await page.$$eval("#contact-events .url", (urls) => urls.map((url) => url.textContent!).filter((url) => url.includes("partner.example")).sort());
  await page.goto(`${server.url}/console/subscriptions/${rogue.data.id}/delete`);
  const confirm = { text: await page.textContent("main p"), button: await page.textContent("main form button[type=submit]") };
  for (const s of [real, rogue]) await server.api("DELETE", `/public/v1/webhook-subscriptions/${s.data.id}`);
  expect({ rows, card, option, deliveries, sent, confirm }).toEqual({
    rows: { [real.data.id]: genuine, [rogue.data.id]: shown },
    card: shown,
    option: `\u2068Partner sync\u2069 — ${shown}`,
    deliveries: [genuine, shown],
    sent: [genuine, shown],
    confirm: {
      text: `Delete the subscription to ${shown} (Partner sync)? Nothing more is sent to it; its pending deliveries end as failed. Its delivery history stays.`,
      button: `Delete subscription to ${shown}`,
    },
  });
}, 60_000);

test("a right-to-left override in a user's name reorders only the name, not the console's <email> beside it on a contact's page, nor a page title's \" · CRM console\"", async () => {
  const { page } = b;
  const user = await server.api("POST", "/public/v1/users", { name: `${RLO}repoh ecarg`, email: "mallory.rlo@example.com" });
  const contact = await server.api("POST", "/public/v1/contacts", { first_name: `${RLO}ecal`, email: "ada.rlo@example.com", assigned_user_ids: [user.data.id] });
  const sub = await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "https://rlo.example/hook", description: `${RLO}cnys rentraP`, events: ["contact.created"] });
  await page.goto(`${server.url}/console/contacts/${contact.data.id}`);
  const contactTitle = await page.title();
  // Drawn as "<moc.elpmaxe@olr.yrollam> grace hoper" before: the console's own "<...>" and the email ran backwards.
  const tag = { text: await page.textContent("#contact-users .tag"), leftToRight: await leftToRight(page, "#contact-users .tag", ["mallory", "example"]) };
  await page.goto(`${server.url}/console/subscriptions/${sub.data.id}`);
  const healthTitle = await page.title();
  await server.api("DELETE", `/public/v1/webhook-subscriptions/${sub.data.id}`);
  // A title cannot hold <bdi>: FSI ... PDI keep the override off the console's name in the tab and the history.
  expect({ tag, contactTitle, healthTitle }).toEqual({
    tag: { text: `${RLO}repoh ecarg${PDF} <mallory.rlo@example.com>`, leftToRight: { mallory: true, example: true } },
    contactTitle: `\u2068${RLO}ecal${PDF}\u2069 · CRM console`,
    healthTitle: `\u2068${RLO}cnys rentraP${PDF}\u2069 · CRM console`,
  });
}, 60_000);

/** titleDrawn draws the page's title in a plain left-to-right block, as a tab or the history shows it, and tells which words read left to right. */
async function titleDrawn(page: Page, words: string[]): Promise<Record<string, boolean>> {
  await page.evaluate(() => {
    const div = document.createElement("div");
    div.id = "drawn-title";
    div.setAttribute("dir", "ltr");
    div.textContent = document.title;
    document.body.prepend(div);
  });
  return leftToRight(page, "#drawn-title", words);
}

test("client text that closes the console's isolation itself (its own PDI, then an override) reorders only itself: page titles, <bdi>, .url and .sub-description", async () => {
  const { page } = b;
  // Before, the client's PDI closed the console's FSI (or <bdi>, or CSS isolate), the console's own PDI then matched nothing and was ignored, and the override ran on to the paragraph's end.
  const user = await server.api("POST", "/public/v1/users", { name: `Grace${PDI}${RLO}`, email: "grace.pdi@example.com" });
  const contact = await server.api("POST", "/public/v1/contacts", { first_name: `Ada${PDI}${RLO}`, email: "ada.pdi@example.com", assigned_user_ids: [user.data.id] });
  const sub = await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: `https://pdi.example/${PDI}${RLO}hook`, description: `Ledger${PDI}${RLO}`, events: ["contact.created"] });
  await page.goto(`${server.url}/console/contacts/${contact.data.id}`);
  const contactPage = {
    title: await page.title(),
    drawnTitle: await titleDrawn(page, ["CRM", "console"]),
    user: await leftToRight(page, "#contact-users .tag", ["grace", "example"]),
  };
  await page.goto(`${server.url}/console/subscriptions/${sub.data.id}`);
  const healthTitle = { title: await page.title(), drawn: await titleDrawn(page, ["CRM", "console"]) };
  await page.goto(`${server.url}/console/subscriptions/${sub.data.id}/delete`);
  const words = ["Nothing", "pending", "deliveries", "failed", "history", "stays"];
  const deleteSubscription = { text: await page.textContent("main p"), leftToRight: await leftToRight(page, "main p", words) };
  await page.goto(`${server.url}/console/users/${user.data.id}/delete`);
  const deleteUser = await leftToRight(page, "main p", ["grace", "contact", "assigned", "undone"]);
  await server.api("DELETE", `/public/v1/webhook-subscriptions/${sub.data.id}`);
  expect({ contactPage, healthTitle, deleteSubscription, deleteUser }).toEqual({
    contactPage: {
      title: `\u2068Ada${RLO}${PDF}\u2069 · CRM console`,
      drawnTitle: { CRM: true, console: true },
      user: { grace: true, example: true },
    },
    healthTitle: { title: `\u2068Ledger${RLO}${PDF}\u2069 · CRM console`, drawn: { CRM: true, console: true } },
    deleteSubscription: {
      text: `Delete the subscription to https://pdi.example/${RLO}hook${PDF} (Ledger${RLO}${PDF})? Nothing more is sent to it; its pending deliveries end as failed. Its delivery history stays.`,
      leftToRight: Object.fromEntries(words.map((w) => [w, true])),
    },
    deleteUser: { grace: true, contact: true, assigned: true, undone: true },
  });
}, 60_000);
