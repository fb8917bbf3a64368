import { afterAll, beforeAll, expect, test } from "bun:test";
import { openPostgres } from "../../server/db/postgres.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

// PgBouncer refuses a client's startup parameter its ignore_startup_parameters list leaves out,
// and drops one the list names: lock_timeout sent at connect stopped every instance behind a
// PgBouncer set up as the README says (checked by hand with Debian's pgbouncer, which the fresh
// machines the suite runs on do not have). The writes' lock_timeout is set in their transaction.

let database: TestDatabase;

beforeAll(async () => {
  database = await createTestDatabase();
});

afterAll(async () => {
  await database.drop();
});

test("lock_timeout is set in the write transactions (SET LOCAL, which PgBouncer passes on), not sent at connect: outside a write the session has PostgreSQL's default", async () => {
  const db = await openPostgres(database.url, 2, { databaseAnswerTimeoutSeconds: 7 });
  try {
    expect({ write: await db.write((tx) => tx.get("SHOW lock_timeout")), outside: await db.get("SHOW lock_timeout") }).toEqual({ write: { lock_timeout: "7s" }, outside: { lock_timeout: "0" } });
  } finally {
    await db.close();
  }
});
