import { expect, test } from "bun:test";
import type { Db } from "../../server/db/sql.ts";
import { MigrationWatch } from "../../server/ops/migration-watch.ts";
import { createLogger } from "../../server/shared/log.ts";

// Every write looks for newer migrations from the moment the runtime exists (refuseWritesAfter),
// while serve starts the watch, with what stops the background work, only once it listens, has
// issued the setup code (a write) and has started the delivery loop.
test("newer migrations a write noticed before the watch started stop the background work when it starts, logged once", async () => {
  // Never read: the migrations are known already, so the watch has nothing to check.
  const db = { dialect: "postgres" } as unknown as Db;
  const lines: string[] = [];
  const watch = new MigrationWatch(db, createLogger("error", (line) => lines.push(line)));
  watch.noticed(["0043_from_a_newer_crm.sql"]);
  const stopped: string[] = [];
  watch.start(async () => void stopped.push("background work"));
  // stop waits for the background work's stop, when the watch began one.
  await watch.stop();
  expect({ newer: watch.newer, stopped, logged: lines.map((line) => JSON.parse(line).newer_migrations) }).toEqual({
    newer: ["0043_from_a_newer_crm.sql"],
    stopped: ["background work"],
    logged: [["0043_from_a_newer_crm.sql"]],
  });
});
