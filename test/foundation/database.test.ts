import { Database } from "bun:sqlite";
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { isSqliteBusy, opaqueParameters, openDatabase } from "../../server/db/database.ts";
import type { Db } from "../../server/db/sql.ts";
import { startServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";
import { errorCode } from "../../server/shared/thrown.ts";

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "crm-db-"));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const distinctQueries = (n: number) => Array.from({ length: n }, (_, i) => `SELECT ${i} AS n, ? AS v`);

describe("database: statement cache", () => {
  test("bun:sqlite alone prepares a statement again once 20 others were used since (why the cache exists)", () => {
    const db = new Database(":memory:");
    const first = db.query("SELECT 1 AS n");
    for (const sql of distinctQueries(30)) db.query(sql).get(1);
    expect(db.query("SELECT 1 AS n")).not.toBe(first);
    db.close();
  });

  test("openDatabase keeps every statement prepared: the same SQL gets the same statement after many others", async () => {
    const database = openDatabase(join(dir, "crm.sqlite"));
    const db = database.sqlite;
    const first = db.query("SELECT 1 AS n");
    for (const sql of distinctQueries(300)) expect(db.query<{ n: number; v: string }, [string]>(sql).get("x")).toEqual({ n: Number(sql.split(" ")[1]), v: "x" });
    expect(db.query("SELECT 1 AS n")).toBe(first);
    expect(first.get()).toEqual({ n: 1 });
    await database.close();
  });

  test("the cache is bounded by count and by the length of its SQL: the oldest statements are finalized and prepared again when asked for", async () => {
    const database = openDatabase(join(dir, "crm.sqlite"));
    const db = database.sqlite;
    const first = db.query("SELECT 1 AS n");
    for (const sql of distinctQueries(600)) db.query(sql).get(1);
    // 600 statements later the first is gone, finalized: running it fails, and asking again prepares it anew
    expect(() => first.get()).toThrow();
    const again = db.query("SELECT 1 AS n");
    expect(again).not.toBe(first);
    expect(again.get()).toEqual({ n: 1 });
    // a few long texts (a list of many filters is some kilobytes) push out the short ones well before 500
    const kept = db.query("SELECT 2 AS n");
    const long = (i: number) => `SELECT ${i} AS n, '${"x".repeat(20_000)}' AS padding`;
    for (let i = 0; i < 100; i++) db.query(long(i)).get();
    expect(db.query("SELECT 2 AS n")).not.toBe(kept);
    await database.close();
  });

  test("placeholders are bound as +? (the plan is made once), never inside quoted strings, names or comments", () => {
    expect(opaqueParameters("SELECT a FROM t WHERE b = ? AND c IN (?, ?) AND d = '?' AND \"e?\" = 1 -- f?\nLIMIT CAST(? AS INTEGER) /* ? */")).toBe(
      "SELECT a FROM t WHERE b = +? AND c IN (+?, +?) AND d = '?' AND \"e?\" = 1 -- f?\nLIMIT CAST(+? AS INTEGER) /* ? */",
    );
    expect(opaqueParameters("SELECT 1")).toBe("SELECT 1");
  });

  test("+? binds every kind of value unchanged: text stays text (no number affinity), blobs, nulls and numbers", async () => {
    const database = openDatabase(join(dir, "crm.sqlite"));
    const row = await database.get("SELECT typeof(?) AS t1, ? AS v1, typeof(?) AS t2, ? AS v2, ? AS v3, ? AS v4", ["007", "007", new Uint8Array([1]), new Uint8Array([1]), null, 2.5]);
    expect(row).toEqual({ t1: "text", v1: "007", t2: "blob", v2: new Uint8Array([1]), v3: null, v4: 2.5 });
    await database.close();
  });

  test("transactions, writes and close work through the cached statements, and the file opens again", async () => {
    const path = join(dir, "crm.sqlite");
    const database = openDatabase(path);
    const db = database.sqlite;
    db.run("CREATE TABLE t (n INTEGER)");
    const insert = db.query("INSERT INTO t (n) VALUES (?)");
    db.transaction(() => {
      for (let n = 0; n < 5; n++) insert.run(n);
    })();
    expect(() => db.transaction(() => {
      insert.run(99);
      throw new Error("roll back");
    })()).toThrow("roll back");
    expect(db.query("SELECT count(*) AS c FROM t").get()).toEqual({ c: 5 });
    await database.close();
    const again = openDatabase(path);
    expect(again.sqlite.query("SELECT sum(n) AS s FROM t").get()).toEqual({ s: 10 });
    await again.close();
  });
});

