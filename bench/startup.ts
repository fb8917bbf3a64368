// bun bench/startup.ts: the compiled binary's size, the time from exec to the first 200 from
// /readyz (first start on an empty data directory, with migrations, and restarts on an existing
// one), and its resident memory when idle. Targets: ready < 300 ms, idle RSS < 60 MB.
// Settings: BENCH_RUNS (restarts measured, default 10). Writes JSON to bench/results/.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";

const ROOT = join(import.meta.dir, "..");
const MB = 1024 * 1024;

/** buildBinary compiles the service with scripts/build.ts into a temporary folder and returns its path. */
export function buildBinary(): string {
  const dir = mkdtempSync(join(tmpdir(), "crm-bench-bin-"));
  const outfile = join(dir, "crm");
  const built = Bun.spawnSync([process.execPath, join(ROOT, "scripts", "build.ts"), `--outfile=${outfile}`], { cwd: ROOT, stdout: "pipe", stderr: "inherit" });
  if (built.exitCode !== 0) throw new Error("the build failed");
  return outfile;
}

/** rssBytes reads a process's resident set size from /proc. */
export function rssBytes(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
  if (!kb) throw new Error(`no VmRSS for process ${pid}`);
  return Number(kb) * 1024;
}

/** freePort asks the kernel for a port nobody listens on. */
export function freePort(): number {
  const probe = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = probe.port;
  probe.stop(true);
  return port;
}

/** Started is a server process that answered /readyz, and how long that took. */
export interface Started {
  proc: Subprocess;
  url: string;
  /** milliseconds from just before exec to the first 200 from /readyz */
  readyMs: number;
}

/** startUntilReady execs the binary's `serve` and polls /readyz as fast as it answers, timing the first 200. */
export async function startUntilReady(binary: string, dataDir: string, extraArgs: string[] = []): Promise<Started> {
  const port = freePort();
  const url = `http://127.0.0.1:${port}`;
  const started = performance.now();
  const proc = Bun.spawn([binary, "serve", "--port", String(port), "--data-dir", dataDir, "--log-level", "warn", ...extraArgs], {
    stdout: "ignore",
    stderr: "inherit",
    stdin: "ignore",
    env: { PATH: "/nonexistent" },
  });
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`the server exited with ${proc.exitCode}`);
    if (performance.now() - started > 30_000) throw new Error("the server was not ready within 30 s");
    try {
      if ((await fetch(`${url}/readyz`)).status === 200) break;
    } catch {
      // not listening yet
    }
  }
  return { proc, url, readyMs: performance.now() - started };
}

/** stop sends SIGTERM and returns the exit code and the milliseconds until exit. */
export async function stop(proc: Subprocess): Promise<{ exitCode: number; ms: number }> {
  const started = performance.now();
  proc.kill("SIGTERM");
  const exitCode = await proc.exited;
  return { exitCode, ms: performance.now() - started };
}

/** median returns the middle value (the upper one of an even count). */
export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

/** writeResult stores a bench's figures as JSON in bench/results/ and returns the file. */
export function writeResult(name: string, result: unknown): string {
  const dir = join(import.meta.dir, "results");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${name}-${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
  writeFileSync(file, `${JSON.stringify({ at: new Date().toISOString(), bun: Bun.version, cpus: cpus().length, ...(result as object) }, null, 2)}\n`);
  return file;
}

/** mb formats bytes as MiB with one decimal. */
export const mb = (bytes: number) => (bytes / MB).toFixed(1);

async function main(): Promise<void> {
  const runs = Number(process.env.BENCH_RUNS ?? 10);
  const binary = buildBinary();
  const size = Bun.file(binary).size;
  console.log(`binary: ${mb(size)} MiB`);
  const dataDir = mkdtempSync(join(tmpdir(), "crm-bench-startup-"));
  try {
    const first = await startUntilReady(binary, join(dataDir, "data"));
    const firstStop = await stop(first.proc);
    console.log(`first start (creates the database, applies migrations): ready in ${first.readyMs.toFixed(0)} ms`);

    const readyMs: number[] = [];
    const stopMs: number[] = [];
    let idleReady = 0;
    let idleSettled = 0;
    for (let i = 0; i < runs; i++) {
      const run = await startUntilReady(binary, join(dataDir, "data"));
      readyMs.push(run.readyMs);
      if (i === runs - 1) {
        idleReady = rssBytes(run.proc.pid);
        await Bun.sleep(3000);
        idleSettled = rssBytes(run.proc.pid);
      }
      const stopped = await stop(run.proc);
      if (stopped.exitCode !== 0) throw new Error(`exit code ${stopped.exitCode} after SIGTERM`);
      stopMs.push(stopped.ms);
    }
    console.log(`restart: ready in ${median(readyMs).toFixed(0)} ms median, ${Math.max(...readyMs).toFixed(0)} ms max over ${runs} runs`);
    console.log(`idle RSS: ${mb(idleReady)} MiB when ready, ${mb(idleSettled)} MiB after 3 s idle`);
    console.log(`SIGTERM to exit (idle): ${median(stopMs).toFixed(0)} ms median`);
    const targets = [
      { target: "ready < 300 ms", value: Math.max(first.readyMs, ...readyMs), met: Math.max(first.readyMs, ...readyMs) < 300 },
      { target: "idle RSS < 60 MB", value: Math.max(idleReady, idleSettled) / 1e6, met: Math.max(idleReady, idleSettled) < 60e6 },
    ];
    for (const t of targets) console.log(`${t.met ? "met   " : "missed"}  ${t.target}: ${t.value.toFixed(1)}`);
    const file = writeResult("startup", {
      binary_bytes: size,
      first_start_ready_ms: first.readyMs,
      first_start_stop_ms: firstStop.ms,
      restart_ready_ms: readyMs,
      idle_rss_bytes: { ready: idleReady, after_3s: idleSettled },
      stop_ms: stopMs,
      targets,
    });
    console.log(`results: ${file}`);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(join(binary, ".."), { recursive: true, force: true });
  }
}

if (import.meta.main) await main();
