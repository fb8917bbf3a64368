import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { partialName, removeStalePartials } from "../../server/shared/files.ts";
import { api, createToken, runCli, SOURCE, spawnServer, tempDir } from "./support.ts";
import { SHUT_OUT, underUmask } from "../support/permissions.ts";

const WRITERS = 4;
const PER_WRITER = 250;

const mode = (path: string) => (statSync(path).mode & 0o777).toString(8);

interface Written {
  writer: number;
  seq: number;
}

/** writtenIn reads back which (writer, seq) contacts a database holds. */
function writtenIn(db: Database): Written[] {
  return db
    .query<{ email: string }, []>("SELECT email FROM contacts")
    .all()
    .map(({ email }) => {
      const [, writer, seq] = /^w(\d+)-(\d+)@example\.com$/.exec(email)!;
      return { writer: Number(writer), seq: Number(seq) };
    });
}

describe("backup: a consistent copy of the live database", () => {
  test("taken while 1,000 contacts are being created: it opens, passes integrity_check, holds a prefix of each writer's writes, and restores", async () => {
    const dataDir = tempDir("backup-live");
    const token = createToken(SOURCE, dataDir);
    // The writers create as fast as they can: above the default per-token write rate (README, Limits).
    const unthrottled = ["--rate-write-per-second", "1000000", "--rate-write-burst", "1000000"];
    const server = await spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--log-level", "warn", ...unthrottled]);
    const file = join(tempDir("backup-out"), "copy.sqlite");
    const acknowledged: Written[] = [];
    let backupStarted: Promise<{ exitCode: number; stdout: string; stderr: string }> | undefined;
    let acknowledgedAtStart: Written[] = [];
    try {
      // Each writer creates its contacts one after another, so what a writer had acknowledged
      // is exactly a prefix of its sequence; the backup starts once a fifth of the writes are in.
      const writer = async (w: number) => {
        for (let seq = 0; seq < PER_WRITER; seq++) {
          const res = await api(server.url, token, "POST", "/public/v1/contacts", { first_name: `Writer ${w}`, email: `w${w}-${seq}@example.com` });
          expect(res.status).toBe(201);
          acknowledged.push({ writer: w, seq });
          if (!backupStarted && acknowledged.length >= (WRITERS * PER_WRITER) / 5) {
            acknowledgedAtStart = [...acknowledged];
            const proc = Bun.spawn([...SOURCE, "backup", file, "--data-dir", dataDir], { stdout: "pipe", stderr: "pipe" });
            backupStarted = proc.exited.then(async (exitCode) => ({ exitCode, stdout: await new Response(proc.stdout).text(), stderr: await new Response(proc.stderr).text() }));
          }
        }
      };
      await Promise.all(Array.from({ length: WRITERS }, (_, w) => writer(w)));
      const backup = await backupStarted!;
      expect(backup.stderr).toBe("");
      expect(backup.exitCode).toBe(0);
      expect(backup.stdout).toMatch(/^backed up .*crm\.sqlite to .*copy\.sqlite \(\d+ bytes, integrity ok\)\nnote: the secrets key .*secrets\.key is not in the backup; keep a copy of it apart from the backup: without it the webhook signing secrets in the backup cannot be read\n$/);
    } finally {
      await server.stopWith("SIGTERM");
    }

    expect(mode(file)).toBe("600");
    const copy = new Database(file, { readonly: true });
    let inCopy: Written[];
    try {
      expect(copy.query("PRAGMA integrity_check").all()).toEqual([{ integrity_check: "ok" }]);
      inCopy = writtenIn(copy);
      // Trigger-maintained counts agree with the rows: the copy is one transaction's view.
      expect(copy.query("SELECT n FROM row_counts WHERE table_name = 'contacts'").get()).toEqual({ n: inCopy.length });
    } finally {
      copy.close();
    }
    for (let w = 0; w < WRITERS; w++) {
      const seqs = inCopy.filter((x) => x.writer === w).map((x) => x.seq).sort((a, b) => a - b);
      expect(seqs).toEqual(seqs.map((_, i) => i));
    }
    const key = (x: Written) => `${x.writer}/${x.seq}`;
    const copied = new Set(inCopy.map(key));
    expect(acknowledgedAtStart.filter((x) => !copied.has(key(x)))).toEqual([]);
    expect(acknowledgedAtStart.length).toBeLessThan(WRITERS * PER_WRITER);

    // Restore as the README says: stop, replace crm.sqlite, remove -wal and -shm, start.
    const db = join(dataDir, "crm.sqlite");
    copyFileSync(file, db);
    rmSync(`${db}-wal`, { force: true });
    rmSync(`${db}-shm`, { force: true });
    const restored = await spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--log-level", "warn"]);
    try {
      const list = await api(restored.url, token, "GET", "/public/v1/contacts?per_page=1");
      expect(list.status).toBe(200);
      expect(list.body.meta.total).toBe(inCopy.length);
    } finally {
      expect((await restored.stopWith("SIGTERM")).exitCode).toBe(0);
    }
  }, 60_000);
});

