import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { SQL } from "bun";
import { createApp, createRuntime } from "../../server/app.ts";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { UNLINK_CHUNK } from "../../server/contacts/service.ts";
import { openPostgres } from "../../server/db/postgres.ts";
import { POSTGRES_MIGRATIONS } from "../../server/db/postgres-migrations.ts";
import { createLogger } from "../../server/shared/log.ts";
import { VERSION } from "../../server/version.ts";
import { commandHere } from "../../server/server.ts";
import { ROOT, runCli, SOURCE, spawnServer, tempDir } from "../ops/support.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { startReceiver, waitFor } from "../webhooks/support.ts";
import { call } from "../foundation/support.ts";

// The command line on PostgreSQL (--database-url): every command works on the database, not on the
// data directory; serve needs the shared secrets key named; backup points to pg_dump.

let database: TestDatabase;
let dir: string;
let keyFile: string;

beforeAll(async () => {
  database = await createTestDatabase();
  dir = tempDir("pg-cli");
  keyFile = writeSecretsKeyFile(join(dir, "secrets.key"));
}, 60_000);

afterAll(async () => {
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

/** crm runs the command line from source in an empty working directory, on the test database. */
function crm(args: string[], stdin?: string) {
  return runCli([...SOURCE, ...args], { cwd: dir, env: { PATH: process.env.PATH ?? "", CRM_DATABASE_URL: database.url }, stdin });
}

describe("command line on PostgreSQL: happy paths", () => {
  test("migrate, token, user and operator commands work on the database and leave no data directory behind", async () => {
    expect(crm(["migrate"])).toEqual({ exitCode: 0, stdout: `applied ${POSTGRES_MIGRATIONS.map((m) => m.name).join(", ")}\n`, stderr: "" });
    expect(crm(["migrate"])).toEqual({ exitCode: 0, stdout: "database is up to date\n", stderr: "" });
    const created = crm(["token", "create", "--name", "ops", "--json"]);
    expect(created.exitCode).toBe(0);
    const token = JSON.parse(created.stdout);
    expect(crm(["token", "list"]).stdout).toStartWith(`${token.id}  ${token.prefix}…  ops  created `);
    const user = crm(["user", "create", "--name", "Ada", "--email", "ada@example.com"]);
    expect(user.exitCode).toBe(0);
    expect(crm(["user", "list"]).stdout).toStartWith(`${JSON.parse(user.stdout).id}  ada@example.com  Ada  created `);
    expect(crm(["operator", "create", "--email", "oncall@example.com", "--password-stdin"], "long enough password\n").stdout).toMatch(/^created operator opr_[0-9A-Z]{26} \(oncall@example\.com\)/);
    expect(crm(["token", "revoke", token.id])).toEqual({ exitCode: 0, stdout: `revoked ${token.id}\n`, stderr: "" });
    expect(readdirSync(dir)).toEqual(["secrets.key"]);
  });

  test("crm-instances.toml's layout: database_url_file in the config file takes every command to the database the service uses, without the URL in the environment or argv", () => {
    const etc = join(dir, "etc");
    const state = join(dir, "state");
    mkdirSync(etc);
    mkdirSync(state, { mode: 0o700 });
    writeFileSync(join(etc, "database-url"), `${database.url}\n`, { mode: 0o600 });
    writeFileSync(join(etc, "crm.toml"), `database_url_file = "database-url"\nsecrets_key_file = ${JSON.stringify(keyFile)}\ndata_dir = ${JSON.stringify(state)}\n`);
    const run = (args: string[]) => runCli([...SOURCE, ...args, "--config", join(etc, "crm.toml")], { cwd: dir, env: { PATH: process.env.PATH ?? "" } });
    const created = run(["token", "create", "--name", "from-config", "--json"]);
    expect([created.exitCode, created.stderr]).toEqual([0, ""]);
    expect(crm(["token", "list"]).stdout).toContain(`${JSON.parse(created.stdout).id}  `);
    expect(run(["backup", join(dir, "copy.sqlite")]).exitCode).toBe(2);
    expect(readdirSync(state)).toEqual([]);
    rmSync(etc, { recursive: true });
    rmSync(state, { recursive: true });
  });

  test("serve given crm-instances.toml's layout names the --config file that gave it the URL, never CRM_DATABASE_URL: its first-start hints add --config, and its log line of a database gone names the URL file and the setting naming it", async () => {
    const fresh = await createTestDatabase();
    const etc = join(dir, "etc-hints");
    mkdirSync(etc);
    const urlFile = join(etc, "database-url");
    writeFileSync(urlFile, `${fresh.url}\n`, { mode: 0o600 });
    const config = join(etc, "crm.toml");
    writeFileSync(config, `database_url_file = "database-url"\nsecrets_key_file = ${JSON.stringify(keyFile)}\n`);
    const server = await spawnServer([...SOURCE, "serve", "--port", "0", "--config", config], { cwd: dir, env: { PATH: process.env.PATH ?? "" } });
    try {
      const here = (words: string[]) => commandHere(words, null, join(ROOT, "server", "main.ts"), process.execPath, dir);
      const hints = server.logLines().filter((line) => /^no (API token|console operator) exists yet/.test(line.msg));
      expect(hints.map((line) => line.msg)).toEqual([
        `no API token exists yet; create the first one with: ${here(["token", "create", "--name", "my-integration", "--config", config])}`,
        expect.stringMatching(/^no console operator exists yet; open this one-time link within 30 minutes to create the first one \(or run: (.*)\)$/),
      ]);
      expect(hints[1]!.msg).toEndWith(`(or run: ${here(["operator", "create", "--email", "E", "--password-stdin", "--config", config])})`);
      // The hint's command, as typed, makes a token the server takes.
      const created = runCli([...SOURCE, "token", "create", "--name", "my-integration", "--config", config], { cwd: dir, env: { PATH: process.env.PATH ?? "" } });
      expect([created.exitCode, created.stderr]).toEqual([0, expect.stringMatching(/^created token tok_\w+ \(my-integration\); it is shown only this once\n$/)]);
      expect((await fetch(`${server.url}/public/v1/contacts`, { headers: { authorization: `Bearer ${created.stdout.trim()}` } })).status).toBe(200);
      await fresh.drop();
      expect((await fetch(`${server.url}/public/v1/contacts`, { headers: { authorization: `Bearer ${created.stdout.trim()}` } })).status).toBe(503);
      const gone = await waitFor(() => server.logLines().find((line) => line.level === "error" && String(line.msg).includes("does not exist")), "the database's absence logged");
      expect(gone.msg).toBe(
        `the PostgreSQL database that the database URL (the file ${urlFile} that database_url_file in ${config} names) names does not exist (dropped or renamed): requests are refused (503 database-unavailable) until it is back; restore it, or point the database URL at it`,
      );
    } finally {
      await server.stopWith("SIGTERM");
      await fresh.drop();
      rmSync(etc, { recursive: true });
    }
  });

  test("serve warns of a database URL file other users may read, as it warns of the secrets key", async () => {
    const urlFile = join(dir, "open-database-url");
    writeFileSync(urlFile, `${database.url}\n`);
    chmodSync(urlFile, 0o644);
    const server = await spawnServer([...SOURCE, "serve", "--port", "0", "--database-url-file", urlFile, "--secrets-key-file", keyFile], { cwd: dir, env: { PATH: process.env.PATH ?? "" } });
    try {
      expect(server.logLines().filter((line) => line.level === "warn" && String(line.msg).includes("open to other users"))).toEqual([
        expect.objectContaining({
          msg: `the database URL file is open to other users (mode 0644): whoever may read it logs in to the database as the service, to every contact, user and sealed secret; unless a secret store mounts it so, make it the owner's alone: chmod 600 ${urlFile}`,
          path: urlFile,
        }),
      ]);
    } finally {
      await server.stopWith("SIGTERM");
      rmSync(urlFile);
    }
  });

  test("serve with the key file answers the API with a token created by the command line, and /readyz is ready", async () => {
    const { stdout } = crm(["token", "create", "--name", "serve"]);
    const server = await spawnServer([...SOURCE, "serve", "--port", "0", "--secrets-key-file", keyFile, "--log-level", "error"], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? "", CRM_DATABASE_URL: database.url },
    });
    try {
      const auth = { authorization: `Bearer ${stdout.trim()}`, "content-type": "application/json" };
      const created = await fetch(`${server.url}/public/v1/contacts`, { method: "POST", headers: auth, body: JSON.stringify({ first_name: "Émile", last_name: "Zola" }) });
      expect(created.status).toBe(201);
      const found = await (await fetch(`${server.url}/public/v1/contacts?full_name=ÉMILE`, { headers: auth })).json();
      expect(found.data.map((c: { first_name: string }) => c.first_name)).toEqual(["Émile"]);
      expect(await (await fetch(`${server.url}/readyz`)).json()).toEqual({ status: "ready", checks: { database: "ok", migrations: "ok", delivery_loop: "ok" } });
    } finally {
      expect((await server.stopWith("SIGTERM")).exitCode).toBe(0);
    }
  });
});

