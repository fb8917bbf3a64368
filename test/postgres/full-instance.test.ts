import { afterAll, beforeAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { GUARANTEED_PER_SUBSCRIPTION, MAX_IN_FLIGHT, RESERVED_SHARE } from "../../server/webhooks/worker.ts";
import { tempDir } from "../ops/support.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { startReceiver, waitFor, webhookHarness, type Receiver, type WebhookHarness } from "../webhooks/support.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";

// Two delivery loops in this process on one PostgreSQL database, as two instances would share it:
// an instance whose slots are full wakes the other for the due work it has no room for (README,
// Run several instances), and a subscription deleted through one has its attempts under way on the
// other aborted (README, Delivery), or, when no notification tells it, by the other's own check
// after its listening connection is back or at its poll. Each instance's own poll is made longer
// than the test, so that only the notifications tell it anything, unless a test says otherwise.

const NO_POLL_MS = 10 * 60_000;

let database: TestDatabase;
let keyDir: string;
let secretsKeyFile: string;

beforeAll(async () => {
  database = await createTestDatabase();
  keyDir = tempDir("full-instance");
  secretsKeyFile = writeSecretsKeyFile(join(keyDir, "secrets.key"));
});

afterAll(async () => {
  await database?.drop();
  rmSync(keyDir, { recursive: true, force: true });
});

/**
 * instance starts an app and its delivery loop on a shared database, polling every `sharedPollMs`;
 * the attempts' 60 s timeout keeps held ones open (and leased) for the whole test.
 */
function instance(databaseUrl: string, sharedPollMs = NO_POLL_MS): Promise<WebhookHarness> {
  return webhookHarness({ databaseUrl, secretsKeyFile, deliveryTimeoutMs: 60_000, rateWriteBurst: 1000 }, { sharedPollMs });
}

test("an instance whose slots are held full wakes an idle one, which sends a new subscription's deliveries beyond the full one's guaranteed share", async () => {
  const receivers: Receiver[] = [];
  const receiver = (path: string) => {
    const r = startReceiver(path);
    r.hold();
    receivers.push(r);
    return r;
  };
  const full = await instance(database.url);
  let idle: WebhookHarness | undefined;
  try {
    // Each with RESERVED_SHARE deliveries and no more, which the last RESERVED_SLOTS take too: a
    // backlog left would be the second instance's to send.
    for (let i = 0; i < MAX_IN_FLIGHT / RESERVED_SHARE; i++) await full.subscribe(receiver(`/slow-${i}`).url, ["contact.created"]);
    // One claim round takes them all (its loop stopped while they commit).
    await full.rt.deliveries.stop(0);
    const contacts = await Promise.all(Array.from({ length: RESERVED_SHARE }, (_, i) => full.json("POST", "/public/v1/contacts", { body: { first_name: `n${i}` } })));
    expect(contacts.map((c) => c.status)).toEqual(Array(RESERVED_SHARE).fill(201));
    full.rt.deliveries.start();
    await waitFor(() => full.rt.deliveries.inFlightCount === MAX_IN_FLIGHT, "every slot of the first instance taken by the slow receivers");
    // Started now, the second instance finds nothing due for the slow subscriptions: it stays idle.
    // Its first claim may still wait for the write lock (one event loop, one lock) when the new
    // deliveries commit, and then takes them before the full one claims: the guaranteed share is
    // the subscription's, counted over both instances, so the full one then runs none of them.
    idle = await instance(database.url);
    const fresh = receiver("/fresh");
    await full.subscribe(fresh.url, ["account.created"]);
    const names = ["Acme", "Globex", "Initech", "Umbrella", "Hooli", "Stark"];
    const accounts = await Promise.all(names.map(async (name) => (await full.json("POST", "/public/v1/accounts", { body: { name } })).body.data.id as string));
    await waitFor(() => fresh.received.length === accounts.length, "every account.created delivery open at the receiver", 30_000);
    expect(fresh.received.map((r) => r.json.data.id).toSorted()).toEqual(accounts.toSorted());
    // Whichever claims first, the full one runs no more than its guaranteed share past its slots,
    // and the idle one the rest.
    const pastSlots = full.rt.deliveries.inFlightCount - MAX_IN_FLIGHT;
    expect(Array.from({ length: GUARANTEED_PER_SUBSCRIPTION + 1 }, (_, n) => n)).toContain(pastSlots);
    expect({ full: full.rt.deliveries.inFlightCount, idle: idle.rt.deliveries.inFlightCount }).toEqual({
      full: MAX_IN_FLIGHT + pastSlots,
      idle: accounts.length - pastSlots,
    });
  } finally {
    for (const r of receivers) r.release();
    // Both stop together: neither claims what the other's stop gives back.
    await Promise.all([full.shutdown(), idle?.shutdown()]);
    for (const r of receivers) await r.stop();
  }
}, 60_000);

/** DeleteWhileHung are the two instances sharing the database of deleteWhileHung, and the subscription whose attempt hangs on `sending`. */
interface DeleteWhileHung {
  deleting: WebhookHarness;
  sending: WebhookHarness;
  subscriptionId: string;
}

/**
 * deleteWhileHung gives the sending instance one attempt hanging at its receiver (the deleting
 * instance has none), has `remove` delete the subscription, and waits for that attempt to end on
 * the sending instance: its 60 s timeout is past the wait, so only an abort ends it. It returns
 * the delivery as recorded and what the receiver got, read before the receiver answers.
 */
async function deleteWhileHung(remove: (instances: DeleteWhileHung) => Promise<void>, sendingPollMs = NO_POLL_MS) {
  // A database of its own: the first test's subscriptions keep deliveries due.
  const own = await createTestDatabase();
  const hung = startReceiver("/hung");
  hung.hold();
  const deleting = await instance(own.url);
  const sending = await instance(own.url, sendingPollMs);
  try {
    const subscription = await sending.subscribe(hung.url, ["contact.created"]);
    // Committed on the sending instance, which alone is woken to claim it.
    const contact = await sending.json("POST", "/public/v1/contacts", { body: { first_name: "Hung" } });
    expect(contact.status).toBe(201);
    await waitFor(() => hung.received.length === 1, "the attempt open at the receiver");
    expect({ deleting: deleting.rt.deliveries.inFlightCount, sending: sending.rt.deliveries.inFlightCount }).toEqual({ deleting: 0, sending: 1 });
    await remove({ deleting, sending, subscriptionId: subscription.id });
    await waitFor(() => sending.rt.deliveries.inFlightCount === 0, "the attempt on the sending instance aborted");
    const [delivery] = await deleting.deliveries(`subscription_id=${subscription.id}`);
    const history = (await deleting.delivery(delivery.id)).attempt_history.map((a: any) => ({ status: a.response_status, error: a.error }));
    return { status: delivery.status, attempts: delivery.attempts, last_error: delivery.last_error, history, received: hung.received.length };
  } finally {
    hung.release();
    await Promise.all([deleting.shutdown(), sending.shutdown()]);
    await hung.stop();
    await own.drop();
  }
}

/** ABORTED_BY_DELETE is a delivery whose one attempt a delete aborted, as deleteWhileHung returns it. */
const ABORTED_BY_DELETE = {
  status: "failed",
  attempts: 1,
  last_error: "subscription deleted while the attempt was under way",
  history: [{ status: null, error: "subscription deleted while the attempt was under way" }],
  received: 1,
};

/** deleteUnannounced deletes a subscription as a lost notification leaves it to the other instances: its row is gone, and nothing told them. */
async function deleteUnannounced({ deleting, subscriptionId }: DeleteWhileHung): Promise<void> {
  expect(await deleting.rt.db.run("DELETE FROM webhook_subscriptions WHERE id = ?", [subscriptionId])).toBe(1);
}

test("a subscription deleted through one instance has its attempts hanging on the other aborted at once, each recorded as failed in words, before the receiver answers", async () => {
  const aborted = await deleteWhileHung(async ({ deleting, subscriptionId }) => {
    expect((await deleting.request("DELETE", `/public/v1/webhook-subscriptions/${subscriptionId}`)).status).toBe(204);
  });
  expect(aborted).toEqual(ABORTED_BY_DELETE);
}, 60_000);

test("a subscription deleted without a word to the other instance has the attempt hanging there aborted once its listening connection is back (notifications may have been missed), recorded as failed in words, before the receiver answers", async () => {
  const aborted = await deleteWhileHung(async (instances) => {
    await deleteUnannounced(instances);
    // Every listening connection ends, as a server restart or a network cut ends them; Bun connects and subscribes again.
    await instances.deleting.rt.db.all("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'");
  });
  expect(aborted).toEqual(ABORTED_BY_DELETE);
}, 60_000);

test("a subscription deleted without a word to the other instance has the attempt hanging there aborted at that instance's next poll, recorded as failed in words, before the receiver answers", async () => {
  // Polled every 50 ms here (5 s in service), so that the poll is what finds the delete.
  const aborted = await deleteWhileHung(deleteUnannounced, 50);
  expect(aborted).toEqual(ABORTED_BY_DELETE);
}, 60_000);
