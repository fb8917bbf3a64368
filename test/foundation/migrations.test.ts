import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp, createRuntime } from "../../server/app.ts";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { databasePath, openDatabase, type SqliteDatabase } from "../../server/db/database.ts";
import { indexWaitingNames } from "../../server/contacts/store.ts";
import { withdrawIdempotencyRecordsOf } from "../../server/idempotency/store.ts";
import { findIdempotencyRecord, upsertIdempotencyRecord } from "../../server/idempotency/store.ts";
import { findAttemptsByDelivery } from "../../server/webhooks/store.ts";
import { MIGRATIONS, appliedVersions, migrate, pendingMigrations, type Migration } from "../../server/db/migrations.ts";
import { createLogger } from "../../server/shared/log.ts";
import { JOINED_NAME_WARNINGS, NEW_NAME_KEYS, OLD_ACCOUNT_NAMES, joinedNameWarnings, oldNameKey, storeAccountsKeyedTheOldWay } from "../support/account-name-keys.ts";
import { NFC_ROWS, READ_AFTER_NFC, nfcRows, readAfterNfc, storeContactsBeforeNfc } from "../support/nfd-before-upgrade.ts";
import { DOMAINS_AFTER, DOMAIN_WARNINGS, domainRows, storeDomainsBeforeUpgrade } from "../support/domains-before-upgrade.ts";
import { WHITE_SPACE_ROWS, WHITE_SPACE_WARNINGS, storeNamesBeforeWhiteSpace, whiteSpaceRows } from "../support/names-before-white-space.ts";
import { KEYED_ROWS, READ_AFTER_KEYS, keyedRows, readAfterKeys, storeContactsBeforeKeys } from "../support/names-before-keys.ts";
import { EMAILS_AFTER, storeDeletionsBeforeEmails, tombstoneEmails } from "../support/tombstones-before-emails.ts";
import { KEPT_BEFORE_UPGRADE, keepAnswersOfRecordsDeletedBeforeUpgrade, keptRows, replayKeptAnswers, tokenBeforeUpgrade } from "../support/deleted-before-upgrade.ts";

const MIGRATIONS_DIR = join(import.meta.dir, "../../migrations");

let dir: string;
let db: SqliteDatabase;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "crm-migrations-"));
  db = openDatabase(databasePath(dir));
});
afterEach(async () => {
  await db.close();
  rmSync(dir, { recursive: true, force: true });
});

const tables = () => db.sqlite.query<{ name: string }, []>("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name").all().map((r) => r.name);

describe("migrations: happy paths", () => {
  test("every file in migrations/ is registered, in order, with its exact text", () => {
    const files = readdirSync(MIGRATIONS_DIR).filter((f) => f.endsWith(".sql")).sort();
    expect(files.length).toBeGreaterThan(0);
    for (const file of files) expect(file).toMatch(/^\d{4}_[a-z0-9_]+\.sql$/);
    expect(MIGRATIONS.map((m) => m.name)).toEqual(files);
    expect(MIGRATIONS.map((m) => m.version)).toEqual(files.map((f) => Number(f.slice(0, 4))));
    for (const m of MIGRATIONS) expect(m.sql).toBe(readFileSync(join(MIGRATIONS_DIR, m.name), "utf8"));
    // numbered in increasing order without repeats (numbers are assigned per change, so gaps are fine)
    const versions = MIGRATIONS.map((m) => m.version);
    expect(versions).toEqual([...new Set(versions)].sort((a, b) => a - b));
  });

  test("a fresh database gets every migration in order, recorded in schema_migrations", () => {
    const before = Date.now();
    expect(migrate(db.sqlite)).toEqual(MIGRATIONS.map((m) => m.name));
    const rows = db.sqlite.query<{ version: number; name: string; applied_at: number }, []>("SELECT version, name, applied_at FROM schema_migrations ORDER BY version").all();
    expect(rows.map((r) => [r.version, r.name])).toEqual(MIGRATIONS.map((m) => [m.version, m.name]));
    for (const r of rows) expect(r.applied_at).toBeGreaterThanOrEqual(before);
    expect(appliedVersions(db.sqlite)).toEqual(MIGRATIONS.map((m) => m.version));
    expect(pendingMigrations(db.sqlite)).toEqual([]);
    expect(tables()).toEqual(expect.arrayContaining(["api_tokens", "contacts", "accounts", "users", "idempotency_keys", "events", "schema_migrations"]));
  });

  test("running again applies nothing and changes nothing", () => {
    migrate(db.sqlite);
    const schema = db.sqlite.query("SELECT type, name, sql FROM sqlite_schema ORDER BY name").all();
    const recorded = db.sqlite.query("SELECT * FROM schema_migrations").all();
    expect(migrate(db.sqlite)).toEqual([]);
    expect(db.sqlite.query("SELECT type, name, sql FROM sqlite_schema ORDER BY name").all()).toEqual(schema);
    expect(db.sqlite.query("SELECT * FROM schema_migrations").all()).toEqual(recorded);
  });

  test("only the pending migrations run, in version order", () => {
    const first = MIGRATIONS[0]!;
    const extra: Migration[] = [
      { version: 1001, name: "1001_a.sql", sql: "CREATE TABLE mig_a (x INTEGER); INSERT INTO mig_a VALUES (1);" },
      { version: 1002, name: "1002_b.sql", sql: "INSERT INTO mig_a SELECT x + 1 FROM mig_a;" },
    ];
    expect(migrate(db.sqlite, [first])).toEqual([first.name]);
    expect(migrate(db.sqlite, [first, ...extra])).toEqual(["1001_a.sql", "1002_b.sql"]);
    expect(db.sqlite.query("SELECT x FROM mig_a ORDER BY x").all()).toEqual([{ x: 1 }, { x: 2 }]);
  });

  test("the database is opened with WAL, synced commits, foreign keys, a busy timeout (SQLite's own for migrations, the writes' own on timers), a larger page cache and deleted content overwritten where no extra write is needed", () => {
    expect(db.sqlite.query("PRAGMA journal_mode").get()).toEqual({ journal_mode: "wal" });
    expect(db.sqlite.query("PRAGMA foreign_keys").get()).toEqual({ foreign_keys: 1 });
    expect([db.sqlite.query("PRAGMA busy_timeout").get(), db.waitingForLocks((writer) => writer.query("PRAGMA busy_timeout").get()), db.lockWaitMs]).toEqual([{ timeout: 0 }, { timeout: 5000 }, 5000]);
    expect(db.sqlite.query("PRAGMA synchronous").get()).toEqual({ synchronous: 2 }); // FULL: commits are synced
    expect((db.sqlite.query("PRAGMA cache_size").get() as { cache_size: number }).cache_size).toBeLessThanOrEqual(-16000);
    expect(db.sqlite.query("PRAGMA secure_delete").get()).toEqual({ secure_delete: 2 }); // FAST
  });
});

