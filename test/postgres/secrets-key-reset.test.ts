import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { Webhook } from "standardwebhooks";
import { join } from "node:path";
import { api, postWithKey, runCli, SOURCE, spawnServer, startReceiver, takeBackAfterKeyReset, tempDir, waitUntil, type Receiver } from "../ops/support.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { LOST_SECRET_REASON } from "../../server/webhooks/service.ts";

// `crm secrets-key reset` on PostgreSQL: the instances sharing a database whose key is lost are all
// refused at start; the reset, given the new key file, gives every subscription a new secret under
// it, disables them, and records the new key in one transaction, and instances started with the new
// key serve, and deliver once a subscription's secret is rotated and it is enabled. `crm secrets-key
// rotate` seals the secrets anew with a new key in one transaction: an instance left running on the
// old key refuses to seal with it (503), one started with it is refused, and instances started with
// the new key deliver, signed with the unchanged secrets.

let database: TestDatabase;
let rotated: TestDatabase;
let dir: string;
let lost: string;
let fresh: string;
let unmade: string;
let receiver: Receiver;

beforeAll(async () => {
  [database, rotated] = [await createTestDatabase(), await createTestDatabase()];
  dir = tempDir("pg-key-reset");
  [lost, fresh] = [1, 2].map((fill) => writeSecretsKeyFile(join(dir, `key-${fill}`), fill)) as [string, string];
  unmade = join(dir, "key-unmade");
  receiver = startReceiver();
}, 60_000);

afterAll(async () => {
  receiver.stop();
  await database?.drop();
  await rotated?.drop();
  rmSync(dir, { recursive: true, force: true });
});

const env = (url: string) => ({ PATH: process.env.PATH ?? "", CRM_DATABASE_URL: url, CRM_ALLOW_PRIVATE_TARGETS: "1" });
const crm = (args: string[], url = database.url) => runCli([...SOURCE, ...args], { cwd: dir, env: env(url) });
const serve = (keyFile: string, url = database.url) => spawnServer([...SOURCE, "serve", "--port", "0", "--secrets-key-file", keyFile, "--log-level", "warn"], { cwd: dir, env: env(url) });

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

    const refusal = `crm: secrets key file ${fresh} is not the key this database was used with (it keeps a check value of that key, and of any signing secrets sealed with it); use the key file the database was used with (--secrets-key-file, CRM_SECRETS_KEY_FILE), after crm secrets-key rotate the new one it was given\n`;
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

const KEY_REPLACED = {
  type: "urn:crm:problem:secrets-key-replaced",
  title: "Service Unavailable",
  status: 503,
  detail:
    "This instance still has the secrets key that crm secrets-key rotate replaced: a signing secret sealed with it could be read by no instance started since, so nothing was changed. Send the request to another instance; the operator should restart this one with the new key file.",
};

const KEY_REPLACED_RETRY = {
  ...KEY_REPLACED,
  detail:
    "This instance still has the secrets key that crm secrets-key rotate replaced, which does not open the subscription's signing secret, so nothing was sent. Retry the delivery on another instance; the operator should restart this one with the new key file.",
};

const KEY_REPLACED_REPLAY = {
  ...KEY_REPLACED,
  detail:
    "This instance still has the secrets key that crm secrets-key rotate replaced, which does not open the signing secret the answer kept for this Idempotency-Key shows, so it cannot show it. Send the request again to another instance, with the same key; the operator should restart this one with the new key file.",
};

