import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { latestDeliveries } from "../../console/deliveries/service.ts";
import type { Database } from "../../server/db/sql.ts";
import { hourOf } from "../../server/shared/time.ts";
import { countMatchingDeliveries, listDeliveriesPage } from "../../server/webhooks/service.ts";
import { deleteSubscription, type DeliveryFilters, type DeliveryRow } from "../../server/webhooks/store.ts";
import { TEST_BACKEND } from "../support/backend.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { capturing } from "../support/query-plans.ts";
import { addStoredDeliveries, addStoredSubscription } from "./support.ts";

// The deliveries list's meta.total and the console table's total: filtered by kind, subscription,
// status and creation time alone they are summed from the hourly counts (migrations 0015 and 0032),
// the deliveries of the part hours at a time range's ends counted beside them. Each must equal a plain count.
const HOUR = 3_600_000;
const T = Date.UTC(2026, 10, 20, 10);
const STATUSES: DeliveryRow["status"][] = ["pending", "succeeded", "failed"];
const KINDS = ["contact.created", "contact.updated"];

let h: Harness;
const subscriptions: Record<"a" | "b" | "deleted", string> = { a: "", b: "", deleted: "" };
let stored: { subscription_id: string; status: string; created_at: number; event_type: string }[];

beforeAll(async () => {
  h = await createHarness();
  for (const name of Object.keys(subscriptions) as (keyof typeof subscriptions)[]) subscriptions[name] = await addStoredSubscription(h.rt.db, T - HOUR);
  // Deliveries at each hour's first and last millisecond and in between, over five hours.
  for (let hour = 0; hour < 5; hour++) {
    for (const [i, offset] of [0, 1, HOUR / 2, HOUR - 1].entries()) {
      for (const [s, subscription] of [subscriptions.a, subscriptions.b, subscriptions.deleted].entries()) {
        await addStoredDeliveries(h.rt.db, subscription, T + hour * HOUR + offset, STATUSES[(hour + i) % 3]!, 1, KINDS[(hour + i + s) % 2]);
      }
    }
  }
  await deleteSubscription(h.rt.db, subscriptions.deleted);
  stored = await h.rt.db.all("SELECT subscription_id, status, created_at, event_type FROM webhook_deliveries");
});
afterAll(async () => await h.close());

/** plainCount counts the stored deliveries matching the filters one by one. */
function plainCount(filters: DeliveryFilters): number {
  return stored.filter(
    (d) =>
      (filters.subscriptionId === undefined || d.subscription_id === filters.subscriptionId) &&
      (filters.status === undefined || d.status === filters.status) &&
      (filters.eventType === undefined || d.event_type === filters.eventType) &&
      (filters.createdAfter === undefined || d.created_at > filters.createdAfter) &&
      (filters.createdBefore === undefined || d.created_at < filters.createdBefore),
  ).length;
}

const TIMES: Record<string, Pick<DeliveryFilters, "createdAfter" | "createdBefore">> = {
  "any time": {},
  "after an hour's start": { createdAfter: T + HOUR },
  "from an hour's start": { createdAfter: T + HOUR - 1 },
  "after mid-hour": { createdAfter: T + HOUR + HOUR / 2 },
  "before an hour's start": { createdBefore: T + 3 * HOUR },
  "through an hour's start": { createdBefore: T + 3 * HOUR + 1 },
  "before mid-hour": { createdBefore: T + 3 * HOUR + HOUR / 2 },
  "mid-hour to mid-hour, hours apart": { createdAfter: T + HOUR / 2, createdBefore: T + 3 * HOUR + HOUR / 2 },
  "within one hour": { createdAfter: T + HOUR + 5, createdBefore: T + 2 * HOUR - 5 },
  "mid-hour to the next hour's middle": { createdAfter: T + HOUR + HOUR / 2, createdBefore: T + 2 * HOUR + HOUR / 2 },
  "one whole hour": { createdAfter: T + 2 * HOUR - 1, createdBefore: T + 3 * HOUR },
  "before any delivery": { createdBefore: T - HOUR / 2 },
};

/** CountRead is what one count of a read reads: the hourly counts, or the deliveries created in a range (unbounded ends as infinities). */
type CountRead = "hourly counts" | { after: number; before: number };

/** countReads runs a read and lists what each of its counts read. */
async function countReads(read: (db: Database) => Promise<unknown>): Promise<CountRead[]> {
  const spy = capturing(h.rt.db);
  await read(spy.db);
  return spy.captured
    .filter((c) => /count\(\*\)|sum\(n\)/.test(c.sql))
    .map((c) => {
      if (/webhook_delivery_(kind_)?hours/.test(c.sql)) return "hourly counts";
      // The only numbers a count of deliveries is given are its creation-time bounds.
      const bounds = c.params.filter((p): p is number => typeof p === "number");
      return { after: /created_at > \?/.test(c.sql) ? bounds.shift()! : -Infinity, before: /created_at < \?/.test(c.sql) ? bounds.shift()! : Infinity };
    });
}

