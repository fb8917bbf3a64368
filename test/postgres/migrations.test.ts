import { Database as SqliteDatabase } from "bun:sqlite";
import { SQL } from "bun";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { createApp, createRuntime } from "../../server/app.ts";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { migrate } from "../../server/db/migrations.ts";
import { openPostgres, type PostgresDatabase } from "../../server/db/postgres.ts";
import { POSTGRES_MIGRATIONS, migratePostgres, type PostgresMigration } from "../../server/db/postgres-migrations.ts";
import type { Db, SqlValue } from "../../server/db/sql.ts";
import { indexWaitingNames } from "../../server/contacts/store.ts";
import { createLogger } from "../../server/shared/log.ts";
import { tempDir } from "../ops/support.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { JOINED_NAME_WARNINGS, NEW_NAME_KEYS, joinedNameWarnings, storeAccountsKeyedTheOldWay } from "../support/account-name-keys.ts";
import { NFC_ROWS, READ_AFTER_NFC, nfcRows, readAfterNfc, storeContactsBeforeNfc } from "../support/nfd-before-upgrade.ts";
import { DOMAINS_AFTER, DOMAIN_WARNINGS, domainRows, storeDomainsBeforeUpgrade } from "../support/domains-before-upgrade.ts";
import { WHITE_SPACE_ROWS, WHITE_SPACE_WARNINGS, storeNamesBeforeWhiteSpace, whiteSpaceRows } from "../support/names-before-white-space.ts";
import { KEYED_ROWS, READ_AFTER_KEYS, keyedRows, readAfterKeys, storeContactsBeforeKeys } from "../support/names-before-keys.ts";
import { EMAILS_AFTER, storeDeletionsBeforeEmails, tombstoneEmails } from "../support/tombstones-before-emails.ts";
import { KEPT_BEFORE_UPGRADE, keepAnswersOfRecordsDeletedBeforeUpgrade, keptRows, replayKeptAnswers, tokenBeforeUpgrade } from "../support/deleted-before-upgrade.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

// The PostgreSQL migrations: applied once under concurrency, rolled back on failure, and giving
// the schema a fresh SQLite database has, so the same portable SQL runs on both.

const MIGRATIONS_DIR = join(import.meta.dir, "../../migrations/postgres");
/** SQLITE_ONLY are the FTS5 table and its shadow tables; PostgreSQL searches contacts.full_name instead. */
const SQLITE_ONLY = /^contacts_full_name/;
/** POSTGRES_ONLY is what only several instances need: the max_rate pacing they share (one SQLite process keeps it in memory). */
const POSTGRES_ONLY = ["webhook_send_pacing"];

const opened: { server: TestDatabase; db: PostgresDatabase }[] = [];

/** freshPostgres opens a new empty database on the test server, closed and dropped after the file. */
async function freshPostgres(pool = 3): Promise<PostgresDatabase> {
  const server = await createTestDatabase();
  const db = await openPostgres(server.url, pool);
  opened.push({ server, db });
  return db;
}

/** freshSqlite is an in-memory SQLite database migrated to the latest version. */
function freshSqlite(): SqliteDatabase {
  const sqlite = new SqliteDatabase(":memory:", { strict: true });
  sqlite.run("PRAGMA foreign_keys = ON");
  migrate(sqlite);
  return sqlite;
}

// A fresh SQLite database and a migrated PostgreSQL one, compared by the schema and behaviour tests.
let sqlite: SqliteDatabase;
let db: PostgresDatabase;

beforeAll(async () => {
  sqlite = freshSqlite();
  db = await freshPostgres();
  await migratePostgres(db);
}, 60_000);

afterAll(async () => {
  sqlite?.close();
  for (const { server, db } of opened) {
    await db.close();
    await server.drop();
  }
});

describe("postgres migrations: applying", () => {
  test("every file in migrations/postgres/ is registered, in order, with its exact text", () => {
    const files = readdirSync(MIGRATIONS_DIR).filter((f) => f.endsWith(".sql")).sort();
    expect(files.length).toBeGreaterThan(0);
    expect(POSTGRES_MIGRATIONS.map((m) => m.name)).toEqual(files);
    expect(POSTGRES_MIGRATIONS.map((m) => m.version)).toEqual(files.map((f) => Number(f.slice(0, 4))));
    for (const m of POSTGRES_MIGRATIONS) expect(m.sql).toBe(readFileSync(join(MIGRATIONS_DIR, m.name), "utf8"));
  });

  test("three instances migrating one fresh database at once apply each migration exactly once, without error", async () => {
    const fresh = await freshPostgres();
    const others = [await openPostgres(opened.at(-1)!.server.url, 2), await openPostgres(opened.at(-1)!.server.url, 2)];
    const before = Date.now();
    try {
      const results = await Promise.all([migratePostgres(fresh), migratePostgres(others[0]!), migratePostgres(others[1]!)]);
      expect(results.flat().sort()).toEqual(POSTGRES_MIGRATIONS.map((m) => m.name));
    } finally {
      await Promise.all(others.map((other) => other.close()));
    }
    const rows = await fresh.all<{ version: number; name: string; applied_at: number }>("SELECT version, name, applied_at FROM schema_migrations ORDER BY version");
    expect(rows.map((r) => ({ version: r.version, name: r.name }))).toEqual(POSTGRES_MIGRATIONS.map((m) => ({ version: m.version, name: m.name })));
    for (const row of rows) expect(row.applied_at).toBeGreaterThanOrEqual(before);
    expect(await migratePostgres(fresh)).toEqual([]);
  });

  test("a failing migration rolls back whole and is not recorded; the ones before it stay", async () => {
    const fresh = await freshPostgres();
    const migrations: PostgresMigration[] = [
      { version: 1, name: "0001_first.sql", sql: "CREATE TABLE first_table (id int PRIMARY KEY);" },
      { version: 2, name: "0002_broken.sql", sql: "CREATE TABLE second_table (id int PRIMARY KEY); INSERT INTO second_table VALUES (1); SELECT no_such_function();" },
      { version: 3, name: "0003_later.sql", sql: "CREATE TABLE third_table (id int PRIMARY KEY);" },
    ];
    await expect(migratePostgres(fresh, migrations)).rejects.toThrow("migration 0002_broken.sql failed, and nothing of it was applied (the database is as it was): function no_such_function() does not exist");
    expect(await fresh.all("SELECT version, name FROM schema_migrations")).toEqual([{ version: 1, name: "0001_first.sql" }]);
    expect(await fresh.all("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name")).toEqual([
      { table_name: "first_table" },
      { table_name: "schema_migrations" },
    ]);
  });

  test("a migration that needs a table another session holds (a report's open transaction that read it) gives up after its lock timeout, rolled back, with one line naming the session it waited for; it applies once the session lets go", async () => {
    const fresh = await freshPostgres();
    await migratePostgres(fresh);
    const next: PostgresMigration[] = [...POSTGRES_MIGRATIONS, { version: 9999, name: "9999_note.sql", sql: "ALTER TABLE contacts ADD COLUMN note text;" }];
    const report = new SQL({ url: opened.at(-1)!.server.url, max: 1, connection: { application_name: "report" } });
    try {
      const { outcome, pid } = await report.begin(async (tx) => {
        const [{ pid }] = await tx.unsafe("SELECT pg_backend_pid() AS pid");
        await tx.unsafe("SELECT count(*) FROM contacts");
        // Bounded, so that a migration waiting for as long as the lock is held fails the test instead of waiting for it.
        const outcome = await Promise.race([
          migratePostgres(fresh, next, undefined, 1000).then(
            (applied) => `applied ${applied.join(", ")}`,
            (error: Error) => `${error.name} ${error.message}`,
          ),
          Bun.sleep(20_000).then(() => "still waiting after 20 s"),
        ]);
        return { outcome, pid: pid as number };
      });
      expect(outcome).toMatch(
        new RegExp(
          `^Error cannot migrate the PostgreSQL database \\(--database-url, CRM_DATABASE_URL\\) to 9999_note\\.sql, and nothing of it was applied: it waited 1 s for a lock other sessions hold \\(a transaction left open, a long query, a VACUUM FULL\\), given up by its lock_timeout; blocking sessions: pid ${pid} \\(application report, role postgres, client 127\\.0\\.0\\.1, idle in transaction, in a transaction for \\d+ s\\); end them \\(SELECT pg_terminate_backend\\(pid\\)\\) or let them finish, then start again$`,
        ),
      );
      expect(await fresh.get("SELECT max(version) AS version FROM schema_migrations")).toEqual({ version: POSTGRES_MIGRATIONS.at(-1)!.version });
    } finally {
      await report.close();
    }
    expect(await migratePostgres(fresh, next, undefined, 1000)).toEqual(["9999_note.sql"]);
  });
});