describe("secrets-key rotate on PostgreSQL", () => {
  test("every secret sealed anew with the new key; an instance left on the old key refuses to seal, a start with it is refused; instances with the new key replay the secrets and deliver signed with them", async () => {
    const old = lost;
    receiver.received.length = 0;
    const token = crm(["token", "create", "--name", "ops", "--secrets-key-file", old], rotated.url).stdout.trim();
    const left = await serve(old, rotated.url);
    let id: string;
    let first: string;
    let second: string;
    try {
      const created = await postWithKey(left.url, token, "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] }, "sub-1");
      id = created.body.data.id;
      first = created.body.data.secret;
      second = (await postWithKey(left.url, token, `/public/v1/webhook-subscriptions/${id}/rotate-secret`, { grace_hours: 1 }, "rotate-1")).body.data.secret;
      expect((await api(left.url, token, "POST", "/public/v1/contacts", { first_name: "Grace" })).status).toBe(201);
      await waitUntil(() => receiver.received.length > 0, "the delivery before the rotation", left.proc);
      const deliveryId = receiver.received[0]!.id;

      expect(crm(["secrets-key", "rotate", "--new-key-file", fresh, "--secrets-key-file", old], rotated.url)).toEqual({
        exitCode: 0,
        stdout:
          `sealed anew with ${fresh} the signing secrets of 1 webhook subscription (with 1 previous secret of a rotation) and the secrets in 2 kept answers of creates and rotations; the database now records it as its secrets key, and refuses ${old}\n` +
          `next: give ${fresh} to every instance in place of ${old} (--secrets-key-file, CRM_SECRETS_KEY_FILE) and start them; receivers need no change. Backups taken before hold secrets sealed with the old key: keep it with them, apart, or destroy both\n`,
        stderr: "",
      });
      // Left running on the old key, it seals nothing the others could not open.
      const refused = await Promise.all([
        api(left.url, token, "POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] }),
        api(left.url, token, "POST", `/public/v1/webhook-subscriptions/${id}/rotate-secret`, {}),
      ]);
      expect(refused.map((r) => [r.status, r.headers.get("retry-after"), r.body])).toEqual([
        [503, "5", KEY_REPLACED],
        [503, "5", KEY_REPLACED],
      ]);
      // Nor does it answer a retry it cannot sign as if it had been made: the new secret's seal does not open with its key.
      const retried = await api(left.url, token, "POST", `/public/v1/webhook-deliveries/${deliveryId}/retry`);
      expect([retried.status, retried.headers.get("retry-after"), retried.body]).toEqual([503, "5", KEY_REPLACED_RETRY]);
      expect(receiver.received).toHaveLength(1);
      receiver.received.length = 0;
      // A create retried with its key is shown its secret by the instances with the new key: not told it is lost for good (410) here.
      const replayed = await api(left.url, token, "POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] }, { "idempotency-key": "sub-1" });
      expect([replayed.status, replayed.headers.get("retry-after"), replayed.body]).toEqual([503, "5", KEY_REPLACED_REPLAY]);
    } finally {
      expect(await left.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
    }
    expect(crm(["serve", "--port", "0", "--secrets-key-file", old], rotated.url)).toEqual({
      exitCode: 2,
      stdout: "",
      stderr: `crm: secrets key file ${old} is not the key this database was used with (it keeps a check value of that key, and of any signing secrets sealed with it); use the key file the database was used with (--secrets-key-file, CRM_SECRETS_KEY_FILE), after crm secrets-key rotate the new one it was given\n`,
    });

    const [one, two] = await Promise.all([serve(fresh, rotated.url), serve(fresh, rotated.url)]);
    try {
      const replayed = await postWithKey(two.url, token, `/public/v1/webhook-subscriptions/${id!}/rotate-secret`, { grace_hours: 1 }, "rotate-1");
      expect([replayed.status, replayed.replayed, replayed.body.data.secret]).toEqual([200, true, second!]);
      expect((await api(one.url, token, "POST", "/public/v1/contacts", { first_name: "Ada" })).status).toBe(201);
      await waitUntil(() => receiver.received.length > 0, "the delivery", one.proc);
      const [sent] = receiver.received;
      const headers = { "webhook-id": sent!.id, "webhook-timestamp": sent!.timestamp, "webhook-signature": sent!.signature };
      expect([second!, first!].map((secret) => new Webhook(secret).verify(sent!.body, headers))).toEqual([expect.objectContaining({ type: "contact.created" }), expect.objectContaining({ type: "contact.created" })]);
    } finally {
      for (const server of [one, two]) expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
    }
  });
});
