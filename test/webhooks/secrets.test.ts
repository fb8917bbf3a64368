import { describe, expect, test } from "bun:test";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { Webhook } from "standardwebhooks";
import { createApp, createRuntime } from "../../server/app.ts";
import { DEFAULT_CONFIG, type Config } from "../../server/config.ts";
import { databasePath, openDatabase } from "../../server/db/database.ts";
import { tokenBeforeUpgrade } from "../support/deleted-before-upgrade.ts";
import { MIGRATIONS, migrate } from "../../server/db/migrations.ts";
import type { Db } from "../../server/db/sql.ts";
import { canonicalJson } from "../../server/idempotency/service.ts";
import { sha256 } from "../../server/shared/crypto.ts";
import { partialName } from "../../server/shared/files.ts";
import { createLogger } from "../../server/shared/log.ts";
import { newId } from "../../server/shared/ids.ts";
import { recordPing } from "../../server/webhooks/outbox.ts";
import { loadSecretsKey, SecretBox, SecretUnreadable } from "../../server/webhooks/secrets.ts";
import { runCli, SOURCE } from "../ops/support.ts";
import { waitFor, webhookTestScope, type WebhookHarness } from "./support.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { UNKNOWN_ORIGIN } from "../support/harness.ts";

const scope = webhookTestScope();
let h: WebhookHarness;

const storedSecret = async (db: Db, id: string) => (await db.get<{ secret: string }>("SELECT secret FROM webhook_subscriptions WHERE id = ?", [id]))!.secret;

/** fileBytes is a database file with its WAL, as someone copying the data directory would get it. */
const fileBytes = (dataDir: string) =>
  Buffer.concat(["crm.sqlite", "crm.sqlite-wal"].filter((f) => existsSync(join(dataDir, f))).map((f) => readFileSync(join(dataDir, f))));

const tempDir = () => mkdtempSync(join(tmpdir(), "crm-secrets-"));
const configFor = (dataDir: string, overrides: Partial<Config> = {}): Config => ({ ...DEFAULT_CONFIG, dataDir, logLevel: "error", allowPrivateTargets: true, ...overrides });

/** startWith starts a runtime on the data directory's database, as serve does, and closes it again. */
const startWith = async (dataDir: string, overrides: Partial<Config> = {}) => {
  const db = openDatabase(databasePath(dataDir));
  try {
    await createRuntime({ db, config: configFor(dataDir, overrides), log: createLogger("error") });
  } finally {
    await db.close();
  }
};

/** keyFile writes a key file of 32 bytes `fill` in `dir` and returns its path. */
const keyFile = (dir: string, name: string, fill: number) => writeSecretsKeyFile(join(dir, name), fill);

