import { Database as SqliteDatabase } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { SQL } from "bun";
import { databaseFile } from "../../server/db/database.ts";
import { COPY_USAGE, copyToPostgres } from "../../server/db/copy-to-postgres.ts";
import { migrate } from "../../server/db/migrations.ts";
import { openPostgres, WRITE_LOCK, type PostgresDatabase } from "../../server/db/postgres.ts";
import { runCli, SOURCE, spawnServer, tempDir } from "../ops/support.ts";
import { ConsoleClient } from "../console/support.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { settledDeliveries, startReceiver, waitFor, webhookHarness, type Receiver, type WebhookHarness } from "../webhooks/support.ts";
import { inOneOrder, selectEveryColumn, TABLES } from "./support.ts";

// `crm copy-to-postgres` run as a subprocess on a data directory the real app populated: contacts
// with tags, accounts and users, a subscription with finished and pending deliveries, tokens and
// an operator. Every table must arrive whole on PostgreSQL.

let h: WebhookHarness;
let receiver: Receiver;
let target: TestDatabase;
let pg: PostgresDatabase;
let copy: ReturnType<typeof runCli>;

/** crm runs the command line from source on the harness's data directory. */
function crm(args: string[], env: Record<string, string> = {}, stdin?: string) {
  return runCli([...SOURCE, ...args], { env: { PATH: process.env.PATH ?? "", CRM_DATA_DIR: h.dataDir, ...env }, stdin });
}

/** rowsOf reads a whole table, every SQLite column, on both sides, in one order. */
async function rowsOf(table: string, sqlite: SqliteDatabase): Promise<{ sqlite: unknown[]; postgres: unknown[] }> {
  const sql = selectEveryColumn(sqlite, table);
  return { sqlite: inOneOrder(sqlite.query(sql).all()), postgres: inOneOrder(await pg.all(sql)) };
}

beforeAll(async () => {
  target = await createTestDatabase();
  receiver = startReceiver();
  // A failed attempt is retried only an hour later: those deliveries stay pending, with an attempt.
  h = await webhookHarness({ retrySchedule: [3600] });
  await h.subscribe(receiver.url, ["contact.created", "contact.updated", "account.created"], "copy test");
  const user = (await h.json("POST", "/public/v1/users", { body: { name: "Grace Hopper", email: "grace@navy.mil" } })).body.data;
  const accounts = [];
  for (const name of ["Acme", "Émile & Fils"]) accounts.push((await h.json("POST", "/public/v1/accounts", { body: { name, domain: `${name.length}.example` } })).body.data);
  const created = [];
  for (let i = 0; i < 12; i++) {
    const body = {
      first_name: i % 2 ? `Ada ${i}` : `émile ${i}`,
      last_name: "Lovelace",
      email: `person${i}@example.com`,
      tags: i % 3 ? ["vip", `batch-${i % 4}`] : [],
      account_ids: i % 2 ? [accounts[0].id, accounts[1].id] : [accounts[1].id],
      ...(i % 4 === 0 ? { assigned_user_id: user.id } : i % 4 === 1 ? { assigned_user_ids: [user.id] } : {}),
    };
    const res = await h.json("POST", "/public/v1/contacts", { body, headers: { "idempotency-key": `create-${i}` } });
    expect(res.status).toBe(201);
    created.push(res.body.data);
  }
  await settledDeliveries(h);
  receiver.respond(() => new Response("down", { status: 503 }));
  expect((await h.json("PATCH", `/public/v1/contacts/${created[0].id}`, { body: { phone: "+44 20 7946 0000" } })).status).toBe(200);
  expect((await h.json("DELETE", `/public/v1/contacts/${created[1].id}`)).status).toBe(204);
  const sqlite = new SqliteDatabase(databaseFile(h.dataDir), { readonly: true });
  const retrying = sqlite.query<{ n: number }, []>("SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'pending' AND attempts > 0");
  await waitFor(() => retrying.get()!.n > 0, "a failed attempt to be recorded");
  sqlite.close();
  expect(crm(["operator", "create", "--email", "ops@example.com", "--password-stdin"], {}, "correct horse battery staple\n").exitCode).toBe(0);
  // Signed in and out: the operator keeps when they were last seen, their session gone. The command
  // committed while this turn's read snapshot may be open (a request over a socket comes in a later turn).
  h.db.refreshReads();
  const operator = new ConsoleClient((r) => h.app.handle(r));
  expect((await operator.signIn({ email: "ops@example.com", password: "correct horse battery staple" })).status).toBe(303);
  expect((await operator.get("/console/")).status).toBe(200); // for the session's CSRF token
  expect((await operator.post("/console/logout", {})).status).toBe(303);
  expect(crm(["token", "create", "--name", "second"]).exitCode).toBe(0);
  copy = crm(["copy-to-postgres", "--database-url", target.url]);
  pg = await openPostgres(target.url, 2);
}, 60_000);

