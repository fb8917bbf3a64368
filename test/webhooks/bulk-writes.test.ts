import { afterEach, describe, expect, test } from "bun:test";
import type { Database, Db } from "../../server/db/sql.ts";
import { IDEMPOTENCY_RETENTION_MS } from "../../server/idempotency/service.ts";
import type { Runtime } from "../../server/runtime.ts";
import { createLogger } from "../../server/shared/log.ts";
import { pruneHistory } from "../../server/webhooks/retention.ts";
import { disableSubscription } from "../../server/webhooks/store.ts";
import { onNextCommit } from "../foundation/support.ts";
import { TEST_BACKEND } from "../support/backend.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { addStoredDeliveries, addStoredSubscription, startReceiver, waitFor, webhookHarness, type Receiver } from "./support.ts";

// Recoveries and the failing of a stopped subscription's pending deliveries change at most
// batchRows rows per write, the pruning of idempotency records at most its run's batch, so other
// writes (on SQLite every request) take their turns in between; here 10 per write, with 25 rows:
// three writes each.

/** CHUNK is the rows one write changes at most here (BATCH_ROWS, 1,000, in production). */
const CHUNK = 10;
const HOUR = 3_600_000;

let h: Harness | undefined;
let receiver: Receiver | undefined;
afterEach(async () => {
  await h?.rt.deliveries.stop(0);
  await h?.close();
  await receiver?.stop();
  h = receiver = undefined;
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

const pendingOf = async (db: Db, subscriptionId: string) => (await statuses(db, subscriptionId)).pending ?? 0;

/**
 * refuseWrites has `db` refuse each write that `refused` (asked inside it) picks, as SQLite refuses
 * one past its 5 s wait for the write lock another process holds, until the function it returns is
 * called: a write refused after the change's first one committed, on either backend.
 */
function refuseWrites(db: Database, refused: (tx: Db) => Promise<boolean>): () => void {
  const write = db.write;
  db.write = ((work: (tx: Db) => Promise<unknown>) =>
    write.call(db, async (tx) => {
      if (await refused(tx)) throw Object.assign(new Error("database is locked"), { code: "SQLITE_BUSY" });
      return work(tx);
    })) as Database["write"];
  return () => void (db.write = write);
}

/** UNSENT_REFUSED is the line a refused failing of a stopped subscription's pending deliveries is logged with. */
const UNSENT_REFUSED = "webhook delivery loop: failing the pending deliveries of a disabled or deleted subscription was refused; they stay unsent, and the loop tries again within a minute";

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

  /**
   * refusedAfterItsFirstWrite sends a recovery of 25 failed deliveries whose first write (CHUNK
   * queued) commits and whose second is refused, then has the deliveries it queued attempted, and
   * fail again; it returns the subscription and the refused answer.
   */
  async function refusedAfterItsFirstWrite(request: { body: { since: string }; headers: Record<string, string> }) {
    h = await createHarness({}, { batchRows: CHUNK, log: createLogger("error", () => undefined) });
    const db = h.rt.db;
    const sub = await addStoredSubscription(db, Date.now() - 2 * HOUR);
    for (let i = 0; i < 25; i++) await addStoredDeliveries(db, sub, Date.now() - HOUR + i, "failed");
    await tokenUsed();
    let writes = 0;
    const allow = refuseWrites(db, async () => ++writes === 2);
    const first = await h.json("POST", `/public/v1/webhook-subscriptions/${sub}/recover`, request);
    allow();
    await db.run("UPDATE webhook_deliveries SET status = 'failed', attempts = attempts + 1, next_attempt_at = NULL, recovered_at = NULL WHERE subscription_id = ? AND status = 'pending'", [sub]);
    return { sub, first };
  }

  test("refused between its writes and sent again under its Idempotency-Key, a recovery goes on where it stopped: the first chunk's deliveries, failed again meanwhile, are not queued twice, and the answer counts every write's", async () => {
    const since = new Date(Date.now() - 2 * HOUR).toISOString();
    const request = { body: { since }, headers: { "idempotency-key": "outage-3" } };
    const { sub, first } = await refusedAfterItsFirstWrite(request);
    const db = h!.rt.db;
    expect([first.status, first.body.type]).toEqual([503, "urn:crm:problem:database-unavailable"]);
    expect(first.body.detail).toEndWith(`Part of this request was done before this refusal, and stays done: ${CHUNK} of the subscription's failed deliveries were queued again. Sending the request again finishes it.`);
    // Another body under the key is another request, refused as for a kept answer: it does not go on from where the first one got to (s37 mutation audit).
    const other = await h!.json("POST", `/public/v1/webhook-subscriptions/${sub}/recover`, { ...request, body: { since: new Date(Date.now() - 90 * 60_000).toISOString() } });
    expect([other.status, other.body.type]).toEqual([422, "urn:crm:problem:idempotency-key-reused"]);
    expect(await statuses(db, sub)).toEqual({ failed: 25 });
    // Sent again and refused at its first write, it loses nothing of where the first one got to.
    const refusedAll = refuseWrites(db, async () => true);
    expect((await h!.json("POST", `/public/v1/webhook-subscriptions/${sub}/recover`, request)).status).toBe(503);
    refusedAll();
    const again = await h!.json("POST", `/public/v1/webhook-subscriptions/${sub}/recover`, request);
    expect([again.status, again.body]).toEqual([202, { data: { subscription_id: sub, since, until: expect.any(String), queued: 25 } }]);
    expect(await statuses(db, sub)).toEqual({ failed: CHUNK, pending: 25 - CHUNK });
    const replayed = await h!.json("POST", `/public/v1/webhook-subscriptions/${sub}/recover`, request);
    expect([replayed.status, replayed.headers.get("idempotent-replayed"), replayed.body]).toEqual([202, "true", again.body]);
    // The same key with another body is another request: refused, as for a kept answer.
    expect((await h!.json("POST", `/public/v1/webhook-subscriptions/${sub}/recover`, { ...request, body: { since: new Date(Date.now() - HOUR).toISOString() } })).status).toBe(422);
  });

  /**
   * refusedADayAgo has a recovery under `key` refused after its first write (refusedAfterItsFirstWrite),
   * and what it kept under the key outlives the key's 24 hours by 5 minutes, not yet pruned (the
   * retention job runs hourly); `crashed` leaves it as the reservation of an instance that crashed
   * while running, which holds the progress the same way.
   */
  async function refusedADayAgo(key: string, since: string, crashed = false): Promise<string> {
    const { sub, first } = await refusedAfterItsFirstWrite({ body: { since }, headers: { "idempotency-key": key } });
    expect(first.status).toBe(503);
    const db = h!.rt.db;
    await db.run(`UPDATE idempotency_keys SET created_at = created_at - ?${crashed ? ", status = 0" : ""}`, [IDEMPOTENCY_RETENTION_MS + 5 * 60_000]);
    const kept = await db.all<{ status: number; response_body: string }>("SELECT status, response_body FROM idempotency_keys");
    expect(kept.map((row) => [row.status, JSON.parse(row.response_body).queued])).toEqual([[crashed ? 0 : 1, CHUNK]]);
    return sub;
  }

  test("refused between its writes and sent again under its Idempotency-Key past the key's 24 hours, before the prune, a recovery starts over from since: it queues every failed delivery and counts them", async () => {
    const since = new Date(Date.now() - 2 * HOUR).toISOString();
    const sub = await refusedADayAgo("nightly", since);
    const again = await h!.json("POST", `/public/v1/webhook-subscriptions/${sub}/recover`, { body: { since }, headers: { "idempotency-key": "nightly" } });
    expect([again.status, again.body]).toEqual([202, { data: { subscription_id: sub, since, until: expect.any(String), queued: 25 } }]);
    expect(await statuses(h!.rt.db, sub)).toEqual({ pending: 25 });
  });

  for (const crashed of [false, true]) {
    test(`another body under a key whose recovery's progress (${crashed ? "in the reservation of an instance that crashed" : "kept by a refusal"}) is past its 24 hours, before the prune, runs: the key is free, not 409 still running`, async () => {
      const sub = await refusedADayAgo("nightly", new Date(Date.now() - 2 * HOUR).toISOString(), crashed);
      const since = new Date(Date.now() - 90 * 60_000).toISOString();
      const other = await h!.json("POST", `/public/v1/webhook-subscriptions/${sub}/recover`, { body: { since }, headers: { "idempotency-key": "nightly" } });
      expect([other.status, other.body]).toEqual([202, { data: { subscription_id: sub, since, until: expect.any(String), queued: 25 } }]);
      expect(await statuses(h!.rt.db, sub)).toEqual({ pending: 25 });
    });
  }

  // PostgreSQL's: its instances share the key through a reservation in the database (on SQLite one
  // process holds it in memory, and a resend meets 409 while the first run goes on).
  test.if(TEST_BACKEND === "postgres")("a recovery outliving its key's reservation, sent again, goes on from the place its last committed write kept, even one committed after the resend first looked: nothing is queued twice", async () => {
    h = await createHarness({}, { batchRows: CHUNK });
    const db = h.rt.db as Database;
    const sub = await addStoredSubscription(db, Date.now() - 2 * HOUR);
    for (let i = 0; i < 35; i++) await addStoredDeliveries(db, sub, Date.now() - HOUR + i, "failed");
    await tokenUsed();
    const path = `/public/v1/webhook-subscriptions/${sub}/recover`;
    const request = { body: { since: new Date(Date.now() - 2 * HOUR).toISOString() }, headers: { "idempotency-key": "k-takeover" } };
    // The first run's second write waits until the resend has read the key; its third, until the resend is answered.
    const opened = { second: Promise.withResolvers<void>(), third: Promise.withResolvers<void>() };
    const committed = { first: Promise.withResolvers<void>(), second: Promise.withResolvers<void>() };
    let writes = 0;
    const write = db.write;
    db.write = (async (work: (tx: Db) => Promise<unknown>) => {
      const n = ++writes;
      if (n === 2) await opened.second.promise;
      if (n === 3) await opened.third.promise;
      const out = await write.call(db, work);
      if (n === 1) committed.first.resolve();
      if (n === 2) committed.second.resolve();
      return out;
    }) as Database["write"];
    const first = h.json("POST", path, request);
    await committed.first.promise;
    // A minute later for the resend: the first run's reservation is stale, and may be taken over.
    const realNow = Date.now;
    Date.now = () => realNow() + 61_000;
    const get = db.get;
    let looked = false;
    db.get = (async (sql: string, params?: never) => {
      const row = await get.call(db, sql, params);
      if (!looked && sql.includes("FROM idempotency_keys")) {
        looked = true;
        // The first run commits its second write between the resend's look and its reservation, and
        // what that write queued is attempted and fails again before the resend reaches it.
        opened.second.resolve();
        await committed.second.promise;
        await db.run("UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL, recovered_at = NULL WHERE subscription_id = ? AND status = 'pending'", [sub]);
      }
      return row;
    }) as Database["get"];
    try {
      const resent = await h.json("POST", path, request);
      opened.third.resolve();
      expect([resent.status, resent.body.data?.queued]).toEqual([202, 35]);
      expect((await first).body.type).toBe("urn:crm:problem:idempotency-key-in-use");
    } finally {
      Date.now = realNow;
      db.get = get;
      db.write = write;
    }
    expect(await statuses(db, sub)).toEqual({ failed: 20, pending: 15 });
  });

  test("a subscription disabled between chunks ends the recovery with 409; what was queued stays queued", async () => {
    h = await createHarness({}, { batchRows: CHUNK });
    const sub = await addStoredSubscription(h.rt.db, Date.now() - 2 * HOUR);
    await addStoredDeliveries(h.rt.db, sub, Date.now() - HOUR, "failed", 25);
    await tokenUsed();
    const disabled = onNextCommit(h, () => h!.rt.db.write((tx) => disableSubscription(tx, sub, "the receiver answered 410 Gone to delivery dlv_X", Date.now(), null)));
    const res = await h.json("POST", `/public/v1/webhook-subscriptions/${sub}/recover`, { body: { since: new Date(Date.now() - 2 * HOUR).toISOString() } });
    await disabled();
    // The refusal says what the write before it did, which stays done.
    expect([res.status, res.body.type, res.body.detail]).toEqual([
      409,
      "urn:crm:problem:subscription-disabled",
      `The subscription ${sub} is disabled (the receiver answered 410 Gone to delivery dlv_X); nothing can be sent to it. Part of this request was done before this refusal, and stays done: ${CHUNK} of the subscription's failed deliveries were queued again.`,
    ]);
    expect(await statuses(h.rt.db, sub)).toEqual({ failed: 25 - CHUNK, pending: CHUNK });
  });
});

