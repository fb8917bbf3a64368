import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase } from "../../server/db/database.ts";
import { WriteQueue } from "../../server/db/write-queue.ts";

let dir = "";
let db: Database;
let queue: WriteQueue;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "crm-write-queue-"));
  db = openDatabase(join(dir, "crm.sqlite"));
  db.run("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)");
  queue = new WriteQueue(db);
});

afterEach(() => {
  db.close();
  rmSync(dir, { recursive: true, force: true });
});

const insert = (text: string) => () => db.query("INSERT INTO notes (text) VALUES (?)").run(text).lastInsertRowid;
const notes = (from: Database = db) => from.query<{ text: string }, []>("SELECT text FROM notes ORDER BY id").all().map((n) => n.text);

describe("group commit", () => {
  test("the writes of one event-loop turn commit together, and each caller gets its own result", async () => {
    let commits = 0;
    queue.onCommit(() => commits++);
    const results = await Promise.all([queue.submit(insert("a")), queue.submit(insert("b")), queue.submit(() => 42)]);
    expect(results).toEqual([1, 2, 42]);
    expect(commits).toBe(1);
    await queue.submit(insert("c"));
    expect(commits).toBe(2);
    expect(notes()).toEqual(["a", "b", "c"]);
  });

  test("a write that fails midway rolls back alone: the writes before and after it in the batch commit", async () => {
    const first = queue.submit(insert("first"));
    const failing = queue.submit(() => {
      db.query("INSERT INTO notes (text) VALUES (?)").run("half-done");
      throw new Error("refused after writing");
    });
    const last = queue.submit(insert("last"));
    const outcomes = await Promise.allSettled([first, failing, last]);
    expect(outcomes.map((o) => o.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((outcomes[1] as PromiseRejectedResult).reason).toEqual(new Error("refused after writing"));
    expect(notes()).toEqual(["first", "last"]);
  });

  test("a caller is answered only after the commit: another connection already sees the write", async () => {
    const other = new Database(join(dir, "crm.sqlite"), { readonly: true });
    try {
      const seen = await queue.submit(insert("visible")).then(() => notes(other));
      expect(seen).toEqual(["visible"]);
    } finally {
      other.close();
    }
  });
});
