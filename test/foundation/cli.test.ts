import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PASSWORD_INPUT_BYTES } from "../../server/operators/password-input.ts";
import { commandHere } from "../../server/server.ts";
import { VERSION } from "../../server/version.ts";
import { databasePath, openDatabase } from "../../server/db/database.ts";
import { MIGRATIONS, migrate } from "../../server/db/migrations.ts";
import { JOINED_NAME_WARNINGS, OLD_ACCOUNT_NAMES, oldNameKey } from "../support/account-name-keys.ts";
import { SHUT_OUT } from "../support/permissions.ts";
import { startReceiver, waitFor } from "../webhooks/support.ts";
import { ISO } from "./support.ts";

const ROOT = join(import.meta.dir, "../..");
const BUN = join(ROOT, "node_modules/.bin/bun");
const MAIN = join(ROOT, "server/main.ts");

let dataDir: string;
beforeEach(() => {
  dataDir = mkdtempSync(join(tmpdir(), "crm-cli-"));
});
afterEach(() => rmSync(dataDir, { recursive: true, force: true }));

/** noDatabaseHint is what a command refused a data directory without a database says after naming the file; `program` as run (from the repository by default). */
const noDatabaseHint = (program = "npx bun server/main.ts") =>
  `pass the running server's data directory with --data-dir DIR (or CRM_DATA_DIR, or data_dir in the --config file), or create one with: ${program} migrate --data-dir DIR; on PostgreSQL, give the database's URL (CRM_DATABASE_URL, or database_url or database_url_file in the --config file)`;

/** crm runs the command line from source with a throwaway data directory; `prefix` runs it under another command (setpriv). */
async function crm(args: string[], env: Record<string, string> = {}, prefix: string[] = []) {
  const proc = Bun.spawn([...prefix, BUN, MAIN, ...args], {
    cwd: ROOT,
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", CRM_DATA_DIR: dataDir, ...env },
  });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { stdout, stderr, code };
}

/** startServe starts `crm serve` on a free port with the throwaway data directory and reads its output until it listens or exits; the caller kills it. */
async function startServe(env: Record<string, string> = {}) {
  const proc = Bun.spawn([BUN, MAIN, "serve", "--port", "0"], {
    cwd: ROOT,
    stdout: "pipe",
    stderr: "pipe",
    env: { PATH: process.env.PATH ?? "", CRM_DATA_DIR: dataDir, ...env },
  });
  const reader = proc.stdout.getReader();
  let out = "";
  while (!/listening on http:\/\/\S+\n/.test(out)) {
    const { value, done } = await reader.read();
    if (done) break;
    out += new TextDecoder().decode(value);
  }
  return { proc, out };
}

