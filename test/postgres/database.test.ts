import { SQL } from "bun";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ConfigError } from "../../server/config.ts";
import { numberPlaceholders, openPostgres, WRITE_LOCK, type PostgresDatabase } from "../../server/db/postgres.ts";
import type { Db } from "../../server/db/sql.ts";
import { GROUP_TIME_MS } from "../../server/db/write-groups.ts";
import { waitUntil } from "../ops/support.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

// PostgresDatabase, the PostgreSQL implementation of server/db/sql.ts, against the real test server.

let server: TestDatabase;
let db: PostgresDatabase;

beforeAll(async () => {
  server = await createTestDatabase();
  db = await openPostgres(server.url, 3);
  await db.run(`CREATE TABLE things (
    id         text PRIMARY KEY,
    n          bigint NOT NULL,
    ratio      double precision,
    hash       bytea,
    note       text
  )`);
}, 60_000);

afterAll(async () => {
  await db?.close();
  await server?.drop();
});

describe("postgres database: statements", () => {
  test("? placeholders become $1..$n, except inside quoted strings, quoted names and comments", () => {
    expect(numberPlaceholders(`SELECT '?' AS "a?", x FROM t WHERE a = ? AND b = ? -- why?\nAND c = ?`)).toBe(
      `SELECT '?' AS "a?", x FROM t WHERE a = $1 AND b = $2 -- why?\nAND c = $3`,
    );
  });

  test("values come back with the types bun:sqlite gives: int8 as number, bytea as a plain Uint8Array", async () => {
    const now = Date.now();
    expect(await db.run("INSERT INTO things (id, n, ratio, hash, note) VALUES (?, ?, ?, ?, ?), (?, ?, ?, ?, ?)", [
      "a", now, 0.25, new Uint8Array([0, 1, 255]), "first",
      "b", 2, null, null, null,
    ])).toBe(2);
    const rows = await db.all<Record<string, unknown>>("SELECT id, n, ratio, hash, note, count(*) OVER () AS total FROM things ORDER BY id");
    expect(rows).toEqual([
      { id: "a", n: now, ratio: 0.25, hash: new Uint8Array([0, 1, 255]), note: "first", total: 2 },
      { id: "b", n: 2, ratio: null, hash: null, note: null, total: 2 },
    ]);
    expect(rows[0]!.hash!.constructor).toBe(Uint8Array);
    expect(Array.isArray(rows)).toBe(true);
  });

  test("conditions read back as 1 and 0, as on SQLite; a cast sum as a number", async () => {
    expect(await db.get("SELECT 1 < 2 AS yes, EXISTS (SELECT 1 FROM things WHERE id = 'none') AS no, CAST(sum(n) AS bigint) AS total FROM (VALUES (1), (2)) v(n)")).toEqual({ yes: 1, no: 0, total: 3 });
  });

  test("a bytea parameter matches the stored bytes", async () => {
    expect(await db.get("SELECT id FROM things WHERE hash = ?", [new Uint8Array([0, 1, 255])])).toEqual({ id: "a" });
    expect(await db.get("SELECT id FROM things WHERE hash = ?", [new Uint8Array([0, 1, 254])])).toBeNull();
  });

  test("run returns how many rows the statement changed", async () => {
    expect(await db.run("UPDATE things SET note = ? WHERE n > ?", ["touched", 0])).toBe(2);
    expect(await db.run("DELETE FROM things WHERE id = ?", ["missing"])).toBe(0);
    expect(await db.run("INSERT INTO things (id, n) VALUES (?, ?) ON CONFLICT (id) DO NOTHING", ["a", 9])).toBe(0);
  });
});

