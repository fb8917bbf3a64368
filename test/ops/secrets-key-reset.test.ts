import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { databasePath, openDatabase } from "../../server/db/database.ts";
import { MIGRATIONS, migrate } from "../../server/db/migrations.ts";
import { canonicalJson } from "../../server/idempotency/service.ts";
import { sha256 } from "../../server/shared/crypto.ts";
import { newId } from "../../server/shared/ids.ts";
import { SecretBox } from "../../server/webhooks/secrets.ts";
import { LOST_SECRET_REASON } from "../../server/webhooks/service.ts";
import { CONSOLE_SUBSCRIPTION_FORM_PATH } from "../../server/webhooks/store.ts";
import { Webhook } from "standardwebhooks";
import { api, createToken, postWithKey, runCli, SOURCE, spawnServer, startReceiver, takeBackAfterKeyReset, tempDir, waitUntil, type Receiver } from "./support.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { tokenBeforeUpgrade } from "../support/deleted-before-upgrade.ts";
import { SHUT_OUT } from "../support/permissions.ts";

// A database whose secrets key is lost refuses every start, so its subscriptions' secrets cannot be
// replaced through the API: `crm secrets-key reset` gives each a new one under the new key, disables
// it until it is rotated, and records the new key. A key others may have read is replaced with
// `crm secrets-key rotate --new-key-file FILE`: every sealed secret is sealed anew with the new key in
// one transaction, and receivers notice nothing. These run the command line on SQLite as an operator would.

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

const CONFIRM = "--yes-disable-every-subscription";
const FAILED_UNSENT = "not sent: the subscription was disabled when its signing secret was lost with the secrets key";
const NEXT_STEPS =
  "for each: rotate its secret (POST /public/v1/webhook-subscriptions/ID/rotate-secret, or Rotate on the console's Subscriptions page), give the new secret to its receiver, enable it (POST .../enable), then send its failed deliveries again under their webhook-ids (POST .../recover)\n";