describe("command line on PostgreSQL: user delete", () => {
  test("works while serve runs: the user is gone, its contacts lose the assignment, and their contact.updated reach a receiver", async () => {
    const env = { PATH: process.env.PATH ?? "", CRM_DATABASE_URL: database.url };
    const token = crm(["token", "create", "--name", "user-delete"]).stdout.trim();
    const grace = JSON.parse(crm(["user", "create", "--name", "Grace", "--email", "grace@user-delete.example"]).stdout);
    const receiver = startReceiver();
    const server = await spawnServer([...SOURCE, "serve", "--port", "0", "--secrets-key-file", keyFile, "--allow-private-targets", "--log-level", "error"], { cwd: dir, env });
    const api = async (method: string, path: string, body?: unknown) => (await fetch(`${server.url}${path}`, { method, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: JSON.stringify(body) })).json();
    try {
      await api("POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.updated"] });
      const contact = (await api("POST", "/public/v1/contacts", { first_name: "Ada", assigned_user_ids: [grace.id] })).data;
      // Not runCli: a synchronous spawn would stop this process's receiver from answering meanwhile.
      const command = Bun.spawn([...SOURCE, "user", "delete", grace.id], { cwd: dir, env, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
      const [stdout, stderr, exitCode] = await Promise.all([new Response(command.stdout).text(), new Response(command.stderr).text(), command.exited]);
      expect({ exitCode, stdout, stderr }).toEqual({ exitCode: 0, stdout: `deleted user ${grace.id} (grace@user-delete.example); contacts that lost the assignment: 1 (each sends contact.updated)\n`, stderr: "" });
      const after = (await api("GET", `/public/v1/contacts/${contact.id}`)).data;
      expect(after).toEqual({ ...contact, assigned_user_ids: [], version: 2, updated_at: after.updated_at });
      expect((await api("GET", `/public/v1/users/${grace.id}`)).status).toBe(404);
      await waitFor(() => receiver.received.length === 1, "the contact.updated of the deletion");
      expect(receiver.received[0]!.json).toEqual({ type: "contact.updated", event_id: expect.stringMatching(/^evt_[0-9A-Z]{26}$/), timestamp: after.updated_at, data: after });
    } finally {
      expect((await server.stopWith("SIGTERM")).exitCode).toBe(0);
      await receiver.stop();
    }
  });
});