describe("postgres database: writes", () => {
  test("write commits its work and resolves with its result, then runs the onCommit callbacks", async () => {
    const seen: unknown[] = [];
    db.onCommit(() => seen.push("committed"));
    const result = await db.write(async (tx) => {
      await tx.run("INSERT INTO things (id, n) VALUES (?, ?)", ["w1", 1]);
      expect(seen).toEqual([]);
      return tx.get<{ n: number }>("SELECT n FROM things WHERE id = ?", ["w1"]);
    });
    expect(result).toEqual({ n: 1 });
    expect(seen).toEqual(["committed"]);
    expect(await db.get("SELECT n FROM things WHERE id = ?", ["w1"])).toEqual({ n: 1 });
  });

  test("onCommit callbacks run after commits that changed rows, inside or outside write, and not after ones that changed none", async () => {
    const seen: string[] = [];
    db.onCommit(() => seen.push("woken"));
    await db.write(async (tx) => {
      await tx.all("SELECT id FROM things FOR UPDATE SKIP LOCKED");
      await tx.run("UPDATE things SET n = n WHERE id = ?", ["missing"]);
      await tx.run("INSERT INTO things (id, n) VALUES (?, ?) ON CONFLICT (id) DO NOTHING", ["a", 1]);
    });
    await db.run("DELETE FROM things WHERE id = ?", ["missing"]);
    expect(seen).toEqual([]);
    await db.write((tx) => tx.all("INSERT INTO things (id, n) VALUES (?, ?) RETURNING id", ["w-returning", 1]));
    expect(seen).toEqual(["woken"]);
    await db.run("UPDATE things SET n = n + 1 WHERE id = ?", ["w-returning"]);
    expect(seen).toEqual(["woken", "woken"]);
  });

  test("a work that throws rolls everything back, rejects with its error and runs no onCommit callback", async () => {
    let commits = 0;
    db.onCommit(() => commits++);
    const attempt = db.write(async (tx) => {
      await tx.run("INSERT INTO things (id, n) VALUES (?, ?)", ["w2", 1]);
      throw new Error("undo this");
    });
    await expect(attempt).rejects.toThrow("undo this");
    expect(commits).toBe(0);
    expect(await db.get("SELECT id FROM things WHERE id = ?", ["w2"])).toBeNull();
  });

  test("a unique violation inside a write rejects with errno 23505 and commits nothing", async () => {
    const error = await db.write(async (tx) => {
      await tx.run("INSERT INTO things (id, n) VALUES (?, ?)", ["w3", 1]);
      await tx.run("INSERT INTO things (id, n) VALUES (?, ?)", ["a", 1]);
    }).catch((e) => e);
    expect(error.errno).toBe("23505");
    expect(await db.get("SELECT id FROM things WHERE id = ?", ["w3"])).toBeNull();
  });

  test("concurrent writes on the pool all commit", async () => {
    const ids = Array.from({ length: 12 }, (_, i) => `c${i}`);
    await Promise.all(ids.map((id) => db.write((tx) => tx.run("INSERT INTO things (id, n) VALUES (?, ?)", [id, 1]))));
    expect(await db.get("SELECT count(*) AS n FROM things WHERE id LIKE 'c%'")).toEqual({ n: 12 });
  });

  test("outsideWritesGeneration changes on every call: another instance may revoke a token at any time", async () => {
    const first = db.outsideWritesGeneration();
    const second = db.outsideWritesGeneration();
    expect(second).not.toBe(first);
  });
});

