import type { Database, Db } from "../../server/db/sql.ts";
import type { Runtime } from "../../server/runtime.ts";
import { makerNames } from "../../server/auth/service.ts";
import type { MakerNames } from "../../server/shared/made-by.ts";
import { findAccount } from "../../server/accounts/service.ts";
import { findContact } from "../../server/contacts/service.ts";
import { REQUEST_ID_RULE, SAFE_REQUEST_ID } from "../../server/http/request-log.ts";
import { notFound, validationProblem, type FieldError } from "../../server/shared/problem.ts";
import { parseTimestamp, toTimestamp } from "../../server/shared/time.ts";
import { DELIVERY_STATUSES, WEBHOOK_EVENT_TYPES, type Delivery, type DeliveryDetail, type Subscription } from "../../server/webhooks/model.ts";
import {
  countMatchingDeliveries,
  deliveriesAfter,
  planDeliveryFilters,
  eventSubjects,
  findDelivery,
  findSubscription,
  findWebhookEvent,
  listAllSubscriptions,
  type DeliveryPosition,
  type WebhookEvent,
} from "../../server/webhooks/service.ts";
import type { DeliveryFilters as StoredDeliveryFilters } from "../../server/webhooks/store.ts";
import { MAX_MANUAL_ATTEMPTS, MAX_PER_SUBSCRIPTION, type AttemptRefusal } from "../../server/webhooks/worker.ts";
import type { DeliveriesView, DeliveryFilters, DeliveryRowView, DeliveryWatchView, SubscriptionNames } from "../model.ts";
import { contactName, disabledBecause, holdPuttingOff, isolated, receiverUrl } from "../pages/parts.tsx";
import { consoleFieldTime, consoleTime, positionOf, positionText } from "../shell.ts";

/** LATEST_DELIVERIES is how many deliveries a page of the deliveries table shows (the contract's "latest 50"). */
export const LATEST_DELIVERIES = 50;

const KNOWN_FILTERS = new Set(["status", "event", "subscription_id", "event_id", "contact_id", "request_id", "since", "until", "before"]);
const ID = (prefix: string) => new RegExp(`^${prefix}_[0-9A-Z]{26}$`);

/**
 * filterTime reads the since or until of the deliveries page, as its field sends it or as any
 * RFC 3339 time a link carries, into Unix milliseconds; null when it is neither, or when the field
 * could not show it, as the page must show the filter it applies.
 */
function filterTime(value: string): number | null {
  const at = parseTimestamp(consoleTime(value));
  return at !== null && consoleFieldTime(at) !== null ? at : null;
}

/**
 * shownDeliveryFilters returns filters latestDeliveries accepted as the page's form shows them: a
 * since or until given with an offset, seconds or a fraction in its field's own format, in UTC, so
 * the field shows the time applied and the next press of Filter applies it again.
 */
export function shownDeliveryFilters(query: DeliveryFilters): DeliveryFilters {
  const shown = { ...query };
  for (const name of ["since", "until"] as const) {
    const at = query[name] ? filterTime(query[name]) : null;
    if (at !== null) shown[name] = consoleFieldTime(at)!;
  }
  return shown;
}

/** unknownDeliveryFilters names the fields of `query` that are no filter of the deliveries page. */
export function unknownDeliveryFilters(query: DeliveryFilters): string[] {
  return Object.keys(query).filter((name) => !KNOWN_FILTERS.has(name));
}

/** checkDeliveryFilters reads the filters of the deliveries page into typed ones, or throws 422 naming each wrong or unknown one. */
function checkDeliveryFilters(query: DeliveryFilters): { filters: StoredDeliveryFilters; before: DeliveryPosition | null } {
  const errors: FieldError[] = [];
  const filters: StoredDeliveryFilters = {};
  const set = (value: string | undefined) => (value === undefined || value === "" ? undefined : value);
  for (const name of unknownDeliveryFilters(query)) errors.push({ parameter: name, detail: `is not a filter of this page (filters: ${[...KNOWN_FILTERS].join(", ")})` });
  const status = set(query.status);
  if (status !== undefined) {
    if ((DELIVERY_STATUSES as readonly string[]).includes(status)) filters.status = status;
    else errors.push({ parameter: "status", detail: `must be one of: ${DELIVERY_STATUSES.join(", ")}` });
  }
  const event = set(query.event);
  if (event !== undefined) {
    if ((WEBHOOK_EVENT_TYPES as readonly string[]).includes(event)) filters.eventType = event;
    else errors.push({ parameter: "event", detail: `must be one of: ${WEBHOOK_EVENT_TYPES.join(", ")}` });
  }
  const ids: [keyof DeliveryFilters, string, string, keyof StoredDeliveryFilters][] = [
    ["subscription_id", "sub", "a subscription id (sub_...)", "subscriptionId"],
    ["event_id", "evt", "an event id (evt_...)", "eventId"],
    ["contact_id", "con", "a contact id (con_...)", "subjectId"],
  ];
  for (const [name, prefix, what, key] of ids) {
    const value = set(query[name]);
    if (value === undefined) continue;
    if (ID(prefix).test(value)) (filters as Record<string, string>)[key] = value;
    else errors.push({ parameter: name, detail: `must be ${what}` });
  }
  const requestId = set(query.request_id);
  if (requestId !== undefined) {
    if (SAFE_REQUEST_ID.test(requestId)) filters.requestId = requestId;
    else errors.push({ parameter: "request_id", detail: `must be ${REQUEST_ID_RULE}` });
  }
  for (const [name, key] of [["since", "createdAfter"], ["until", "createdBefore"]] as const) {
    const value = set(query[name]);
    if (value === undefined) continue;
    const at = filterTime(value);
    if (at === null) errors.push({ parameter: name, detail: "must be a date and time (YYYY-MM-DDTHH:MM, UTC)" });
    // created_after is exclusive; the form's "since" includes its minute.
    else filters[key] = name === "since" ? at - 1 : at;
  }
  const beforeText = set(query.before);
  const before = beforeText === undefined ? null : positionOf(beforeText, "dlv");
  if (beforeText !== undefined && before === null) errors.push({ parameter: "before", detail: "must be the position a previous page gave" });
  if (errors.length > 0) throw validationProblem(errors, `The filter is invalid: ${errors.map((e) => `${e.parameter} ${e.detail}`).join("; ")}.`);
  return { filters, before };
}