describe("command line: happy paths", () => {
  test("--help lists every command and setting", async () => {
    const res = await crm(["--help"]);
    expect(res.code).toBe(0);
    expect(res.stderr).toBe("");
    for (const word of ["serve", "migrate", "token create --name N [--json]", "token list", "token revoke ID", "user create --name N --email E", "user list", "user delete ID", "contact erase ID, account erase ID", "--version", "--help", "--host", "--port", "--data-dir", "CRM_DATA_DIR", "PORT", "CRM_HOST"]) {
      expect(res.stdout).toContain(word);
    }
  });

  test("--help says what a setting left out does as its default, not \"none\" beside a \"when not given\" in its words", async () => {
    const res = await crm(["serve", "--help"]);
    const defaultOf = (flag: string) => new RegExp(`^  ${flag} VALUE .*\\(default: (.*)\\)$`, "m").exec(res.stdout)?.[1];
    expect(["--database-url", "--database-schema", "--secrets-key-file", "--trusted-proxies"].map(defaultOf)).toEqual([
      "SQLite in --data-dir",
      "public; a database whose service tables are in more than one schema is refused until this names one of them",
      "secrets.key in the data directory, created 0600 on first start",
      "none",
    ]);
    expect(res.stdout).not.toMatch(/when not given|without it,/);
  });

  test("--version prints the version, and from source says so where a build names its commit", async () => {
    expect(await crm(["--version"])).toEqual({ stdout: `crm ${VERSION} (source)\n`, stderr: "", code: 0 });
  });

  test("migrate applies everything once, then reports the database up to date", async () => {
    const first = await crm(["migrate"]);
    expect(first.code).toBe(0);
    expect(first.stdout).toStartWith("applied 0001_foundation.sql");
    expect(await crm(["migrate"])).toEqual({ stdout: "database is up to date\n", stderr: "", code: 0 });
  });

  test("migrate prints on stderr, one line each, the groups of accounts whose names 0034's case folding joins, names escaped", async () => {
    const db = openDatabase(databasePath(dataDir));
    migrate(db.sqlite, MIGRATIONS.filter((m) => m.version < 34));
    const insert = db.sqlite.query("INSERT INTO accounts (id, name, name_key, properties, created_at, updated_at) VALUES (?, ?, ?, '{}', 1, 1)");
    for (const [id, name] of [...OLD_ACCOUNT_NAMES, ["acc_b", "Ärzte\u202eGruß"], ["acc_c", "ÄRZTE\u202eGRUSS"]] as const) insert.run(id, name, oldNameKey(name));
    await db.close();
    const { stdout, stderr, code } = await crm(["migrate"]);
    expect([code, stdout]).toEqual([0, `applied ${MIGRATIONS.filter((m) => m.version >= 34).map((m) => m.name).join(", ")}\n`]);
    const [message] = JOINED_NAME_WARNINGS[0]!;
    expect(stderr).toBe(
      `crm: ${message}: {"migration":"0034_account_name_case_fold.sql","accounts":[{"id":"acc_7","name":"İSTANBUL GIDA"},{"id":"acc_a","name":"Istanbul Gıda"}]}\n` +
        `crm: ${message}: {"migration":"0034_account_name_case_fold.sql","accounts":[{"id":"acc_8","name":"Straße Logistik AG"},{"id":"acc_9","name":"STRASSE LOGISTIK AG"}]}\n` +
        `crm: ${message}: {"migration":"0034_account_name_case_fold.sql","accounts":[{"id":"acc_b","name":"Ärzte\\u202eGruß"},{"id":"acc_c","name":"ÄRZTE\\u202eGRUSS"}]}\n`,
    );
  });

  test("options may come before the command; an option's value is never taken for the command", async () => {
    const first = await crm(["--log-level", "warn", "migrate"]);
    expect([first.code, first.stderr, first.stdout]).toEqual([0, "", expect.stringMatching(/^applied 0001_foundation\.sql/)]);
    expect(await crm(["--allow-private-targets", "--data-dir", dataDir, "migrate", "--log-level=error"])).toEqual({ stdout: "database is up to date\n", stderr: "", code: 0 });
    const created = await crm(["--log-level=warn", "token", "create", "--name", "importer"]);
    expect([created.code, created.stdout]).toEqual([0, expect.stringMatching(/^crm_[A-Za-z0-9]{40}\n$/)]);
  });

  test("token create prints only the token on stdout; --json adds its metadata; list never shows it; revoke", async () => {
    await crm(["migrate"]);
    const created = await crm(["token", "create", "--name", "importer"]);
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(/^crm_[A-Za-z0-9]{40}\n$/);
    const token = created.stdout.trim();
    expect(created.stderr).toMatch(/^created token tok_[0-9A-Z]{26} \(importer\); it is shown only this once\n$/);
    const id = /tok_[0-9A-Z]{26}/.exec(created.stderr)![0];

    const json = await crm(["token", "create", "--name=report job", "--json"]);
    expect(json.code).toBe(0);
    const info = JSON.parse(json.stdout);
    expect(info).toEqual({ id: expect.stringMatching(/^tok_/), name: "report job", prefix: info.token.slice(0, 12), created_at: expect.stringMatching(ISO), last_used_at: null, revoked_at: null, made_by: { kind: "command_line" }, token: expect.stringMatching(/^crm_[A-Za-z0-9]{40}$/) });

    const list = await crm(["token", "list"]);
    expect(list.code).toBe(0);
    expect(list.stdout).not.toContain(token);
    expect(list.stdout).not.toContain(info.token);
    const lines = list.stdout.trim().split("\n");
    expect(lines.length).toBe(2);
    expect(lines[0]).toStartWith(`${info.id}  ${info.prefix}…  report job  created `);
    expect(lines[1]).toStartWith(`${id}  ${token.slice(0, 12)}…  importer  created `);
    expect(lines[1]).toContain("last used never");

    expect(await crm(["token", "revoke", id])).toEqual({ stdout: `revoked ${id}\n`, stderr: "", code: 0 });
    expect((await crm(["token", "list"])).stdout).toMatch(new RegExp(`${id} .* revoked \\d{4}-`));
    expect(await crm(["token", "revoke", id])).toEqual({ stdout: "", stderr: `crm: token ${id} is already revoked\n`, code: 1 });
    expect(await crm(["token", "revoke", "tok_nope"])).toEqual({ stdout: "", stderr: "crm: no token with id tok_nope\n", code: 1 });
  });

  test("user create adds a user and prints it as JSON", async () => {
    await crm(["migrate"]);
    const res = await crm(["user", "create", "--name", "Grace Hopper", "--email", "Grace@Navy.mil"]);
    expect(res.code).toBe(0);
    expect(JSON.parse(res.stdout)).toEqual({ id: expect.stringMatching(/^usr_[0-9A-Z]{26}$/), name: "Grace Hopper", email: "grace@navy.mil", created_at: expect.stringMatching(ISO), updated_at: expect.stringMatching(ISO) });
    expect(await crm(["user", "create", "--name", "G", "--email", "grace@navy.mil"])).toEqual({ stdout: "", stderr: "crm: A user with email grace@navy.mil already exists.\n", code: 2 });
  });

  test("user create checks its fields as POST /public/v1/users does (the email as given, untrimmed) and prints the API's field errors", async () => {
    await crm(["migrate"]);
    const refused = (detail: string) => ({ stdout: "", stderr: `crm: ${detail}\n`, code: 2 });
    const email = "email must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de)";
    expect(await crm(["user", "create", "--name", "Ann", "--email", " ann@example.com "])).toEqual(refused(`${email}.`));
    expect(await crm(["user", "create", "--name", "", "--email", "ann@example"])).toEqual(refused(`name must be a string of 1 to 200 characters, not spaces alone (a user needs a name); ${email}.`));
    expect(await crm(["user", "create", "--name", "A".repeat(201), "--email", "ann@example.com"])).toEqual(refused("name must be a string of 1 to 200 characters, not spaces alone (a user needs a name)."));
    expect(await crm(["user", "list"])).toEqual({ stdout: "", stderr: "", code: 0 });
  });

  test("user list prints every user, oldest first, one line each", async () => {
    await crm(["migrate"]);
    expect(await crm(["user", "list"])).toEqual({ stdout: "", stderr: "", code: 0 });
    const grace = JSON.parse((await crm(["user", "create", "--name", "Grace Hopper", "--email", "grace@navy.mil"])).stdout);
    const alan = JSON.parse((await crm(["user", "create", "--name", "Alan Turing", "--email", "alan@example.com"])).stdout);
    expect(await crm(["user", "list"])).toEqual({
      stdout: `${grace.id}  grace@navy.mil  Grace Hopper  created ${grace.created_at}\n${alan.id}  alan@example.com  Alan Turing  created ${alan.created_at}\n`,
      stderr: "",
      code: 0,
    });
  });

  test("user list shows control characters in a name (the API takes names as given) as escapes, so they neither colour the terminal nor split the line", async () => {
    await crm(["migrate"]);
    const ada = JSON.parse((await crm(["user", "create", "--name", "Ada\u001b[31m\tLovelace\u009b", "--email", "ada@example.com"])).stdout);
    expect(ada.name).toBe("Ada\u001b[31m\tLovelace\u009b");
    expect((await crm(["user", "list"])).stdout).toBe(`${ada.id}  ada@example.com  Ada\\u001b[31m\\u0009Lovelace\\u009b  created ${ada.created_at}\n`);
  });

  test("user list shows bidi controls in a name as escapes, so a name cannot draw the rest of its line backwards", async () => {
    await crm(["migrate"]);
    const eve = JSON.parse((await crm(["user", "create", "--name", "Eve\u202e moc.elpmaxe@evE\u202c \u2067x\u2069\u200f", "--email", "eve@example.com"])).stdout);
    expect((await crm(["user", "list"])).stdout).toBe(`${eve.id}  eve@example.com  Eve\\u202e moc.elpmaxe@evE\\u202c \\u2067x\\u2069\\u200f  created ${eve.created_at}\n`);
  });

  test("token create and token list show bidi controls in a token's name as escapes, and user create's JSON too (the same string, escaped): a name cannot draw the rest of its line backwards", async () => {
    await crm(["migrate"]);
    const name = "ops\u202e reveoked\u202c \u2067x\u2069\u200f";
    const shown = "ops\\u202e reveoked\\u202c \\u2067x\\u2069\\u200f";
    const created = await crm(["token", "create", "--name", name]);
    const id = /tok_[0-9A-Z]{26}/.exec(created.stderr)![0];
    expect(created.stderr).toBe(`created token ${id} (${shown}); it is shown only this once\n`);
    const json = await crm(["token", "create", "--name", name, "--json"]);
    expect([json.stdout.includes("\u202e"), JSON.parse(json.stdout).name]).toEqual([false, name]);
    const info = JSON.parse(json.stdout);
    const list = (await crm(["token", "list"])).stdout;
    expect(list).toContain(`${id}  ${created.stdout.slice(0, 12)}…  ${shown}  created `);
    expect(list).toContain(`${info.id}  ${info.prefix}…  ${shown}  created `);
    const user = await crm(["user", "create", "--name", name, "--email", "eve@example.com"]);
    expect([user.stdout.includes("\u202e"), JSON.parse(user.stdout).name]).toEqual([false, name]);
  });

  test("user delete deletes a user as the API does: refused while serve holds the data directory; stopped, its contacts lose the assignment, and the next serve sends their contact.updated", async () => {
    await crm(["migrate"]);
    const token = (await crm(["token", "create", "--name", "ops"])).stdout.trim();
    const grace = JSON.parse((await crm(["user", "create", "--name", "Grace", "--email", "grace@navy.mil"])).stdout);
    const receiver = startReceiver();
    const env = { CRM_ALLOW_PRIVATE_TARGETS: "true" };
    let serve = await startServe(env);
    let url = /listening on (http:\/\/\S+)\n/.exec(serve.out)![1]!;
    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${url}${path}`, { method, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
      return { status: res.status, body: res.status === 204 ? null : await res.json() };
    };
    let contact: any;
    try {
      expect((await api("POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.updated"] })).status).toBe(201);
      contact = (await api("POST", "/public/v1/contacts", { first_name: "Ada", assigned_user_id: grace.id, assigned_user_ids: [grace.id] })).body.data;
      expect(await crm(["user", "delete", grace.id])).toEqual({
        stdout: "",
        stderr: `crm: the data directory ${JSON.stringify(dataDir)} is in use by a running crm serve, or a migrate or copy-to-postgres under way (it holds ${join(dataDir, "crm.lock")}): delete the user through it (DELETE /public/v1/users/${grace.id}, or Delete on the console's Users page), which sends its contacts' contact.updated at once, or stop it first\n`,
        code: 2,
      });
      expect((await api("GET", `/public/v1/users/${grace.id}`)).status).toBe(200);
    } finally {
      serve.proc.kill();
      await serve.proc.exited;
    }
    expect(await crm(["user", "delete", grace.id])).toEqual({ stdout: `deleted user ${grace.id} (grace@navy.mil); contacts that lost the assignment: 1 (each sends contact.updated)\n`, stderr: "", code: 0 });
    expect(await crm(["user", "delete", grace.id])).toEqual({ stdout: "", stderr: `crm: No user with id "${grace.id}" exists.\n`, code: 2 });
    expect(await crm(["user", "delete"])).toEqual({ stdout: "", stderr: "crm: user delete needs the user id (see user list)\n", code: 2 });
    expect(await crm(["user", "list"])).toEqual({ stdout: "", stderr: "", code: 0 });
    serve = await startServe(env);
    url = /listening on (http:\/\/\S+)\n/.exec(serve.out)![1]!;
    try {
      const after = (await api("GET", `/public/v1/contacts/${contact.id}`)).body.data;
      expect(after).toEqual({ ...contact, assigned_user_id: null, assigned_user_ids: [], version: 2, updated_at: after.updated_at });
      await waitFor(() => receiver.received.length === 1, "the contact.updated of the deletion");
      expect(receiver.received[0]!.json).toEqual({ type: "contact.updated", event_id: expect.stringMatching(/^evt_[0-9A-Z]{26}$/), timestamp: after.updated_at, data: after });
    } finally {
      serve.proc.kill();
      await serve.proc.exited;
      await receiver.stop();
    }
  });

  test("contact erase erases a deleted contact's earlier events as the API does; a live or unknown one is one line and exit 2", async () => {
    expect((await crm(["migrate"])).code).toBe(0);
    const db = new Database(databasePath(dataDir));
    const [gone, live] = ["con_01M8KQ0000000000000000GONE", "con_01M8KQ0000000000000000LIVE"];
    const payload = { type: "contact.created", event_id: "evt_01M8KQ00000000000000000001", timestamp: "2026-11-29T10:00:00.000Z", data: { id: gone, email: "cli.erase3@example.com" } };
    db.run("INSERT INTO events (id, type, payload, created_at) VALUES (?, ?, ?, ?)", [payload.event_id, payload.type, JSON.stringify(payload), Date.now()]);
    db.run("INSERT INTO tombstones (resource, id, deleted_at, version) VALUES ('contact', ?, ?, 2)", [gone, Date.now()]);
    db.run("INSERT INTO contacts (id, first_name, created_at, updated_at) VALUES (?, 'Live', 0, 0)", [live]);
    db.close();
    expect(await crm(["contact", "erase", gone])).toEqual({ stdout: `erased the payloads of 1 earlier event of contact ${gone}; 0 pending deliveries of them failed unsent\n`, stderr: "", code: 0 });
    const after = new Database(databasePath(dataDir), { readonly: true });
    expect(after.query("SELECT payload FROM events").get()).toEqual({ payload: JSON.stringify({ type: "contact.created", event_id: payload.event_id, data: { id: gone } }) });
    after.close();
    expect(await crm(["contact", "erase", gone])).toEqual({ stdout: `erased the payloads of 0 earlier events of contact ${gone}; 0 pending deliveries of them failed unsent\n`, stderr: "", code: 0 });
    expect(await crm(["contact", "erase", live])).toEqual({
      stdout: "",
      stderr: `crm: The contact ${live} exists: only a deleted contact's events are erased. Delete it first (DELETE /public/v1/contacts/${live}), then erase them.\n`,
      code: 2,
    });
    expect(await crm(["account", "erase", gone])).toEqual({ stdout: "", stderr: `crm: No deleted account with id "${gone}" exists.\n`, code: 2 });
    expect(await crm(["contact", "erase"])).toEqual({ stdout: "", stderr: "crm: contact erase needs the id of a deleted contact (see GET /public/v1/contacts/deleted)\n", code: 2 });
    expect(await crm(["contact", "remove", gone])).toEqual({ stdout: "", stderr: "crm: usage: contact erase ID\n", code: 2 });
  });

  test("a --config that can be read only once (--config <(envsubst ...)) is read once: user delete, operator unlock and reset-password and secrets-key reset act on its database, not on ./data", async () => {
    await crm(["migrate"]);
    const grace = JSON.parse((await crm(["user", "create", "--name", "Grace", "--email", "grace@navy.mil"])).stdout);
    const elsewhere = mkdtempSync(join(tmpdir(), "crm-cwd-"));
    // bash's process substitution: a pipe, empty on a second read. No CRM_DATA_DIR: the file names the data directory.
    const once = async (args: string, stdin = "") => {
      const script = `printf '%s' "$STDIN" | exec "$BUN" "$MAIN" ${args} --config <(printf 'data_dir = "%s"\\n' "$DATA_DIR")`;
      const proc = Bun.spawn(["bash", "-c", script], { cwd: elsewhere, stdout: "pipe", stderr: "pipe", env: { PATH: process.env.PATH ?? "", BUN, MAIN, DATA_DIR: dataDir, STDIN: stdin } });
      const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
      return { stdout, stderr, code };
    };
    try {
      expect(await once(`user delete ${grace.id}`)).toEqual({ stdout: `deleted user ${grace.id} (grace@navy.mil); contacts that lost the assignment: 0 (each sends contact.updated)\n`, stderr: "", code: 0 });
      expect((await once("operator create --email ops@example.com --password-stdin", "correct horse battery\n")).code).toBe(0);
      expect(await once("operator reset-password --email ops@example.com --password-stdin", "another horse battery\n")).toEqual({ stdout: expect.stringMatching(/^set a new password for operator opr_\w+ \(ops@example\.com\); their sessions have ended\n$/), stderr: `crm: created the key that encrypts webhook signing secrets, ${join(dataDir, "secrets.key")}; keep it with the database: backups do not include it\n`, code: 0 });
      expect(await once("operator unlock --email ops@example.com")).toEqual({ stdout: "cleared 0 failed sign-in records of ops@example.com\n", stderr: "", code: 0 });
      const reset = await once("secrets-key reset");
      expect({ code: reset.code, stderr: reset.stderr }).toEqual({ code: 2, stderr: `crm: secrets key file ${join(dataDir, "secrets.key")} is the key this database was used with: nothing is lost, and a reset would only disable every webhook subscription; nothing was changed\n` });
      expect(existsSync(join(elsewhere, "data"))).toBe(false);
    } finally {
      rmSync(elsewhere, { recursive: true, force: true });
    }
  });

  test("serve on an empty data directory explains how to make the first token and operator, then serves them", async () => {
    const { proc, out } = await startServe();
    try {
      const url = /listening on (http:\/\/127\.0\.0\.1:\d+)\n/.exec(out)![1]!;
      const hint = out
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l))
        .find((l) => l.msg.includes("token create"));
      expect(hint.level).toBe("info");
      // From source, in the repository: the command to type there, with this server's data directory.
      const command = `npx bun server/main.ts token create --name my-integration --data-dir ${dataDir}`;
      expect(hint.msg).toBe(`no API token exists yet; create the first one with: ${command}`);

      const printed = Bun.spawn(["sh", "-c", command], { cwd: ROOT, stdout: "pipe", stderr: "pipe", env: { PATH: `${join(ROOT, "node_modules/.bin")}:${process.env.PATH ?? ""}`, HOME: process.env.HOME ?? "" } });
      const firstToken = (await new Response(printed.stdout).text()).trim();
      expect(await printed.exited).toBe(0);
      expect((await fetch(`${url}/public/v1/contacts`, { headers: { authorization: `Bearer ${firstToken}` } })).status).toBe(200);

      const token = (await crm(["token", "create", "--name", "first"])).stdout.trim();
      const ok = await fetch(`${url}/public/v1/contacts`, { headers: { authorization: `Bearer ${token}` } });
      expect(ok.status).toBe(200);
      const id = JSON.parse((await crm(["token", "create", "--name", "second", "--json"])).stdout);
      expect((await crm(["token", "revoke", id.id])).code).toBe(0);
      const revoked = await fetch(`${url}/public/v1/contacts`, { headers: { authorization: `Bearer ${id.token}` } });
      expect(revoked.status).toBe(401);

      // The first operator's hint names the program and the data directory as the token's does.
      const operatorHint = out
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l))
        .find((l) => l.msg.startsWith("no console operator exists yet"));
      const operatorCommand = `npx bun server/main.ts operator create --email E --password-stdin --data-dir ${dataDir}`;
      expect(operatorHint.msg).toBe(`no console operator exists yet; open this one-time link within 30 minutes to create the first one (or run: ${operatorCommand})`);
      const created = Bun.spawn(["sh", "-c", `echo 'a long enough password' | ${operatorCommand.replace("--email E", "--email ada@example.com")}`], {
        cwd: ROOT,
        stdout: "pipe",
        stderr: "pipe",
        env: { PATH: `${join(ROOT, "node_modules/.bin")}:${process.env.PATH ?? ""}`, HOME: process.env.HOME ?? "" },
      });
      expect([await created.exited, await new Response(created.stderr).text()]).toEqual([0, ""]);
      expect((await crm(["operator", "list"])).stdout).toMatch(/^opr_[0-9A-Z]{26}  ada@example.com  /);
    } finally {
      proc.kill();
      await proc.exited;
    }
  });
});