describe("migrations: data", () => {
  test("0006 copies each contact's account and user ids onto its row, in position order", () => {
    migrate(db.sqlite, MIGRATIONS.slice(0, 5));
    db.sqlite.run("INSERT INTO accounts (id, name, properties, created_at, updated_at) VALUES ('acc_1', 'One', '{}', 1, 1), ('acc_2', 'Two', '{}', 1, 1)");
    db.sqlite.run("INSERT INTO users (id, name, email, created_at, updated_at) VALUES ('usr_1', 'U1', 'u1@crm.test', 1, 1)");
    db.sqlite.run("INSERT INTO contacts (id, properties, created_at, updated_at) VALUES ('con_a', '{}', 1, 1), ('con_b', '{}', 2, 2)");
    db.sqlite.run("INSERT INTO contact_accounts (contact_id, account_id, position) VALUES ('con_a', 'acc_2', 1), ('con_a', 'acc_1', 0)");
    db.sqlite.run("INSERT INTO contact_assigned_users (contact_id, user_id, position) VALUES ('con_a', 'usr_1', 0)");
    expect(migrate(db.sqlite, MIGRATIONS.slice(0, 6))).toEqual(["0006_contact_relation_ids.sql"]);
    expect(db.sqlite.query("SELECT id, account_ids, assigned_user_ids FROM contacts ORDER BY id").all()).toEqual([
      { id: "con_a", account_ids: '["acc_1","acc_2"]', assigned_user_ids: '["usr_1"]' },
      { id: "con_b", account_ids: "[]", assigned_user_ids: "[]" },
    ]);
  });

  test("0007 keys existing account names for lookup in every script, in the migration's transaction", () => {
    migrate(db.sqlite, MIGRATIONS.slice(0, 6));
    db.sqlite.run("INSERT INTO accounts (id, name, properties, created_at, updated_at) VALUES ('acc_1', 'Müller GmbH', '{}', 1, 1), ('acc_2', 'ACME', '{}', 1, 1), ('acc_3', 'Ελληνική Α.Ε.', '{}', 1, 1)");
    expect(migrate(db.sqlite, MIGRATIONS.slice(0, 7))).toEqual(["0007_account_name_key.sql"]);
    expect(db.sqlite.query("SELECT id, name_key FROM accounts ORDER BY id").all()).toEqual([
      { id: "acc_1", name_key: "müller gmbh" },
      { id: "acc_2", name_key: "acme" },
      { id: "acc_3", name_key: "ελληνική α.ε." },
    ]);
  });

  test("0034 rekeys the account names full case folding keys otherwise (ß and ẞ as ss, a ligature, Greek with dialytika, Turkish İ and ı), so their capitals find them, and serve logs at warn each group of accounts whose keys it joins", async () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0034_account_name_case_fold.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    await storeAccountsKeyedTheOldWay(db);
    const lines: string[] = [];
    const app = createApp(await createRuntime({ db, config: { ...DEFAULT_CONFIG, dataDir: dir, logLevel: "warn" }, log: createLogger("warn", (line) => lines.push(line)) }));
    const { token } = await createApiToken(db, "t");
    expect(appliedVersions(db.sqlite).at(-1)).toBe(MIGRATIONS.at(-1)!.version);
    expect(db.sqlite.query("SELECT id, name_key FROM accounts ORDER BY id").all()).toEqual(NEW_NAME_KEYS);
    expect(lines.map((line) => JSON.parse(line)).map(({ level, msg, ...fields }) => [level, msg, fields])).toEqual(JOINED_NAME_WARNINGS.map(([msg, fields]) => ["warn", msg, { time: expect.any(String), ...fields }]));
    const named = async (name: string) => (await (await app.handle(new Request(`http://localhost/public/v1/accounts?name=${encodeURIComponent(name)}`, { headers: { authorization: `Bearer ${token}` } }))).json()).data.map((a: { id: string }) => a.id);
    expect([await named("GROSSHANDEL SÜD GMBH"), await named("FF LTD"), await named("οδοσ α.ε."), await named("Großhandel Nord GmbH"), await named("ευρωπαΐκή τράπεζα")]).toEqual([["acc_1"], ["acc_3"], ["acc_4"], ["acc_5"], ["acc_6"]]);
  });

  test("0042 rekeys again the account names an older crm keyed the old way after 0034, warning of the groups it joins; with none, it changes nothing and warns of nothing", async () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0042_account_names_rekeyed_again.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    // Written after 0034 by a crm from before it (a rolling upgrade on PostgreSQL; the same rows here).
    await storeAccountsKeyedTheOldWay(db);
    const warnings: unknown[] = [];
    expect(migrate(db.sqlite, MIGRATIONS.slice(0, version + 1), { warn: (...warning) => warnings.push(warning) })).toEqual(["0042_account_names_rekeyed_again.sql"]);
    expect(db.sqlite.query("SELECT id, name_key FROM accounts ORDER BY id").all()).toEqual(NEW_NAME_KEYS);
    expect(warnings).toEqual(joinedNameWarnings("0042_account_names_rekeyed_again.sql"));
    db.sqlite.run("DELETE FROM schema_migrations WHERE version = 42");
    expect(migrate(db.sqlite, MIGRATIONS.slice(0, version + 1), { warn: (...warning) => warnings.push(warning) })).toEqual(["0042_account_names_rekeyed_again.sql"]);
    expect(db.sqlite.query("SELECT id, name_key FROM accounts ORDER BY id").all()).toEqual(NEW_NAME_KEYS);
    expect(warnings).toEqual(joinedNameWarnings("0042_account_names_rekeyed_again.sql"));
  });

  test("0043 withdraws the one-time links of operators removed before it; links of current operators and of the command line stay", () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0043_links_of_removed_operators.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    db.sqlite.run("INSERT INTO operators (id, email, password_hash, created_at, updated_at) VALUES ('opr_kept', 'kept@example.com', 'x', 1, 1)");
    const link = db.sqlite.query("INSERT INTO operator_links (code_hash, purpose, email, created_by, created_at, expires_at) VALUES (?, ?, ?, ?, 1, ?)");
    const later = Date.now() + 3_600_000;
    link.run(new Uint8Array([1]), "reset", "kept@example.com", "opr_removed", later);
    link.run(new Uint8Array([2]), "invite", "backdoor@example.net", "opr_removed", later);
    link.run(new Uint8Array([3]), "invite", "colleague@example.com", "opr_kept", later);
    link.run(new Uint8Array([4]), "invite", "cli@example.com", null, later);
    expect(migrate(db.sqlite, MIGRATIONS.slice(0, version + 1))).toEqual(["0043_links_of_removed_operators.sql"]);
    expect(db.sqlite.query("SELECT email, created_by FROM operator_links ORDER BY email").all()).toEqual([
      { email: "cli@example.com", created_by: null },
      { email: "colleague@example.com", created_by: "opr_kept" },
    ]);
  });

  test("a migration rolled back warns of nothing: its backfill's warnings wait for its commit", () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0034_account_name_case_fold.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    const insert = db.sqlite.query("INSERT INTO accounts (id, name, name_key, properties, created_at, updated_at) VALUES (?, ?, ?, '{}', 1, 1)");
    for (const [id, name] of OLD_ACCOUNT_NAMES) insert.run(id, name, oldNameKey(name));
    const warnings: unknown[] = [];
    const failing = { ...MIGRATIONS[version]!, backfill: (tx: Parameters<NonNullable<Migration["backfill"]>>[0], context: Parameters<NonNullable<Migration["backfill"]>>[1]) => {
      MIGRATIONS[version]!.backfill!(tx, context);
      throw new Error("disk I/O error");
    } };
    expect(() => migrate(db.sqlite, [...MIGRATIONS.slice(0, version), failing], { warn: (...warning) => warnings.push(warning) })).toThrow("disk I/O error");
    expect(warnings).toEqual([]);
    expect(migrate(db.sqlite, MIGRATIONS, { warn: (...warning) => warnings.push(warning) })).toContain("0034_account_name_case_fold.sql");
    expect(warnings).toEqual(JOINED_NAME_WARNINGS);
  });

  test("0040 rewrites the names and tags stored before they were kept in NFC, café in both forms kept once, with their tag rows, counts, name copies and search, and no new version or event: the contact's own values find it again", async () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0040_names_and_tags_in_nfc.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    await storeContactsBeforeNfc(db);
    expect(migrate(db.sqlite)).toEqual(MIGRATIONS.slice(version).map((m) => m.name));
    expect(await nfcRows(db)).toEqual(NFC_ROWS);
    const { token } = await createApiToken(db, "t");
    const app = createApp(await createRuntime({ db, config: { ...DEFAULT_CONFIG, dataDir: dir, logLevel: "error" }, log: createLogger("error") }));
    expect(await readAfterNfc(app, token)).toEqual(READ_AFTER_NFC);
  });

  test("0045 keys the names of the contacts stored before it, on their tag and account rows too, with no new version or event: the name sorts read them in the order PostgreSQL reads them", async () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0045_contact_name_sort_keys.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    await storeContactsBeforeKeys(db);
    expect(migrate(db.sqlite)).toEqual(MIGRATIONS.slice(version).map((m) => m.name));
    expect(await keyedRows(db)).toEqual(KEYED_ROWS);
    const { token } = await createApiToken(db, "t");
    const app = createApp(await createRuntime({ db, config: { ...DEFAULT_CONFIG, dataDir: dir, logLevel: "error" }, log: createLogger("error") }));
    expect(await readAfterKeys(app, token)).toEqual(READ_AFTER_KEYS);
  });

  test("0051 folds the white space of the account names' keys and the contact names' sort keys (a no-break space, a doubled space, spaces at the ends), on the tag and account rows too, with no new version or event, warning of the accounts it gives one key", async () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0051_names_keyed_with_white_space_folded.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    await storeNamesBeforeWhiteSpace(db);
    const warnings: unknown[] = [];
    expect(migrate(db.sqlite, MIGRATIONS, { warn: (...warning) => warnings.push(warning) })).toEqual(MIGRATIONS.slice(version).map((m) => m.name));
    expect(await whiteSpaceRows(db)).toEqual(WHITE_SPACE_ROWS);
    expect(warnings).toEqual(WHITE_SPACE_WARNINGS);
  });

  test("0048 drops the trailing dot of the domains that are host names spelt with one, with no new version or event, warning of a domain it gives accounts that another had; a domain that is no host name is left as it is, and named in a warning", async () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0048_account_domains_without_trailing_dot.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    await storeDomainsBeforeUpgrade(db);
    const warnings: unknown[] = [];
    expect(migrate(db.sqlite, MIGRATIONS, { warn: (...warning) => warnings.push(warning) })).toEqual(MIGRATIONS.slice(version).map((m) => m.name));
    expect(await domainRows(db)).toEqual(DOMAINS_AFTER);
    expect(warnings).toEqual(DOMAIN_WARNINGS);
    expect(await db.all("SELECT id FROM events")).toEqual([]);
  });

  test("0053 gives each contact tombstone the email its newest event held, so Find finds it; an erased contact's, one without an email or events, and an account's get none", async () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0053_deleted_contacts_by_email.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    await storeDeletionsBeforeEmails(db);
    expect(migrate(db.sqlite, MIGRATIONS.slice(0, version + 1))).toEqual(["0053_deleted_contacts_by_email.sql"]);
    expect(await tombstoneEmails(db)).toEqual(EMAILS_AFTER);
  });

  test("0009 stores each header set of the recorded attempts once, keeps each attempt's signature and cuts bodies to 4 KiB; the history reads as before", async () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0009_delivery_history_bounds.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    db.sqlite.run(`INSERT INTO events (id, type, payload, created_at) VALUES ('evt_1', 'contact.created', '{}', 1)`);
    db.sqlite.run(`INSERT INTO webhook_deliveries (id, event_id, event_type, subscription_id, target_url, status, attempts, created_at, updated_at)
            VALUES ('dlv_1', 'evt_1', 'contact.created', 'sub_1', 'http://x.test/', 'succeeded', 2, 1, 1)`);
    const request = (second: number, signature: string) =>
      JSON.stringify({ "content-type": "application/json", "user-agent": "crm-webhooks/0.1.0", "webhook-id": "dlv_1", "webhook-timestamp": String(second), "webhook-signature": signature });
    const insert = db.sqlite.query("INSERT INTO webhook_delivery_attempts VALUES ('dlv_1', ?, 'scheduled', ?, 5, ?, 200, ?, ?, NULL)");
    insert.run(1, 1_700_000_000_123, request(1_700_000_000, "v1,one"), JSON.stringify({ "content-type": "text/plain", date: "Tue, 14 Nov 2023 22:13:20 GMT" }), "x".repeat(5000));
    insert.run(2, 1_700_000_005_999, request(1_700_000_005, "v1,two"), JSON.stringify({ "content-type": "text/plain", date: "Tue, 14 Nov 2023 22:13:25 GMT" }), "ok");
    expect(migrate(db.sqlite)).toEqual(MIGRATIONS.slice(version).map((m) => m.name));
    expect(db.sqlite.query("SELECT count(*) AS n FROM webhook_header_sets").get()).toEqual({ n: 2 });
    expect((await findAttemptsByDelivery(db, "dlv_1", 2)).reverse().map((a) => [JSON.parse(a.request_headers), JSON.parse(a.response_headers), a.response_body!.length])).toEqual([
      [JSON.parse(request(1_700_000_000, "v1,one")), { "content-type": "text/plain" }, 4096],
      [JSON.parse(request(1_700_000_005, "v1,two")), { "content-type": "text/plain" }, 2],
    ]);
  });

  test("0010 gives existing contacts and accounts version 1 and existing event bodies their event_id", () => {
    const before = MIGRATIONS.findIndex((m) => m.name === "0010_webhook_lifecycle.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, before));
    db.sqlite.run("INSERT INTO contacts (id, properties, created_at, updated_at) VALUES ('con_a', '{}', 1, 1)");
    db.sqlite.run("INSERT INTO accounts (id, name, name_key, properties, created_at, updated_at) VALUES ('acc_a', 'Acme', 'acme', '{}', 1, 1)");
    db.sqlite.run(`INSERT INTO events (id, type, payload, created_at) VALUES ('evt_a', 'contact.deleted', '{"type":"contact.deleted","timestamp":"2026-01-01T00:00:00.000Z","data":{"id":"con_b"}}', 1)`);
    expect(migrate(db.sqlite, MIGRATIONS.slice(0, before + 1))).toEqual(["0010_webhook_lifecycle.sql"]);
    expect(db.sqlite.query("SELECT id, version FROM contacts").all()).toEqual([{ id: "con_a", version: 1 }]);
    expect(db.sqlite.query("SELECT id, version FROM accounts").all()).toEqual([{ id: "acc_a", version: 1 }]);
    const payload = JSON.parse(db.sqlite.query<{ payload: string }, []>("SELECT payload FROM events").get()!.payload);
    expect(payload).toEqual({ type: "contact.deleted", event_id: "evt_a", timestamp: "2026-01-01T00:00:00.000Z", data: { id: "con_b" } });
  });
});

