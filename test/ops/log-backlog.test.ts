import { expect, test } from "bun:test";
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, SOURCE, tempDir } from "./support.ts";

// A server whose stdout is not read (journald or a log shipper stalled) under a flood of requests:
// Bun keeps every line handed to stdout in memory until its reader takes it.

const LOGGER = join(import.meta.dir, "../../server/shared/log.ts");

test("log lines beyond 8 MiB that stdout's reader has not taken are dropped, and the next lines say how many", async () => {
  const dir = tempDir("log-backlog");
  const script = join(dir, "flood.ts");
  // 200,000 lines of about 250 bytes (50 MB) while nobody reads; then, once the reader reads, one more line.
  writeFileSync(
    script,
    `import { createLogger } from ${JSON.stringify(LOGGER)};
const log = createLogger("info");
const filler = "x".repeat(200);
for (let i = 0; i < 200; i++) {
  for (let j = 0; j < 1000; j++) log.info("flood", { i, j, filler });
  await Bun.sleep(1);
}
console.error("flooded");
for await (const _ of console) break;
await Bun.sleep(1000);
log.info("after the flood");
await Bun.sleep(50);
`,
  );
  try {
    const child = spawn(process.execPath, [script], { stdio: ["pipe", "pipe", "pipe"] });
    child.stdout.pause();
    let stderr = "";
    await new Promise<void>((resolve, reject) => {
      child.stderr.on("data", (chunk) => (stderr += chunk) && stderr.includes("flooded") && resolve());
      child.on("close", () => reject(new Error(`the flood ended early: ${stderr}`)));
    });
    const chunks: Buffer[] = [];
    child.stdout.on("data", (chunk: Buffer) => chunks.push(chunk));
    child.stdout.resume();
    child.stdin.write("read now\n");
    await new Promise((resolve) => child.on("close", resolve));
    const lines = Buffer.concat(chunks).toString().trimEnd().split("\n").map((line) => JSON.parse(line));
    const floodLines = lines.filter((line) => line.msg === "flood").length;
    const dropped = lines.filter((line) => line.level === "warn");
    expect({ written: floodLines < 40_000, dropped: dropped.map((line) => ({ msg: line.msg, lines: line.dropped_lines })), last: lines.at(-1).msg }).toEqual({
      written: true,
      dropped: [{ msg: "log lines dropped: stdout was not read as fast as they came", lines: 200_000 - floodLines }],
      last: "after the flood",
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 60_000);

test("serve whose stdout's reader goes away (crm serve | head -1, a log shipper restarting) keeps serving: log lines are dropped and counted, said once on stderr, and SIGTERM still stops it gracefully", async () => {
  const dir = tempDir("stdout-gone");
  const child = spawn(SOURCE[0]!, [...SOURCE.slice(1), "serve", "--port", "0", "--data-dir", dir, "--log-level", "debug"], { cwd: ROOT, env: { PATH: process.env.PATH ?? "" }, stdio: ["ignore", "pipe", "pipe"] });
  const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
  try {
    let stderr = "";
    child.stderr.on("data", (chunk) => (stderr += chunk));
    let stdout = "";
    const url = await new Promise<string>((resolve, reject) => {
      child.stdout.on("data", (chunk) => {
        stdout += chunk;
        const found = /listening on (http:\/\/\S+)\n/.exec(stdout)?.[1];
        if (found) resolve(found);
      });
      void exited.then((code) => reject(new Error(`serve exited with ${code} before listening: ${stderr}`)));
    });
    // The reader is gone: each request's log line (a probe's too, at debug) is written to a pipe nobody reads.
    child.stdout.destroy();
    const deadline = Date.now() + 30_000;
    const statuses: number[] = [];
    while (!stderr.includes("log lines are dropped") && Date.now() < deadline) statuses.push((await fetch(`${url}/healthz`)).status);
    for (let i = 0; i < 5; i++) statuses.push((await fetch(`${url}/healthz`)).status);
    expect(new Set(statuses)).toEqual(new Set([200]));
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
    expect(stderr).toMatch(/^crm: standard output failed \(EPIPE: broken pipe, write\); the service goes on serving, and its log lines are dropped from now on\ncrm: stopped with log lines dropped since standard output failed: [1-9]\d*\n$/);
  } finally {
    // A failed expectation leaves no server behind.
    if (child.exitCode === null) child.kill("SIGKILL");
    await exited;
    rmSync(dir, { recursive: true, force: true });
  }
}, 60_000);

// A disk of its own for stdout's file: a 1 MiB tmpfs mounted in a mount namespace of the test's script, gone with it. Mounting needs root.
const canMount = process.getuid?.() === 0 && Bun.which("unshare") !== null && Bun.which("mount") !== null;

test.skipIf(!canMount)("stdout redirected to a file on a disk that fills: lines are dropped and counted while it is full, and written again once room is made, the first saying how many were lost", () => {
  const dir = tempDir("log-disk-full");
  const disk = join(dir, "disk");
  mkdirSync(disk);
  const script = join(dir, "fill.ts");
  // Lines of 10 KB, each flushed alone: none fits what the full disk has left.
  writeFileSync(
    script,
    `import { rmSync } from "node:fs";
import { createLogger, flushLogs } from ${JSON.stringify(LOGGER)};
const log = createLogger("info");
log.info("before");
flushLogs();
await Bun.sleep(20);
Bun.spawnSync(["sh", "-c", 'head -c 2000000 /dev/zero > "$D/filler"'], { env: { D: process.env.D } });
const filler = "x".repeat(10_000);
for (let i = 0; i < 50; i++) {
  log.info("while full", { i, filler });
  flushLogs();
  await Bun.sleep(1);
}
rmSync(process.env.D + "/filler");
for (let i = 0; i < 3; i++) {
  log.info("after", { i });
  flushLogs();
  await Bun.sleep(20);
}
`,
  );
  try {
    const run = Bun.spawnSync(["unshare", "--mount", "--propagation", "private", "sh", "-c", 'mount -t tmpfs -o size=1m tmpfs "$D" && "$0" "$1" >"$D/out.log"; cat "$D/out.log"', process.execPath, script], {
      env: { PATH: process.env.PATH ?? "", D: disk },
    });
    const [stdout, stderr] = [run.stdout.toString(), run.stderr.toString()];
    // A failed write may leave part of its line; the next write ends it with a newline.
    const parsed = stdout.split("\n").filter((line) => line.startsWith("{") && line.endsWith("}")).map((line) => JSON.parse(line));
    const written = parsed.filter((line) => line.msg === "while full").length;
    expect({
      msgs: parsed.filter((line) => line.msg !== "while full").map((line) => ({ msg: line.msg, dropped: line.dropped_lines, error: line.error })),
      counted: parsed.find((line) => line.dropped_lines !== undefined)?.dropped_lines + written,
      stderr,
    }).toEqual({
      msgs: [
        { msg: "before", dropped: undefined, error: undefined },
        { msg: "log lines dropped: writing stdout failed", dropped: 50 - written, error: "ENOSPC: no space left on device, write" },
        { msg: "after", dropped: undefined, error: undefined },
        { msg: "after", dropped: undefined, error: undefined },
        { msg: "after", dropped: undefined, error: undefined },
      ],
      counted: 50,
      stderr: "crm: standard output failed (ENOSPC: no space left on device, write); its log lines are dropped and counted until a write succeeds\n",
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 60_000);
