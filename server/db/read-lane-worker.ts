// The read lane's thread (read-lane.ts): one read-only connection to the database file, whose
// statements run here, so that a slow one holds up no request of the main thread.
import type { Database as SqliteConnection } from "bun:sqlite";
import { DatabaseReplaced, openReadOnlyConnection } from "./database.ts";
import type { LaneAnswer, LaneCall, LaneOpen, LaneRefusal } from "./read-lane.ts";
import { errorCode } from "../shared/thrown.ts";

declare const self: Worker;

let connection: SqliteConnection | null = null;
let inSnapshot = false;

self.onmessage = (event: MessageEvent<LaneCall | LaneOpen>) => {
  const call = event.data;
  // Thrown out of the handler, a failure to open ends the thread: the lane runs the read on the
  // main thread instead, and tries a new thread for the next. Another file at the path is refused
  // for good: the lane starts no thread again.
  if (call.kind === "open") {
    try {
      connection = openReadOnlyConnection(call.path, "full", call.file);
    } catch (error) {
      if (!(error instanceof DatabaseReplaced)) throw error;
      self.postMessage({ refused: error.message } satisfies LaneRefusal);
    }
    return;
  }
  let answer: LaneAnswer;
  try {
    answer = { id: call.id, value: answerCall(connection!, call) };
  } catch (error) {
    answer = { id: call.id, error: { message: (error as Error).message, code: errorCode(error) } };
  }
  self.postMessage(answer);
};

function answerCall(connection: SqliteConnection, call: LaneCall): unknown {
  if (call.kind === "close") {
    if (connection.inTransaction) connection.query("ROLLBACK").run();
    // The service's own close is then the file's last: SQLite checkpoints the WAL and removes it.
    connection.close();
    return null;
  }
  if (call.kind === "end") {
    if (!inSnapshot) return null;
    inSnapshot = false;
    try {
      connection.query("COMMIT").run();
    } catch (error) {
      // The next session must not read in this one's snapshot.
      if (connection.inTransaction) connection.query("ROLLBACK").run();
      throw error;
    }
    return null;
  }
  // A session's snapshot begins with its first statement, sent after its request arrived: it sees
  // every commit answered before.
  if (!inSnapshot) {
    connection.query("BEGIN").run();
    inSnapshot = true;
  }
  const statement = connection.query(call.sql);
  return call.kind === "all" ? statement.all(...call.params) : statement.get(...call.params);
}
