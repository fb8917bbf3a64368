import { storedMaker, type ChangeOrigin } from "../shared/made-by.ts";
import type { Db } from "../db/sql.ts";
import { newId } from "../shared/ids.ts";
import { toTimestamp } from "../shared/time.ts";
import type { EventType } from "./model.ts";
import { findActiveSubscriptionsForEvent, findEarliestPendingDueTime, insertDeliveries, insertDelivery, insertEvent, insertEvents, type EventRow } from "./store.ts";

/**
 * newEventRow makes an event that happened at `happenedAt`, its payload's `timestamp`, dated `at`.
 * A change's event happened at the change's stamp (the change clock's), which is its record's
 * updated_at or deleted_at in `data`: a receiver that also polls compares the two. The row, and
 * its id, are dated `at` (datedAt), as its deliveries are.
 */
function newEventRow(type: EventType, data: unknown, origin: ChangeOrigin, happenedAt: number, at: number): EventRow {
  const id = newId("evt", at);
  // event_id is the same in every subscription's copy, unlike webhook-id, so receivers can de-duplicate across subscriptions.
  // The request id and the maker stay out of the body: every subscriber would be sent the ids another
  // client chose for its requests, which of the service's tokens each integration uses, and operators' emails.
  const { madeBy } = origin;
  const payload = JSON.stringify({ type, event_id: id, timestamp: toTimestamp(happenedAt), data });
  return { id, type, payload, request_id: origin.requestId, token_id: madeBy?.kind === "api_token" ? madeBy.id : null, made_by: storedMaker(madeBy), created_at: at };
}

/** newDueDelivery makes a delivery created, and due, at `at` (datedAt, no later than the wall clock): sent at once, while the loop goes on judging what is due, retries included, by the clock it reads. */
function newDueDelivery(eventId: string, type: EventType, subscription: { id: string; target_url: string }, at: number) {
  return { id: newId("dlv", at), event_id: eventId, event_type: type, subscription_id: subscription.id, target_url: subscription.target_url, next_attempt_at: at, created_at: at };
}

async function insertEventRow(db: Db, type: EventType, data: unknown, origin: ChangeOrigin, happenedAt: number, at: number): Promise<string> {
  const event = newEventRow(type, data, origin, happenedAt, at);
  await insertEvent(db, event);
  return event.id;
}

async function insertDueDelivery(db: Db, eventId: string, type: EventType, subscription: { id: string; target_url: string }, at: number): Promise<string> {
  const delivery = newDueDelivery(eventId, type, subscription, at);
  await insertDelivery(db, delivery);
  return delivery.id;
}

/**
 * datedAt returns when an event that happened at `happenedAt` and its deliveries are dated: then,
 * or the wall clock's now if earlier. The change clock stands ahead of a clock stepped back, and a
 * row dated there would be outside what goes by the wall clock (the backlog's age, the attempt
 * log's event_age_ms, recovery windows, the history's retention) until the clock catches up.
 */
const datedAt = (happenedAt: number) => Math.min(happenedAt, Date.now());

/**
 * recordEvent writes an event that happened at `happenedAt` (a change's stamp) and one delivery per
 * active subscription that wants it, both dated by datedAt; call it inside the transaction
 * of the change it describes, so the change and its deliveries commit together. `origin` is what
 * made the change: the request (API or console) and its API token or operator, a command
 * (commandOrigin), the delivery loop (DELIVERY_LOOP).
 */
export async function recordEvent(db: Db, type: EventType, data: unknown, origin: ChangeOrigin, happenedAt = Date.now()): Promise<string> {
  const at = datedAt(happenedAt);
  const eventId = await insertEventRow(db, type, data, origin, happenedAt, at);
  for (const subscription of await findActiveSubscriptionsForEvent(db, type)) await insertDueDelivery(db, eventId, type, subscription, at);
  return eventId;
}

/**
 * recordEvents writes one event of `type` for each of `changes` (its data, and its stamp as
 * recordEvent's `happenedAt`), with their deliveries, as recordEvent does for one, in a few
 * statements of many rows: a set-wise change (an account's deletion, which changes every linked
 * contact) would otherwise make two round trips a row.
 */
export async function recordEvents(db: Db, type: EventType, changes: { data: unknown; happenedAt: number }[], origin: ChangeOrigin): Promise<void> {
  const subscriptions = await findActiveSubscriptionsForEvent(db, type);
  const events = changes.map(({ data, happenedAt }) => newEventRow(type, data, origin, happenedAt, datedAt(happenedAt)));
  await insertEvents(db, events);
  await insertDeliveries(db, events.flatMap((event) => subscriptions.map((subscription) => newDueDelivery(event.id, type, subscription, event.created_at))));
}

/**
 * recordPing writes a webhook.ping event, made by the request `origin`, with one delivery to the
 * given subscription only, due now or just before the subscription's earliest pending delivery if
 * that is sooner: a test asks whether the receiver answers now, so the next claim for the
 * subscription sends it ahead of a backlog (within the subscription's caps and max_rate, as any
 * delivery), and a retry scheduled for later does not hold it back. A due time stored before its
 * creation is only that place in the claim order (its own column would take a migration and a
 * second key on the claim's index): the API shows it due at its creation.
 */
export async function recordPing(db: Db, subscription: { id: string; target_url: string }, origin: ChangeOrigin, happenedAt = Date.now()): Promise<{ event_id: string; delivery_id: string }> {
  const at = datedAt(happenedAt);
  const eventId = await insertEventRow(db, "webhook.ping", { subscription_id: subscription.id }, origin, happenedAt, at);
  const earliest = await findEarliestPendingDueTime(db, subscription.id);
  const delivery = { ...newDueDelivery(eventId, "webhook.ping", subscription, at), next_attempt_at: earliest === null ? at : Math.min(at, earliest - 1) };
  await insertDelivery(db, delivery);
  return { event_id: eventId, delivery_id: delivery.id };
}
