import { SQL } from "bun";
import { afterAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { createApp, createRuntime } from "../../server/app.ts";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { openPostgres, WRITE_LOCK } from "../../server/db/postgres.ts";
import { createLogger } from "../../server/shared/log.ts";
import { BUILD } from "../../server/version.ts";
import { call } from "../foundation/support.ts";
import { tempDir, waitUntil } from "../ops/support.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { createTestDatabase } from "../support/postgres.ts";

// An instance of this version left running while a newer crm migrates the database under it (the
// rolling upgrade the README forbids): its writes waiting behind the migrations, and its prepared
// statements, meet the newer schema before the instance's check of the migrations finds it.

const FUTURE = "9999_from_the_future.sql";
const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

/** instance is an app of this version on a fresh, migrated database (a pool of `pool`, deletes unlinking `unlinkChunk` contacts a write), with a token and an administrator's session beside it. */
async function instance(pool: number, unlinkChunk?: number) {
  const database = await createTestDatabase();
  const dataDir = tempDir("newer-schema");
  const admin = new SQL({ url: database.url, max: 1 });
  const db = await openPostgres(database.url, pool);
  cleanups.push(async () => {
    await db.close();
    await admin.close();
    await database.drop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const config = { ...DEFAULT_CONFIG, dataDir, databaseUrl: database.url, databasePool: pool, secretsKeyFile: writeSecretsKeyFile(join(dataDir, "secrets.key")), logLevel: "error" as const };
  const rt = await createRuntime({ db, config, log: createLogger("error", () => {}), unlinkChunk });
  const { token } = await createApiToken(db, "newer-schema");
  const app = createApp(rt);
  const api = (method: string, path: string, options: { body?: unknown; headers?: Record<string, string> } = {}) =>
    call(app, method, `/public/v1${path}`, { ...options, headers: { authorization: `Bearer ${token}`, ...options.headers } });
  return { url: database.url, admin, rt, api, config };
}

/** refusal is a response as a database-newer refusal is compared: its status, Retry-After and whole body. */
const refusal = (res: { status: number; headers: Headers; body: unknown }) => ({ status: res.status, retryAfter: res.headers.get("retry-after"), body: res.body });

/** databaseNewer is the whole 503 database-newer with `detail`, as refusal gives it. */
const databaseNewer = (detail: string) => ({ status: 503, retryAfter: "5", body: { type: "urn:crm:problem:database-newer", title: "Service Unavailable", status: 503, detail } });

const count = async (admin: SQL, table: string) => ((await admin.unsafe(`SELECT count(*)::int AS n FROM ${table}`)) as { n: number }[])[0]!.n;

test("a write that waited for the write lock while a newer crm's migration held it is refused 503 database-newer, and writes nothing", async () => {
  const { url, admin, rt, api } = await instance(3);
  const migration = new SQL({ url, max: 1 });
  let commit!: () => void;
  const committing = new Promise<void>((resolve) => (commit = resolve));
  let holding!: () => void;
  const held = new Promise<void>((resolve) => (holding = resolve));
  // A newer crm's migration: a write of its own, under the write lock, recording itself before it commits.
  const migrated = migration.begin(async (tx) => {
    await tx.unsafe(`SELECT pg_advisory_xact_lock(${WRITE_LOCK})`);
    await tx.unsafe("INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, $1, 0)", [FUTURE]);
    holding();
    await committing;
  });
  try {
    await held;
    // Admitted before the instance knew: its write waits for the lock behind the migration.
    const posted = api("POST", "/contacts", { body: { first_name: "Ada", email: "ada@example.com" }, headers: { "idempotency-key": "during-migration" } });
    await waitUntil(async () => ((await admin.unsafe("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")) as { n: number }[])[0]!.n > 0, "the write's wait for the write lock");
    commit();
    await migrated;
    expect(refusal(await posted)).toEqual(
      databaseNewer(`This instance runs crm ${BUILD}, and a newer crm has migrated its database (it has ${FUTURE}, which this version does not know): it serves no requests and sends no webhooks, so that it writes nothing the old way. Nothing was changed; send the request to an instance of the newer crm. The operator should stop this instance and run the newer crm in its place.`),
    );
    expect({ contacts: await count(admin, "contacts"), events: await count(admin, "events"), keys: await count(admin, "idempotency_keys"), newer: rt.migrations.newer }).toEqual({ contacts: 0, events: 0, keys: 0, newer: [FUTURE] });
  } finally {
    commit();
    await migrated.catch(() => {});
    await migration.close();
  }
});

test("a statement prepared before a newer crm's migration changed a column it returns is refused 503 database-newer, not 500, and changes nothing", async () => {
  const { admin, api } = await instance(1);
  const created = (await api("POST", "/contacts", { body: { first_name: "Ada", phone: "+44 20 7946 0000" } })).body.data;
  // Prepared on the pool's one connection, inside a write's transaction, where PostgreSQL refuses
  // it once its columns changed (outside one, Bun's client answered a trial without the error).
  expect((await api("PATCH", `/contacts/${created.id}`, { body: { last_name: "Lovelace" } })).status).toBe(200);
  // As migration 0035 changed the sort keys' collation under the statements of the instances still running.
  await admin.unsafe("ALTER TABLE contacts ALTER COLUMN phone TYPE varchar(100)");
  expect(refusal(await api("PATCH", `/contacts/${created.id}`, { body: { last_name: "Byron" } }))).toEqual(
    databaseNewer(`This instance runs crm ${BUILD}, and a table this request reads changed under it: a newer crm is migrating its database. Nothing was changed; send the request to an instance of the newer crm. The operator should stop this instance and run the newer crm in its place.`),
  );
  expect(await admin.unsafe("SELECT last_name, version::int AS version FROM contacts")).toEqual([{ last_name: "Lovelace", version: 2 }]);
});

/** futureWithNextUpdate has the next UPDATE of contacts record a newer crm's migration in its own transaction: one committing between two writes of a delete in steps, exactly. */
async function futureWithNextUpdate(admin: SQL): Promise<void> {
  await admin.unsafe(`CREATE FUNCTION future_migration() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '${FUTURE}', 0) ON CONFLICT DO NOTHING; RETURN NULL; END $$`);
  await admin.unsafe("CREATE TRIGGER future_migration AFTER UPDATE ON contacts FOR EACH STATEMENT EXECUTE FUNCTION future_migration()");
}

/** afterFirstStep is the detail of a database-newer refusal of a delete's later write, the writes before it having done `done`. */
const afterFirstStep = (done: string) =>
  `This instance runs crm ${BUILD}, and a newer crm has migrated its database (it has ${FUTURE}, which this version does not know): it serves no requests and sends no webhooks, so that it writes nothing the old way. Nothing more was changed; send the request to an instance of the newer crm. The operator should stop this instance and run the newer crm in its place. Part of this request was done before this refusal, and stays done: ${done}. Sending the request again finishes it.`;

test("a user's delete whose second write meets a newer crm's migration says what its first write did, which a delete sent again on the newer crm finishes", async () => {
  const { url, admin, api, config } = await instance(2, 2);
  const user = (await api("POST", "/users", { body: { name: "Grace", email: "grace@example.com" } })).body.data;
  for (let i = 0; i < 5; i++) expect((await api("POST", "/contacts", { body: { first_name: `C${i}`, assigned_user_id: user.id } })).status).toBe(201);
  await futureWithNextUpdate(admin);
  expect(refusal(await api("DELETE", `/users/${user.id}`))).toEqual(databaseNewer(afterFirstStep("2 of the user's contacts lost the assignment (each sends contact.updated)")));
  const state = async () => ({
    assigned: await count(admin, "contacts WHERE assigned_user_id IS NOT NULL"),
    updated: await count(admin, "events WHERE type = 'contact.updated'"),
    users: await count(admin, "users"),
  });
  expect(await state()).toEqual({ assigned: 3, updated: 2, users: 1 });
  // The newer crm, standing in: the same code on the database without the trigger, knowing the migration.
  await admin.unsafe("DROP TRIGGER future_migration ON contacts; DELETE FROM schema_migrations WHERE version = 9999");
  const newer = await openPostgres(url, 1);
  try {
    const rt = await createRuntime({ db: newer, config, log: createLogger("error", () => {}), unlinkChunk: 2 });
    const { token } = await createApiToken(newer, "newer-crm");
    const res = await call(createApp(rt), "DELETE", `/public/v1/users/${user.id}`, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(204);
  } finally {
    await newer.close();
  }
  expect(await state()).toEqual({ assigned: 0, updated: 5, users: 0 });
});

test("an account's delete whose second write meets a newer crm's migration says what its first write did", async () => {
  const { admin, api } = await instance(2, 2);
  const account = (await api("POST", "/accounts", { body: { name: "Acme" } })).body.data;
  for (let i = 0; i < 3; i++) expect((await api("POST", "/contacts", { body: { first_name: `C${i}`, account_ids: [account.id] } })).status).toBe(201);
  await futureWithNextUpdate(admin);
  expect(refusal(await api("DELETE", `/accounts/${account.id}`))).toEqual(databaseNewer(afterFirstStep("2 of the account's contacts lost the link to it (each sends contact.updated)")));
  expect({ linked: await count(admin, "contact_accounts"), updated: await count(admin, "events WHERE type = 'contact.updated'"), accounts: await count(admin, "accounts") }).toEqual({ linked: 1, updated: 2, accounts: 1 });
});
