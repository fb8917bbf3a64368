import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase, type SqliteDatabase } from "../../server/db/database.ts";
import type { Db } from "../../server/db/sql.ts";
import { GROUP_TIME_MS } from "../../server/db/write-groups.ts";

let dir = "";
let db: SqliteDatabase;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "crm-write-queue-"));
  db = openDatabase(join(dir, "crm.sqlite"));
  db.sqlite.run("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)");
});

afterEach(async () => {
  await db.close();
  rmSync(dir, { recursive: true, force: true });
});

const insert = (text: string) => async (tx: Db) => (await tx.get<{ id: number }>("INSERT INTO notes (text) VALUES (?) RETURNING id", [text]))!.id;
const notes = async (from: Db = db) => (await from.all<{ text: string }>("SELECT text FROM notes ORDER BY id")).map((n) => n.text);

describe("group commit", () => {
  test("the writes of one event-loop turn commit together, and each caller gets its own result", async () => {
    let commits = 0;
    db.onCommit(() => commits++);
    const results = await Promise.all([db.write(insert("a")), db.write(insert("b")), db.write(async () => 42)]);
    expect(results).toEqual([1, 2, 42]);
    expect(commits).toBe(1);
    await db.write(insert("c"));
    expect(commits).toBe(2);
    expect(await notes()).toEqual(["a", "b", "c"]);
  });

  test("a write that fails midway rolls back alone: the writes before and after it in the batch commit", async () => {
    const first = db.write(insert("first"));
    const failing = db.write(async (tx) => {
      await tx.run("INSERT INTO notes (text) VALUES (?)", ["half-done"]);
      throw new Error("refused after writing");
    });
    const last = db.write(insert("last"));
    const outcomes = await Promise.allSettled([first, failing, last]);
    expect(outcomes.map((o) => o.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((outcomes[1] as PromiseRejectedResult).reason).toEqual(new Error("refused after writing"));
    expect(await notes()).toEqual(["first", "last"]);
  });

  test("a caller is answered only after the commit: another connection already sees the write", async () => {
    const other = new Database(join(dir, "crm.sqlite"), { readonly: true });
    try {
      const seen = await db.write(insert("visible")).then(() => other.query<{ text: string }, []>("SELECT text FROM notes ORDER BY id").all().map((n) => n.text));
      expect(seen).toEqual(["visible"]);
    } finally {
      other.close();
    }
  });

  test(`a group takes no further write once its writes have run ${GROUP_TIME_MS} ms: the rest commit in the next group, in order`, async () => {
    let commits = 0;
    db.onCommit(() => commits++);
    const slow = db.write(async (tx) => {
      await Bun.sleep(GROUP_TIME_MS + 50);
      return insert("slow")(tx);
    });
    const results = await Promise.all([slow, db.write(insert("second")), db.write(insert("third"))]);
    expect({ results, commits, notes: await notes() }).toEqual({ results: [1, 2, 3], commits: 2, notes: ["slow", "second", "third"] });
  });

  test("works of one group run one after another, never two at once on the writer, each seeing the ones before it", async () => {
    const order: string[] = [];
    const slowly = (text: string) => async (tx: Db) => {
      order.push(`start ${text}`);
      await tx.run("INSERT INTO notes (text) VALUES (?)", [text]);
      await Promise.resolve();
      const seen = await notes(tx);
      order.push(`end ${text}`);
      return seen;
    };
    const [a, b] = await Promise.all([db.write(slowly("a")), db.write(slowly("b"))]);
    expect(order).toEqual(["start a", "end a", "start b", "end b"]);
    expect([a, b]).toEqual([["a"], ["a", "b"]]);
  });
});

describe("reads outside a write", () => {
  test("do not see a group's uncommitted rows while its work awaits; they see them once it committed", async () => {
    let seenMidway: string[] = [];
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const writing = db.write(async (tx) => {
      await tx.run("INSERT INTO notes (text) VALUES (?)", ["pending"]);
      await held;
    });
    await Bun.sleep(5);
    seenMidway = await notes();
    release();
    await writing;
    expect({ seenMidway, after: await notes() }).toEqual({ seenMidway: [], after: ["pending"] });
  });

  test("a run outside a write is a write of its own, and the reader connection refuses changes", async () => {
    expect(await db.run("INSERT INTO notes (text) VALUES (?)", ["through run"])).toBe(1);
    expect(await notes()).toEqual(["through run"]);
    await expect(db.get("INSERT INTO notes (text) VALUES ('sneaked') RETURNING id")).rejects.toThrow("readonly");
  });

  test("close commits the writes still queued", async () => {
    const queued = db.write(insert("queued"));
    await db.close();
    expect(await queued).toBe(1);
    const again = openDatabase(join(dir, "crm.sqlite"));
    expect(await notes(again)).toEqual(["queued"]);
    db = again;
  });
});
