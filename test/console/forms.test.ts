import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Page } from "playwright-core";
import { createOperator, inviteOperator, removeOperator } from "../../server/operators/service.ts";
import { addOperator, cspViolations, signedInBrowser, signInWithBrowser, startConsoleServer, type ConsoleServer } from "./support.ts";

// Refused forms, row actions and notices as a keyboard or screen-reader user meets them, read from
// Chromium's accessibility tree. Private targets are refused here, as on a real server.
let server: ConsoleServer;
let browser: Awaited<ReturnType<typeof signedInBrowser>>["browser"];
let page: Page;
let problems: string[];

beforeAll(async () => {
  server = await startConsoleServer({ allowPrivateTargets: false });
  ({ browser, page, problems } = await signedInBrowser(server));
});

afterAll(async () => {
  await browser.close();
  await server.close();
});

const SLOW = 60_000;
const url = (path: string) => `${server.url}${path}`;

/** AxNode is a node of Chromium's accessibility tree, as a screen reader gets it. */
interface AxNode {
  role: string;
  name: string;
  description?: string;
  invalid?: string;
  focused?: boolean;
}

/** axTree reads the page's accessibility tree from Chromium (CDP), leaving out ignored nodes. */
async function axTree(): Promise<AxNode[]> {
  const cdp = await page.context().newCDPSession(page);
  const { nodes } = (await cdp.send("Accessibility.getFullAXTree")) as { nodes: any[] };
  await cdp.detach();
  const property = (node: any, name: string) => node.properties?.find((p: any) => p.name === name)?.value.value;
  return nodes
    .filter((node) => !node.ignored)
    .map((node) => ({
      role: node.role?.value,
      name: node.name?.value ?? "",
      ...(node.description?.value ? { description: node.description.value } : {}),
      ...(property(node, "invalid") && property(node, "invalid") !== "false" ? { invalid: property(node, "invalid") } : {}),
      ...(property(node, "focused") ? { focused: true } : {}),
    }));
}

/** refusalOf is what a refused form's page tells: its status, the summary (its text and links) and whether it has the focus, and each field marked invalid with its description. */
async function refusalOf(status: number | undefined) {
  // The browser moves the focus to an autofocus element as it next renders, after the load event.
  await page.evaluate(() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done))));
  const summary = await page.evaluate(() => {
    const box = document.getElementById("refusal");
    return {
      text: box?.querySelector("p")?.textContent ?? (box?.querySelector("ul") ? null : (box?.textContent ?? null)),
      links: [...(box?.querySelectorAll("a") ?? [])].map((a) => [a.textContent, a.getAttribute("href")]),
      focused: box !== null && document.activeElement === box,
    };
  });
  const fields = (await axTree()).filter((node) => node.invalid).map(({ role, name, description }) => ({ role, name, description }));
  return { status, ...summary, fields };
}

/** sendForm submits the form of the field `selector` with Enter and returns the answer's status. */
async function sendForm(selector: string): Promise<number | undefined> {
  const [answer] = await Promise.all([page.waitForNavigation(), page.press(selector, "Enter")]);
  return answer?.status();
}

/** expectOnlyRefusals expects no console error or CSP violation but the refused forms' own answers, and forgets those. */
async function expectOnlyRefusals(): Promise<void> {
  problems.splice(0, problems.length, ...problems.filter((p) => !/status of 4\d\d/.test(p)));
  expect([problems, await cspViolations(page)]).toEqual([[], []]);
}

