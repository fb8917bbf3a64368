import { afterEach, describe, expect, test } from "bun:test";
import { startRotation } from "../../console/subscriptions/service.ts";
import { markRotationCompleted } from "../../console/subscriptions/store.ts";
import { createOperator, inviteOperator, issueSetupCode, OPERATOR_LINK_TTL_MS, SETUP_CODE_TTL_MS } from "../../server/operators/service.ts";
import type { Db } from "../../server/db/sql.ts";
import { pruneHistory, startRetentionJob } from "../../server/webhooks/retention.ts";
import { insertAttempt } from "../../server/webhooks/store.ts";
import { search } from "../../console/search/service.ts";
import { tablesHolding } from "../support/personal-data.ts";
import { queryPlan, type Captured } from "../support/query-plans.ts";
import { addStoredDeliveries, addStoredSubscription, settledDeliveries, startReceiver, waitFor, webhookHarness, type Receiver, type WebhookHarness } from "./support.ts";

const DAY = 24 * 60 * 60 * 1000;
let h: WebhookHarness;
let r: Receiver;
afterEach(async () => {
  await h?.shutdown();
  await r?.stop();
});

const count = async (table: string) => (await h.rt.db.get<{ n: number }>(`SELECT count(*) AS n FROM ${table}`))!.n;

describe("retention", () => {
  test("finished deliveries, their attempts and unreferenced events older than the retention are pruned; pending ones stay", async () => {
    h = await webhookHarness({ deliveryRetentionDays: 30, retrySchedule: [3600] });
    r = startReceiver();
    const okSub = await h.subscribe(r.url, ["contact.created"]);
    const failing = startReceiver("/failing");
    failing.respond(() => new Response("later", { status: 503 }));
    const pendingSub = await h.subscribe(failing.url, ["contact.updated"]);
    const contact = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).body.data;
    await h.json("PATCH", `/public/v1/contacts/${contact.id}`, { body: { first_name: "Ada B" } });
    await h.json("POST", "/public/v1/accounts", { body: { name: "Acme" }, headers: { "idempotency-key": "acc-1" } });
    // An event no subscription wanted: no delivery refers to it.
    await h.json("DELETE", `/public/v1/contacts/${contact.id}`);
    const deliveries = await waitForAttempts(h);
    await failing.stop();
    expect(deliveries.map((d) => [d.subscription_id, d.status]).sort()).toEqual([[okSub.id, "succeeded"], [pendingSub.id, "pending"]].sort());
    expect(await Promise.all([count("events"), count("webhook_deliveries"), count("webhook_delivery_attempts"), count("idempotency_keys"), count("webhook_attempt_stats")])).toEqual([4, 2, 2, 1, 2]);

    // Hourly attempt statistics are kept 7 days and an hour, the longest stats window.
    expect(await pruneHistory(h.rt, Date.now() + 7 * DAY)).toEqual({ deliveries: 0, events: 0, idempotency_keys: 1, attempt_stats: 0, tombstone_emails: 0, tombstones: 0, rotations_without_replacement: 0, expired_links: 0 });
    expect(await pruneHistory(h.rt, Date.now() + 29 * DAY)).toEqual({ deliveries: 0, events: 0, idempotency_keys: 0, attempt_stats: 2, tombstone_emails: 0, tombstones: 0, rotations_without_replacement: 0, expired_links: 0 });
    expect(await pruneHistory(h.rt, Date.now() + 31 * DAY)).toEqual({ deliveries: 1, events: 3, idempotency_keys: 0, attempt_stats: 0, tombstone_emails: 0, tombstones: 0, rotations_without_replacement: 0, expired_links: 0 });
    expect(await Promise.all([count("events"), count("webhook_deliveries"), count("webhook_delivery_attempts")])).toEqual([1, 1, 1]);
    // The deleted contact's tombstone outlives the delivery history: 90 days by default.
    expect(await count("tombstones")).toBe(1);
    expect(await pruneHistory(h.rt, Date.now() + 89 * DAY)).toMatchObject({ tombstones: 0 });
    expect(await pruneHistory(h.rt, Date.now() + 91 * DAY)).toMatchObject({ tombstones: 1 });
    expect(await count("tombstones")).toBe(0);
    const [left] = await h.deliveries();
    expect(left).toMatchObject({ subscription_id: pendingSub.id, status: "pending" });
  });
});

async function waitForAttempts(harness: WebhookHarness): Promise<any[]> {
  for (;;) {
    const list = await harness.deliveries();
    if (list.length === 2 && list.every((d) => d.attempts === 1)) return list;
    await Bun.sleep(5);
  }
}

