import type { Database } from "bun:sqlite";

export type EventRow = {
  id: string;
  type: string;
  payload: string;
  created_at: number;
}

/** insertEvent stores one outbox event. */
export function insertEvent(db: Database, row: EventRow): void {
  db.query("INSERT INTO events (id, type, payload, created_at) VALUES ($id, $type, $payload, $created_at)").run(row);
}
