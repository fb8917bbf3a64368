import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { databasePath, openDatabase } from "../../server/db/database.ts";
import { MIGRATIONS, migrate } from "../../server/db/migrations.ts";
import { SOURCE, tempDir } from "./support.ts";

// A disk of its own: an 8 MiB tmpfs mounted in a mount namespace of the test's script, gone with it. Mounting needs root.
const canMount = process.getuid?.() === 0 && Bun.which("unshare") !== null && Bun.which("mount") !== null;

/**
 * SCRIPT runs in the namespace, `$D` the mount point, `$O` a folder on the real disk for the
 * output, `$@` the crm command. Each step writes its stderr to $O/NAME.err and its exit status to
 * $O/NAME.exit.
 */
const SCRIPT = String.raw`
set -u
mount -t tmpfs -o size=8m tmpfs "$D" || exit 99
step() { name=$1; shift; "$@" >"$O/$name.out" 2>"$O/$name.err"; echo $? >"$O/$name.exit"; }
fill() { avail=$(df -k "$D" | tail -1 | awk '{print $4}'); head -c $(( (avail - $1) * 1024 )) /dev/zero >"$D/filler" 2>/dev/null; }
step migrate "$@" migrate --data-dir "$D/data"
# The commands run beside the service, as the README says they do: its WAL and shared memory are open.
: >"$O/serve.out"
"$@" serve --port 0 --data-dir "$D/data" >"$O/serve.out" 2>&1 & serve=$!
i=0; until grep -q "^listening on" "$O/serve.out"; do i=$((i + 1)); [ $i -gt 600 ] && { echo "serve did not start" >&2; exit 98; }; sleep 0.1; done
fill 0
step token-create "$@" token create --name ci --data-dir "$D/data"
step user-create "$@" user create --name Ada --email ada@example.com --data-dir "$D/data"
kill -TERM $serve; wait $serve
# A first start with 40 KiB left: the database's first tables, or the secrets key, do not fit.
rm -rf "$D"/*; fill 40
step first-migrate "$@" migrate --data-dir "$D/new"
rm -rf "$D"/*; fill 40
step first-serve timeout 60 "$@" serve --port 0 --data-dir "$D/new"
`;

describe.skipIf(!canMount)("a full disk (a tmpfs of its own: run as root)", () => {
  test("a write command beside the service, and a first migrate or serve, say so in one line and exit 3 (try again later), not a stack trace and 2", () => {
    const out = tempDir("full-disk");
    const disk = join(out, "disk");
    const script = join(out, "script.sh");
    writeFileSync(script, SCRIPT);
    Bun.spawnSync(["mkdir", disk]);
    const run = Bun.spawnSync(["unshare", "--mount", "--propagation", "private", "sh", script, ...SOURCE], { env: { PATH: process.env.PATH ?? "", D: disk, O: out }, stdout: "pipe", stderr: "pipe" });
    expect({ exitCode: run.exitCode, stderr: run.stderr.toString() }).toEqual({ exitCode: 0, stderr: "" });
    const steps = ["migrate", "token-create", "user-create", "first-migrate", "first-serve"];
    const results = Object.fromEntries(steps.map((step) => [step, { exit: Number(readFileSync(join(out, `${step}.exit`), "utf8")), stderr: readFileSync(join(out, `${step}.err`), "utf8") }]));
    rmSync(out, { recursive: true, force: true });
    const full = { exit: 3, stderr: expect.stringMatching(/^crm: no room left on the disk \([^\n]+\); nothing more was done: make room, then run the command again\n$/) };
    // A first serve migrates on a connection that has the file alone, with no shared-memory file: the room that leaves may take it to the first migration.
    const fullMigrating = { exit: 3, stderr: expect.stringMatching(/^crm: no room left on the disk \([^\n]+\); (migration \d{4}_\w+\.sql was not applied \(those before it were\), and )?nothing more was done: make room, then run the command again\n$/) };
    expect(results).toEqual({ migrate: { exit: 0, stderr: "" }, "token-create": full, "user-create": full, "first-migrate": full, "first-serve": fullMigrating });
  }, 120_000);
});

/**
 * STORAGE_SCRIPT, run as SCRIPT is: an upgrade's migrations on a nearly full disk ($O/old/crm.sqlite,
 * a database a few releases old), then a file system turned read-only under a data directory,
 * first one closed cleanly, then one whose serve was killed (its WAL and shared memory left).
 */
