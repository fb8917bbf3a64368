import { Database } from "bun:sqlite";
import type { Db, Database as ServiceDatabase } from "../../server/db/sql.ts";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { contactPage, contactsPage } from "../../console/contacts/service.ts";
import { latestDeliveries } from "../../console/deliveries/service.ts";
import { search } from "../../console/search/service.ts";
import { recentFailures, subscriptionsHealth } from "../../console/subscriptions/health.ts";
import { MIGRATIONS, migrate } from "../../server/db/migrations.ts";
import { ReadLaneFull } from "../../server/db/slow-reads.ts";
import { countMatchingDeliveries, deliveriesAfter, listAllSubscriptions, listDeliveriesPage } from "../../server/webhooks/service.ts";
import { countDeliveries, listDeliveries, type DeliveryFilters } from "../../server/webhooks/store.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { capturing, queryPlan, type Captured } from "../support/query-plans.ts";
import { seedDeliveries } from "./support.ts";

// The console's reads stay fast on a large history only through their indexes (bench/console.ts:
// 1M deliveries, 200k contacts). Their query plans are pinned here, so a missing index fails a test.

let h: Harness;
let subscription: { id: string; target_url: string };
let contactId: string;
let deliveryId: string;
let eventId: string;

beforeAll(async () => {
  // The delivery loop does not run: the seeded deliveries stay as written.
  h = await createHarness({ allowPrivateTargets: true });
  subscription = (await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "http://127.0.0.1:9/hooks", events: ["contact.created"] } })).body.data;
  const contact = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", last_name: "Lovelace", email: "ada@example.com" } })).body.data;
  contactId = contact.id;
  const ids = await seedDeliveries(h.rt.db, subscription, [
    { at: Date.now() - 1000, status: "failed", response_status: 500, contact_id: contactId },
    { at: Date.now() - 2000, status: "succeeded", contact_id: contactId },
  ]);
  deliveryId = ids[0]!;
  eventId = (await h.rt.db.get<{ event_id: string }>("SELECT event_id FROM webhook_deliveries WHERE id = ?", [deliveryId]))!.event_id;
});
afterAll(() => h.close());

/** TABLES_THAT_GROW are read only through an index: a SCAN of one of them would read every row. */
const TABLES_THAT_GROW = /^SCAN (d|webhook_deliveries|events|e|c|contacts|webhook_delivery_attempts|a|webhook_attempt_stats)\b(?! USING)/;

/** plansOf runs a read through a capturing database and returns each statement with its plan. */
async function plansOf(read: (db: ServiceDatabase) => unknown): Promise<{ sql: string; plan: string[] }[]> {
  const spy = capturing(h.rt.db);
  await read(spy.db);
  return spy.captured.map((c: Captured) => ({ sql: c.sql.replace(/\s+/g, " ").trim(), plan: queryPlan(h.db.sqlite, c) }));
}