describe("secrets-key reset: a lost key", () => {
  test("the start is refused; the reset without its flag lists the subscriptions and changes nothing; with it each is kept, disabled with a new secret under the new key it records, its pending deliveries failed, the kept answers holding secrets dropped; rotated, enabled and recovered, the delivery goes out under its webhook-id", async () => {
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
      const listed = `${subscriptionId}  paused  ${receiver.url}  contact.created  1 pending\n`;

      expect(crm(["secrets-key", "reset", "--data-dir", dataDir])).toEqual({
        exitCode: 2,
        stdout: listed,
        stderr:
          "crm: secrets-key reset changes nothing without --yes-disable-every-subscription; with it, the webhook subscription listed (id, status, target URL, events, pending deliveries, description) gets a new signing secret in place of the one sealed with the lost key and is disabled until its secret is rotated, and 1 pending delivery end failed, to be recovered once it is enabled\n",
      });
      expect([contents(dataDir), existsSync(keyPath)]).toEqual([before, false]);

      expect(crm(["secrets-key", "reset", CONFIRM, "--data-dir", dataDir])).toEqual({
        exitCode: 0,
        stdout: `disabled 1 webhook subscription, each with a new signing secret no receiver knows (1 pending delivery failed unsent); the database now records the secrets key ${keyPath} as its own; as they were:\n${listed}${NEXT_STEPS}`,
        stderr: `crm: created the key that encrypts webhook signing secrets, ${keyPath}; keep it with the database: backups do not include it\n`,
      });
      expect([contents(dataDir), existsSync(keyPath)]).toEqual([
        {
          subscriptions: [{ id: subscriptionId }],
          deliveries: [{ id: deliveryId, status: "failed", last_error: FAILED_UNSENT }],
          answers: [{ path: "/public/v1/contacts", idem_key: "contact-1" }],
          keyChecks: 1,
        },
        true,
      ]);

      const server = await serve(dataDir);
      try {
        const kept = (await api(server.url, token, "GET", `/public/v1/webhook-subscriptions/${subscriptionId}`)).body.data;
        expect([kept.status, kept.disabled_reason, kept.target_url, kept.events]).toEqual(["disabled", LOST_SECRET_REASON, receiver.url, ["contact.created"]]);
        expect(await takeBackAfterKeyReset({ rotateAt: server, recoverAt: server }, token, subscriptionId, receiver)).toEqual({
          webhookId: deliveryId,
          payload: expect.objectContaining({ type: "contact.created", data: expect.objectContaining({ first_name: "Ada" }) }),
        });
        // The create's answer went with the old key: the same request creates a subscription, with a secret of the new key.
        const again = await postWithKey(server.url, token, "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] }, "sub-1");
        expect([again.status, again.replayed, again.body.data.id === subscriptionId]).toEqual([201, false, false]);
      } finally {
        expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
      }
    } finally {
      receiver.received.length = 0;
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("a key file named with --secrets-key-file: missing, the reset says how to make it there; made, the reset (confirmed by the flag's old name too) records it, and the next start with it serves", async () => {
    const { dataDir, subscriptionId } = await lostKeyDirectory();
    const keyPath = join(dataDir, "new.key");
    try {
      const missing = `crm: secrets key file ${keyPath} (--secrets-key-file, CRM_SECRETS_KEY_FILE) does not exist: the reset seals the subscriptions' new secrets with the key there; make a new key first, (umask 077; head -c 32 /dev/urandom | base64 > ${keyPath}), then run the reset again\n`;
      expect([crm(["secrets-key", "reset", "--data-dir", dataDir, "--secrets-key-file", keyPath]), crm(["secrets-key", "reset", CONFIRM, "--data-dir", dataDir, "--secrets-key-file", keyPath])]).toEqual([
        { exitCode: 2, stdout: "", stderr: missing },
        { exitCode: 2, stdout: "", stderr: missing },
      ]);
      writeSecretsKeyFile(keyPath, 7);
      expect(crm(["secrets-key", "reset", "--yes-delete-every-subscription", "--data-dir", dataDir, "--secrets-key-file", keyPath])).toEqual({
        exitCode: 0,
        stdout: `disabled 1 webhook subscription, each with a new signing secret no receiver knows (1 pending delivery failed unsent); the database now records the secrets key ${keyPath} as its own; as they were:\n${subscriptionId}  paused  ${receiver.url}  contact.created  1 pending\n${NEXT_STEPS}`,
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
  test("a database from before the check value whose only sealed secret is a kept create answer (its subscription deleted): the reset drops that answer and records the new key, and the create retried makes a new subscription", async () => {
    const dataDir = tempDir("key-reset-old");
    const keyPath = join(dataDir, "secrets.key");
    const body = { target_url: receiver.url, events: ["contact.created"] };
    const db = openDatabase(databasePath(dataDir));
    let token = "";
    try {
      // What a crm before 0025 left after a create kept for replay and a delete; its key then lost.
      migrate(db.sqlite, MIGRATIONS.filter((m) => m.version < 25));
      const created = await tokenBeforeUpgrade(db);
      token = created.token;
      const id = newId("sub");
      const answer = { data: { id, ...body, description: null, status: "active", created_at: "2026-11-21T10:00:00.000Z", updated_at: "2026-11-21T10:00:00.000Z", secret: new SecretBox(Buffer.alloc(32, 1)).seal(id, "whsec_abc") } };
      db.sqlite
        .query("INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, created_at) VALUES (?, 'POST', '/public/v1/webhook-subscriptions', 'sub-1', ?, 201, ?, ?)")
        .run(created.id, sha256(canonicalJson(body)), JSON.stringify(answer), Date.now());
    } finally {
      await db.close();
    }
    try {
      expect(crm(["secrets-key", "reset", CONFIRM, "--data-dir", dataDir])).toEqual({
        exitCode: 0,
        stdout: `disabled 0 webhook subscriptions, each with a new signing secret no receiver knows (0 pending deliveries failed unsent); the database now records the secrets key ${keyPath} as its own\n`,
        // The command migrates first, and names what it applied.
        stderr: `crm: applied ${MIGRATIONS.filter((m) => m.version >= 25).map((m) => m.name).join(", ")}\ncrm: created the key that encrypts webhook signing secrets, ${keyPath}; keep it with the database: backups do not include it\n`,
      });
      expect(contents(dataDir)).toEqual({ subscriptions: [], deliveries: [], answers: [], keyChecks: 1 });
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
      expect([crm(["secrets-key", "reset", CONFIRM, "--data-dir", dataDir]), crm(["secrets-key", "reset", "--data-dir", dataDir])]).toEqual([1, 2].map(() => ({
        exitCode: 2,
        stdout: "",
        stderr: `crm: secrets key file ${join(dataDir, "secrets.key")} is the key this database was used with: nothing is lost, and a reset would only disable every webhook subscription; nothing was changed\n`,
      })));
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
    const reset = (args: string[]) => runCli([...SHUT_OUT, ...SOURCE, "secrets-key", "reset", CONFIRM, "--data-dir", dataDir, ...args], { env });
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

  test("after a reset, a second one finds nothing to reset: the database records the key the first one made", async () => {
    const { dataDir } = await lostKeyDirectory();
    try {
      expect(crm(["secrets-key", "reset", CONFIRM, "--data-dir", dataDir]).exitCode).toBe(0);
      const before = contents(dataDir);
      expect(crm(["secrets-key", "reset", CONFIRM, "--data-dir", dataDir])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: `crm: secrets key file ${join(dataDir, "secrets.key")} is the key this database was used with: nothing is lost, and a reset would only disable every webhook subscription; nothing was changed\n`,
      });
      expect(contents(dataDir)).toEqual(before);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("a database that has recorded no key and holds no secret is refused as such, with a key file present too (that key is not yet the database's), or without one (the key made for the reset is not left behind)", async () => {
    const dataDir = tempDir("key-reset-fresh");
    createToken(SOURCE, dataDir);
    const key = join(dataDir, "secrets.key");
    const refusal = {
      exitCode: 2,
      stdout: "",
      stderr: "crm: this database records no secrets key and holds no signing secret: any key opens it, and a reset would only disable every webhook subscription; nothing was changed\n",
    };
    try {
      const before = contents(dataDir);
      expect([crm(["secrets-key", "reset", CONFIRM, "--data-dir", dataDir]), existsSync(key)]).toEqual([refusal, false]);
      writeSecretsKeyFile(key);
      expect(crm(["secrets-key", "reset", CONFIRM, "--data-dir", dataDir])).toEqual(refusal);
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
      expect(crm(["secrets-key", "reset", CONFIRM, "--data-dir", dataDir, "--secrets-key-file", join(dataDir, "crm.sqlite")]).stderr).toBe(
        `crm: secrets key file ${join(dataDir, "crm.sqlite")} does not hold a key (base64 of 32 random bytes)\n`,
      );
      expect([crm(["secrets-key", "reset", CONFIRM, "--data-dir", dataDir]), crm(["secrets-key", "reset", "--data-dir", dataDir])]).toEqual([1, 2].map(() => ({
        exitCode: 2,
        stdout: "",
        stderr: `crm: the data directory ${JSON.stringify(dataDir)} is in use by a running crm serve, or a migrate or copy-to-postgres under way (it holds ${join(dataDir, "crm.lock")}): stop it first: the reset disables the subscriptions it serves\n`,
      })));
    } finally {
      expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
      rmSync(dataDir, { recursive: true, force: true });
    }
    const empty = tempDir("key-reset-empty");
    try {
      expect(crm(["secrets-key", "reset", CONFIRM, "--data-dir", empty]).stderr).toStartWith(`crm: no database at ${join(empty, "crm.sqlite")}; `);
      expect(crm(["secrets-key", "reset", "--data-dir", empty]).stderr).toStartWith(`crm: no database at ${join(empty, "crm.sqlite")}; `);
      expect(crm(["secrets-key"])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: "crm: usage: secrets-key rotate --new-key-file FILE (a key others may have read) | secrets-key reset [--yes-disable-every-subscription] (only when the database's secrets key is lost; without the flag it lists what it would change)\n",
      });
      expect(crm(["secrets-key", "reset", CONFIRM, CONFIRM]).stderr).toBe("crm: --yes-disable-every-subscription is given twice; give it once\n");
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });
});

describe("secrets-key reset: a write refused after it committed", () => {
  test("another process holding the write lock between the writes failing the pending deliveries: the reset stands, its key stays, exit 0 with a warning saying the service fails the rest, no stack trace", async () => {
    const { dataDir, subscriptionId } = await lostKeyDirectory();
    try {
      // 300,000 pending deliveries (copies of the one there): 300 writes after the reset's transaction.
      const file = join(dataDir, "crm.sqlite");
      const setup = new Database(file);
      const columns = setup.query<{ name: string }, []>("PRAGMA table_info(webhook_deliveries)").all().map((c) => c.name).filter((c) => c !== "id");
      setup.run(`INSERT INTO webhook_deliveries (id, ${columns.join(", ")})
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000)
        SELECT 'dlv_copy' || printf('%06d', i), ${columns.map((c) => `d.${c}`).join(", ")} FROM n, (SELECT * FROM webhook_deliveries LIMIT 1) d`);
      setup.close();
      const reset = Bun.spawn([...SOURCE, "secrets-key", "reset", CONFIRM, "--data-dir", dataDir], { env, stdout: "pipe", stderr: "pipe" });
      // Once the reset has committed (the subscription disabled), another process takes the write lock between two of its later writes, for longer than their 5 s wait.
      const holder = new Database(file);
      holder.run("PRAGMA busy_timeout = 3000");
      const status = holder.query<{ status: string }, [string]>("SELECT status FROM webhook_subscriptions WHERE id = ?");
      while (status.get(subscriptionId)?.status !== "disabled") await Bun.sleep(1);
      holder.run("BEGIN IMMEDIATE");
      await Bun.sleep(7_000);
      holder.run("COMMIT");
      holder.close();
      // Refused at the first of those writes or a later one, which says how many the writes before it failed.
      const [exitCode, stdout, stderr] = await Promise.all([reset.exited, new Response(reset.stdout).text(), new Response(reset.stderr).text()]);
      const key = join(dataDir, "secrets.key");
      expect({ exitCode, stdout: stdout.split(";")[0], stderr: stderr.replace(/\(database is locked(, after \d+ of the subscription's pending deliveries were failed \(not sent\))?\)/, "(REFUSAL)") }).toEqual({
        exitCode: 0,
        stdout: "disabled 1 webhook subscription, each with a new signing secret no receiver knows (300001 pending deliveries to end failed unsent: not all yet, see below)",
        stderr:
          `crm: created the key that encrypts webhook signing secrets, ${key}; keep it with the database: backups do not include it\n` +
          "crm: warning: the reset is done, but failing its pending deliveries was refused (REFUSAL); those left stay pending, and none is sent: the service fails them when it starts, and every minute while it runs\n",
      });
      expect(existsSync(key)).toBe(true);
      const pending = () => {
        const db = new Database(file);
        try {
          return db.query<{ n: number }, []>("SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'pending'").get()!.n;
        } finally {
          db.close();
        }
      };
      expect(pending()).toBeGreaterThan(0);
      // The key the database records is there: the next start serves, and fails the deliveries left.
      const server = await serve(dataDir);
      try {
        for (const deadline = Date.now() + 60_000; pending() > 0 && Date.now() < deadline; ) await Bun.sleep(100);
        expect(pending()).toBe(0);
      } finally {
        expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 120_000);
});

/** sealed reads every sealed secret the database holds: the subscriptions' (and previous ones) and the kept answers'. */
function sealed(dataDir: string): string[] {
  const db = new Database(join(dataDir, "crm.sqlite"), { readonly: true });
  try {
    const rows = db.query<{ secret: string; previous_secret: string | null }, []>("SELECT secret, previous_secret FROM webhook_subscriptions ORDER BY id").all();
    const answers = db.query<{ secret: string }, []>("SELECT response_body ->> '$.data.secret' AS secret FROM idempotency_keys WHERE path LIKE '/public/v1/webhook-subscriptions%' ORDER BY idem_key").all();
    return [...rows.flatMap((r) => [r.secret, r.previous_secret ?? ""]), ...answers.map((a) => a.secret)];
  } finally {
    db.close();
  }
}

/** fileText is the data directory's database file and WAL as text, to look for what they still hold. */
const fileText = (dataDir: string) =>
  ["crm.sqlite", "crm.sqlite-wal"]
    .map((name) => join(dataDir, name))
    .filter((file) => existsSync(file))
    .map((file) => readFileSync(file).toString("latin1"))
    .join("");

describe("secrets-key rotate on SQLite", () => {
  test("refused while serve runs, without a new key, with a new key open to others or the same key; then every sealed secret is sealed anew in one transaction, the file rebuilt without the old sealed texts; the old key is refused at start, run again it says it is done, and with the new key the subscription delivers signed with its unchanged secrets and replays show them", async () => {
    const dataDir = tempDir("key-rotate");
    const keyPath = join(dataDir, "secrets.key");
    const newKey = join(dataDir, "new.key");
    try {
      const token = createToken(SOURCE, dataDir);
      const server = await serve(dataDir);
      let id: string;
      let first: string;
      let second: string;
      try {
        const created = await postWithKey(server.url, token, "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] }, "sub-1");
        id = created.body.data.id;
        first = created.body.data.secret;
        // In its grace period the previous secret signs too: it is sealed anew as well.
        const rotated = await postWithKey(server.url, token, `/public/v1/webhook-subscriptions/${id}/rotate-secret`, { grace_hours: 1 }, "rotate-1");
        second = rotated.body.data.secret;
        writeSecretsKeyFile(newKey, 9);
        expect(crm(["secrets-key", "rotate", "--new-key-file", newKey, "--data-dir", dataDir])).toEqual({
          exitCode: 2,
          stdout: "",
          stderr: `crm: the data directory "${dataDir}" is in use by a running crm serve, or a migrate or copy-to-postgres under way (it holds ${join(dataDir, "crm.lock")}): stop it first: it would go on sealing with the old key\n`,
        });
      } finally {
        expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
      }
      const before = sealed(dataDir);
      expect(before).toHaveLength(4);

      expect(crm(["secrets-key", "rotate", "--data-dir", dataDir])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: "crm: secrets-key rotate needs --new-key-file FILE, a new key made with (umask 077; head -c 32 /dev/urandom | base64 > FILE)\n",
      });
      const missing = join(dataDir, "missing.key");
      expect(crm(["secrets-key", "rotate", "--new-key-file", missing, "--data-dir", dataDir])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: `crm: secrets-key rotate: the new key file ${missing} does not exist; make a new key with (umask 077; head -c 32 /dev/urandom | base64 > ${missing}) and run the command again\n`,
      });
      chmodSync(newKey, 0o644);
      expect(crm(["secrets-key", "rotate", "--new-key-file", newKey, "--data-dir", dataDir])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: `crm: secrets-key rotate: the new key file ${newKey} is open to other users (mode 0644): a key others may read is no better than the one it replaces; make it the owner's alone (chmod 600 ${newKey}) and run the command again; nothing was changed\n`,
      });
      chmodSync(newKey, 0o600);
      const copy = join(dataDir, "copy.key");
      copyFileSync(keyPath, copy);
      expect(crm(["secrets-key", "rotate", "--new-key-file", copy, "--data-dir", dataDir])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: `crm: secrets-key rotate: ${copy} holds the same key as ${keyPath}, the one to replace; make a new key with (umask 077; head -c 32 /dev/urandom | base64 > ${copy}); nothing was changed\n`,
      });
      expect(sealed(dataDir)).toEqual(before);

      const next = `next: mv ${newKey} ${keyPath}, then start the service; receivers need no change. Backups taken before hold secrets sealed with the old key: keep it with them, apart, or destroy both\n`;
      expect(crm(["secrets-key", "rotate", "--new-key-file", newKey, "--data-dir", dataDir])).toEqual({
        exitCode: 0,
        stdout:
          `sealed anew with ${newKey} the signing secrets of 1 webhook subscription (with 1 previous secret of a rotation) and the secrets in 2 kept answers of creates and rotations; the database now records it as its secrets key, and refuses ${keyPath}; the database file was rebuilt, so its free space keeps nothing the old key sealed\n` +
          next,
        stderr: "",
      });
      const after = sealed(dataDir);
      // Each sealed anew (another nonce, another key), the four characters shown masked kept.
      expect(after.map((s, i) => [s === before[i], s.slice(0, 15) === before[i]!.slice(0, 15)])).toEqual(before.map(() => [false, true]));
      const text = fileText(dataDir);
      expect(before.filter((s) => text.includes(s.slice(15)))).toEqual([]);

      expect(crm(["serve", "--port", "0", "--data-dir", dataDir])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: `crm: secrets key file ${keyPath} is not the key this database was used with (it keeps a check value of that key, and of any signing secrets sealed with it); use the key file the database was used with (--secrets-key-file, CRM_SECRETS_KEY_FILE), after crm secrets-key rotate the new one it was given\n`,
      });
      // Run again (was the first run's commit in?), it finds the new key the database's already.
      expect(crm(["secrets-key", "rotate", "--new-key-file", newKey, "--data-dir", dataDir])).toEqual({
        exitCode: 0,
        stdout: `the database already records ${newKey} as its secrets key (a rotation committed before): nothing was sealed anew; the database file was rebuilt, so its free space keeps nothing the old key sealed\n${next}`,
        stderr: "",
      });
      expect(sealed(dataDir)).toEqual(after);

      renameSync(newKey, keyPath);
      const restarted = await serve(dataDir);
      try {
        const replays = await Promise.all([
          postWithKey(restarted.url, token, "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] }, "sub-1"),
          postWithKey(restarted.url, token, `/public/v1/webhook-subscriptions/${id}/rotate-secret`, { grace_hours: 1 }, "rotate-1"),
        ]);
        expect(replays.map((r) => [r.status, r.replayed, r.body.data.secret])).toEqual([
          [201, true, first],
          [200, true, second],
        ]);
        expect((await api(restarted.url, token, "POST", "/public/v1/contacts", { first_name: "Ada" })).status).toBe(201);
        await waitUntil(() => receiver.received.length > 0, "the delivery", restarted.proc);
        const [sent] = receiver.received;
        const headers = { "webhook-id": sent!.id, "webhook-timestamp": sent!.timestamp, "webhook-signature": sent!.signature };
        // Signed by the new secret and, in its grace, the previous one: both verify.
        const payloads = [second, first].map((secret) => new Webhook(secret).verify(sent!.body, headers));
        expect(payloads).toEqual([expect.objectContaining({ type: "contact.created" }), expect.objectContaining({ type: "contact.created" })]);
        expect(sent!.signature.split(" ")).toHaveLength(2);
      } finally {
        expect(await restarted.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
      }
    } finally {
      receiver.received.length = 0;
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

/** oldSealedInFile is which of `before`, the sealed texts before a rotation, the database file still holds. */
const oldSealedInFile = (dataDir: string, before: string[]) => before.filter((s) => fileText(dataDir).includes(s.slice(15)));

/**
 * rotatedUnderAReader rotates a data directory's key to new.key while a process reads the database
 * (a sqlite3 session, a crm backup): the commit is done, the rebuild after it refused. `kept` is the
 * old sealed texts the file still held then.
 */
async function rotatedUnderAReader(dataDir: string) {
  const keyPath = join(dataDir, "secrets.key");
  const newKey = writeSecretsKeyFile(join(dataDir, "new.key"), 9);
  const token = createToken(SOURCE, dataDir);
  const server = await serve(dataDir);
  try {
    expect((await postWithKey(server.url, token, "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] }, "sub-1")).status).toBe(201);
  } finally {
    expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
  }
  const before = sealed(dataDir).filter((s) => s !== "");
  expect(before).toHaveLength(2);
  // The reader's snapshot: the log cannot be emptied into the file.
  const reader = new Database(join(dataDir, "crm.sqlite"), { readonly: true });
  reader.run("BEGIN");
  reader.query("SELECT count(*) FROM webhook_subscriptions").get();
  try {
    const rotated = crm(["secrets-key", "rotate", "--new-key-file", newKey, "--data-dir", dataDir]);
    return { keyPath, newKey, before, rotated, kept: oldSealedInFile(dataDir, before) };
  } finally {
    reader.run("COMMIT");
    reader.close();
  }
}

describe("secrets-key rotate on SQLite: the file's rebuild refused after the commit", () => {
  test("a process reading the database through the rebuild keeps the old sealed texts in the file: the rotation is done (the next steps printed, exit 0), a warning says the rebuild was not, and the command run again rebuilds it", async () => {
    const dataDir = tempDir("key-rotate-read");
    try {
      const { keyPath, newKey, before, rotated, kept } = await rotatedUnderAReader(dataDir);
      const next = `next: mv ${newKey} ${keyPath}, then start the service; receivers need no change. Backups taken before hold secrets sealed with the old key: keep it with them, apart, or destroy both\n`;
      expect({ rotated, kept }).toEqual({
        rotated: {
          exitCode: 0,
          stdout:
            `sealed anew with ${newKey} the signing secrets of 1 webhook subscription (with 0 previous secrets of a rotation) and the secrets in 1 kept answer of creates and rotations; the database now records it as its secrets key, and refuses ${keyPath}\n` +
            next,
          stderr: `crm: warning: the rotation is done, but the database file was not rebuilt (another process reads the database (a sqlite3 session, a crm backup), so its log could not be written into the file): its free space and log may still hold the secrets sealed with the old key; run the command again once nothing else reads the database and there is room for two copies of its file (one beside it, one in the temporary directory): it rebuilds the file only, given --new-key-file the new key where it is then (once moved as the next step says, ${keyPath})\n`,
        },
        kept: before,
      });
      expect(crm(["secrets-key", "rotate", "--new-key-file", newKey, "--data-dir", dataDir])).toEqual({
        exitCode: 0,
        stdout: `the database already records ${newKey} as its secrets key (a rotation committed before): nothing was sealed anew; the database file was rebuilt, so its free space keeps nothing the old key sealed\n${next}`,
        stderr: "",
      });
      expect(oldSealedInFile(dataDir, before)).toEqual([]);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 120_000);

  // s36 review 5: README's recipe moves the new key into place right after the command; the
  // warning's "run the command again" then found no new key file, or refused the key in place as
  // the same key as the one to replace, advising a new key made there, over the database's.
  test("after the mv the next steps print, the command given the key now in place rebuilds the file only", async () => {
    const dataDir = tempDir("key-rotate-moved");
    try {
      const { keyPath, newKey, before, rotated, kept } = await rotatedUnderAReader(dataDir);
      expect([rotated.exitCode, kept]).toEqual([0, before]);
      renameSync(newKey, keyPath);
      expect(crm(["secrets-key", "rotate", "--new-key-file", keyPath, "--data-dir", dataDir])).toEqual({
        exitCode: 0,
        stdout: `${keyPath} is the secrets key in use, the database's: nothing was sealed anew; the database file was rebuilt, so its free space keeps nothing the old key sealed\n`,
        stderr: "",
      });
      expect(oldSealedInFile(dataDir, before)).toEqual([]);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 120_000);
});