describe("migrations: data, idempotency records", () => {
  test("0019 keeps every idempotency record, found by its key as before, and from then on appends records by rowid", async () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0019_idempotency_keys_by_rowid.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    const insert = db.sqlite.query("INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, created_at) VALUES ('tok_1', 'POST', '/public/v1/contacts', ?, ?, 201, ?, ?)");
    insert.run("k-later", new Uint8Array([1, 2, 3]), '{"data":{"id":"con_later"}}', 2000);
    insert.run("k-earlier", new Uint8Array([4, 5, 6]), '{"data":{"id":"con_earlier"}}', 1000);
    expect(migrate(db.sqlite)).toEqual(MIGRATIONS.slice(version).map((m) => m.name));
    db.refreshReads();
    const scope = (key: string) => ({ tokenId: "tok_1", method: "POST", path: "/public/v1/contacts", key });
    expect(await findIdempotencyRecord(db, scope("k-later"), 0)).toEqual({ fingerprint: new Uint8Array([1, 2, 3]), status: 201, response_body: '{"data":{"id":"con_later"}}', created_at: 2000 });
    expect(await findIdempotencyRecord(db, scope("k-earlier"), 1500)).toBeNull();
    // the key is still the primary key: saving under it again replaces its record, a new key is appended
    await db.write((tx) => upsertIdempotencyRecord(tx, scope("k-earlier"), new Uint8Array([7]), 201, '{"data":{"id":"con_again"}}', "con_again", 3000));
    await db.write((tx) => upsertIdempotencyRecord(tx, scope("k-new"), new Uint8Array([8]), 201, '{"data":{"id":"con_new"}}', "con_new", 4000));
    expect(db.sqlite.query("SELECT idem_key, created_at FROM idempotency_keys ORDER BY rowid").all()).toEqual([
      { idem_key: "k-earlier", created_at: 3000 },
      { idem_key: "k-later", created_at: 2000 },
      { idem_key: "k-new", created_at: 4000 },
    ]);
    const plan = db.sqlite.query<{ detail: string }, []>("EXPLAIN QUERY PLAN SELECT status FROM idempotency_keys WHERE token_id = 'a' AND method = 'b' AND path = 'c' AND idem_key = 'd'").all();
    expect(plan.map((p) => p.detail)).toEqual(["SEARCH idempotency_keys USING INDEX sqlite_autoindex_idempotency_keys_1 (token_id=? AND method=? AND path=? AND idem_key=?)"]);
  });
});