const READS: [string, (db: ServiceDatabase) => unknown, RegExp[]][] = [
  ["start page charts", async (db) => subscriptionsHealth(db, await listAllSubscriptions(db)), [/SEARCH webhook_delivery_hours USING PRIMARY KEY \(subscription_id=\? AND hour>\?\)/, /SEARCH webhook_attempt_stats USING PRIMARY KEY/]],
  ["latest deliveries", (db) => latestDeliveries(db, {}), [/SCAN d USING INDEX webhook_deliveries_created/, /SEARCH events USING INDEX sqlite_autoindex_events_1/]],
  ["failed deliveries", (db) => latestDeliveries(db, { status: "failed" }), [/SEARCH d USING INDEX webhook_deliveries_unfinished \(status=\?\)/]],
  ["older deliveries", (db) => latestDeliveries(db, { before: `${Date.now()}.dlv_01J00000000000000000000000` }), [/SEARCH d USING INDEX webhook_deliveries_created \(\(created_at,id\)<\(\?,\?\)\)/]],
  // Its total: the hourly counts, and the deliveries of the part hours at the range's ends by their index.
  ["deliveries in a time range", (db) => latestDeliveries(db, { since: "2026-11-20T11:30", until: "2026-11-20T13:30" }), [/SCAN webhook_delivery_hours/, /SEARCH d USING COVERING INDEX webhook_deliveries_created \(created_at>\? AND created_at<\?\)/]],
  // Its total: the kind's hourly counts (migration 0032).
  ["deliveries of one event kind", (db) => latestDeliveries(db, { event: "webhook.ping" }), [/SEARCH d USING INDEX webhook_deliveries_event_type \(event_type=\?\)/, /SEARCH webhook_delivery_kind_hours USING PRIMARY KEY \(event_type=\?\)/]],
  ["deliveries about a contact", (db) => latestDeliveries(db, { contact_id: contactId }), [/SEARCH d USING INDEX webhook_deliveries_event \(event_id=\?\)/, /SEARCH events USING INDEX events_subject \(subject_id=\?\)/]],
  // Migration 0041: the events one request made, by their index, as a contact's are by theirs.
  ["deliveries of one request", (db) => latestDeliveries(db, { request_id: "import-job-42.row-7" }), [/SEARCH d USING INDEX webhook_deliveries_event \(event_id=\?\)/, /SEARCH events USING COVERING INDEX events_request \(request_id=\?\)/]],
  ["failures by reason", (db) => recentFailures(db, subscription.id, "test"), [/SEARCH webhook_deliveries USING INDEX webhook_deliveries_subscription_status \(subscription_id=\? AND status=\? AND created_at>\?\)/]],
  ["a contact's page", (db) => contactPage(db, contactId), [/SEARCH events USING INDEX events_subject \(subject_id=\?\)/, /SEARCH d USING INDEX webhook_deliveries_event \(event_id=\?\)/]],
  ["contacts by name", (db) => contactsPage(db, { q: "Lovelace" }, "test"), [/contacts_full_name|VIRTUAL TABLE/]],
  ["search: delivery, event, contact, email", (db) => Promise.all([deliveryId, eventId, contactId, "ADA@example.com"].map((q) => search(db, q, "operator"))), [/SEARCH c USING INDEX contacts_email \(email=\?\)/]],
  // Migration 0053: a deleted contact's email, on its tombstone.
  ["search: a deleted contact's email", (db) => search(db, "gone@example.com", "operator"), [/SEARCH t USING INDEX tombstones_email \(email=\? AND resource=\?\)/]],
];

describe("the console's reads go through indexes", () => {
  for (const [label, read, expected] of READS) {
    test(label, async () => {
      const plans = await plansOf(read);
      expect(plans.length).toBeGreaterThan(0);
      const lines = plans.flatMap((p) => p.plan);
      const fullScans = plans.filter((p) => p.plan.some((line) => TABLES_THAT_GROW.test(line)));
      expect({ label, fullScans }).toEqual({ label, fullScans: [] });
      for (const pattern of expected) expect({ label, pattern: String(pattern), found: lines.some((line) => pattern.test(line)) }).toEqual({ label, pattern: String(pattern), found: true });
    });
  }
});

describe("the deliveries list filtered by event kind (GET /webhook-deliveries?event=, the console's event filter)", () => {
  /** drivingIndexes names, per statement of a page and its count, the index SQLite walks the deliveries by. */
  async function drivingIndexes(filters: DeliveryFilters): Promise<string[]> {
    const spy = capturing(h.rt.db);
    await listDeliveries(spy.db, filters, { cursor: null, limit: 26, offset: 0 });
    await listDeliveries(spy.db, filters, { cursor: { value: Date.now(), id: "dlv_01J00000000000000000000000" }, limit: 26, offset: 0 });
    await countDeliveries(spy.db, filters);
    return spy.captured.map((c) => /^(?:SEARCH|SCAN) d USING (?:COVERING )?INDEX (\w+)/.exec(queryPlan(h.db.sqlite, c)[0]!)?.[1] ?? "no index");
  }

  // A rare or absent kind read the whole created index, every page; the kind's own index (0021)
  // serves it alone or with a time range. With a filter whose index bounds the walk by its own
  // size (the subscription's deliveries, the unfinished ones, an event's), that index drives as before.
  test("a page (first or by cursor) and its count are read from the kind's index unless another filter's index bounds them", async () => {
    const event = "webhook.ping";
    const cases: [string, DeliveryFilters][] = [
      ["event", { eventType: event }],
      ["event, created_after", { eventType: event, createdAfter: 0 }],
      ["event, since and until", { eventType: event, createdAfter: 0, createdBefore: Date.now() }],
      ["event, status succeeded", { eventType: event, status: "succeeded" }],
      ["event, status failed", { eventType: event, status: "failed" }],
      ["event, subscription_id", { eventType: event, subscriptionId: subscription.id }],
      ["event, event_id", { eventType: event, eventId }],
      ["event, contact", { eventType: event, subjectId: contactId }],
      ["event, request", { eventType: event, requestId: "import-job-42.row-7" }],
    ];
    const found: Record<string, string[]> = {};
    for (const [label, filters] of cases) found[label] = await drivingIndexes(filters);
    const kind = "webhook_deliveries_event_type";
    expect(found).toEqual({
      event: [kind, kind, kind],
      "event, created_after": [kind, kind, kind],
      "event, since and until": [kind, kind, kind],
      "event, status succeeded": [kind, kind, kind],
      "event, status failed": ["webhook_deliveries_unfinished", "webhook_deliveries_unfinished", "webhook_deliveries_unfinished"],
      "event, subscription_id": ["webhook_deliveries_subscription", "webhook_deliveries_subscription", "webhook_deliveries_subscription_status"],
      "event, event_id": ["webhook_deliveries_event", "webhook_deliveries_event", "webhook_deliveries_event"],
      "event, contact": ["webhook_deliveries_event", "webhook_deliveries_event", "webhook_deliveries_event"],
      "event, request": ["webhook_deliveries_event", "webhook_deliveries_event", "webhook_deliveries_event"],
    });
  });
});

