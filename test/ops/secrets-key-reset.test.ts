import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { chmodSync, existsSync, mkdirSync, renameSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { Webhook } from "standardwebhooks";
import { createApiToken } from "../../server/auth/service.ts";
import { databasePath, openDatabase } from "../../server/db/database.ts";
import { MIGRATIONS, migrate } from "../../server/db/migrations.ts";
import { canonicalJson } from "../../server/idempotency/service.ts";
import { sha256 } from "../../server/shared/crypto.ts";
import { newId } from "../../server/shared/ids.ts";
import { SecretBox } from "../../server/webhooks/secrets.ts";
import { CONSOLE_SUBSCRIPTION_FORM_PATH } from "../../server/webhooks/store.ts";
import { api, createToken, postWithKey, runCli, SOURCE, spawnServer, startReceiver, tempDir, waitUntil, type Receiver } from "./support.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { SHUT_OUT } from "../support/permissions.ts";

// A database whose secrets key is lost refuses every start, so its subscriptions cannot be deleted
// through the API: `crm secrets-key reset` deletes them, and the database's record of the key, so
// the next start records the key it is given. These run the command line on SQLite as an operator would.

const env = { PATH: process.env.PATH ?? "", CRM_ALLOW_PRIVATE_TARGETS: "1" };
let receiver: Receiver;

beforeAll(() => (receiver = startReceiver()));
afterAll(() => receiver.stop());

const crm = (args: string[]) => runCli([...SOURCE, ...args], { env });
const serve = (dataDir: string) => spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--log-level", "warn"], { env });

/** contents reads what a reset may change from the data directory's database (no crm holds it meanwhile). */
function contents(dataDir: string) {
  const db = new Database(join(dataDir, "crm.sqlite"));
  try {
    return {
      subscriptions: db.query("SELECT id FROM webhook_subscriptions ORDER BY id").all(),
      deliveries: db.query("SELECT id, status, last_error FROM webhook_deliveries ORDER BY id").all(),
      answers: db.query("SELECT path, idem_key FROM idempotency_keys ORDER BY idem_key").all(),
      keyChecks: db.query<{ n: number }, []>("SELECT count(*) AS n FROM secrets_key_check").get()!.n,
    };
  } finally {
    db.close();
  }
}

/** lostKeyDirectory makes a data directory holding a paused subscription with a pending delivery, kept answers of its create, its rotation and a contact's create, and then loses its secrets.key. */
async function lostKeyDirectory(): Promise<{ dataDir: string; token: string; subscriptionId: string; deliveryId: string }> {
  const dataDir = tempDir("key-reset");
  const token = createToken(SOURCE, dataDir);
  const server = await serve(dataDir);
  try {
    const created = await postWithKey(server.url, token, "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] }, "sub-1");
    expect(created.status).toBe(201);
    const id: string = created.body.data.id;
    expect((await postWithKey(server.url, token, `/public/v1/webhook-subscriptions/${id}/rotate-secret`, {}, "rotate-1")).status).toBe(200);
    // Paused, it keeps the contact's delivery pending.
    expect((await api(server.url, token, "POST", `/public/v1/webhook-subscriptions/${id}/pause`)).status).toBe(200);
    expect((await postWithKey(server.url, token, "/public/v1/contacts", { first_name: "Ada" }, "contact-1")).status).toBe(201);
    const deliveries = await api(server.url, token, "GET", "/public/v1/webhook-deliveries");
    expect(deliveries.body.data.map((d: { status: string }) => d.status)).toEqual(["pending"]);
    expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
    // The console's create form keeps its answer, secret sealed, under its own path, as the API's create does.
    const db = new Database(join(dataDir, "crm.sqlite"));
    db.run("INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, resource_id, created_at) SELECT token_id, method, ?, 'form-1', fingerprint, status, response_body, resource_id, created_at FROM idempotency_keys WHERE idem_key = 'sub-1'", [CONSOLE_SUBSCRIPTION_FORM_PATH]);
    db.close();
    rmSync(join(dataDir, "secrets.key"));
    return { dataDir, token, subscriptionId: id, deliveryId: deliveries.body.data[0].id };
  } catch (error) {
    await server.stopWith("SIGTERM");
    throw error;
  }
}

describe("secrets-key reset: a lost key", () => {
  test("the start is refused; the reset without its flag changes nothing; with it the subscriptions are gone, their pending deliveries failed, the kept answers holding secrets dropped, and the next start records a new key and delivers", async () => {
    const { dataDir, token, subscriptionId, deliveryId } = await lostKeyDirectory();
    const keyPath = join(dataDir, "secrets.key");
    try {
      expect(crm(["serve", "--port", "0", "--data-dir", dataDir])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: `crm: secrets key file ${keyPath} is missing, and this database was used with a key (it keeps a check value of it, and of any signing secrets sealed with it): put back the key kept with the database (backups do not include it), or name it with --secrets-key-file\n`,
      });
      const before = contents(dataDir);
      expect(before).toEqual({
        subscriptions: [{ id: subscriptionId }],
        deliveries: [{ id: deliveryId, status: "pending", last_error: null }],
        answers: [
          { path: "/public/v1/contacts", idem_key: "contact-1" },
          { path: CONSOLE_SUBSCRIPTION_FORM_PATH, idem_key: "form-1" },
          { path: `/public/v1/webhook-subscriptions/${subscriptionId}/rotate-secret`, idem_key: "rotate-1" },
          { path: "/public/v1/webhook-subscriptions", idem_key: "sub-1" },
        ],
        keyChecks: 1,
      });

      expect(crm(["secrets-key", "reset", "--data-dir", dataDir])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr:
          "crm: secrets-key reset deletes every webhook subscription (their signing secrets are sealed with the lost key) and changes nothing without --yes-delete-every-subscription; receivers then need new subscriptions and new secrets\n",
      });
      expect(contents(dataDir)).toEqual(before);

      expect(crm(["secrets-key", "reset", "--yes-delete-every-subscription", "--data-dir", dataDir])).toEqual({
        exitCode: 0,
        stdout: `deleted 1 webhook subscription (1 pending delivery failed unsent); the database now records no secrets key: the next start creates a new key, ${keyPath}, and records it\n`,
        stderr: "",
      });
      expect([contents(dataDir), existsSync(keyPath)]).toEqual([
        {
          subscriptions: [],
          deliveries: [{ id: deliveryId, status: "failed", last_error: "not sent: the subscription was deleted" }],
          answers: [{ path: "/public/v1/contacts", idem_key: "contact-1" }],
          keyChecks: 0,
        },
        false,
      ]);

      const server = await serve(dataDir);
      try {
        expect(existsSync(keyPath)).toBe(true);
        expect((await api(server.url, token, "GET", "/public/v1/webhook-subscriptions")).body.data).toEqual([]);
        // The create's key was forgotten with its answer: the same request creates a subscription, with a secret of the new key.
        const again = await postWithKey(server.url, token, "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] }, "sub-1");
        expect([again.status, again.replayed, again.body.data.id === subscriptionId]).toEqual([201, false, false]);
        expect((await postWithKey(server.url, token, "/public/v1/contacts", { first_name: "Grace" }, "contact-2")).status).toBe(201);
        await waitUntil(() => receiver.received.length === 1, "the delivery", server.proc);
        const [sent] = receiver.received;
        const payload = new Webhook(again.body.data.secret).verify(sent!.body, { "webhook-id": sent!.id, "webhook-timestamp": sent!.timestamp, "webhook-signature": sent!.signature });
        expect(payload).toMatchObject({ type: "contact.created", data: { first_name: "Grace" } });
      } finally {
        expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("a key file named with --secrets-key-file: the reset names it, and the next start with it records it", async () => {
    const { dataDir } = await lostKeyDirectory();
    const keyPath = writeSecretsKeyFile(join(dataDir, "new.key"), 7);
    try {
      expect(crm(["secrets-key", "reset", "--yes-delete-every-subscription", "--data-dir", dataDir, "--secrets-key-file", keyPath])).toEqual({
        exitCode: 0,
        stdout: `deleted 1 webhook subscription (1 pending delivery failed unsent); the database now records no secrets key: the next start records the key it is given, ${keyPath}\n`,
        stderr: "",
      });
      const server = await spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--secrets-key-file", keyPath, "--log-level", "warn"], { env });
      expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
      expect(existsSync(join(dataDir, "secrets.key"))).toBe(false);
      expect(contents(dataDir).keyChecks).toBe(1);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
  test("a database from before the check value whose only sealed secret is a kept create answer (its subscription deleted): the reset drops that answer and says the database records no key (not that it deleted a record it never had), and the create retried makes a new subscription", async () => {
    const dataDir = tempDir("key-reset-old");
    const keyPath = join(dataDir, "secrets.key");
    const body = { target_url: receiver.url, events: ["contact.created"] };
    const db = openDatabase(databasePath(dataDir));
    let token = "";
    try {
      // What a crm before 0025 left after a create kept for replay and a delete; its key then lost.
      migrate(db.sqlite, MIGRATIONS.filter((m) => m.version < 25));
      const created = await createApiToken(db, "old");
      token = created.token;
      const id = newId("sub");
      const answer = { data: { id, ...body, description: null, status: "active", created_at: "2026-11-21T10:00:00.000Z", updated_at: "2026-11-21T10:00:00.000Z", secret: new SecretBox(Buffer.alloc(32, 1)).seal(id, "whsec_abc") } };
      db.sqlite
        .query("INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, created_at) VALUES (?, 'POST', '/public/v1/webhook-subscriptions', 'sub-1', ?, 201, ?, ?)")
        .run(created.info.id, sha256(canonicalJson(body)), JSON.stringify(answer), Date.now());
    } finally {
      await db.close();
    }
    try {
      expect(crm(["secrets-key", "reset", "--yes-delete-every-subscription", "--data-dir", dataDir])).toEqual({
        exitCode: 0,
        stdout: `deleted 0 webhook subscriptions (0 pending deliveries failed unsent); the database now records no secrets key: the next start creates a new key, ${keyPath}, and records it\n`,
        stderr: "",
      });
      expect(contents(dataDir)).toEqual({ subscriptions: [], deliveries: [], answers: [], keyChecks: 0 });
      const server = await serve(dataDir);
      try {
        const again = await postWithKey(server.url, token, "/public/v1/webhook-subscriptions", body, "sub-1");
        expect([again.status, again.replayed]).toEqual([201, false]);
      } finally {
        expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe("secrets-key reset: refusals", () => {
  test("with the database's own key present the reset refuses and changes nothing: nothing is lost", async () => {
    const dataDir = tempDir("key-reset-kept");
    const token = createToken(SOURCE, dataDir);
    const server = await serve(dataDir);
    expect((await postWithKey(server.url, token, "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] }, "sub-1")).status).toBe(201);
    expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
    try {
      const before = contents(dataDir);
      expect(crm(["secrets-key", "reset", "--yes-delete-every-subscription", "--data-dir", dataDir])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: `crm: secrets key file ${join(dataDir, "secrets.key")} is the key this database was used with: nothing is lost, and a reset would only delete every webhook subscription; nothing was changed\n`,
      });
      expect(contents(dataDir)).toEqual(before);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("a secrets key the reset may not read, behind a directory or by its own mode, is named as unreadable, not taken for lost: nothing is deleted", async () => {
    const dataDir = tempDir("key-reset-unreadable");
    const token = createToken(SOURCE, dataDir);
    const server = await serve(dataDir);
    expect((await postWithKey(server.url, token, "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] }, "sub-1")).status).toBe(201);
    expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
    // The data directory's secrets.key is a link to the key kept in a folder the command may not enter.
    const keys = join(dataDir, "keys");
    const kept = join(keys, "secrets.key");
    mkdirSync(keys);
    renameSync(join(dataDir, "secrets.key"), kept);
    symlinkSync(kept, join(dataDir, "secrets.key"));
    const before = contents(dataDir);
    const reset = (args: string[]) => runCli([...SHUT_OUT, ...SOURCE, "secrets-key", "reset", "--yes-delete-every-subscription", "--data-dir", dataDir, ...args], { env });
    const denied = "permission denied (run the command as the user the service runs as)";
    try {
      chmodSync(keys, 0o000);
      const behindDirectory = [reset([]), reset(["--secrets-key-file", kept])];
      chmodSync(keys, 0o700);
      chmodSync(kept, 0o000);
      const fileItself = [reset([]), reset(["--secrets-key-file", kept])];
      expect([...behindDirectory, ...fileItself]).toEqual([
        { exitCode: 2, stdout: "", stderr: `crm: secrets key file ${join(dataDir, "secrets.key")} cannot be read: ${denied}\n` },
        { exitCode: 2, stdout: "", stderr: `crm: secrets key file ${kept} cannot be read: ${denied}\n` },
        { exitCode: 2, stdout: "", stderr: `crm: secrets key file ${join(dataDir, "secrets.key")} cannot be read: ${denied}\n` },
        { exitCode: 2, stdout: "", stderr: `crm: secrets key file ${kept} cannot be read: ${denied}\n` },
      ]);
      expect(contents(dataDir)).toEqual(before);
      expect(before.subscriptions.length).toBe(1);
    } finally {
      chmodSync(keys, 0o700);
      chmodSync(kept, 0o600);
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("after a reset, a second one finds nothing to reset: the database records no key and holds no secret", async () => {
    const { dataDir } = await lostKeyDirectory();
    try {
      expect(crm(["secrets-key", "reset", "--yes-delete-every-subscription", "--data-dir", dataDir]).exitCode).toBe(0);
      expect(crm(["secrets-key", "reset", "--yes-delete-every-subscription", "--data-dir", dataDir])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: "crm: this database records no secrets key and holds no signing secret: any key opens it, and a reset would only delete every webhook subscription; nothing was changed\n",
      });
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("a database that has recorded no key and holds no secret is refused as such, with a key file present too: that key is not yet the database's", async () => {
    const dataDir = tempDir("key-reset-fresh");
    createToken(SOURCE, dataDir);
    const key = writeSecretsKeyFile(join(dataDir, "secrets.key"));
    try {
      const before = contents(dataDir);
      expect(crm(["secrets-key", "reset", "--yes-delete-every-subscription", "--data-dir", dataDir])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: "crm: this database records no secrets key and holds no signing secret: any key opens it, and a reset would only delete every webhook subscription; nothing was changed\n",
      });
      expect([contents(dataDir), existsSync(key)]).toEqual([before, true]);
      expect(before.keyChecks).toBe(0);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("while a serve holds the data directory the reset is refused; without a database, or a subcommand, it is one line too", async () => {
    const dataDir = tempDir("key-reset-serving");
    createToken(SOURCE, dataDir);
    const server = await serve(dataDir);
    try {
      expect(crm(["secrets-key", "reset", "--yes-delete-every-subscription", "--data-dir", dataDir, "--secrets-key-file", join(dataDir, "crm.sqlite")]).stderr).toBe(
        `crm: secrets key file ${join(dataDir, "crm.sqlite")} does not hold a key (base64 of 32 random bytes)\n`,
      );
      expect(crm(["secrets-key", "reset", "--yes-delete-every-subscription", "--data-dir", dataDir])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: `crm: the data directory ${JSON.stringify(dataDir)} is in use by a running crm serve, or a migrate or copy-to-postgres under way (it holds ${join(dataDir, "crm.lock")}): stop it first: the reset deletes the subscriptions it serves\n`,
      });
    } finally {
      expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
      rmSync(dataDir, { recursive: true, force: true });
    }
    const empty = tempDir("key-reset-empty");
    try {
      expect(crm(["secrets-key", "reset", "--yes-delete-every-subscription", "--data-dir", empty]).stderr).toStartWith(`crm: no database at ${join(empty, "crm.sqlite")}; `);
      expect(crm(["secrets-key"])).toEqual({ exitCode: 2, stdout: "", stderr: "crm: usage: secrets-key reset --yes-delete-every-subscription (only when the database's secrets key is lost)\n" });
      expect(crm(["secrets-key", "reset", "--yes-delete-every-subscription", "--yes-delete-every-subscription"]).stderr).toBe("crm: --yes-delete-every-subscription is given twice; give it once\n");
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });
});
