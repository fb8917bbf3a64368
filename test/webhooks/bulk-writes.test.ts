import { afterEach, describe, expect, test } from "bun:test";
import type { Db } from "../../server/db/sql.ts";
import { disableSubscription } from "../../server/webhooks/store.ts";
import { onNextCommit } from "../foundation/support.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { addStoredDeliveries, addStoredSubscription } from "./support.ts";

// A recovery changes at most batchRows rows per write, so other writes (on SQLite every request)
// take their turns in between; here 10 per write, with 25 rows: three writes.

/** CHUNK is the rows one write changes at most here (BATCH_ROWS, 1,000, in production). */
const CHUNK = 10;
const HOUR = 3_600_000;

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** statuses counts a subscription's deliveries by status and last_error. */
async function statuses(db: Db, subscriptionId: string): Promise<Record<string, number>> {
  const rows = await db.all<{ status: string; last_error: string | null; n: number }>(
    "SELECT status, last_error, count(*) AS n FROM webhook_deliveries WHERE subscription_id = ? GROUP BY status, last_error ORDER BY status, last_error",
    [subscriptionId],
  );
  return Object.fromEntries(rows.map((row) => [`${row.status}${row.last_error === null ? "" : `: ${row.last_error}`}`, Number(row.n)]));
}

/** tokenUsed makes the harness token's first request, whose bookkeeping commits a write of its own, so that the next commit is the change's. */
const tokenUsed = async () => expect((await h!.request("GET", "/public/v1/webhook-subscriptions")).status).toBe(200);

describe("a recovery queues its failed deliveries a chunk per write", () => {
  test("25 failed deliveries are queued 10 per write, oldest first: a write sent once the first chunk commits runs before the next, and a delivery of the first chunk failing again meanwhile is not queued twice; the answer counts 25", async () => {
    h = await createHarness({}, { batchRows: CHUNK });
    const db = h.rt.db;
    const sub = await addStoredSubscription(db, Date.now() - 2 * HOUR);
    await addStoredDeliveries(db, sub, Date.now() - 3 * HOUR, "failed", 2);
    for (let i = 0; i < 25; i++) await addStoredDeliveries(db, sub, Date.now() - HOUR + i, "failed");
    await addStoredDeliveries(db, sub, Date.now() - HOUR, "succeeded", 3);
    const inWindow = await db.all<{ id: string }>("SELECT id FROM webhook_deliveries WHERE subscription_id = ? AND status = 'failed' AND created_at >= ? ORDER BY created_at, id", [sub, Date.now() - 2 * HOUR]);

    await tokenUsed();
    // The first chunk's deliveries, as the write after it finds them, fail again (their attempt failed).
    const meanwhile = onNextCommit(h, () =>
      db.write(async (tx) => {
        const queued = await tx.all<{ id: string }>("SELECT id FROM webhook_deliveries WHERE subscription_id = ? AND status = 'pending' ORDER BY created_at, id", [sub]);
        await tx.run("UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL, recovered_at = NULL WHERE subscription_id = ? AND status = 'pending'", [sub]);
        return queued.map((d) => d.id);
      }),
    );
    const since = new Date(Date.now() - 2 * HOUR).toISOString();
    const res = await h.json("POST", `/public/v1/webhook-subscriptions/${sub}/recover`, { body: { since } });
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ data: { subscription_id: sub, since, until: expect.any(String), queued: 25 } });
    expect(await meanwhile()).toEqual(inWindow.slice(0, CHUNK).map((d) => d.id));
    const recovered = await db.all<{ id: string; recovered: number }>(
      "SELECT id, CASE WHEN recovered_at IS NULL THEN 0 ELSE 1 END AS recovered FROM webhook_deliveries WHERE subscription_id = ? AND status = 'pending' ORDER BY created_at, id",
      [sub],
    );
    expect(recovered).toEqual(inWindow.slice(CHUNK).map((d) => ({ id: d.id, recovered: 1 })));
    expect(await statuses(db, sub)).toEqual({ failed: 2 + CHUNK, pending: 25 - CHUNK, succeeded: 3 });
  });

  test("the answer is kept by the last write: sent again under its Idempotency-Key it is replayed, and queues nothing more", async () => {
    h = await createHarness({}, { batchRows: CHUNK });
    const sub = await addStoredSubscription(h.rt.db, Date.now() - 2 * HOUR);
    await addStoredDeliveries(h.rt.db, sub, Date.now() - HOUR, "failed", 25);
    const request = { body: { since: new Date(Date.now() - 2 * HOUR).toISOString() }, headers: { "idempotency-key": "outage-2" } };
    const first = await h.json("POST", `/public/v1/webhook-subscriptions/${sub}/recover`, request);
    expect([first.status, first.body.data.queued]).toEqual([202, 25]);
    await h.rt.db.run("UPDATE webhook_deliveries SET status = 'failed' WHERE subscription_id = ?", [sub]);
    const again = await h.json("POST", `/public/v1/webhook-subscriptions/${sub}/recover`, request);
    expect([again.status, again.headers.get("idempotent-replayed"), again.body]).toEqual([202, "true", first.body]);
    expect(await statuses(h.rt.db, sub)).toEqual({ failed: 25 });
  });

  test("a subscription disabled between chunks ends the recovery with 409; what was queued stays queued", async () => {
    h = await createHarness({}, { batchRows: CHUNK });
    const sub = await addStoredSubscription(h.rt.db, Date.now() - 2 * HOUR);
    await addStoredDeliveries(h.rt.db, sub, Date.now() - HOUR, "failed", 25);
    await tokenUsed();
    const disabled = onNextCommit(h, () => h!.rt.db.write((tx) => disableSubscription(tx, sub, "the receiver answered 410 Gone to delivery dlv_X", Date.now())));
    const res = await h.json("POST", `/public/v1/webhook-subscriptions/${sub}/recover`, { body: { since: new Date(Date.now() - 2 * HOUR).toISOString() } });
    await disabled();
    expect([res.status, res.body.type]).toEqual([409, "urn:crm:problem:subscription-disabled"]);
    expect(await statuses(h.rt.db, sub)).toEqual({ failed: 25 - CHUNK, pending: CHUNK });
  });
});
