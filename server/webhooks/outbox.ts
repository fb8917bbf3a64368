import type { Db } from "../db/sql.ts";
import { newId } from "../shared/ids.ts";
import { toTimestamp } from "../shared/time.ts";
import type { EventType } from "./model.ts";
import { findActiveSubscriptionsForEvent, findEarliestPendingDueTime, insertDeliveries, insertDelivery, insertEvent, insertEvents, type EventRow } from "./store.ts";

function newEventRow(type: EventType, data: unknown, requestId: string | null, now: number): EventRow {
  const id = newId("evt", now);
  // event_id is the same in every subscription's copy, unlike webhook-id, so receivers can de-duplicate across subscriptions.
  // The request id stays out of the body: every subscriber would be sent the ids another client chose for its requests.
  return { id, type, payload: JSON.stringify({ type, event_id: id, timestamp: toTimestamp(now), data }), request_id: requestId, created_at: now };
}

function newDueDelivery(eventId: string, type: EventType, subscription: { id: string; target_url: string }, now: number) {
  return { id: newId("dlv", now), event_id: eventId, event_type: type, subscription_id: subscription.id, target_url: subscription.target_url, next_attempt_at: now, created_at: now };
}

async function insertEventRow(db: Db, type: EventType, data: unknown, requestId: string | null, now: number): Promise<string> {
  const event = newEventRow(type, data, requestId, now);
  await insertEvent(db, event);
  return event.id;
}

async function insertDueDelivery(db: Db, eventId: string, type: EventType, subscription: { id: string; target_url: string }, now: number): Promise<string> {
  const delivery = newDueDelivery(eventId, type, subscription, now);
  await insertDelivery(db, delivery);
  return delivery.id;
}

/**
 * recordEvent writes an event and one delivery per active subscription that wants it; call it
 * inside the transaction of the change it describes, so the change and its deliveries commit together.
 * `requestId` is the id of the request (API or console) that made the change, null for a change no
 * request made (the delivery loop's, a command's).
 */
export async function recordEvent(db: Db, type: EventType, data: unknown, requestId: string | null, now = Date.now()): Promise<string> {
  const eventId = await insertEventRow(db, type, data, requestId, now);
  for (const subscription of await findActiveSubscriptionsForEvent(db, type)) await insertDueDelivery(db, eventId, type, subscription, now);
  return eventId;
}

/**
 * recordEvents writes one event of `type` for each of `datas`, with their deliveries, as
 * recordEvent does for one, in a few statements of many rows: a set-wise change (an account's
 * deletion, which changes every linked contact) would otherwise make two round trips a row.
 */
export async function recordEvents(db: Db, type: EventType, datas: unknown[], requestId: string | null, now = Date.now()): Promise<void> {
  const subscriptions = await findActiveSubscriptionsForEvent(db, type);
  const events = datas.map((data) => newEventRow(type, data, requestId, now));
  await insertEvents(db, events);
  await insertDeliveries(db, events.flatMap((event) => subscriptions.map((subscription) => newDueDelivery(event.id, type, subscription, now))));
}

/**
 * recordPing writes a webhook.ping event, made by the request `requestId`, with one delivery to the
 * given subscription only, due just before the subscription's earliest pending delivery: a test
 * asks whether the receiver answers now, so the next claim for the subscription sends it ahead of
 * a backlog (within the subscription's caps and max_rate, as any delivery).
 */
export async function recordPing(db: Db, subscription: { id: string; target_url: string }, requestId: string | null, now = Date.now()): Promise<{ event_id: string; delivery_id: string }> {
  const eventId = await insertEventRow(db, "webhook.ping", { subscription_id: subscription.id }, requestId, now);
  const earliest = await findEarliestPendingDueTime(db, subscription.id);
  const delivery = { ...newDueDelivery(eventId, "webhook.ping", subscription, now), next_attempt_at: earliest === null ? now : Math.min(now, earliest - 1) };
  await insertDelivery(db, delivery);
  return { event_id: eventId, delivery_id: delivery.id };
}