describe("migrations: data, kept answers by resource", () => {
  test("0030 records the resource each kept answer shows, and a delete withdraws them through its index", async () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0030_kept_answers_by_resource.sql");
    expect(version).toBeGreaterThan(0);
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    const insert = db.sqlite.query("INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, created_at) VALUES ('tok_1', 'POST', ?, ?, x'01', ?, ?, 1)");
    insert.run("/public/v1/contacts", "create", 201, '{"data":{"id":"con_a","email":"a@example.com"}}');
    insert.run("/public/v1/contacts/con_a/tags", "tag", 200, '{"data":{"id":"con_a","tags":["t"]}}');
    insert.run("/public/v1/contacts/batch", "batch", 200, '{"data":[{"status":"created","id":"con_b"}]}');
    insert.run("/public/v1/contacts", "reserved", 0, "");
    expect(migrate(db.sqlite)).toEqual(MIGRATIONS.slice(version).map((m) => m.name));
    expect(db.sqlite.query("SELECT idem_key, resource_id FROM idempotency_keys ORDER BY idem_key").all()).toEqual([
      { idem_key: "batch", resource_id: null },
      { idem_key: "create", resource_id: "con_a" },
      { idem_key: "reserved", resource_id: null },
      { idem_key: "tag", resource_id: "con_a" },
    ]);
    await db.write((tx) => withdrawIdempotencyRecordsOf(tx, { resource: "contact", id: "con_a" }));
    expect(db.sqlite.query("SELECT idem_key, status, response_body FROM idempotency_keys WHERE resource_id IS NOT NULL ORDER BY idem_key").all()).toEqual([
      { idem_key: "create", status: 410, response_body: '{"resource":"contact","id":"con_a"}' },
      { idem_key: "tag", status: 410, response_body: '{"resource":"contact","id":"con_a"}' },
    ]);
    const plan = db.sqlite.query<{ detail: string }, []>("EXPLAIN QUERY PLAN UPDATE idempotency_keys SET status = 410 WHERE resource_id = 'con_a'").all();
    expect(plan.map((p) => p.detail)).toEqual(["SEARCH idempotency_keys USING INDEX idempotency_keys_resource (resource_id=?)"]);
  });

  test("0030 withdraws, as their delete does now, the kept answers of contacts and accounts deleted before it: their replays answer 410 replay-resource-deleted, a live contact's still replays", async () => {
    migrate(db.sqlite, MIGRATIONS.filter((m) => m.version < 30));
    const { token, id } = await tokenBeforeUpgrade(db);
    await keepAnswersOfRecordsDeletedBeforeUpgrade(db, id);
    const app = createApp(await createRuntime({ db, config: { ...DEFAULT_CONFIG, dataDir: dir, logLevel: "error" }, log: createLogger("error") }));
    expect(await replayKeptAnswers(app, token)).toEqual(KEPT_BEFORE_UPGRADE.map((k) => k.replay));
    expect(await keptRows(db)).toEqual(KEPT_BEFORE_UPGRADE.map((k) => k.row));
  });
});