describe("retention: a deleted contact's email", () => {
  test("a tombstone keeps the email its contact had only for the delivery retention after the delete, as the contact's events do: past it the run forgets it and Find finds the contact by it no more; a newer deletion keeps it", async () => {
    h = await webhookHarness({ deliveryRetentionDays: 30 });
    const deleted: Record<string, string> = {};
    for (const email of ["old.gone@example.com", "new.gone@example.com"]) {
      deleted[email] = (await h.json("POST", "/public/v1/contacts", { body: { email } })).body.data.id;
      expect((await h.json("DELETE", `/public/v1/contacts/${deleted[email]}`)).status).toBe(204);
    }
    // The older contact was made and deleted 31 days ago: its events and its deletion are that old.
    const monthAgo = Date.now() - 31 * DAY;
    await h.rt.db.run("UPDATE events SET created_at = ? WHERE subject_id = ?", [monthAgo, deleted["old.gone@example.com"]!]);
    await h.rt.db.run("UPDATE tombstones SET deleted_at = ? WHERE id = ?", [monthAgo, deleted["old.gone@example.com"]!]);
    const emails = () => h.rt.db.all("SELECT id, email FROM tombstones ORDER BY id");
    const found = (email: string) => search(h.rt.db, email, "operator");
    const statements: Captured[] = [];
    const write = h.rt.db.write.bind(h.rt.db);
    h.rt.db.write = <T>(work: (tx: Db) => Promise<T>): Promise<T> =>
      write((tx) => work({ dialect: tx.dialect, all: tx.all.bind(tx), get: tx.get.bind(tx), run: (sql, params = []) => (statements.push({ sql, params: [...params] }), tx.run(sql, params)) }));

    expect(await pruneHistory(h.rt)).toEqual({ deliveries: 0, events: 2, idempotency_keys: 0, attempt_stats: 0, tombstone_emails: 1, tombstones: 0, rotations_without_replacement: 0, expired_links: 0 });
    expect(await emails()).toEqual([
      { id: deleted["old.gone@example.com"], email: null },
      { id: deleted["new.gone@example.com"], email: "new.gone@example.com" },
    ]);
    // The older contact's email is gone from the database, as README's personal data table says.
    expect(await tablesHolding(h.rt.db, Object.keys(deleted))).toEqual({ "old.gone@example.com": {}, "new.gone@example.com": { events: 1, tombstones: 1 } });
    expect(await found("old.gone@example.com")).toEqual({ nothing: "No contact has the email \u2068old.gone@example.com\u2069." });
    expect(await found("new.gone@example.com")).toEqual({ location: `/console/contacts/${deleted["new.gone@example.com"]}` });
    // The tombstone itself stays for its own retention, listed and found by its id.
    expect(await Promise.all(Object.values(deleted).map((id) => found(id)))).toEqual(Object.values(deleted).map((id) => ({ location: `/console/contacts/${id}` })));
    expect((await h.json("GET", "/public/v1/contacts/deleted")).body.data.map((t: { id: string }) => t.id).toSorted()).toEqual(Object.values(deleted).toSorted());
    if (h.rt.db.dialect === "sqlite") {
      // Found through the index of the tombstones holding an email, by deletion time: not by reading every tombstone.
      const forgetting = statements.filter((c) => /^UPDATE tombstones SET email = NULL/.test(c.sql.trimStart()));
      expect(forgetting.flatMap((c) => queryPlan(h.db.sqlite, c)).filter((line) => /^(SCAN|SEARCH) tombstones\b/.test(line))).toEqual([
        "SEARCH tombstones USING PRIMARY KEY (resource=? AND id=?)",
        "SEARCH tombstones USING INDEX tombstones_email_deleted (deleted_at<?)",
      ]);
    }
  });
});

describe("retention: recent history", () => {
  test("a run keeps settled history younger than the retention period", async () => {
    h = await webhookHarness();
    r = startReceiver();
    await h.subscribe(r.url, ["contact.created"]);
    await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } });
    await settledDeliveries(h);
    expect(await pruneHistory(h.rt)).toEqual({ deliveries: 0, events: 0, idempotency_keys: 0, attempt_stats: 0, tombstone_emails: 0, tombstones: 0, rotations_without_replacement: 0, expired_links: 0 });
    expect(await count("webhook_deliveries")).toBe(1);
  });
});