describe("command line on PostgreSQL: user delete refused after its first write", () => {
  test("says how many contacts the writes before lost the assignment, then the refusal; run again, it finishes", async () => {
    const own = await createTestDatabase();
    const on = (args: string[]) => runCli([...SOURCE, ...args], { cwd: dir, env: { PATH: process.env.PATH ?? "", CRM_DATABASE_URL: own.url } });
    const sql = new SQL({ url: own.url, max: 1 });
    try {
      expect(on(["migrate"]).exitCode).toBe(0);
      const grace = JSON.parse(on(["user", "create", "--name", "Grace", "--email", "grace@steps.example"]).stdout);
      const db = await openPostgres(own.url, 1);
      try {
        const rt = await createRuntime({ db, config: { ...DEFAULT_CONFIG, dataDir: dir, databaseUrl: own.url, secretsKeyFile: keyFile, logLevel: "error" }, log: createLogger("error", () => {}) });
        const { token } = await createApiToken(db, "steps");
        const app = createApp(rt);
        const headers = { authorization: `Bearer ${token}` };
        const items = Array.from({ length: UNLINK_CHUNK }, (_, i) => ({ first_name: `C${i}`, assigned_user_id: grace.id }));
        expect((await call(app, "POST", "/public/v1/contacts/batch", { body: { items }, headers })).status).toBe(200);
        expect((await call(app, "POST", "/public/v1/contacts", { body: { first_name: "Last", assigned_user_id: grace.id }, headers })).status).toBe(201);
      } finally {
        await db.close();
      }
      // The first transaction that updates contacts goes through; the next is refused as a lock timeout would refuse it.
      await sql.unsafe(`CREATE TABLE first_write (xid bigint);
        CREATE FUNCTION second_write_busy() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
          IF NOT EXISTS (SELECT 1 FROM first_write) THEN INSERT INTO first_write VALUES (txid_current());
          ELSIF (SELECT xid FROM first_write) <> txid_current() THEN RAISE EXCEPTION 'held elsewhere' USING ERRCODE = '55P03'; END IF;
          RETURN NULL; END $$;
        CREATE TRIGGER second_write_busy AFTER UPDATE ON contacts FOR EACH STATEMENT EXECUTE FUNCTION second_write_busy();`);
      expect(on(["user", "delete", grace.id])).toEqual({
        exitCode: 3,
        stdout: "",
        stderr:
          `crm: ${UNLINK_CHUNK} of the user's contacts lost the assignment (each sends contact.updated) before a later write was refused; that stays done, and the same command run again finishes it\n` +
          "crm: the database is busy: held elsewhere; nothing more was done, try again\n",
      });
      await sql.unsafe("DROP TRIGGER second_write_busy ON contacts");
      expect(on(["user", "delete", grace.id])).toEqual({
        exitCode: 0,
        stdout: `deleted user ${grace.id} (grace@steps.example); contacts that lost the assignment: 1 (each sends contact.updated)\n`,
        stderr: "",
      });
    } finally {
      await sql.close();
      await own.drop();
    }
  });
});

