import { describe, expect, test } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
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
    expect(results).toEqual({ migrate: { exit: 0, stderr: "" }, "token-create": full, "user-create": full, "first-migrate": full, "first-serve": full });
  }, 120_000);
});
