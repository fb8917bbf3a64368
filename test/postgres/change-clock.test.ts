import { afterAll, beforeAll, expect, test } from "bun:test";
import { SQL } from "bun";
import { join } from "node:path";
import { rmSync } from "node:fs";
import { createRuntime } from "../../server/app.ts";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { openPostgres } from "../../server/db/postgres.ts";
import { createLogger } from "../../server/shared/log.ts";
import { runCli, SOURCE, tempDir, waitUntil } from "../ops/support.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

// The change clock reads the largest stamps of contacts, accounts, users and tombstones before a
// process's first change (db/change-clock.ts): what a lock another session holds on one of those
// tables does to a serving instance's start and to the commands that stamp.

let database: TestDatabase;
let dir: string;
let keyFile: string;
let admin: SQL;

beforeAll(async () => {
  database = await createTestDatabase();
  dir = tempDir("pg-change-clock");
  keyFile = writeSecretsKeyFile(join(dir, "secrets.key"));
  admin = new SQL({ url: database.url, max: 1 });
  expect(crm(["migrate"]).exitCode).toBe(0);
}, 60_000);

afterAll(async () => {
  await admin?.close();
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

/** crm runs the command line from source on the test database. */
function crm(args: string[]) {
  return runCli([...SOURCE, ...args], { cwd: dir, env: { PATH: process.env.PATH ?? "", CRM_DATABASE_URL: database.url } });
}

/** whileContactsLocked runs `work` while another session holds an ACCESS EXCLUSIVE lock on contacts (an ALTER TABLE's, a VACUUM FULL's). */
async function whileContactsLocked<T>(work: (holder: SQL) => Promise<T>): Promise<T> {
  const holder = new SQL({ url: database.url, max: 1 });
  try {
    return await holder.begin(async (tx) => {
      await tx`LOCK TABLE contacts IN ACCESS EXCLUSIVE MODE`;
      return work(holder);
    });
  } finally {
    await holder.close();
  }
}

test("an instance started while contacts is locked beyond the answer timeout logs that its change clock was not seeded at start", async () => {
  const lines: Record<string, unknown>[] = [];
  const log = createLogger("warn", (line) => void lines.push(JSON.parse(line)));
  const config = { ...DEFAULT_CONFIG, databaseUrl: database.url, databaseAnswerTimeoutSeconds: 1, secretsKeyFile: keyFile };
  const db = await openPostgres(database.url, 2, config);
  try {
    await whileContactsLocked(() => createRuntime({ db, config, log }));
    expect(lines.map(({ level, msg, error }) => ({ level, msg, error }))).toEqual([
      {
        level: "warn",
        msg: "the change clock did not read the stamps stored at start (a lock another PostgreSQL session holds, or the database not answering): the first change reads them, in its write",
        error: "PostgresError: canceling statement due to lock timeout",
      },
    ]);
  } finally {
    await db.close();
  }
});

test("crm user create reads the stamps stored before it takes the write lock: waiting on a lock on contacts, it holds up no instance's writes", async () => {
  const { n, command } = await whileContactsLocked(async () => {
    // A generous answer timeout: the command waits until the lock is released.
    const command = Bun.spawn([...SOURCE, "user", "create", "--name", "Ada", "--email", "ada@example.com"], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? "", CRM_DATABASE_URL: database.url, CRM_DATABASE_ANSWER_TIMEOUT_SECONDS: "600" },
      stdout: "pipe",
      stderr: "pipe",
    });
    const waiting = async () => (await admin`SELECT pid FROM pg_locks WHERE NOT granted AND relation = 'contacts'::regclass`).map((row: { pid: number }) => row.pid) as number[];
    await waitUntil(async () => (await waiting()).length > 0, "the command to wait on the lock", command);
    const pids = await waiting();
    // The write lock is the only advisory lock the service takes.
    const [{ n }] = await admin.unsafe(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid IN (${pids.join(", ")})`);
    return { n, command };
  });
  expect({ exitCode: await command.exited, stderr: await new Response(command.stderr).text(), holdsWriteLock: n > 0 }).toEqual({ exitCode: 0, stderr: "", holdsWriteLock: false });
}, 60_000);
