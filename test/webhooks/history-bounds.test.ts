import { describe, expect, test } from "bun:test";
import { ConfigError, loadConfig } from "../../server/config.ts";
import { metricsText } from "../../server/ops/service.ts";
import { HISTORY_SIZE_FRESH_MS, pruneToBudget, recentHistorySize } from "../../server/webhooks/retention.ts";
import { parseExposition } from "../ops/prometheus.ts";
import { settledDeliveries, waitFor, webhookTestScope, type WebhookHarness } from "./support.ts";

const scope = webhookTestScope();
let h: WebhookHarness;

const rows = async (sql: string) => (await h.rt.db.get<{ n: number }>(sql))!.n;

async function createContacts(n: number): Promise<void> {
  for (let i = 0; i < n; i++) expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: `C${i}` } })).status).toBe(201);
}

describe("delivery history bounds: what one attempt stores", () => {
  test("a receiver answering 64 KiB bodies: 1 KiB of each is kept by default, and the header sets are stored once for all attempts", async () => {
    h = await scope.harness();
    const r = scope.receiver();
    r.respond(() => new Response("y".repeat(64 * 1024), { headers: { "content-type": "text/plain", server: "big/1" } }));
    for (let i = 0; i < 3; i++) await h.subscribe(r.url, ["contact.created"]);
    await createContacts(5);
    const deliveries = await settledDeliveries(h);
    expect(deliveries.map((d) => d.status)).toEqual(Array(15).fill("succeeded"));
    for (const d of deliveries) {
      const [attempt] = (await h.delivery(d.id)).attempt_history;
      const sent = r.received.find((x) => x.headers["webhook-id"] === d.id)!;
      expect(attempt).toMatchObject({
        request_headers: {
          "content-type": "application/json",
          "user-agent": sent.headers["user-agent"],
          "webhook-id": d.id,
          "webhook-timestamp": sent.headers["webhook-timestamp"],
          "webhook-signature": sent.headers["webhook-signature"],
        },
        response_headers: { "content-type": "text/plain", "content-length": String(64 * 1024), server: "big/1" },
        response_body: "y".repeat(1024),
      });
    }
    // one set of request headers every attempt sends alike, one set of response headers
    expect([await rows("SELECT count(*) AS n FROM webhook_delivery_attempts"), await rows("SELECT count(*) AS n FROM webhook_header_sets")]).toEqual([15, 2]);
  });

  test("--delivery-response-body-bytes keeps up to 4 KiB, cut on a character boundary; more is refused at start", async () => {
    expect(() => loadConfig(["--delivery-response-body-bytes", "4097"], {})).toThrow(ConfigError);
    expect(() => loadConfig(["--delivery-response-body-bytes", "0"], {})).toThrow(ConfigError);
    h = await scope.harness({ deliveryResponseBodyBytes: 4096 });
    const r = scope.receiver();
    // 4095 ASCII bytes, then a 2-byte character that straddles the limit
    r.respond(() => new Response(`${"a".repeat(4095)}é${"b".repeat(60_000)}`));
    await h.subscribe(r.url, ["contact.created"]);
    await createContacts(1);
    const [delivery] = await settledDeliveries(h);
    expect((await h.delivery(delivery.id)).attempt_history[0].response_body).toBe("a".repeat(4095));
  });
});

