// bun bench/import.ts: contacts per second through `crm import contacts` (batches of 100) against
// the same rows sent one POST each, both against the real server with a token at the default
// rate limits (50 writes per second, bursts of 100), plus the importer with a token that is never
// limited (what the server and importer manage). Settings: BENCH_IMPORT_ROWS (rows in the CSV,
// default 100000), BENCH_SINGLE_ROWS (rows sent one POST each, default 1000: at 50 per second the
// whole file would take over half an hour), BENCH_IMPORT_ONLY=limited|unlimited|single.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApiToken } from "../server/auth/service.ts";
import { DEFAULT_CONFIG } from "../server/config.ts";
import { csvLine } from "../server/import/csv.ts";
import type { TokenRate } from "../server/limits/rate-limiter.ts";
import { startServer } from "../server/server.ts";
import { createLogger } from "../server/shared/log.ts";

const ROOT = join(import.meta.dir, "..");
const ROWS = Number(process.env.BENCH_IMPORT_ROWS ?? 100_000);
const SINGLE_ROWS = Number(process.env.BENCH_SINGLE_ROWS ?? 1000);
const ONLY = process.env.BENCH_IMPORT_ONLY;
const UNLIMITED: TokenRate = { readPerSecond: 1e6, readBurst: 1e6, writePerSecond: 1e6, writeBurst: 1e6 };

const dir = mkdtempSync(join(tmpdir(), "crm-bench-import-"));
const csv = join(dir, "contacts.csv");
const header = ["Email", "First Name", "Last Name", "Phone", "Company", "Website", "Tags"];
const record = (i: number) => [`person${i}@example.com`, `Zoë${i % 977}`, `Müller ${i}`, `+44 20 7946 ${String(i % 10_000).padStart(4, "0")}`, `Acme ${i % 500}`, `acme${i % 500}.example`, i % 4 ? "" : "vip;imported"];
writeFileSync(csv, `${[header, ...Array.from({ length: ROWS }, (_, i) => record(i + 1))].map((fields) => csvLine(fields)).join("\n")}\n`);

async function withServer<T>(rate: TokenRate | null, run: (url: string, tokenFile: string, token: string) => Promise<T>): Promise<T> {
  const dataDir = mkdtempSync(join(dir, "data-"));
  const server = await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir, logLevel: "warn" }, createLogger("warn", () => {}));
  const { token } = await createApiToken(server.runtime.db, "bench", Date.now(), rate);
  const tokenFile = join(dataDir, "token");
  writeFileSync(tokenFile, token);
  try {
    return await run(server.url, tokenFile, token);
  } finally {
    await server.stop();
  }
}

async function importer(rate: TokenRate | null): Promise<{ seconds: number; summary: string }> {
  return withServer(rate, async (url, tokenFile) => {
    const started = performance.now();
    const proc = Bun.spawn([process.execPath, join(ROOT, "server/main.ts"), "import", "contacts", csv, "--url", url, "--token-file", tokenFile], { stdout: "pipe", stderr: "ignore" });
    const summary = (await new Response(proc.stdout).text()).trim();
    if ((await proc.exited) !== 0) throw new Error(`import failed: ${summary}`);
    return { seconds: (performance.now() - started) / 1000, summary };
  });
}

/** onePostEach sends rows one POST each, in order, waiting for Retry-After on 429 as a careful client would. */
async function onePostEach(rows: number): Promise<{ seconds: number; refused: number }> {
  return withServer(null, async (url, _file, token) => {
    let refused = 0;
    const started = performance.now();
    for (let i = 1; i <= rows; i++) {
      const [email, first_name, last_name, phone] = record(i);
      for (;;) {
        const res = await fetch(`${url}/public/v1/contacts`, {
          method: "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json", "idempotency-key": `bench-row-${i}` },
          body: JSON.stringify({ email, first_name, last_name, phone }),
        });
        await res.arrayBuffer();
        if (res.status !== 429) break;
        refused++;
        await Bun.sleep(Number(res.headers.get("retry-after") ?? 1) * 1000);
      }
    }
    return { seconds: (performance.now() - started) / 1000, refused };
  });
}

const rate = (rows: number, seconds: number) => Math.round(rows / seconds);
try {
  const lines: string[] = [];
  let single: number | null = null;
  if (!ONLY || ONLY === "single") {
    const result = await onePostEach(SINGLE_ROWS);
    single = rate(SINGLE_ROWS, result.seconds);
    lines.push(`one POST each, default limits: ${SINGLE_ROWS} rows in ${result.seconds.toFixed(1)} s = ${single} contacts/s (${result.refused} answers 429); ${ROWS} rows would take ${Math.round(ROWS / single)} s`);
  }
  for (const [name, tokenRate] of [["limited", null], ["unlimited", UNLIMITED]] as const) {
    if (ONLY && ONLY !== name) continue;
    const result = await importer(tokenRate);
    const perSecond = rate(ROWS, result.seconds);
    lines.push(`crm import, ${name === "limited" ? "default limits" : "token never limited"}: ${ROWS} rows in ${result.seconds.toFixed(1)} s = ${perSecond} contacts/s${single ? ` (${(perSecond / single).toFixed(1)}x one POST each)` : ""}; ${result.summary}`);
  }
  console.log(lines.join("\n"));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
