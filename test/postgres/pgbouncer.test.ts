import { afterAll, beforeAll, expect, test } from "bun:test";
import { openPostgres } from "../../server/db/postgres.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

// PgBouncer refuses a client's startup parameter its ignore_startup_parameters list leaves out,
// and drops one the list names (checked by hand with Debian's pgbouncer 1.18, which the fresh
// machines the suite runs on do not have): behind it the sessions get the role's settings, which
// the README has the operator set, lock_timeout among them. The writes' lock_timeout is set in
// their transaction, over the one sent at connect.

let database: TestDatabase;

beforeAll(async () => {
  database = await createTestDatabase();
});

afterAll(async () => {
  await database.drop();
});

test("the sessions' lock_timeout is the answer timeout, sent at connect: it bounds the reads without a statement of their own, and the writes set theirs in their transaction (SET LOCAL, which PgBouncer passes on)", async () => {
  const db = await openPostgres(database.url, 2, { databaseAnswerTimeoutSeconds: 7 });
  try {
    expect({
      write: await db.write((tx) => tx.get("SHOW lock_timeout")),
      read: await db.read((tx) => tx.get("SHOW lock_timeout")),
      outside: await db.get("SHOW lock_timeout"),
    }).toEqual({ write: { lock_timeout: "7s" }, read: { lock_timeout: "7s" }, outside: { lock_timeout: "7s" } });
  } finally {
    await db.close();
  }
});

test("a command that waits for locks as long as they are held (copy-to-postgres) opens its sessions without a lock_timeout", async () => {
  const db = await openPostgres(database.url, 2, { databaseAnswerTimeoutSeconds: 7, waitOutLocks: true });
  try {
    expect({ write: await db.write((tx) => tx.get("SHOW lock_timeout")), outside: await db.get("SHOW lock_timeout") }).toEqual({ write: { lock_timeout: "7s" }, outside: { lock_timeout: "0" } });
  } finally {
    await db.close();
  }
});