describe("backup: killed half-way", () => {
  test("a backup killed mid-copy leaves no file under the backup's name (only a .partial-NAMESPACE-PID one), and the same command then succeeds and removes that half copy", async () => {
    const dataDir = tempDir("backup-killed");
    createToken(SOURCE, dataDir);
    // About 100 MB to copy, so the kill lands while the copy is being written.
    const db = new Database(join(dataDir, "crm.sqlite"));
    db.run("CREATE TABLE padding (bytes BLOB)");
    for (let i = 0; i < 100; i++) db.run("INSERT INTO padding VALUES (randomblob(1000000))");
    db.close();
    const out = tempDir("backup-killed-out");
    const file = join(out, "copy.sqlite");
    const backup = Bun.spawn([...SOURCE, "backup", file, "--data-dir", dataDir], { stdout: "ignore", stderr: "ignore" });
    const partial = partialName(file, backup.pid);
    while (!(existsSync(partial) && statSync(partial).size > 0)) {
      if (backup.exitCode !== null) throw new Error("the backup ended before it could be killed");
      await Bun.sleep(5);
    }
    backup.kill("SIGKILL");
    await backup.exited;
    expect(existsSync(file)).toBe(false);
    const again = runCli([...SOURCE, "backup", file, "--data-dir", dataDir]);
    expect(again.exitCode).toBe(0);
    // The killed run's half copy (customers' rows) goes with the next backup to that name.
    expect(readdirSync(out)).toEqual(["copy.sqlite"]);
    const copy = new Database(file, { readonly: true });
    try {
      expect(copy.query("PRAGMA integrity_check").get()).toEqual({ integrity_check: "ok" });
      expect(copy.query("SELECT count(*) AS n FROM padding").get()).toEqual({ n: 100 });
    } finally {
      copy.close();
    }
    expect(mode(file)).toBe("600");
  }, 60_000);
});

describe("backup: partial files of other hosts and containers", () => {
  test("a partial file is judged by its process id only when written in this boot and PID namespace: another container's or host's on a shared volume, or one named without its namespace (an older crm), is removed only once a day old", () => {
    const out = tempDir("backup-partials");
    const file = join(out, "copy.sqlite");
    const gone = Bun.spawnSync(["true"]).pid;
    const running = Bun.spawn(["sleep", "30"]);
    const ours = (pid: number) => basename(partialName(file, pid));
    // Another container's namespace: its writer's PID means nothing here (the same number may be running or not).
    const elsewhere = ours(gone).replace(/\.partial-[0-9a-f]+-/, ".partial-0123456789ab-");
    expect(elsewhere).not.toBe(ours(gone));
    const aged = (name: string) => {
      writeFileSync(join(out, name), "half a copy");
      const twoDaysAgo = new Date(Date.now() - 2 * 24 * 3600_000);
      utimesSync(join(out, name), twoDaysAgo, twoDaysAgo);
    };
    try {
      for (const name of [ours(gone), `${ours(gone)}-journal`, ours(running.pid), elsewhere, `${elsewhere}-journal`, `copy.sqlite.partial-${gone}`]) writeFileSync(join(out, name), "half a copy");
      aged(`copy.sqlite.partial-0123456789ab-${running.pid}`);
      aged(`copy.sqlite.partial-${running.pid}`);
      removeStalePartials(file);
      expect(readdirSync(out).sort()).toEqual([ours(running.pid), elsewhere, `${elsewhere}-journal`, `copy.sqlite.partial-${gone}`].sort());
    } finally {
      running.kill();
      rmSync(out, { recursive: true, force: true });
    }
  });
});

