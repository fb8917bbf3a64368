import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openPostgres } from "../../server/db/postgres.ts";
import { ROOT, waitUntil } from "../ops/support.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

// The service through PgBouncer (Debian's package) in session mode, set up as the README says: its
// ignore_startup_parameters list is read from the README, so the two cannot drift apart. Skipped
// where pgbouncer is not installed.

const PGBOUNCER = Bun.which("pgbouncer", { PATH: `${process.env.PATH ?? ""}:/usr/sbin` });

/** README_IGNORED is the ignore_startup_parameters list the README gives for PgBouncer. */
const README_IGNORED = /`ignore_startup_parameters` \(`([^`]+)`\)/.exec(readFileSync(join(ROOT, "README.md"), "utf8"))![1]!.replace(/\s+/g, " ");

let database: TestDatabase;
const bouncers: Bun.Subprocess[] = [];

/** freePort is a loopback port nothing listens on just now. */
function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** accepts tells whether something listens on the loopback port. */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => (socket.destroy(), resolve(true)));
    socket.once("error", () => resolve(false));
  });
}

/** startBouncer runs PgBouncer in session mode in front of the test database, with `ignored` as its ignore_startup_parameters, and returns the URL to reach the database through it. */
async function startBouncer(ignored: string): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "pgbouncer-"));
  // PgBouncer started as root runs as nobody (-u), which writes its log (read it when a test fails) and pid file here.
  chmodSync(dir, 0o777);
  const target = new URL(database.url);
  const port = await freePort();
  writeFileSync(join(dir, "users.txt"), `"postgres" ""\n`);
  writeFileSync(
    join(dir, "pgbouncer.ini"),
    `[databases]\n${database.name} = host=127.0.0.1 port=${target.port} dbname=${database.name} user=postgres\n` +
      `[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = ${port}\nauth_type = trust\nauth_file = ${join(dir, "users.txt")}\n` +
      `pool_mode = session\nignore_startup_parameters = ${ignored}\nunix_socket_dir =\nlogfile = ${join(dir, "pgbouncer.log")}\npidfile = ${join(dir, "pgbouncer.pid")}\n`,
  );
  const asNobody = process.getuid?.() === 0 ? ["-u", "nobody"] : [];
  const child = Bun.spawn([PGBOUNCER!, ...asNobody, join(dir, "pgbouncer.ini")], { stdout: "ignore", stderr: "ignore" });
  bouncers.push(child);
  await waitUntil(() => accepts(port), "PgBouncer to listen", child);
  return `postgres://postgres@127.0.0.1:${port}/${database.name}`;
}

describe.skipIf(!PGBOUNCER)("PgBouncer in session mode", () => {
  beforeAll(async () => {
    database = await createTestDatabase();
  });

  afterAll(async () => {
    for (const child of bouncers) child.kill();
    await database.drop();
  });

  test("with the README's ignore_startup_parameters, the service opens the database, and its writes still wait at most the answer timeout for a lock (lock_timeout set in the transaction, which PgBouncer keeps)", async () => {
    const url = await startBouncer(README_IGNORED);
    const db = await openPostgres(url, 2, { databaseAnswerTimeoutSeconds: 7 });
    try {
      expect(await db.write((tx) => tx.get("SHOW lock_timeout"))).toEqual({ lock_timeout: "7s" });
    } finally {
      await db.close();
    }
  });
});