afterAll(async () => {
  await pg?.close();
  await h?.shutdown();
  await receiver?.stop();
  await target?.drop();
});

describe("copy-to-postgres: happy path", () => {
  test("the copy succeeds and prints the rows copied per table, in foreign-key order", () => {
    expect({ exitCode: copy.exitCode, stderr: copy.stderr.split("\n").filter((line) => !line.startsWith("copied ")) }).toEqual({ exitCode: 0, stderr: [""] });
    const sqlite = new SqliteDatabase(databaseFile(h.dataDir), { readonly: true });
    try {
      const lines = copy.stdout.trimEnd().split("\n");
      const counts = Object.fromEntries(TABLES.map((t) => [t, sqlite.query<{ n: number }, []>(`SELECT count(*) AS n FROM "${t}"`).get()!.n]));
      const total = Object.values(counts).reduce((a, b) => a + b, 0);
      expect(lines[0]).toBe(`copied ${total} rows into ${target.url}`);
      const printed = Object.fromEntries(lines.slice(1).map((line) => line.split(/\s+/)).map(([table, n]) => [table, Number(n)]));
      expect(printed).toEqual(counts);
      const order = lines.slice(1).map((line) => line.split(/\s+/)[0]!);
      for (const [child, parent] of [["contacts", "users"], ["contact_tags", "contacts"], ["contact_accounts", "accounts"], ["webhook_deliveries", "events"], ["webhook_delivery_attempts", "webhook_deliveries"], ["webhook_subscription_events", "webhook_subscriptions"], ["operator_sessions", "operators"], ["operator_devices", "operators"]]) {
        expect(order.indexOf(child!)).toBeGreaterThan(order.indexOf(parent!));
      }
      // Not a terminal: one line per table on stderr.
      expect(copy.stderr.trimEnd().split("\n")).toEqual(lines.slice(1).map((line) => { const [table, n] = line.split(/\s+/); return `copied ${table}: ${n} rows`; }));
    } finally {
      sqlite.close();
    }
  });

  test("the data directory really held every kind of row the copy must carry", () => {
    const sqlite = new SqliteDatabase(databaseFile(h.dataDir), { readonly: true });
    try {
      const count = (sql: string) => sqlite.query<{ n: number }, []>(sql).get()!.n;
      expect({
        contacts: count("SELECT count(*) AS n FROM contacts"),
        tags: count("SELECT count(*) AS n FROM contact_tags") > 0,
        accounts: count("SELECT count(*) AS n FROM contact_accounts") > 0,
        assigned: count("SELECT count(*) AS n FROM contact_assigned_users") > 0,
        succeeded: count("SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'succeeded'") > 0,
        pending: count("SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'pending' AND attempts > 0") > 0,
        tokens: count("SELECT count(*) AS n FROM api_tokens"),
        operators: count("SELECT count(*) AS n FROM operators"),
        operatorsSeen: count("SELECT count(*) AS n FROM operators WHERE last_seen_at IS NOT NULL"),
        tombstones: count("SELECT count(*) AS n FROM tombstones"),
        idempotency: count("SELECT count(*) AS n FROM idempotency_keys"),
        headerSets: count("SELECT count(*) AS n FROM webhook_header_sets") > 0,
        keyCheck: count("SELECT count(*) AS n FROM secrets_key_check"),
      }).toEqual({ contacts: 11, tags: true, accounts: true, assigned: true, succeeded: true, pending: true, tokens: 2, operators: 1, operatorsSeen: 1, tombstones: 1, idempotency: 12, headerSets: true, keyCheck: 1 });
    } finally {
      sqlite.close();
    }
  });

  test("every table's rows are equal on both sides, ids, timestamps and pending deliveries unchanged", async () => {
    const sqlite = new SqliteDatabase(databaseFile(h.dataDir), { readonly: true });
    try {
      for (const table of TABLES) {
        const rows = await rowsOf(table, sqlite);
        expect({ table, rows: rows.postgres }).toEqual({ table, rows: rows.sqlite });
      }
    } finally {
      sqlite.close();
    }
  });

  test("the copied tables are analyzed: the planner has their statistics at once, not after autovacuum's next pass", async () => {
    const unanalyzed = await pg.all<{ relname: string }>("SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NULL ORDER BY relname");
    expect(unanalyzed).toEqual([]);
  });

  test("the counting triggers work again after the copy, and new header sets get ids past the copied ones", async () => {
    const before = await pg.get<{ n: number }>("SELECT n FROM row_counts WHERE table_name = 'contacts'");
    await pg.run("INSERT INTO contacts (id, first_name, created_at, updated_at) VALUES ('c_after_copy', 'New', 1, 1)");
    expect(await pg.get("SELECT n FROM row_counts WHERE table_name = 'contacts'")).toEqual({ n: before!.n + 1 });
    const { max } = (await pg.get<{ max: number }>("SELECT max(id) AS max FROM webhook_header_sets"))!;
    expect(await pg.get("INSERT INTO webhook_header_sets (headers) VALUES ('{\"new\":\"set\"}') RETURNING id")).toEqual({ id: max + 1 });
  });
});

