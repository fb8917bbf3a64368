import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { gzipSync } from "node:zlib";
import type { Page } from "playwright-core";
import { Webhook } from "standardwebhooks";
import { disableSubscription, setSubscriptionPaused } from "../../server/webhooks/store.ts";
import { MAX_MANUAL_ATTEMPTS, MAX_PER_SUBSCRIPTION } from "../../server/webhooks/worker.ts";
import { formatDuration } from "../../console/pages/parts.tsx";
import { startReceiver, waitFor, type Receiver } from "../webhooks/support.ts";
import { addOperator, launchBrowser, refusedConfirmation, shoot, signInWithBrowser, startConsoleServer, verifyingReceiver, watchPage, type ConsoleServer } from "./support.ts";

// The secret rotation wizard, recovery and pausing, and a delivery's Retry now, end to end in a real browser against real receivers.
let server: ConsoleServer;
let browser: Awaited<ReturnType<typeof launchBrowser>>;
let page: Page;
let problems: string[];
const receivers: Receiver[] = [];

beforeAll(async () => {
  server = await startConsoleServer({ deliveryTimeoutMs: 20_000 });
  await addOperator(server.runtime.db);
  browser = await launchBrowser();
  page = await browser.context.newPage();
  problems = watchPage(page);
  await signInWithBrowser(page, server.url);
});

afterAll(async () => {
  await browser.close();
  for (const r of receivers) await r.stop();
  await server.close();
});

const SLOW = 60_000;
const url = (path: string) => `${server.url}${path}`;

function receiver(path: string): Receiver {
  const r = startReceiver(path);
  receivers.push(r);
  return r;
}

/** succeededDelivery makes a subscription described `description` to a new receiver at `path`, and a contact, and waits for its contact.created delivery to succeed. */
async function succeededDelivery(path: string, description: string) {
  const r = receiver(path);
  const sub = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: r.url, description, events: ["contact.created"] })).data;
  await server.api("POST", "/public/v1/contacts", { first_name: "Settled" });
  const settled = await waitFor(async () => {
    const [found] = (await server.api("GET", `/public/v1/webhook-deliveries?subscription_id=${sub.id}`)).data;
    return found?.status === "succeeded" && found;
  }, "the first delivery to succeed");
  return { r, sub, settled };
}

const verifiesWith = (secret: string, got: { body: string; headers: Record<string, string> }) => {
  try {
    new Webhook(secret).verify(got.body, got.headers);
    return true;
  } catch {
    return false;
  }
};

/** shownText is an element's text as shown, spaces collapsed, each <time> read as the moment it shows (its datetime), so a step is compared whole whatever the time zone. */
const shownText = (selector: string) =>
  page.locator(selector).evaluate((element: HTMLElement) => {
    let text = element.innerText;
    for (const time of element.querySelectorAll("time")) text = text.replace(time.innerText, time.dateTime);
    return text.replace(/\s+/g, " ").trim();
  });

