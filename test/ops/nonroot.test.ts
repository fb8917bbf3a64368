import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, chownSync, cpSync, mkdirSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { runCli, SOURCE, spawnServer, tempDir } from "./support.ts";
import { AS_NOBODY, NOBODY } from "../support/permissions.ts";

// The service as a VM runs it: as an unprivileged user, on files a root `cp`, `install` or command
// may have touched. Run as root (the suite and CI are), the commands run as nobody; otherwise skipped.
const isRoot = process.getuid?.() === 0;
const AS_NOBODY_SOURCE = [...AS_NOBODY, ...SOURCE];

let work: string;
let good: string;

/** untilExit runs a command that is expected to stop by itself (a refused serve), killed after 30 s as a hang guard. */
async function untilExit(args: string[]): Promise<{ exitCode: number | null; stderr: string }> {
  const proc = Bun.spawn([...AS_NOBODY_SOURCE, ...args], { cwd: "/", env: { PATH: process.env.PATH ?? "" }, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const guard = setTimeout(() => proc.kill("SIGKILL"), 30_000);
  const [stderr, exitCode] = await Promise.all([new Response(proc.stderr).text(), proc.exited]);
  clearTimeout(guard);
  return { exitCode, stderr };
}

/** asNobody runs a command to completion as nobody: its exit code and what it wrote on stderr. */
function asNobody(args: string[]): { exitCode: number; stderr: string } {
  const { exitCode, stderr } = runCli([...AS_NOBODY_SOURCE, ...args], { cwd: "/" });
  return { exitCode, stderr };
}

/** copyOfGood is a fresh copy of a data directory nobody made and served (nobody's, 0700 and 0600). */
function copyOfGood(name: string): string {
  const dir = join(work, name);
  cpSync(good, dir, { recursive: true });
  chownSync(dir, NOBODY, NOBODY);
  for (const file of ["crm.sqlite", "crm.lock", "secrets.key"]) chownSync(join(dir, file), NOBODY, NOBODY);
  return dir;
}

beforeAll(async () => {
  if (!isRoot) return;
  work = tempDir("nonroot");
  chmodSync(work, 0o755);
  good = join(work, "good");
  mkdirSync(good, { mode: 0o700 });
  chownSync(good, NOBODY, NOBODY);
  expect(asNobody(["migrate", "--data-dir", good]).exitCode).toBe(0);
  // Served once, so secrets.key exists and the database records its check value.
  const server = await spawnServer([...AS_NOBODY_SOURCE, "serve", "--port", "0", "--data-dir", good], { cwd: "/" });
  expect((await server.stopWith("SIGTERM")).exitCode).toBe(0);
});
afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe.skipIf(!isRoot)("as an unprivileged user, database files another user owns but the user may open", () => {
  // A restore copied by root (a backup copied off the VM and back arrives 0644), one installed
  // 0660 root:crm, or a WAL a root process left: the user may read and write them, not chmod them.
  for (const [label, part, damage] of [
    ["database root:root 0644", "crm.sqlite", (file: string) => (chownSync(file, 0, 0), chmodSync(file, 0o644))],
    ["database root:nobody 0660", "crm.sqlite", (file: string) => (chownSync(file, 0, NOBODY), chmodSync(file, 0o660))],
    ["a crm.sqlite-wal root left, 0644", "crm.sqlite-wal", (file: string) => (writeFileSync(file, ""), chmodSync(file, 0o644))],
  ] as const) {
    test(`${label}: serve, migrate and token list stop with one line naming the owner and the chown`, async () => {
      const dir = copyOfGood(label.replace(/\W+/g, "-"));
      const file = join(dir, part);
      damage(file);
      const line = `crm: cannot open the database ${join(dir, "crm.sqlite")} (--data-dir, CRM_DATA_DIR): ${file} is owned by root, not by nobody (the user this command runs as): chown nobody ${file}\n`;
      const answers = [await untilExit(["serve", "--port", "0", "--data-dir", dir]), asNobody(["migrate", "--data-dir", dir]), asNobody(["token", "list", "--data-dir", dir])];
      expect(answers).toEqual([
        { exitCode: 2, stderr: line },
        { exitCode: 2, stderr: line },
        { exitCode: 2, stderr: line },
      ]);
    }, 60_000);
  }

  test("crm.lock root:root 0644 (a command run as root made it): serve stops with one line naming the owner and the chown", async () => {
    const dir = copyOfGood("lock-root-0644");
    const lock = join(dir, "crm.lock");
    chownSync(lock, 0, 0);
    chmodSync(lock, 0o644);
    expect(await untilExit(["serve", "--port", "0", "--data-dir", dir])).toEqual({
      exitCode: 2,
      stderr: `crm: cannot open the lock file ${lock} (--data-dir, CRM_DATA_DIR): ${lock} is owned by root, not by nobody (the user this command runs as): chown nobody ${lock}\n`,
    });
  }, 60_000);

  test("backup only reads: a database the user may read but not chmod (0640 root:nobody) is backed up, its mode left alone", () => {
    const dir = copyOfGood("backup-readable");
    const database = join(dir, "crm.sqlite");
    chownSync(database, 0, NOBODY);
    chmodSync(database, 0o640);
    const copy = join(dir, "copy.sqlite");
    const backup = asNobody(["backup", copy, "--data-dir", dir]);
    expect(backup).toEqual({ exitCode: 0, stderr: "" });
    const { uid, mode } = statSync(database);
    expect({ uid, mode: mode & 0o777, copy: statSync(copy).uid }).toEqual({ uid: 0, mode: 0o640, copy: NOBODY });
  }, 60_000);
});

describe.skipIf(!isRoot)("as an unprivileged user, files and folders root owns: the line says whose they are and the fix", () => {
  const runsAs = "not by nobody (the user this command runs as)";

  test("database root:root 0600 (a plain cp of a backup as root): token list and serve name the owner and the chown, not SQLite's 'unable to open database file'", async () => {
    const dir = copyOfGood("db-root-0600");
    const database = join(dir, "crm.sqlite");
    chownSync(database, 0, 0);
    const line = `crm: cannot open the database ${database} (--data-dir, CRM_DATA_DIR): ${database} is owned by root, ${runsAs}: chown nobody ${database}\n`;
    expect([asNobody(["token", "list", "--data-dir", dir]), await untilExit(["serve", "--port", "0", "--data-dir", dir])]).toEqual([
      { exitCode: 2, stderr: line },
      { exitCode: 2, stderr: line },
    ]);
  }, 60_000);

  for (const [name, refusal] of [
    ["crm.sqlite-wal", (file: string) => `cannot open the database ${join(dirname(file), "crm.sqlite")} (--data-dir, CRM_DATA_DIR)`],
    ["crm.lock", (file: string) => `cannot open the lock file ${file} (--data-dir, CRM_DATA_DIR)`],
    ["secrets.key", (file: string) => `secrets key file ${file} cannot be read`],
  ] as const) {
    test(`${name} root:root 0600: serve names the owner and the chown`, async () => {
      const file = join(copyOfGood(`${name}-root-0600`), name);
      if (name === "crm.sqlite-wal") writeFileSync(file, "", { mode: 0o600 });
      chownSync(file, 0, 0);
      expect(await untilExit(["serve", "--port", "0", "--data-dir", dirname(file)])).toEqual({ exitCode: 2, stderr: `crm: ${refusal(file)}: ${file} is owned by root, ${runsAs}: chown nobody ${file}\n` });
    }, 60_000);
  }

  test("a database URL file root:root 0600 (installed without -o crm): serve and a command name the owner and the chown, as for the secrets key, not 'run the command as the user the service runs as', which serve already is", async () => {
    const file = join(work, "database-url");
    writeFileSync(file, "postgres://crm:pw@127.0.0.1:1/crm\n", { mode: 0o600 });
    chownSync(file, 0, 0);
    const line = `crm: database URL file ${file} cannot be read: ${file} is owned by root, ${runsAs}: chown nobody ${file}\n`;
    expect([asNobody(["token", "list", "--database-url-file", file]), await untilExit(["serve", "--port", "0", "--database-url-file", file])]).toEqual([
      { exitCode: 2, stderr: line },
      { exitCode: 2, stderr: line },
    ]);
  }, 60_000);

  test("a data directory root:root 0700: token list and serve name its owner and the chown -R", async () => {
    const dir = copyOfGood("dir-root-0700");
    chownSync(dir, 0, 0);
    const owned = `${dir} is owned by root, ${runsAs}: chown -R nobody ${dir}`;
    expect([asNobody(["token", "list", "--data-dir", dir]), await untilExit(["serve", "--port", "0", "--data-dir", dir])]).toEqual([
      { exitCode: 2, stderr: `crm: cannot open the database ${join(dir, "crm.sqlite")} (--data-dir, CRM_DATA_DIR): ${owned}\n` },
      { exitCode: 2, stderr: `crm: invalid data directory ${JSON.stringify(dir)} (--data-dir, CRM_DATA_DIR): ${owned}\n` },
    ]);
  }, 60_000);

  test("a data directory reached through a symlink, root:root 0700: the chown -R names the directory the link leads to, and root running it lets the next start work", async () => {
    // GNU chown -R does not follow a symlink named on its command line: given the link (a data
    // directory moved to a bigger disk, /var/lib/crm -> /srv/disk/crm) it changed the link alone.
    const real = copyOfGood("dir-linked-root-0700");
    chownSync(real, 0, 0);
    const dir = join(work, "dir-link");
    symlinkSync(real, dir);
    const refused = asNobody(["migrate", "--data-dir", dir]);
    const advised = /: (chown -R \S+ \S+)\n$/.exec(refused.stderr)?.[1] ?? "";
    const chown = runCli(["sh", "-c", advised], { cwd: "/" });
    expect({ refused, chown: chown.exitCode, again: asNobody(["migrate", "--data-dir", dir]) }).toEqual({
      refused: { exitCode: 2, stderr: `crm: invalid data directory ${JSON.stringify(dir)} (--data-dir, CRM_DATA_DIR): ${dir} (that is ${real}) is owned by root, ${runsAs}: chown -R nobody ${real}\n` },
      chown: 0,
      again: { exitCode: 0, stderr: "" },
    });
  }, 60_000);

  test("a data directory inside a folder the user may not enter: serve and migrate name that folder, not a mkdir of a directory that exists", async () => {
    const shut = join(work, "shut");
    const dir = join(shut, "inner", "data");
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    chownSync(dir, NOBODY, NOBODY);
    const line = `crm: invalid data directory ${JSON.stringify(dir)} (--data-dir, CRM_DATA_DIR): nobody may not enter ${shut} (owned by root): choose a path outside it\n`;
    expect([asNobody(["migrate", "--data-dir", dir]), await untilExit(["serve", "--port", "0", "--data-dir", dir])]).toEqual([
      { exitCode: 2, stderr: line },
      { exitCode: 2, stderr: line },
    ]);
   }, 60_000);

  test("a migrate run as root on the service user's new data directory gives it the files it creates (crm.lock, crm.sqlite): the next start as that user works", async () => {
    const dir = join(work, "migrated-by-root");
    mkdirSync(dir, { mode: 0o700 });
    chownSync(dir, NOBODY, NOBODY);
    expect(runCli([...SOURCE, "migrate", "--data-dir", dir], { cwd: "/" }).exitCode).toBe(0);
    const owners = Object.fromEntries(readdirSync(dir).map((name) => [name, statSync(join(dir, name)).uid]));
    expect(owners).toEqual({ "crm.lock": NOBODY, "crm.sqlite": NOBODY });
    const server = await spawnServer([...AS_NOBODY_SOURCE, "serve", "--port", "0", "--data-dir", dir], { cwd: "/" });
    expect((await server.stopWith("SIGTERM")).exitCode).toBe(0);
  }, 60_000);
});

describe.skipIf(!isRoot)("as an unprivileged user, the importer's paths behind a folder the user may not enter", () => {
  // `sudo -u crm crm import contacts ./people.csv` typed in root's home, or --invalid-file there.
  let shut: string;
  let csv: string;
  beforeAll(() => {
    if (!isRoot) return;
    shut = join(work, "root-only");
    mkdirSync(shut, { mode: 0o700 });
    csv = join(work, "people.csv");
    writeFileSync(csv, "Email,First name\na@example.com,A\n", { mode: 0o644 });
    writeFileSync(join(shut, "people.csv"), "Email,First name\na@example.com,A\n");
  });

  test("the input file: one line saying it cannot be read, no stack trace", () => {
    const file = join(shut, "people.csv");
    expect(asNobody(["import", "contacts", file, "--dry-run"])).toEqual({ exitCode: 2, stderr: `crm: import: cannot read ${file}: permission denied (run the import as a user who may read it)\n` });
  });

  test("--invalid-file: one line refusing it before anything is read or sent, no stack trace", () => {
    const invalid = join(shut, "invalid.csv");
    expect(asNobody(["import", "contacts", csv, "--dry-run", "--invalid-file", invalid])).toEqual({
      exitCode: 2,
      stderr: `crm: import: the invalid rows would go to ${invalid}, which cannot be written (in a folder this user may not enter); choose another file with --invalid-file\n`,
    });
  });
});

describe.skipIf(!isRoot)("as an unprivileged user, a secrets key other users may read is served with a warning, as secret stores mount keys so on purpose", () => {
  test("the data directory's secrets.key made 0644 (`head -c 32 /dev/urandom | base64 > FILE` under umask 022): serve starts and warns once, giving the chmod", async () => {
    const dir = copyOfGood("key-0644");
    const key = join(dir, "secrets.key");
    chmodSync(key, 0o644);
    const server = await spawnServer([...AS_NOBODY_SOURCE, "serve", "--port", "0", "--data-dir", dir], { cwd: "/" });
    expect((await server.stopWith("SIGTERM")).exitCode).toBe(0);
    expect(server.logLines().filter((line) => line.level === "warn").map(({ msg, path }) => ({ msg, path }))).toEqual([
      {
        msg: `the secrets key file is open to other users (mode 0644): whoever may read it and gets a backup can read every signing secret; unless a secret store mounts it so, make it the owner's alone: chmod 600 ${key}; if someone may have read it, replace the key: crm secrets-key rotate --new-key-file NEW`,
        path: key,
      },
    ]);
  }, 60_000);

  test("--secrets-key-file 0440 root:nobody behind a symlink (a Kubernetes Secret with fsGroup, read-only): commands read it, and the warning, theirs and serve's, gives the key to the user first", async () => {
    const dir = copyOfGood("key-file-0440");
    const key = join(work, "mounted.key");
    cpSync(join(dir, "secrets.key"), key);
    chownSync(key, 0, NOBODY);
    chmodSync(key, 0o440);
    const link = join(work, "mounted-link.key");
    symlinkSync(key, link);
    const warning = `the secrets key file is open to other users (mode 0440): whoever may read it and gets a backup can read every signing secret; unless a secret store mounts it so, make it the owner's alone: chown nobody ${link} && chmod 600 ${link}; if someone may have read it, replace the key: crm secrets-key rotate --new-key-file NEW`;
    expect(asNobody(["token", "list", "--data-dir", dir, "--secrets-key-file", link])).toEqual({ exitCode: 0, stderr: `crm: ${warning}\n` });
    const server = await spawnServer([...AS_NOBODY_SOURCE, "serve", "--port", "0", "--data-dir", dir, "--secrets-key-file", link], { cwd: "/" });
    expect((await server.stopWith("SIGTERM")).exitCode).toBe(0);
    expect(server.logLines().filter((line) => line.level === "warn").map(({ msg }) => msg)).toEqual([warning]);
  }, 60_000);
});