describe("a stopped subscription's pending deliveries are failed a chunk per write", () => {
  test("a delete commits first, alone: a write sent then finds the subscription gone and its 25 deliveries still pending; once answered, all 25 are failed, those of another subscription untouched", async () => {
    h = await createHarness({}, { batchRows: CHUNK });
    const db = h.rt.db;
    const sub = await addStoredSubscription(db, Date.now() - HOUR);
    const other = await addStoredSubscription(db, Date.now() - HOUR);
    await addStoredDeliveries(db, sub, Date.now() - HOUR, "pending", 25);
    await addStoredDeliveries(db, sub, Date.now() - HOUR, "succeeded", 2);
    await addStoredDeliveries(db, other, Date.now() - HOUR, "pending", 3);
    await tokenUsed();
    const meanwhile = onNextCommit(h, () => db.write(async (tx) => ({ subscription: (await tx.all("SELECT id FROM webhook_subscriptions WHERE id = ?", [sub])).length, pending: await pendingOf(tx, sub) })));
    const res = await h.request("DELETE", `/public/v1/webhook-subscriptions/${sub}`);
    expect([res.status, await res.text()]).toEqual([204, ""]);
    expect(await meanwhile()).toEqual({ subscription: 0, pending: 25 });
    expect(await statuses(db, sub)).toEqual({ "failed: not sent: the subscription was deleted": 25, succeeded: 2 });
    expect(await statuses(db, other)).toEqual({ pending: 3 });
  });

  test("a delete whose failing of the deliveries is refused after the delete committed answers 204 all the same, and logs the refusal; sent again it is 404", async () => {
    const lines: { msg: string; error: string }[] = [];
    h = await createHarness({}, { batchRows: CHUNK, log: createLogger("error", (line) => lines.push(JSON.parse(line))) });
    const db = h.rt.db;
    const sub = await addStoredSubscription(db, Date.now() - HOUR);
    await addStoredDeliveries(db, sub, Date.now() - HOUR, "pending", 25);
    await tokenUsed();
    // The delete's write and the first chunk's commit; the second chunk's is refused.
    let writes = 0;
    const allow = refuseWrites(db, async () => ++writes > 2);
    const res = await h.request("DELETE", `/public/v1/webhook-subscriptions/${sub}`);
    allow();
    expect([res.status, await res.text()]).toEqual([204, ""]);
    expect(await statuses(db, sub)).toEqual({ "failed: not sent: the subscription was deleted": CHUNK, pending: 25 - CHUNK });
    expect(lines.map(({ msg, error }) => ({ msg, error }))).toEqual([
      { msg: UNSENT_REFUSED, error: `PartlyDone: database is locked (before it, ${CHUNK} of the subscription's pending deliveries were failed (not sent))` },
    ]);
    expect((await h.json("DELETE", `/public/v1/webhook-subscriptions/${sub}`)).status).toBe(404);
  });

  test("the delivery loop fails, while it runs, what a refused failing left pending of a deleted subscription: its sweep runs every minute, not only at start", async () => {
    h = await createHarness({}, { batchRows: CHUNK, stoppedSweepMs: 100, log: createLogger("error", () => undefined) });
    const db = h.rt.db;
    const sub = await addStoredSubscription(db, Date.now() - HOUR);
    await addStoredDeliveries(db, sub, Date.now() - HOUR, "pending", 25);
    // Due in an hour: the loop, started once they are, sends none of them.
    await db.run("UPDATE webhook_deliveries SET next_attempt_at = ? WHERE subscription_id = ?", [Date.now() + HOUR, sub]);
    h.rt.deliveries.start();
    await tokenUsed();
    // Every write after the delete's commit is refused until allowed: the delete's chunks, the loop's claims and sweeps.
    const allow = refuseWrites(db, async (tx) => (await tx.all("SELECT id FROM webhook_subscriptions WHERE id = ?", [sub])).length === 0);
    const res = await h.request("DELETE", `/public/v1/webhook-subscriptions/${sub}`);
    expect([res.status, await res.text()]).toEqual([204, ""]);
    expect(await statuses(db, sub)).toEqual({ pending: 25 });
    allow();
    await waitFor(async () => (await pendingOf(db, sub)) === 0, "the deleted subscription's deliveries failed by the sweep");
    expect(await statuses(db, sub)).toEqual({ "failed: not sent: the subscription was deleted": 25 });
  });

  test("a sweep that cannot look (the database's reads refused) warns that it could not, and claims no delivery stays unsent", async () => {
    const lines: { level: string; msg: string }[] = [];
    h = await createHarness({}, { stoppedSweepMs: 50, log: createLogger("info", (line) => lines.push(JSON.parse(line))) });
    const db = h.rt.db as Database;
    const read = db.read;
    db.read = (() => Promise.reject(Object.assign(new Error("Connection closed"), { code: "ERR_POSTGRES_CONNECTION_CLOSED" }))) as Database["read"];
    try {
      h.rt.deliveries.start();
      await waitFor(() => lines.some((line) => line.msg.includes("the look for pending deliveries")), "the sweep's look to fail");
    } finally {
      db.read = read;
    }
    expect(lines.filter((line) => line.msg.includes("disabled or deleted subscription")).map((line) => `${line.level} ${line.msg}`)).toEqual([
      "warn webhook delivery loop: the look for pending deliveries of disabled or deleted subscriptions failed; it runs again within a minute",
    ]);
  });

  test("a 410 Gone disables the subscription, its event counting the 25 pending deliveries, which are then failed saying why", async () => {
    h = await webhookHarness({ retrySchedule: [600] }, { batchRows: CHUNK });
    receiver = startReceiver();
    receiver.respond(() => new Response("gone", { status: 410 }));
    const sub = (await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: receiver.url, events: ["contact.created"] } })).body.data;
    // Due in an hour: none is sent before the test event's 410 disables the subscription.
    await addStoredDeliveries(h.rt.db, sub.id, Date.now(), "pending", 25);
    await h.rt.db.run("UPDATE webhook_deliveries SET next_attempt_at = ? WHERE subscription_id = ?", [Date.now() + HOUR, sub.id]);
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${sub.id}/test`)).status).toBe(202);
    const unsent = "failed: not sent: the subscription was disabled after its receiver answered 410 Gone";
    await waitFor(async () => (await statuses(h!.rt.db, sub.id))[unsent] === 25, "the 25 pending deliveries failed");
    expect(await statuses(h.rt.db, sub.id)).toEqual({ failed: 1, [unsent]: 25 });
    const events = await h.rt.db.all<{ payload: string }>("SELECT payload FROM events WHERE type = 'subscription.disabled'");
    expect(events.map((e) => JSON.parse(e.payload).data.pending_deliveries_failed)).toEqual([25]);
  });

  test("a start fails the pending deliveries a stopped process left of a deleted or disabled subscription, each saying why, and leaves an active one's", async () => {
    h = await webhookHarness({}, { batchRows: CHUNK });
    await h.rt.deliveries.stop(0);
    const db = h.rt.db;
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await addStoredSubscription(db, Date.now() - HOUR));
    const [deleted, gone, failing, lost, active] = ids as [string, string, string, string, string];
    for (const id of ids) await addStoredDeliveries(db, id, Date.now() - HOUR, "pending", id === active ? 2 : 25);
    await db.run("UPDATE webhook_deliveries SET next_attempt_at = ? WHERE subscription_id = ?", [Date.now() + HOUR, active]);
    // As the stopping writes leave them, their deliveries not yet failed.
    await db.write(async (tx) => {
      await tx.run("DELETE FROM webhook_subscriptions WHERE id = ?", [deleted]);
      await disableSubscription(tx, gone, "the receiver answered 410 Gone to delivery dlv_X", Date.now(), null);
      await disableSubscription(tx, failing, "every attempt failed since 2026-01-01T00:00:00Z, for 72 h (the limit is 72 h); enable it once the receiver works again", Date.now(), null);
      await disableSubscription(tx, lost, "lost", Date.now(), null);
      await tx.run("UPDATE webhook_subscriptions SET secret_lost_at = ? WHERE id = ?", [Date.now(), lost]);
    });
    h.rt.deliveries.start();
    await waitFor(async () => (await Promise.all([deleted, gone, failing, lost].map((id) => pendingOf(db, id)))).every((n) => n === 0), "the stopped subscriptions' deliveries failed");
    expect(await Promise.all([deleted, gone, failing, lost, active].map((id) => statuses(db, id)))).toEqual([
      { "failed: not sent: the subscription was deleted": 25 },
      { "failed: not sent: the subscription was disabled after its receiver answered 410 Gone": 25 },
      { "failed: not sent: the subscription was disabled after its attempts failed for too long": 25 },
      { "failed: not sent: the subscription was disabled when its signing secret was lost with the secrets key": 25 },
      { pending: 2 },
    ]);
  });

  test("enabling a subscription whose disable a stopped process left unfinished fails the deliveries left first: none of them is sent", async () => {
    h = await createHarness({}, { batchRows: CHUNK });
    const sub = await addStoredSubscription(h.rt.db, Date.now() - HOUR);
    await addStoredDeliveries(h.rt.db, sub, Date.now() - HOUR, "pending", 25);
    await h.rt.db.write((tx) => disableSubscription(tx, sub, "every attempt failed since 2026-01-01T00:00:00Z, for 72 h (the limit is 72 h); enable it once the receiver works again", Date.now(), null));
    const res = await h.json("POST", `/public/v1/webhook-subscriptions/${sub}/enable`);
    expect([res.status, res.body.data.status]).toEqual([200, "active"]);
    expect(await statuses(h.rt.db, sub)).toEqual({ "failed: not sent: the subscription was disabled after its attempts failed for too long": 25 });
  });
});

/** writesNoting is `rt` with a database whose every write, before it commits, notes what `read` finds. */
function writesNoting<T>(rt: Runtime, read: (tx: Db) => Promise<T>): { rt: Runtime; seen: T[] } {
  const seen: T[] = [];
  const write: Database["write"] = (work) =>
    rt.db.write(async (tx) => {
      const done = await work(tx);
      seen.push(await read(tx));
      return done;
    });
  const db = new Proxy(rt.db, {
    get: (target, key) => {
      const value = key === "write" ? write : Reflect.get(target, key, target);
      return typeof value === "function" && key !== "write" ? value.bind(target) : value;
    },
  });
  return { rt: { ...rt, db }, seen };
}

describe("retention prunes idempotency records a chunk per write", () => {
  test("25 records past the 24 hours go 10 per write; the one still kept stays", async () => {
    h = await createHarness();
    const db = h.rt.db;
    for (let i = 0; i < 26; i++) {
      const res = await h.json("POST", "/public/v1/accounts", { body: { name: `Acme ${i}` }, headers: { "idempotency-key": `key-${i}` } });
      expect(res.status).toBe(201);
    }
    await db.run("UPDATE idempotency_keys SET created_at = created_at - ? WHERE idem_key <> 'key-25'", [IDEMPOTENCY_RETENTION_MS + 1000]);
    const kept = async (tx: Db) => Number((await tx.get<{ n: number }>("SELECT count(*) AS n FROM idempotency_keys"))!.n);
    const noting = writesNoting(h.rt, kept);
    expect((await pruneHistory(noting.rt, Date.now(), { batch: CHUNK })).idempotency_keys).toBe(25);
    expect([...new Set(noting.seen)]).toEqual([26, 16, 6, 1]);
    expect(await db.all("SELECT idem_key FROM idempotency_keys")).toEqual([{ idem_key: "key-25" }]);
  });
});