/** holdsWholeHour tells whether a count read every delivery of some hour (a part hour's count holds none). */
function holdsWholeHour(read: CountRead): boolean {
  return read !== "hourly counts" && (read.after === -Infinity || hourOf(read.after) + 2 * HOUR <= read.before);
}

describe("delivery totals from the hourly counts", () => {
  test("every combination of kind, subscription, status and time range counts what a plain count does, reading no whole hour of deliveries", async () => {
    const counted: Record<string, { total: number; readsWholeHours: boolean }> = {};
    const expected: typeof counted = {};
    for (const [subscriptionLabel, subscriptionId] of [["any", undefined], ["a", subscriptions.a], ["deleted", subscriptions.deleted], ["unknown", "sub_01J00000000000000000000000"]] as const) {
      for (const status of [undefined, ...STATUSES]) {
        for (const [timeLabel, times] of Object.entries(TIMES)) {
          for (const eventType of [undefined, ...KINDS, "webhook.ping"]) {
            const filters = { eventType, subscriptionId, status, ...times };
            const label = `${eventType ?? "any"} kind, ${subscriptionLabel} subscription, ${status ?? "any"} status, ${timeLabel}`;
            let total = 0;
            const reads = await countReads(async (db) => void (total = await countMatchingDeliveries(db, filters)));
            counted[label] = { total, readsWholeHours: reads.some(holdsWholeHour) };
            expected[label] = { total: plainCount(filters), readsWholeHours: false };
          }
        }
      }
    }
    expect(counted).toEqual(expected);
  });

  test("GET /webhook-deliveries reads its meta.total from the hourly counts and the deliveries of the part hours at its time range's end, and equals a plain count", async () => {
    const iso = (at: number) => new Date(at).toISOString();
    const queries: Record<string, Record<string, string>> = {
      unfiltered: {},
      pending: { status: "pending" },
      "a subscription's failed": { subscription_id: subscriptions.a, status: "failed" },
      "created after an hour's last millisecond": { created_after: iso(T + 2 * HOUR - 1) },
      "created after mid-hour": { created_after: iso(T + HOUR + HOUR / 2) },
      "a kind": { event: "contact.created" },
      "a kind's succeeded": { event: "contact.updated", status: "succeeded" },
      "a kind's failed": { event: "contact.updated", status: "failed" },
      "a subscription's kind, created after mid-hour": { subscription_id: subscriptions.a, event: "contact.updated", created_after: iso(T + HOUR + HOUR / 2) },
    };
    const planned = TEST_BACKEND === "sqlite" ? 3 : 1;
    const reads: Record<string, CountRead[]> = {};
    const totals: Record<string, number> = {};
    const plain: Record<string, number> = {};
    for (const [label, query] of Object.entries(queries)) {
      reads[label] = await countReads((db) => listDeliveriesPage(db, h.rt.secrets, { per_page: "1", ...query }));
      totals[label] = (await h.json("GET", `/public/v1/webhook-deliveries?${new URLSearchParams({ per_page: "1", ...query })}`)).body.meta.total;
      plain[label] = plainCount({
        subscriptionId: query.subscription_id,
        status: query.status,
        eventType: query.event,
        createdAfter: query.created_after === undefined ? undefined : Date.parse(query.created_after),
      });
    }
    expect({ reads, totals }).toEqual({
      reads: {
        unfiltered: ["hourly counts"],
        pending: ["hourly counts"],
        "a subscription's failed": ["hourly counts"],
        "created after an hour's last millisecond": ["hourly counts"],
        "created after mid-hour": ["hourly counts", { after: T + HOUR + HOUR / 2, before: T + 2 * HOUR }],
        "a kind": ["hourly counts"],
        "a kind's succeeded": ["hourly counts"],
        // on SQLite planned first (planDeliveryFilters): which index drives, by the other filter's and the kind's counts
        "a kind's failed": Array(planned).fill("hourly counts"),
        "a subscription's kind, created after mid-hour": Array(planned).fill(["hourly counts", { after: T + HOUR + HOUR / 2, before: T + 2 * HOUR }]).flat(),
      },
      totals: plain,
    });
  });

  test("the console's deliveries table counts a time range from the hourly counts and its part hours", async () => {
    // The form's "since" includes its minute (created after the minute's last millisecond before it).
    const reads = await countReads((db) => latestDeliveries(db, { since: "2026-11-20T11:30", until: "2026-11-20T13:30" }));
    const view = await latestDeliveries(h.rt.db, { since: "2026-11-20T11:30", until: "2026-11-20T13:30" });
    const range = { createdAfter: T + HOUR + HOUR / 2 - 1, createdBefore: T + 3 * HOUR + HOUR / 2 };
    expect({ reads, total: view.total }).toEqual({
      reads: ["hourly counts", { after: range.createdAfter, before: T + 2 * HOUR }, { after: T + 3 * HOUR - 1, before: range.createdBefore }],
      total: plainCount(range),
    });
  });
});