/** deliveryFiltersAccepted tells whether latestDeliveries takes the filters: then they hold only ids, statuses, event types, times and a position. */
export function deliveryFiltersAccepted(query: DeliveryFilters): boolean {
  try {
    checkDeliveryFilters(query);
    return true;
  } catch {
    return false;
  }
}

/**
 * latestDeliveries returns a page of the deliveries matching the filters, newest first (the latest
 * 50, or older ones after `before`), with their subscriptions' descriptions and, for those waiting
 * on a paused one, since when it is paused, or on one its receiver holds, until when; the page and its total
 * are read in one snapshot, so "Showing all N" is the rows shown.
 */
export async function latestDeliveries(db: Database, query: DeliveryFilters, now = Date.now()): Promise<DeliveriesView> {
  const { filters, before } = checkDeliveryFilters(query);
  return db.read(async (source) => {
    const planned = await planDeliveryFilters(source, filters);
    const page = await deliveriesAfter(source, planned, before, LATEST_DELIVERIES);
    const subscriptions = new Map((await listAllSubscriptions(source)).map((s) => [s.id, s]));
    const subjects = await eventSubjects(source, page.data.map((d) => d.event_id));
    return {
      data: page.data.map((d) => deliveryRow(d, subscriptions.get(d.subscription_id) ?? null, subjects.get(d.event_id) ?? null)),
      total: await countMatchingDeliveries(source, planned),
      next: page.next ? positionText(page.next) : null,
      older: before !== null,
      refreshed_at: toTimestamp(now),
    };
  });
}

function deliveryRow(d: Delivery, subscription: Subscription | null, subjectId: string | null): DeliveryRowView {
  return {
    id: d.id,
    created_at: d.created_at,
    event_type: d.event_type,
    event_id: d.event_id,
    subject_id: subjectId,
    subscription_id: d.subscription_id,
    subscription_description: subscription?.description ?? null,
    target_url: d.target_url,
    status: d.status,
    attempts: d.attempts,
    last_response_status: d.last_response_status,
    next_attempt_at: d.next_attempt_at,
    paused_since: d.status === "pending" && subscription?.status === "paused" ? subscription.paused_at : null,
    held_until: holdPuttingOff(d, subscription),
  };
}

/** findDeliveryWatch returns a delivery's status and its receiver's last answer, or null when there is no such delivery. */
export async function findDeliveryWatch(db: Db, id: string): Promise<DeliveryWatchView | null> {
  const delivery = await findDelivery(db, id);
  if (!delivery) return null;
  const last = delivery.attempt_history.at(-1);
  return {
    id: delivery.id,
    status: delivery.status,
    attempts: delivery.attempts,
    next_attempt_at: delivery.next_attempt_at,
    last_attempt: last
      ? { started_at: last.started_at, duration_ms: last.duration_ms, response_status: last.response_status, response_body: last.response_body, error: last.error }
      : null,
  };
}

/** deliveryWatch is findDeliveryWatch for the JSON endpoint the rotation wizard polls: 404 when missing. */
export async function deliveryWatch(db: Db, id: string): Promise<DeliveryWatchView> {
  const watch = await findDeliveryWatch(db, id);
  if (!watch) throw notFound("webhook delivery", id);
  return watch;
}

