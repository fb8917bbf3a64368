import { Database } from "bun:sqlite";
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { openDatabase } from "../../server/db/database.ts";
import { startServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";

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

  test("openDatabase keeps every statement prepared: the same SQL gets the same statement after many others", () => {
    const db = openDatabase(join(dir, "crm.sqlite"));
    const first = db.query("SELECT 1 AS n");
    for (const sql of distinctQueries(300)) expect(db.query<{ n: number; v: string }, [string]>(sql).get("x")).toEqual({ n: Number(sql.split(" ")[1]), v: "x" });
    expect(db.query("SELECT 1 AS n")).toBe(first);
    expect(first.get()).toEqual({ n: 1 });
    db.close();
  });

  test("transactions, writes and close work through the cached statements, and the file opens again", () => {
    const path = join(dir, "crm.sqlite");
    const db = openDatabase(path);
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
    db.close();
    const again = openDatabase(path);
    expect(again.query("SELECT sum(n) AS s FROM t").get()).toEqual({ s: 10 });
    again.close();
  });
});

describe("database: durability", () => {
  const level = (db: Database) => db.query<{ synchronous: number }, []>("PRAGMA synchronous").get()!.synchronous;

  test("openDatabase syncs every commit (synchronous FULL = 2) unless told normal (1), always in WAL mode", () => {
    const full = openDatabase(join(dir, "full.sqlite"));
    const normal = openDatabase(join(dir, "normal.sqlite"), "normal");
    expect([level(full), level(normal)]).toEqual([2, 1]);
    expect([full, normal].map((db) => db.query<{ journal_mode: string }, []>("PRAGMA journal_mode").get()!.journal_mode)).toEqual(["wal", "wal"]);
    full.close();
    normal.close();
  });

  test("serve opens its database with the configured level: full by default, normal when set", async () => {
    const levels: number[] = [];
    for (const synchronous of [DEFAULT_CONFIG.synchronous, "normal"] as const) {
      const running = await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir: join(dir, synchronous), synchronous, logLevel: "error" }, createLogger("error", () => {}));
      levels.push(level(running.runtime.db));
      await running.stop();
    }
    expect(levels).toEqual([2, 1]);
  });
});
