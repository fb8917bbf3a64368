import { SQL } from "bun";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

// What the PostgreSQL backend (issue 12) relies on, proven against the real test server with
// Bun's own client: pool, transactions, unique-violation errors, pg_trgm, advisory locks,
// LISTEN/NOTIFY and FOR UPDATE SKIP LOCKED.

let db: TestDatabase;
let sql: SQL;
const POOL_SIZE = 3;

beforeAll(async () => {
  db = await createTestDatabase();
  sql = new SQL({ url: db.url, max: POOL_SIZE });
}, 60_000);

afterAll(async () => {
  await sql?.close();
  await db?.drop();
});

/** untilTrue polls check until it holds, so tests wait for server state instead of a fixed delay. */
async function untilTrue(check: () => Promise<boolean>): Promise<void> {
  while (!(await check())) await Bun.sleep(10);
}

/** deferred is a promise with its resolve function, to hold a transaction open until released. */
function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe("postgres test server", () => {
  test("each test file gets its own empty database, as the superuser, in UTF-8 with Unicode case mapping", async () => {
    const [info] = await sql`
      SELECT current_database() AS database, current_user AS "user", pg_encoding_to_char(encoding) AS encoding, datlocale AS locale,
             (SELECT count(*)::int FROM pg_tables WHERE schemaname = 'public') AS tables
      FROM pg_database WHERE datname = current_database()`;
    expect(info).toEqual({ database: db.name, user: "postgres", encoding: "UTF8", locale: "C.UTF-8", tables: 0 });
    const [cases] = await sql`SELECT lower(${"ÉMILE ÇA"}) AS lower, ${"Émile Zola"} ILIKE ${"%émile%"} AS matches`;
    expect(cases).toEqual({ lower: "émile ça", matches: true });
  });
});

describe("bun sql: pool", () => {
  test("the pool opens at most `max` connections and hands a released one to the next waiter", async () => {
    const held = await Promise.all(Array.from({ length: POOL_SIZE }, () => sql.reserve()));
    const pids = await Promise.all(held.map(async (connection) => (await connection`SELECT pg_backend_pid() AS pid`)[0].pid as number));
    expect(new Set(pids).size).toBe(POOL_SIZE);

    let waiterGotOne = false;
    const waiter = sql.reserve().then((connection) => {
      waiterGotOne = true;
      return connection;
    });
    // A round trip on a held connection gives the waiter every chance to be served wrongly.
    await held[0]!`SELECT 1`;
    expect(waiterGotOne).toBe(false);

    await held[0]!.release();
    const next = await waiter;
    const [{ pid }] = await next`SELECT pg_backend_pid() AS pid`;
    expect(pid).toBe(pids[0]);
    await Promise.all([next, ...held.slice(1)].map((connection) => connection.release()));

    await Promise.all(Array.from({ length: 20 }, () => sql`SELECT pg_sleep(0.01)`));
    const [{ open }] = await sql`SELECT count(*)::int AS open FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'`;
    expect(open).toBeLessThanOrEqual(POOL_SIZE);
  });
});

describe("bun sql: transactions", () => {
  beforeAll(async () => {
    await sql`CREATE TABLE people (id int PRIMARY KEY, email text NOT NULL CONSTRAINT people_email_key UNIQUE)`;
  });

  test("sql.begin commits what the callback wrote and resolves with its result", async () => {
    const result = await sql.begin(async (tx) => {
      await tx`INSERT INTO people (id, email) VALUES (1, 'ada@example.com')`;
      await tx`INSERT INTO people (id, email) VALUES (2, 'grace@example.com')`;
      return "done";
    });
    expect(result).toBe("done");
    expect(await sql`SELECT id, email FROM people ORDER BY id`).toEqual([
      { id: 1, email: "ada@example.com" },
      { id: 2, email: "grace@example.com" },
    ]);
  });

  test("a callback that throws rolls the whole transaction back and sql.begin rejects with its error", async () => {
    const attempt = sql.begin(async (tx) => {
      await tx`INSERT INTO people (id, email) VALUES (3, 'linus@example.com')`;
      throw new Error("undo this");
    });
    await expect(attempt).rejects.toThrow("undo this");
    const [{ count }] = await sql`SELECT count(*)::int AS count FROM people WHERE id = 3`;
    expect(count).toBe(0);
  });

  test("a unique violation is a PostgresError with errno 23505 and the constraint's name", async () => {
    const error = await sql`INSERT INTO people (id, email) VALUES (4, 'ada@example.com')`.catch((e) => e);
    expect(error).toBeInstanceOf(SQL.PostgresError);
    expect({ code: error.code, errno: error.errno, constraint: error.constraint, table: error.table }).toEqual({
      code: "ERR_POSTGRES_SERVER_ERROR",
      errno: "23505",
      constraint: "people_email_key",
      table: "people",
    });
  });

  test("inside a transaction a savepoint absorbs a unique violation and the rest still commits", async () => {
    const outcome = await sql.begin(async (tx) => {
      const duplicate = await tx.savepoint((sp) => sp`INSERT INTO people (id, email) VALUES (5, 'grace@example.com')`).catch((e) => e);
      await tx`INSERT INTO people (id, email) VALUES (6, 'barbara@example.com')`;
      return duplicate.errno;
    });
    expect(outcome).toBe("23505");
    expect(await sql`SELECT id FROM people WHERE id IN (5, 6) ORDER BY id`).toEqual([{ id: 6 }]);
  });

  test("without a savepoint a failed statement aborts the transaction: the next statement fails with 25P02 and nothing commits", async () => {
    const attempt = sql.begin(async (tx) => {
      await tx`INSERT INTO people (id, email) VALUES (7, 'ada@example.com')`.catch(() => {});
      await tx`INSERT INTO people (id, email) VALUES (8, 'ken@example.com')`;
    });
    const error = await attempt.catch((e) => e);
    expect(error.errno).toBe("25P02");
    expect(await sql`SELECT id FROM people WHERE id IN (7, 8)`).toEqual([]);
  });
});