describe("backup: partial files of other names", () => {
  test("a backup removes from its directory the partial copies (and journals) that killed backups to other names left, judged as its own name's are, names it removes, and leaves every other file", () => {
    const dataDir = tempDir("backup-others");
    runCli([...SOURCE, "migrate", "--data-dir", dataDir]);
    const out = tempDir("backup-others-out");
    const gone = Bun.spawnSync(["true"]).pid;
    const running = Bun.spawn(["sleep", "30"]);
    // Nightly backups named by date, as the README's cron line names them: no later backup uses a killed one's name again.
    const killed = (day: string, pid: number) => basename(partialName(join(out, `crm-${day}.sqlite`), pid));
    const elsewhere = killed("2026-11-24", gone).replace(/\.partial-[0-9a-f]+-/, ".partial-0123456789ab-");
    const kept = [killed("2026-11-25", running.pid), elsewhere, "crm-2026-11-23.sqlite", "notes.partial-", "notes.partial-12x", `notes.partial-${gone}.txt`, "old-crm.sqlite.partial-7"];
    const stale = [killed("2026-11-26", gone), `${killed("2026-11-26", gone)}-journal`, killed("2026-11-27", gone), "crm-2026-11-20.sqlite.partial-7"];
    try {
      for (const name of [...kept, ...stale]) writeFileSync(join(out, name), "half a copy");
      const twoDaysAgo = new Date(Date.now() - 2 * 24 * 3600_000);
      utimesSync(join(out, "crm-2026-11-20.sqlite.partial-7"), twoDaysAgo, twoDaysAgo);
      // A directory is never removed, whatever its name.
      mkdirSync(join(out, killed("2026-11-22", gone)));
      const file = join(out, "crm-2026-11-28.sqlite");
      const result = runCli([...SOURCE, "backup", file, "--data-dir", dataDir]);
      expect([result.exitCode, result.stderr]).toEqual([0, ""]);
      expect(result.stdout.split("\n").filter((line) => line.startsWith("removed ")).sort()).toEqual(stale.map((name) => `removed ${join(out, name)}, a partial file left by a crm killed half-way`).sort());
      expect(readdirSync(out).sort()).toEqual([...kept, killed("2026-11-22", gone), "crm-2026-11-28.sqlite"].sort());
    } finally {
      running.kill();
      rmSync(out, { recursive: true, force: true });
    }
  });
});

describe("backup: the copy's mode", () => {
  test("the copy is 0600 under a umask that would take its owner's write away (0277), and the owner, with no power over modes, still writes it", () => {
    const dataDir = tempDir("backup-umask");
    runCli([...SOURCE, "migrate", "--data-dir", dataDir]);
    const file = join(tempDir("backup-umask-out"), "copy.sqlite");
    const result = runCli([...SHUT_OUT, ...underUmask("0277"), ...SOURCE, "backup", file, "--data-dir", dataDir]);
    expect([result.exitCode, result.stderr, mode(file)]).toEqual([0, "", "600"]);
  });
});

