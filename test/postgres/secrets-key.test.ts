import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { createRuntime } from "../../server/app.ts";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { POSTGRES_MIGRATIONS, migratePostgres } from "../../server/db/postgres-migrations.ts";
import { openPostgres, type PostgresDatabase } from "../../server/db/postgres.ts";
import { createLogger } from "../../server/shared/log.ts";
import { newId } from "../../server/shared/ids.ts";
import { SecretBox } from "../../server/webhooks/secrets.ts";
import { tempDir } from "../ops/support.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";

// Instances sharing a PostgreSQL database must share the secrets key: the database records which
// key that is at its first start, so an instance given another one is refused at start, also on a
// new database where no subscription exists yet to try the key on.

let dir: string;
let first: string;
let other: string;
const databases: TestDatabase[] = [];

beforeAll(() => {
  dir = tempDir("pg-secrets-key");
  [first, other] = [1, 2].map((fill) => writeSecretsKeyFile(join(dir, `key-${fill}`), fill)) as [string, string];
});

afterAll(async () => {
  for (const database of databases) await database.drop();
  rmSync(dir, { recursive: true, force: true });
});

/** newDatabase creates an empty database on the test server, dropped after the file's tests. */
async function newDatabase(): Promise<TestDatabase> {
  const database = await createTestDatabase();
  databases.push(database);
  return database;
}

/** instance starts one instance's runtime on the database with a key file, as serve does; close() stops it. */
async function instance(url: string, secretsKeyFile: string): Promise<{ close(): Promise<void> }> {
  const db = await openPostgres(url, 2);
  try {
    await createRuntime({ db, config: { ...DEFAULT_CONFIG, dataDir: dir, databaseUrl: url, secretsKeyFile, logLevel: "error" }, log: createLogger("error") });
  } catch (error) {
    await db.close();
    throw error;
  }
  return { close: () => db.close() };
}

/** refusal is the line a start with a key other than the database's stops with. */
const refusal = (keyFile: string) =>
  `secrets key file ${keyFile} is not the key this database was used with (it keeps a check value of that key, and of any signing secrets sealed with it); use the key file the database was used with (--secrets-key-file, CRM_SECRETS_KEY_FILE), after crm secrets-key rotate the new one it was given`;

describe("secrets key on PostgreSQL: one key per database", () => {
  test("on a new database an instance with another key is refused at start, though no subscription exists; one with the same key starts beside the first", async () => {
    const { url } = await newDatabase();
    const running = await instance(url, first);
    try {
      await expect(instance(url, other)).rejects.toThrow(refusal(other));
      await (await instance(url, first)).close();
    } finally {
      await running.close();
    }
  });

  test("two instances with different keys starting at once on a new database: one starts, the other is refused, and the key that started stays the database's", async () => {
    const { url } = await newDatabase();
    const starts = await Promise.allSettled([instance(url, first), instance(url, other)]);
    for (const start of starts) if (start.status === "fulfilled") await start.value.close();
    expect(starts.map((s) => s.status).sort()).toEqual(["fulfilled", "rejected"]);
    const [winner, loser] = starts[0]!.status === "fulfilled" ? [first, other] : [other, first];
    expect((starts.find((s) => s.status === "rejected") as PromiseRejectedResult).reason.message).toBe(refusal(loser));
    await (await instance(url, winner)).close();
    await expect(instance(url, loser)).rejects.toThrow(refusal(loser));
  });

  test("a database migrated before the check value, holding secrets, is checked with a stored secret as before, then records the check value of the key that opened it", async () => {
    const { url } = await newDatabase();
    const db: PostgresDatabase = await openPostgres(url, 1);
    try {
      await migratePostgres(db, POSTGRES_MIGRATIONS.filter((m) => m.version < 25));
      const id = newId("sub");
      await db.run("INSERT INTO webhook_subscriptions (id, target_url, events, secret, created_at, updated_at) VALUES (?, 'http://127.0.0.1:9/x', '[]', ?, 1, 1)", [
        id,
        new SecretBox(Buffer.alloc(32, 1)).seal(id, "whsec_abc"),
      ]);
      await expect(instance(url, other)).rejects.toThrow(refusal(other));
      await (await instance(url, first)).close();
      // Its subscriptions gone, the database still knows its key.
      await db.run("DELETE FROM webhook_subscriptions");
      await expect(instance(url, other)).rejects.toThrow(refusal(other));
    } finally {
      await db.close();
    }
  });

  test("a database migrated before the check value holding no subscription, only a kept create answer with its sealed secret (as copy-to-postgres carries it), is checked with that secret", async () => {
    const { url } = await newDatabase();
    const db: PostgresDatabase = await openPostgres(url, 1);
    try {
      await migratePostgres(db, POSTGRES_MIGRATIONS.filter((m) => m.version < 25));
      const id = newId("sub");
      const answer = { data: { id, target_url: "http://127.0.0.1:9/x", events: [], secret: new SecretBox(Buffer.alloc(32, 1)).seal(id, "whsec_abc") } };
      await db.run("INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, created_at) VALUES ('tok_1', 'POST', '/public/v1/webhook-subscriptions', 'k1', ?, 201, ?, 1)", [
        new Uint8Array(32),
        JSON.stringify(answer),
      ]);
      await expect(instance(url, other)).rejects.toThrow(refusal(other));
      await (await instance(url, first)).close();
      await db.run("DELETE FROM idempotency_keys");
      await expect(instance(url, other)).rejects.toThrow(refusal(other));
    } finally {
      await db.close();
    }
  });
});