describe("postgres: pg_trgm", () => {
  test("the extension installs and a trigram GIN index serves a case-insensitive ILIKE '%x%' search", async () => {
    await sql`CREATE EXTENSION IF NOT EXISTS pg_trgm`;
    await sql`CREATE TABLE contacts (id int PRIMARY KEY, full_name text NOT NULL)`;
    await sql`INSERT INTO contacts SELECT n, 'Person ' || n FROM generate_series(1, 20000) AS n`;
    await sql`INSERT INTO contacts VALUES (20001, 'Ada Lovelace'), (20002, 'Émile Zola'), (20003, 'ADA BYRON LOVELACE')`;
    await sql`CREATE INDEX contacts_full_name_trgm ON contacts USING gin (full_name gin_trgm_ops)`;
    await sql`ANALYZE contacts`;

    const plan = (await sql`EXPLAIN SELECT id FROM contacts WHERE full_name ILIKE ${"%lovel%"}`).map((row: { "QUERY PLAN": string }) => row["QUERY PLAN"]).join("\n");
    expect(plan).toContain("Bitmap Index Scan on contacts_full_name_trgm");
    expect(plan).not.toContain("Seq Scan");

    expect(await sql`SELECT id FROM contacts WHERE full_name ILIKE ${"%lovel%"} ORDER BY id`).toEqual([{ id: 20001 }, { id: 20003 }]);
    expect(await sql`SELECT id FROM contacts WHERE full_name ILIKE ${"%ÉMILE%"} ORDER BY id`).toEqual([{ id: 20002 }]);
  });
});

describe("postgres: advisory locks", () => {
  test("pg_advisory_xact_lock makes a second transaction wait until the first commits", async () => {
    const events: string[] = [];
    const firstHolds = deferred();
    const releaseFirst = deferred();

    const first = sql.begin(async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(4242)`;
      events.push("first locked");
      firstHolds.resolve();
      await releaseFirst.promise;
      events.push("first commits");
    });
    await firstHolds.promise;

    const second = sql.begin(async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(4242)`;
      events.push("second locked");
    });
    await untilTrue(async () => {
      const [{ waiting }] = await sql`SELECT count(*)::int AS waiting FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted`;
      return waiting === 1;
    });
    const [{ taken }] = await sql`SELECT pg_try_advisory_xact_lock(4242) AS taken`;
    expect(taken).toBe(false);
    expect(events).toEqual(["first locked"]);

    releaseFirst.resolve();
    await Promise.all([first, second]);
    expect(events).toEqual(["first locked", "first commits", "second locked"]);
  });
});

describe("bun sql: LISTEN / NOTIFY", () => {
  test("sql.listen on one client receives what another client's connection notifies, and only what commits", async () => {
    const listener = new SQL({ url: db.url, max: 1 });
    const received: string[] = [];
    const arrived = deferred();
    const subscription = await listener.listen("deliveries", (payload) => {
      received.push(payload);
      if (payload === "after-commit") arrived.resolve();
    });
    try {
      await sql.notify("deliveries", "direct");
      await sql.begin(async (tx) => {
        await tx`SELECT pg_notify('deliveries', 'rolled-back')`;
        throw new Error("roll back");
      }).catch(() => {});
      await sql.begin(async (tx) => {
        await tx`SELECT pg_notify('deliveries', 'after-commit')`;
      });
      await arrived.promise;
      expect(received).toEqual(["direct", "after-commit"]);
    } finally {
      await subscription.unlisten();
      await listener.close();
    }
  });
});

describe("postgres: FOR UPDATE SKIP LOCKED", () => {
  test("two open transactions claim different rows, and a third finds none left", async () => {
    await sql`CREATE TABLE jobs (id int PRIMARY KEY, claimed_by text)`;
    await sql`INSERT INTO jobs (id) SELECT generate_series(1, 4)`;
    const claim = (tx: SQL) => tx`SELECT id FROM jobs WHERE claimed_by IS NULL ORDER BY id LIMIT 2 FOR UPDATE SKIP LOCKED`.then((rows: { id: number }[]) => rows.map((row) => row.id));

    const firstClaimed = deferred();
    const finish = deferred();
    const claims: Record<string, number[]> = {};
    const first = sql.begin(async (tx) => {
      claims.first = await claim(tx);
      firstClaimed.resolve();
      await finish.promise;
      await tx`UPDATE jobs SET claimed_by = 'first' WHERE id IN ${sql(claims.first)}`;
    });
    await firstClaimed.promise;
    await sql.begin(async (tx) => {
      claims.second = await claim(tx);
      const third = await sql.begin(async (other) => claim(other));
      expect(third).toEqual([]);
      await tx`UPDATE jobs SET claimed_by = 'second' WHERE id IN ${sql(claims.second)}`;
    });
    finish.resolve();
    await first;

    expect(claims).toEqual({ first: [1, 2], second: [3, 4] });
    expect(await sql`SELECT id, claimed_by FROM jobs ORDER BY id`).toEqual([
      { id: 1, claimed_by: "first" },
      { id: 2, claimed_by: "first" },
      { id: 3, claimed_by: "second" },
      { id: 4, claimed_by: "second" },
    ]);
  });
});