describe("migrations: data, sync api", () => {
  test("0013 fills contact_tags from each contact's tags and the filter counts from tags, accounts and assigned users", () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0013_sync_api.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    db.sqlite.run("INSERT INTO accounts (id, name, properties, created_at, updated_at) VALUES ('acc_1', 'One', '{}', 1, 1)");
    db.sqlite.run("INSERT INTO users (id, name, email, created_at, updated_at) VALUES ('usr_1', 'U1', 'u1@crm.test', 1, 1)");
    db.sqlite.run(`INSERT INTO contacts (id, assigned_user_id, properties, created_at, updated_at) VALUES
            ('con_a', 'usr_1', '{"tags":["vip","lead","vip"]}', 1, 1), ('con_b', 'usr_1', '{"tags":"not a list"}', 2, 2), ('con_c', NULL, '{}', 3, 3)`);
    db.sqlite.run("INSERT INTO contact_accounts (contact_id, account_id, position) VALUES ('con_a', 'acc_1', 0), ('con_c', 'acc_1', 0)");
    expect(migrate(db.sqlite)).toEqual(MIGRATIONS.slice(version).map((m) => m.name));
    expect(db.sqlite.query("SELECT contact_id, tag FROM contact_tags ORDER BY contact_id, tag").all()).toEqual([
      { contact_id: "con_a", tag: "lead" },
      { contact_id: "con_a", tag: "vip" },
    ]);
    expect(db.sqlite.query("SELECT filter, value, n FROM contact_filter_counts ORDER BY filter, value").all()).toEqual([
      { filter: "account", value: "acc_1", n: 2 },
      { filter: "assigned_user", value: "usr_1", n: 2 },
      { filter: "tag", value: "lead", n: 1 },
      { filter: "tag", value: "vip", n: 1 },
    ]);
    // from then on the triggers keep them: a deleted contact takes its tags, link and assignment along
    db.sqlite.run("DELETE FROM contacts WHERE id = 'con_a'");
    db.sqlite.run("UPDATE contacts SET assigned_user_id = NULL WHERE id = 'con_b'");
    expect(db.sqlite.query("SELECT filter, value, n FROM contact_filter_counts WHERE n > 0 ORDER BY filter, value").all()).toEqual([{ filter: "account", value: "acc_1", n: 1 }]);
  });

  test("0014 gives each tag row its contact's sort keys and an index per sort; from then on triggers keep the keys and the tag counts", () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0014_contact_tags_sort_keys.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    db.sqlite.run(`INSERT INTO contacts (id, first_name, last_name, email, properties, created_at, updated_at) VALUES
            ('con_a', 'Ada', 'Lovelace', 'ada@crm.test', '{"tags":["vip","lead"]}', 1, 2), ('con_b', NULL, NULL, NULL, '{"tags":["vip"]}', 3, 4)`);
    db.sqlite.run("INSERT INTO contact_tags (contact_id, tag) VALUES ('con_a', 'vip'), ('con_a', 'lead'), ('con_b', 'vip')");
    expect(migrate(db.sqlite)).toEqual(MIGRATIONS.slice(version).map((m) => m.name));
    // the names' sort keys since 0045
    const tagRows = () => db.sqlite.query("SELECT contact_id, tag, created_at, updated_at, first_name_key, last_name_key, email FROM contact_tags ORDER BY contact_id, tag").all();
    const ada = { contact_id: "con_a", created_at: 1, updated_at: 2, first_name_key: "ada", last_name_key: "lovelace", email: "ada@crm.test" };
    const nameless = { contact_id: "con_b", tag: "vip", created_at: 3, updated_at: 4, first_name_key: null, last_name_key: null, email: null };
    expect(tagRows()).toEqual([{ ...ada, tag: "lead" }, { ...ada, tag: "vip" }, nameless]);
    const indexes = db.sqlite.query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'contact_tags' AND sql IS NOT NULL ORDER BY name").all().map((r: { name: string }) => r.name);
    expect(indexes).toEqual(["contact_tags_created", "contact_tags_email", "contact_tags_first_name", "contact_tags_last_name", "contact_tags_updated"]);
    // a key changed with its name (the service writes both) is copied
    db.sqlite.run("UPDATE contacts SET updated_at = 9, first_name = 'ÁDA', first_name_key = 'áda', email = 'ada@new.test' WHERE id = 'con_a'");
    db.sqlite.run("UPDATE contacts SET updated_at = 10 WHERE id = 'con_b'");
    const changed = { ...ada, updated_at: 9, first_name_key: "áda", email: "ada@new.test" };
    expect(tagRows()).toEqual([{ ...changed, tag: "lead" }, { ...changed, tag: "vip" }, { ...nameless, updated_at: 10 }]);
    db.sqlite.run("DELETE FROM contacts WHERE id = 'con_b'");
    db.sqlite.run("INSERT INTO contact_tags (contact_id, tag, created_at, updated_at) VALUES ('con_a', 'new', 1, 9)");
    expect(db.sqlite.query("SELECT value, n FROM contact_filter_counts WHERE filter = 'tag' ORDER BY value").all()).toEqual([
      { value: "lead", n: 1 },
      { value: "new", n: 1 },
      { value: "vip", n: 1 },
    ]);
  });
});