describe("postgres migrations: databases of 0001 as first released", () => {
  test("0014 gives contact_tags the sort keys 0001 as first released lacked, so 0016 applies and tag rows follow their contacts", async () => {
    const old = await freshPostgres();
    await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version === 1));
    // What 0001 made until it took in SQLite 0014 (a database filled by copy-to-postgres of that time).
    await old.write((tx) =>
      tx.script(`DROP TRIGGER contact_tags_sort_keys ON contacts;
        DROP FUNCTION contact_tags_sort_keys();
        ALTER TABLE contact_tags DROP COLUMN created_at, DROP COLUMN updated_at, DROP COLUMN first_name, DROP COLUMN last_name, DROP COLUMN email;
        CREATE INDEX contact_tags_tag ON contact_tags (tag, contact_id);
        INSERT INTO contacts (id, first_name, email, created_at, updated_at) VALUES ('c1', 'Ada', 'ada@example.com', 5, 6);
        INSERT INTO contact_tags (contact_id, tag) VALUES ('c1', 'vip');`),
    );
    expect(await migratePostgres(old)).toEqual(POSTGRES_MIGRATIONS.filter((m) => m.version > 1).map((m) => m.name));
    // the names' copies are their keys since 0045
    const tags = "SELECT contact_id, tag, created_at, updated_at, first_name_key, last_name_key, email FROM contact_tags";
    expect(await old.all(tags)).toEqual([{ contact_id: "c1", tag: "vip", created_at: 5, updated_at: 6, first_name_key: "ada", last_name_key: null, email: "ada@example.com" }]);
    await old.run("UPDATE contacts SET updated_at = 7, last_name = 'King', last_name_key = 'king' WHERE id = 'c1'");
    expect(await old.all(tags)).toEqual([{ contact_id: "c1", tag: "vip", created_at: 5, updated_at: 7, first_name_key: "ada", last_name_key: "king", email: "ada@example.com" }]);
    for (const table of ["contact_tags", "contact_accounts", "contacts"]) {
      expect(await postgresColumns(old, table)).toEqual(await postgresColumns(db, table));
      expect(await postgresIndexes(old, table)).toEqual(await postgresIndexes(db, table));
    }
    const triggers = (on: Db) => on.all("SELECT tgname FROM pg_trigger WHERE tgrelid = 'contacts'::regclass AND NOT tgisinternal ORDER BY tgname");
    expect(await triggers(old)).toEqual(await triggers(db));
  });

  test("0014 changes nothing on a database whose 0001 carries the sort keys, before 0016 or after it", async () => {
    const fresh = await freshPostgres();
    await migratePostgres(fresh, POSTGRES_MIGRATIONS.filter((m) => m.version !== 14));
    expect(await migratePostgres(fresh)).toEqual(["0014_contact_tags_sort_keys.sql"]);
    for (const table of ["contact_tags", "contacts"]) expect(await postgresIndexes(fresh, table)).toEqual(await postgresIndexes(db, table));
    expect(await fresh.all("SELECT proname FROM pg_proc WHERE proname LIKE 'contact_%sort_keys' ORDER BY proname")).toEqual([{ proname: "contact_relations_sort_keys" }]);
  });
});

describe("postgres migrations: data", () => {
  test("0026 gives each operator the latest use of their sessions, and none to an operator without a session", async () => {
    const old = await freshPostgres();
    await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version < 26));
    await old.write((tx) =>
      tx.script(`INSERT INTO operators (id, email, password_hash, created_at, updated_at) VALUES ('opr_a', 'a@crm.test', 'h', 1, 1), ('opr_b', 'b@crm.test', 'h', 2, 2);
        INSERT INTO operator_sessions (id_hash, operator_id, created_at, last_seen_at) VALUES ('\\x01', 'opr_a', 10, 30), ('\\x02', 'opr_a', 20, 25);`),
    );
    expect(await migratePostgres(old)).toEqual(POSTGRES_MIGRATIONS.filter((m) => m.version >= 26).map((m) => m.name));
    expect(await old.all("SELECT id, last_seen_at FROM operators ORDER BY id")).toEqual([
      { id: "opr_a", last_seen_at: 30 },
      { id: "opr_b", last_seen_at: null },
    ]);
  });
});

