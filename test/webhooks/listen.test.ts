import { SQL } from "bun";
import { afterEach, expect } from "bun:test";
import { createLogger } from "../../server/shared/log.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { postgresOnly } from "../support/backend.ts";
import { FAST_WEBHOOKS, startReceiver, waitFor, type Receiver } from "./support.ts";

let h: Harness | undefined;
let receiver: Receiver | undefined;
let admin: SQL | undefined;
afterEach(async () => {
  await h?.rt.deliveries.stop(0);
  await h?.close();
  receiver?.release();
  await receiver?.stop();
  await admin?.close();
  h = receiver = admin = undefined;
});

postgresOnly("a LISTEN the server refuses when the delivery loop starts is subscribed again by the listener check: a subscription deleted by another instance then has its attempt here aborted", async () => {
  const logged: { msg: string }[] = [];
  // Checked every second (the idle timeout); claims polled once a minute, so only a notification can wake or abort anything here.
  h = await createHarness({ ...FAST_WEBHOOKS, deliveryTimeoutMs: 30_000, databaseIdleTimeoutSeconds: 1 }, { log: createLogger("error", (line) => logged.push(JSON.parse(line))), sharedPollMs: 60_000 });
  const url = new URL(h.rt.config.databaseUrl);
  const database = url.pathname.slice(1);
  admin = new SQL({ url: Object.assign(new URL(url), { pathname: "/postgres" }).toString(), max: 1 });
  receiver = startReceiver();
  receiver.hold();
  const subscription = (await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: receiver.url, events: ["contact.created"] } })).body.data;
  const listening = async () => (await admin!.unsafe("SELECT pid FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'LISTEN%'", [database])).length;

  // The listening connection is the one beyond the pool: a server refusing new connections refuses it.
  await admin.unsafe(`ALTER DATABASE "${database}" WITH ALLOW_CONNECTIONS false`);
  try {
    h.rt.deliveries.start();
    await waitFor(() => logged.some((line) => line.msg.startsWith("webhook delivery loop: cannot listen for other instances")), "the refused LISTEN to be logged");
  } finally {
    await admin.unsafe(`ALTER DATABASE "${database}" WITH ALLOW_CONNECTIONS true`);
  }
  await waitFor(async () => (await listening()) === 1, "a listener check to subscribe again", 20_000);

  expect((await h.json("POST", "/public/v1/contacts", { body: { email: "listened@example.com" } })).status).toBe(201);
  await waitFor(() => receiver!.received.length === 1, "the attempt at the receiver");
  // Another instance deletes the subscription and tells the others, as subscriptionDeleted does.
  // Deleted for real: should the listener check replace the listening connection meanwhile (a busy
  // machine can miss its 1 s deadline) and the notification be lost, the check on re-subscribing finds it.
  const other = new SQL({ url: url.toString(), max: 1 });
  await other.unsafe("DELETE FROM webhook_subscriptions WHERE id = $1", [subscription.id]);
  await other.unsafe(`NOTIFY crm_deliveries, 'deleted:${subscription.id}'`);
  await other.close();
  await waitFor(() => h!.rt.deliveries.inFlightCount === 0, "the attempt to be aborted before its receiver answers");
  expect(receiver.received.length).toBe(1);
}, 60_000);