describe("retention: what the console leaves", () => {
  test("rotations whose new subscription was deleted (unfinished or finished), untouched for the retention period, and expired one-time links are pruned; the others stay", async () => {
    h = await webhookHarness({ deliveryRetentionDays: 30 });
    const subscribe = async (name: string) => (await h.subscribe(`http://127.0.0.1:9/${name}`, ["contact.created"])).id;
    // The wizard's maker must stand when it makes the new subscription.
    const operator = await createOperator(h.rt.db, { email: "wizard@example.com", password: "a long enough password" });
    const rotate = (oldId: string, name: string, now: number) => startRotation(h.rt, operator, oldId, { target_url: `http://127.0.0.1:9/${name}`, description: "", events: ["contact.created"] }, "req-test", now);
    const finish = (id: string, now: number) => h.rt.db.write((tx) => markRotationCompleted(tx, id, now));
    const deleteSubscription = async (id: string) => expect((await h.json("DELETE", `/public/v1/webhook-subscriptions/${id}`)).status).toBe(204);
    const monthAgo = Date.now() - 31 * DAY;
    const abandoned = await rotate(await subscribe("a"), "a-new", monthAgo);
    const underWay = await rotate(await subscribe("b"), "b-new", monthAgo);
    const abandonedToday = await rotate(await subscribe("c"), "c-new", Date.now());
    // Finished a month ago: one whose new subscription is still used, one whose new subscription was deleted since.
    const finishedInUse = await rotate(await subscribe("d"), "d-new", monthAgo);
    const finishedReplaced = await rotate(await subscribe("e"), "e-new", monthAgo);
    const finishedToday = await rotate(await subscribe("f"), "f-new", Date.now());
    for (const { id } of [finishedInUse, finishedReplaced]) await finish(id, monthAgo);
    await finish(finishedToday.id, Date.now());
    for (const { id } of [abandoned, abandonedToday, finishedReplaced, finishedToday]) await deleteSubscription(id);
    await inviteOperator(h.rt.db, "late@example.com", null, Date.now() - OPERATOR_LINK_TTL_MS - 1);
    await inviteOperator(h.rt.db, "soon@example.com", null);
    await issueSetupCode(h.rt.db);
    await issueSetupCode(h.rt.db, Date.now() - SETUP_CODE_TTL_MS - 1);
    expect(await Promise.all([count("subscription_rotations"), count("operator_links"), count("operator_setup_codes")])).toEqual([6, 2, 2]);

    expect(await pruneHistory(h.rt)).toEqual({ deliveries: 0, events: 0, idempotency_keys: 0, attempt_stats: 0, tombstone_emails: 0, tombstones: 0, rotations_without_replacement: 2, expired_links: 2 });
    const rotations = await h.rt.db.all<{ id: string }>("SELECT new_subscription_id AS id FROM subscription_rotations");
    expect(rotations.map((row) => row.id).toSorted()).toEqual([underWay.id, abandonedToday.id, finishedInUse.id, finishedToday.id].toSorted());
    expect(await h.rt.db.all("SELECT email FROM operator_links")).toEqual([{ email: "soon@example.com" }]);
    expect(await count("operator_setup_codes")).toBe(1);
  });
});

describe("retention: stopping", () => {
  const runs: [string, Parameters<typeof webhookHarness>[0], number][] = [
    ["the hourly run", { deliveryRetentionDays: 30 }, 31 * DAY],
    ["the size budget's run", { deliveryHistoryMaxMb: 0.001 }, 0],
  ];
  for (const [run, overrides, age] of runs) {
    test(`a stop during ${run} waits for the write under way, not for the rest of the run`, async () => {
      h = await webhookHarness(overrides);
      const createdAt = Date.now() - age;
      const subscription = await addStoredSubscription(h.rt.db, createdAt);
      await h.rt.db.write((tx) => addStoredDeliveries(tx, subscription, createdAt, "succeeded", 12));
      const write = h.rt.db.write.bind(h.rt.db);
      let stopped: { done: Promise<void> } | null = null;
      // The stop comes while the run's first delete commits.
      h.rt.db.write = async <T>(work: (tx: Db) => Promise<T>): Promise<T> => {
        const result = await write(work);
        if (!stopped && (await count("webhook_deliveries")) < 12) stopped = { done: stop() };
        return result;
      };
      const stop = startRetentionJob(h.rt, { batch: 5 });
      await (await waitFor(() => stopped, "the run's first delete")).done;
      expect(await count("webhook_deliveries")).toBe(7);
    });
  }
});