describe("command line on PostgreSQL: refusals", () => {
  test("serve without --secrets-key-file stops with one line saying every instance needs the same key", () => {
    expect(crm(["serve", "--port", "0"])).toEqual({
      exitCode: 2,
      stdout: "",
      stderr:
        "crm: on PostgreSQL (--database-url) every instance must read the same secrets key: pass --secrets-key-file FILE (CRM_SECRETS_KEY_FILE); " +
        "after copy-to-postgres that is the data directory's secrets.key, for a new database create one with: (umask 077; head -c 32 /dev/urandom | base64 > FILE)\n",
    });
  });

  test("a database a newer crm migrated is refused by serve and the commands, in one line, and left as it was", async () => {
    const newer = await createTestDatabase();
    const on = (args: string[]) => runCli([...SOURCE, ...args], { cwd: dir, env: { PATH: process.env.PATH ?? "", CRM_DATABASE_URL: newer.url } });
    const sql = new SQL(newer.url);
    try {
      expect(on(["migrate"]).exitCode).toBe(0);
      await sql`INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_from_the_future.sql', 0)`;
      const refusal = `crm: the database was migrated by a newer crm: it has 9999_from_the_future.sql, which crm ${VERSION} (source) does not know. Run the newer crm, or restore the backup taken before the upgrade\n`;
      for (const command of [["serve", "--port", "0", "--secrets-key-file", keyFile], ["migrate"], ["token", "create", "--name", "n"], ["user", "list"]]) {
        expect({ command, ...on(command) }).toEqual({ command, exitCode: 2, stdout: "", stderr: refusal });
      }
      expect(await sql`SELECT (SELECT count(*)::int FROM api_tokens) AS tokens, (SELECT count(*)::int FROM schema_migrations) AS migrations`).toEqual([
        { tokens: 0, migrations: POSTGRES_MIGRATIONS.length + 1 },
      ]);
    } finally {
      await sql.close();
      await newer.drop();
    }
  });

  test("backup copies nothing and says to use pg_dump, naming where the URL came from, with an example that leaves the password to ~/.pgpass, exit 2", () => {
    const refusal = (named: string, url: string) =>
      `crm: backup copies the SQLite database of a data directory, and this one is on PostgreSQL (the database URL given by ${named}): back it up with pg_dump, the password in ~/.pgpass (0600) rather than on the command line, which ps shows to every local user: pg_dump --format=custom --file=FILE ${url}; keep the secrets key file apart from the dump\n`;
    expect(crm(["backup", join(dir, "copy.sqlite")])).toEqual({ exitCode: 2, stdout: "", stderr: refusal("--database-url, CRM_DATABASE_URL", database.url) });
    expect(readdirSync(dir)).toEqual(["secrets.key"]);
    // The several-instances layout: the URL, password and all, in the file database_url_file names.
    const etc = join(dir, "etc-backup");
    mkdirSync(etc);
    const withPassword = new URL(database.url);
    withPassword.password = "s3cret";
    withPassword.searchParams.set("sslmode", "disable");
    writeFileSync(join(etc, "database-url"), `${withPassword}\n`, { mode: 0o600 });
    writeFileSync(join(etc, "crm.toml"), `database_url_file = "database-url"\nsecrets_key_file = ${JSON.stringify(keyFile)}\n`);
    const config = join(etc, "crm.toml");
    expect(runCli([...SOURCE, "backup", join(dir, "copy.sqlite"), "--config", config], { cwd: dir, env: { PATH: process.env.PATH ?? "" } })).toEqual({
      exitCode: 2,
      stdout: "",
      stderr: refusal(`the file ${join(etc, "database-url")} that database_url_file in ${config} names`, `'${database.url}?sslmode=disable'`),
    });
    rmSync(etc, { recursive: true });
  });
});