describe("database: read snapshots", () => {
  test("the reads of one event-loop turn share a snapshot; the next turn sees what another connection committed", async () => {
    const db = openDatabase(join(dir, "crm.sqlite"));
    await db.write((tx) => tx.run("CREATE TABLE t (n INTEGER)"));
    const other = new Database(join(dir, "crm.sqlite"));
    expect(await db.get("SELECT count(*) AS n FROM t")).toEqual({ n: 0 });
    other.run("INSERT INTO t (n) VALUES (1)");
    expect(await db.get("SELECT count(*) AS n FROM t")).toEqual({ n: 0 });
    await new Promise((resolve) => setImmediate(resolve));
    expect(await db.get("SELECT count(*) AS n FROM t")).toEqual({ n: 1 });
    other.close();
    await db.close();
  });

  test("a commit ends the snapshot: a read after a write sees it, even when the snapshot began during the write", async () => {
    const db = openDatabase(join(dir, "crm.sqlite"));
    await db.write((tx) => tx.run("CREATE TABLE t (n INTEGER)"));
    let readDuringWrite: unknown = null;
    await db.write(async (tx) => {
      // A read outside the write while it runs (another request's) opens the turn's snapshot first.
      readDuringWrite = await db.get("SELECT count(*) AS n FROM t");
      await tx.run("INSERT INTO t (n) VALUES (1)");
    });
    expect(readDuringWrite).toEqual({ n: 0 });
    expect(await db.get("SELECT count(*) AS n FROM t")).toEqual({ n: 1 });
    await db.close();
  });
});

describe("database: durability", () => {
  const writerLevel = (db: Database) => db.query<{ synchronous: number }, []>("PRAGMA synchronous").get()!.synchronous;
  /** readerLevel reads the level through the Db interface: outside a write, on the reader connection */
  const readerLevel = async (db: Db) => (await db.get<{ synchronous: number }>("PRAGMA synchronous"))!.synchronous;

  test("openDatabase syncs every commit (synchronous FULL = 2) unless told normal (1), always in WAL mode, on both connections", async () => {
    const full = openDatabase(join(dir, "full.sqlite"));
    const normal = openDatabase(join(dir, "normal.sqlite"), "normal");
    expect([writerLevel(full.sqlite), writerLevel(normal.sqlite), await readerLevel(full), await readerLevel(normal)]).toEqual([2, 1, 2, 1]);
    expect([full, normal].map((db) => db.sqlite.query<{ journal_mode: string }, []>("PRAGMA journal_mode").get()!.journal_mode)).toEqual(["wal", "wal"]);
    await full.close();
    await normal.close();
  });

  test("serve opens its database with the configured level: full by default, normal when set", async () => {
    const levels: number[] = [];
    for (const synchronous of [DEFAULT_CONFIG.synchronous, "normal"] as const) {
      const running = await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir: join(dir, synchronous), synchronous, logLevel: "error" }, createLogger("error", () => {}));
      levels.push(await readerLevel(running.runtime.db));
      await running.stop();
    }
    expect(levels).toEqual([2, 1]);
  });
});

describe("database: a lock another connection holds", () => {
  test("isSqliteBusy tells SQLite's refusals for a held lock, plain and extended, from its other errors and from values that are no SQLite error", () => {
    const path = join(dir, "busy.sqlite");
    const holder = new Database(path);
    holder.run("PRAGMA journal_mode = WAL");
    holder.run("CREATE TABLE t (n INTEGER)");
    const other = new Database(path);
    other.run("PRAGMA busy_timeout = 0");
    // A snapshot read before the holder's commit cannot be upgraded to a write after it: SQLITE_BUSY_SNAPSHOT.
    other.run("BEGIN");
    other.query("SELECT count(*) FROM t").get();
    holder.run("BEGIN IMMEDIATE");
    const thrownBy = (run: () => unknown) => {
      try {
        run();
      } catch (error) {
        return error;
      }
      return null;
    };
    const busy = thrownBy(() => other.run("INSERT INTO t VALUES (1)"));
    holder.run("INSERT INTO t VALUES (2)");
    holder.run("COMMIT");
    const snapshot = thrownBy(() => other.run("INSERT INTO t VALUES (3)"));
    other.run("ROLLBACK");
    const missing = thrownBy(() => other.run("INSERT INTO missing VALUES (1)"));
    other.close();
    holder.close();
    const errors = [busy, snapshot, missing, null, "SQLITE_BUSY", { code: "SQLITE_BUSY_TIMEOUT" }];
    expect(errors.map((error) => [errorCode(error) ?? null, isSqliteBusy(error)])).toEqual([
      ["SQLITE_BUSY", true],
      ["SQLITE_BUSY_SNAPSHOT", true],
      ["SQLITE_ERROR", false],
      [null, false],
      [null, false],
      ["SQLITE_BUSY_TIMEOUT", true],
    ]);
  });
});