describe("migrations: data, operators", () => {
  test("0026 gives each operator the latest use of their sessions, and none to an operator without a session", () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0026_operator_last_seen.sql");
    expect(version).toBeGreaterThan(0);
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    db.sqlite.run("INSERT INTO operators (id, email, password_hash, created_at, updated_at) VALUES ('opr_a', 'a@crm.test', 'h', 1, 1), ('opr_b', 'b@crm.test', 'h', 2, 2)");
    db.sqlite.run("INSERT INTO operator_sessions (id_hash, operator_id, created_at, last_seen_at) VALUES (x'01', 'opr_a', 10, 30), (x'02', 'opr_a', 20, 25)");
    expect(migrate(db.sqlite)).toEqual(MIGRATIONS.slice(version).map((m) => m.name));
    expect(db.sqlite.query("SELECT id, last_seen_at FROM operators ORDER BY id").all()).toEqual([
      { id: "opr_a", last_seen_at: 30 },
      { id: "opr_b", last_seen_at: null },
    ]);
  });
});

describe("migrations: data, sign-in throttle", () => {
  test("0028 forgets the sign-in failures and turns kept by email, and keeps an address's", () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0028_sign_in_throttle_without_emails.sql");
    expect(version).toBeGreaterThan(0);
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    db.sqlite.run(`INSERT INTO login_failures (scope, subject, failures, window_start_at, last_failure_at) VALUES
      ('account', 'ops@crm.test', 2, 1, 2), ('pair', 'ops@crm.test 192.0.2.1', 2, 1, 2), ('address', '192.0.2.1', 2, 1, 2)`);
    db.sqlite.run("INSERT INTO sign_in_turns (pace_key, next_turn_at) VALUES ('account:ops@crm.test', 5), ('address:192.0.2.1', 5)");
    expect(migrate(db.sqlite)).toEqual(MIGRATIONS.slice(version).map((m) => m.name));
    expect(db.sqlite.query("SELECT scope, subject, failures FROM login_failures").all()).toEqual([{ scope: "address", subject: "192.0.2.1", failures: 2 }]);
    expect(db.sqlite.query("SELECT pace_key FROM sign_in_turns").all()).toEqual([{ pace_key: "address:192.0.2.1" }]);
  });
});

describe("migrations: data, the name search", () => {
  test("0027 indexes the names with outer spaces as the API returns their full_name, and from then on a rename too", () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0027_full_name_as_returned.sql");
    expect(version).toBeGreaterThan(0);
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    db.sqlite.run(`INSERT INTO contacts (id, first_name, last_name, created_at, updated_at) VALUES
      ('c1', ' Lead', 'Smith', 1, 1), ('c2', 'Trail ', NULL, 1, 1), ('c3', NULL, '  Solo', 1, 1), ('c4', 'Ada', 'Lovelace', 1, 1), ('c5', '', 'Kay', 1, 1)`);
    // indexed as before 0027, and one contact still waiting for the index
    db.sqlite.run("INSERT INTO contacts_full_name (rowid, full_name) SELECT c.rowid, trim(coalesce(c.first_name, '') || ' ' || coalesce(c.last_name, '')) FROM contacts_full_name_pending p JOIN contacts c ON c.rowid = p.contact_rowid");
    db.sqlite.run("DELETE FROM contacts_full_name_pending");
    db.sqlite.run("INSERT INTO contacts (id, first_name, last_name, created_at, updated_at) VALUES ('c6', 'Waits ', 'Here', 1, 1)");
    expect(migrate(db.sqlite)).toEqual(MIGRATIONS.slice(version).map((m) => m.name));
    const indexed = () => db.sqlite.query("SELECT c.id, f.full_name FROM contacts_full_name f JOIN contacts c ON c.rowid = f.rowid ORDER BY c.id").all();
    expect(indexed()).toEqual([
      { id: "c1", full_name: " Lead Smith" },
      { id: "c2", full_name: "Trail " },
      { id: "c3", full_name: "  Solo" },
      { id: "c4", full_name: "Ada Lovelace" },
      { id: "c5", full_name: "Kay" },
    ]);
    db.sqlite.run("UPDATE contacts SET first_name = 'Ada ', last_name = NULL WHERE id = 'c4'");
    expect(indexed()[3]).toEqual({ id: "c4", full_name: "Ada " });
  });
});

