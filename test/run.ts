// Runs `bun test` on SQLite, then the API, webhook, console, import and limits folders again on
// PostgreSQL (CRM_TEST_BACKEND=postgres, same assertions), and ends with the plain line CI reads
// over both passes: "N passed, M failed". With arguments, one `bun test` with them on the backend
// CRM_TEST_BACKEND names (SQLite unless set).
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
  "foundation/write-queue.test.ts",
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
  "foundation/request-slot.test.ts",
  "webhooks/rules.test.ts",
  "import/csv.test.ts",
  "limits/body-memory.test.ts",
  "limits/connections.test.ts",
  "limits/malformed.test.ts",
]);

let passed = 0;
let failed = 0;

async function relay(stream: ReadableStream<Uint8Array>, sink: NodeJS.WriteStream, seen: { passed: number; failed: number; ran: boolean }): Promise<void> {
  const decoder = new TextDecoder();
  let pending = "";
  for await (const chunk of stream) {
    sink.write(chunk);
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

/** bunTest runs one `bun test` with the backend given, relays its output and adds its counts; true when it succeeded. */
async function bunTest(args: string[], backend: string): Promise<boolean> {
  const child = Bun.spawn([process.execPath, "test", "--timeout", "30000", ...args], {
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
    env: { ...process.env, CRM_TEST_BACKEND: backend },
  });
  const seen = { passed: 0, failed: 0, ran: false };
  await Promise.all([relay(child.stdout, process.stdout, seen), relay(child.stderr, process.stderr, seen)]);
  const code = await child.exited;
  if (!seen.ran && code !== 0) seen.failed = Math.max(seen.failed, 1);
  passed += seen.passed;
  failed += seen.failed;
  return code === 0 && seen.failed === 0 && seen.ran;
}

const args = process.argv.slice(2);
let ok: boolean;
if (args.length > 0) {
  ok = await bunTest(args, process.env.CRM_TEST_BACKEND ?? "sqlite");
} else {
  const onSqlite = await bunTest([], "sqlite");
  const files = POSTGRES_FOLDERS.flatMap((folder) => [...new Glob(`${folder}/**/*.test.ts`).scanSync({ cwd: import.meta.dir })])
    .filter((file) => !SQLITE_ONLY.has(file) && !BACKEND_INDEPENDENT.has(file))
    .sort()
    .map((file) => `./test/${file}`);
  console.log(`\n== the same ${files.length} files of ${POSTGRES_FOLDERS.join(", ")} on PostgreSQL (CRM_TEST_BACKEND=postgres)\n`);
  const onPostgres = await bunTest(files, "postgres");
  ok = onSqlite && onPostgres;
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(ok ? 0 : 1);