describe("the deliveries list by event kind beside a subscription or unfinished status (SQLite keeps no statistics to choose)", () => {
  // Either index is walked, its deliveries' rows read, until a page is found: all of them when the
  // matches are few. The kind drives when it is the smaller, both counted from the hourly counts.
  test("a kind with fewer deliveries than the other filter keeps is read through its own index; a commoner one through the other's; both as a plain query finds them, and the total is summed from the kind's hourly counts", async () => {
    const busy = (await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "http://127.0.0.1:9/busy", events: ["contact.updated"] } })).body.data;
    await seedDeliveries(h.rt.db, busy, [1, 2, 3].map((i) => ({ at: Date.now() - 3000 - i, status: "succeeded" as const })));
    const cases: Record<string, DeliveryFilters> = {
      "webhook.ping of a subscription with 3": { eventType: "webhook.ping", subscriptionId: busy.id },
      "contact.updated (5) of a subscription with 3": { eventType: "contact.updated", subscriptionId: busy.id },
      "webhook.ping, failed (1)": { eventType: "webhook.ping", status: "failed" },
      "contact.updated (5), failed (1)": { eventType: "contact.updated", status: "failed" },
    };
    /** drivingIndexes runs a read and names the index each of its page statements (or a count, should one read the deliveries) walks the deliveries by. */
    async function drivingIndexes(read: (db: ServiceDatabase) => Promise<unknown>): Promise<string[]> {
      const spy = capturing(h.rt.db);
      await read(spy.db);
      const pageAndCount = spy.captured.filter((c) => /^SELECT (d\.\*|count\(\*\) AS n FROM webhook_deliveries d)/.test(c.sql));
      return pageAndCount.map((c) => /^(?:SEARCH|SCAN) d USING (?:COVERING )?INDEX (\w+)/.exec(queryPlan(h.db.sqlite, c)[0]!)?.[1] ?? "no index");
    }
    const found: Record<string, { console: string[]; api: string[]; ids: string[]; total: number }> = {};
    const expected: typeof found = {};
    const kind = "webhook_deliveries_event_type";
    // The list counts only past a full page: a page of 1 with 1 or none tells its own total.
    const indexes: Record<string, { console: string[]; api: string[] }> = {
      "webhook.ping of a subscription with 3": { console: [kind], api: [kind] },
      "contact.updated (5) of a subscription with 3": { console: ["webhook_deliveries_subscription"], api: ["webhook_deliveries_subscription"] },
      "webhook.ping, failed (1)": { console: [kind], api: [kind] },
      "contact.updated (5), failed (1)": { console: ["webhook_deliveries_unfinished"], api: ["webhook_deliveries_unfinished"] },
    };
    for (const [label, filters] of Object.entries(cases)) {
      const page = await deliveriesAfter(h.rt.db, filters, null, 1);
      const query = { event: filters.eventType, ...(filters.subscriptionId ? { subscription_id: filters.subscriptionId } : { status: filters.status }), per_page: "1" };
      found[label] = {
        console: await drivingIndexes(async (db) => [await deliveriesAfter(db, filters, null, 1), await countMatchingDeliveries(db, filters)]),
        api: await drivingIndexes((db) => listDeliveriesPage(db, h.rt.secrets, query)),
        ids: page.data.map((d) => d.id),
        total: await countMatchingDeliveries(h.rt.db, filters),
      };
      const plain = h.db.sqlite
        .query<{ id: string }, string[]>(`SELECT id FROM webhook_deliveries WHERE event_type = ? AND ${filters.subscriptionId ? "subscription_id" : "status"} = ? ORDER BY created_at DESC, id DESC`)
        .all(filters.eventType!, filters.subscriptionId ?? filters.status!);
      expected[label] = { ...indexes[label]!, ids: plain.slice(0, 1).map((d) => d.id), total: plain.length };
    }
    expect(found).toEqual(expected);
  });

  test("the choice is made once for a page and its total: the kind alone is counted once, in the API and the console", async () => {
    const subscriptionId = (await h.rt.db.get<{ id: string }>("SELECT id FROM webhook_subscriptions ORDER BY id LIMIT 1"))!.id;
    const kindCounts = async (read: (db: ServiceDatabase) => Promise<unknown>) => {
      const spy = capturing(h.rt.db);
      await read(spy.db);
      return spy.captured.filter((c) => c.sql.includes("FROM webhook_delivery_kind_hours") && !c.sql.includes("subscription_id")).length;
    };
    expect({
      api: await kindCounts((db) => listDeliveriesPage(db, h.rt.secrets, { event: "webhook.ping", subscription_id: subscriptionId, per_page: "1" })),
      console: await kindCounts((db) => latestDeliveries(db, { event: "webhook.ping", subscription_id: subscriptionId })),
    }).toEqual({ api: 1, console: 1 });
  });
});

