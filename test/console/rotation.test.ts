import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Page } from "playwright-core";
import type { ConsoleSession } from "../../console/model.ts";
import { finishRotation, rotationView, sendRotationTest, startRotation } from "../../console/subscriptions/service.ts";
import { setRotationTestDelivery } from "../../console/subscriptions/store.ts";
import { disableSubscription, setSubscriptionPaused } from "../../server/webhooks/store.ts";
import { startReceiver, waitFor, type Receiver } from "../webhooks/support.ts";
import { addOperator, launchBrowser, refusedConfirmation, seedDeliveries, shoot, signInWithBrowser, startConsoleServer, verifyingReceiver, watchPage, type ConsoleServer } from "./support.ts";

// The rotation wizard end to end, against two real receivers that verify signatures with their own secret.
let server: ConsoleServer;
/** session is the test operator's, for the console's services called directly */
let session: ConsoleSession;
let browser: Awaited<ReturnType<typeof launchBrowser>>;
let page: Page;
let problems: string[];
const receivers: Receiver[] = [];

beforeAll(async () => {
  // A long request timeout: the test holds the new receiver's answer while it looks at the page.
  server = await startConsoleServer({ deliveryTimeoutMs: 20_000 });
  session = { operator: await addOperator(server.runtime.db), csrfToken: "" };
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

const SLOW = 60_000; // browser steps and real deliveries; every wait ends as soon as the page shows the result
const url = (path: string) => `${server.url}${path}`;

function receiver(path: string): Receiver {
  const r = startReceiver(path);
  receivers.push(r);
  return r;
}

/** deliveriesOf lists the deliveries of one event: which subscriptions it went to. */
async function deliveriesOf(eventId: string): Promise<{ subscription_id: string; status: string }[]> {
  return (await server.runtime.db.all<{ subscription_id: string; status: string }>("SELECT subscription_id, status FROM webhook_deliveries WHERE event_id = ? ORDER BY subscription_id", [eventId]));
}

describe("rotation wizard", () => {
  test("replaces a subscription: new URL, signed test ping verified, old one deleted only after that, events reach only the new receiver", async () => {
    const oldReceiver = receiver("/old");
    const newReceiver = receiver("/new");
    const old = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: oldReceiver.url, description: "Billing sync", events: ["contact.created", "contact.updated"] })).data;
    let newSecret: string | null = null;
    const oldChecks = verifyingReceiver(oldReceiver, () => old.secret);
    const newChecks = verifyingReceiver(newReceiver, () => newSecret);

    // (1) pick the subscription to replace
    await page.goto(url("/console/rotations/new"));
    await shoot(page, "rotation-1-pick");
    expect(await page.isChecked(`input[name=from][value="${old.id}"]`)).toBe(true);
    await Promise.all([page.waitForURL(url(`/console/rotations/new?from=${old.id}&kind=url`)), page.click("button:has-text('Next')")]);

    // (2) new URL and events, prefilled from the old subscription
    expect(await page.inputValue("input[name=target_url]")).toBe(oldReceiver.url);
    expect(await page.inputValue("input[name=description]")).toBe("Billing sync");
    expect(await page.locator("input[name=events]:checked").evaluateAll((boxes) => boxes.map((b) => (b as HTMLInputElement).value))).toEqual(["contact.created", "contact.updated"]);
    await shoot(page, "rotation-2-new");
    await page.fill("input[name=target_url]", newReceiver.url);
    await page.click("button:has-text('Create new subscription')");
    await page.waitForSelector("#new-secret");
    newSecret = await page.inputValue("#new-secret");
    expect(newSecret).toMatch(/^whsec_/);
    expect(newSecret).not.toBe(old.secret);
    const rotationId = /\/console\/rotations\/(sub_[0-9A-Z]{26})\/test/.exec(await page.getAttribute("#step-test form", "action") ?? "")![1]!;
    await page.waitForSelector("[data-copy-for=new-secret] button");
    await shoot(page, "rotation-2-created");

    // Before a successful test, deleting the old subscription is impossible: the button is disabled and the server refuses.
    expect(await page.isDisabled("#delete-old")).toBe(true);
    expect(await page.textContent("#delete-locked")).toContain("Available after a successful test delivery");
    const csrf = await page.inputValue("#step-delete input[name=_csrf]");
    const early = await page.request.post(url(`/console/rotations/${rotationId}/delete-old`), { form: { _csrf: csrf, confirm: "yes" }, maxRedirects: 0 });
    expect(early.status()).toBe(409);
    expect(await early.text()).toContain("The old subscription can be deleted only after a test event was delivered successfully to the new one.");

    // Leaving halfway: both subscriptions stay active, and the subscriptions page offers to resume.
    await page.goto(url("/console/subscriptions"));
    expect(await page.locator("#subscriptions .badge-active").count()).toBe(2);
    expect(await page.textContent(".rotation-banner")).toContain(`Rotation in progress from ${oldReceiver.url} to ${newReceiver.url}, at step 3: send a test event.`);
    await shoot(page, "rotation-resume");
    await Promise.all([page.waitForURL(url(`/console/rotations/${rotationId}`)), page.click(".rotation-banner a")]);
    expect(await page.content()).not.toContain(newSecret);

    // (3) the test event goes to the new subscription only, and its delivery shows live until it succeeds
    expect(await page.textContent(".stepper li.current")).toBe("3Test");
    newReceiver.hold(); // the receiver answers only once the page shows the ping waiting
    await Promise.all([page.waitForURL(url(`/console/rotations/${rotationId}#step-test`)), page.click("#send-test")]);
    expect(await page.textContent("#test-result .test-status")).toContain("Pending");
    await page.evaluate(() => ((window as any).__sameDocument = true));
    newReceiver.release();
    await page.waitForSelector("#test-result.test-succeeded", { timeout: 15_000 });
    expect(await page.evaluate(() => (window as any).__sameDocument)).toBe(true);
    expect(await page.textContent("#test-result .test-status")).toContain("Succeeded");
    expect(JSON.parse((await page.textContent("#test-result pre.body"))!)).toEqual({ verified: true, received: "webhook.ping" });
    const pings = newReceiver.received.filter((r) => r.json?.type === "webhook.ping");
    expect(pings.length).toBe(1);
    expect(newChecks.verified).toEqual([pings[0]!.headers["webhook-id"]!]);
    expect(pings[0]!.json.data).toEqual({ subscription_id: rotationId });
    expect(oldReceiver.received).toEqual([]);
    await shoot(page, "rotation-3-tested");

    // (4) delete old: enabled by the live status, without a reload; asks for confirmation
    expect(await page.textContent(".stepper li.current")).toBe("4Delete old");
    expect(await page.isDisabled("#delete-old")).toBe(false);
    await page.click("#delete-old");
    expect(page.url()).toBe(url(`/console/rotations/${rotationId}#step-test`)); // the unticked confirmation stops the form
    // Sent unticked all the same, the box is marked with the reason, as any refused field is.
    expect(await refusedConfirmation(page, "#delete-old")).toEqual({ status: 422, id: "field-confirm", invalid: "true", reason: "must be ticked", summary: [["confirm must be ticked.", "#field-confirm"]] });
    expect(problems.splice(0)).toEqual(["Failed to load resource: the server responded with a status of 422 (Unprocessable Entity)"]);
    await page.check("input[name=confirm]");
    await Promise.all([page.waitForURL(url(`/console/rotations/${rotationId}`)), page.click("#delete-old")]);

    // (5) summary
    expect(await page.textContent("#summary h2")).toContain("Rotation finished");
    expect(await page.textContent("#summary")).toContain(`${oldReceiver.url} (deleted)`);
    await shoot(page, "rotation-5-summary");
    const gone = await fetch(url(`/public/v1/webhook-subscriptions/${old.id}`), { headers: { authorization: `Bearer ${server.token}` } });
    expect(gone.status).toBe(404);
    const remaining = (await server.api("GET", "/public/v1/webhook-subscriptions")).data;
    expect(remaining.map((s: any) => [s.id, s.target_url, s.events])).toEqual([[rotationId, newReceiver.url, ["contact.created", "contact.updated"]]]);

    // New contact events reach only the new receiver, signed with the new secret.
    const contact = (await server.api("POST", "/public/v1/contacts", { first_name: "After", email: "after@example.com" })).data;
    const received = await waitFor(() => newReceiver.received.find((r) => r.json?.type === "contact.created" && r.json.data.id === contact.id), "contact.created at the new receiver");
    const eventId = (await server.runtime.db.get<{ event_id: string }>("SELECT event_id FROM webhook_deliveries WHERE id = ?", [received.headers["webhook-id"]!]))!.event_id;
    await waitFor(async () => (await deliveriesOf(eventId)).every((d) => d.status === "succeeded"), "delivery recorded as succeeded");
    expect(await deliveriesOf(eventId)).toEqual([{ subscription_id: rotationId, status: "succeeded" }]);
    expect(newChecks.verified).toContain(received.headers["webhook-id"]!);
    expect(oldReceiver.received).toEqual([]);
    expect(oldChecks.verified).toEqual([]);
    expect(problems).toEqual([]);
  }, SLOW);

  test("a test event the new receiver refuses shows its answer, and deleting the old subscription stays locked", async () => {
    const oldReceiver = receiver("/kept");
    const broken = receiver("/broken");
    broken.respond(() => Response.json({ error: "signature mismatch" }, { status: 401 }));
    const old = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: oldReceiver.url, events: ["contact.deleted"] })).data;
    await page.goto(url(`/console/rotations/new?from=${old.id}`));
    await page.fill("input[name=target_url]", broken.url);
    await page.click("button:has-text('Create new subscription')");
    await page.waitForSelector("#send-test");
    await page.click("#send-test");
    // FAST_WEBHOOKS retries twice within milliseconds: the delivery ends as failed.
    await page.waitForSelector("#test-result.test-failed", { timeout: 15_000 });
    expect(await page.textContent("#test-result")).toContain("The new receiver did not accept the test event.");
    expect(await page.textContent("#test-result dd code")).toBe("401");
    expect(JSON.parse((await page.textContent("#test-result pre.body"))!)).toEqual({ error: "signature mismatch" });
    expect(await page.isDisabled("#delete-old")).toBe(true);
    expect(await page.isDisabled("input[name=confirm]")).toBe(true);
    await shoot(page, "rotation-3-failed");
    const kept = await server.api("GET", `/public/v1/webhook-subscriptions/${old.id}`);
    expect(kept.data.status).toBe("active");
    // Starting the wizard again for the same subscription resumes this rotation instead of creating another.
    await page.goto(url(`/console/rotations/new?from=${old.id}`));
    expect(page.url()).toMatch(/\/console\/rotations\/sub_[0-9A-Z]{26}$/);
    expect((await server.api("GET", "/public/v1/webhook-subscriptions")).meta.total).toBe(3);
    expect(problems).toEqual([]);
  }, SLOW);

  test("a test event refused because the new subscription is disabled comes back to the wizard (409) saying what to do in the console, not the API's route, and sends nothing", async () => {
    const old = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/stopped-old", events: ["contact.created"] })).data;
    const { id } = await startRotation(server.runtime, session.operator, old.id, { target_url: "http://127.0.0.1:9/stopped-new", description: "Stopped replacement", events: ["contact.created"] }, "req-test");
    await page.goto(url(`/console/rotations/${id}`));
    await server.runtime.db.write((tx) => disableSubscription(tx, id, "every attempt failed", Date.now(), null));
    const [answer] = await Promise.all([page.waitForNavigation(), page.click("#send-test")]);
    expect({ status: answer?.status(), refusal: await page.locator("#refusal").allTextContents(), sendTest: await page.locator("#send-test").count() }).toEqual({
      status: 409,
      refusal: ["No test event was sent: the subscription \u2068Stopped replacement\u2069 is disabled (every attempt failed). Enable it with its Enable button on the Subscriptions page, then send the test event again."],
      sendTest: 1,
    });
    expect(problems.splice(0)).toEqual(["Failed to load resource: the server responded with a status of 409 (Conflict)"]);
    expect(await server.runtime.db.all("SELECT id FROM webhook_deliveries WHERE subscription_id = ?", [id])).toEqual([]);
  }, SLOW);

  test("a test event to the new subscription paused meanwhile is not sent to wait for its resume: the wizard comes back (409) saying to resume it first", async () => {
    const old = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/held-old", events: ["contact.created"] })).data;
    const { id } = await startRotation(server.runtime, session.operator, old.id, { target_url: "http://127.0.0.1:9/held-new", description: "Held replacement", events: ["contact.created"] }, "req-test");
    await page.goto(url(`/console/rotations/${id}`));
    await server.runtime.db.write((tx) => setSubscriptionPaused(tx, id, Date.now(), Date.now(), null));
    const [answer] = await Promise.all([page.waitForNavigation(), page.click("#send-test")]);
    expect({ status: answer?.status(), refusal: await page.locator("#refusal").allTextContents(), sendTest: await page.locator("#send-test").count() }).toEqual({
      status: 409,
      refusal: [
        "No test event was sent: the subscription \u2068Held replacement\u2069 is paused, and the test event would wait until it is resumed. Resume it with its Resume button on the Subscriptions page (its pending deliveries then go out), then send the test event again.",
      ],
      sendTest: 1,
    });
    expect(problems.splice(0)).toEqual(["Failed to load resource: the server responded with a status of 409 (Conflict)"]);
    expect(await server.runtime.db.all("SELECT id FROM webhook_deliveries WHERE subscription_id = ?", [id])).toEqual([]);
  }, SLOW);

  test("a rotation finished while its page is read shows as under way or done, never as under way with the old subscription gone", async () => {
    const { runtime } = server;
    const ids: string[] = [];
    for (let n = 0; n < 20; n++) {
      const old = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: `http://127.0.0.1:9/finished-old-${n}`, events: ["contact.created"] })).data;
      const { id } = await startRotation(runtime, session.operator, old.id, { target_url: `http://127.0.0.1:9/finished-new-${n}`, description: "", events: ["contact.created"] }, "req-test");
      const [tested] = await seedDeliveries(runtime.db, { id, target_url: `http://127.0.0.1:9/finished-new-${n}` }, [{ at: Date.now(), status: "succeeded" }]);
      await setRotationTestDelivery(runtime.db, id, tested!, Date.now());
      ids.push(id);
    }
    let finishing = true;
    const halfway: string[] = [];
    const finish = async () => {
      try {
        for (const id of ids) await finishRotation(runtime, id, true);
      } finally {
        finishing = false;
      }
    };
    const look = async () => {
      while (finishing) {
        for (const view of await Promise.all(ids.map((id) => rotationView(runtime.db, id)))) {
          if (view.step === "test" && view.old.subscription === null) halfway.push(view.id);
        }
        // On SQLite every read is answered within this turn: the next turn lets the writes commit.
        await new Promise((resolve) => setImmediate(resolve));
      }
    };
    await Promise.all([finish(), look(), look()]);
    expect(halfway).toEqual([]);
    expect((await Promise.all(ids.map((id) => rotationView(runtime.db, id)))).map((view) => view.step)).toEqual(ids.map(() => "done"));
  });

  test("a test event the rotation cannot record is not sent either", async () => {
    const { runtime } = server;
    const { db } = runtime;
    const old = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/unrecorded-old", events: ["contact.created"] })).data;
    const { id } = await startRotation(runtime, session.operator, old.id, { target_url: "http://127.0.0.1:9/unrecorded-new", description: "", events: ["contact.created"] }, "req-test");
    // The database refuses to record the test on the rotation, as a fault or a crash at that moment would leave it.
    if (db.dialect === "sqlite") {
      await db.run("CREATE TRIGGER refuse_rotation_test BEFORE UPDATE OF test_delivery_id ON subscription_rotations BEGIN SELECT RAISE(ABORT, 'refused'); END");
    } else {
      await db.run("CREATE FUNCTION refuse_rotation_test() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$");
      await db.run("CREATE TRIGGER refuse_rotation_test BEFORE UPDATE OF test_delivery_id ON subscription_rotations FOR EACH ROW EXECUTE FUNCTION refuse_rotation_test()");
    }
    try {
      await expect(sendRotationTest(runtime, session, id, crypto.randomUUID(), { requestId: "req_test", madeBy: null })).rejects.toThrow("refused");
    } finally {
      await db.run(db.dialect === "sqlite" ? "DROP TRIGGER refuse_rotation_test" : "DROP TRIGGER refuse_rotation_test ON subscription_rotations");
      if (db.dialect === "postgres") await db.run("DROP FUNCTION refuse_rotation_test()");
    }
    expect(await db.all("SELECT event_type FROM webhook_deliveries WHERE subscription_id = ?", [id])).toEqual([]);
    expect((await rotationView(db, id)).test).toBeNull();

    await sendRotationTest(runtime, session, id, crypto.randomUUID(), { requestId: "req_test", madeBy: null });
    const view = await rotationView(db, id);
    expect(await db.all("SELECT id, event_type FROM webhook_deliveries WHERE subscription_id = ?", [id])).toEqual([{ id: view.test!.id, event_type: "webhook.ping" }]);
  });
});