describe("secret rotation wizard", () => {
  test("rotates the secret: the new secret alone signs the test, the previous one is retired only after a successful test", async () => {
    const r = receiver("/secret");
    const sub = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: r.url, description: "Ledger", events: ["contact.created"] })).data;
    let newSecret: string | null = null;
    const checks = verifyingReceiver(r, () => newSecret);

    // (1) pick the subscription and "rotate the secret" beside "move to a new URL"
    await page.goto(url("/console/rotations/new"));
    expect(await page.isChecked("input[name=kind][value=url]")).toBe(true);
    await page.check(`input[name=from][value="${sub.id}"]`);
    await page.check("input[name=kind][value=secret]");
    await Promise.all([page.waitForURL(url(`/console/subscriptions/${sub.id}/secret-rotation`)), page.click("button:has-text('Next')")]);

    // (2) the grace period, then the new secret shown once
    expect(await page.textContent(".stepper li.current")).toBe("2New secret");
    expect(await page.inputValue("input[name=grace_hours]")).toBe("24");
    await page.fill("input[name=grace_hours]", "200");
    await page.evaluate(() => document.querySelector<HTMLInputElement>("input[name=grace_hours]")!.removeAttribute("max"));
    await page.click("button:has-text('Rotate secret')");
    expect(await page.textContent(".notice")).toBe("grace hours must be a whole number of hours from 0 to 168.");
    expect(problems).toEqual(["Failed to load resource: the server responded with a status of 422 (Unprocessable Entity)"]);
    problems.splice(0); // the refusal above was the point
    await page.fill("input[name=grace_hours]", "6");
    await page.click("button:has-text('Rotate secret')");
    await page.waitForSelector("#new-secret");
    newSecret = await page.inputValue("#new-secret");
    expect(newSecret).toMatch(/^whsec_/);
    expect(newSecret).not.toBe(sub.secret);
    await shoot(page, "secret-rotation-2-rotated");
    const rotated = (await server.api("GET", `/public/v1/webhook-subscriptions/${sub.id}`)).data;
    expect(Date.parse(rotated.previous_secret_expires_at) - Date.parse(rotated.secret_rotated_at)).toBe(6 * 3_600_000);

    // Retiring before a successful test is refused.
    expect(await page.isDisabled("#retire-previous")).toBe(true);
    const csrf = await page.inputValue("#step-retire input[name=_csrf]");
    const early = await page.request.post(url(`/console/subscriptions/${sub.id}/secret-rotation/finish`), { form: { _csrf: csrf, confirm: "yes" }, maxRedirects: 0 });
    expect(early.status()).toBe(409);

    // (3) the test ping carries the new secret's signature alone; the receiver, already on the new secret, verifies it
    await Promise.all([page.waitForURL(url(`/console/subscriptions/${sub.id}/secret-rotation#step-test`)), page.click("#send-test")]);
    await page.waitForSelector("#test-result.test-succeeded", { timeout: 15_000 });
    const ping = r.received.find((got) => got.json?.type === "webhook.ping")!;
    expect(ping.headers["webhook-signature"]!.split(" ")).toHaveLength(1);
    expect([verifiesWith(newSecret, ping), verifiesWith(sub.secret, ping)]).toEqual([true, false]);
    expect(checks.verified).toEqual([ping.headers["webhook-id"]!]);
    await shoot(page, "secret-rotation-3-tested");

    // (4) retire the previous secret, confirmed
    expect(await page.textContent(".stepper li.current")).toBe("4Retire old secret");
    expect(await refusedConfirmation(page, "#retire-previous")).toEqual({ status: 422, id: "field-confirm", invalid: "true", reason: "must be ticked", summary: [["confirm must be ticked.", "#field-confirm"]] });
    expect(problems.splice(0)).toEqual(["Failed to load resource: the server responded with a status of 422 (Unprocessable Entity)"]);
    await page.check("input[name=confirm]");
    await Promise.all([page.waitForURL(url(`/console/subscriptions/${sub.id}/secret-rotation?finished=1`)), page.click("#retire-previous")]);
    expect(await page.textContent("#summary h2")).toContain("Secret rotation finished");
    await shoot(page, "secret-rotation-5-summary");

    // From now on only the new secret signs.
    await server.api("POST", "/public/v1/contacts", { first_name: "After" });
    const created = await waitFor(() => r.received.find((got) => got.json?.type === "contact.created"), "contact.created");
    expect(created.headers["webhook-signature"]!.split(" ")).toHaveLength(1);
    expect([verifiesWith(newSecret, created), verifiesWith(sub.secret, created)]).toEqual([true, false]);
    expect(problems).toEqual([]);
  }, SLOW);
  test("the test ping is signed with the new secret alone: a receiver still on the previous one refuses it (401) and retiring stays locked; moved to the new one, the next test unlocks it", async () => {
    const r = receiver("/still-on-previous");
    const sub = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: r.url, description: "Ledger on the old secret", events: ["contact.created"] })).data;
    // The receiver verifies with one secret, as the README's example does: at first the one it was given at creation.
    let receiverSecret: string = sub.secret;
    r.respond((got) => (verifiesWith(receiverSecret, got) ? new Response(null, { status: 204 }) : new Response("invalid signature", { status: 401 })));

    await page.goto(url(`/console/subscriptions/${sub.id}/secret-rotation`));
    await page.fill("input[name=grace_hours]", "24");
    await page.click("button:has-text('Rotate secret')");
    await page.waitForSelector("#new-secret");
    const newSecret = await page.inputValue("#new-secret");
    const rotated = (await server.api("GET", `/public/v1/webhook-subscriptions/${sub.id}`)).data;

    // (3) the receiver was never given the new secret: the test fails, every attempt refused
    await Promise.all([page.waitForURL(url(`/console/subscriptions/${sub.id}/secret-rotation#step-test`)), page.click("#send-test")]);
    await page.waitForSelector("#test-result.test-failed", { timeout: 15_000 });
    const [refusedPing] = (await server.api("GET", `/public/v1/webhook-deliveries?subscription_id=${sub.id}&event=webhook.ping`)).data;
    const refused = (await server.api("GET", `/public/v1/webhook-deliveries/${refusedPing.id}`)).data;
    const last = refused.attempt_history.at(-1);
    const sent = r.received.filter((got) => got.headers["webhook-id"] === refusedPing.id);
    const csrf = await page.inputValue("#step-retire input[name=_csrf]");
    const early = await page.request.post(url(`/console/subscriptions/${sub.id}/secret-rotation/finish`), { form: { _csrf: csrf, confirm: "yes" }, maxRedirects: 0 });
    expect({
      delivery: [refused.status, refused.attempts, refused.last_response_status],
      signatures: sent.map((got) => [got.headers["webhook-signature"]!.split(" ").length, verifiesWith(newSecret, got), verifiesWith(sub.secret, got)]),
      stepper: await page.textContent(".stepper li.current"),
      // (the step's labels are set in capitals by the style)
      test: await shownText("#step-test"),
      retire: await shownText("#step-retire"),
      retireDisabled: await page.isDisabled("#retire-previous"),
      early: early.status(),
    }).toEqual({
      delivery: ["failed", 3, 401],
      signatures: [
        [1, true, false],
        [1, true, false],
        [1, true, false],
      ],
      stepper: "3Test",
      test:
        "3 Send a test event A webhook.ping goes to this subscription signed with the new secret alone (other requests carry both signatures until the previous secret is retired), so a receiver still on the previous secret refuses it. Configure the receiver with the new secret, then check that it verifies and processes the event. " +
        `Failed The new receiver did not accept the test event. Fix the receiver and send another. Delivery ${refusedPing.id} RECEIVER'S ANSWER 401 after ${formatDuration(last.duration_ms)}, at ${last.started_at} RESPONSE BODY invalid signature Send another test event`,
      retire: `4 Retire the previous secret Available after a successful test delivery. Until then, and until ${rotated.previous_secret_expires_at} at the latest, both secrets sign. Yes, stop signing with the previous secret now Retire previous secret`,
      retireDisabled: true,
      early: 409,
    });

    // The receiver is given the new secret: the next test succeeds and unlocks retiring.
    receiverSecret = newSecret;
    await Promise.all([page.waitForURL(url(`/console/subscriptions/${sub.id}/secret-rotation#step-test`)), page.click("#send-test")]);
    await page.waitForSelector("#test-result.test-succeeded", { timeout: 15_000 });
    const [passedPing] = (await server.api("GET", `/public/v1/webhook-deliveries?subscription_id=${sub.id}&event=webhook.ping`)).data;
    const passed = r.received.find((got) => got.headers["webhook-id"] === passedPing.id)!;
    expect({
      pings: [passedPing.id === refusedPing.id, passedPing.status],
      signatures: [passed.headers["webhook-signature"]!.split(" ").length, verifiesWith(newSecret, passed), verifiesWith(sub.secret, passed)],
      stepper: await page.textContent(".stepper li.current"),
      retire: await shownText("#step-retire"),
      retireDisabled: await page.isDisabled("#retire-previous"),
    }).toEqual({
      pings: [false, "succeeded"],
      signatures: [1, true, false],
      stepper: "4Retire old secret",
      retire: "4 Retire the previous secret The receiver accepted the test event. From now on only the new secret signs; a receiver still on the previous one will fail to verify. Yes, stop signing with the previous secret now Retire previous secret",
      retireDisabled: false,
    });
    // Events other than the test still carry both signatures until the previous secret is retired.
    await server.api("POST", "/public/v1/contacts", { first_name: "During grace" });
    const created = await waitFor(() => r.received.find((got) => got.json?.type === "contact.created"), "contact.created");
    expect([created.headers["webhook-signature"]!.split(" ").length, verifiesWith(newSecret, created), verifiesWith(sub.secret, created)]).toEqual([2, true, true]);
    expect(problems).toEqual([]);
  }, SLOW);

  test("finds its test event by the delivery it sent, not by time: a ping sent before the rotation, stamped later by a clock an hour ahead, is not taken for it", async () => {
    const r = receiver("/skewed");
    const sub = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: r.url, description: "Skewed", events: ["contact.created"] })).data;
    const older = (await server.api("POST", `/public/v1/webhook-subscriptions/${sub.id}/test`)).data;
    const rotated = (await server.api("POST", `/public/v1/webhook-subscriptions/${sub.id}/rotate-secret`, { grace_hours: 24 })).data;
    await server.runtime.db.write((tx) => tx.run("UPDATE webhook_deliveries SET created_at = ? WHERE id = ?", [Date.parse(rotated.secret_rotated_at) + 3_600_000, older.delivery_id]));
    const shownTest = () => page.locator("#test-result .test-status .muted code").evaluateAll((codes) => codes.map((code) => code.textContent));
    await page.goto(url(`/console/subscriptions/${sub.id}/secret-rotation`));
    const beforeTest = await shownTest();
    await Promise.all([page.waitForURL(url(`/console/subscriptions/${sub.id}/secret-rotation#step-test`)), page.click("#send-test")]);
    const pings = (await server.api("GET", `/public/v1/webhook-deliveries?subscription_id=${sub.id}&event=webhook.ping`)).data.map((d: { id: string }) => d.id);
    const sent = pings.filter((id: string) => id !== older.delivery_id);
    expect({ beforeTest, sent: sent.length, afterTest: await shownTest() }).toEqual({ beforeTest: [], sent: 1, afterTest: sent });
    expect(problems).toEqual([]);
  }, SLOW);

  test("a test event refused because the subscription is disabled comes back to the wizard (409) saying what to do in the console, not the API's route, and sends nothing", async () => {
    const r = receiver("/disabled-rotation");
    const sub = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: r.url, description: "Stopped rotation", events: ["contact.created"] })).data;
    await server.api("POST", `/public/v1/webhook-subscriptions/${sub.id}/rotate-secret`, { grace_hours: 24 });
    await page.goto(url(`/console/subscriptions/${sub.id}/secret-rotation`));
    await server.runtime.db.write((tx) => disableSubscription(tx, sub.id, "every attempt failed", Date.now(), null));
    const [answer] = await Promise.all([page.waitForNavigation(), page.click("#send-test")]);
    expect({ status: answer?.status(), heading: await page.textContent("h1"), refusal: await page.locator("#refusal").allTextContents(), sendTest: await page.locator("#send-test").count() }).toEqual({
      status: 409,
      heading: "Rotate the signing secret",
      refusal: ["No test event was sent: the subscription \u2068Stopped rotation\u2069 is disabled (every attempt failed). Enable it with its Enable button on the Subscriptions page, then send the test event again."],
      sendTest: 1,
    });
    expect(problems.splice(0)).toEqual(["Failed to load resource: the server responded with a status of 409 (Conflict)"]);
    expect((await server.api("GET", `/public/v1/webhook-deliveries?subscription_id=${sub.id}`)).data).toEqual([]);
    expect(r.received).toEqual([]);
  }, SLOW);

  test("a test event to a subscription paused meanwhile is not sent to wait for its resume: the wizard comes back (409) saying to resume it first", async () => {
    const r = receiver("/paused-rotation");
    const sub = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: r.url, description: "Held rotation", events: ["contact.created"] })).data;
    await server.api("POST", `/public/v1/webhook-subscriptions/${sub.id}/rotate-secret`, { grace_hours: 24 });
    await page.goto(url(`/console/subscriptions/${sub.id}/secret-rotation`));
    await server.runtime.db.write((tx) => setSubscriptionPaused(tx, sub.id, Date.now(), Date.now(), null));
    const [answer] = await Promise.all([page.waitForNavigation(), page.click("#send-test")]);
    expect({ status: answer?.status(), heading: await page.textContent("h1"), refusal: await page.locator("#refusal").allTextContents(), sendTest: await page.locator("#send-test").count() }).toEqual({
      status: 409,
      heading: "Rotate the signing secret",
      refusal: [
        "No test event was sent: the subscription \u2068Held rotation\u2069 is paused, and the test event would wait until it is resumed. Resume it with its Resume button on the Subscriptions page (its pending deliveries then go out), then send the test event again.",
      ],
      sendTest: 1,
    });
    expect(problems.splice(0)).toEqual(["Failed to load resource: the server responded with a status of 409 (Conflict)"]);
    expect((await server.api("GET", `/public/v1/webhook-deliveries?subscription_id=${sub.id}`)).data).toEqual([]);
  }, SLOW);
});

