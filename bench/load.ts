// The load tools bench/run.ts and bench/postgres.ts share: wrk (installed from Debian when missing),
// a server process started and waited for, and wrk's summary as a measurement.
import { join } from "node:path";
import { waitForListening } from "./listening.ts";

const ROOT = join(import.meta.dir, "..");

/** WrkResult is the summary bench/wrk/report.lua prints as one JSON line. */
export interface WrkResult {
  requests: number;
  duration_us: number;
  bytes: number;
  errors: { connect: number; read: number; write: number; status: number; timeout: number };
  latency_us: { p50: number; p90: number; p99: number; max: number; mean: number };
}

/** Measurement is one wrk run, summarised: requests a second, latency and failed requests. */
export interface Measurement {
  rps: number;
  p50_ms: number;
  p99_ms: number;
  failed: number;
}

/** WrkRun is one wrk measurement: its script in bench/wrk, the script's settings, and wrk's threads, connections and seconds. */
export interface WrkRun {
  script: string;
  env: Record<string, string>;
  threads: number;
  connections: number;
  seconds: number;
}

/** ensureWrk returns the wrk binary, installing Debian's package when running as root with apt-get. */
export function ensureWrk(): string {
  const found = Bun.which("wrk");
  if (found) return found;
  const canApt = process.getuid?.() === 0 && Bun.which("apt-get");
  if (canApt) {
    console.log("wrk is missing; installing it with apt-get (Debian package wrk) ...");
    const ok = Bun.spawnSync(["sh", "-c", "apt-get update -qq && apt-get install -y -qq wrk"], { stdout: "inherit", stderr: "inherit" }).exitCode === 0;
    const installed = ok && Bun.which("wrk");
    if (installed) return installed;
  }
  console.error("wrk is not installed. Install it with: sudo apt-get update && sudo apt-get install -y wrk   (macOS: brew install wrk)");
  process.exit(1);
}

/** RunningProcess is a server started by startListening. */
export interface RunningProcess {
  url: string;
  stop(): Promise<void>;
}

/** startListening spawns a server process and waits for its `listening on URL` line. */
export async function startListening(name: string, cmd: string[], env?: Record<string, string>): Promise<RunningProcess> {
  const child = Bun.spawn(cmd, { cwd: ROOT, stdout: "pipe", stderr: "inherit", stdin: "ignore", env: env && { ...process.env, ...env } });
  // Show the start of anything it logs (warnings, errors), not thousands of repeats.
  let budget = 4000;
  const url = await waitForListening(name, child.stdout, (text) => {
    if (budget <= 0) return;
    process.stderr.write(`[${name}] ${text.slice(0, budget)}`);
    budget -= text.length;
    if (budget <= 0) process.stderr.write(`\n[${name}] ... (further output not shown)\n`);
  });
  return {
    url,
    async stop() {
      child.kill("SIGTERM");
      await child.exited;
    },
  };
}

/** startWrk starts one wrk measurement against `url` and resolves with its summary. */
export async function startWrk(wrk: string, url: string, run: WrkRun): Promise<WrkResult> {
  const child = Bun.spawn(
    [wrk, `-t${run.threads}`, `-c${run.connections}`, `-d${run.seconds}s`, "--timeout", "10s", "-s", join(import.meta.dir, "wrk", run.script), url],
    { env: { ...process.env, ...run.env, BENCH_LUA_DIR: join(import.meta.dir, "wrk") }, stdout: "pipe", stderr: "pipe" },
  );
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  const line = out.split("\n").find((l) => l.startsWith("BENCH_JSON "));
  if (code !== 0 || !line) throw new Error(`wrk failed for ${run.script}:\n${out}${err}`);
  return JSON.parse(line.slice("BENCH_JSON ".length)) as WrkResult;
}

/** summarise turns wrk's summary into requests a second, p50 and p99 in ms, and the failed requests. */
export function summarise(r: WrkResult): Measurement {
  const e = r.errors;
  return {
    rps: Math.round(r.requests / (r.duration_us / 1e6)),
    p50_ms: r.latency_us.p50 / 1000,
    p99_ms: r.latency_us.p99 / 1000,
    failed: e.connect + e.read + e.write + e.status + e.timeout,
  };
}

/** fmt writes a number with thousands separators and `digits` decimals. */
export const fmt = (n: number, digits = 0) => n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });

/** printTable prints rows under a header, the first column left-aligned and the rest right-aligned. */
export function printTable(header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ");
  console.log(`\n${line(header)}\n${widths.map((w) => "-".repeat(w)).join("  ")}\n${rows.map(line).join("\n")}`);
}
