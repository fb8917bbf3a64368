// The read lane's thread (read-lane.ts): one read-only connection to the database file, whose
// statements run here, so that a slow one holds up no request of the main thread.
import type { Database as SqliteConnection } from "bun:sqlite";
import { openReadOnlyConnection } from "./database.ts";
import type { LaneAnswer, LaneCall } from "./read-lane.ts";

declare const self: Worker;

let connection: SqliteConnection | null = null;
let openFailure: unknown = null;
let inSnapshot = false;

self.onmessage = (event: MessageEvent<LaneCall>) => {
  const call = event.data;
  let answer: LaneAnswer;
  try {
    answer = { id: call.id, value: answerCall(call) };
  } catch (error) {
    answer = { id: call.id, error: { message: (error as Error).message, code: (error as { code?: unknown }).code } };
  }
  self.postMessage(answer);
};

function answerCall(call: LaneCall): unknown {
  if (call.kind === "open") {
    try {
      connection = openReadOnlyConnection(call.path);
    } catch (error) {
      openFailure = error;
    }
    return null;
  }
  if (!connection) throw openFailure;
  if (call.kind === "end") {
    if (inSnapshot) connection.query("COMMIT").run();
    inSnapshot = false;
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