describe("postgres migrations: data, account names", () => {
  test("0034 rekeys the account names full case folding keys otherwise (ß and ẞ as ss, a ligature, Greek with dialytika, Turkish İ and ı), in its transaction, and warns of each group of accounts whose keys it joins once it committed; the others are left alone", async () => {
    const old = await freshPostgres();
    await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version < 34));
    await storeAccountsKeyedTheOldWay(old);
    const warnings: unknown[] = [];
    expect(await migratePostgres(old, POSTGRES_MIGRATIONS, (...warning) => warnings.push(warning))).toEqual(POSTGRES_MIGRATIONS.filter((m) => m.version >= 34).map((m) => m.name));
    expect(await old.all("SELECT id, name_key FROM accounts ORDER BY id COLLATE \"C\"")).toEqual(NEW_NAME_KEYS);
    expect(warnings).toEqual(JOINED_NAME_WARNINGS);
  });
});

describe("postgres migrations: data, account names keyed the old way after 0034", () => {
  test("0042 rekeys again the account names an older instance keyed the old way after 0034 (its writes waited for the write lock behind the migrations), warning of the groups it joins; with none, it changes nothing and warns of nothing", async () => {
    const old = await freshPostgres();
    await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version < 42));
    await storeAccountsKeyedTheOldWay(old);
    const warnings: unknown[] = [];
    expect(await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version <= 42), (...warning) => warnings.push(warning))).toEqual(["0042_account_names_rekeyed_again.sql"]);
    expect(await old.all("SELECT id, name_key FROM accounts ORDER BY id COLLATE \"C\"")).toEqual(NEW_NAME_KEYS);
    expect(warnings).toEqual(joinedNameWarnings("0042_account_names_rekeyed_again.sql"));
    await old.write((tx) => tx.run("DELETE FROM schema_migrations WHERE version = 42"));
    expect(await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version <= 42), (...warning) => warnings.push(warning))).toEqual(["0042_account_names_rekeyed_again.sql"]);
    expect(await old.all("SELECT id, name_key FROM accounts ORDER BY id COLLATE \"C\"")).toEqual(NEW_NAME_KEYS);
    expect(warnings).toEqual(joinedNameWarnings("0042_account_names_rekeyed_again.sql"));
  });

  test("account names an older instance keyed the old way after 0042 stay so at a start; 0042's row deleted, crm migrate applies it again, which rekeys them (README, Upgrading)", async () => {
    const old = await freshPostgres();
    await migratePostgres(old);
    await storeAccountsKeyedTheOldWay(old);
    const oldKeys = await old.all("SELECT id, name_key FROM accounts ORDER BY id COLLATE \"C\"");
    expect(await migratePostgres(old)).toEqual([]);
    expect(await old.all("SELECT id, name_key FROM accounts ORDER BY id COLLATE \"C\"")).toEqual(oldKeys);
    // As README says to: with every instance stopped.
    await old.write((tx) => tx.run("DELETE FROM schema_migrations WHERE version = 42"));
    const warnings: unknown[] = [];
    expect(await migratePostgres(old, POSTGRES_MIGRATIONS, (...warning) => warnings.push(warning))).toEqual(["0042_account_names_rekeyed_again.sql"]);
    expect(await old.all("SELECT id, name_key FROM accounts ORDER BY id COLLATE \"C\"")).toEqual(NEW_NAME_KEYS);
    expect(warnings).toEqual(joinedNameWarnings("0042_account_names_rekeyed_again.sql"));
  });
});

describe("postgres migrations: data, account domains", () => {
  test("0051 folds the white space of the account names' keys and the contact names' sort keys (a no-break space, a doubled space, spaces at the ends), on the tag and account rows too, with no new version or event, warning of the accounts it gives one key", async () => {
    const old = await freshPostgres();
    await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version < 50));
    await storeNamesBeforeWhiteSpace(old);
    const warnings: unknown[] = [];
    expect(await migratePostgres(old, POSTGRES_MIGRATIONS, (...warning) => warnings.push(warning))).toEqual(POSTGRES_MIGRATIONS.filter((m) => m.version >= 50).map((m) => m.name));
    expect(await whiteSpaceRows(old)).toEqual(WHITE_SPACE_ROWS);
    expect(warnings).toEqual(WHITE_SPACE_WARNINGS);
  });

  test("0048 drops the trailing dot of the domains that are host names spelt with one, with no new version or event, warning of a domain it gives accounts that another had; a domain that is no host name is left as it is, and named in a warning", async () => {
    const old = await freshPostgres();
    await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version < 48));
    await storeDomainsBeforeUpgrade(old);
    const warnings: unknown[] = [];
    expect(await migratePostgres(old, POSTGRES_MIGRATIONS, (...warning) => warnings.push(warning))).toEqual(POSTGRES_MIGRATIONS.filter((m) => m.version >= 48).map((m) => m.name));
    expect(await domainRows(old)).toEqual(DOMAINS_AFTER);
    expect(warnings).toEqual(DOMAIN_WARNINGS);
    expect(await old.all("SELECT id FROM events")).toEqual([]);
  });
});

describe("postgres migrations: data, deleted contacts by email", () => {
  test("0053 gives each contact tombstone the email its newest event held, so Find finds it; an erased contact's, one without an email or events, and an account's get none", async () => {
    const old = await freshPostgres();
    await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version < 53));
    await storeDeletionsBeforeEmails(old);
    expect(await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version <= 53))).toEqual(["0053_deleted_contacts_by_email.sql"]);
    expect(await tombstoneEmails(old)).toEqual(EMAILS_AFTER);
  });
});

describe("postgres migrations: data, links of removed operators", () => {
  test("0043 withdraws the one-time links of operators removed before it; links of current operators and of the command line stay", async () => {
    const old = await freshPostgres();
    await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version < 43));
    await old.write(async (tx) => {
      await tx.run("INSERT INTO operators (id, email, password_hash, created_at, updated_at) VALUES ('opr_kept', 'kept@example.com', 'x', 1, 1)");
      const later = Date.now() + 3_600_000;
      for (const [code, purpose, email, createdBy] of [
        [1, "reset", "kept@example.com", "opr_removed"],
        [2, "invite", "backdoor@example.net", "opr_removed"],
        [3, "invite", "colleague@example.com", "opr_kept"],
        [4, "invite", "cli@example.com", null],
      ] as const) {
        await tx.run("INSERT INTO operator_links (code_hash, purpose, email, created_by, created_at, expires_at) VALUES (?, ?, ?, ?, 1, ?)", [new Uint8Array([code]), purpose, email, createdBy, later]);
      }
    });
    expect(await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version <= 43))).toEqual(["0043_links_of_removed_operators.sql"]);
    expect(await old.all("SELECT email, created_by FROM operator_links ORDER BY email COLLATE \"C\"")).toEqual([
      { email: "cli@example.com", created_by: null },
      { email: "colleague@example.com", created_by: "opr_kept" },
    ]);
  });
});

