import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { Webhook } from "standardwebhooks";
import { api, postWithKey, runCli, SOURCE, spawnServer, startReceiver, tempDir, waitUntil, type Receiver } from "../ops/support.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";

// `crm secrets-key reset` on PostgreSQL: the instances sharing a database whose key is lost are all
// refused at start; the reset, given the new key file, deletes the subscriptions and the record of
// the old key in one transaction, and instances started with the new key record it and deliver.

let database: TestDatabase;
let dir: string;
let lost: string;
let fresh: string;
let receiver: Receiver;

beforeAll(async () => {
  database = await createTestDatabase();
  dir = tempDir("pg-key-reset");
  [lost, fresh] = [1, 2].map((fill) => writeSecretsKeyFile(join(dir, `key-${fill}`), fill)) as [string, string];
  receiver = startReceiver();
}, 60_000);

afterAll(async () => {
  receiver.stop();
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

const env = () => ({ PATH: process.env.PATH ?? "", CRM_DATABASE_URL: database.url, CRM_ALLOW_PRIVATE_TARGETS: "1" });
const crm = (args: string[]) => runCli([...SOURCE, ...args], { cwd: dir, env: env() });
const serve = (keyFile: string) => spawnServer([...SOURCE, "serve", "--port", "0", "--secrets-key-file", keyFile, "--log-level", "warn"], { cwd: dir, env: env() });

describe("secrets-key reset on PostgreSQL", () => {
  test("a lost key: starts are refused, the reset without its flag or with the database's key changes nothing, with the new key it deletes the subscriptions and fails their pending deliveries, and instances with the new key deliver", async () => {
    const token = crm(["token", "create", "--name", "ops", "--secrets-key-file", lost]).stdout.trim();
    const first = await serve(lost);
    let subscriptionId: string;
    let deliveryId: string;
    try {
      const created = await postWithKey(first.url, token, "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] }, "sub-1");
      expect(created.status).toBe(201);
      subscriptionId = created.body.data.id;
      // Paused, it keeps the contact's delivery pending.
      expect((await api(first.url, token, "POST", `/public/v1/webhook-subscriptions/${subscriptionId}/pause`)).status).toBe(200);
      expect((await postWithKey(first.url, token, "/public/v1/contacts", { first_name: "Ada" }, "contact-1")).status).toBe(201);
      const deliveries = (await api(first.url, token, "GET", "/public/v1/webhook-deliveries")).body.data;
      expect(deliveries.map((d: { status: string }) => d.status)).toEqual(["pending"]);
      deliveryId = deliveries[0].id;
    } finally {
      expect(await first.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
    }

    const refusal = `crm: secrets key file ${fresh} is not the key this database was used with (it keeps a check value of that key, and of any signing secrets sealed with it); use the key file the database was used with (--secrets-key-file, CRM_SECRETS_KEY_FILE)\n`;
    expect(crm(["serve", "--port", "0", "--secrets-key-file", fresh])).toEqual({ exitCode: 2, stdout: "", stderr: refusal });
    expect(crm(["secrets-key", "reset", "--secrets-key-file", fresh]).exitCode).toBe(2);
    expect(crm(["secrets-key", "reset", "--yes-delete-every-subscription", "--secrets-key-file", lost])).toEqual({
      exitCode: 2,
      stdout: "",
      stderr: `crm: secrets key file ${lost} is the key this database was used with: nothing is lost, and a reset would only delete every webhook subscription; nothing was changed\n`,
    });
    expect(crm(["secrets-key", "reset", "--yes-delete-every-subscription"])).toEqual({
      exitCode: 2,
      stdout: "",
      stderr:
        "crm: on PostgreSQL (--database-url) every instance must read the same secrets key: pass --secrets-key-file FILE (CRM_SECRETS_KEY_FILE); " +
        "after copy-to-postgres that is the data directory's secrets.key, for a new database create one with: (umask 077; head -c 32 /dev/urandom | base64 > FILE)\n",
    });
    // Nothing changed so far: the old key still starts, and the subscription is there.
    const kept = await serve(lost);
    try {
      expect((await api(kept.url, token, "GET", "/public/v1/webhook-subscriptions")).body.data.map((s: { id: string }) => s.id)).toEqual([subscriptionId]);
    } finally {
      expect(await kept.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
    }

    expect(crm(["secrets-key", "reset", "--yes-delete-every-subscription", "--secrets-key-file", fresh])).toEqual({
      exitCode: 0,
      stdout: `deleted 1 webhook subscription (1 pending delivery failed unsent); the database now records no secrets key: the next start records the key it is given, ${fresh}\n`,
      stderr: "",
    });
    const [one, two] = await Promise.all([serve(fresh), serve(fresh)]);
    try {
      expect(crm(["serve", "--port", "0", "--secrets-key-file", lost])).toEqual({ exitCode: 2, stdout: "", stderr: refusal.replace(fresh, lost) });
      expect((await api(one.url, token, "GET", "/public/v1/webhook-subscriptions")).body.data).toEqual([]);
      const failed = await api(one.url, token, "GET", `/public/v1/webhook-deliveries/${deliveryId}`);
      expect([failed.body.data.status, failed.body.data.last_error]).toEqual(["failed", "not sent: the subscription was deleted"]);
      // The create's answer went with the old key: the same request creates anew, sealed with the new key, which the other instance opens.
      const again = await postWithKey(two.url, token, "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] }, "sub-1");
      expect([again.status, again.replayed, again.body.data.id === subscriptionId]).toEqual([201, false, false]);
      expect((await postWithKey(one.url, token, "/public/v1/contacts", { first_name: "Grace" }, "contact-2")).status).toBe(201);
      await waitUntil(() => receiver.received.length === 1, "the delivery", one.proc);
      const [sent] = receiver.received;
      const payload = new Webhook(again.body.data.secret).verify(sent!.body, { "webhook-id": sent!.id, "webhook-timestamp": sent!.timestamp, "webhook-signature": sent!.signature });
      expect(payload).toMatchObject({ type: "contact.created", data: { first_name: "Grace" } });
    } finally {
      for (const server of [one, two]) expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
    }
  });
});
