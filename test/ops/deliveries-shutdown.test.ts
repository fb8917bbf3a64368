import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import { parseExposition } from "./prometheus.ts";
import { api, createToken, SOURCE, spawnServer, startReceiver, tempDir, waitUntil, type Receiver, type ServerProcess } from "./support.ts";

const env = { PATH: process.env.PATH ?? "", CRM_ALLOW_PRIVATE_TARGETS: "1" };

async function deliveries(server: ServerProcess, token: string): Promise<{ id: string; status: string }[]> {
  const res = await api(server.url, token, "GET", "/public/v1/webhook-deliveries?per_page=100");
  expect(res.status).toBe(200);
  return res.body.data;
}

async function createContacts(server: ServerProcess, token: string, names: string[]): Promise<void> {
  for (const first_name of names) expect((await api(server.url, token, "POST", "/public/v1/contacts", { first_name })).status).toBe(201);
}

describe("SIGTERM during webhook deliveries", () => {
  let receiver: Receiver;
  beforeAll(() => (receiver = startReceiver()));
  afterAll(() => {
    receiver.release();
    receiver.stop();
  });

  test("after a restart nothing pending is lost and nothing already delivered is sent again", async () => {
    const dataDir = tempDir("deliveries");
    const token = createToken(SOURCE, dataDir);
    const serve = () => spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--shutdown-timeout-ms", "300", "--log-level", "warn"], { env });

    const first = await serve();
    const sub = await api(first.url, token, "POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] });
    expect(sub.status).toBe(201);
    const secret: string = sub.body.data.secret;

    await createContacts(first, token, ["A1", "A2", "A3", "A4", "A5"]);
    await waitUntil(async () => (await deliveries(first, token)).filter((d) => d.status === "succeeded").length === 5, "five deliveries to succeed", first.proc);
    const delivered = new Set(receiver.received.map((r) => r.id));
    expect(delivered.size).toBe(5);

    // The next five reach the receiver, which keeps them open: they are in flight at SIGTERM.
    receiver.hold();
    await createContacts(first, token, ["B1", "B2", "B3", "B4", "B5"]);
    await waitUntil(() => receiver.received.length === 10, "five held attempts", first.proc);
    const inFlight = new Set(receiver.received.slice(5).map((r) => r.id));
    expect(inFlight.size).toBe(5);
    const during = parseExposition(await (await fetch(`${first.url}/metrics`)).text());
    expect(during.value("crm_webhook_queue_depth")).toBe(5);
    expect(during.value("crm_webhook_attempts_in_flight")).toBe(5);
    expect(during.value("crm_webhook_oldest_pending_age_seconds")).toBeGreaterThan(0);

    expect(await first.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
    expect(first.logLines().map((l) => l.msg)).toContain("webhook attempts abandoned at shutdown; the deliveries among them still pending are sent again after restart");
    receiver.release();

    const second = await serve();
    try {
      await waitUntil(async () => (await deliveries(second, token)).every((d) => d.status === "succeeded"), "every delivery to succeed", second.proc);
      const all = await deliveries(second, token);
      expect(all.length).toBe(10);

      const timesSent = new Map<string, number>();
      for (const r of receiver.received) timesSent.set(r.id, (timesSent.get(r.id) ?? 0) + 1);
      expect([...delivered].map((id) => timesSent.get(id))).toEqual([1, 1, 1, 1, 1]);
      expect([...inFlight].map((id) => timesSent.get(id))).toEqual([2, 2, 2, 2, 2]);
      expect(new Set(timesSent.keys())).toEqual(new Set(all.map((d) => d.id)));

      // Every request, first attempt or resend, carries a valid Standard Webhooks signature.
      const verifier = new Webhook(secret);
      for (const r of receiver.received) {
        const payload = verifier.verify(r.body, { "webhook-id": r.id, "webhook-timestamp": r.timestamp, "webhook-signature": r.signature }) as { type: string };
        expect(payload.type).toBe("contact.created");
      }

      const metrics = parseExposition(await (await fetch(`${second.url}/metrics`)).text());
      expect(metrics.value("crm_webhook_deliveries_total", { status: "succeeded" })).toBe(5);
      expect(metrics.value("crm_webhook_delivery_attempts_total", { result: "succeeded" })).toBe(5);
      expect(metrics.value("crm_webhook_delivery_attempt_duration_seconds_count")).toBe(5);
      expect(metrics.value("crm_webhook_delivery_latency_seconds_count")).toBe(5);
      expect(metrics.value("crm_webhook_queue_depth")).toBe(0);
      expect(metrics.value("crm_webhook_oldest_pending_age_seconds")).toBe(0);
    } finally {
      expect(await second.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
    }
  }, 60_000);
});