describe("migrations: data, the name index's deleted names", () => {
  test("0031 drops the names deleted before it from the index's segments, and from then on a delete leaves none", async () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0031_name_index_secure_delete.sql");
    expect(version).toBeGreaterThan(0);
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    const segmentsHolding = (trigram: string) => db.sqlite.query<{ n: number }, [string]>("SELECT count(*) AS n FROM contacts_full_name_data WHERE instr(block, CAST(? AS BLOB)) > 0").get(trigram)!.n;
    const insert = db.sqlite.query("INSERT INTO contacts (id, first_name, last_name, properties, created_at, updated_at) VALUES (?, ?, ?, '{}', 1, 1)");
    insert.run("con_a", "Qxzvwk", "Jjyhpf");
    insert.run("con_b", "Fgbmuy", "Dkcoev");
    await db.write((tx) => indexWaitingNames(tx));
    db.sqlite.run("DELETE FROM contacts WHERE id = 'con_a'");
    expect([segmentsHolding("qxz"), segmentsHolding("fgb")]).toEqual([2, 1]);
    expect(migrate(db.sqlite)).toEqual(MIGRATIONS.slice(version).map((m) => m.name));
    expect([segmentsHolding("qxz"), segmentsHolding("fgb")]).toEqual([0, 1]);
    db.sqlite.run("DELETE FROM contacts WHERE id = 'con_b'");
    expect([segmentsHolding("qxz"), segmentsHolding("fgb")]).toEqual([0, 0]);
  });
});

describe("migrations: filter counts", () => {
  test("0020 forgets the counts at 0, and from then on a count that falls to 0 is deleted, its value counted again when used again", () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0020_forget_empty_filter_counts.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    db.sqlite.run("INSERT INTO users (id, name, email, created_at, updated_at) VALUES ('usr_1', 'U1', 'u1@crm.test', 1, 1), ('usr_2', 'U2', 'u2@crm.test', 1, 1)");
    db.sqlite.run("INSERT INTO accounts (id, name, properties, created_at, updated_at) VALUES ('acc_1', 'One', '{}', 1, 1)");
    db.sqlite.run("INSERT INTO contacts (id, assigned_user_id, properties, created_at, updated_at) VALUES ('con_a', 'usr_1', '{}', 1, 1), ('con_b', 'usr_1', '{}', 2, 2)");
    db.sqlite.run("INSERT INTO contact_tags (contact_id, tag, created_at, updated_at) VALUES ('con_a', 'gone', 1, 1), ('con_a', 'kept', 1, 1), ('con_b', 'kept', 2, 2)");
    db.sqlite.run("INSERT INTO contact_accounts (contact_id, account_id, position, created_at, updated_at) VALUES ('con_a', 'acc_1', 0, 1, 1)");
    db.sqlite.run("DELETE FROM contact_tags WHERE tag = 'gone'");
    const counts = () => db.sqlite.query("SELECT filter, value, n FROM contact_filter_counts ORDER BY filter, value").all();
    expect(counts()).toContainEqual({ filter: "tag", value: "gone", n: 0 });
    expect(migrate(db.sqlite)).toEqual(MIGRATIONS.slice(version).map((m) => m.name));
    expect(counts()).toEqual([
      { filter: "account", value: "acc_1", n: 1 },
      { filter: "assigned_user", value: "usr_1", n: 2 },
      { filter: "tag", value: "kept", n: 2 },
    ]);
    db.sqlite.run("DELETE FROM contact_accounts WHERE contact_id = 'con_a'");
    db.sqlite.run("UPDATE contacts SET assigned_user_id = 'usr_2' WHERE id = 'con_a'");
    db.sqlite.run("DELETE FROM contacts WHERE id = 'con_b'");
    expect(counts()).toEqual([
      { filter: "assigned_user", value: "usr_2", n: 1 },
      { filter: "tag", value: "kept", n: 1 },
    ]);
    db.sqlite.run("DELETE FROM contacts WHERE id = 'con_a'");
    expect(counts()).toEqual([]);
    db.sqlite.run("INSERT INTO contacts (id, assigned_user_id, properties, created_at, updated_at) VALUES ('con_c', 'usr_2', '{}', 3, 3)");
    db.sqlite.run("INSERT INTO contact_tags (contact_id, tag, created_at, updated_at) VALUES ('con_c', 'kept', 3, 3)");
    expect(counts()).toEqual([
      { filter: "assigned_user", value: "usr_2", n: 1 },
      { filter: "tag", value: "kept", n: 1 },
    ]);
  });
});

describe("migrations: databases of migrations changed after their release", () => {
  const version = MIGRATIONS.findIndex((m) => m.name === "0018_released_schema_repairs.sql");
  const schema = () => db.sqlite.query("SELECT type, name, tbl_name, sql FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' ORDER BY name").all();

  test("0018 gives a database of 0002 and 0010 as first released what they make now: the delivery loop's indexes and accounts.version", async () => {
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    db.sqlite.run("INSERT INTO accounts (id, name, name_key, properties, created_at, updated_at) VALUES ('acc_a', 'Acme', 'acme', '{}', 1, 1)");
    const current = schema();
    // What 0002 and 0010 made as first released (2026-11-21 and 2026-11-23).
    db.sqlite.run("DROP INDEX webhook_deliveries_due_by_subscription");
    db.sqlite.run("DROP INDEX webhook_deliveries_unfinished");
    db.sqlite.run("CREATE INDEX webhook_deliveries_status ON webhook_deliveries (status, created_at, id)");
    db.sqlite.run("ALTER TABLE accounts DROP COLUMN version");
    expect(() => db.sqlite.query("SELECT id FROM webhook_deliveries INDEXED BY webhook_deliveries_due_by_subscription WHERE status = 'pending'").all()).toThrow("no such index");
    expect(migrate(db.sqlite, MIGRATIONS.slice(0, version + 1))).toEqual(["0018_released_schema_repairs.sql"]);
    expect(schema()).toEqual(current);
    expect(db.sqlite.query("SELECT id, version FROM accounts").all()).toEqual([{ id: "acc_a", version: 1 }]);
    expect(db.sqlite.query("SELECT id FROM webhook_deliveries INDEXED BY webhook_deliveries_due_by_subscription WHERE status = 'pending'").all()).toEqual([]);
  });

  test("0018 changes nothing in a database of 0002 and 0010 as they are now", () => {
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    const current = schema();
    expect(migrate(db.sqlite, MIGRATIONS.slice(0, version + 1))).toEqual(["0018_released_schema_repairs.sql"]);
    expect(schema()).toEqual(current);
  });
});

