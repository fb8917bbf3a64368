import { describe, expect, test } from "bun:test";
import { Database, SQLiteError } from "bun:sqlite";
import { readFileSync } from "node:fs";
import { errorCode, sqlStateOf } from "../../server/shared/thrown.ts";

/** thrownBy is what `run` throws. */
function thrownBy(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    return error;
  }
  throw new Error("nothing was thrown");
}

describe("the fields of a thrown value", () => {
  test("errorCode and sqlStateOf read a string code and errno, and nothing from values without them, null and primitives too", () => {
    const postgres = Object.assign(new Error("could not serialize access"), { code: "ERR_POSTGRES_SERVER_ERROR", errno: "40001" });
    const thrown: unknown[] = [postgres, Object.assign(new Error("no such file"), { code: "ENOENT", errno: -2 }), { code: 5, errno: 5 }, new Error("plain"), null, undefined, "text", 7];
    expect(thrown.map((error) => [errorCode(error), sqlStateOf(error)])).toEqual([
      ["ERR_POSTGRES_SERVER_ERROR", "40001"],
      ["ENOENT", undefined],
      [undefined, undefined],
      [undefined, undefined],
      [undefined, undefined],
      [undefined, undefined],
      [undefined, undefined],
      [undefined, undefined],
    ]);
  });

  test("a SQLite error gives its extended code and no SQLSTATE; a file system error its code", () => {
    const db = new Database(":memory:");
    const sqlite = thrownBy(() => db.run("INSERT INTO missing VALUES (1)"));
    db.close();
    expect(sqlite).toBeInstanceOf(SQLiteError);
    expect([errorCode(sqlite), sqlStateOf(sqlite)]).toEqual(["SQLITE_ERROR", undefined]);
    expect(errorCode(thrownBy(() => readFileSync("/nonexistent/file")))).toBe("ENOENT");
  });
});