describe("delivery history bounds: the size budget", () => {
  test("past --delivery-history-max-mb the oldest finished deliveries are pruned first, pending ones stay, and /metrics reports rows and size", async () => {
    h = await scope.harness({ deliveryHistoryMaxMb: 1, deliveryResponseBodyBytes: 4096, retrySchedule: [3600] });
    const failing = scope.receiver("/failing");
    failing.respond(() => new Response("later", { status: 503 }));
    await h.subscribe(failing.url, ["contact.updated"]);
    const first = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).body.data;
    await h.json("PATCH", `/public/v1/contacts/${first.id}`, { body: { first_name: "Ada B" } });
    await waitFor(() => failing.received.length === 1, "the first attempt of the delivery that stays pending");
    const pendingId = (await h.rt.db.get<{ id: string }>("SELECT id FROM webhook_deliveries"))!.id;
    const r = scope.receiver();
    // Random text: PostgreSQL compresses a repeated letter to almost nothing.
    r.respond(() => new Response(Buffer.from(crypto.getRandomValues(new Uint8Array(6144))).toString("base64")));
    for (let i = 0; i < 10; i++) await h.subscribe(r.url, ["contact.created"]);
    await createContacts(30);
    await waitFor(async () => (await rows("SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'succeeded'")) === 300, "300 deliveries");
    const oldestFirst = (await h.rt.db.all<{ id: string }>("SELECT id FROM webhook_deliveries WHERE status <> 'pending' ORDER BY created_at, id")).map((d) => d.id);
    const before = parseExposition(await metricsText(h.rt));
    expect(before.value("crm_webhook_history_rows", { table: "deliveries" })).toBe(301);
    expect(before.value("crm_webhook_history_rows", { table: "attempts" })).toBe(301);
    expect(before.value("crm_webhook_history_bytes")).toBeGreaterThan(1024 * 1024);

    // Each measure walks the whole history: it is taken on the read lane, before and after the
    // deletes (a batch of 7 a write here), not after each of them.
    const { measures, writes } = counted(h.rt.db);
    const pruned = await pruneToBudget(h.rt, Date.now(), { batch: 7 });
    const kept = (await h.rt.db.all<{ id: string }>("SELECT id FROM webhook_deliveries WHERE status <> 'pending' ORDER BY created_at, id")).map((d) => d.id);
    expect(pruned.deliveries).toBeGreaterThan(0);
    expect(pruned.bytes).toBeLessThanOrEqual(1024 * 1024);
    expect(writes.length).toBeGreaterThanOrEqual(Math.ceil(pruned.deliveries / 7));
    expect(measures.length).toBeGreaterThanOrEqual(2);
    expect(measures.length).toBeLessThan(writes.length / 4);
    // what is left is the newest: the oldest were pruned first
    expect(kept).toEqual(oldestFirst.slice(pruned.deliveries));
    expect((await h.rt.db.get("SELECT status FROM webhook_deliveries WHERE id = ?", [pendingId]))).toEqual({ status: "pending" });
    const after = parseExposition(await metricsText(h.rt));
    expect(after.value("crm_webhook_history_rows", { table: "deliveries" })).toBe(kept.length + 1);
    expect(after.value("crm_webhook_history_bytes")).toBe(pruned.bytes);
  }, 20_000);
});

describe("delivery history bounds: measuring it", () => {
  test("a scrape reuses a measure of the last minute, taken on the read lane (walking the history's pages would hold SQLite's process up); past it, it answers with that one while the next is taken", async () => {
    h = await scope.harness();
    const r = scope.receiver();
    await h.subscribe(r.url, ["contact.created"]);
    await createContacts(2);
    await settledDeliveries(h);
    const { measures } = counted(h.rt.db);
    const now = Date.now();
    const first = await recentHistorySize(h.rt.db, now);
    expect([first.deliveries, first.attempts]).toEqual([2, 2]);
    expect(measures).toEqual(["webhook history size"]);
    await createContacts(1);
    await settledDeliveries(h);
    expect(await recentHistorySize(h.rt.db, now + HISTORY_SIZE_FRESH_MS - 1)).toEqual(first);
    expect(await recentHistorySize(h.rt.db, now + HISTORY_SIZE_FRESH_MS)).toEqual(first);
    const later = await waitFor(async () => {
      const size = await recentHistorySize(h.rt.db, now + HISTORY_SIZE_FRESH_MS);
      return size !== first && size;
    }, "the next measure");
    expect([later.deliveries, later.attempts]).toEqual([3, 3]);
    expect(measures).toEqual(["webhook history size", "webhook history size"]);
  });

  test("a scrape reports the history's rows and bytes measured on the read lane, and the queue", async () => {
    h = await scope.harness({ retrySchedule: [3600] });
    const r = scope.receiver();
    await h.subscribe(r.url, ["contact.created"]);
    await createContacts(2);
    await settledDeliveries(h);
    const { measures } = counted(h.rt.db);
    const scraped = parseExposition(await metricsText(h.rt));
    expect(measures).toEqual(["webhook history size"]);
    expect({
      up: scraped.value("crm_database_up"),
      deliveries: scraped.value("crm_webhook_history_rows", { table: "deliveries" }),
      attempts: scraped.value("crm_webhook_history_rows", { table: "attempts" }),
      queue: scraped.value("crm_webhook_queue_depth"),
    }).toEqual({ up: 1, deliveries: 2, attempts: 2, queue: 0 });
    expect(scraped.value("crm_webhook_history_bytes")).toBeGreaterThan(0);
  });
});

/** counted records the readers of the reads `db` runs on its read lane, and its writes, from now on. */
function counted(db: WebhookHarness["rt"]["db"]): { measures: string[]; writes: number[] } {
  const measures: string[] = [];
  const writes: number[] = [];
  const readAside = db.readAside.bind(db);
  const write = db.write.bind(db);
  db.readAside = (work, reader) => (measures.push(reader), readAside(work, reader));
  db.write = (work) => (writes.push(writes.length), write(work));
  return { measures, writes };
}
