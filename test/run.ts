// Runs `bun test` on SQLite and, at the same time, the API, webhook, console, import and limits
// folders again on PostgreSQL (CRM_TEST_BACKEND=postgres, same assertions), and ends with the
// plain line CI reads over both passes: "N passed, M failed". The passes run side by side because
// most of a test's time is spent waiting (on receivers, retries, timeouts, Chromium), so the two
// cores of a CI machine would otherwise sit half idle; the PostgreSQL pass's output is held back
// and printed whole after the SQLite pass's, so neither interleaves. With arguments, one
// `bun test` with them on the backend CRM_TEST_BACKEND names (SQLite unless set).
import { Glob } from "bun";

/** POSTGRES_FOLDERS are the folders whose tests run a second time on PostgreSQL. */
const POSTGRES_FOLDERS = ["foundation", "webhooks", "console", "import", "limits"];

/**
 * SQLITE_ONLY are the files of those folders that are about SQLite itself: its files, PRAGMAs,
 * query plans, migrations, the group-commit writer, the data-directory CLI. Single tests of that
 * kind inside shared files use sqliteOnly (test/support/backend.ts).
 */
const SQLITE_ONLY = new Set([
  "foundation/database.test.ts",
  "foundation/migrations.test.ts",
  "foundation/index-use.test.ts",
  "foundation/name-index.test.ts",
  "foundation/name-window.test.ts",
  "foundation/deleted-in-file.test.ts",
  "foundation/write-queue.test.ts",
  "foundation/slow-list-lane.test.ts",
  "foundation/cli.test.ts",
  "webhooks/crash.test.ts",
  "webhooks/delivery-counts.test.ts",
  "webhooks/secrets.test.ts",
  "console/reads.test.ts",
]);

/**
 * BACKEND_INDEPENDENT are the files of those folders that use no database, or start servers on a
 * data directory of their own: a PostgreSQL pass would only run them again unchanged (and double
 * the exposure of their HTTP timing tests to a loaded machine).
 */
const BACKEND_INDEPENDENT = new Set([
  "foundation/time.test.ts",
  "foundation/ids.test.ts",
  "foundation/thrown.test.ts",
  "foundation/request-slot.test.ts",
  "foundation/pipeline.test.ts",
  "webhooks/rules.test.ts",
  "import/csv.test.ts",
  "limits/body-memory.test.ts",
  "limits/connections.test.ts",
  "limits/malformed.test.ts",
  "console/bidi.test.ts",
]);

let passed = 0;
let failed = 0;

/** Sink is where a pass's output goes: straight through, or held until the pass is printed. */
type Sink = (chunk: Uint8Array) => void;

async function relay(stream: ReadableStream<Uint8Array>, sink: Sink, seen: { passed: number; failed: number; ran: boolean }): Promise<void> {
  const decoder = new TextDecoder();
  let pending = "";
  for await (const chunk of stream) {
    sink(chunk);
    pending += decoder.decode(chunk, { stream: true });
    const lines = pending.split("\n");
    pending = lines.pop()!;
    for (const line of lines) {
      const pass = /^\s*(\d+) pass\s*$/.exec(line);
      const fail = /^\s*(\d+) fail\s*$/.exec(line);
      if (pass) { seen.passed = Number(pass[1]); seen.ran = true; }
      if (fail) { seen.failed = Number(fail[1]); seen.ran = true; }
    }
  }
}

/** bunTest runs one `bun test` with the backend given, passes its output to the sinks and adds its counts; true when it succeeded. */
async function bunTest(args: string[], backend: string, out: Sink, err: Sink): Promise<boolean> {
  const child = Bun.spawn([process.execPath, "test", "--timeout", "30000", ...args], {
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
    env: { ...process.env, CRM_TEST_BACKEND: backend },
  });
  const seen = { passed: 0, failed: 0, ran: false };
  await Promise.all([relay(child.stdout, out, seen), relay(child.stderr, err, seen)]);
  const code = await child.exited;
  if (!seen.ran && code !== 0) seen.failed = Math.max(seen.failed, 1);
  passed += seen.passed;
  failed += seen.failed;
  return code === 0 && seen.failed === 0 && seen.ran;
}

const toStdout: Sink = (chunk) => process.stdout.write(chunk);
const toStderr: Sink = (chunk) => process.stderr.write(chunk);

const args = process.argv.slice(2);
let ok: boolean;
if (args.length > 0) {
  ok = await bunTest(args, process.env.CRM_TEST_BACKEND ?? "sqlite", toStdout, toStderr);
} else {
  const files = POSTGRES_FOLDERS.flatMap((folder) => [...new Glob(`${folder}/**/*.test.ts`).scanSync({ cwd: import.meta.dir })])
    .filter((file) => !SQLITE_ONLY.has(file) && !BACKEND_INDEPENDENT.has(file))
    .sort()
    .map((file) => `./test/${file}`);
  // Held in order as one stream: bun writes its test lines to stderr and little to stdout.
  const held: Uint8Array[] = [];
  const hold: Sink = (chunk) => void held.push(chunk);
  console.log(`== on SQLite, while the same ${files.length} files of ${POSTGRES_FOLDERS.join(", ")} run on PostgreSQL (printed after)\n`);
  const [onSqlite, onPostgres] = await Promise.all([bunTest([], "sqlite", toStdout, toStderr), bunTest(files, "postgres", hold, hold)]);
  console.log(`\n== the same ${files.length} files of ${POSTGRES_FOLDERS.join(", ")} on PostgreSQL (CRM_TEST_BACKEND=postgres)\n`);
  for (const chunk of held) process.stderr.write(chunk);
  ok = onSqlite && onPostgres;
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(ok ? 0 : 1);