/** changeEveryWay changes the migration tests' deliveries dlv_1 to dlv_5 as the service does: a status changed, one kept by an attempt, a recovery and retention. */
function changeEveryWay(db: Database) {
    db.run("UPDATE webhook_deliveries SET status = 'succeeded' WHERE id = 'dlv_4'");
    db.run("UPDATE webhook_deliveries SET status = 'pending', attempts = 2 WHERE id = 'dlv_5'"); // no change of status
    db.run("UPDATE webhook_deliveries SET status = 'pending' WHERE id = 'dlv_3'"); // a recovery
    db.run("DELETE FROM webhook_deliveries WHERE id IN ('dlv_1', 'dlv_2')"); // retention
}

describe("migration 0015", () => {
  let db: Database;
  beforeAll(() => {
    db = new Database(":memory:");
  });
  afterAll(() => db.close());

  test("counts existing deliveries by subscription, hour and status, and from then on its triggers keep the counts equal to the deliveries", () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0015_console_reads.sql");
    migrate(db, MIGRATIONS.slice(0, version));
    const HOUR = 3_600_000;
    const insertEvent = db.query("INSERT INTO events (id, type, payload, created_at) VALUES (?, 'contact.updated', ?, 1)");
    insertEvent.run("evt_a", JSON.stringify({ type: "contact.updated", data: { id: "con_a" } }));
    insertEvent.run("evt_p", JSON.stringify({ type: "webhook.ping", data: { subscription_id: "sub_a" } }));
    const insert = db.query(
      "INSERT INTO webhook_deliveries (id, event_id, event_type, subscription_id, target_url, status, created_at, updated_at) VALUES (?, 'evt_a', 'contact.updated', ?, 'https://x', ?, ?, ?)",
    );
    insert.run("dlv_1", "sub_a", "succeeded", 10 * HOUR + 5, 10 * HOUR + 5);
    insert.run("dlv_2", "sub_a", "succeeded", 10 * HOUR + 7, 10 * HOUR + 7);
    insert.run("dlv_3", "sub_a", "failed", 11 * HOUR, 11 * HOUR);
    insert.run("dlv_4", "sub_b", "pending", 10 * HOUR + 1, 10 * HOUR + 1);
    migrate(db);
    // A count that reaches zero goes: the table never outgrows the deliveries it counts.
    const counts = () => db.query("SELECT subscription_id, hour, status, n FROM webhook_delivery_hours ORDER BY subscription_id, hour, status").all();
    const truth = () =>
      db
        .query("SELECT subscription_id, created_at - created_at % 3600000 AS hour, status, count(*) AS n FROM webhook_deliveries GROUP BY 1, 2, 3 ORDER BY 1, 2, 3")
        .all();
    expect(counts()).toEqual([
      { subscription_id: "sub_a", hour: 10 * HOUR, status: "succeeded", n: 2 },
      { subscription_id: "sub_a", hour: 11 * HOUR, status: "failed", n: 1 },
      { subscription_id: "sub_b", hour: 10 * HOUR, status: "pending", n: 1 },
    ]);
    insert.run("dlv_5", "sub_b", "pending", 10 * HOUR + 2, 10 * HOUR + 2);
    changeEveryWay(db);
    expect(counts()).toEqual(truth());
    expect(counts()).toEqual([
      { subscription_id: "sub_a", hour: 11 * HOUR, status: "pending", n: 1 },
      { subscription_id: "sub_b", hour: 10 * HOUR, status: "pending", n: 1 },
      { subscription_id: "sub_b", hour: 10 * HOUR, status: "succeeded", n: 1 },
    ]);
  });

  test("gives every event the id its data names, and none to those that name none", () => {
    expect(db.query("SELECT id, subject_id FROM events ORDER BY id").all()).toEqual([
      { id: "evt_a", subject_id: "con_a" },
      { id: "evt_p", subject_id: null },
    ]);
  });
});