/** deliveryWithSubscription returns a delivery with every attempt, and its subscription while it exists, or throws 404. */
export async function deliveryWithSubscription(db: Database, id: string): Promise<{ delivery: DeliveryDetail; subscription: Subscription | null }> {
  const delivery = await db.read((snapshot) => findDelivery(snapshot, id));
  if (!delivery) throw notFound("webhook delivery", id);
  return { delivery, subscription: await findSubscription(db, delivery.subscription_id) };
}

/** retryFromConsole makes a manual attempt of a delivery now (Retry now): null once it is recorded, or why the delivery loop made none, for the console to word. */
export function retryFromConsole(rt: Runtime, id: string): Promise<AttemptRefusal | null> {
  return rt.deliveries.attemptNow(id);
}

/** RetryRefusal is why Retry now sent nothing while the delivery is there to show: any refusal of the delivery loop but not-found. */
export type RetryRefusal = Exclude<AttemptRefusal, { refused: "not-found" }>;

/**
 * retryRefusalText says in the console's words why Retry now sent nothing, naming the delivery's
 * subscription, and what to do about it in the console: press it again in a moment, enable or
 * resume the subscription on the Subscriptions page, or nothing, its subscription being gone. The
 * API's words for the same refusals name its routes.
 */
export function retryRefusalText(refusal: RetryRefusal, view: { delivery: Delivery; subscription: Subscription | null }): string {
  const name = isolated(view.subscription?.description ?? receiverUrl(view.delivery.target_url));
  const again = "Nothing was sent; press Retry now again in a moment.";
  switch (refusal.refused) {
    case "subscription-attempts-busy":
      if (refusal.cap === MAX_PER_SUBSCRIPTION) return `Not retried: the subscription ${name} already has ${MAX_PER_SUBSCRIPTION} deliveries being sent, the most sent at once to one receiver. ${again}`;
      return `Not retried: the receiver of the subscription ${name} left requests unanswered (timed out, or no connection), so this server sends it ${refusal.cap === 1 ? "1 delivery" : `${refusal.cap} deliveries`} at once until it answers again, and that many are being sent. ${again}`;
    case "manual-attempts-busy":
      return `Not retried: ${MAX_MANUAL_ATTEMPTS} retries made by hand are being sent, the most at once. ${again}`;
    case "shutting-down":
      return `Not retried: this server is shutting down. ${again}`;
    case "secrets-key-replaced":
      return `Not retried: this server still has the secrets key that crm secrets-key rotate replaced, which does not open the signing secret of the subscription ${name}, so nothing was sent. It must be restarted with the new key file; press Retry now again on a server that has it.`;
    case "in-progress":
      return "Not retried: an attempt of this delivery is being sent now. Reload the page in a moment for its answer.";
    case "subscription-disabled":
      return `Not retried: the subscription ${name} is disabled${disabledBecause(view.subscription?.disabled_reason)}, so nothing was sent. Enable it with its Enable button on the Subscriptions page, then press Retry now again.`;
    case "subscription-paused":
      return `Not retried: the subscription ${name} is paused, so nothing was sent. Resume it with its Resume button on the Subscriptions page (its pending deliveries then go out), then press Retry now again if this one still needs sending.`;
    case "subscription-deleted":
      return `Not retried: the subscription to ${isolated(receiverUrl(view.delivery.target_url))} was deleted, so nothing can be sent for this delivery any more.`;
    case "event-erased":
      return "Not retried: what this delivery sent was erased after its contact or account was deleted, so nothing of it can be sent any more.";
  }
}

/** EventPageView is an event, what it is about (its page's address and name), and every delivery made of it, with its subscription's name. */
export interface EventPageView {
  event: WebhookEvent;
  subject: { href: string; label: string } | null;
  /** what names the API token or operator that made it (and erased it) */
  names: MakerNames;
  subscriptions: SubscriptionNames;
}

/** subscriptionNames returns every existing subscription's description by id (SubscriptionNames). */
export async function subscriptionNames(db: Db): Promise<SubscriptionNames> {
  return new Map((await listAllSubscriptions(db)).map((s) => [s.id, s.description]));
}

/** eventPage returns an event with its deliveries and the contact or account it is about, or throws 404. */
export async function eventPage(db: Database, id: string): Promise<EventPageView> {
  const event = await findWebhookEvent(db, id);
  if (!event) throw notFound("event", id);
  const names = await makerNames(db);
  const subjectId = event.subject_id;
  const subscriptions = await subscriptionNames(db);
  if (subjectId?.startsWith("con_")) {
    const contact = await findContact(db, subjectId);
    return { event, names, subscriptions, subject: { href: `/console/contacts/${subjectId}`, label: contact ? contactName(contact) : `${subjectId} (deleted)` } };
  }
  if (subjectId?.startsWith("acc_")) {
    const account = await findAccount(db, subjectId);
    return { event, names, subscriptions, subject: { href: `/console/accounts/${subjectId}`, label: account ? isolated(account.name) : `${subjectId} (deleted account)` } };
  }
  return { event, names, subscriptions, subject: null };
}