describe("first-start hint", () => {
  test("names the program as run here and the data directory, quoted for the shell when it needs it", () => {
    const token = ["token", "create", "--name", "my-integration"];
    expect(commandHere(token, "./data", join(ROOT, "server/main.ts"), "/usr/bin/bun", ROOT)).toBe(`npx bun server/main.ts token create --name my-integration --data-dir ${join(ROOT, "data")}`);
    expect(commandHere(token, "d", "/srv/crm/server/main.ts", "/usr/bin/bun", "/home/ada")).toBe("npx bun /srv/crm/server/main.ts token create --name my-integration --data-dir /home/ada/d");
    expect(commandHere(token, "/var/lib/crm's data", "/$bunfs/root/crm", "/opt/crm/bin/crm", "/")).toBe("/opt/crm/bin/crm token create --name my-integration --data-dir '/var/lib/crm'\\''s data'");
    expect(commandHere(["operator", "create", "--email", "E", "--password-stdin"], null, "/$bunfs/root/crm", "/opt/crm/bin/crm", "/")).toBe("/opt/crm/bin/crm operator create --email E --password-stdin");
  });
});

describe("command line: errors", () => {
  const oneLine = (res: { stdout: string; stderr: string; code: number }) => {
    expect(res.code).toBe(2);
    expect(res.stdout).toBe("");
    expect(res.stderr.split("\n")).toEqual([expect.stringMatching(/^crm: /), ""]);
    expect(res.stderr).not.toContain("    at ");
  };

  test("an invalid setting stops with exit 2 and one line naming it", async () => {
    const cases: [string[], Record<string, string>, string][] = [
      [["serve"], { PORT: "abc" }, "PORT"],
      [["serve", "--port", "70000"], {}, "--port"],
      [["serve", "--log-level", "loud"], {}, "--log-level"],
      [["migrate"], { CRM_LOG_LEVEL: "verbose" }, "CRM_LOG_LEVEL"],
      [["migrate"], { CRM_DATA_DIR: "" }, "CRM_DATA_DIR"],
      [["migrate", "--data-dir", "/proc/crm-cannot-exist"], {}, "--data-dir"],
      [["serve", "--retry-schedule", "1,x"], {}, "--retry-schedule"],
      [["serve", "--no-such-flag"], {}, "--no-such-flag"],
      [["serve", "--config", "/nonexistent/crm.toml"], {}, "/nonexistent/crm.toml"],
    ];
    for (const [args, env, named] of cases) {
      const res = await crm(args, env);
      oneLine(res);
      expect({ args, named: res.stderr.includes(named) }).toEqual({ args, named: true });
    }
  });

  test("an IPv6 --host, bare or in brackets, is printed once bracketed in the listening line and the setup link, which open", async () => {
    for (const host of ["::1", "[::1]"]) {
      const { proc, out } = await startServe({ CRM_HOST: host });
      try {
        const url = /listening on (\S+)\n/.exec(out)?.[1];
        const setupUrl = out
          .split("\n")
          .filter((l) => l.startsWith("{"))
          .map((l) => JSON.parse(l))
          .find((l) => l.setup_url)?.setup_url;
        expect({ host, url: url?.replace(/:\d+$/, ":PORT"), setupUrl: setupUrl?.replace(/:\d+\//, ":PORT/").replace(/code=.*/, "code=CODE") }).toEqual({
          host,
          url: "http://[::1]:PORT",
          setupUrl: "http://[::1]:PORT/console/setup?code=CODE",
        });
        expect({ host, healthz: (await fetch(`${url}/healthz`)).status, setup: (await fetch(setupUrl)).status }).toEqual({ host, healthz: 200, setup: 200 });
      } finally {
        proc.kill();
        await proc.exited;
      }
    }
  });

  test("serve refuses a BUN_CONFIG_MAX_HTTP_REQUESTS under the webhook attempts it runs at once (Bun's fetch would queue the rest, their timeouts running), in one line naming it and the least it needs; 244 starts", async () => {
    const line = (value: string) =>
      `crm: invalid BUN_CONFIG_MAX_HTTP_REQUESTS: ${JSON.stringify(value)} is not a whole number from 244 to 65535 (the requests Bun's fetch sends at once: webhook delivery runs up to 244, 228 scheduled attempts and 16 manual ones, and one more would wait inside Bun with its timeout running); leave it unset for Bun's 256\n`;
    for (const value of ["243", "100", "abc", "70000", ""]) {
      const { proc, out } = await startServe({ BUN_CONFIG_MAX_HTTP_REQUESTS: value });
      if (out !== "") proc.kill();
      expect({ value, out, stderr: await new Response(proc.stderr).text(), code: await proc.exited }).toEqual({ value, out: "", stderr: line(value), code: 2 });
    }
    const { proc, out } = await startServe({ BUN_CONFIG_MAX_HTTP_REQUESTS: "244" });
    proc.kill();
    expect(out).toContain("listening on http://127.0.0.1:");
    await proc.exited;
  });

  test("a data directory that is a file is one line naming the setting", async () => {
    const file = join(dataDir, "not-a-dir");
    writeFileSync(file, "x");
    const res = await crm(["migrate", "--data-dir", file]);
    oneLine(res);
    expect(res.stderr).toBe(`crm: invalid data directory ${JSON.stringify(file)} (--data-dir, CRM_DATA_DIR): it is not a directory\n`);
  });

  test("a bad config file value names the key", async () => {
    const file = join(dataDir, "crm.toml");
    writeFileSync(file, 'port = "http"\n');
    const res = await crm(["migrate", "--config", file]);
    oneLine(res);
    expect(res.stderr).toContain("port in");
  });

  test("an unexpected error is one line naming the command and the error, exit 2; --log-level debug (from any source) prints its stack too", async () => {
    expect((await crm(["migrate"])).code).toBe(0);
    // A schema changed by hand: no refusal foresees it.
    const db = new Database(join(dataDir, "crm.sqlite"));
    db.run("ALTER TABLE api_tokens RENAME COLUMN name TO label");
    db.close();
    const line = "crm: token create failed: SQLiteError: table api_tokens has no column named name (run it with CRM_LOG_LEVEL=debug to print its stack)\n";
    expect(await crm(["token", "create", "--name", "ci"])).toEqual({ stdout: "", stderr: line, code: 2 });
    const config = join(dataDir, "crm.toml");
    writeFileSync(config, 'log_level = "debug"\n');
    for (const [args, env] of [[["--log-level", "debug"], {}], [[], { CRM_LOG_LEVEL: "debug" }], [["--config", config], {}]] as const) {
      const res = await crm(["token", "create", "--name", "ci", ...args], env);
      expect({ args, code: res.code, stdout: res.stdout, first: res.stderr.split("\n")[0], stack: res.stderr.includes("\n    at ") }).toEqual({
        args,
        code: 2,
        stdout: "",
        first: "crm: token create failed: SQLiteError: table api_tokens has no column named name",
        stack: true,
      });
    }
  });

  test("an unknown command after options is named as the command, not the option's value", async () => {
    expect(await crm(["--log-level", "warn", "bogus"])).toEqual({ stdout: "", stderr: "crm: unknown command bogus (see --help)\n", code: 2 });
  });

  test("commands other than serve and migrate refuse a data directory with no database, naming it and --data-dir, and create nothing", async () => {
    const empty = join(dataDir, "elsewhere");
    const refusal = `crm: no database at ${join(empty, "crm.sqlite")}; ${noDatabaseHint()}\n`;
    for (const args of [["token", "list"], ["token", "revoke", "tok_x"], ["user", "list"], ["operator", "unlock", "--email", "a@example.com"], ["backup", join(dataDir, "copy.sqlite")]]) {
      expect([args.join(" "), await crm([...args, "--data-dir", empty])]).toEqual([args.join(" "), { stdout: "", stderr: refusal, code: 2 }]);
    }
    expect(existsSync(empty)).toBe(false);
    expect((await crm(["migrate", "--data-dir", empty])).code).toBe(0);
    expect((await crm(["token", "list", "--data-dir", empty])).code).toBe(0);
  });

  test("a config file or data directory the command may not read is named as unreadable, not as missing or not TOML, and token create claims no new database", async () => {
    const data = join(dataDir, "data");
    const etc = join(dataDir, "etc");
    const config = join(etc, "crm.toml");
    expect((await crm(["migrate", "--data-dir", data])).code).toBe(0);
    mkdirSync(etc);
    writeFileSync(config, "log_level = \"warn\"\n");
    const denied = "permission denied (run the command as the user the service runs as)";
    const unreadableConfig = { stdout: "", stderr: `crm: cannot read config file ${config}: ${denied}\n`, code: 2 };
    const unreadableData = { stdout: "", stderr: `crm: cannot open the database ${join(data, "crm.sqlite")} (--data-dir, CRM_DATA_DIR): ${denied}\n`, code: 2 };
    try {
      chmodSync(etc, 0o000);
      const behindDirectory = await crm(["token", "list", "--config", config], {}, SHUT_OUT);
      chmodSync(etc, 0o755);
      chmodSync(config, 0o000);
      const fileItself = await crm(["token", "list", "--config", config], {}, SHUT_OUT);
      chmodSync(config, 0o644);
      chmodSync(data, 0o000);
      const commands = [["token", "create", "--name", "x", "--config", config], ["token", "list"], ["backup", join(dataDir, "copy.sqlite")]];
      const answers = await Promise.all(commands.map((args) => crm(args, { CRM_DATA_DIR: data }, SHUT_OUT)));
      expect([behindDirectory, fileItself, ...answers]).toEqual([unreadableConfig, unreadableConfig, ...commands.map(() => unreadableData)]);
    } finally {
      chmodSync(etc, 0o755);
      chmodSync(config, 0o644);
      chmodSync(data, 0o700);
    }
    expect(await crm(["token", "list", "--data-dir", data])).toEqual({ stdout: "", stderr: "", code: 0 });
  });

  test("token and user create refuse the default ./data, or a config file's data_dir, without a database; a data directory named for the run (flag, environment) is set up, and they say so", async () => {
    const elsewhere = mkdtempSync(join(tmpdir(), "crm-cwd-"));
    try {
      const run = async (args: string[], env: Record<string, string>) => {
        const proc = Bun.spawn([BUN, MAIN, ...args], { cwd: elsewhere, stdout: "pipe", stderr: "pipe", stdin: "ignore", env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...env } });
        const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
        return { stdout, stderr, code };
      };
      // Run from elsewhere, the hint names the program by its whole path.
      const refusal = (dir: string) => `crm: no database at ${join(dir, "crm.sqlite")}; ${noDatabaseHint(`npx bun ${MAIN}`)}\n`;
      for (const args of [["token", "create", "--name", "x"], ["user", "create", "--name", "x", "--email", "x@example.com"]]) {
        expect([args.join(" "), await run(args, {})]).toEqual([args.join(" "), { stdout: "", stderr: refusal(join(elsewhere, "data")), code: 2 }]);
      }
      expect(existsSync(join(elsewhere, "data"))).toBe(false);

      const named = join(dataDir, "new-install");
      const created = await run(["token", "create", "--name", "first", "--json", "--data-dir", named], {});
      expect(created.code).toBe(0);
      expect(created.stderr).toBe(`created a new database at ${join(named, "crm.sqlite")}; serve it with --data-dir ${named}\n`);
      expect(JSON.parse(created.stdout).token).toMatch(/^crm_/);
      const again = await run(["user", "create", "--name", "Ada", "--email", "ada@example.com"], { CRM_DATA_DIR: named });
      expect({ code: again.code, stderr: again.stderr }).toEqual({ code: 0, stderr: "" });
      expect((await run(["token", "list", "--data-dir", named], {})).stdout).toContain("first");

      // A data_dir of the --config file is not named for this run: on several instances the service's
      // crm.toml names one it never uses (the URL is in crm.env), and a database made there got 401s.
      // A relative one is the file's directory's, wherever the command runs; the refusal names it whole.
      mkdirSync(join(dataDir, "opt", "crm"), { recursive: true });
      writeFileSync(join(dataDir, "opt", "crm", "crm.toml"), 'data_dir = "var"\n');
      const fromConfig = await run(["token", "create", "--name", "ci", "--config", join(dataDir, "opt", "crm", "crm.toml")], {});
      expect(fromConfig).toEqual({ stdout: "", stderr: refusal(join(dataDir, "opt", "crm", "var")), code: 2 });
      expect([existsSync(join(dataDir, "opt", "crm", "var")), existsSync(join(elsewhere, "var"))]).toEqual([false, false]);
      // A relative --data-dir is the working directory's, as a path argument is; the hint names it whole.
      const relative = await run(["token", "create", "--name", "rel", "--data-dir", "here"], {});
      expect(relative.stderr).toStartWith(`created a new database at ${join(elsewhere, "here", "crm.sqlite")}; serve it with --data-dir ${join(elsewhere, "here")}\n`);
    } finally {
      rmSync(elsewhere, { recursive: true, force: true });
    }
  });

  test("with crm-instances.toml's settings and no database URL (it is in crm.env, which only systemd reads), every command refuses the missing SQLite database, naming it and the URL's settings, and creates nothing", async () => {
    // As deploy/crm-instances.toml sets up a VM: data_dir exists (StateDirectory) but holds nothing, the key is named.
    const state = join(dataDir, "var", "lib", "crm");
    const key = join(dataDir, "secrets.key");
    const config = join(dataDir, "crm.toml");
    mkdirSync(state, { recursive: true, mode: 0o700 });
    writeFileSync(key, `${Buffer.alloc(32, 7).toString("base64")}\n`, { mode: 0o600 });
    writeFileSync(config, `data_dir = ${JSON.stringify(state)}\nsecrets_key_file = ${JSON.stringify(key)}\n`);
    const run = async (args: string[], stdin = "") => {
      const proc = Bun.spawn([BUN, MAIN, ...args, "--config", config], { cwd: ROOT, stdout: "pipe", stderr: "pipe", stdin: new Blob([stdin]), env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "" } });
      const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
      return { stdout, stderr, code };
    };
    const refusal = { stdout: "", stderr: `crm: no database at ${join(state, "crm.sqlite")}; ${noDatabaseHint()}\n`, code: 2 };
    const commands: [string[], string?][] = [
      [["token", "create", "--name", "my-integration"]],
      [["token", "list"]],
      [["token", "revoke", "tok_01M8KPNPB23SS2589B7019BP7N"]],
      [["user", "create", "--name", "Ada", "--email", "ada@example.com"]],
      [["operator", "create", "--email", "ops@example.com", "--password-stdin"], "correct horse battery\n"],
      [["operator", "list"]],
      [["backup", join(dataDir, "copy.sqlite")]],
      [["secrets-key", "reset", "--yes-disable-every-subscription"]],
      // migrate too: the database it made there took the next token create --config's token, which every instance refused.
      [["migrate"]],
    ];
    for (const [args, stdin] of commands) expect([args.join(" "), await run(args, stdin)]).toEqual([args.join(" "), refusal]);
    expect([readdirSync(state), existsSync(join(dataDir, "copy.sqlite"))]).toEqual([[], false]);
    // Named for the run, the data directory is set up, as an install script does before the first start.
    expect(await run(["migrate", "--data-dir", state])).toEqual({ stdout: `applied ${MIGRATIONS.map((m) => m.name).join(", ")}\n`, stderr: "", code: 0 });
  });

  test("a token name with a control character (C0, DEL, C1) is refused with one line naming it, and no token is made", async () => {
    await crm(["migrate"]);
    const cases: [string, string][] = [
      ["tab\tnew\nline", "U+0009 at character 4"],
      ["\x1b[31mred", "U+001B at character 1"],
      ["bell\x07", "U+0007 at character 5"],
      ["del\x7f", "U+007F at character 4"],
      ["next\u0085line", "U+0085 at character 5"],
      ["csi\u009b31m", "U+009B at character 4"],
    ];
    for (const [name, named] of cases) {
      expect([name, await crm(["token", "create", "--name", name])]).toEqual([name, { stdout: "", stderr: `crm: token create --name must not contain control characters (${named})\n`, code: 2 }]);
    }
    expect(await crm(["token", "list"])).toEqual({ stdout: "", stderr: "", code: 0 });
  });

  test("an option given twice is named as given twice, not as unknown", async () => {
    await crm(["migrate"]);
    expect(await crm(["token", "create", "--name", "a", "--name", "b"])).toEqual({ stdout: "", stderr: "crm: --name is given twice; give it once\n", code: 2 });
    expect(await crm(["token", "create", "--name=a", "--name=b"])).toEqual({ stdout: "", stderr: "crm: --name is given twice; give it once\n", code: 2 });
    expect(await crm(["token", "create", "--name", "a", "--json", "--json"])).toEqual({ stdout: "", stderr: "crm: --json is given twice; give it once\n", code: 2 });
    expect(await crm(["token", "create", "--name", "a", "--json", "--json=false"])).toEqual({ stdout: "", stderr: "crm: --json is given twice; give it once\n", code: 2 });
    // A setting's flag too: serve stops before it listens, on neither port.
    expect(await crm(["serve", "--port", "1", "--port", "0"])).toEqual({ stdout: "", stderr: "crm: --port is given twice; give it once\n", code: 2 });
    expect(await crm(["token", "create", "--name", "a", "--data-dir", dataDir, "--data-dir", join(dataDir, "other")])).toEqual({ stdout: "", stderr: "crm: --data-dir is given twice; give it once\n", code: 2 });
    expect(await crm(["token", "list"])).toEqual({ stdout: "", stderr: "", code: 0 });
  });

  test("a command's flag takes =true or =false (1/0, yes/no, on/off) as a boolean setting's does; another value is refused naming it", async () => {
    await crm(["migrate"]);
    const json = await crm(["token", "create", "--name", "a", "--json=true"]);
    const plain = await crm(["token", "create", "--name", "b", "--json=false"]);
    expect([json.code, JSON.parse(json.stdout).name, plain.code, plain.stdout]).toEqual([0, "a", 0, expect.stringMatching(/^crm_[A-Za-z0-9]{40}\n$/)]);
    expect(await crm(["token", "create", "--name", "c", "--json=maybe"])).toEqual({ stdout: "", stderr: 'crm: invalid --json: "maybe" is not a boolean (1/0, true/false)\n', code: 2 });
    expect(await crm(["secrets-key", "reset", "--yes-disable-every-subscription=no"])).toEqual({
      stdout: "",
      stderr: "crm: this database records no secrets key and holds no signing secret: any key opens it, and a reset would only disable every webhook subscription; nothing was changed\n",
      code: 2,
    });
    expect(await crm(["secrets-key", "reset", "--yes-disable-every-subscription=maybe"])).toEqual({ stdout: "", stderr: 'crm: invalid --yes-disable-every-subscription: "maybe" is not a boolean (1/0, true/false)\n', code: 2 });
    expect((await crm(["token", "list"])).stdout.split("\n").filter(Boolean).length).toBe(2);
  });

  test("an option whose value is missing before another option is refused with one line naming it (exit 2), not given that option as its value", async () => {
    await crm(["migrate"]);
    const answers = [
      await crm(["token", "create", "--name", "--json"]),
      await crm(["token", "create", "--name", "ci", "--rate", "--data-dir", dataDir]),
      await crm(["user", "create", "--name", "--email", "ada@example.com"]),
      await crm(["operator", "unlock", "--email", "--data-dir", dataDir]),
      await crm(["import", "contacts", "contacts.csv", "--url", "--token-file", "token.txt"]),
    ];
    expect(answers).toEqual([
      { stdout: "", stderr: "crm: --name needs a value, not the option --json (for a value that starts with --, write --name=--json)\n", code: 2 },
      { stdout: "", stderr: "crm: --rate needs a value, not the option --data-dir (for a value that starts with --, write --rate=--data-dir)\n", code: 2 },
      { stdout: "", stderr: "crm: --name needs a value, not the option --email (for a value that starts with --, write --name=--email)\n", code: 2 },
      { stdout: "", stderr: "crm: --email needs a value, not the option --data-dir (for a value that starts with --, write --email=--data-dir)\n", code: 2 },
      { stdout: "", stderr: "crm: --url needs a value, not the option --token-file (for a value that starts with --, write --url=--token-file)\n", code: 2 },
    ]);
    expect([await crm(["token", "list"]), await crm(["user", "list"])]).toEqual([{ stdout: "", stderr: "", code: 0 }, { stdout: "", stderr: "", code: 0 }]);
    // Written with =, such a value is taken as given.
    const named = await crm(["token", "create", "--name=--json"]);
    expect({ code: named.code, stderr: named.stderr.replace(/tok_\w+/, "tok_…") }).toEqual({ code: 0, stderr: "created token tok_… (--json); it is shown only this once\n" });
  });

  test("--help, -h and --version as the value of an option are refused like any option there (exit 2), not answered with the help or the version", async () => {
    await crm(["migrate"]);
    const answers = [
      await crm(["token", "create", "--name", "--version"]),
      await crm(["user", "create", "--name", "--help", "--email", "ada@example.com"]),
      await crm(["token", "create", "--name", "-h"]),
      await crm(["token", "list", "--data-dir", "--help"]),
    ];
    expect(answers).toEqual([
      { stdout: "", stderr: "crm: --name needs a value, not the option --version (for a value that starts with --, write --name=--version)\n", code: 2 },
      { stdout: "", stderr: "crm: --name needs a value, not the option --help (for a value that starts with --, write --name=--help)\n", code: 2 },
      { stdout: "", stderr: "crm: --name needs a value, not the option -h (for the value -h, write --name=-h)\n", code: 2 },
      { stdout: "", stderr: "crm: --data-dir needs a value, not the option --help (for a value that starts with --, write --data-dir=--help)\n", code: 2 },
    ]);
    expect([await crm(["token", "list"]), await crm(["user", "list"])]).toEqual([{ stdout: "", stderr: "", code: 0 }, { stdout: "", stderr: "", code: 0 }]);
    // Where they are options, after a command, a flag or an option's value, they still ask for the help or the version.
    const asked = [await crm(["token", "create", "--name", "ci", "--help"]), await crm(["token", "create", "--json", "-h"]), await crm(["backup", "--version"])];
    expect(asked.map((res) => [res.code, res.stdout.split("\n")[0]])).toEqual([
      [0, expect.stringMatching(/^crm .*: CRM contacts API/)],
      [0, expect.stringMatching(/^crm .*: CRM contacts API/)],
      [0, `crm ${VERSION} (source)`],
    ]);
  });

  test("a database URL whose port is out of range names the port", async () => {
    expect(await crm(["migrate", "--database-url", "postgres://u:p@h:99999/d"])).toEqual({
      stdout: "",
      stderr: 'crm: invalid --database-url: "postgres://***@h:99999/d" has port 99999; the port must be 1 to 65535\n',
      code: 2,
    });
  });

  test("a --secrets-key-file that does not exist or holds no key stops every command given it, even one that needs no key", async () => {
    await crm(["migrate"]);
    const missing = join(dataDir, "missing.key");
    const broken = join(dataDir, "broken.key");
    writeFileSync(broken, "not a key\n");
    const commands = [["serve", "--port", "0"], ["migrate"], ["token", "create", "--name", "x"], ["token", "list"], ["token", "revoke", "tok_x"], ["user", "list"], ["operator", "list"], ["backup", join(dataDir, "copy.sqlite")], ["copy-to-postgres", "--database-url", "postgres://u:p@127.0.0.1:1/d"]];
    for (const args of commands) {
      expect([args.join(" "), await crm([...args, "--secrets-key-file", missing])]).toEqual([
        args.join(" "),
        { stdout: "", stderr: `crm: secrets key file ${missing} (--secrets-key-file, CRM_SECRETS_KEY_FILE) does not exist\n`, code: 2 },
      ]);
      expect([args.join(" "), await crm(args, { CRM_SECRETS_KEY_FILE: broken })]).toEqual([args.join(" "), { stdout: "", stderr: `crm: secrets key file ${broken} does not hold a key (base64 of 32 random bytes)\n`, code: 2 }]);
    }
    expect(await crm(["token", "list"])).toEqual({ stdout: "", stderr: "", code: 0 });
    expect(existsSync(join(dataDir, "copy.sqlite"))).toBe(false);
  }, 30_000);

  test("exit statuses tell a usage mistake (2) from a database that is busy or cannot be reached (3, try again): SQLite's write lock held by another process past the 5 s wait is one line, not a stack; --help gives the table", async () => {
    await crm(["migrate"]);
    // Another process's write transaction: an operator's sqlite3 session left open, a long write.
    const holder = new Database(join(dataDir, "crm.sqlite"));
    holder.exec("BEGIN IMMEDIATE");
    try {
      expect(await crm(["token", "create", "--name", "during-lock"])).toEqual({
        stdout: "",
        stderr: "crm: the database is busy: another process has held its write lock for 5 s (a sqlite3 session with a transaction open, a long write); nothing more was done, try again\n",
        code: 3,
      });
    } finally {
      holder.exec("ROLLBACK");
      holder.close();
    }
    expect((await crm(["token", "list"])).stdout).toBe("");
    const unreachable = await crm(["token", "list", "--database-url", "postgres://crm:pw@127.0.0.1:1/crm"]);
    expect(unreachable).toEqual({ stdout: "", stderr: "crm: cannot use the PostgreSQL database at postgres://crm:***@127.0.0.1:1/crm (--database-url, CRM_DATABASE_URL): connection refused (is the server running and the host and port right?)\n", code: 3 });
    // Bun's client reports a host name that does not resolve as a refused connection too: a typo is no server to wait for (.invalid never resolves, RFC 6761).
    const typo = await crm(["token", "list", "--database-url", "postgres://crm:pw@db.interal.invalid:5432/crm"]);
    expect(typo).toEqual({ stdout: "", stderr: "crm: cannot use the PostgreSQL database at postgres://crm:***@db.interal.invalid:5432/crm (--database-url, CRM_DATABASE_URL): the host db.interal.invalid does not resolve (ENOTFOUND): is the host name in the URL right?\n", code: 2 });
    // Read from a file, the URL is named by the file and the setting naming that file: the mistake is there, not in a CRM_DATABASE_URL.
    const urlFile = join(dataDir, "database-url");
    writeFileSync(urlFile, "postgres://crm:pw@db.interal.invalid:5432/crm\n", { mode: 0o600 });
    const configFile = join(dataDir, "crm.toml");
    writeFileSync(configFile, 'database_url_file = "database-url"\n');
    const fromFile = (source: string) => `crm: cannot use the PostgreSQL database at postgres://crm:***@db.interal.invalid:5432/crm (the file ${urlFile} that ${source} names): the host db.interal.invalid does not resolve (ENOTFOUND): is the host name in the URL right?\n`;
    expect([await crm(["token", "list", "--database-url-file", urlFile]), await crm(["token", "list"], { CRM_DATABASE_URL_FILE: urlFile }), await crm(["token", "list", "--config", configFile])]).toEqual([
      { stdout: "", stderr: fromFile("--database-url-file"), code: 2 },
      { stdout: "", stderr: fromFile("CRM_DATABASE_URL_FILE"), code: 2 },
      { stdout: "", stderr: fromFile(`database_url_file in ${configFile}`), code: 2 },
    ]);
    writeFileSync(configFile, 'database_url = "postgres://crm:pw@db.interal.invalid:5432/crm"\n');
    // As README installs it (root:crm 0640): a file every user may read is warned of first.
    chmodSync(configFile, 0o640);
    expect((await crm(["token", "list", "--config", configFile])).stderr).toBe(
      `crm: cannot use the PostgreSQL database at postgres://crm:***@db.interal.invalid:5432/crm (database_url in ${configFile}): the host db.interal.invalid does not resolve (ENOTFOUND): is the host name in the URL right?\n`,
    );
    expect((await crm(["token", "list", "--no-such-option"])).code).toBe(2);
    const help = (await crm(["--help"])).stdout;
    for (const status of ["Exit status:\n  0  done (with a warning", "\n  1  not done", "\n  2  usage mistake or refused", "\n  3  the database is busy or cannot be reached just now: try again later\n", "\n  141  the reader of its output left"]) expect(help).toContain(status);
  }, 30_000);

  test("a database URL file other users may read is warned of on stderr, as the secrets key is, naming its mode and the chmod; the command goes on", async () => {
    const urlFile = join(dataDir, "database-url");
    writeFileSync(urlFile, "postgres://crm:pw@127.0.0.1:1/crm\n");
    chmodSync(urlFile, 0o644);
    const unreachable = `crm: cannot use the PostgreSQL database at postgres://crm:***@127.0.0.1:1/crm (the file ${urlFile} that --database-url-file names): connection refused (is the server running and the host and port right?)\n`;
    expect(await crm(["token", "list", "--database-url-file", urlFile])).toEqual({
      stdout: "",
      stderr:
        `crm: the database URL file is open to other users (mode 0644): whoever may read it logs in to the database as the service, to every contact, user and sealed secret; unless a secret store mounts it so, make it the owner's alone: chmod 600 ${urlFile}\n` +
        unreachable,
      code: 3,
    });
    chmodSync(urlFile, 0o600);
    expect(await crm(["token", "list", "--database-url-file", urlFile])).toEqual({ stdout: "", stderr: unreachable, code: 3 });
  });

  test("a --config file holding database_url or metrics_token that every user may read is warned of too, naming what it holds and the chmod; its group reading it (root:crm 0640) is not", async () => {
    const configFile = join(dataDir, "secrets.toml");
    writeFileSync(configFile, 'database_url = "postgres://crm:pw@127.0.0.1:1/crm"\nmetrics_token = "a-long-metrics-token-0123456789"\n');
    chmodSync(configFile, 0o644);
    const unreachable = `crm: cannot use the PostgreSQL database at postgres://crm:***@127.0.0.1:1/crm (database_url in ${configFile}): connection refused (is the server running and the host and port right?)\n`;
    expect(await crm(["token", "list", "--config", configFile])).toEqual({
      stdout: "",
      stderr:
        `crm: the config file ${configFile} holds database_url and metrics_token and every user may read it (mode 0644): whoever does has them; make it unreadable to others: chmod o-rwx ${configFile} (or move them to database_url_file and the environment)\n` +
        unreachable,
      code: 3,
    });
    chmodSync(configFile, 0o640);
    expect(await crm(["token", "list", "--config", configFile])).toEqual({ stdout: "", stderr: unreachable, code: 3 });
  });

  test("a secrets key file other users may read is warned of once on stderr by every command, as serve logs it; the command goes on", async () => {
    expect((await crm(["migrate"])).code).toBe(0);
    // Reading the sign-in records needs the key: the data directory's is made 0600.
    expect((await crm(["operator", "unlock", "--email", "ada@example.com"])).code).toBe(2);
    const key = join(dataDir, "secrets.key");
    chmodSync(key, 0o644);
    const warning = `crm: the secrets key file is open to other users (mode 0644): whoever may read it and gets a backup can read every signing secret; unless a secret store mounts it so, make it the owner's alone: chmod 600 ${key}; if someone may have read it, replace the key: crm secrets-key rotate --new-key-file NEW\n`;
    const commands = [["token", "list"], ["migrate"], ["user", "list"], ["operator", "unlock", "--email", "ada@example.com"], ["secrets-key", "reset"], ["token", "list", "--secrets-key-file", key]];
    const stderrs = async () => {
      const warned: [string, number][] = [];
      // One at a time: migrate and the reset hold the data directory.
      for (const args of commands) warned.push([args.join(" "), (await crm(args)).stderr.split(warning).length - 1]);
      return warned;
    };
    expect(await stderrs()).toEqual(commands.map((args) => [args.join(" "), 1]));
    chmodSync(key, 0o600);
    expect(await stderrs()).toEqual(commands.map((args) => [args.join(" "), 0]));
  });

  test("output that cannot be written (a full disk, stdout closed) is one line and exit 1, not 0; token create revokes the token nobody got, and refuses to make one for /dev/null", async () => {
    await crm(["migrate"]);
    await crm(["user", "create", "--name", "Ada", "--email", "ada@example.com"]);
    const redirected = async (args: string, to: string) => {
      const proc = Bun.spawn(["bash", "-c", `exec "$BUN" "$MAIN" ${args} ${to}`], { cwd: ROOT, stdout: "pipe", stderr: "pipe", env: { PATH: process.env.PATH ?? "", BUN, MAIN, CRM_DATA_DIR: dataDir } });
      const [stderr, code] = await Promise.all([new Response(proc.stderr).text(), proc.exited]);
      return { stderr, code };
    };
    const full = "could not write to standard output (ENOSPC: no space left on device, write)";
    for (const json of ["", " --json"]) {
      const res = await redirected(`token create --name ci${json}`, "> /dev/full");
      expect(res).toEqual({ stderr: expect.stringMatching(new RegExp(`^crm: ${full.replace(/[()]/g, "\\$&")}: the token just made, tok_\\w+ \\(ci\\), is revoked; nothing was lost, create another\n$`)), code: 1 });
    }
    for (const to of ["> /dev/null", ">&-"]) {
      expect(await redirected("token create --name nowhere", to)).toEqual({ stderr: "crm: token create: standard output is /dev/null (or closed), so the token would be shown to no one; nothing was created\n", code: 2 });
    }
    const tokens = (await crm(["token", "list"])).stdout.trim().split("\n");
    expect(tokens).toEqual([expect.stringMatching(/  ci  .*  revoked /), expect.stringMatching(/  ci  .*  revoked /)]);
    for (const listing of ["token list", "user list", "--help", "--version"]) {
      expect([listing, await redirected(listing, "> /dev/full")]).toEqual([listing, { stderr: `crm: ${full}\n`, code: 1 }]);
    }
    // A reader that left (head read what it wanted; `true` reads nothing and is gone before crm writes) ends the listing quietly.
    const piped = Bun.spawn(["bash", "-c", `"$BUN" "$MAIN" user list | true; echo "\${PIPESTATUS[0]}"`], { cwd: ROOT, stdout: "pipe", stderr: "pipe", env: { PATH: process.env.PATH ?? "", BUN, MAIN, CRM_DATA_DIR: dataDir } });
    const [status, stderr] = await Promise.all([new Response(piped.stdout).text(), new Response(piped.stderr).text(), piped.exited]);
    expect({ status, stderr }).toEqual({ status: "141\n", stderr: "" });
  }, 30_000);

  test("usage mistakes are one line with exit 2", async () => {
    for (const args of [["bogus"], ["token"], ["token", "create"], ["token", "create", "--name"], ["token", "revoke"], ["user", "create", "--name", "x"], ["user", "delete"]]) {
      oneLine(await crm(args));
    }
  });
});