describe("backup: refusals", () => {
  test("an existing file is never overwritten", () => {
    const dataDir = tempDir("backup-exists");
    runCli([...SOURCE, "migrate", "--data-dir", dataDir]);
    const file = join(tempDir("backup-exists-out"), "keep.sqlite");
    writeFileSync(file, "precious");
    const result = runCli([...SOURCE, "backup", file, "--data-dir", dataDir]);
    expect(result).toEqual({ exitCode: 1, stdout: "", stderr: `crm: ${file} already exists; backup never overwrites a file\n` });
    expect(readFileSync(file, "utf8")).toBe("precious");
  });

  test("a data directory without a database, or none at all, creates nothing", () => {
    const empty = tempDir("backup-empty");
    const file = join(tempDir("backup-empty-out"), "copy.sqlite");
    const refusal = (dir: string) => `crm: no database at ${join(dir, "crm.sqlite")}; pass the running server's data directory with --data-dir DIR (or CRM_DATA_DIR, or data_dir in the --config file), or create one with: npx bun server/main.ts migrate --data-dir DIR; on PostgreSQL, give the database's URL (CRM_DATABASE_URL, or database_url or database_url_file in the --config file)\n`;
    expect(runCli([...SOURCE, "backup", file, "--data-dir", empty])).toEqual({ exitCode: 2, stdout: "", stderr: refusal(empty) });
    expect(runCli([...SOURCE, "backup", file, "--data-dir", join(empty, "missing")])).toEqual({ exitCode: 2, stdout: "", stderr: refusal(join(empty, "missing")) });
    expect(existsSync(join(empty, "missing"))).toBe(false);
    expect(existsSync(file)).toBe(false);
    expect(existsSync(join(empty, "crm.sqlite"))).toBe(false);
  });

  test("a data directory without a secrets key (never served: migrate and commands make none while no secret is sealed) is backed up with a note that says so, not that a missing file be kept", () => {
    const dataDir = tempDir("backup-nokey");
    const file = join(tempDir("backup-nokey-out"), "copy.sqlite");
    expect(runCli([...SOURCE, "migrate", "--data-dir", dataDir]).exitCode).toBe(0);
    expect(existsSync(join(dataDir, "secrets.key"))).toBe(false);
    const result = runCli([...SOURCE, "backup", file, "--data-dir", dataDir]);
    expect(result).toEqual({
      exitCode: 0,
      stdout: expect.stringMatching(/^backed up \S+crm\.sqlite to \S+copy\.sqlite \(\d+ bytes, integrity ok\)\n/),
      stderr: "",
    });
    expect(result.stdout.split("\n").slice(1)).toEqual([
      `note: there is no secrets key at ${join(dataDir, "secrets.key")} yet: the first start makes it (a database served before has lost it: see secrets-key reset); keep a copy of it apart from the backups once it is there`,
      "",
    ]);
  });

  test("a file in a directory that does not exist is one clear line", () => {
    const dataDir = tempDir("backup-nodir");
    runCli([...SOURCE, "migrate", "--data-dir", dataDir]);
    const result = runCli([...SOURCE, "backup", "/nonexistent/dir/copy.sqlite", "--data-dir", dataDir]);
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toStartWith("crm: cannot create /nonexistent/dir/copy.sqlite: ");
    expect(result.stderr.trimEnd().split("\n")).toHaveLength(1);
  });

  test("a full file system under the backup is named, with the space the copy needs, and the live database said to be untouched; no file is left", () => {
    const dataDir = tempDir("backup-full");
    runCli([...SOURCE, "migrate", "--data-dir", dataDir]);
    const out = tempDir("backup-full-out");
    const file = join(out, "copy.sqlite");
    // The partial copy is written through a link to /dev/full, which takes no byte: the backup's
    // process id is the shell's, which exec hands on, so its partial name is known beforehand.
    const partial = (pid: string) => partialName(file, 0).replace(/-0$/, () => `-${pid}`);
    const result = runCli(["bash", "-c", `ln -s /dev/full "${partial("$$")}" && exec "$@"`, "bash", ...SOURCE, "backup", file, "--data-dir", dataDir]);
    expect(result).toEqual({
      exitCode: 1,
      stdout: "",
      stderr: `crm: backup failed: no space left on the file system of ${file} (the copy needs up to ${statSync(join(dataDir, "crm.sqlite")).size} bytes, the database's size); the live database ${join(dataDir, "crm.sqlite")} is untouched\n`,
    });
    expect(readdirSync(out)).toEqual([]);
    rmSync(out, { recursive: true, force: true });
  });

  test("backup without a file name is a usage error", () => {
    expect(runCli([...SOURCE, "backup"])).toEqual({ exitCode: 2, stdout: "", stderr: "crm: usage: backup FILE [--data-dir DIR] (FILE must not exist yet)\n" });
  });
});

