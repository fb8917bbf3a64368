// bun bench/footprint.ts: the compiled binary on a database of 1M contacts: time to ready,
// idle RSS, and RSS while wrk runs the create benchmark (bench/wrk/create.lua) against it.
// Target: under 200 MB under load. Settings: BENCH_DURATION (seconds of load, default 30, at most
// 60), BENCH_CONNECTIONS (64), BENCH_THREADS (2). The seeded database is cached in bench/results/
// (keyed by the migrations), so only the first run pays for seeding.
import { Database } from "bun:sqlite";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { databasePath, openDatabase } from "../server/db/database.ts";
import { MIGRATIONS, migrate } from "../server/db/migrations.ts";
import { buildBinary, mb, rssBytes, startUntilReady, stop, writeResult } from "./startup.ts";

const CONTACTS = 1_000_000;
const DURATION = Math.min(Number(process.env.BENCH_DURATION ?? 30), 60);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const THREADS = Number(process.env.BENCH_THREADS ?? 2);

/**
 * seededDatabase returns a migrated database file holding CONTACTS contacts, built once by one
 * INSERT ... SELECT (the tables' triggers fill the full-name index and the row count as the API
 * would) and cached for later runs.
 */
async function seededDatabase(): Promise<string> {
  const key = Bun.hash(MIGRATIONS.map((m) => m.sql).join("\n")).toString(36);
  const cacheDir = join(import.meta.dir, "results");
  const cached = join(cacheDir, `footprint-seed-${CONTACTS}-${key}.sqlite`);
  if (existsSync(cached)) return cached;
  mkdirSync(cacheDir, { recursive: true });
  const building = `${cached}.building`;
  rmSync(building, { force: true });
  // sqlite-only: the seed is bulk SQL on the writer connection.
  const database = openDatabase(building);
  const db = database.sqlite;
  migrate(db);
  const started = performance.now();
  const first = Date.now() - CONTACTS * 1000;
  // Ids keep the service's shape (prefix, 26 characters, time-sortable) and sort before any new one.
  db.run(
    `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
     INSERT INTO contacts (id, first_name, last_name, first_name_key, last_name_key, email, phone, assigned_user_id, properties, created_at, updated_at)
     SELECT 'con_' || printf('%026d', i), 'First' || (i % 5000), 'Last' || i, 'first' || (i % 5000), 'last' || i, 'contact' || i || '@example.com', '+44 20 7946 0000', NULL,
            '{"tags":["seed"],"custom_fields":{"plan":"pro"}}', ? + i * 1000, ? + i * 1000
     FROM n`,
    [CONTACTS, first, first],
  );
  db.run("PRAGMA wal_checkpoint(TRUNCATE)");
  await database.close();
  renameSync(building, cached);
  console.log(`seeded ${CONTACTS.toLocaleString("en-US")} contacts in ${((performance.now() - started) / 1000).toFixed(1)} s (cached as ${cached})`);
  return cached;
}

function countContacts(file: string): number {
  const db = new Database(file, { readonly: true });
  try {
    return db.query<{ n: number }, []>("SELECT n FROM row_counts WHERE table_name = 'contacts'").get()!.n;
  } finally {
    db.close();
  }
}

async function main(): Promise<void> {
  const wrk = Bun.which("wrk");
  if (!wrk) {
    console.error("wrk is not installed: sudo apt-get install -y wrk");
    process.exit(1);
  }
  const binary = buildBinary();
  const seed = await seededDatabase();
  const work = mkdtempSync(join(tmpdir(), "crm-bench-footprint-"));
  const dataDir = join(work, "data");
  mkdirSync(dataDir, { mode: 0o700 });
  copyFileSync(seed, databasePath(dataDir));
  const created = Bun.spawnSync([binary, "token", "create", "--name", "footprint", "--rate", "100000,100000", "--data-dir", dataDir], { stdout: "pipe", stderr: "pipe" });
  if (created.exitCode !== 0) throw new Error(`token create failed: ${created.stderr}`);
  const token = created.stdout.toString().trim();

  const server = await startUntilReady(binary, dataDir);
  try {
    console.log(`ready in ${server.readyMs.toFixed(0)} ms on ${countContacts(databasePath(dataDir)).toLocaleString("en-US")} contacts`);
    await Bun.sleep(3000);
    const idle = rssBytes(server.proc.pid);
    console.log(`idle RSS: ${mb(idle)} MiB`);

    const samples: number[] = [];
    const sampler = setInterval(() => samples.push(rssBytes(server.proc.pid)), 200);
    const load = Bun.spawn(
      [wrk, `-t${THREADS}`, `-c${CONNECTIONS}`, `-d${DURATION}s`, "--timeout", "10s", "-s", join(import.meta.dir, "wrk", "create.lua"), server.url],
      { env: { ...process.env, BENCH_TOKEN: token, BENCH_PATH: "/public/v1/contacts", BENCH_LUA_DIR: join(import.meta.dir, "wrk"), BENCH_RUN: `footprint${Date.now()}` }, stdout: "pipe", stderr: "inherit" },
    );
    const out = await new Response(load.stdout).text();
    await load.exited;
    clearInterval(sampler);
    const line = out.split("\n").find((l) => l.startsWith("BENCH_JSON "));
    if (!line) throw new Error(`wrk failed:\n${out}`);
    const wrkResult = JSON.parse(line.slice("BENCH_JSON ".length));
    const e = wrkResult.errors;
    const failed = e.connect + e.read + e.write + e.status + e.timeout;
    const rps = wrkResult.requests / (wrkResult.duration_us / 1e6);
    const peak = Math.max(...samples);
    await Bun.sleep(3000);
    const after = rssBytes(server.proc.pid);
    console.log(`create load: ${Math.round(rps).toLocaleString("en-US")} req/s for ${DURATION} s, p99 ${(wrkResult.latency_us.p99 / 1000).toFixed(1)} ms, ${failed} failed`);
    console.log(`RSS under load: peak ${mb(peak)} MiB, ${mb(after)} MiB 3 s after`);
    const stopped = await stop(server.proc);
    console.log(`SIGTERM to exit after load: ${stopped.ms.toFixed(0)} ms, exit code ${stopped.exitCode}`);

    const targets = [{ target: "RSS under load < 200 MB", value: peak / 1e6, met: peak < 200e6 }];
    for (const t of targets) console.log(`${t.met ? "met   " : "missed"}  ${t.target}: ${t.value.toFixed(1)}`);
    if (failed > 0) console.log("some requests failed: the figures above are not valid");
    const file = writeResult("footprint", {
      contacts: CONTACTS,
      ready_ms: server.readyMs,
      idle_rss_bytes: idle,
      load: { duration_s: DURATION, connections: CONNECTIONS, threads: THREADS, rps, p99_ms: wrkResult.latency_us.p99 / 1000, failed },
      rss_under_load_bytes: { peak, samples: samples.length, after_3s: after },
      stop: stopped,
      targets,
    });
    console.log(`results: ${file}`);
  } finally {
    if (server.proc.exitCode === null) server.proc.kill("SIGKILL");
    rmSync(work, { recursive: true, force: true });
    rmSync(join(binary, ".."), { recursive: true, force: true });
  }
}

await main();