describe("command line: --password-stdin", () => {
  const createArgs = (email: string) => ["operator", "create", "--email", email, "--password-stdin"];
  /** passwordIs tells whether the operator's stored hash is of this password. */
  const passwordIs = async (email: string, password: string) => {
    const db = new Database(join(dataDir, "crm.sqlite"), { readonly: true });
    try {
      const row = db.query<{ password_hash: string }, [string]>("SELECT password_hash FROM operators WHERE email = ?").get(email);
      return row !== null && (await Bun.password.verify(password, row.password_hash));
    } finally {
      db.close();
    }
  };
  /** crmWithInput runs the command line with this standard input. */
  const crmWithInput = async (args: string[], input: string | Uint8Array) => {
    const proc = Bun.spawn([BUN, MAIN, ...args], { cwd: ROOT, stdout: "pipe", stderr: "pipe", stdin: typeof input === "string" ? Buffer.from(input) : input, env: { PATH: process.env.PATH ?? "", CRM_DATA_DIR: dataDir } });
    const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    return { stdout, stderr, code };
  };

  test("piped in, the password is the first line: blank lines after it are dropped, a second line with text or more than the bound is refused in one line", async () => {
    expect((await crmWithInput(createArgs("blank@example.com"), "correct horse battery\n\n")).code).toBe(0);
    expect(await passwordIs("blank@example.com", "correct horse battery")).toBe(true);
    expect((await crmWithInput(createArgs("crlf@example.com"), "correct horse battery\r\n\r\n")).code).toBe(0);
    expect(await passwordIs("crlf@example.com", "correct horse battery")).toBe(true);
    expect(await crmWithInput(createArgs("two@example.com"), "correct horse\nbattery staple\n")).toEqual({ code: 2, stdout: "", stderr: "crm: --password-stdin: standard input holds more than one line; give the password alone on one line\n" });
    // `yes | crm operator create ...`: the input is refused past the bound, not read to its end.
    const yes = Buffer.from("y\n".repeat(4 * 1024 * 1024));
    expect(await crmWithInput(createArgs("yes@example.com"), yes)).toEqual({ code: 2, stdout: "", stderr: `crm: --password-stdin: standard input holds more than ${PASSWORD_INPUT_BYTES} bytes; give the password alone on one line (512 characters at most)\n` });
    expect((await crmWithInput(["operator", "list"], "")).stdout).not.toMatch(/two@|yes@/);
  }, 60_000);

  test("typed at a terminal: a prompt on stderr, nothing echoed, Enter ends it; Ctrl-C ends the command; the terminal is given back with echo on either way", async () => {
    let screen = "";
    await using terminal = new Bun.Terminal({ data: (_terminal, data) => void (screen += new TextDecoder().decode(data)) });
    const inTerminal = (args: string[]) => Bun.spawn(args, { cwd: ROOT, terminal, env: { PATH: process.env.PATH ?? "", CRM_DATA_DIR: dataDir } });
    /** terminalModes runs stty in the terminal and lists whether echo and line editing are on. */
    const terminalModes = async () => {
      screen = "";
      await inTerminal(["stty", "-a"]).exited;
      const modes = () => screen.match(/(?<![\w-])-?(echo|icanon)(?![\w-])/g) ?? [];
      return waitFor(() => modes().length === 2 && modes(), "stty's output", 30_000);
    };

    const created = inTerminal([BUN, MAIN, ...createArgs("typed@example.com")]);
    await waitFor(() => screen.includes("Password (not shown): "), "the prompt", 30_000);
    // Backspace takes back the character before it.
    terminal.write("correct horsx\x7fe battery\r");
    expect(await created.exited).toBe(0);
    // The terminal may pass the command's last output on after its exit is seen.
    await waitFor(() => screen.endsWith("/console/login\r\n"), "the command's last line", 30_000);
    expect(screen).not.toContain("horse");
    expect(screen).toMatch(/^Password \(not shown\): \r\n(.*\r\n)?created operator opr_\w+ \(typed@example\.com\); sign in at \/console\/login\r\n$/);
    expect(await passwordIs("typed@example.com", "correct horse battery")).toBe(true);
    expect(await terminalModes()).toEqual(["icanon", "echo"]);

    screen = "";
    const interrupted = inTerminal([BUN, MAIN, ...createArgs("cancelled@example.com")]);
    await waitFor(() => screen.includes("Password (not shown): "), "the prompt", 30_000);
    terminal.write("correct horse\x03");
    expect(await interrupted.exited).toBe(130);
    await waitFor(() => screen.endsWith("\r\n"), "the line ended by Ctrl-C", 30_000);
    expect(screen).toBe("Password (not shown): \r\n");
    expect(await terminalModes()).toEqual(["icanon", "echo"]);
    expect(await passwordIs("cancelled@example.com", "correct horse")).toBe(false);
  }, 120_000);
});