describe("retention: header sets", () => {
  test("the header sets only pruned attempts used are forgotten, a batch of sets a write, each found unused through an index of the attempts; those a kept attempt shares stay", async () => {
    h = await webhookHarness({ deliveryRetentionDays: 30 });
    const old = Date.now() - 31 * DAY;
    const subscription = await addStoredSubscription(h.rt.db, old);
    await h.rt.db.write(async (tx) => {
      await addStoredDeliveries(tx, subscription, old, "succeeded", 3);
      await addStoredDeliveries(tx, subscription, Date.now(), "succeeded", 1);
    });
    const deliveries = await h.rt.db.all<{ id: string }>("SELECT id FROM webhook_deliveries ORDER BY created_at, id");
    // The same request headers for all; the recent delivery's answer was the first old one's.
    const servers = ["a/1", "b/1", "c/1", "a/1"];
    await h.rt.db.write(async (tx) => {
      for (const [i, { id }] of deliveries.entries()) {
        const request_headers = { "content-type": "application/json", "webhook-id": id, "webhook-timestamp": "1", "webhook-signature": "v1,x" };
        await insertAttempt(tx, { delivery_id: id, attempt: 1, triggered_by: "scheduled", started_at: old, duration_ms: 1, request_headers, response_status: 200, response_headers: { server: servers[i]! }, response_body: null, error: null });
      }
    });
    const headerSets = async () => (await h.rt.db.all<{ headers: string }>("SELECT headers FROM webhook_header_sets ORDER BY id")).map((row) => JSON.parse(row.headers));
    expect(await headerSets()).toEqual([{ "content-type": "application/json" }, { server: "a/1" }, { server: "b/1" }, { server: "c/1" }]);
    const statements: Captured[] = [];
    const write = h.rt.db.write.bind(h.rt.db);
    h.rt.db.write = <T>(work: (tx: Db) => Promise<T>): Promise<T> =>
      write((tx) => work({ dialect: tx.dialect, all: tx.all.bind(tx), get: tx.get.bind(tx), run: (sql, params = []) => (statements.push({ sql, params: [...params] }), tx.run(sql, params)) }));

    expect(await pruneHistory(h.rt, Date.now(), { batch: 1 })).toMatchObject({ deliveries: 3 });
    expect(await headerSets()).toEqual([{ "content-type": "application/json" }, { server: "a/1" }]);
    const forgetting = statements.filter((c) => /^DELETE FROM webhook_header_sets/.test(c.sql.trimStart()));
    expect(forgetting.length).toBeGreaterThan(1);
    if (h.rt.db.dialect === "sqlite") {
      const plans = forgetting.map((c) => queryPlan(h.db.sqlite, c));
      // Every look at the attempts is a probe of one of their header-set indexes, not a read of them all.
      const attemptsRead = plans.flat().filter((line) => /^(SCAN|SEARCH) (a|webhook_delivery_attempts)\b/.test(line));
      expect(attemptsRead.filter((line) => !/^SEARCH a USING COVERING INDEX webhook_delivery_attempts_(request|response)_header_set \(/.test(line))).toEqual([]);
      expect(attemptsRead.length).toBe(2 * forgetting.length);
    }
  });
});

describe("retention: header sets a stopped run left", () => {
  test("a run stopped after its delete of deliveries leaves their header sets to the next run, which forgets them though it deletes no delivery", async () => {
    h = await webhookHarness({ deliveryRetentionDays: 30 });
    const old = Date.now() - 31 * DAY;
    const subscription = await addStoredSubscription(h.rt.db, old);
    await h.rt.db.write((tx) => addStoredDeliveries(tx, subscription, old, "succeeded", 2));
    const deliveries = await h.rt.db.all<{ id: string }>("SELECT id FROM webhook_deliveries ORDER BY id");
    // A receiver answering with the address of the record it made from the event: the person's email.
    await h.rt.db.write(async (tx) => {
      for (const { id } of deliveries) {
        const request_headers = { "content-type": "application/json", "webhook-id": id, "webhook-timestamp": "1", "webhook-signature": "v1,x" };
        await insertAttempt(tx, { delivery_id: id, attempt: 1, triggered_by: "scheduled", started_at: old, duration_ms: 1, request_headers, response_status: 201, response_headers: { location: "https://receiver.example/people/ada@example.com" }, response_body: null, error: null });
      }
    });
    const headerSets = async () => (await h.rt.db.all<{ headers: string }>("SELECT headers FROM webhook_header_sets ORDER BY id")).map((row) => JSON.parse(row.headers));
    expect(await headerSets()).toEqual([{ "content-type": "application/json" }, { location: "https://receiver.example/people/ada@example.com" }]);

    // The service stops while the run's first write, the delete of the deliveries, commits.
    const stopping = new AbortController();
    const write = h.rt.db.write.bind(h.rt.db);
    h.rt.db.write = async <T>(work: (tx: Db) => Promise<T>): Promise<T> => {
      const result = await write(work);
      stopping.abort();
      return result;
    };
    expect(await pruneHistory(h.rt, Date.now(), { signal: stopping.signal })).toMatchObject({ deliveries: 2 });
    h.rt.db.write = write;
    expect(await headerSets()).toHaveLength(2);

    // The run after the restart has no delivery left to delete (only the events the stopped one did not reach).
    expect(await pruneHistory(h.rt, Date.now() + DAY)).toEqual({ deliveries: 0, events: 2, idempotency_keys: 0, attempt_stats: 0, tombstone_emails: 0, tombstones: 0, rotations_without_replacement: 0, expired_links: 0 });
    expect(await headerSets()).toEqual([]);
  });
});