const STORAGE_SCRIPT = String.raw`
set -u
mount -t tmpfs -o size=8m tmpfs "$D" || exit 99
step() { name=$1; shift; "$@" >"$O/$name.out" 2>"$O/$name.err"; echo $? >"$O/$name.exit"; }
fill() { avail=$(df -k "$D" | tail -1 | awk '{print $4}'); head -c $(( (avail - $1) * 1024 )) /dev/zero >"$D/filler" 2>/dev/null; }
mkdir -m 700 "$D/old" && cp "$O/old/crm.sqlite" "$D/old/"
fill 160
step upgrade "$@" migrate --data-dir "$D/old"
rm -rf "$D"/*
step migrate "$@" migrate --data-dir "$D/data"
step token-create "$@" token create --name ci --data-dir "$D/data"
mount -o remount,ro "$D" || exit 97
step ro-serve timeout 60 "$@" serve --port 0 --data-dir "$D/data"
step ro-token-list "$@" token list --data-dir "$D/data"
step ro-migrate "$@" migrate --data-dir "$D/data"
step ro-backup "$@" backup "$O/clean.sqlite" --data-dir "$D/data"
mount -o remount,rw "$D" || exit 96
: >"$O/serve.out"
"$@" serve --port 0 --data-dir "$D/data" >"$O/serve.out" 2>&1 & serve=$!
i=0; until grep -q "^listening on" "$O/serve.out"; do i=$((i + 1)); [ $i -gt 600 ] && { echo "serve did not start" >&2; exit 98; }; sleep 0.1; done
step token-create-served "$@" token create --name after --data-dir "$D/data"
kill -KILL $serve; { wait $serve; } 2>/dev/null
mount -o remount,ro "$D" || exit 95
step ro-backup-wal "$@" backup "$O/killed.sqlite" --data-dir "$D/data"
# The WAL without its shared memory (removed, or lost with a tmpfs /dev/shm copy): none can be made there either.
mount -o remount,rw "$D" || exit 94
rm "$D/data/crm.sqlite-shm"
mount -o remount,ro "$D" || exit 93
step ro-backup-no-shm "$@" backup "$O/no-shm.sqlite" --data-dir "$D/data"
`;

describe.skipIf(!canMount)("storage that takes no writes or has no room, met at the start (a tmpfs of its own: run as root)", () => {
  test("a migration the full disk refuses and a read-only file system are exit 3 in the storage's words; backup copies from the read-only file system, WAL included, with its shared memory or without", async () => {
    const out = tempDir("storage");
    const disk = join(out, "disk");
    mkdirSync(disk);
    mkdirSync(join(out, "old"));
    // A database some releases old: the upgrade has many migrations to apply.
    const old = openDatabase(databasePath(join(out, "old")));
    migrate(old.sqlite, MIGRATIONS.slice(0, 17));
    await old.close();
    const script = join(out, "script.sh");
    writeFileSync(script, STORAGE_SCRIPT);
    const run = Bun.spawnSync(["unshare", "--mount", "--propagation", "private", "sh", script, ...SOURCE], { env: { PATH: process.env.PATH ?? "", D: disk, O: out }, stdout: "pipe", stderr: "pipe" });
    expect({ exitCode: run.exitCode, stderr: run.stderr.toString() }).toEqual({ exitCode: 0, stderr: "" });
    const steps = ["upgrade", "migrate", "token-create", "ro-serve", "ro-token-list", "ro-migrate", "ro-backup", "token-create-served", "ro-backup-wal", "ro-backup-no-shm"];
    const results = Object.fromEntries(steps.map((step) => [step, { exit: Number(readFileSync(join(out, `${step}.exit`), "utf8")), stderr: readFileSync(join(out, `${step}.err`), "utf8") }]));
    const backedUp = (file: string) => {
      if (!existsSync(join(out, file))) return null;
      const copy = new Database(join(out, file), { readonly: true });
      try {
        return copy.query("SELECT name FROM api_tokens ORDER BY name").all();
      } finally {
        copy.close();
      }
    };
    const tokens = { clean: backedUp("clean.sqlite"), killed: backedUp("killed.sqlite"), noShm: backedUp("no-shm.sqlite") };
    rmSync(out, { recursive: true, force: true });
    const done = { exit: 0, stderr: "" };
    const created = { exit: 0, stderr: expect.stringMatching(/^created token tok_\w+ \(\w+\); it is shown only this once\n$/) };
    const readOnly = {
      exit: 3,
      stderr: `crm: the database's storage takes no writes (EROFS: read-only file system, access '${join(disk, "data")}'): its file or file system is read-only; nothing more was done: make it writable, then run the command again\n`,
    };
    expect({ results, tokens }).toEqual({
      results: {
        upgrade: {
          exit: 3,
          stderr: expect.stringMatching(/^crm: no room left on the disk \(database or disk is full\); migration \d{4}_\w+\.sql was not applied \(those before it were\), and nothing more was done: make room, then run the command again\n$/),
        },
        migrate: done,
        "token-create": created,
        "ro-serve": readOnly,
        "ro-token-list": readOnly,
        "ro-migrate": readOnly,
        "ro-backup": done,
        "token-create-served": created,
        "ro-backup-wal": done,
        "ro-backup-no-shm": done,
      },
      tokens: { clean: [{ name: "ci" }], killed: [{ name: "after" }, { name: "ci" }], noShm: [{ name: "after" }, { name: "ci" }] },
    });
  }, 180_000);
});
