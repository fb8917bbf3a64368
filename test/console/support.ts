import { afterAll, beforeAll, expect } from "bun:test";
import type { Database } from "../../server/db/sql.ts";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type BrowserContext, type Locator, type Page } from "playwright-core";
import { Webhook } from "standardwebhooks";
import { CONTENT_SECURITY_POLICY } from "../../console/http.ts";
import { createOperator } from "../../server/operators/service.ts";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG, type Config } from "../../server/config.ts";
import { startServer, type RunningServer } from "../../server/server.ts";
import { newId } from "../../server/shared/ids.ts";
import type { Logger } from "../../server/shared/log.ts";
import { insertDelivery, insertEvent, updateDeliveryAfterAttempt } from "../../server/webhooks/store.ts";
import { testBackend } from "../support/backend.ts";
import { findChromium, type Browser } from "../support/chromium.ts";
import { FAST_WEBHOOKS, startReceiver, type Receiver } from "../webhooks/support.ts";

/** ARTIFACTS is where browser tests write screenshots for people to look at (not committed). */
export const ARTIFACTS = join(import.meta.dir, "..", "artifacts", "console");

export const OPERATOR = { email: "oncall@example.com", password: "correct horse battery staple" };

/** launchBrowser starts headless Chromium (the system's, or the npm package's: findChromium) with a fresh profile; one per test file. */
export async function launchBrowser(browser?: Browser): Promise<{ context: BrowserContext; close(): Promise<void> }> {
  browser ??= await findChromium();
  const profile = mkdtempSync(join(tmpdir(), "crm-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: browser.executablePath,
    env: { ...process.env, ...browser.env },
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** watchPage fails the test on any console error or CSP violation the page reports. */
export function watchPage(page: Page): string[] {
  const problems: string[] = [];
  page.on("console", (message) => {
    if (message.type() === "error") problems.push(message.text());
  });
  page.on("pageerror", (error) => problems.push(error.message));
  return problems;
}

/** shoot writes a full-page screenshot to test/artifacts/console/NAME.png. */
export async function shoot(page: Page, name: string): Promise<void> {
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

export interface ConsoleServer extends RunningServer {
  dataDir: string;
  /** an API token, for setting up data through the public API as an integration would */
  token: string;
  /** api calls the public API with the token and returns the parsed body */
  api(method: string, path: string, body?: unknown): Promise<any>;
  close(): Promise<void>;
}

/** startConsoleServer runs the real server on 127.0.0.1 (free port) with fast webhook retries; with `log`, its lines go there (a test reading the request log). */
export async function startConsoleServer(overrides: Partial<Config> = {}, log?: Logger): Promise<ConsoleServer> {
  const dataDir = mkdtempSync(join(tmpdir(), "crm-console-"));
  const backend = await testBackend(dataDir);
  const running = await startServer({ ...DEFAULT_CONFIG, ...FAST_WEBHOOKS, host: "127.0.0.1", port: 0, dataDir, logLevel: "error", ...backend.config, ...overrides }, log);
  const { token } = await createApiToken(running.runtime.db, "console-test");
  return {
    ...running,
    dataDir,
    token,
    async api(method, path, body) {
      const res = await fetch(`${running.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      if (!res.ok) throw new Error(`${method} ${path} answered ${res.status}: ${text}`);
      return text ? JSON.parse(text) : null;
    },
    async close() {
      await running.stop();
      await backend.drop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** addOperator creates the test operator directly (as `crm operator create` does). */
export async function addOperator(db: Database, operator = OPERATOR) {
  return await createOperator(db, operator);
}

/** signInWithBrowser fills in the sign-in form and waits for the deliveries page. */
export async function signInWithBrowser(page: Page, baseUrl: string, operator = OPERATOR): Promise<void> {
  await page.goto(`${baseUrl}/console/login`);
  await page.fill("input[name=email]", operator.email);
  await page.fill("input[name=password]", operator.password);
  await Promise.all([page.waitForURL(`${baseUrl}/console/`), page.click("button[type=submit]")]);
}

/** verifyingReceiver makes a receiver check the Standard Webhooks signature with `secret()` and report the outcome in its answer. */
export function verifyingReceiver(receiver: Receiver, secret: () => string | null): { verified: string[] } {
  const verified: string[] = [];
  receiver.respond((request) => {
    const key = secret();
    if (!key) return new Response("no secret configured", { status: 500 });
    try {
      new Webhook(key).verify(request.body, request.headers);
      verified.push(request.headers["webhook-id"]!);
      return Response.json({ verified: true, received: request.json.type });
    } catch (error) {
      return Response.json({ verified: false, error: (error as Error).message }, { status: 400 });
    }
  });
  return { verified };
}

/** expectSecurityHeaders asserts the console's strict headers on a response. */
export function expectSecurityHeaders(headers: Headers): void {
  expect(headers.get("content-security-policy")).toBe(CONTENT_SECURITY_POLICY);
  expect(headers.get("x-frame-options")).toBe("DENY");
  expect(headers.get("x-content-type-options")).toBe("nosniff");
  expect(headers.get("referrer-policy")).toBe("same-origin");
}

/** ConsoleClient is a cookie-keeping console client for tests that need no browser. */
export class ConsoleClient {
  readonly cookies = new Map<string, string>();
  /** the CSRF token of the last page that had a form */
  csrf = "";

  constructor(
    private readonly handle: (request: Request) => Promise<Response>,
    private readonly base = "http://localhost",
  ) {}

  /** send makes any request to a console path with the client's cookies, keeping the cookies and CSRF token it answers. */
  async send(path: string, init: RequestInit = {}): Promise<{ status: number; headers: Headers; text: string }> {
    const cookie = [...this.cookies].map(([k, v]) => `${k}=${v}`).join("; ");
    const res = await this.handle(new Request(`${this.base}${path}`, { ...init, headers: { ...(cookie ? { cookie } : {}), ...(init.headers as Record<string, string>) } }));
    for (const set of res.headers.getSetCookie()) {
      const [pair] = set.split(";");
      const [name, value] = [pair!.slice(0, pair!.indexOf("=")), pair!.slice(pair!.indexOf("=") + 1)];
      if (/Max-Age=0/i.test(set)) this.cookies.delete(name);
      else this.cookies.set(name, value);
    }
    const text = await res.text();
    const token = /name="_csrf" value="([^"]+)"/.exec(text);
    if (token) this.csrf = token[1]!;
    return { status: res.status, headers: res.headers, text };
  }

  /** get fetches a console path with the client's cookies. */
  get(path: string, headers: Record<string, string> = {}) {
    return this.send(path, { headers });
  }

  /** post sends a form with the current CSRF token unless `_csrf` is given (null: none at all). */
  post(path: string, fields: Record<string, string | string[] | null>) {
    const form = new URLSearchParams();
    const all = { _csrf: this.csrf, ...fields };
    for (const [name, value] of Object.entries(all)) {
      if (value === null) continue;
      for (const v of Array.isArray(value) ? value : [value]) form.append(name, v);
    }
    return this.send(path, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: form.toString() });
  }

  /** postEncoded sends a form body exactly as given after the current CSRF token (`name=%E9&...`), for bodies no browser would send. */
  postEncoded(path: string, encoded: string) {
    return this.send(path, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: `_csrf=${encodeURIComponent(this.csrf)}&${encoded}` });
  }

  /** postTyped sends a body exactly as given under another content type than a form's (JSON, multipart), for bodies no console page sends. */
  postTyped(path: string, contentType: string, body: string) {
    return this.send(path, { method: "POST", headers: { "content-type": contentType }, body });
  }

  /** signIn loads the sign-in page (for its CSRF token) and posts the operator's credentials. */
  async signIn(operator = OPERATOR) {
    await this.get("/console/login");
    return this.post("/console/login", { email: operator.email, password: operator.password });
  }
}

/** formKeyOf is the form key a console page drew for its form. */
export const formKeyOf = (html: string) => /name="form_key" value="([^"]+)"/.exec(html)![1]!;

/** SeededDelivery is a delivery written straight to the database, as if made at `at` and answered as given. */
export interface SeededDelivery {
  at: number;
  status: "succeeded" | "failed" | "pending";
  response_status?: number | null;
  error?: string | null;
  /** the contact the event is about (its data.id) */
  contact_id?: string;
}

/**
 * seedDeliveries writes contact.updated events and their deliveries to one subscription at given
 * times and outcomes, through the webhooks store. Pending ones are due tomorrow, so the delivery
 * loop leaves them alone while a test reads them.
 */
export function seedDeliveries(db: Database, subscription: { id: string; target_url: string }, deliveries: SeededDelivery[]): Promise<string[]> {
  return db.write(async (tx) => {
    const ids: string[] = [];
    for (const d of deliveries) {
      const eventId = newId("evt", d.at);
      await insertEvent(tx, { id: eventId, type: "contact.updated", payload: JSON.stringify({ type: "contact.updated", event_id: eventId, timestamp: new Date(d.at).toISOString(), data: { id: d.contact_id ?? newId("con", d.at) } }), request_id: null, token_id: null, made_by: null, created_at: d.at });
      const id = newId("dlv", d.at);
      await insertDelivery(tx, { id, event_id: eventId, event_type: "contact.updated", subscription_id: subscription.id, target_url: subscription.target_url, next_attempt_at: Date.now() + 86_400_000, created_at: d.at });
      const answered = d.status === "pending" ? d.response_status !== undefined || d.error !== undefined : true;
      if (answered) {
        await updateDeliveryAfterAttempt(tx, {
          id,
          status: d.status,
          attempts: 1,
          next_attempt_at: d.status === "pending" ? Date.now() + 86_400_000 : null,
          last_response_status: d.response_status ?? (d.status === "succeeded" ? 200 : null),
          last_error: d.error ?? null,
          recovered_at: null,
          updated_at: d.at,
        });
      }
      ids.push(id);
    }
    return ids;
  });
}

/** watchCsp records every Content-Security-Policy violation a page reports; read them with cspViolations. */
export async function watchCsp(page: Page): Promise<void> {
  await page.addInitScript(() => {
    const seen: string[] = ((window as any).__cspViolations = []);
    document.addEventListener("securitypolicyviolation", (event) => seen.push(`${event.violatedDirective} ${event.blockedURI}`));
  });
}

/** cspViolations returns the CSP violations the current page reported since it loaded. */
export function cspViolations(page: Page): Promise<string[]> {
  return page.evaluate(() => (window as any).__cspViolations ?? []);
}

/** signedInBrowser launches Chromium with one page watched for console errors and CSP violations, signed in as the test operator. */
export async function signedInBrowser(server: ConsoleServer): Promise<{ browser: Awaited<ReturnType<typeof launchBrowser>>; page: Page; problems: string[] }> {
  await addOperator(server.runtime.db);
  const browser = await launchBrowser();
  const page = await browser.context.newPage();
  const problems = watchPage(page);
  await watchCsp(page);
  await signInWithBrowser(page, server.url);
  return { browser, page, problems };
}

/** BrowserFile is what a test file's tests share (browserFile): its console server, a real receiver, and Chromium signed in as the test operator. */
export interface BrowserFile {
  server: ConsoleServer;
  receiver: Receiver;
  browser: Awaited<ReturnType<typeof launchBrowser>>;
  page: Page;
  /** the console errors the page reported (watchPage) */
  problems: string[];
}

/**
 * browserFile starts, before a test file's tests, its console server (`overrides`, `log`:
 * startConsoleServer), a receiver and Chromium signed in (signedInBrowser), then runs `setup` on
 * them (the file takes what it uses, makes its subscriptions, seeds its deliveries); after the
 * tests it closes all three.
 */
export function browserFile(setup: (file: BrowserFile) => Promise<void>, options: { overrides?: Partial<Config>; log?: Logger } = {}): void {
  let server: ConsoleServer | undefined;
  let receiver: Receiver | undefined;
  let signedIn: Awaited<ReturnType<typeof signedInBrowser>> | undefined;
  beforeAll(async () => {
    server = await startConsoleServer(options.overrides, options.log);
    receiver = startReceiver();
    signedIn = await signedInBrowser(server);
    await setup({ server, receiver, ...signedIn });
  }, 60_000);
  afterAll(async () => {
    await signedIn?.browser.close();
    await receiver?.stop();
    await server?.close();
  });
}

/**
 * refusedConfirmation sends a wizard's step 4 form with its confirmation box unticked, as a browser
 * sends it without the box's `required` (a form filled in by a tool), and returns what the refused
 * page tells of the box: its status, whether the box is marked invalid, the reason that describes
 * it, and the links of the summary above.
 */
export async function refusedConfirmation(page: Page, button: string) {
  await page.evaluate(() => document.querySelector("input[name=confirm]")!.removeAttribute("required"));
  const [answer] = await Promise.all([page.waitForNavigation(), page.click(button)]);
  const box = await page.evaluate(() => {
    const input = document.querySelector("input[name=confirm]")!;
    return {
      id: input.id,
      invalid: input.getAttribute("aria-invalid"),
      reason: document.getElementById(input.getAttribute("aria-describedby") ?? "")?.textContent ?? null,
      summary: [...document.querySelectorAll("#refusal a")].map((a) => [a.textContent, a.getAttribute("href")]),
    };
  });
  return { status: answer?.status(), ...box };
}

/** accessibleNames returns the name Chromium's accessibility tree gives each element `selector` matches, in document order: what a screen reader says of it. */
export async function accessibleNames(page: Page, selector: string): Promise<string[]> {
  const cdp = await page.context().newCDPSession(page);
  try {
    const { root } = await cdp.send("DOM.getDocument", { depth: 0 });
    const { nodeIds } = await cdp.send("DOM.querySelectorAll", { nodeId: root.nodeId, selector });
    const names: string[] = [];
    for (const nodeId of nodeIds) {
      const { nodes } = await cdp.send("Accessibility.getPartialAXTree", { nodeId, fetchRelatives: false });
      names.push(nodes[0]?.name?.value ?? "");
    }
    return names;
  } finally {
    await cdp.detach();
  }
}

/** shootAtBothWidths screenshots the page at 1280 px and, reloaded, at 390 px (NAME-1280, NAME-390); returns the document's width at 390 (390: nothing scrolls sideways). */
export async function shootAtBothWidths(page: Page, name: string): Promise<number> {
  await shoot(page, `${name}-1280`);
  await page.setViewportSize({ width: 390, height: 844 });
  await page.reload();
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  await shoot(page, `${name}-390`);
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.reload();
  return width;
}

/** colourLayers lists the colours an element and its backdrop paint, topmost first: its `color` (or its outline's, or its border's), then the background colours under it up to the page. */
export function colourLayers(locator: Locator, paint: "color" | "outline" | "border", from: "self" | "parent"): Promise<string[]> {
  return locator.evaluate(
    (element, [paint, from]) => {
      const style = getComputedStyle(element);
      const layers = [paint === "color" ? style.color : paint === "outline" ? style.outlineColor : style.borderTopColor];
      for (let node: Element | null = from === "self" ? element : element.parentElement; node; node = node.parentElement) layers.push(getComputedStyle(node).backgroundColor);
      return layers;
    },
    [paint, from] as const,
  );
}

/** contrastRatio is WCAG 2's contrast ratio of the topmost of `layers` (computed colours, topmost first) against what lies under it, each translucent layer blended over the next and the page over white; rounded to 2 decimals. */
export function contrastRatio(layers: string[]): number {
  const parse = (colour: string) => {
    const [r = 0, g = 0, b = 0, a = 1] = (/\(([^)]*)\)/.exec(colour)?.[1] ?? "").split(/[\s,/]+/).filter(Boolean).map(Number);
    return { rgb: [r, g, b], a };
  };
  const over = (top: string, under: number[]) => {
    const { rgb, a } = parse(top);
    return rgb.map((channel, i) => a * channel + (1 - a) * under[i]!);
  };
  const behind = layers.slice(1).reduceRight((under, layer) => over(layer, under), [255, 255, 255]);
  const front = over(layers[0]!, behind);
  const luminance = (rgb: number[]) => {
    const [r, g, b] = rgb.map((channel) => (channel / 255 <= 0.03928 ? channel / 255 / 12.92 : ((channel / 255 + 0.055) / 1.055) ** 2.4));
    return 0.2126 * r! + 0.7152 * g! + 0.0722 * b!;
  };
  const [light, dark] = [luminance(front), luminance(behind)].sort((x, y) => y - x);
  return Math.round(((light! + 0.05) / (dark! + 0.05)) * 100) / 100;
}