describe("recover and pause from the subscriptions page", () => {
  test("recover shows the window's count of failed deliveries before confirming, then sends them again", async () => {
    const r = receiver("/recover");
    r.respond(() => new Response("down", { status: 503 }));
    const sub = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: r.url, events: ["contact.updated"] })).data;
    const contact = (await server.api("POST", "/public/v1/contacts", { first_name: "Down" })).data;
    for (const name of ["One", "Two"]) await server.api("PATCH", `/public/v1/contacts/${contact.id}`, { first_name: name });
    const failed = async () => (await server.runtime.db.all<{ id: string }>("SELECT id FROM webhook_deliveries WHERE subscription_id = ? AND status = 'failed' ORDER BY id", [sub.id]));
    await waitFor(async () => (await failed()).length === 2, "two failed deliveries");
    const failedIds = (await failed()).map((row) => row.id);
    const attemptsBefore = r.received.length;
    r.respond(() => new Response("ok"));

    await page.goto(url("/console/subscriptions"));
    await Promise.all([page.waitForURL(url(`/console/subscriptions/${sub.id}/recover`)), page.click(`tr[data-subscription-id="${sub.id}"] a:has-text('Recover failed deliveries')`)]);
    await Promise.all([page.waitForURL(/\/recover\?since=/), page.click("button:has-text('Count failed deliveries')")]);
    expect(await page.textContent("#recover-count")).toContain("2 failed deliveries from");
    expect(r.received.length).toBe(attemptsBefore); // counting sends nothing
    await shoot(page, "recover-confirm");
    await Promise.all([page.waitForURL(url("/console/subscriptions?recovered=2")), page.click("#recover-send")]);
    expect(await page.textContent(".notice")).toContain("2 failed deliveries queued again, oldest first.");
    await waitFor(() => r.received.length === attemptsBefore + 2, "the recovered deliveries");
    expect(r.received.slice(attemptsBefore).map((got) => got.headers["webhook-id"]).sort()).toEqual(failedIds);
    expect(problems).toEqual([]);
  }, SLOW);

  test("pause holds deliveries as pending and resume sends them", async () => {
    const r = receiver("/pause");
    const sub = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: r.url, events: ["contact.deleted"] })).data;
    await page.goto(url("/console/subscriptions"));
    const row = `tr[data-subscription-id="${sub.id}"]`;
    await Promise.all([page.waitForURL(url("/console/subscriptions?paused=1")), page.click(`${row} button:has-text('Pause')`)]);
    expect(await page.textContent(`${row} .badge`)).toBe("Paused");
    const contact = (await server.api("POST", "/public/v1/contacts", { first_name: "Gone" })).data;
    await server.api("DELETE", `/public/v1/contacts/${contact.id}`);
    const pending = async () => (await server.runtime.db.all<{ status: string; attempts: number }>("SELECT status, attempts FROM webhook_deliveries WHERE subscription_id = ?", [sub.id]));
    expect(await pending()).toEqual([{ status: "pending", attempts: 0 }]);
    // Waiting for Resume, not due: neither its row nor its page shows a retry time, nor a Retry now that would be refused.
    const [waiting] = (await server.api("GET", `/public/v1/webhook-deliveries?subscription_id=${sub.id}`)).data;
    const pausedAt: string = (await server.api("GET", `/public/v1/webhook-subscriptions/${sub.id}`)).data.paused_at;
    const said = `waits for Resume (paused since ${pausedAt.slice(0, 10)} ${pausedAt.slice(11, 19)} UTC)`;
    await page.goto(url(`/console/?subscription_id=${sub.id}`));
    expect(await page.textContent(`tr[data-delivery-id="${waiting.id}"] td[data-label="Next retry"]`)).toBe(`${said} next retry of delivery ${waiting.id}`);
    await page.goto(url(`/console/deliveries/${waiting.id}`));
    expect({ next: await page.textContent("#next-retry"), retryButton: await page.locator("button:has-text('Retry now')").count(), instead: await page.textContent(".retry-paused") }).toEqual({
      next: said,
      retryButton: 0,
      instead: "No Retry now: its subscription is paused, and this delivery waits for it. Resume it on the Subscriptions page to send it.",
    });
    await page.goto(url("/console/subscriptions"));
    await Promise.all([page.waitForURL(url("/console/subscriptions?resumed=1")), page.click(`${row} button:has-text('Resume')`)]);
    expect(await page.textContent(`${row} .badge`)).toBe("Active");
    await waitFor(() => r.received.length === 1, "the delivery that waited");
    expect(r.received[0]!.json).toMatchObject({ type: "contact.deleted", data: { id: contact.id } });
    expect(problems).toEqual([]);
  }, SLOW);

  test("edit changes the description only", async () => {
    const r = receiver("/edit");
    const sub = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: r.url, description: "Old label", events: ["contact.deleted"] })).data;
    await page.goto(url("/console/subscriptions"));
    await Promise.all([page.waitForURL(url(`/console/subscriptions/${sub.id}/edit`)), page.click(`tr[data-subscription-id="${sub.id}"] a:has-text('Edit')`)]);
    expect(await page.inputValue("input[name=description]")).toBe("Old label");
    await page.fill("input[name=description]", "Warehouse sync");
    await Promise.all([page.waitForURL(url("/console/subscriptions?saved=1")), page.click("button:has-text('Save')")]);
    expect(await page.textContent(`tr[data-subscription-id="${sub.id}"]`)).toContain("Warehouse sync");
    expect((await server.api("GET", `/public/v1/webhook-subscriptions/${sub.id}`)).data).toMatchObject({ description: "Warehouse sync", target_url: r.url, events: ["contact.deleted"] });
    expect(problems).toEqual([]);
  }, SLOW);
});