describe("migration 0032", () => {
  test("counts existing deliveries by kind, subscription, hour and status, and from then on its triggers keep the counts equal to the deliveries", () => {
    const db = new Database(":memory:");
    const version = MIGRATIONS.findIndex((m) => m.name === "0032_delivery_kind_hours.sql");
    migrate(db, MIGRATIONS.slice(0, version));
    const HOUR = 3_600_000;
    db.query("INSERT INTO events (id, type, payload, created_at) VALUES ('evt_a', 'contact.updated', '{}', 1)").run();
    const insert = db.query("INSERT INTO webhook_deliveries (id, event_id, event_type, subscription_id, target_url, status, created_at, updated_at) VALUES (?, 'evt_a', ?, ?, 'https://x', ?, ?, ?)");
    insert.run("dlv_1", "contact.updated", "sub_a", "succeeded", 10 * HOUR + 5, 10 * HOUR + 5);
    insert.run("dlv_2", "contact.created", "sub_a", "succeeded", 10 * HOUR + 7, 10 * HOUR + 7);
    insert.run("dlv_3", "contact.updated", "sub_a", "failed", 11 * HOUR, 11 * HOUR);
    insert.run("dlv_4", "contact.updated", "sub_b", "pending", 10 * HOUR + 1, 10 * HOUR + 1);
    migrate(db);
    const counts = () => db.query("SELECT event_type, subscription_id, hour, status, n FROM webhook_delivery_kind_hours ORDER BY 1, 2, 3, 4").all();
    const truth = () =>
      db.query("SELECT event_type, subscription_id, created_at - created_at % 3600000 AS hour, status, count(*) AS n FROM webhook_deliveries GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4").all();
    expect(counts()).toEqual([
      { event_type: "contact.created", subscription_id: "sub_a", hour: 10 * HOUR, status: "succeeded", n: 1 },
      { event_type: "contact.updated", subscription_id: "sub_a", hour: 10 * HOUR, status: "succeeded", n: 1 },
      { event_type: "contact.updated", subscription_id: "sub_a", hour: 11 * HOUR, status: "failed", n: 1 },
      { event_type: "contact.updated", subscription_id: "sub_b", hour: 10 * HOUR, status: "pending", n: 1 },
    ]);
    insert.run("dlv_5", "contact.updated", "sub_b", "pending", 10 * HOUR + 2, 10 * HOUR + 2);
    changeEveryWay(db);
    expect(counts()).toEqual(truth());
    expect(counts()).toEqual([
      { event_type: "contact.updated", subscription_id: "sub_a", hour: 11 * HOUR, status: "pending", n: 1 },
      { event_type: "contact.updated", subscription_id: "sub_b", hour: 10 * HOUR, status: "pending", n: 1 },
      { event_type: "contact.updated", subscription_id: "sub_b", hour: 10 * HOUR, status: "succeeded", n: 1 },
    ]);
    db.close();
  });
});

describe("console reads: a subscription's failures by reason", () => {
  test("are grouped on the read lane in the operator's turn, off the thread answering requests (they read every failing delivery of 7 days); with no place there, the page goes without them", async () => {
    const readers: string[] = [];
    const readAside = h.rt.db.readAside;
    h.rt.db.readAside = <T>(work: (db: Db) => Promise<T>, reader: string): Promise<T> => (readers.push(reader), readAside.call(h.rt.db, work, reader) as Promise<T>);
    try {
      expect((await recentFailures(h.rt.db, subscription.id, "opr_test"))!.map((f) => [f.reason, f.deliveries, f.latest_delivery_id])).toEqual([["HTTP 500", 1, deliveryId]]);
      expect(readers).toEqual(["opr_test"]);
      h.rt.db.readAside = () => Promise.reject(new ReadLaneFull(32, 32, 0));
      expect(await recentFailures(h.rt.db, subscription.id, "opr_test")).toBeNull();
    } finally {
      h.rt.db.readAside = readAside;
    }
  });
});