describe("migrations: errors", () => {
  test("a failing backfill rolls its migration back with it", () => {
    const failing: Migration = { version: 1001, name: "1001_fail.sql", sql: "CREATE TABLE mig_c (x INTEGER);", backfill: () => { throw new Error("backfill failed"); } };
    migrate(db.sqlite);
    expect(() => migrate(db.sqlite, [...MIGRATIONS, failing])).toThrow("migration 1001_fail.sql failed, and nothing of it was applied (the database is as it was): backfill failed");
    expect(tables()).not.toContain("mig_c");
    expect(appliedVersions(db.sqlite)).toEqual(MIGRATIONS.map((m) => m.version));
  });

  test("a failing migration rolls back completely and stops the ones after it", () => {
    const first = MIGRATIONS[0]!;
    migrate(db.sqlite, [first]);
    const schema = db.sqlite.query("SELECT name FROM sqlite_schema ORDER BY name").all();
    const broken: Migration[] = [
      first,
      { version: 1001, name: "1001_broken.sql", sql: "CREATE TABLE half_done (x INTEGER); INSERT INTO half_done VALUES (1); ALTER TABLE contacts ADD COLUMN extra TEXT; CREATE TABLE contacts (x INTEGER);" },
      { version: 1002, name: "1002_after.sql", sql: "CREATE TABLE after_broken (x INTEGER);" },
    ];
    expect(() => migrate(db.sqlite, broken)).toThrow("migration 1001_broken.sql failed, and nothing of it was applied (the database is as it was): table contacts already exists");
    expect(db.sqlite.query("SELECT name FROM sqlite_schema ORDER BY name").all()).toEqual(schema);
    expect(db.sqlite.query("SELECT name FROM pragma_table_info('contacts') WHERE name = 'extra'").all()).toEqual([]);
    expect(appliedVersions(db.sqlite)).toEqual([first.version]);
    // once fixed, it applies
    broken[1] = { ...broken[1]!, sql: "CREATE TABLE half_done (x INTEGER);" };
    expect(migrate(db.sqlite, broken)).toEqual(["1001_broken.sql", "1002_after.sql"]);
  });
});

describe("migration 0033", () => {
  test("forgets the wizard's test of a rotation whose previous secret is kept (an earlier crm signed that ping with both secrets), and keeps the others", () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0033_wizard_tests_signed_twice.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    const insert = db.sqlite.query("INSERT INTO webhook_subscriptions (id, target_url, events, secret, previous_secret, secret_test_delivery_id, created_at, updated_at) VALUES (?, 'https://x', '[]', 'whsec_new', ?, ?, 1, 1)");
    insert.run("sub_rotating", "whsec_old", "dlv_signed_twice");
    insert.run("sub_retired", null, "dlv_after_retire");
    insert.run("sub_untested", "whsec_old", null);
    expect(migrate(db.sqlite, MIGRATIONS.slice(0, version + 1))).toEqual(["0033_wizard_tests_signed_twice.sql"]);
    expect(db.sqlite.query("SELECT id, secret_test_delivery_id FROM webhook_subscriptions ORDER BY id").all()).toEqual([
      { id: "sub_retired", secret_test_delivery_id: "dlv_after_retire" },
      { id: "sub_rotating", secret_test_delivery_id: null },
      { id: "sub_untested", secret_test_delivery_id: null },
    ]);
  });
});

describe("migration 0039", () => {
  test("marks the secret lost of each subscription a secrets-key reset disabled and no rotation followed, and of no other", () => {
    const version = MIGRATIONS.findIndex((m) => m.name === "0039_secret_lost.sql");
    migrate(db.sqlite, MIGRATIONS.slice(0, version));
    const reason = "its signing secret was lost with the secrets key (crm secrets-key reset): rotate its secret, give the new one to its receiver, then enable it";
    const insert = db.sqlite.query(
      "INSERT INTO webhook_subscriptions (id, target_url, events, secret, secret_rotated_at, status, disabled_at, disabled_reason, created_at, updated_at) VALUES (?, 'https://x', '[]', 'whsec_x', ?, ?, ?, ?, 1, 1)",
    );
    insert.run("sub_lost", null, "disabled", 50, reason);
    insert.run("sub_lost_after_rotation", 10, "disabled", 50, `${reason}; disabled before that: the receiver answered 410 Gone`);
    insert.run("sub_rotated_since", 60, "disabled", 50, reason);
    insert.run("sub_failing", null, "disabled", 50, "the receiver answered 410 Gone");
    insert.run("sub_active", null, "active", null, null);
    expect(migrate(db.sqlite, MIGRATIONS.slice(0, version + 1))).toEqual(["0039_secret_lost.sql"]);
    expect(db.sqlite.query("SELECT id, secret_lost_at FROM webhook_subscriptions ORDER BY id").all()).toEqual([
      { id: "sub_active", secret_lost_at: null },
      { id: "sub_failing", secret_lost_at: null },
      { id: "sub_lost", secret_lost_at: 50 },
      { id: "sub_lost_after_rotation", secret_lost_at: 50 },
      { id: "sub_rotated_since", secret_lost_at: null },
    ]);
  });
});