describe("sealed secrets: happy paths", () => {
  test("the first start creates secrets.key (0600) in the data directory; secrets are stored sealed and deliveries sign with the secret in clear", async () => {
    h = await scope.harness();
    const keyFile = join(h.dataDir, "secrets.key");
    expect((statSync(keyFile).mode & 0o777).toString(8)).toBe("600");
    expect(readFileSync(keyFile, "utf8")).toMatch(/^[A-Za-z0-9+/]{43}=\n$/);
    const r = scope.receiver();
    const sub = await h.subscribe(r.url, ["contact.created"]);
    const stored = await storedSecret(h.rt.db, sub.id);
    expect(stored).toStartWith(`sealed-v1.${sub.secret.slice(6, 10)}.`);
    expect(stored).not.toContain(sub.secret.slice(6));
    expect((await h.json("GET", `/public/v1/webhook-subscriptions/${sub.id}`)).body.data.secret).toBe(`${sub.secret.slice(0, 10)}…`);
    await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } });
    await waitFor(() => r.received[0], "the delivery");
    expect(() => new Webhook(sub.secret).verify(r.received[0]!.body, r.received[0]!.headers)).not.toThrow();
  });

  test("an idempotent replay of the create answers the secret in full, while the kept response holds it sealed", async () => {
    h = await scope.harness();
    const body = { target_url: "http://127.0.0.1:9/hook", events: ["contact.created"] };
    const first = await h.json("POST", "/public/v1/webhook-subscriptions", { body, headers: { "idempotency-key": "sub-1" } });
    const replay = await h.json("POST", "/public/v1/webhook-subscriptions", { body, headers: { "idempotency-key": "sub-1" } });
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(replay.body).toEqual(first.body);
    h.db.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
    expect(fileBytes(h.dataDir).includes(first.body.data.secret.slice(6))).toBe(false);
  });

  test("a create kept with its secret in clear (by a crm before migration 0011, on a database a crm before 2026-11-28 migrated) replays with that secret", async () => {
    h = await scope.harness();
    const body = { target_url: "http://127.0.0.1:9/hook", events: ["contact.created"] };
    const first = await h.json("POST", "/public/v1/webhook-subscriptions", { body, headers: { "idempotency-key": "sub-old" } });
    // What an older crm kept: the answer as sent, secret and all (0011 then sealed the subscriptions only).
    await h.rt.db.run("UPDATE idempotency_keys SET response_body = ? WHERE idem_key = 'sub-old'", [JSON.stringify(first.body)]);
    const replay = await h.json("POST", "/public/v1/webhook-subscriptions", { body, headers: { "idempotency-key": "sub-old" } });
    expect(replay.status).toBe(201);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(replay.body).toEqual(first.body);
  });

  test("migration 0011 seals secrets stored in clear; deliveries still sign with them", async () => {
    const dataDir = tempDir();
    const plain = `whsec_${Buffer.alloc(32, 7).toString("base64")}`;
    const r = scope.receiver();
    const db = openDatabase(databasePath(dataDir));
    migrate(db.sqlite, MIGRATIONS.filter((m) => m.version < 11));
    const id = newId("sub");
    db.sqlite.query("INSERT INTO webhook_subscriptions (id, target_url, events, secret, created_at, updated_at) VALUES (?, ?, '[\"contact.created\"]', ?, 1, 1)").run(id, r.url, plain);
    const rt = await createRuntime({ db, config: configFor(dataDir), log: createLogger("error") });
    try {
      expect(await storedSecret(db, id)).toStartWith("sealed-v1.BwcH.");
      expect(rt.secrets.open(id, await storedSecret(db, id))).toBe(plain);
      rt.deliveries.start();
      await db.write((tx) => recordPing(tx, { id, target_url: r.url }, UNKNOWN_ORIGIN));
      await waitFor(() => r.received[0], "the delivery");
      expect(() => new Webhook(plain).verify(r.received[0]!.body, r.received[0]!.headers)).not.toThrow();
    } finally {
      await rt.deliveries.stop(0);
      await db.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("a rotated secret and the previous one are stored sealed; during the grace period requests verify with either; a replayed rotation shows the new secret", async () => {
    h = await scope.harness();
    const r = scope.receiver();
    const sub = await h.subscribe(r.url, ["contact.created"]);
    const rotate = () => h.json("POST", `/public/v1/webhook-subscriptions/${sub.id}/rotate-secret`, { body: { grace_hours: 1 }, headers: { "idempotency-key": "rotate-1" } });
    const rotated = await rotate();
    expect(rotated.status).toBe(200);
    const newSecret: string = rotated.body.data.secret;
    expect(newSecret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    const replay = await rotate();
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(replay.body).toEqual(rotated.body);

    const row = (await h.rt.db.get<{ secret: string; previous_secret: string }>("SELECT secret, previous_secret FROM webhook_subscriptions WHERE id = ?", [sub.id]))!;
    expect(row.secret).toStartWith(`sealed-v1.${newSecret.slice(6, 10)}.`);
    expect(row.previous_secret).toStartWith(`sealed-v1.${sub.secret.slice(6, 10)}.`);
    expect(h.rt.secrets.open(sub.id, row.previous_secret)).toBe(sub.secret);

    await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } });
    await waitFor(() => r.received[0], "the delivery");
    for (const secret of [newSecret, sub.secret]) expect(() => new Webhook(secret).verify(r.received[0]!.body, r.received[0]!.headers)).not.toThrow();

    h.db.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
    const bytes = fileBytes(h.dataDir);
    for (const secret of [newSecret, sub.secret]) expect(bytes.includes(secret.slice(6))).toBe(false);
  });

  test("migration 0011 seals a previous secret stored in clear too", async () => {
    const dataDir = tempDir();
    const db = openDatabase(databasePath(dataDir));
    try {
      migrate(db.sqlite, MIGRATIONS.filter((m) => m.version < 11));
      const id = newId("sub");
      db.sqlite.query(
        "INSERT INTO webhook_subscriptions (id, target_url, events, secret, previous_secret, previous_secret_expires_at, created_at, updated_at) VALUES (?, 'http://127.0.0.1:9/x', '[]', 'whsec_TmV3bmV3', 'whsec_T2xkb2xk', ?, 1, 1)",
      ).run(id, Date.now() + 3_600_000);
      const rt = await createRuntime({ db, config: configFor(dataDir), log: createLogger("error") });
      const row = db.sqlite.query<{ secret: string; previous_secret: string }, [string]>("SELECT secret, previous_secret FROM webhook_subscriptions WHERE id = ?").get(id)!;
      expect([row.secret, row.previous_secret].map((s) => s.slice(0, 15))).toEqual(["sealed-v1.TmV3.", "sealed-v1.T2xk."]);
      expect([rt.secrets.open(id, row.secret), rt.secrets.open(id, row.previous_secret)]).toEqual(["whsec_TmV3bmV3", "whsec_T2xkb2xk"]);
    } finally {
      await db.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("migration 0011 seals the secrets in the kept answers of an idempotent create and rotation: replays still answer them in full, and the file holds them in clear no more", async () => {
    const dataDir = tempDir();
    const db = openDatabase(databasePath(dataDir));
    const [created, rotated] = [`whsec_${Buffer.alloc(32, 1).toString("base64")}`, `whsec_${Buffer.alloc(32, 2).toString("base64")}`];
    try {
      migrate(db.sqlite, MIGRATIONS.filter((m) => m.version < 11));
      const { token, id: tokenId } = await tokenBeforeUpgrade(db);
      const id = newId("sub");
      db.sqlite.query("INSERT INTO webhook_subscriptions (id, target_url, events, secret, previous_secret, previous_secret_expires_at, created_at, updated_at) VALUES (?, 'http://127.0.0.1:9/x', '[\"contact.created\"]', ?, ?, ?, 1, 1)").run(id, rotated, created, Date.now() + 3_600_000);
      // What a crm before 0011 kept for a replay within 24 hours: the answers as sent, secrets in clear.
      const subscription = { id, target_url: "http://127.0.0.1:9/x", description: null, events: ["contact.created"], status: "active", created_at: "2026-11-21T10:00:00.000Z", updated_at: "2026-11-21T10:00:00.000Z" };
      const requests = [
        { path: "/public/v1/webhook-subscriptions", key: "sub-old", body: { target_url: "http://127.0.0.1:9/x", events: ["contact.created"] }, status: 201, answer: { data: { ...subscription, secret: created } } },
        { path: `/public/v1/webhook-subscriptions/${id}/rotate-secret`, key: "rotate-old", body: { grace_hours: 1 }, status: 200, answer: { data: { ...subscription, secret: rotated } } },
      ];
      const keep = db.sqlite.query("INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, created_at) VALUES (?, 'POST', ?, ?, ?, ?, ?, ?)");
      // The fingerprint as the idempotency guard takes it: SHA-256 of the body's canonical JSON.
      for (const r of requests) keep.run(tokenId, r.path, r.key, sha256(canonicalJson(r.body)), r.status, JSON.stringify(r.answer), Date.now());

      const app = createApp(await createRuntime({ db, config: configFor(dataDir), log: createLogger("error") }));
      const kept = db.sqlite.query<{ secret: string }, []>("SELECT response_body ->> '$.data.secret' AS secret FROM idempotency_keys ORDER BY status DESC").all();
      expect(kept.map((k) => k.secret.slice(0, 15))).toEqual([`sealed-v1.${created.slice(6, 10)}.`, `sealed-v1.${rotated.slice(6, 10)}.`]);
      for (const r of requests) {
        const replay = await app.handle(
          new Request(`http://localhost${r.path}`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json", "idempotency-key": r.key }, body: JSON.stringify(r.body) }),
        );
        expect({ status: replay.status, replayed: replay.headers.get("idempotent-replayed"), body: await replay.json() }).toEqual({ status: r.status, replayed: "true", body: r.answer });
      }
    } finally {
      await db.close();
    }
    // Closed, the database is one file, as a backup or a copied disk has it.
    const bytes = fileBytes(dataDir);
    rmSync(dataDir, { recursive: true, force: true });
    expect([created, rotated].map((secret) => bytes.includes(secret.slice(10)))).toEqual([false, false]);
  });

  test("a command that seals secrets stored in clear creates the key and says so, as serve logs it", async () => {
    const dataDir = tempDir();
    const db = openDatabase(databasePath(dataDir));
    migrate(db.sqlite, MIGRATIONS.filter((m) => m.version < 11));
    db.sqlite.query("INSERT INTO webhook_subscriptions (id, target_url, events, secret, created_at, updated_at) VALUES (?, 'https://192.0.43.10/crm', '[\"contact.created\"]', 'whsec_plain', 1, 1)").run(newId("sub"));
    await db.close();
    try {
      const migrated = runCli([...SOURCE, "migrate", "--data-dir", dataDir]);
      expect([migrated.exitCode, migrated.stderr, existsSync(join(dataDir, "secrets.key"))]).toEqual([
        0,
        `crm: created the key that encrypts webhook signing secrets, ${join(dataDir, "secrets.key")}; keep it with the database: backups do not include it\n`,
        true,
      ]);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("a start removes the partial key file a start killed while making the key left behind (an unused key), not one a running start is writing", async () => {
    const dataDir = tempDir();
    const gone = Bun.spawnSync(["true"]).pid;
    const running = Bun.spawn(["sleep", "30"]);
    try {
      const partial = (pid: number) => partialName(join(dataDir, "secrets.key"), pid);
      for (const pid of [gone, running.pid]) writeFileSync(partial(pid), "a key never published\n", { mode: 0o600 });
      expect(loadSecretsKey({ dataDir, secretsKeyFile: "" }).created).toBe(true);
      expect(readdirSync(dataDir).filter((name) => name.startsWith("secrets.key")).sort()).toEqual(["secrets.key", basename(partial(running.pid))]);
    } finally {
      running.kill();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("--secrets-key-file names a key kept outside the data directory; none is created inside", async () => {
    const dataDir = tempDir();
    const keyDir = tempDir();
    const keyFile = writeSecretsKeyFile(join(keyDir, "crm.key"), 1);
    const db = openDatabase(databasePath(dataDir));
    try {
      const rt = await createRuntime({ db, config: configFor(dataDir, { secretsKeyFile: keyFile }), log: createLogger("error") });
      expect(new SecretBox(Buffer.alloc(32, 1)).open("sub_X", rt.secrets.seal("sub_X", "whsec_abc"))).toBe("whsec_abc");
      expect(existsSync(join(dataDir, "secrets.key"))).toBe(false);
    } finally {
      await db.close();
      rmSync(dataDir, { recursive: true, force: true });
      rmSync(keyDir, { recursive: true, force: true });
    }
  });
});

describe("sealed secrets: errors", () => {
  test("a --secrets-key-file that does not exist, or holds no key, stops the start with a line naming it", () => {
    const dataDir = tempDir();
    try {
      expect(() => startWith(dataDir, { secretsKeyFile: join(dataDir, "missing.key") })).toThrow(`secrets key file ${join(dataDir, "missing.key")} (--secrets-key-file, CRM_SECRETS_KEY_FILE) does not exist`);
      writeFileSync(join(dataDir, "short.key"), "c2hvcnQ=\n");
      expect(() => startWith(dataDir, { secretsKeyFile: join(dataDir, "short.key") })).toThrow(`secrets key file ${join(dataDir, "short.key")} does not hold a key (base64 of 32 random bytes)`);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("a start with another key file is refused even while no subscription exists: the first start recorded the check value of its key", async () => {
    const dataDir = tempDir();
    const [first, other] = [keyFile(dataDir, "first.key", 1), keyFile(dataDir, "other.key", 2)];
    try {
      await startWith(dataDir, { secretsKeyFile: first });
      await expect(startWith(dataDir, { secretsKeyFile: other })).rejects.toThrow(
        `secrets key file ${other} is not the key this database was used with (it keeps a check value of that key, and of any signing secrets sealed with it); use the key file the database was used with (--secrets-key-file, CRM_SECRETS_KEY_FILE), after crm secrets-key rotate the new one it was given`,
      );
      await startWith(dataDir, { secretsKeyFile: first });
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("a database from before the check value, holding secrets, is checked with a stored secret as before, and then records the check value of the key that opened it", async () => {
    const dataDir = tempDir();
    const [first, other] = [keyFile(dataDir, "first.key", 1), keyFile(dataDir, "other.key", 2)];
    const db = openDatabase(databasePath(dataDir));
    migrate(db.sqlite, MIGRATIONS.filter((m) => m.version < 25));
    const id = newId("sub");
    db.sqlite.query("INSERT INTO webhook_subscriptions (id, target_url, events, secret, created_at, updated_at) VALUES (?, 'http://127.0.0.1:9/x', '[]', ?, 1, 1)").run(id, new SecretBox(Buffer.alloc(32, 1)).seal(id, "whsec_abc"));
    await db.close();
    const refusal = `secrets key file ${other} is not the key this database was used with (it keeps a check value of that key, and of any signing secrets sealed with it); use the key file the database was used with (--secrets-key-file, CRM_SECRETS_KEY_FILE), after crm secrets-key rotate the new one it was given`;
    try {
      await expect(startWith(dataDir, { secretsKeyFile: other })).rejects.toThrow(refusal);
      await startWith(dataDir, { secretsKeyFile: first });
      // Its subscriptions gone, the database still knows its key.
      const emptied = openDatabase(databasePath(dataDir));
      emptied.sqlite.run("DELETE FROM webhook_subscriptions");
      await emptied.close();
      await expect(startWith(dataDir, { secretsKeyFile: other })).rejects.toThrow(refusal);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("a database from before the check value holding no subscription, only a kept create answer with its sealed secret, is refused without its key (no new key left) and with another; with its own the replay shows the secret", async () => {
    const dataDir = tempDir();
    const [first, other] = [keyFile(dataDir, "first.key", 1), keyFile(dataDir, "other.key", 2)];
    const db = openDatabase(databasePath(dataDir));
    const secret = `whsec_${Buffer.alloc(32, 3).toString("base64")}`;
    const id = newId("sub");
    const body = { target_url: "http://127.0.0.1:9/x", events: ["contact.created"] };
    const answer = { data: { id, ...body, description: null, status: "active", created_at: "2026-11-21T10:00:00.000Z", updated_at: "2026-11-21T10:00:00.000Z", secret } };
    try {
      // What a crm before 0025 left after a create kept for replay and a delete: no subscription, the answer with its secret sealed.
      migrate(db.sqlite, MIGRATIONS.filter((m) => m.version < 25));
      const { token, id: tokenId } = await tokenBeforeUpgrade(db);
      const kept = { data: { ...answer.data, secret: new SecretBox(Buffer.alloc(32, 1)).seal(id, secret) } };
      db.sqlite
        .query("INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, created_at) VALUES (?, 'POST', '/public/v1/webhook-subscriptions', 'k1', ?, 201, ?, ?)")
        .run(tokenId, sha256(canonicalJson(body)), JSON.stringify(kept), Date.now());
      const logs: string[] = [];
      await expect(createRuntime({ db, config: configFor(dataDir), log: createLogger("info", (line) => logs.push(line)) })).rejects.toThrow(
        `secrets key file ${join(dataDir, "secrets.key")} is missing, and this database was used with a key (it keeps a check value of it, and of any signing secrets sealed with it): put back the key kept with the database (backups do not include it), or name it with --secrets-key-file`,
      );
      expect([existsSync(join(dataDir, "secrets.key")), logs.filter((line) => line.includes("created the key"))]).toEqual([false, []]);
      await expect(createRuntime({ db, config: configFor(dataDir, { secretsKeyFile: other }), log: createLogger("error") })).rejects.toThrow(
        `secrets key file ${other} is not the key this database was used with (it keeps a check value of that key, and of any signing secrets sealed with it); use the key file the database was used with (--secrets-key-file, CRM_SECRETS_KEY_FILE), after crm secrets-key rotate the new one it was given`,
      );
      const app = createApp(await createRuntime({ db, config: configFor(dataDir, { secretsKeyFile: first }), log: createLogger("error") }));
      const replay = await app.handle(
        new Request("http://localhost/public/v1/webhook-subscriptions", { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json", "idempotency-key": "k1" }, body: JSON.stringify(body) }),
      );
      expect({ status: replay.status, replayed: replay.headers.get("idempotent-replayed"), body: await replay.json() }).toEqual({ status: 201, replayed: "true", body: answer });
    } finally {
      await db.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("a replay whose kept secret does not open with this server's key is refused with 410 replay-secret-lost naming the subscription, not a 500", async () => {
    h = await scope.harness();
    const body = { target_url: "http://127.0.0.1:9/hook", events: ["contact.created"] };
    const first = await h.json("POST", "/public/v1/webhook-subscriptions", { body, headers: { "idempotency-key": "sub-lost" } });
    const id: string = first.body.data.id;
    // A kept answer sealed under a key this server does not have (written by a start with another key).
    const foreign = { data: { ...first.body.data, secret: new SecretBox(Buffer.alloc(32, 9)).seal(id, first.body.data.secret) } };
    await h.rt.db.run("UPDATE idempotency_keys SET response_body = ? WHERE idem_key = 'sub-lost'", [JSON.stringify(foreign)]);
    const replay = await h.json("POST", "/public/v1/webhook-subscriptions", { body, headers: { "idempotency-key": "sub-lost" } });
    expect({ status: replay.status, location: replay.headers.get("location"), body: replay.body }).toEqual({
      status: 410,
      location: null,
      body: {
        type: "urn:crm:problem:replay-secret-lost",
        title: "Gone",
        status: 410,
        detail: `The answer kept for this Idempotency-Key shows the signing secret of webhook subscription ${id}, sealed with a secrets key this server does not have (the database was restored or reset without it), so it cannot be shown again. The subscription was created: rotate its secret for a new one, or delete it.`,
        subscription_id: id,
      },
    });
  });

  test("migrating secrets stored in clear without the key fails and changes nothing", async () => {
    const dataDir = tempDir();
    const db = openDatabase(databasePath(dataDir));
    try {
      migrate(db.sqlite, MIGRATIONS.filter((m) => m.version < 11));
      db.sqlite.run("INSERT INTO webhook_subscriptions (id, target_url, events, secret, created_at, updated_at) VALUES ('sub_OLD', 'http://x/', '[]', 'whsec_AAAA', 1, 1)");
      expect(() => migrate(db.sqlite)).toThrow("migration 0011 needs the secrets key");
      expect(await storedSecret(db, "sub_OLD")).toBe("whsec_AAAA");
      expect(db.sqlite.query("SELECT count(*) AS n FROM schema_migrations WHERE version = 11").get()).toEqual({ n: 0 });
    } finally {
      await db.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe("sealed secrets: security", () => {
  test("the database file copied without the key file: its secrets are unreadable, and a start on it refuses, saying the key is missing, and leaves no new key behind", async () => {
    h = await scope.harness();
    const subs = [await h.subscribe("http://127.0.0.1:9/a", ["contact.created"]), await h.subscribe("http://127.0.0.1:9/b", ["contact.updated"])];
    h.db.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
    const stolen = tempDir();
    try {
      copyFileSync(join(h.dataDir, "crm.sqlite"), join(stolen, "crm.sqlite"));
      const bytes = fileBytes(stolen);
      for (const s of subs) {
        expect(bytes.includes(s.secret)).toBe(false);
        expect(bytes.includes(s.secret.slice(6))).toBe(false);
        expect(bytes.includes(Buffer.from(s.secret.slice(6), "base64"))).toBe(false);
      }
      const db = openDatabase(databasePath(stolen));
      const guessedKey = new SecretBox(Buffer.alloc(32));
      for (const s of subs) expect(async () => guessedKey.open(s.id, await storedSecret(db, s.id))).toThrow(SecretUnreadable);
      const logs: string[] = [];
      expect(() => createRuntime({ db, config: configFor(stolen), log: createLogger("info", (line) => logs.push(line)) })).toThrow(
        `secrets key file ${join(stolen, "secrets.key")} is missing, and this database was used with a key (it keeps a check value of it, and of any signing secrets sealed with it): put back the key kept with the database (backups do not include it), or name it with --secrets-key-file`,
      );
      // A key made for this start would pass for the database's own, beside it and in a backup's note.
      expect([existsSync(join(stolen, "secrets.key")), logs.filter((line) => line.includes("created the key"))]).toEqual([false, []]);
      await db.close();
    } finally {
      rmSync(stolen, { recursive: true, force: true });
    }
  });

  test("a database restored without its key is refused even when it holds no subscription, and no new key is left behind", async () => {
    const dataDir = tempDir();
    try {
      await startWith(dataDir);
      rmSync(join(dataDir, "secrets.key"));
      await expect(startWith(dataDir)).rejects.toThrow(
        `secrets key file ${join(dataDir, "secrets.key")} is missing, and this database was used with a key (it keeps a check value of it, and of any signing secrets sealed with it): put back the key kept with the database (backups do not include it), or name it with --secrets-key-file`,
      );
      expect(existsSync(join(dataDir, "secrets.key"))).toBe(false);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("a sealed secret copied onto another subscription does not open there", async () => {
    h = await scope.harness();
    const a = await h.subscribe("http://127.0.0.1:9/a", ["contact.created"]);
    const b = await h.subscribe("http://127.0.0.1:9/b", ["contact.created"]);
    expect(async () => h.rt.secrets.open(b.id, await storedSecret(h.rt.db, a.id))).toThrow(`the signing secret of ${b.id} does not open with this secrets key`);
  });
});
