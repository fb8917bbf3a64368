import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import { copyFileSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { api, createToken, postWithKey, ROOT, runCli, SOURCE, spawnServer, tempDir } from "../ops/support.ts";

// The README's restore block is what an operator types after losing the VM: run it, with the
// VM's paths moved into a temporary directory, where the data directory is gone and a first start
// of the rebuilt VM has made an empty database and a new key in its place.

/** backupSection is the README's section "Backup and restore". */
function backupSection(): string {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  return readme.slice(readme.indexOf("\n### Backup and restore\n"), readme.indexOf("\n### Moving up to PostgreSQL\n"));
}

/** restoreBlock is the README's shell block that restores a backup (the one that removes the -wal file). */
function restoreBlock(): string[] {
  const block = [...backupSection().matchAll(/```sh\n([^]*?)```/g)].map((m) => m[1]!).find((text) => text.includes("crm.sqlite-wal"));
  return (block ?? "").split("\n").filter((line) => line.trim() !== "");
}

/** redoList is the README's list of what to redo after a restore, one item a bullet. */
function redoList(): string[] {
  const section = backupSection();
  const list = section.slice(section.indexOf("redo what\nmattered:"));
  return (/^[^]*?\n(- [^]*?)\n\n/.exec(list)?.[1] ?? "").split(/\n- /).map((item) => item.replace(/^- /, "").replace(/\s+/g, " "));
}

/** deletionsItem is the redo list's item on records deleted after the backup. */
const deletionsItem = () => redoList().find((item) => /^[a-z, ]+ deleted after the backup are back/.test(item)) ?? "";

/** redoneDeletions are the lists of deletions the README's restore says to take before restoring and delete again after, such as `/public/v1/contacts/deleted`. */
function redoneDeletions(): string[] {
  return [...deletionsItem().matchAll(/`GET (\/public\/v1\/[a-z]+\/deleted)\?since=/g)].map((m) => m[1]!);
}

/** redoneAfterStart are the `crm` commands the deletions item says to run after the start, as words without the id (`crm user delete ID` is ["user", "delete"]). */
function redoneAfterStart(): string[][] {
  const afterStart = /after the start,[^(]*\(([^)]*)\)/.exec(deletionsItem())?.[1] ?? "";
  return [...afterStart.matchAll(/`crm ([a-z ]+) ID`/g)].map((m) => m[1]!.split(" "));
}

/** onVm moves a command of the block onto the test's VM, which runs as the current user: the paths under `root`, no owners. */
function onVm(line: string, root: string): string {
  return line
    .replaceAll("/path/to/kept", join(root, "kept"))
    .replace(/(\/var\/lib\/crm|\/var\/backups\/crm|\/etc\/crm)/g, (path) => join(root, path))
    .replace(/ -o \S+ -g \S+/g, "");
}

const mode = (path: string) => (statSync(path).mode & 0o777).toString(8);

test("the README's restore block brings a lost VM back from a backup, its key and its configuration: the start is ready, a replay opens its secret, the settings are the kept ones", async () => {
  const root = tempDir("restore");
  const [dataDir, etc, backups, kept] = ["var/lib/crm", "etc/crm", "var/backups/crm", "kept"].map((path) => join(root, path)) as [string, string, string, string];
  const toml = join(etc, "crm.toml");
  const serve = () => spawnServer([...SOURCE, "serve", "--config", toml, "--port", "0"]);
  const body = { target_url: "http://127.0.0.1:9/hook", events: ["contact.created"] };
  try {
    for (const dir of [etc, backups, kept]) mkdirSync(dir, { recursive: true });
    writeFileSync(toml, `data_dir = "${dataDir}"\nallow_private_targets = true\nlog_level = "warn"\n`);
    writeFileSync(join(etc, "crm.env"), "CRM_METRICS_TOKEN=kept-metrics-token-0123456789abcdef\n");
    const token = createToken(SOURCE, dataDir);
    const old = await serve();
    let created: Awaited<ReturnType<typeof postWithKey>>;
    try {
      created = await postWithKey(old.url, token, "/public/v1/webhook-subscriptions", body, "sub-1");
      expect(created.status).toBe(201);
    } finally {
      await old.stopWith("SIGTERM");
    }
    expect(runCli([...SOURCE, "backup", join(backups, "crm-2026-11-20.sqlite"), "--config", toml]).exitCode).toBe(0);
    for (const file of [join(dataDir, "secrets.key"), toml, join(etc, "crm.env")]) copyFileSync(file, join(kept, file.slice(file.lastIndexOf("/") + 1)));

    // The VM is lost; the rebuilt one is installed with the example configuration, and started once.
    rmSync(join(root, "var/lib"), { recursive: true, force: true });
    rmSync(etc, { recursive: true, force: true });
    mkdirSync(etc, { recursive: true });
    writeFileSync(toml, `data_dir = "${dataDir}"\nlog_level = "warn"\n`);
    await (await serve()).stopWith("SIGTERM");

    const lines = restoreBlock();
    expect([lines[0], lines.at(-2), lines.at(-1)]).toEqual(["systemctl stop crm", "systemctl start crm", "curl -fsS http://127.0.0.1:3000/readyz"]);
    const commands = lines.slice(1, -2).map((line) => onVm(line, root));
    const ran = Bun.spawnSync(["sh", "-ec", commands.join("\n")], { stdout: "pipe", stderr: "pipe" });
    expect({ exitCode: ran.exitCode, stderr: ran.stderr.toString() }).toEqual({ exitCode: 0, stderr: "" });
    expect(["crm.toml", "crm.env"].map((file) => mode(join(etc, file)))).toEqual(["640", "600"]);
    expect(["secrets.key", "crm.sqlite"].map((file) => mode(join(dataDir, file)))).toEqual(["600", "600"]);

    const restored = await serve();
    try {
      expect((await fetch(`${restored.url}/readyz`)).status).toBe(200);
      const replay = await postWithKey(restored.url, token, "/public/v1/webhook-subscriptions", body, "sub-1");
      expect(replay).toEqual({ status: 201, replayed: true, body: created!.body });
      // The kept crm.toml allows receivers on private addresses; the rebuilt VM's example refused them.
      expect((await api(restored.url, token, "POST", "/public/v1/webhook-subscriptions", { ...body, target_url: "http://127.0.0.1:9/other" })).status).toBe(201);
    } finally {
      expect((await restored.stopWith("SIGTERM")).exitCode).toBe(0);
    }
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}, 60_000);

test("after the README's restore, its redo list deletes again everyone deleted after the backup (a contact, an account and a user) with what works once the service runs, and says that a subscription disabled after the backup is active again, as it is", async () => {
  const root = tempDir("restore-erased");
  const [dataDir, etc, backups, kept] = ["var/lib/crm", "etc/crm", "var/backups/crm", "kept"].map((path) => join(root, path)) as [string, string, string, string];
  const toml = join(etc, "crm.toml");
  const serve = () => spawnServer([...SOURCE, "serve", "--config", toml, "--port", "0"]);
  /** whileServing runs `work` against the service started on the data directory, and stops it after. */
  const whileServing = async <T>(work: (url: string) => Promise<T>): Promise<T> => {
    const server = await serve();
    try {
      return await work(server.url);
    } finally {
      expect((await server.stopWith("SIGTERM")).exitCode).toBe(0);
    }
  };
  try {
    for (const dir of [etc, backups, kept]) mkdirSync(dir, { recursive: true });
    writeFileSync(toml, `data_dir = "${dataDir}"\nlog_level = "warn"\n`);
    writeFileSync(join(etc, "crm.env"), "");
    const token = createToken(SOURCE, dataDir);
    const people = await whileServing(async (url) => {
      const create = async (path: string, body: unknown) => `${path}/${(await api(url, token, "POST", path, body)).body.data.id}`;
      return [await create("/public/v1/contacts", { email: "erased.contact@example.com" }), await create("/public/v1/accounts", { name: "Erased Account" }), await create("/public/v1/users", { name: "Erased User", email: "erased.user@example.com" })];
    });
    // A subscription to an address, which needs no name lookup; nothing it hears of happens here.
    const subscription = await whileServing(async (url) => (await api(url, token, "POST", "/public/v1/webhook-subscriptions", { target_url: "https://93.184.216.34/hook", events: ["subscription.disabled"] })).body.data.id as string);
    const since = new Date(Date.now() - 1000).toISOString();
    expect(runCli([...SOURCE, "backup", join(backups, "crm-2026-11-20.sqlite"), "--config", toml]).exitCode).toBe(0);
    for (const file of [join(dataDir, "secrets.key"), toml, join(etc, "crm.env")]) copyFileSync(file, join(kept, file.slice(file.lastIndexOf("/") + 1)));

    // Each is erased on request after the backup; before restoring, the README has the deletions listed.
    const lists = redoneDeletions();
    const erased = await whileServing(async (url) => {
      expect(await Promise.all(people.map(async (path) => (await api(url, token, "DELETE", path)).status))).toEqual([204, 204, 204]);
      const listed = await Promise.all(lists.map(async (list) => (await api(url, token, "GET", `${list}?since=${encodeURIComponent(since)}`)).body.data.map((tombstone: { id: string }) => `${list.slice(0, -"/deleted".length)}/${tombstone.id}`)));
      return listed.flat();
    });
    // Disabled after the backup, as an operator's removal on the console can (the service stopped meanwhile).
    const stopped = new Database(join(dataDir, "crm.sqlite"));
    stopped.run("UPDATE webhook_subscriptions SET status = 'disabled', disabled_at = ?, disabled_reason = 'the operator who made it was removed from the console; enable it if it is still wanted' WHERE id = ?", [Date.now(), subscription]);
    stopped.close();

    const ran = Bun.spawnSync(["sh", "-ec", restoreBlock().slice(1, -2).map((line) => onVm(line, root)).join("\n")], { stdout: "pipe", stderr: "pipe" });
    expect({ exitCode: ran.exitCode, stderr: ran.stderr.toString() }).toEqual({ exitCode: 0, stderr: "" });

    // After the start, each listed one is deleted again, by each way the list names; none of the three may be back.
    const user = people[2]!.slice(people[2]!.lastIndexOf("/") + 1);
    const after = await whileServing(async (url) => {
      const commands = redoneAfterStart().map((words) => {
        const ran = runCli([...SOURCE, ...words, user, "--config", toml]);
        return { command: words.join(" "), exitCode: ran.exitCode, stderr: ran.stderr.toString() };
      });
      expect(commands.filter((ran) => ran.exitCode !== 0)).toEqual([]);
      for (const path of erased) expect([204, 404]).toContain((await api(url, token, "DELETE", path)).status);
      return { people: await Promise.all(people.map(async (path) => [path, (await api(url, token, "GET", path)).status])), subscription: (await api(url, token, "GET", `/public/v1/webhook-subscriptions/${subscription}`)).body.data.status };
    });
    expect(after).toEqual({ people: people.map((path) => [path, 404]), subscription: "active" });
    // The list says so, and to check them.
    expect(redoList().filter((item) => item.startsWith("subscriptions disabled after the backup are active again"))).toHaveLength(1);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}, 60_000);