describe("postgres migrations: data, names and tags in NFC", () => {
  test("0040 rewrites the names and tags stored before they were kept in NFC, café in both forms kept once, with their tag rows, counts, name copies and search, and no new version or event: the contact's own values find it again", async () => {
    const old = await freshPostgres();
    await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version < 39));
    await storeContactsBeforeNfc(old);
    expect(await migratePostgres(old)).toEqual(POSTGRES_MIGRATIONS.filter((m) => m.version >= 39).map((m) => m.name));
    expect(await nfcRows(old)).toEqual(NFC_ROWS);
    const { token } = await createApiToken(old, "t");
    const dataDir = tempDir("nfc");
    try {
      const config = { ...DEFAULT_CONFIG, dataDir, databaseUrl: opened.at(-1)!.server.url, secretsKeyFile: writeSecretsKeyFile(join(dataDir, "secrets.key")), logLevel: "error" as const };
      const app = createApp(await createRuntime({ db: old, config, log: createLogger("error") }));
      expect(await readAfterNfc(app, token)).toEqual(READ_AFTER_NFC);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe("postgres migrations: data, name sort keys", () => {
  test("0045 keys the names of the contacts stored before it, on their tag and account rows too, with no new version or event: the name sorts read them in the order SQLite reads them", async () => {
    const old = await freshPostgres();
    await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version < 45));
    await storeContactsBeforeKeys(old);
    expect(await migratePostgres(old)).toEqual(POSTGRES_MIGRATIONS.filter((m) => m.version >= 45).map((m) => m.name));
    expect(await keyedRows(old)).toEqual(KEYED_ROWS);
    const { token } = await createApiToken(old, "t");
    const dataDir = tempDir("keys");
    try {
      const config = { ...DEFAULT_CONFIG, dataDir, databaseUrl: opened.at(-1)!.server.url, secretsKeyFile: writeSecretsKeyFile(join(dataDir, "secrets.key")), logLevel: "error" as const };
      const app = createApp(await createRuntime({ db: old, config, log: createLogger("error") }));
      expect(await readAfterKeys(app, token)).toEqual(READ_AFTER_KEYS);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe("postgres migrations: data, sign-in throttle", () => {
  test("0028 forgets the sign-in failures and turns kept by email, and keeps an address's", async () => {
    const old = await freshPostgres();
    await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version < 28));
    await old.write((tx) =>
      tx.script(`INSERT INTO login_failures (scope, subject, failures, window_start_at, last_failure_at) VALUES
          ('account', 'ops@crm.test', 2, 1, 2), ('pair', 'ops@crm.test 192.0.2.1', 2, 1, 2), ('address', '192.0.2.1', 2, 1, 2);
        INSERT INTO sign_in_turns (pace_key, next_turn_at) VALUES ('account:ops@crm.test', 5), ('address:192.0.2.1', 5);`),
    );
    expect(await migratePostgres(old)).toEqual(POSTGRES_MIGRATIONS.filter((m) => m.version >= 28).map((m) => m.name));
    expect(await old.all("SELECT scope, subject, failures FROM login_failures")).toEqual([{ scope: "address", subject: "192.0.2.1", failures: 2 }]);
    expect(await old.all("SELECT pace_key FROM sign_in_turns")).toEqual([{ pace_key: "address:192.0.2.1" }]);
  });
});

describe("postgres migrations: data, kept answers by resource", () => {
  test("0030 records the resource each kept answer shows, none for a batch's or a reservation", async () => {
    const old = await freshPostgres();
    await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version < 30));
    await old.write((tx) =>
      tx.script(`INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, created_at) VALUES
        ('tok_1', 'POST', '/public/v1/contacts', 'create', '\\x01', 201, '{"data":{"id":"con_a","email":"a@example.com"}}', 1),
        ('tok_1', 'POST', '/public/v1/contacts/batch', 'batch', '\\x01', 200, '{"data":[{"status":"created","id":"con_b"}]}', 1),
        ('tok_1', 'POST', '/public/v1/contacts', 'reserved', '\\x01', 0, '', 1);`),
    );
    expect(await migratePostgres(old)).toEqual(POSTGRES_MIGRATIONS.filter((m) => m.version >= 30).map((m) => m.name));
    expect(await old.all("SELECT idem_key, resource_id FROM idempotency_keys ORDER BY idem_key")).toEqual([
      { idem_key: "batch", resource_id: null },
      { idem_key: "create", resource_id: "con_a" },
      { idem_key: "reserved", resource_id: null },
    ]);
  });

  test("0030 withdraws, as their delete does now, the kept answers of contacts and accounts deleted before it: their replays answer 410 replay-resource-deleted, a live contact's still replays", async () => {
    const old = await freshPostgres();
    await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version < 30));
    const { token, id } = await tokenBeforeUpgrade(old);
    await keepAnswersOfRecordsDeletedBeforeUpgrade(old, id);
    const dataDir = tempDir("kept-answers");
    try {
      const config = { ...DEFAULT_CONFIG, dataDir, databaseUrl: opened.at(-1)!.server.url, secretsKeyFile: writeSecretsKeyFile(join(dataDir, "secrets.key")), logLevel: "error" as const };
      const app = createApp(await createRuntime({ db: old, config, log: createLogger("error") }));
      expect(await replayKeptAnswers(app, token)).toEqual(KEPT_BEFORE_UPGRADE.map((k) => k.replay));
      expect(await keptRows(old)).toEqual(KEPT_BEFORE_UPGRADE.map((k) => k.row));
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe("postgres migrations: data, the name search", () => {
  test("0027 makes the searched full_name the one the API returns, outer spaces included, searched through the trigram index again", async () => {
    const old = await freshPostgres();
    await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version < 27));
    await old.write((tx) =>
      tx.run(`INSERT INTO contacts (id, first_name, last_name, created_at, updated_at) VALUES
        ('c1', ' Lead', 'Smith', 1, 1), ('c2', 'Trail ', NULL, 1, 1), ('c3', NULL, '  Solo', 1, 1), ('c4', 'Ada', 'Lovelace', 1, 1), ('c5', '', 'Kay', 1, 1)`),
    );
    expect(await migratePostgres(old)).toEqual(POSTGRES_MIGRATIONS.filter((m) => m.version >= 27).map((m) => m.name));
    expect(await old.all("SELECT id, full_name FROM contacts ORDER BY id")).toEqual([
      { id: "c1", full_name: " Lead Smith" },
      { id: "c2", full_name: "Trail " },
      { id: "c3", full_name: "  Solo" },
      { id: "c4", full_name: "Ada Lovelace" },
      { id: "c5", full_name: "Kay" },
    ]);
    await old.write((tx) => tx.run("UPDATE contacts SET first_name = 'Ada ', last_name = NULL WHERE id = 'c4'"));
    expect(await old.get("SELECT full_name FROM contacts WHERE id = 'c4'")).toEqual({ full_name: "Ada " });
  });
});

describe("postgres migrations: data, sort keys in byte order", () => {
  test("0035 collates the sort keys \"C\" on a database migrated before it, keeping their rows, indexes, the name search and the copies on tag and account rows", async () => {
    const old = await freshPostgres();
    await migratePostgres(old, POSTGRES_MIGRATIONS.filter((m) => m.version < 35));
    await old.write(async (tx) => {
      await tx.run(`INSERT INTO contacts (id, first_name, last_name, email, created_at, updated_at) VALUES
        ('c1', 'σίσυφος', 'Lee', 'a_b@example.com', 1, 1), ('c2', 'ΣΊΣΥΦΟΣ', NULL, 'a+b@example.com', 1, 1), ('c3', 'anne', ' Kay', NULL, 1, 1), ('c4', 'Anne', 'kay', 'a-b@example.com', 1, 1)`);
      await tx.run("INSERT INTO accounts (id, name, name_key, domain, created_at, updated_at) VALUES ('a1', 'Acme', 'acme', 'a-b.example', 1, 1)");
      await tx.run("INSERT INTO contact_tags (contact_id, tag, created_at, updated_at, first_name, last_name, email) SELECT id, 't', created_at, updated_at, first_name, last_name, email FROM contacts");
      await tx.run("INSERT INTO contact_accounts (contact_id, account_id, position, created_at, updated_at, first_name, last_name, email) SELECT id, 'a1', 0, created_at, updated_at, first_name, last_name, email FROM contacts");
    });
    const indexes = "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename IN ('contacts', 'contact_tags', 'contact_accounts', 'accounts') ORDER BY indexname";
    const before = await old.all<{ indexname: string; indexdef: string }>(indexes);
    // The tests' database sorts in code point order already, and its citext folds every script.
    const byFirstName = "SELECT id FROM contacts ORDER BY first_name, id";
    expect((await old.all<{ id: string }>(byFirstName)).map((r) => r.id)).toEqual(["c3", "c4", "c1", "c2"]);

    // Up to the schema 0035 left: 0045 replaced the tag and account rows' names by their keys.
    const before45 = POSTGRES_MIGRATIONS.filter((m) => m.version < 45);
    expect(await migratePostgres(old, before45)).toEqual(before45.filter((m) => m.version >= 35).map((m) => m.name));
    const collated = await old.all(
      `SELECT table_name, column_name, collation_name FROM information_schema.columns WHERE table_schema = current_schema()
       AND column_name IN ('first_name', 'last_name', 'email', 'name_key', 'domain', 'full_name') AND table_name IN ('contacts', 'contact_tags', 'contact_accounts', 'accounts') ORDER BY 1, 2`,
    );
    const keyColumns = (table: string, columns: string[]) => columns.map((column_name) => ({ table_name: table, column_name, collation_name: "C" }));
    expect(collated).toEqual([
      ...keyColumns("accounts", ["domain", "name_key"]),
      ...keyColumns("contact_accounts", ["email", "first_name", "last_name"]),
      ...keyColumns("contact_tags", ["email", "first_name", "last_name"]),
      ...keyColumns("contacts", ["email", "first_name"]),
      { table_name: "contacts", column_name: "full_name", collation_name: null },
      ...keyColumns("contacts", ["last_name"]),
    ]);
    expect((await old.all<{ indexname: string }>(indexes)).map((r) => r.indexname)).toEqual(before.map((r) => r.indexname));
    // citext still lowercases by the database's locale (σίσυφος and ΣΊΣΥΦΟΣ tie), then compares bytes.
    expect((await old.all<{ id: string }>(byFirstName)).map((r) => r.id)).toEqual(["c3", "c4", "c1", "c2"]);
    expect((await old.all<{ id: string }>("SELECT id FROM contacts ORDER BY email NULLS FIRST, id")).map((r) => r.id)).toEqual(["c3", "c2", "c4", "c1"]);
    expect(await old.all("SELECT id, full_name FROM contacts WHERE full_name ILIKE '%ΣΊΣ%' ORDER BY id")).toEqual([
      { id: "c1", full_name: "σίσυφος Lee" },
      { id: "c2", full_name: "ΣΊΣΥΦΟΣ" },
    ]);
    await old.write((tx) => tx.run("UPDATE contacts SET first_name = 'Zoë', email = 'z@example.com', updated_at = 2 WHERE id = 'c3'"));
    const copies = "SELECT first_name, email, updated_at FROM %s WHERE contact_id = 'c3'";
    expect([await old.all(copies.replace("%s", "contact_tags")), await old.all(copies.replace("%s", "contact_accounts")), await old.get("SELECT full_name FROM contacts WHERE id = 'c3'")]).toEqual([
      [{ first_name: "Zoë", email: "z@example.com", updated_at: 2 }],
      [{ first_name: "Zoë", email: "z@example.com", updated_at: 2 }],
      { full_name: "Zoë  Kay" },
    ]);
  });
});

interface ColumnShape {
  name: string;
  notNull: boolean;
  defaultValue: string | null;
}

interface IndexShape {
  columns: string[];
  unique: boolean;
  partial: string | null;
}

/** defaultText spells a column default without PostgreSQL's casts, as SQLite shows it. */
function defaultText(value: string | null): string | null {
  return value === null ? null : value.replace(/::[a-z ]+$/, "");
}

function sqliteTables(sqlite: SqliteDatabase): string[] {
  return sqlite
    .query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    .all()
    .map((r) => r.name)
    .filter((name) => !SQLITE_ONLY.test(name));
}

async function postgresColumns(db: Db, table: string): Promise<ColumnShape[]> {
  const rows = await db.all<{ name: string; nullable: string; dflt: string | null; generated: string }>(
    `SELECT column_name AS name, is_nullable AS nullable, column_default AS dflt, is_generated AS generated
     FROM information_schema.columns WHERE table_schema = 'public' AND table_name = ? ORDER BY column_name`,
    [table],
  );
  return rows.filter((r) => r.generated === "NEVER").map((r) => ({ name: r.name, notNull: r.nullable === "NO", defaultValue: defaultText(r.dflt) }));
}

function sqliteColumns(sqlite: SqliteDatabase, table: string): ColumnShape[] {
  return sqlite
    .query<{ name: string; notnull: number; dflt_value: string | null; pk: number }, []>(`SELECT * FROM pragma_table_info('${table}') ORDER BY name`)
    .all()
    // A primary key column is NOT NULL on PostgreSQL whatever it says; on SQLite only WITHOUT ROWID enforces it.
    .map((c) => ({ name: c.name, notNull: c.notnull === 1 || c.pk > 0, defaultValue: c.dflt_value }));
}

/** sqliteIndexes returns every index of a table by name (autoindexes of keys by their columns). */
function sqliteIndexes(sqlite: SqliteDatabase, table: string): Record<string, IndexShape> {
  const shapes: Record<string, IndexShape> = {};
  for (const index of sqlite.query<{ name: string; unique: number; origin: string; partial: number }, []>(`SELECT * FROM pragma_index_list('${table}')`).all()) {
    const columns = sqlite.query<{ name: string }, []>(`SELECT name FROM pragma_index_info('${index.name}') ORDER BY seqno`).all().map((c) => c.name);
    const sql = sqlite.query<{ sql: string | null }, [string]>("SELECT sql FROM sqlite_master WHERE name = ?").get(index.name)?.sql ?? null;
    const partial = index.partial ? sql!.replace(/^.* WHERE /s, "") : null;
    shapes[index.origin === "c" ? index.name : `key(${columns.join(", ")})`] = { columns, unique: index.unique === 1, partial };
  }
  // An INTEGER PRIMARY KEY is the rowid itself and has no index of its own; PostgreSQL indexes it.
  const keyColumns = sqlite.query<{ name: string; pk: number }, []>(`SELECT name, pk FROM pragma_table_info('${table}') WHERE pk > 0 ORDER BY pk`).all().map((c) => c.name);
  const keyName = `key(${keyColumns.join(", ")})`;
  if (keyColumns.length > 0 && !shapes[keyName]) shapes[keyName] = { columns: keyColumns, unique: true, partial: null };
  return shapes;
}

async function postgresIndexes(db: Db, table: string): Promise<Record<string, IndexShape>> {
  const rows = await db.all<{ name: string; columns: string; unique: number; constraint_backed: number; partial: string | null }>(
    `SELECT i.relname AS name, ix.indisunique::int AS unique, (c.conname IS NOT NULL)::int AS constraint_backed,
            pg_get_expr(ix.indpred, ix.indrelid) AS partial,
            (SELECT string_agg(a.attname, ', ' ORDER BY k.ord) FROM unnest(ix.indkey) WITH ORDINALITY AS k(attnum, ord)
               JOIN pg_attribute a ON a.attrelid = ix.indrelid AND a.attnum = k.attnum) AS columns
     FROM pg_index ix JOIN pg_class i ON i.oid = ix.indexrelid JOIN pg_class t ON t.oid = ix.indrelid
     LEFT JOIN pg_constraint c ON c.conindid = ix.indexrelid
     WHERE t.relname = ? AND t.relnamespace = 'public'::regnamespace`,
    [table],
  );
  const shapes: Record<string, IndexShape> = {};
  for (const row of rows) {
    const columns = row.columns.split(", ");
    shapes[row.constraint_backed ? `key(${row.columns})` : row.name] = { columns, unique: row.unique === 1, partial: row.partial };
  }
  return shapes;
}

/** normalisedPredicate spells a partial-index condition without PostgreSQL's casts and parentheses, as SQLite keeps it. */
function normalisedPredicate(predicate: string | null): string | null {
  return predicate === null ? null : predicate.replace(/::text/g, "").replace(/[()]/g, "").replace(/\s+/g, " ").trim();
}

async function postgresForeignKeys(db: Db, table: string): Promise<string[]> {
  const rows = await db.all<{ definition: string }>(
    "SELECT pg_get_constraintdef(oid) AS definition FROM pg_constraint WHERE contype = 'f' AND conrelid = ?::regclass ORDER BY 1",
    [table],
  );
  return rows.map((r) => r.definition.replace(/\s+/g, " "));
}

function sqliteForeignKeys(sqlite: SqliteDatabase, table: string): string[] {
  return sqlite
    .query<{ from: string; table: string; to: string; on_delete: string }, []>(`SELECT * FROM pragma_foreign_key_list('${table}')`)
    .all()
    .map((fk) => `FOREIGN KEY (${fk.from}) REFERENCES ${fk.table}(${fk.to})${fk.on_delete === "NO ACTION" ? "" : ` ON DELETE ${fk.on_delete}`}`)
    .sort();
}

describe("postgres migrations: the schema equals SQLite's", () => {
  test("the same tables", async () => {
    const tables = await db.all<{ name: string }>("SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name COLLATE \"C\"");
    expect(tables.map((t) => t.name).filter((name) => !POSTGRES_ONLY.includes(name))).toEqual(sqliteTables(sqlite));
  });

  test("every table has the same columns, NOT NULL constraints and defaults (plus the generated contacts.full_name)", async () => {
    for (const table of sqliteTables(sqlite)) {
      expect({ table, columns: await postgresColumns(db, table) }).toEqual({ table, columns: sqliteColumns(sqlite, table) });
    }
    expect(await db.get("SELECT is_generated, generation_expression FROM information_schema.columns WHERE table_name = 'contacts' AND column_name = 'full_name'")).toEqual({
      is_generated: "ALWAYS",
      generation_expression: [
        "",
        "CASE",
        "    WHEN (((first_name)::text <> ''::text) AND ((last_name)::text <> ''::text)) THEN (((first_name)::text || ' '::text) || (last_name)::text)",
        "    ELSE COALESCE(NULLIF((first_name)::text, ''::text), (last_name)::text, ''::text)",
        "END",
      ].join("\n"),
    });
  });

  test("every table has the same keys and named indexes (partial ones with the same condition), and the trigram index", async () => {
    for (const table of sqliteTables(sqlite)) {
      const expected = sqliteIndexes(sqlite, table);
      const actual = await postgresIndexes(db, table);
      if (table === "contacts") {
        expect(actual.contacts_full_name).toEqual({ columns: ["full_name"], unique: false, partial: null });
        delete actual.contacts_full_name;
      }
      const normalise = (shapes: Record<string, IndexShape>) =>
        Object.fromEntries(Object.entries(shapes).map(([name, shape]) => [name, { ...shape, partial: normalisedPredicate(shape.partial) }]));
      expect({ table, indexes: normalise(actual) }).toEqual({ table, indexes: normalise(expected) });
    }
    const [gin] = await db.all<{ method: string }>("SELECT am.amname AS method FROM pg_class c JOIN pg_am am ON am.oid = c.relam WHERE c.relname = 'contacts_full_name'");
    expect(gin).toEqual({ method: "gin" });
  });

  test("no index on events reads the payload, on either backend: a contact's create and update (POST /contacts) write no index entry for its email, a deleted contact's is kept on its tombstone", async () => {
    const sqliteEvents = sqlite.query<{ name: string; sql: string }, []>("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events' AND sql IS NOT NULL").all();
    const postgresEvents = await db.all<{ name: string; sql: string }>("SELECT indexname AS name, indexdef AS sql FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'events'");
    expect([...sqliteEvents, ...postgresEvents].filter((index) => index.sql.includes("payload")).map((index) => index.name)).toEqual([]);
  });

  test("every table has the same foreign keys", async () => {
    for (const table of sqliteTables(sqlite)) {
      expect({ table, keys: await postgresForeignKeys(db, table) }).toEqual({ table, keys: sqliteForeignKeys(sqlite, table) });
    }
  });
});

/** onBoth runs one portable statement on SQLite and on PostgreSQL. */
async function onBoth(sqlite: SqliteDatabase, db: Db, sql: string, params: SqlValue[] = []): Promise<void> {
  sqlite.query(sql).run(...(params as never[]));
  await db.run(sql, params);
}

describe("postgres migrations: triggers and search behave as on SQLite", () => {
  test("the contact counters follow inserts, updates, deletes and cascades alike", async () => {
    const run = (sql: string, params: SqlValue[] = []) => onBoth(sqlite, db, sql, params);
    await run("INSERT INTO users (id, name, email, created_at, updated_at) VALUES (?, ?, ?, 1, 1), (?, ?, ?, 1, 1)", ["u1", "One", "one@example.com", "u2", "Two", "two@example.com"]);
    await run("INSERT INTO accounts (id, name, created_at, updated_at) VALUES (?, ?, 1, 1)", ["a1", "Acme"]);
    await run(
      "INSERT INTO contacts (id, first_name, assigned_user_id, created_at, updated_at) VALUES (?, ?, ?, 1, 1), (?, ?, ?, 1, 1), (?, ?, ?, 1, 1)",
      ["c1", "Ada", "u1", "c2", "Grace", null, "c3", "Linus", "u1"],
    );
    await run("INSERT INTO contact_tags (contact_id, tag, created_at, updated_at) VALUES ('c1', 'vip', 1, 1), ('c1', 'new', 1, 1), ('c2', 'vip', 1, 1)");
    await run("INSERT INTO contact_accounts (contact_id, account_id, position, created_at, updated_at) VALUES ('c1', 'a1', 0, 1, 1), ('c2', 'a1', 0, 1, 1)");
    await run("UPDATE contacts SET assigned_user_id = ? WHERE id = ?", ["u2", "c3"]);
    await run("UPDATE contacts SET assigned_user_id = ? WHERE id = ?", ["u1", "c2"]);
    await run("UPDATE contacts SET first_name = ? WHERE id = ?", ["Augusta", "c1"]);
    await run("DELETE FROM contact_tags WHERE contact_id = ? AND tag = ?", ["c2", "vip"]);
    await run("DELETE FROM contacts WHERE id = ?", ["c1"]);

    const counts = "SELECT filter, value, n FROM contact_filter_counts ORDER BY filter, value";
    // A count that falls to 0 is forgotten (migration 0020): the tags "new" and "vip" are on no contact now.
    const expected = [
      { filter: "account", value: "a1", n: 1 },
      { filter: "assigned_user", value: "u1", n: 1 },
      { filter: "assigned_user", value: "u2", n: 1 },
    ];
    expect(sqlite.query(counts).all()).toEqual(expected);
    expect(await db.all(counts)).toEqual(expected);
    expect(await db.all("SELECT table_name, n FROM row_counts")).toEqual([{ table_name: "contacts", n: 2 }]);
    expect(sqlite.query("SELECT table_name, n FROM row_counts").all()).toEqual([{ table_name: "contacts", n: 2 }]);
  });

  test("a statement that links or unlinks many contacts writes each tag's and account's counter once, not once a row", async () => {
    // One counter row written once per row in one transaction grows a chain of versions that each
    // next write walks: unlinking an account from 75,000 contacts took about 85 s.
    const counterWrites = async (tx: Db) => (await tx.get<{ n: number }>("SELECT (n_tup_ins + n_tup_upd)::int AS n FROM pg_stat_xact_user_tables WHERE relname = 'contact_filter_counts'"))!.n;
    const written = await db.write(async (tx) => {
      await tx.run("INSERT INTO accounts (id, name, created_at, updated_at) VALUES ('a-bulk', 'Bulk', 1, 1)");
      await tx.run("INSERT INTO contacts (id, created_at, updated_at) SELECT 'bulk' || i, 1, 1 FROM generate_series(1, 30) i");
      const before = await counterWrites(tx);
      await tx.run("INSERT INTO contact_tags (contact_id, tag, created_at, updated_at) SELECT id, 'bulk', 1, 1 FROM contacts WHERE id LIKE 'bulk%'");
      await tx.run("INSERT INTO contact_accounts (contact_id, account_id, position, created_at, updated_at) SELECT id, 'a-bulk', 0, 1, 1 FROM contacts WHERE id LIKE 'bulk%'");
      const linked = await counterWrites(tx);
      const counted = await tx.all("SELECT filter, n FROM contact_filter_counts WHERE value IN ('bulk', 'a-bulk') ORDER BY filter");
      await tx.run("DELETE FROM contact_tags WHERE tag = 'bulk'");
      await tx.run("DELETE FROM contact_accounts WHERE account_id = 'a-bulk'");
      const unlinked = await counterWrites(tx);
      const after = await tx.all("SELECT filter, n FROM contact_filter_counts WHERE value IN ('bulk', 'a-bulk') ORDER BY filter");
      // The later tests compare this database with SQLite's, which has none of these rows.
      await tx.run("DELETE FROM contacts WHERE id LIKE 'bulk%'");
      await tx.run("DELETE FROM accounts WHERE id = 'a-bulk'");
      return { linking: linked - before, unlinking: unlinked - linked, counted, after };
    });
    expect(written).toEqual({
      linking: 2,
      unlinking: 2,
      counted: [{ filter: "account", n: 30 }, { filter: "tag", n: 30 }],
      after: [],
    });
  });

  test("a contact's tag and account rows follow its sort keys alike, its names' keys included", async () => {
    const run = (sql: string, params: SqlValue[] = []) => onBoth(sqlite, db, sql, params);
    await run("INSERT INTO contacts (id, first_name, last_name, first_name_key, last_name_key, email, created_at, updated_at) VALUES ('k1', 'ada', 'Byron', 'ada', 'byron', 'ada@example.com', 5, 5), ('k2', 'Bob', NULL, 'bob', NULL, NULL, 6, 6)");
    await run(
      `INSERT INTO contact_tags (contact_id, tag, created_at, updated_at, first_name_key, last_name_key, email)
       SELECT id, tag, created_at, updated_at, first_name_key, last_name_key, email FROM contacts, (SELECT 'sorted' AS tag UNION ALL SELECT 'other') t WHERE id IN ('k1', 'k2')`,
    );
    await run(
      `INSERT INTO contact_accounts (contact_id, account_id, position, created_at, updated_at, first_name_key, last_name_key, email)
       SELECT id, 'a1', 0, created_at, updated_at, first_name_key, last_name_key, email FROM contacts WHERE id IN ('k1', 'k2')`,
    );
    await run("UPDATE contacts SET first_name = ?, first_name_key = ?, updated_at = ? WHERE id = ?", ["Ádá", "ádá", 7, "k1"]);
    await run("UPDATE contacts SET last_name = ?, last_name_key = ?, email = ? WHERE id = ?", ["King", "king", "ada@king.example", "k1"]);
    await run("UPDATE contacts SET email = ?, updated_at = ? WHERE id = ?", ["bob@example.com", 8, "k2"]);
    await run("UPDATE contacts SET phone = ? WHERE id = ?", ["+1 555 0100", "k2"]);
    const tags = "SELECT contact_id, tag, created_at, updated_at, first_name_key, last_name_key, email FROM contact_tags WHERE contact_id IN ('k1', 'k2') ORDER BY contact_id, tag";
    const expected = [
      { contact_id: "k1", tag: "other", created_at: 5, updated_at: 7, first_name_key: "ádá", last_name_key: "king", email: "ada@king.example" },
      { contact_id: "k1", tag: "sorted", created_at: 5, updated_at: 7, first_name_key: "ádá", last_name_key: "king", email: "ada@king.example" },
      { contact_id: "k2", tag: "other", created_at: 6, updated_at: 8, first_name_key: "bob", last_name_key: null, email: "bob@example.com" },
      { contact_id: "k2", tag: "sorted", created_at: 6, updated_at: 8, first_name_key: "bob", last_name_key: null, email: "bob@example.com" },
    ];
    expect(sqlite.query(tags).all()).toEqual(expected);
    expect(await db.all(tags)).toEqual(expected);
    const accounts = "SELECT contact_id, account_id, created_at, updated_at, first_name_key, last_name_key, email FROM contact_accounts WHERE contact_id IN ('k1', 'k2') ORDER BY contact_id";
    const linked = expected.filter((row) => row.tag === "other").map(({ tag, ...keys }) => ({ ...keys, account_id: "a1" }));
    expect(sqlite.query(accounts).all()).toEqual(linked);
    expect(await db.all(accounts)).toEqual(linked);
  });

  test("names compare and sort case-insensitively like SQLite's NOCASE columns", async () => {
    await onBoth(sqlite, db, "INSERT INTO accounts (id, name, domain, created_at, updated_at) VALUES ('a2', 'beta', 'B.example', 1, 1), ('a3', 'ALPHA', 'a.example', 1, 1)");
    const sorted = "SELECT id FROM accounts ORDER BY name, id";
    expect(await db.all(sorted)).toEqual(sqlite.query(sorted).all());
    expect(await db.all(sorted)).toEqual([{ id: "a1" }, { id: "a3" }, { id: "a2" }]);
    const byDomain = "SELECT id FROM accounts WHERE domain = ?";
    expect(await db.all(byDomain, ["b.EXAMPLE"])).toEqual([{ id: "a2" }]);
    expect(sqlite.query(byDomain).all("b.EXAMPLE")).toEqual([{ id: "a2" }]);
  });

  test("a full-name substring search finds what SQLite's trigram search finds, in every script's case, through the trigram index", async () => {
    await onBoth(
      sqlite,
      db,
      "INSERT INTO contacts (id, first_name, last_name, created_at, updated_at) VALUES ('n1', 'Émile', 'Zola', 1, 1), ('n2', 'ada', 'LOVELACE', 1, 1), ('n3', NULL, 'Lovelace-Byron', 1, 1), ('n4', 'Zoë', NULL, 1, 1)",
    );
    // SQLite indexes new names in batches (migration 0017); the service indexes them before a search.
    const sqliteDb: Db = { dialect: "sqlite", all: async () => [], get: async () => null, run: async (sql, params = []) => sqlite.query(sql).run(...(params as never[])).changes };
    await indexWaitingNames(sqliteDb);
    for (const needle of ["émi", "ÉMILE ZO", "lovelace", "ada lov", "zoë", "100%"]) {
      const fromSqlite = sqlite
        .query<{ id: string }, [string]>("SELECT c.id FROM contacts c WHERE c.rowid IN (SELECT rowid FROM contacts_full_name WHERE contacts_full_name MATCH ?) ORDER BY c.id")
        .all(`"${needle}"`);
      const fromPostgres = await db.all<{ id: string }>("SELECT id FROM contacts WHERE full_name ILIKE ? ESCAPE '\\' ORDER BY id", [`%${needle.replace(/[\\%_]/g, "\\$&")}%`]);
      expect({ needle, ids: fromPostgres }).toEqual({ needle, ids: fromSqlite });
    }
    expect(await db.all("SELECT id FROM contacts WHERE full_name ILIKE '%lovel%' ORDER BY id")).toEqual([{ id: "n2" }, { id: "n3" }]);
    const plan = await db.write(async (tx) => {
      await tx.run("SET LOCAL enable_seqscan = off");
      return tx.all<{ "QUERY PLAN": string }>("EXPLAIN SELECT id FROM contacts WHERE full_name ILIKE ?", ["%lovel%"]);
    });
    expect(plan.map((line) => line["QUERY PLAN"]).join("\n")).toContain("Bitmap Index Scan on contacts_full_name");
  });

  test("CHECK constraints refuse what SQLite refuses", async () => {
    const insert = "INSERT INTO webhook_subscriptions (id, target_url, events, secret, status, created_at, updated_at) VALUES ('s1', 'https://example.com', '[]', 'x', ?, 1, 1)";
    expect(() => sqlite.query(insert).run("paused")).toThrow("CHECK constraint failed");
    const error = await db.run(insert, ["paused"]).catch((e) => e);
    expect(error.errno).toBe("23514");
  });
});
