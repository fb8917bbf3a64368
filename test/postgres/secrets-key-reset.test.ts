import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { api, postWithKey, runCli, SOURCE, spawnServer, startReceiver, takeBackAfterKeyReset, tempDir, type Receiver } from "../ops/support.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { LOST_SECRET_REASON } from "../../server/webhooks/service.ts";

// `crm secrets-key reset` on PostgreSQL: the instances sharing a database whose key is lost are all
// refused at start; the reset, given the new key file, gives every subscription a new secret under
// it, disables them, and records the new key in one transaction, and instances started with the new
// key serve, and deliver once a subscription's secret is rotated and it is enabled.

let database: TestDatabase;
let dir: string;
let lost: string;
let fresh: string;
let unmade: string;
let receiver: Receiver;

beforeAll(async () => {
  database = await createTestDatabase();
  dir = tempDir("pg-key-reset");
  [lost, fresh] = [1, 2].map((fill) => writeSecretsKeyFile(join(dir, `key-${fill}`), fill)) as [string, string];
  unmade = join(dir, "key-unmade");
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
  test("a lost key: starts are refused; the reset without its flag lists the subscriptions (no key needed), with a key file not made yet says how to make it, with the database's key changes nothing; with the new key it keeps each subscription disabled with a new secret and fails its pending deliveries, and instances with the new key deliver them once it is rotated, enabled and recovered", async () => {
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
    const listed = `${subscriptionId!}  paused  ${receiver.url}  contact.created  1 pending\n`;
    const dryRun = {
      exitCode: 2,
      stdout: listed,
      stderr:
        "crm: secrets-key reset changes nothing without --yes-disable-every-subscription; with it, the webhook subscription listed (id, status, target URL, events, pending deliveries, description) gets a new signing secret in place of the one sealed with the lost key and is disabled until its secret is rotated, and 1 pending delivery end failed, to be recovered once it is enabled\n",
    };
    expect([crm(["secrets-key", "reset", "--secrets-key-file", fresh]), crm(["secrets-key", "reset"])]).toEqual([dryRun, dryRun]);
    const missing = `crm: secrets key file ${unmade} (--secrets-key-file, CRM_SECRETS_KEY_FILE) does not exist: the reset seals the subscriptions' new secrets with the key there; make a new key first, (umask 077; head -c 32 /dev/urandom | base64 > ${unmade}), then run the reset again and give that file to every instance\n`;
    expect(crm(["secrets-key", "reset", "--yes-disable-every-subscription", "--secrets-key-file", unmade])).toEqual({ exitCode: 2, stdout: "", stderr: missing });
    expect(crm(["secrets-key", "reset", "--yes-disable-every-subscription", "--secrets-key-file", lost])).toEqual({
      exitCode: 2,
      stdout: "",
      stderr: `crm: secrets key file ${lost} is the key this database was used with: nothing is lost, and a reset would only disable every webhook subscription; nothing was changed\n`,
    });
    expect(crm(["secrets-key", "reset", "--yes-disable-every-subscription"])).toEqual({
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

    expect(crm(["secrets-key", "reset", "--yes-disable-every-subscription", "--secrets-key-file", fresh])).toEqual({
      exitCode: 0,
      stdout:
        `disabled 1 webhook subscription, each with a new signing secret no receiver knows (1 pending delivery failed unsent); the database now records the secrets key ${fresh} as its own; as they were:\n${listed}` +
        "for each: rotate its secret (POST /public/v1/webhook-subscriptions/ID/rotate-secret, or Rotate on the console's Subscriptions page), give the new secret to its receiver, enable it (POST .../enable), then send its failed deliveries again under their webhook-ids (POST .../recover)\n",
      stderr: "",
    });
    const [one, two] = await Promise.all([serve(fresh), serve(fresh)]);
    try {
      expect(crm(["serve", "--port", "0", "--secrets-key-file", lost])).toEqual({ exitCode: 2, stdout: "", stderr: refusal.replace(fresh, lost) });
      const kept = (await api(one.url, token, "GET", `/public/v1/webhook-subscriptions/${subscriptionId}`)).body.data;
      expect([kept.status, kept.disabled_reason]).toEqual(["disabled", LOST_SECRET_REASON]);
      const failed = await api(one.url, token, "GET", `/public/v1/webhook-deliveries/${deliveryId}`);
      expect([failed.body.data.status, failed.body.data.last_error]).toEqual(["failed", "not sent: the subscription was disabled when its signing secret was lost with the secrets key"]);
      // Rotated on one instance, the secret is sealed with the new key, which the other opens to sign.
      expect(await takeBackAfterKeyReset({ rotateAt: two, recoverAt: one }, token, subscriptionId!, receiver)).toEqual({
        webhookId: deliveryId!,
        payload: expect.objectContaining({ type: "contact.created", data: expect.objectContaining({ first_name: "Ada" }) }),
      });
    } finally {
      for (const server of [one, two]) expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
    }
  });
});