describe("postgres database: group commit", () => {
  const transactionOf = (id: string) => async (tx: Db) => {
    await tx.run("INSERT INTO things (id, n) VALUES (?, ?)", [id, 1]);
    return (await tx.get<{ xid: string }>("SELECT txid_current()::text AS xid"))!.xid;
  };

  test("the writes of one event-loop turn commit in one transaction, each caller gets its own result, onCommit runs once", async () => {
    let commits = 0;
    db.onCommit(() => commits++);
    const [a, b, answer] = await Promise.all([db.write(transactionOf("g1")), db.write(transactionOf("g2")), db.write(async () => 42)]);
    expect({ sameTransaction: a === b, answer, commits }).toEqual({ sameTransaction: true, answer: 42, commits: 1 });
    const later = await db.write(transactionOf("g3"));
    expect({ later: later !== a, commits }).toEqual({ later: true, commits: 2 });
  });

  test("a write that fails midway rolls back alone, with its own error; the writes before and after it commit", async () => {
    const first = db.write((tx) => tx.run("INSERT INTO things (id, n) VALUES (?, ?)", ["f-first", 1]));
    const refused = db.write(async (tx) => {
      await tx.run("INSERT INTO things (id, n) VALUES (?, ?)", ["f-half-done", 1]);
      throw new Error("refused after writing");
    });
    const duplicate = db.write(async (tx) => {
      await tx.run("INSERT INTO things (id, n) VALUES (?, ?)", ["f-before-duplicate", 1]);
      await tx.run("INSERT INTO things (id, n) VALUES (?, ?)", ["f-first", 1]);
    });
    const last = db.write((tx) => tx.run("INSERT INTO things (id, n) VALUES (?, ?)", ["f-last", 1]));
    const outcomes = await Promise.allSettled([first, refused, duplicate, last]);
    expect(outcomes.map((o) => (o.status === "fulfilled" ? o.value : (o.reason as { errno?: string; message: string }).errno ?? o.reason.message))).toEqual([
      1,
      "refused after writing",
      "23505",
      1,
    ]);
    expect(await db.all("SELECT id FROM things WHERE id LIKE 'f-%' ORDER BY id")).toEqual([{ id: "f-first" }, { id: "f-last" }]);
  });

  test("a work that caught a failed statement and returned is refused with that statement's error; the other writes of its group commit", async () => {
    await db.run("INSERT INTO things (id, n) VALUES (?, ?)", ["s-taken", 1]);
    const swallowing = db.write(async (tx) => {
      await tx.run("INSERT INTO things (id, n) VALUES (?, ?)", ["s-swallowed", 1]);
      await tx.run("INSERT INTO things (id, n) VALUES (?, ?)", ["s-taken", 1]).catch(() => 0);
      return "returned";
    });
    const after = db.write((tx) => tx.run("INSERT INTO things (id, n) VALUES (?, ?)", ["s-after", 1]));
    const outcomes = await Promise.allSettled([swallowing, after]);
    expect(outcomes.map((o) => (o.status === "fulfilled" ? o.value : (o.reason as { errno?: string }).errno))).toEqual(["23505", 1]);
    expect(await db.all("SELECT id FROM things WHERE id LIKE 's-%' ORDER BY id")).toEqual([{ id: "s-after" }, { id: "s-taken" }]);
  });

  test(`a group takes no further write once its writes have run ${GROUP_TIME_MS} ms: the rest commit in the next group, in order`, async () => {
    const slow = db.write(async (tx) => {
      await tx.run(`SELECT pg_sleep(${(GROUP_TIME_MS + 50) / 1000})`);
      return transactionOf("t-slow")(tx);
    });
    const [first, second, third] = await Promise.all([slow, db.write(transactionOf("t-second")), db.write(transactionOf("t-third"))]);
    expect({ split: first !== second, togetherAfter: second === third }).toEqual({ split: true, togetherAfter: true });
  });

  test("writes that come while the group waits for another session's write lock join that group", async () => {
    const holder = new SQL({ url: server.url, max: 1 });
    try {
      const held = Promise.withResolvers<void>();
      const holding = holder.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(${WRITE_LOCK}::bigint)`;
        await held.promise;
      });
      const writeLocks = (granted: boolean) =>
        db.get<{ n: number }>(`SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND ${granted ? "" : "NOT "}granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`);
      await waitUntil(async () => (await writeLocks(true))!.n === 1, "the other session to hold the write lock");
      const first = db.write(transactionOf("l1"));
      await waitUntil(async () => (await writeLocks(false))!.n === 1, "the first write's group to wait for the lock");
      const second = db.write(transactionOf("l2"));
      await waitUntil(() => db.writesWaiting() === 2, "the second write to queue");
      held.resolve();
      await holding;
      const [a, b] = await Promise.all([first, second]);
      expect({ sameTransaction: a === b, waiting: db.writesWaiting() }).toEqual({ sameTransaction: true, waiting: 0 });
    } finally {
      await holder.close();
    }
  });

  test("close commits the writes still queued", async () => {
    const other = await openPostgres(server.url, 1);
    const queued = other.write((tx) => tx.run("INSERT INTO things (id, n) VALUES (?, ?)", ["q-queued", 1]));
    await other.close();
    expect({ queued: await queued, row: await db.get("SELECT id FROM things WHERE id = ?", ["q-queued"]) }).toEqual({ queued: 1, row: { id: "q-queued" } });
  });
});

describe("postgres database: reads in one snapshot", () => {
  test("the reads of one read agree, though a write commits between them; the next read sees it", async () => {
    const count = (on: { get<T>(sql: string): Promise<T | null> }) => on.get<{ n: number }>("SELECT count(*) AS n FROM things WHERE id LIKE 'r%'");
    const seen = await db.read(async (snapshot) => {
      const first = await count(snapshot);
      await db.write((tx) => tx.run("INSERT INTO things (id, n) VALUES ('r1', 1)"));
      return [first, await count(snapshot), await count(db)];
    });
    expect(seen).toEqual([{ n: 0 }, { n: 0 }, { n: 1 }]);
    expect(await db.read(count)).toEqual({ n: 1 });
  });

  test("a read cannot change data", async () => {
    await expect(db.read((snapshot) => snapshot.run("INSERT INTO things (id, n) VALUES ('r2', 1)"))).rejects.toThrow("read-only");
    expect(await db.get("SELECT count(*) AS n FROM things WHERE id = 'r2'")).toEqual({ n: 0 });
  });
});

describe("postgres database: slow reads", () => {
  test("with a read lane, slow reads run on at most half the pool: two more wait their turn, while other reads and writes are answered on the rest; readers take turns", async () => {
    // One held read is released first, so the reads that waited run one at a time on the place it
    // frees, in turn order (two started together could answer their BEGINs in either order).
    const pooled = await openPostgres(server.url, 4);
    const held = [Promise.withResolvers<void>(), Promise.withResolvers<void>()];
    try {
      pooled.useReadLane(8);
      const order: string[] = [];
      /** a slow read in a snapshot, noted as it starts; the two first hold their connection until released */
      const slow = (reader: string, hold?: Promise<void>) =>
        pooled.readAside(async (tx) => {
          order.push(reader);
          const n = (await tx.get<{ n: number }>("SELECT count(*)::int AS n FROM things"))!.n;
          await hold;
          return n;
        }, reader);
      const holding = [slow("busy", held[0]!.promise), slow("busy", held[1]!.promise)];
      const waiting = [slow("busy"), slow("busy"), slow("quiet")];
      await waitUntil(async () => (await pooled.get<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'"))!.n === 2, "both held reads to hold a connection");
      expect(pooled.readsAside()).toBe(5);
      // the other half of the pool answers everything else meanwhile
      expect(await pooled.write((tx) => tx.run("INSERT INTO things (id, n) VALUES ('during-slow-reads', 1)"))).toBe(1);
      expect(await pooled.read((tx) => tx.get("SELECT n FROM things WHERE id = 'during-slow-reads'"))).toEqual({ n: 1 });
      expect(order).toEqual(["busy", "busy"]);
      held[0]!.resolve();
      // the three waiting run in turns on the one place it frees: busy, quiet, busy
      await waitUntil(() => pooled.readsAside() === 1, "the waiting reads to run on the freed place");
      expect(order).toEqual(["busy", "busy", "busy", "quiet", "busy"]);
      held[1]!.resolve();
      await Promise.all([...holding, ...waiting]);
      expect(pooled.readsAside()).toBe(0);
    } finally {
      for (const { resolve } of held) resolve();
      await pooled.close();
    }
  });
});

describe("postgres database: opening", () => {
  test("a refused connection is a one-line ConfigError naming --database-url", async () => {
    const url = server.url.replace(/:\d+\//, ":1/");
    const error = await openPostgres(url, 1).catch((e) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect(error.message).toBe(`cannot use the PostgreSQL database at ${url} (--database-url, CRM_DATABASE_URL): connection refused (is the server running and the host and port right?)`);
  });

  test("a login the server refuses is a ConfigError with the server's reason and without the password", async () => {
    const url = server.url.replace("postgres@", "nobody:s3cret-pass@");
    const error = await openPostgres(url, 1).catch((e) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect(error.message).toBe(`cannot use the PostgreSQL database at ${url.replace("s3cret-pass", "***")} (--database-url, CRM_DATABASE_URL): role "nobody" does not exist`);
    expect(error.message).not.toContain("s3cret-pass");
  });

  test("sessions ask the server for TCP keepalives after 60 s of silence (they keep idle connections open in firewalls), and end an idle transaction after 10 s", async () => {
    const settings = await db.get("SELECT current_setting('tcp_keepalives_idle') AS idle, current_setting('tcp_keepalives_interval') AS every, current_setting('tcp_keepalives_count') AS count, current_setting('idle_in_transaction_session_timeout') AS idle_in_transaction, current_setting('application_name') AS name");
    expect(settings).toEqual({ idle: "60", every: "10", count: "3", idle_in_transaction: "10s", name: "crm" });
  });

  test("close ends the pool: later statements fail", async () => {
    const other = await openPostgres(server.url, 1);
    expect(await other.get("SELECT 1 AS one")).toEqual({ one: 1 });
    await other.close();
    await expect(other.get("SELECT 1 AS one")).rejects.toThrow();
  });
});