describe("data directory permissions", () => {
  test("the directory is 0700 and the database, WAL and shared-memory files 0600 while serving, under a umask of 022", async () => {
    const dataDir = join(tempDir("perms"), "data");
    const token = createToken(SOURCE, dataDir);
    const server = await spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--log-level", "warn"]);
    try {
      expect((await api(server.url, token, "POST", "/public/v1/contacts", { first_name: "Ada" })).status).toBe(201);
      const db = join(dataDir, "crm.sqlite");
      expect([mode(dataDir), mode(db), mode(`${db}-wal`), mode(`${db}-shm`)]).toEqual(["700", "600", "600", "600"]);
    } finally {
      await server.stopWith("SIGTERM");
    }
  });

  // Permissions are checked at open() only: a descriptor another user took while a file was briefly 0644 reads it for good.
  test.skipIf(!Bun.which("strace"))("under a umask of 022, every file a command creates in a data directory others may enter is created 0600, not made 0600 after", () => {
    const dir = tempDir("perms-created");
    const dataDir = join(dir, "data");
    mkdirSync(dataDir, { mode: 0o755 });
    const trace = join(dir, "trace");
    const commands = [["migrate"], ["token", "create", "--name", "ci"], ["operator", "unlock", "--email", "nobody@example.com"], ["backup", join(dataDir, "copy.sqlite")]];
    for (const command of commands) {
      runCli(["strace", "-f", "-qq", "-e", "trace=openat,open,creat", "-o", `${trace}-${command[0]}`, ...underUmask("0022"), ...SOURCE, ...command, "--data-dir", dataDir]);
    }
    // The first open of each name in the fresh directory is the one that created it (a partial's, published by link, stands for its file's).
    const created: Record<string, string> = {};
    for (const command of commands) {
      for (const line of readFileSync(`${trace}-${command[0]}`, "utf8").split("\n")) {
        const [, path = "", flags = "", mode = ""] = /"([^"]+)", (O_[A-Z_|]+)(?:, (0\d+))?\) = \d+$/.exec(line) ?? [];
        if (!path.startsWith(`${dataDir}/`)) continue;
        created[basename(path).replace(/\.partial-.*?(-journal)?$/, "$1")] ??= flags.includes("O_CREAT") ? mode : "opened, not created";
      }
    }
    const files = ["crm.sqlite", "crm.sqlite-journal", "crm.sqlite-wal", "crm.sqlite-shm", "crm.lock", "secrets.key", "copy.sqlite", "copy.sqlite-journal"];
    expect(created).toEqual(Object.fromEntries(files.map((file) => [file, "0600"])));
    expect(readdirSync(dataDir).sort()).toEqual(["copy.sqlite", "crm.lock", "crm.sqlite", "secrets.key"]);
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  test.skipIf(!Bun.which("strace"))("a database path that is a symbolic link to a file not there yet: the file is created 0600 through it, not by SQLite under the umask and made 0600 after", () => {
    const dir = tempDir("perms-link");
    const dataDir = join(dir, "data");
    mkdirSync(join(dir, "volume"), { mode: 0o755 });
    mkdirSync(dataDir, { mode: 0o700 });
    const target = join(dir, "volume", "crm.sqlite");
    symlinkSync(target, join(dataDir, "crm.sqlite"));
    const trace = join(dir, "trace");
    expect(runCli(["strace", "-f", "-qq", "-e", "trace=openat,open,creat", "-o", trace, ...underUmask("0022"), ...SOURCE, "migrate", "--data-dir", dataDir]).exitCode).toBe(0);
    // The first open of the link, or of its file (SQLite resolves the link itself), that succeeded created the file.
    const first = readFileSync(trace, "utf8")
      .split("\n")
      .map((line) => /"([^"]+)", (O_[A-Z_|]+)(?:, (0\d+))?\) = \d+$/.exec(line))
      .find((match) => match?.[1] === join(dataDir, "crm.sqlite") || match?.[1] === target);
    expect({ created: first?.[2]?.includes("O_CREAT"), mode: first?.[3], now: mode(target) }).toEqual({ created: true, mode: "0600", now: "600" });
  }, 60_000);

  test("an old crm.lock others may read (0644, from a crm before it was made 0600) is made 0600 by the next start or command, not only by one that takes the lock", () => {
    const dataDir = join(tempDir("perms-lock"), "data");
    expect(runCli([...SOURCE, "migrate", "--data-dir", dataDir]).exitCode).toBe(0);
    const lock = join(dataDir, "crm.lock");
    chmodSync(lock, 0o644);
    // With nothing to migrate, token list takes no lock.
    expect(runCli([...SOURCE, "token", "list", "--data-dir", dataDir])).toEqual({ exitCode: 0, stdout: "", stderr: "" });
    expect(mode(lock)).toBe("600");
  });

  test("under a umask that would take their owner's write away (0277), the directories made for it are 0700 and secrets.key 0600, and serve, with no power over modes, writes there", async () => {
    const dataDir = join(tempDir("perms-umask"), "parent", "data");
    const command = [...SHUT_OUT, ...underUmask("0277"), ...SOURCE];
    const token = createToken(command, dataDir);
    const server = await spawnServer([...command, "serve", "--port", "0", "--data-dir", dataDir, "--log-level", "warn"]);
    try {
      expect((await api(server.url, token, "POST", "/public/v1/contacts", { first_name: "Ada" })).status).toBe(201);
      const db = join(dataDir, "crm.sqlite");
      expect([mode(join(dataDir, "..")), mode(dataDir), mode(join(dataDir, "secrets.key")), mode(db), mode(`${db}-wal`), mode(`${db}-shm`)]).toEqual(["700", "700", "600", "600", "600", "600"]);
    } finally {
      await server.stopWith("SIGTERM");
    }
  });
});