describe("a delivery's page", () => {
  test("names an answer the receiver compressed anyway (kept as sent, never unpacked) instead of showing its bytes; a plain answer is shown as text", async () => {
    const r = receiver("/packed");
    r.respond((_, index) => (index === 0 ? new Response(gzipSync("busy ".repeat(50)), { status: 503, headers: { "content-encoding": "gzip" } }) : new Response("thanks")));
    const sub = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: r.url, events: ["contact.created"] })).data;
    await server.api("POST", "/public/v1/contacts", { first_name: "Packed" });
    const delivery = await waitFor(async () => {
      const [found] = (await server.api("GET", `/public/v1/webhook-deliveries?subscription_id=${sub.id}`)).data;
      return found?.status === "succeeded" && found;
    }, "the retried delivery to succeed");
    await page.goto(url(`/console/deliveries/${delivery.id}`));
    const attempts = page.locator("article.attempt");
    expect(await attempts.count()).toBe(2);
    // Newest first: the plain answer, then the compressed one.
    expect(await attempts.nth(0).locator("pre.body").textContent()).toBe("thanks");
    expect({ note: await attempts.nth(1).locator(".packed-body").textContent(), bodies: await attempts.nth(1).locator("pre.body").count() }).toEqual({
      note: "Compressed by the receiver (gzip): kept as sent, not unpacked.",
      bodies: 0,
    });
    expect(problems).toEqual([]);
  }, SLOW);

  test("Retry now while its subscription's 32 attempts are under way says so in words on the delivery's page (503, Retry-After until the oldest attempt's timeout), sends nothing, and works once they end", async () => {
    const { r, sub, settled } = await succeededDelivery("/hung", "Slow shop");
    r.hold();
    // One commit makes them due together: one claim round takes them all, as in test/webhooks/history.test.ts.
    await server.api("POST", "/public/v1/contacts/batch", { items: Array.from({ length: MAX_PER_SUBSCRIPTION }, (_, i) => ({ first_name: `Held ${i}` })) });
    await waitFor(() => r.received.length === 1 + MAX_PER_SUBSCRIPTION, "the subscription's every attempt open at the receiver");
    await page.goto(url(`/console/deliveries/${settled.id}`));
    const [answer] = await Promise.all([page.waitForNavigation(), page.click("button:has-text('Retry now')")]);
    const shown = {
      status: answer?.status(),
      retryAfter: await answer?.headerValue("retry-after"),
      heading: await page.textContent("h1"),
      notices: await page.locator(".notice").evaluateAll((boxes) => boxes.map((box) => `${box.getAttribute("role")}: ${box.textContent}`)),
      retryButton: await page.locator("button:has-text('Retry now')").count(),
    };
    expect(shown).toEqual({
      status: 503,
      // The seconds until the oldest of the attempts under way reaches the delivery timeout, at least 1.
      retryAfter: expect.stringMatching(/^[1-9][0-9]*$/),
      heading: "contact.created deliverySucceeded",
      notices: [`alert: Not retried: the subscription \u2068Slow shop\u2069 already has ${MAX_PER_SUBSCRIPTION} deliveries being sent, the most sent at once to one receiver. Nothing was sent; press Retry now again in a moment.`],
      retryButton: 1,
    });
    expect(problems.splice(0)).toEqual(["Failed to load resource: the server responded with a status of 503 (Service Unavailable)"]);
    expect(r.received.length).toBe(1 + MAX_PER_SUBSCRIPTION);
    expect((await server.api("GET", `/public/v1/webhook-deliveries/${settled.id}`)).data.attempts).toBe(1);
    await shoot(page, "delivery-retry-busy");
    r.release();
    await waitFor(async () => (await server.api("GET", `/public/v1/webhook-deliveries?subscription_id=${sub.id}&status=pending`)).data.length === 0, "the held attempts to end");
    await Promise.all([page.waitForURL(url(`/console/deliveries/${settled.id}?retried=1`)), page.click("button:has-text('Retry now')")]);
    expect(r.received.length).toBe(2 + MAX_PER_SUBSCRIPTION);
    expect(problems).toEqual([]);
  }, SLOW);

  test("Retry now on a delivery whose subscription is paused, disabled or deleted (since its page was shown) says what to do in the console (409), not the API's route, and sends nothing", async () => {
    const { r, sub, settled } = await succeededDelivery("/stopped", "Stopped shop");
    const refusedRetry = async (meanwhile = async () => {}) => {
      await page.goto(url(`/console/deliveries/${settled.id}`));
      await meanwhile();
      const [answer] = await Promise.all([page.waitForNavigation(), page.click("button:has-text('Retry now')")]);
      return {
        status: answer?.status(),
        heading: await page.textContent("h1"),
        notices: await page.locator(".notice").evaluateAll((boxes) => boxes.map((box) => `${box.getAttribute("role")}: ${box.textContent}`)),
        retryButton: await page.locator("button:has-text('Retry now')").count(),
      };
    };
    const paused = await refusedRetry(() => server.api("POST", `/public/v1/webhook-subscriptions/${sub.id}/pause`));
    await server.api("POST", `/public/v1/webhook-subscriptions/${sub.id}/resume`);
    await server.runtime.db.write((tx) => disableSubscription(tx, sub.id, "every attempt failed", Date.now(), null));
    const disabled = await refusedRetry();
    // Deleted after its page was shown: the page shows no Retry now once it is gone.
    const deleted = await refusedRetry(() => server.api("DELETE", `/public/v1/webhook-subscriptions/${sub.id}`));
    expect({ paused, disabled, deleted }).toEqual({
      paused: {
        status: 409,
        heading: "contact.created deliverySucceeded",
        notices: [
          "alert: Not retried: the subscription \u2068Stopped shop\u2069 is paused, so nothing was sent. Resume it with its Resume button on the Subscriptions page (its pending deliveries then go out), then press Retry now again if this one still needs sending.",
        ],
        // The page it comes back to shows it paused, with no Retry now to press again.
        retryButton: 0,
      },
      disabled: {
        status: 409,
        heading: "contact.created deliverySucceeded",
        notices: ["alert: Not retried: the subscription \u2068Stopped shop\u2069 is disabled (every attempt failed), so nothing was sent. Enable it with its Enable button on the Subscriptions page, then press Retry now again."],
        retryButton: 1,
      },
      deleted: {
        status: 409,
        heading: "contact.created deliverySucceeded",
        notices: [`alert: Not retried: the subscription to \u2068${r.url}\u2069 was deleted, so nothing can be sent for this delivery any more.`],
        retryButton: 0,
      },
    });
    expect(problems.splice(0)).toEqual(Array(3).fill("Failed to load resource: the server responded with a status of 409 (Conflict)"));
    expect(r.received.length).toBe(1);
  }, SLOW);

  test("a delivery whose subscription was deleted offers no Retry now, and says why in its place", async () => {
    const { r, sub, settled } = await succeededDelivery("/gone", "Gone shop");
    await server.api("DELETE", `/public/v1/webhook-subscriptions/${sub.id}`);
    await page.goto(url(`/console/deliveries/${settled.id}`));
    const shown = {
      retryButton: await page.locator("button:has-text('Retry now')").count(),
      retryForm: await page.locator(`form[action="/console/deliveries/${settled.id}/retry"]`).count(),
      said: await page.textContent(".retry-gone"),
    };
    expect(shown).toEqual({ retryButton: 0, retryForm: 0, said: "No Retry now: its subscription was deleted, so nothing can be sent for this delivery any more." });
    await shoot(page, "delivery-subscription-deleted");
    expect(problems).toEqual([]);
    expect(r.received.length).toBe(1);
  }, SLOW);

  test("Retry now while 16 retries made by hand are under way says so in words too, and sends nothing", async () => {
    const r = receiver("/manual");
    const sub = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: r.url, events: ["contact.created"] })).data;
    await server.api("POST", "/public/v1/contacts/batch", { items: Array.from({ length: MAX_MANUAL_ATTEMPTS + 1 }, (_, i) => ({ first_name: `Manual ${i}` })) });
    const [extra, ...settled] = await waitFor(async () => {
      const found = (await server.api("GET", `/public/v1/webhook-deliveries?subscription_id=${sub.id}&per_page=100`)).data;
      return found.length === MAX_MANUAL_ATTEMPTS + 1 && found.every((d: { status: string }) => d.status === "succeeded") && found;
    }, "the subscription's deliveries to succeed");
    r.hold();
    const retries = settled.map((d: { id: string }) => server.api("POST", `/public/v1/webhook-deliveries/${d.id}/retry`));
    await waitFor(() => r.received.length === 2 * MAX_MANUAL_ATTEMPTS + 1, "every manual attempt open at the receiver");
    await page.goto(url(`/console/deliveries/${extra.id}`));
    const [answer] = await Promise.all([page.waitForNavigation(), page.click("button:has-text('Retry now')")]);
    const shown = { status: answer?.status(), notices: await page.locator(".notice").evaluateAll((boxes) => boxes.map((box) => `${box.getAttribute("role")}: ${box.textContent}`)) };
    expect(shown).toEqual({
      status: 503,
      notices: [`alert: Not retried: ${MAX_MANUAL_ATTEMPTS} retries made by hand are being sent, the most at once. Nothing was sent; press Retry now again in a moment.`],
    });
    expect(problems.splice(0)).toEqual(["Failed to load resource: the server responded with a status of 503 (Service Unavailable)"]);
    expect(r.received.length).toBe(2 * MAX_MANUAL_ATTEMPTS + 1);
    r.release();
    await Promise.all(retries);
  }, SLOW);
});