describe("copy-to-postgres: refusals", () => {
  test("a target that already holds data is refused with one line, exit 2, and left as it was", async () => {
    const before = await pg.get("SELECT (SELECT count(*) FROM contacts) AS contacts, (SELECT count(*) FROM events) AS events");
    // The tables the first copy filled, in its order; row_counts always has its row, and the key's check value is replaced: neither counts.
    const filled = copy.stdout.trimEnd().split("\n").slice(1).map((line) => line.split(/\s+/)).filter(([table, n]) => n !== "0" && table !== "row_counts" && table !== "secrets_key_check").map(([table]) => table);
    expect(filled).toContain("contacts");
    // The test server trusts every login, so a password in the URL is accepted and must not be printed.
    const again = crm(["copy-to-postgres"], { CRM_DATABASE_URL: target.url.replace("postgres@", "postgres:pa55-word@") });
    expect({ exitCode: again.exitCode, stdout: again.stdout, stderr: again.stderr }).toEqual({
      exitCode: 2,
      stdout: "",
      stderr: `crm: the PostgreSQL database at ${target.url.replace("postgres@", "postgres:***@")} already holds data (in ${filled.join(", ")}); copy-to-postgres copies only into an empty database\n`,
    });
    expect(await pg.get("SELECT (SELECT count(*) FROM contacts) AS contacts, (SELECT count(*) FROM events) AS events")).toEqual(before);
  });

  test("a server that cannot be reached is one line naming --database-url, exit 3 (try again later), without the password", () => {
    const unreachable = target.url.replace("postgres@", "postgres:pa55-word@").replace(/:\d+\//, ":1/");
    const res = crm(["copy-to-postgres", "--database-url", unreachable]);
    expect({ exitCode: res.exitCode, stdout: res.stdout, stderr: res.stderr }).toEqual({
      exitCode: 3,
      stdout: "",
      stderr: `crm: cannot use the PostgreSQL database at ${unreachable.replace("pa55-word", "***")} (--database-url, CRM_DATABASE_URL): connection refused (is the server running and the host and port right?)\n`,
    });
  });

  test("without a URL it says what it needs, exit 2, a file first: --database-url shows the password in ps, a URL typed in a command stays in the shell's history", () => {
    const res = crm(["copy-to-postgres"]);
    expect({ exitCode: res.exitCode, stdout: res.stdout, stderr: res.stderr }).toEqual({
      exitCode: 2,
      stdout: "",
      stderr: "crm: copy-to-postgres needs the PostgreSQL database's URL: --database-url-file FILE (the URL alone on one line, in a 0600 file), or database_url_file or database_url in the --config file, or CRM_DATABASE_URL; see copy-to-postgres --help\n",
    });
    expect(COPY_USAGE).toContain("database_url_file or database_url in the --config file");
  });

  test("a data directory without a database is refused before connecting", () => {
    const empty = join(tempDir("copy"), "none");
    const res = crm(["copy-to-postgres", "--database-url", target.url, "--data-dir", empty]);
    expect(res.exitCode).toBe(2);
    expect(res.stderr).toStartWith(`crm: no database at ${databaseFile(empty)}`);
  });

  test("--help prints the command's usage, the URL with its password in a file: an argument shows in ps for the whole copy, a variable set in the command line stays in the shell's history", () => {
    const res = crm(["copy-to-postgres", "--help"]);
    expect({ exitCode: res.exitCode, stdout: res.stdout, stderr: res.stderr }).toEqual({ exitCode: 0, stdout: COPY_USAGE, stderr: "" });
    expect(COPY_USAGE).toStartWith("usage: crm copy-to-postgres --database-url-file FILE [--data-dir DIR]\n");
    expect(COPY_USAGE).not.toContain("--database-url postgres://");
    expect(COPY_USAGE).not.toContain("=postgres://USER:PASSWORD");
  });
});

describe("copy-to-postgres: progress on a terminal", () => {
  test("each table gets a bar redrawn after every batch of 1,000 rows, ending on its own line", async () => {
    const sqlite = new SqliteDatabase(":memory:", { strict: true });
    const empty = await createTestDatabase();
    const db = await openPostgres(empty.url, 2);
    try {
      migrate(sqlite);
      const insert = sqlite.query("INSERT INTO events (id, type, payload, created_at) VALUES (?, 'contact.created', '{}', ?)");
      sqlite.transaction(() => {
        for (let i = 0; i < 2500; i++) insert.run(`evt_${String(i).padStart(5, "0")}`, i);
      })();
      let written = "";
      const result = await copyToPostgres(sqlite, db, empty.url, { isTTY: true, write: (text: string) => (written += text) });
      expect(result.find((r) => r.table === "events")).toEqual({ table: "events", rows: 2500 });
      const events = written.split("\n").find((line) => line.includes("events"))!;
      const bar = (filled: number, copied: number) => `${"events".padEnd(28)} [${"#".repeat(filled)}${" ".repeat(30 - filled)}] ${copied}/2500`;
      expect(events.split("\r").filter(Boolean)).toEqual([bar(0, 0), bar(12, 1000), bar(24, 2000), bar(30, 2500)]);
      expect(written.split("\n").filter(Boolean)).toHaveLength(result.length);
      expect(await db.get("SELECT count(*) AS n, min(id) AS first, max(id) AS last FROM events")).toEqual({ n: 2500, first: "evt_00000", last: "evt_02499" });
    } finally {
      sqlite.close();
      await db.close();
      await empty.drop();
    }
  });
});

describe("copy-to-postgres: a target written to around the copy", () => {
  /** started runs the command line from source in the background and collects its answer. */
  function started(args: string[]) {
    const proc = Bun.spawn([...SOURCE, ...args], { cwd: tempDir("copy-race"), env: { PATH: process.env.PATH ?? "" }, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
    return (async () => ({ exitCode: await proc.exited, stdout: await new Response(proc.stdout).text(), stderr: await new Response(proc.stderr).text() }))();
  }

  test("a row written while the copy waited for the write lock makes it refuse, exit 2, and that row stays", async () => {
    const dataDir = tempDir("copy-race-source");
    expect(runCli([...SOURCE, "migrate", "--data-dir", dataDir]).exitCode).toBe(0);
    expect(runCli([...SOURCE, "token", "create", "--name", "from sqlite", "--data-dir", dataDir]).exitCode).toBe(0);
    const empty = await createTestDatabase();
    const admin = new SQL({ url: empty.url, max: 2 });
    // Waits on this database only: the test server's other databases have sessions of their own.
    const waiting = async () =>
      (await admin`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)[0].n as number;
    try {
      expect(runCli([...SOURCE, "migrate", "--database-url", empty.url]).exitCode).toBe(0);
      // Another instance's write holds the lock while the copy, its emptiness checked, waits for it;
      // that write adds a user and commits.
      const holder = await admin.reserve();
      await holder`BEGIN`;
      await holder`SELECT pg_advisory_xact_lock(${WRITE_LOCK}::bigint)`;
      const copy = started(["copy-to-postgres", "--data-dir", dataDir, "--database-url", empty.url]);
      await waitFor(async () => (await waiting()) >= 1, "the copy to wait for the lock");
      await holder`INSERT INTO users (id, name, email, created_at, updated_at) VALUES ('usr_01M8RACE00000000000000000', 'Made meanwhile', 'meanwhile@example.com', 1, 1)`;
      await holder`COMMIT`;
      holder.release();
      expect(await copy).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: `crm: the PostgreSQL database at ${empty.url} already holds data (in users); copy-to-postgres copies only into an empty database\n`,
      });
      expect(await admin`SELECT name FROM users`).toEqual([{ name: "Made meanwhile" }]);
      expect(await admin`SELECT count(*)::int AS n FROM api_tokens`).toEqual([{ n: 0 }]);
    } finally {
      await admin.close();
      await empty.drop();
    }
  }, 60_000);

  test("a target on which serve started once (its one-time setup link and its key's check value stored) still takes the copy, and then takes the data directory's key, not the one it started with", async () => {
    const dataDir = tempDir("copy-after-serve-source");
    // Served once, the data directory records the check value of the key it created.
    const local = await spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--log-level", "error"]);
    expect((await local.stopWith("SIGTERM")).exitCode).toBe(0);
    expect(runCli([...SOURCE, "token", "create", "--name", "from sqlite", "--data-dir", dataDir]).exitCode).toBe(0);
    const empty = await createTestDatabase();
    const db = await openPostgres(empty.url, 1);
    try {
      const keyFile = writeSecretsKeyFile(join(tempDir("copy-after-serve-key"), "secrets.key"));
      const server = await spawnServer([...SOURCE, "serve", "--port", "0", "--database-url", empty.url, "--secrets-key-file", keyFile, "--log-level", "error"]);
      expect((await server.stopWith("SIGTERM")).exitCode).toBe(0);
      expect(await db.get("SELECT count(*)::int AS n FROM operator_setup_codes")).toEqual({ n: 1 });
      const copy = runCli([...SOURCE, "copy-to-postgres", "--data-dir", dataDir, "--database-url", empty.url]);
      expect(copy.exitCode).toBe(0);
      expect(await db.all("SELECT name FROM api_tokens")).toEqual([{ name: "from sqlite" }]);
      expect(runCli([...SOURCE, "serve", "--port", "0", "--database-url", empty.url, "--secrets-key-file", keyFile])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: `crm: secrets key file ${keyFile} is not the key this database was used with (it keeps a check value of that key, and of any signing secrets sealed with it); use the key file the database was used with (--secrets-key-file, CRM_SECRETS_KEY_FILE), after crm secrets-key rotate the new one it was given\n`,
      });
      const copied = await spawnServer([...SOURCE, "serve", "--port", "0", "--database-url", empty.url, "--secrets-key-file", join(dataDir, "secrets.key"), "--log-level", "error"]);
      expect((await copied.stopWith("SIGTERM")).exitCode).toBe(0);
    } finally {
      await db.close();
      await empty.drop();
    }
  }, 60_000);
});

describe("copy-to-postgres: a data directory written to during the copy", () => {
  test("the copy is one moment of it: a contact created after its table was copied is left out, and so is its count", async () => {
    const dataDir = tempDir("copy-moving-source");
    expect(runCli([...SOURCE, "migrate", "--data-dir", dataDir]).exitCode).toBe(0);
    const writer = new SqliteDatabase(databaseFile(dataDir));
    const reader = new SqliteDatabase(databaseFile(dataDir), { readonly: true });
    const empty = await createTestDatabase();
    const db = await openPostgres(empty.url, 1);
    try {
      const createContact = (id: string) => writer.run("INSERT INTO contacts (id, first_name, created_at, updated_at) VALUES (?, 'Ada', 1, 1)", [id]);
      createContact("con_before");
      // Another command writing to the data directory: a contact lands once contacts are copied, before row_counts is.
      const progress = { write: (text: string) => text.startsWith("copied contacts:") && createContact("con_meanwhile") };
      const result = await copyToPostgres(reader, db, empty.url, progress);
      expect(result.filter((r) => r.table === "contacts" || r.table === "row_counts")).toEqual([
        { table: "contacts", rows: 1 },
        { table: "row_counts", rows: 1 },
      ]);
      expect(await db.get("SELECT (SELECT string_agg(id, ',') FROM contacts) AS ids, (SELECT n FROM row_counts WHERE table_name = 'contacts') AS counted")).toEqual({ ids: "con_before", counted: 1 });
      expect(writer.query("SELECT count(*) AS n FROM contacts").get()).toEqual({ n: 2 });
    } finally {
      writer.close();
      reader.close();
      await db.close();
      await empty.drop();
    }
  });
});

describe("copy-to-postgres: a copy that fails part-way", () => {
  test("rolls back whole, says which table and why in one line (exit 1), and runs again once the cause is fixed", async () => {
    const dataDir = tempDir("copy-broken");
    const empty = await createTestDatabase();
    const db = await openPostgres(empty.url, 1);
    try {
      expect(runCli([...SOURCE, "migrate", "--data-dir", dataDir]).exitCode).toBe(0);
      // A contact pointing at a user that is not there: SQLite without foreign_keys takes it, PostgreSQL refuses it.
      const sqlite = new SqliteDatabase(databaseFile(dataDir));
      sqlite.run("INSERT INTO contacts (id, first_name, assigned_user_id, created_at, updated_at) VALUES ('con_1', 'Ada', 'usr_missing', 1, 1)");
      const failed = runCli([...SOURCE, "copy-to-postgres", "--data-dir", dataDir, "--database-url", empty.url]);
      expect({ exitCode: failed.exitCode, stdout: failed.stdout, lastLine: failed.stderr.trimEnd().split("\n").at(-1) }).toEqual({
        exitCode: 1,
        stdout: "",
        lastLine: 'crm: copy-to-postgres stopped and rolled back, no row was written: copying contacts: insert or update on table "contacts" violates foreign key constraint "contacts_assigned_user_id_fkey"',
      });
      expect(await db.get("SELECT (SELECT count(*) FROM contacts) AS contacts, (SELECT n FROM row_counts) AS counted, (SELECT count(*) FROM contact_filter_counts) AS filters")).toEqual({ contacts: 0, counted: 0, filters: 0 });

      sqlite.run("INSERT INTO users (id, name, email, created_at, updated_at) VALUES ('usr_missing', 'Found', 'found@example.com', 1, 1)");
      sqlite.close();
      const again = runCli([...SOURCE, "copy-to-postgres", "--data-dir", dataDir, "--database-url", empty.url]);
      expect(again.exitCode).toBe(0);
      expect(await db.all("SELECT id, assigned_user_id FROM contacts")).toEqual([{ id: "con_1", assigned_user_id: "usr_missing" }]);
      expect(await db.get("SELECT n FROM row_counts WHERE table_name = 'contacts'")).toEqual({ n: 1 });
    } finally {
      await db.close();
      await empty.drop();
    }
  });
});

describe("copy-to-postgres: another application's table of the database held locked", () => {
  test("a lock another session holds on a table that is not the service's (a VACUUM, a CREATE INDEX CONCURRENTLY) does not fail the copy: it waits for the lock, as the command runs without a lock_timeout, and exits 0 with every row copied", async () => {
    const dataDir = tempDir("copy-other-app");
    const empty = await createTestDatabase();
    const other = new SQL({ url: empty.url, max: 1 });
    // Outside the locking transaction, where pg_stat_activity would stay as first read.
    const watcher = new SQL({ url: empty.url, max: 1 });
    try {
      expect(runCli([...SOURCE, "token", "create", "--name", "first", "--data-dir", dataDir]).exitCode).toBe(0);
      await other.unsafe("CREATE SCHEMA other_app; CREATE TABLE other_app.jobs (id int)");
      const copying = await other.begin(async (tx) => {
        // What a manual VACUUM or CREATE INDEX CONCURRENTLY of that table holds for its whole run.
        await tx`LOCK TABLE other_app.jobs IN SHARE UPDATE EXCLUSIVE MODE`;
        const copy = Bun.spawn([...SOURCE, "copy-to-postgres", "--data-dir", dataDir, "--database-url", empty.url], {
          env: { PATH: process.env.PATH ?? "", CRM_DATABASE_ANSWER_TIMEOUT_SECONDS: "1" },
          stdout: "pipe",
          stderr: "pipe",
        });
        // The copy's closing ANALYZE waits for the lock, which is let go once it has waited twice the answer timeout (or the copy gave up).
        const analyzeWaiting = async () =>
          (await watcher`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'crm' AND wait_event_type = 'Lock' AND query = 'ANALYZE' AND clock_timestamp() - query_start > interval '2 seconds'`)[0].n > 0;
        await waitFor(async () => copy.exitCode !== null || (await analyzeWaiting()), "the copy's ANALYZE to wait for the lock", 30_000);
        return copy;
      });
      const [exitCode, stdout] = await Promise.all([copying.exited, new Response(copying.stdout).text()]);
      expect({ exitCode, firstLine: stdout.split("\n")[0] }).toEqual({ exitCode: 0, firstLine: `copied 2 rows into ${empty.url}` });
      expect(await other.unsafe("SELECT name FROM public.api_tokens")).toEqual([{ name: "first" }]);
    } finally {
      await other.close();
      await watcher.close();
      await empty.drop();
    }
  });
});
