import type { Database } from "bun:sqlite";
import { newId } from "../shared/ids.ts";
import { toTimestamp } from "../shared/time.ts";
import type { EventType } from "./model.ts";
import { findActiveSubscriptionsForEvent, insertDelivery, insertEvent } from "./store.ts";

function insertEventRow(db: Database, type: EventType, data: unknown, now: number): string {
  const id = newId("evt", now);
  // event_id is the same in every subscription's copy, unlike webhook-id, so receivers can de-duplicate across subscriptions.
  insertEvent(db, { id, type, payload: JSON.stringify({ type, event_id: id, timestamp: toTimestamp(now), data }), created_at: now });
  return id;
}

function insertDueDelivery(db: Database, eventId: string, type: EventType, subscription: { id: string; target_url: string }, now: number): string {
  const id = newId("dlv", now);
  insertDelivery(db, { id, event_id: eventId, event_type: type, subscription_id: subscription.id, target_url: subscription.target_url, next_attempt_at: now, created_at: now });
  return id;
}

/**
 * recordEvent writes an event and one delivery per active subscription that wants it; call it
 * inside the transaction of the change it describes, so the change and its deliveries commit together.
 */
export function recordEvent(db: Database, type: EventType, data: unknown, now = Date.now()): string {
  const eventId = insertEventRow(db, type, data, now);
  for (const subscription of findActiveSubscriptionsForEvent(db, type)) insertDueDelivery(db, eventId, type, subscription, now);
  return eventId;
}

/** recordPing writes a webhook.ping event with one delivery to the given subscription only. */
export function recordPing(db: Database, subscription: { id: string; target_url: string }, now = Date.now()): { event_id: string; delivery_id: string } {
  const eventId = insertEventRow(db, "webhook.ping", { subscription_id: subscription.id }, now);
  return { event_id: eventId, delivery_id: insertDueDelivery(db, eventId, "webhook.ping", subscription, now) };
}
