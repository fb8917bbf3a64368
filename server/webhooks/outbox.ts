import type { Database } from "bun:sqlite";
import { newId } from "../shared/ids.ts";
import { toTimestamp } from "../shared/time.ts";
import { insertEvent } from "./store.ts";

export type EventType = "contact.created" | "contact.updated" | "contact.deleted" | "webhook.ping";

/** recordEvent writes an event to the outbox; call it inside the transaction of the change it describes. */
export function recordEvent(db: Database, type: EventType, data: unknown, now = Date.now()): string {
  const id = newId("evt", now);
  const payload = JSON.stringify({ type, timestamp: toTimestamp(now), data });
  insertEvent(db, { id, type, payload, created_at: now });
  return id;
}