/** apiRefusal is the API's 422 for a subscription body: the errors it names. */
async function apiRefusal(body: object) {
  const res = await fetch(url("/public/v1/webhook-subscriptions"), { method: "POST", headers: { authorization: `Bearer ${server.token}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  return [res.status, (await res.json()).errors];
}

describe("a refused form names each field and the API's reason beside it, and the summary above the form takes the focus", () => {
  test("the subscription form and rotation step 2: a scheme, credentials or a private address in the receiver URL", async () => {
    const targets = ["ftp://example.com/hook", "https://user:pw@example.com/hook", "http://127.0.0.1:9/hook"];
    const answers = [];
    for (const target of targets) {
      await page.goto(url("/console/subscriptions"));
      await page.fill("input[name=target_url]", target);
      answers.push(await refusalOf(await sendForm("input[name=target_url]")));
      // What was typed stays, to be corrected.
      expect(await page.inputValue("input[name=target_url]")).toBe(target);
    }
    const reasons = [];
    for (const target of targets) reasons.push(await apiRefusal({ target_url: target, events: ["contact.created"] }));
    expect(reasons.map(([status, errors]) => [status, errors.map((e: any) => e.pointer)])).toEqual(targets.map(() => [422, ["/target_url"]]));
    const details = reasons.map(([, errors]) => errors[0].detail as string);
    expect(details[2]).toContain("127.0.0.1 is loopback");
    expect(answers).toEqual(
      details.map((detail) => ({
        status: 422,
        text: null,
        links: [[`target url ${detail}.`, "#field-target_url"]],
        focused: true,
        fields: [{ role: "textbox", name: "Receiver URL", description: detail }],
      })),
    );

    const old = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://8.8.8.8/old", events: ["contact.created"] })).data;
    await page.goto(url(`/console/rotations/new?from=${old.id}&kind=url`));
    await page.fill("input[name=target_url]", targets[0]!);
    expect(await refusalOf(await sendForm("input[name=target_url]"))).toEqual(answers[0]!);

    // With no event ticked: every box is described by the reason, and the summary links to the first.
    await page.goto(url("/console/subscriptions"));
    await page.fill("input[name=target_url]", "http://8.8.8.8/none");
    for (const box of await page.locator("input[name=events]").all()) await box.uncheck();
    const none = await refusalOf(await sendForm("input[name=target_url]"));
    const [, [eventsError]] = await apiRefusal({ target_url: "http://8.8.8.8/none", events: [] });
    expect([none.links, none.focused, new Set(none.fields.map((f) => `${f.role} ${f.description}`))]).toEqual([
      [[`events ${eventsError.detail}.`, "#field-events"]],
      true,
      new Set([`checkbox ${eventsError.detail}`]),
    ]);
    expect(none.fields).toHaveLength(9);
    await page.click("#refusal a");
    expect(await page.evaluate(() => (document.activeElement as HTMLInputElement).value)).toBe("contact.created");
    await expectOnlyRefusals();
  }, SLOW);

  /** SINCE_TOO_EARLY is the recover form refusing a since more than 14 days ago. */
  const SINCE_TOO_EARLY = {
    status: 422,
    text: null,
    links: [["since must be at most 14 days ago.", "#field-since"]],
    focused: true,
    fields: [{ role: "DateTime", name: "From (UTC) at most 14 days ago", description: "must be at most 14 days ago" }],
  };

  test("a recovery window: the field that is wrong, why, and what was typed", async () => {
    const sub = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://8.8.8.8/recover", events: ["contact.created"] })).data;
    const answer = await page.goto(url(`/console/subscriptions/${sub.id}/recover?since=2001-01-01T00:00&until=2001-01-02T00:00`));
    expect(await refusalOf(answer?.status())).toEqual(SINCE_TOO_EARLY);
    expect([await page.inputValue("input[name=since]"), await page.inputValue("input[name=until]")]).toEqual(["2001-01-01T00:00", "2001-01-02T00:00"]);
  }, SLOW);

  test("a recovery window the preview took and the confirm refuses, its since past the 14 days and their minute of grace meanwhile: the form again, with the field and why", async () => {
    const sub = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://8.8.8.8/recover-late", events: ["contact.created"] })).data;
    const since = new Date(Date.now() - 86_400_000).toISOString().slice(0, 16);
    expect((await page.goto(url(`/console/subscriptions/${sub.id}/recover?since=${since}`)))?.status()).toBe(200);
    // What the confirm carries once its minute has passed the 14 days and the minute of grace (the preview counted none, so its button waits disabled).
    const late = new Date(Math.floor((Date.now() - 14 * 86_400_000) / 60_000) * 60_000 - 120_000).toISOString();
    await page.evaluate((value) => {
      (document.querySelector("form input[type=hidden][name=since]") as HTMLInputElement).value = value;
      (document.getElementById("recover-send") as HTMLButtonElement).disabled = false;
    }, late);
    const [answer] = await Promise.all([page.waitForNavigation(), page.click("#recover-send")]);
    expect(await refusalOf(answer?.status())).toEqual(SINCE_TOO_EARLY);
    expect(await page.inputValue("input[name=since]")).toBe(late.slice(0, 16));
    await expectOnlyRefusals();
  }, SLOW);

  test("tokens, users, operators, an invitation's passwords, sign-in and the deliveries filters", async () => {
    const answers: Record<string, unknown> = {};
    await page.goto(url("/console/tokens"));
    await page.fill("input[name=name]", "   ");
    answers.token = await refusalOf(await sendForm("input[name=name]"));
    await page.goto(url("/console/users"));
    await page.fill("input[name=name]", "Zed");
    await page.fill("input[name=email]", "zed@localhost");
    answers.user = await refusalOf(await sendForm("input[name=email]"));
    await page.goto(url("/console/operators"));
    await page.fill("input[name=email]", "zed@localhost");
    answers.operator = await refusalOf(await sendForm("input[name=email]"));
    await page.fill("input[name=email]", "invited@example.com");
    await sendForm("input[name=email]");
    const link = await page.inputValue("#operator-link");
    const answer = await page.goto(url("/console/?colour=red&event_id=nope"));
    answers.filters = await refusalOf(answer?.status());

    await page.goto(link);
    await page.fill("input[name=password]", "one long password");
    await page.fill("input[name=password_again]", "another long one");
    answers.welcome = await refusalOf(await sendForm("input[name=password_again]"));
    await page.goto(url("/console/"));
    await Promise.all([page.waitForURL(url("/console/login")), page.click("form.signout button")]);
    await page.fill("input[name=email]", "oncall@example.com");
    await page.fill("input[name=password]", "not the password");
    answers.signIn = await refusalOf(await sendForm("input[name=password]"));

    await signInWithBrowser(page, server.url);
    const email = (name: string) => ({ role: "textbox", name, description: "must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de)" });
    expect(answers).toEqual({
      token: { status: 422, text: null, links: [["name must be 1 to 100 characters.", "#field-name"]], focused: true, fields: [{ role: "textbox", name: "Name who or what uses it", description: "must be 1 to 100 characters" }] },
      user: { status: 422, text: null, links: [["email must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de).", "#field-email"]], focused: true, fields: [email("Email")] },
      operator: { status: 422, text: null, links: [["email must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de).", "#field-email"]], focused: true, fields: [email("Email")] },
      // An unknown filter is no field of the form: the problem's detail says it, before the field that is.
      filters: {
        status: 422,
        text: "The filter is invalid: colour is not a filter of this page (filters: status, event, subscription_id, event_id, contact_id, request_id, since, until, before); event_id must be an event id (evt_...).",
        links: [["event id must be an event id (evt_...).", "#field-event_id"]],
        focused: true,
        fields: [{ role: "textbox", name: "Event id", description: "must be an event id (evt_...)" }],
      },
      welcome: {
        status: 422,
        text: null,
        links: [["password again must repeat the password.", "#field-password_again"]],
        focused: true,
        fields: [{ role: "textbox", name: "Password again", description: "must repeat the password" }],
      },
      // The service names no field: its detail is the summary.
      signIn: { status: 401, text: "The email or password is wrong.", links: [], focused: true, fields: [] },
    });
    await expectOnlyRefusals();
  }, SLOW);

  test("an email already taken (409, whose problem names no field) marks the email field of the users and operators forms with the API's words", async () => {
    await server.api("POST", "/public/v1/users", { name: "Grace", email: "grace@example.com" });
    const taken = await fetch(url("/public/v1/users"), { method: "POST", headers: { authorization: `Bearer ${server.token}`, "content-type": "application/json" }, body: JSON.stringify({ name: "Grace again", email: "GRACE@example.com" }) });
    const userDetail = (await taken.json()).detail;
    await page.goto(url("/console/users"));
    await page.fill("input[name=name]", "Grace again");
    await page.fill("input[name=email]", "GRACE@example.com");
    const user = await refusalOf(await sendForm("input[name=email]"));
    const typedUser = [await page.inputValue("input[name=name]"), await page.inputValue("input[name=email]")];
    await page.goto(url("/console/operators"));
    await page.fill("input[name=email]", "OnCall@example.com");
    const operator = await refusalOf(await sendForm("input[name=email]"));
    const typedOperator = await page.inputValue("input[name=email]");
    const operatorDetail = "An operator with email oncall@example.com already exists.";
    expect([taken.status, userDetail]).toEqual([409, "A user with email grace@example.com already exists."]);
    expect({ user, typedUser, operator, typedOperator }).toEqual({
      // The problem's detail is the reason, said as it is: the summary links it to the field.
      user: { status: 409, text: null, links: [[userDetail, "#field-email"]], focused: true, fields: [{ role: "textbox", name: "Email", description: userDetail }] },
      typedUser: ["Grace again", "GRACE@example.com"],
      operator: { status: 409, text: null, links: [[operatorDetail, "#field-email"]], focused: true, fields: [{ role: "textbox", name: "Email", description: operatorDetail }] },
      typedOperator: "OnCall@example.com",
    });
    await expectOnlyRefusals();
  }, SLOW);

  test("an invitation whose email became an operator's meanwhile (operator create) says so, on its form and on its link, and offers to sign in instead of asking for passwords", async () => {
    const code = await inviteOperator(server.runtime.db, "late@example.com", null);
    const link = url(`/console/welcome?code=${code}`);
    /** shownWelcome is what the invitation's page tells and offers: its heading, notices, links and password fields. */
    const shownWelcome = async (status: number | undefined) => ({
      status,
      heading: await page.textContent("main h1"),
      notices: await page.locator(".notice").evaluateAll((boxes) => boxes.map((box) => `${box.getAttribute("role")}: ${box.textContent}`)),
      links: await page.locator("main a").evaluateAll((links) => links.map((a) => [a.textContent, a.getAttribute("href")])),
      passwordFields: await page.locator("input[type=password]").count(),
    });
    await page.goto(link);
    const late = await createOperator(server.runtime.db, { email: "late@example.com", password: "their own long password" });
    await page.fill("input[name=password]", "one long password");
    await page.fill("input[name=password_again]", "one long password");
    const sent = await shownWelcome(await sendForm("input[name=password_again]"));
    const opened = await shownWelcome((await page.goto(link))?.status());
    const expected = {
      status: 409,
      heading: "Join the console",
      notices: ["alert: An operator with the email \u2068late@example.com\u2069 exists already, so this invitation cannot be used. Sign in with that operator's password; if it is lost, ask an operator for a password reset link."],
      links: [["Sign in", "/console/login"]],
      passwordFields: 0,
    };
    expect({ sent, opened }).toEqual({ sent: expected, opened: expected });
    await removeOperator(server.runtime.db, late.id); // the operators' rows listed below are the file's own
    await expectOnlyRefusals();
  }, SLOW);

  test("a refused deliveries filter stays in its field as typed, marked with the reason, beside the filters accepted; the table below is unfiltered", async () => {
    await page.goto(url("/console/"));
    await page.fill("input[name=contact_id]", "ada");
    await page.fill("input[name=since]", "2001-02-03T04:05");
    await page.selectOption("select[name=status]", "failed");
    const refused = await refusalOf(await sendForm("input[name=contact_id]"));
    const shown = await page.evaluate(() => ({
      fields: ["status", "contact_id", "since", "until"].map((name) => (document.querySelector(`[name=${name}]`) as HTMLInputElement).value),
      // The live table asks for what it shows: the deliveries without the refused filters.
      liveQuery: JSON.parse(document.getElementById("island-deliveries-props")!.textContent!).query,
    }));
    expect({ refused, shown }).toEqual({
      refused: { status: 422, text: null, links: [["contact id must be a contact id (con_...).", "#field-contact_id"]], focused: true, fields: [{ role: "textbox", name: "Contact id", description: "must be a contact id (con_...)" }] },
      shown: { fields: ["failed", "ada", "2001-02-03T04:05", ""], liveQuery: "" },
    });
    // Corrected, the filter applies: the page's own answer, not a refusal.
    await page.fill("input[name=contact_id]", "");
    expect(await sendForm("input[name=contact_id]")).toBe(200);
    await expectOnlyRefusals();
  }, SLOW);
});

describe("row actions and what they did", () => {
  test("every row's actions are named with their row: subscriptions, tokens and operators", async () => {
    const ledger = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://8.8.8.8/ledger", description: "Ledger", events: ["contact.created"] })).data;
    const bare = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://8.8.8.8/bare", events: ["contact.created"] })).data;
    await server.api("POST", `/public/v1/webhook-subscriptions/${bare.id}/pause`);
    const actions = async (within: string) => {
      // A Made by cell's link names who made the row (a token, an operator), and is no action on it.
      const maker = ':not([href^="/console/tokens#"]):not([href^="/console/operators#"])';
      const names = new Set(await page.locator(`${within} a${maker}, ${within} button`).evaluateAll((els) => els.map((e) => e.textContent)));
      return (await axTree()).filter((node) => (node.role === "link" || node.role === "button") && names.has(node.name)).map((node) => `${node.role} ${node.name}`).toSorted();
    };
    await page.goto(url("/console/subscriptions"));
    const ledgerActions = await actions(`tr[data-subscription-id="${ledger.id}"]`);
    const bareActions = await actions(`tr[data-subscription-id="${bare.id}"]`);
    await page.goto(url("/console/tokens"));
    const tokenActions = await actions("table#tokens");
    await addOperator(server.runtime.db, { email: "second@example.com", password: "another long password" });
    await page.goto(url("/console/operators"));
    const operatorActions = await actions("table#operators");
    expect({ ledgerActions, bareActions, tokenActions, operatorActions }).toEqual({
      ledgerActions: [
        "button Pause subscription Ledger",
        "link Delete subscription Ledger",
        "link Deliveries of subscription Ledger",
        "link Edit subscription Ledger",
        "link Health of subscription Ledger",
        "link Recover failed deliveries of subscription Ledger",
        "link Rotate subscription Ledger",
      ],
      bareActions: [
        "button Resume subscription http://8.8.8.8/bare",
        "link Delete subscription http://8.8.8.8/bare",
        "link Deliveries of subscription http://8.8.8.8/bare",
        "link Edit subscription http://8.8.8.8/bare",
        "link Health of subscription http://8.8.8.8/bare",
        "link Recover failed deliveries of subscription http://8.8.8.8/bare",
        "link Rotate subscription http://8.8.8.8/bare",
      ],
      tokenActions: ["link Revoke token console-test"],
      operatorActions: [
        "link Remove operator oncall@example.com",
        "link Remove operator second@example.com",
        "link Reset password of oncall@example.com",
        "link Reset password of second@example.com",
      ],
    });
  }, SLOW);

  test("pause, resume and a saved description say so after the page reloads, as enable and delete do", async () => {
    const sub = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://8.8.8.8/pause", description: "Pausable", events: ["contact.created"] })).data;
    const row = `tr[data-subscription-id="${sub.id}"]`;
    const notice = async () => [new URL(page.url()).search, await page.locator(".notice").evaluateAll((boxes) => boxes.map((box) => `${box.getAttribute("role")}: ${box.textContent}`))];
    await page.goto(url("/console/subscriptions"));
    await Promise.all([page.waitForNavigation(), page.click(`${row} button:has-text('Pause')`)]);
    const paused = await notice();
    await Promise.all([page.waitForNavigation(), page.click(`${row} button:has-text('Resume')`)]);
    const resumed = await notice();
    await page.goto(url(`/console/subscriptions/${sub.id}/edit`));
    await page.fill("input[name=description]", "Renamed");
    await Promise.all([page.waitForNavigation(), page.press("input[name=description]", "Enter")]);
    expect([paused, resumed, await notice()]).toEqual([
      ["?paused=1", ["status: Subscription paused. Its deliveries wait until it is resumed."]],
      ["?resumed=1", ["status: Subscription resumed. The deliveries that waited are sent now."]],
      ["?saved=1", ["status: Description saved."]],
    ]);
    await expectOnlyRefusals();
  }, SLOW);
});
