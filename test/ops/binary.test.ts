import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { copyFileSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { Webhook } from "standardwebhooks";
import { MIGRATIONS } from "../../server/db/migrations.ts";
import { openPostgres } from "../../server/db/postgres.ts";
import { POSTGRES_MIGRATIONS } from "../../server/db/postgres-migrations.ts";
import { createTestDatabase } from "../support/postgres.ts";
import { VERSION } from "../../server/version.ts";
import { buildCommit } from "../../scripts/build-commit.ts";
import { api, ROOT, runCli, spawnServer, startReceiver, tempDir, waitUntil, type Receiver } from "./support.ts";

// The compiled binary, copied alone into an empty folder and run with no Bun, Node or
// node_modules reachable: the way it is installed on a VM.
let folder: string;
let crm: string;
let receiver: Receiver;
// PATH points nowhere, so nothing but the binary itself can run; webhooks may target loopback for the receiver.
const env = { PATH: "/nonexistent", HOME: "/nonexistent", CRM_ALLOW_PRIVATE_TARGETS: "1" };
const run = (...args: string[]) => runCli([crm, ...args], { cwd: folder, env });

beforeAll(() => {
  const buildDir = tempDir("build");
  const built = Bun.spawnSync([process.execPath, join(ROOT, "scripts", "build.ts"), `--outfile=${join(buildDir, "crm")}`], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
  if (built.exitCode !== 0) throw new Error(`the build failed:\n${built.stdout}${built.stderr}`);
  expect(readdirSync(buildDir)).toEqual(["crm"]);
  folder = tempDir("binary");
  crm = join(folder, "crm");
  copyFileSync(join(buildDir, "crm"), crm);
  Bun.spawnSync(["chmod", "755", crm]);
  rmSync(buildDir, { recursive: true, force: true });
  receiver = startReceiver();
}, 180_000);

afterAll(() => {
  receiver?.stop();
  if (folder) rmSync(folder, { recursive: true, force: true });
});

describe("the compiled binary, alone in an empty folder", () => {
  test("--version names the commit built, and --help", () => {
    expect(readdirSync(folder)).toEqual(["crm"]);
    const commit = buildCommit(ROOT);
    // Built from this checkout: its short hash, "-dirty" when tracked files were changed.
    const head = Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"], { cwd: ROOT }).stdout.toString().trim();
    expect(commit).toMatch(new RegExp(`^${head}(-dirty)?$`));
    expect(run("--version")).toEqual({ exitCode: 0, stdout: `crm ${VERSION} (${commit})\n`, stderr: "" });
    const help = run("--help");
    expect(help.exitCode).toBe(0);
    expect(help.stdout).toContain("backup FILE");
  });

  test("README's Footprint gives the binary's size to the MiB", () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    const said = Number(/the binary is (\d+) MiB/.exec(readme)?.[1]);
    expect(Math.abs(said - statSync(crm).size / 2 ** 20)).toBeLessThan(1.5);
  });

  test("on a database a newer crm migrated, the refusal names this build and the migration it does not know", () => {
    const dataDir = join(folder, "newer");
    try {
      expect(run("migrate", "--data-dir", dataDir).exitCode).toBe(0);
      const db = new Database(join(dataDir, "crm.sqlite"));
      db.run("INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_from_the_future.sql', 0)");
      db.close();
      expect(run("serve", "--port", "0", "--data-dir", dataDir)).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: `crm: the database was migrated by a newer crm: it has 9999_from_the_future.sql, which crm ${VERSION} (${buildCommit(ROOT)}) does not know. Run the newer crm, or restore the backup taken before the upgrade\n`,
      });
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("migrate applies every embedded migration into ./data (0700)", () => {
    expect(run("migrate")).toEqual({ exitCode: 0, stdout: `applied ${MIGRATIONS.map((m) => m.name).join(", ")}\n`, stderr: "" });
    expect((statSync(join(folder, "data")).mode & 0o777).toString(8)).toBe("700");
    expect(run("migrate")).toEqual({ exitCode: 0, stdout: "database is up to date\n", stderr: "" });
  });

  test("serve: API, signed webhook, /docs, /console, readiness; SIGTERM exits 0; then backup", async () => {
    const created = run("token", "create", "--name", "smoke");
    expect(created.exitCode).toBe(0);
    const token = created.stdout.trim();
    expect(token).toMatch(/^crm_[A-Za-z0-9]{40}$/);

    const server = await spawnServer([crm, "serve", "--port", "0"], { cwd: folder, env });
    try {
      expect((await api(server.url, token, "GET", "/readyz")).body).toEqual({ status: "ready", checks: { database: "ok", migrations: "ok", delivery_loop: "ok" } });

      const sub = await api(server.url, token, "POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created"] });
      expect(sub.status).toBe(201);
      const contact = await api(server.url, token, "POST", "/public/v1/contacts", { first_name: "Ada", last_name: "Lovelace", email: "ada@example.com" });
      expect(contact.status).toBe(201);
      const list = await api(server.url, token, "GET", "/public/v1/contacts?email=ada@example.com");
      expect(list.status).toBe(200);
      expect(list.body.data.map((c: { id: string }) => c.id)).toEqual([contact.body.data.id]);
      // Two tags: a slow list, read on the lane's thread, whose module the binary embeds (else it
      // warns, checked once the log is flushed at the stop, and reads on the main thread).
      await api(server.url, token, "POST", `/public/v1/contacts/${contact.body.data.id}/tags`, { tag: "vip" });
      await api(server.url, token, "POST", `/public/v1/contacts/${contact.body.data.id}/tags`, { tag: "customer" });
      const slow = await api(server.url, token, "GET", "/public/v1/contacts?tag=vip&tag=customer");
      expect({ status: slow.status, ids: slow.body.data.map((c: { id: string }) => c.id), total: slow.body.meta.total }).toEqual({ status: 200, ids: [contact.body.data.id], total: 1 });

      await waitUntil(() => receiver.received.length > 0, "the webhook", server.proc);
      const hook = receiver.received[0]!;
      const payload = new Webhook(sub.body.data.secret).verify(hook.body, { "webhook-id": hook.id, "webhook-timestamp": hook.timestamp, "webhook-signature": hook.signature }) as {
        type: string;
        data: { id: string };
      };
      expect(payload.type).toBe("contact.created");
      expect(payload.data.id).toBe(contact.body.data.id);

      const docs = await fetch(`${server.url}/docs`);
      expect(docs.status).toBe(200);
      const html = await docs.text();
      const assets = [...html.matchAll(/(?:src|href)="(\/docs\/[^"]+)"/g)].map((m) => m[1]!);
      expect(assets.length).toBeGreaterThan(0);
      for (const asset of assets) expect((await fetch(`${server.url}${asset}`)).status).toBe(200);
      const spec = await (await fetch(`${server.url}/docs/json`)).json();
      expect(spec.openapi).toStartWith("3.1");

      const login = await fetch(`${server.url}/console/login`);
      expect(login.status).toBe(200);
      const page = await login.text();
      const consoleAssets = [...page.matchAll(/(?:src|href)="(\/console\/assets\/[^"?]+)/g)].map((m) => m[1]!);
      expect(consoleAssets.length).toBeGreaterThan(0);
      for (const asset of consoleAssets) expect((await fetch(`${server.url}${asset}`)).status).toBe(200);
      expect((await fetch(`${server.url}/console/assets/deliveries.js`)).status).toBe(200);
    } finally {
      // Hard guard only: a process still running 5 s after SIGTERM is killed and the test fails.
      expect(await server.stopWith("SIGTERM", 5000)).toEqual({ exitCode: 0, killed: false });
    }
    expect(server.logLines().filter((line) => String(line.msg).includes("lane"))).toEqual([]);

    const backup = run("backup", "copy.sqlite");
    expect(backup.exitCode).toBe(0);
    expect(backup.stdout).toMatch(/^backed up data\/crm\.sqlite to copy\.sqlite \(\d+ bytes, integrity ok\)\nnote: the secrets key data\/secrets\.key is not in the backup; keep a copy of it apart from the backup: without it the webhook signing secrets in the backup cannot be read\n$/);
    expect(readdirSync(folder).sort()).toEqual(["copy.sqlite", "crm", "data"]);
  }, 60_000);

  test("a fresh data directory: token list refuses it; serve's first-start hint names this binary and that directory, and works as printed", async () => {
    const fresh = tempDir("binary-fresh");
    try {
      expect(run("token", "list", "--data-dir", fresh)).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: `crm: no database at ${join(fresh, "crm.sqlite")}; pass the running server's data directory with --data-dir DIR (or CRM_DATA_DIR, or data_dir in the --config file), or create one with: ${crm} migrate --data-dir DIR; on PostgreSQL, give the database's URL (CRM_DATABASE_URL, or database_url or database_url_file in the --config file)\n`,
      });
      const server = await spawnServer([crm, "serve", "--port", "0", "--data-dir", fresh], { cwd: folder, env });
      try {
        const hint = server.logLines().find((line) => String(line.msg).startsWith("no API token exists yet"));
        const command = `${crm} token create --name my-integration --data-dir ${fresh}`;
        expect(hint?.msg).toBe(`no API token exists yet; create the first one with: ${command}`);
        const created = runCli(command.split(" "), { cwd: folder, env });
        expect(created.exitCode).toBe(0);
        expect((await api(server.url, created.stdout.trim(), "GET", "/public/v1/contacts")).status).toBe(200);
      } finally {
        await server.stopWith("SIGTERM");
      }
    } finally {
      rmSync(fresh, { recursive: true, force: true });
    }
  }, 60_000);

  test("run through a symlink (/usr/local/bin/crm -> /opt/crm/crm-VERSION), by its path or found on PATH, the hints name the link as run, not the binary it points to now", async () => {
    const fresh = tempDir("binary-linked");
    const bin = tempDir("binary-bin");
    const link = join(bin, "crm");
    symlinkSync(crm, link);
    const noDatabase = (program: string) =>
      `crm: no database at ${join(fresh, "crm.sqlite")}; pass the running server's data directory with --data-dir DIR (or CRM_DATA_DIR, or data_dir in the --config file), or create one with: ${program} migrate --data-dir DIR; on PostgreSQL, give the database's URL (CRM_DATABASE_URL, or database_url or database_url_file in the --config file)\n`;
    try {
      expect(runCli([link, "token", "list", "--data-dir", fresh], { cwd: folder, env })).toEqual({ exitCode: 2, stdout: "", stderr: noDatabase(link) });
      expect(runCli(["crm", "token", "list", "--data-dir", fresh], { cwd: folder, env: { ...env, PATH: bin } })).toEqual({ exitCode: 2, stdout: "", stderr: noDatabase("crm") });
      const server = await spawnServer([link, "serve", "--port", "0", "--data-dir", fresh], { cwd: folder, env });
      try {
        const hint = server.logLines().find((line) => String(line.msg).startsWith("no API token exists yet"));
        expect(hint?.msg).toBe(`no API token exists yet; create the first one with: ${link} token create --name my-integration --data-dir ${fresh}`);
      } finally {
        await server.stopWith("SIGTERM");
      }
    } finally {
      rmSync(fresh, { recursive: true, force: true });
      rmSync(bin, { recursive: true, force: true });
    }
  }, 60_000);

  test("copy-to-postgres applies the embedded PostgreSQL migrations and copies ./data", async () => {
    const target = await createTestDatabase();
    try {
      const copied = run("copy-to-postgres", "--database-url", target.url);
      expect({ exitCode: copied.exitCode, first: copied.stdout.split("\n")[0] }).toEqual({ exitCode: 0, first: expect.stringMatching(/^copied \d+ rows into postgres:\/\//) });
      const db = await openPostgres(target.url, 1);
      try {
        expect(await db.all("SELECT version, name FROM schema_migrations ORDER BY version")).toEqual(POSTGRES_MIGRATIONS.map((m) => ({ version: m.version, name: m.name })));
        expect(copied.stdout).toContain(`\napi_tokens${" ".repeat(18)} ${(await db.get<{ n: number }>("SELECT count(*) AS n FROM api_tokens"))!.n}\n`);
      } finally {
        await db.close();
      }
    } finally {
      await target.drop();
    }
  }, 60_000);
});
