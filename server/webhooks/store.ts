import type { Database } from "bun:sqlite";
import { keysetOrder } from "../db/keyset.ts";
import type { CursorPosition } from "../http/list-query.ts";

export type EventRow = {
  id: string;
  type: string;
  payload: string;
  created_at: number;
}

export type SubscriptionRow = {
  id: string;
  target_url: string;
  description: string | null;
  events: string;
  secret: string;
  /** the secret before the last rotation, signing beside `secret` until previous_secret_expires_at */
  previous_secret: string | null;
  previous_secret_expires_at: number | null;
  secret_rotated_at: number | null;
  status: "active" | "disabled";
  disabled_at: number | null;
  disabled_reason: string | null;
  /** set while paused: deliveries wait until it is resumed */
  paused_at: number | null;
  /** requests per second at most; null: no cap */
  max_rate: number | null;
  /** first failed attempt since the last successful one */
  failing_since: number | null;
  created_at: number;
  updated_at: number;
}

export type DeliveryRow = {
  id: string;
  event_id: string;
  event_type: string;
  subscription_id: string;
  target_url: string;
  status: "pending" | "succeeded" | "failed";
  attempts: number;
  next_attempt_at: number | null;
  locked_until: number | null;
  last_response_status: number | null;
  last_error: string | null;
  created_at: number;
  updated_at: number;
}

/** AttemptRow is one attempt as read: its header sets joined back into whole JSON objects. */
export type AttemptRow = {
  delivery_id: string;
  attempt: number;
  triggered_by: "scheduled" | "manual";
  started_at: number;
  duration_ms: number;
  request_headers: string;
  response_status: number | null;
  response_headers: string;
  response_body: string | null;
  error: string | null;
}

/** NewAttempt is one attempt to record, with the headers as sent and as kept from the answer. */
type NewAttempt = Omit<AttemptRow, "request_headers" | "response_headers"> & {
  request_headers: Record<string, string>;
  response_headers: Record<string, string>;
};

/** DueDelivery is what an attempt needs: the delivery, its body and where and how to sign it. */
export interface DueDelivery {
  id: string;
  subscription_id: string;
  event_type: string;
  target_url: string;
  /** null when the subscription was deleted */
  secret: string | null;
  previous_secret: string | null;
  previous_secret_expires_at: number | null;
  payload: string;
  subscription_status: "active" | "disabled" | null;
  subscription_paused_at: number | null;
  /** the subscription's failing streak as the delivery was claimed */
  subscription_failing_since: number | null;
  locked_until: number | null;
  created_at: number;
}

export interface DeliveryFilters {
  subscriptionId?: string;
  eventType?: string;
  eventId?: string;
  status?: string;
  createdAfter?: number;
  /** created before this instant (the console's time range) */
  createdBefore?: number;
  /** deliveries of the events about this contact or account */
  subjectId?: string;
}

export interface Page {
  cursor: CursorPosition | null;
  limit: number;
  offset: number;
}

const placeholders = (n: number) => Array(n).fill("?").join(", ");

/** insertEvent stores one outbox event. */
export function insertEvent(db: Database, row: EventRow): void {
  db.query("INSERT INTO events (id, type, payload, created_at) VALUES ($id, $type, $payload, $created_at)").run(row);
}

/** insertSubscription stores a subscription and indexes the event kinds it wants. */
export function insertSubscription(db: Database, row: SubscriptionRow, eventTypes: readonly string[]): void {
  db.query(
    `INSERT INTO webhook_subscriptions (id, target_url, description, events, secret, previous_secret, previous_secret_expires_at, secret_rotated_at, status, disabled_at, disabled_reason, paused_at, max_rate, failing_since, created_at, updated_at)
     VALUES ($id, $target_url, $description, $events, $secret, $previous_secret, $previous_secret_expires_at, $secret_rotated_at, $status, $disabled_at, $disabled_reason, $paused_at, $max_rate, $failing_since, $created_at, $updated_at)`,
  ).run(row);
  const insert = db.query("INSERT INTO webhook_subscription_events (event_type, subscription_id) VALUES (?, ?)");
  for (const type of eventTypes) insert.run(type, row.id);
}

/** listUnsealedSubscriptionSecrets returns the subscriptions whose signing secret, or previous secret, is still stored in clear. */
export function listUnsealedSubscriptionSecrets(db: Database): { id: string; secret: string; previous_secret: string | null }[] {
  return db
    .query<{ id: string; secret: string; previous_secret: string | null }, []>(
      "SELECT id, secret, previous_secret FROM webhook_subscriptions WHERE secret NOT LIKE 'sealed-v1.%' OR previous_secret NOT LIKE 'sealed-v1.%'",
    )
    .all();
}

/** updateSubscriptionSecrets replaces the stored (sealed) signing secret and previous secret of a subscription. */
export function updateSubscriptionSecrets(db: Database, id: string, secret: string, previousSecret: string | null): void {
  db.query("UPDATE webhook_subscriptions SET secret = ?, previous_secret = ? WHERE id = ?").run(secret, previousSecret, id);
}

/** findOneSubscriptionSecret returns any one subscription's stored secret, or null when there is none. */
export function findOneSubscriptionSecret(db: Database): { id: string; secret: string } | null {
  return db.query<{ id: string; secret: string }, []>("SELECT id, secret FROM webhook_subscriptions LIMIT 1").get();
}

/** findSubscriptionById returns one subscription row or null. */
export function findSubscriptionById(db: Database, id: string): SubscriptionRow | null {
  return db.query<SubscriptionRow, [string]>("SELECT * FROM webhook_subscriptions WHERE id = ?").get(id);
}

function subscriptionFilter(eventType: string | undefined): { where: string; params: string[] } {
  return eventType === undefined
    ? { where: "", params: [] }
    : { where: "s.id IN (SELECT subscription_id FROM webhook_subscription_events WHERE event_type = ?)", params: [eventType] };
}

/** countSubscriptions counts subscriptions, optionally only those wanting an event kind. */
export function countSubscriptions(db: Database, eventType: string | undefined): number {
  const filter = subscriptionFilter(eventType);
  return db.query<{ n: number }, string[]>(`SELECT count(*) AS n FROM webhook_subscriptions s ${filter.where ? `WHERE ${filter.where}` : ""}`).get(...filter.params)!.n;
}

/** listSubscriptions returns one page of subscriptions, newest first. */
export function listSubscriptions(db: Database, eventType: string | undefined, page: Page): SubscriptionRow[] {
  const filter = subscriptionFilter(eventType);
  const order = keysetOrder("s.created_at", "s.id", "desc", page.cursor);
  const where = [filter.where, order.after].filter(Boolean);
  return db
    .query<SubscriptionRow, (string | number)[]>(`SELECT s.* FROM webhook_subscriptions s ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY ${order.orderBy} LIMIT ? OFFSET ?`)
    .all(...filter.params, ...order.params, page.limit, page.offset);
}

/** deleteSubscription removes a subscription and tells whether it existed; its deliveries stay as history. */
export function deleteSubscription(db: Database, id: string): boolean {
  return db.query("DELETE FROM webhook_subscriptions WHERE id = ?").run(id).changes > 0;
}

/**
 * rotateSubscriptionSecret makes `secret` the signing secret and keeps the one it replaces signing
 * until `previousExpiresAt` (not at all when that is not after `now`); it tells whether the
 * subscription exists. The old value is copied in SQL, so it is stored exactly as the current secret was.
 */
export function rotateSubscriptionSecret(db: Database, id: string, secret: string, previousExpiresAt: number, now: number): boolean {
  return (
    db
      .query(
        `UPDATE webhook_subscriptions SET previous_secret = CASE WHEN ?2 > ?3 THEN secret END, secret = ?1, previous_secret_expires_at = ?2, secret_rotated_at = ?3, updated_at = ?3
         WHERE id = ?4`,
      )
      .run(secret, previousExpiresAt, now, id).changes > 0
  );
}

/** endSecretGrace stops (and forgets) the previous secret of a subscription from `now` on; it tells whether one was still signing. */
export function endSecretGrace(db: Database, id: string, now: number): boolean {
  return (
    db
      .query("UPDATE webhook_subscriptions SET previous_secret = NULL, previous_secret_expires_at = ?1, updated_at = ?1 WHERE id = ?2 AND previous_secret_expires_at > ?1")
      .run(now, id).changes > 0
  );
}

/** setSubscriptionPaused pauses (at `pausedAt`) or resumes (null) a subscription; it tells whether the subscription exists. */
export function setSubscriptionPaused(db: Database, id: string, pausedAt: number | null, now: number): boolean {
  // A second pause keeps the first pause's time.
  return db.query("UPDATE webhook_subscriptions SET paused_at = CASE WHEN ?1 IS NULL THEN NULL ELSE coalesce(paused_at, ?1) END, updated_at = ?2 WHERE id = ?3").run(pausedAt, now, id).changes > 0;
}

/** updateSubscriptionDescription sets a subscription's description; it tells whether the subscription exists. */
export function updateSubscriptionDescription(db: Database, id: string, description: string | null, now: number): boolean {
  return db.query("UPDATE webhook_subscriptions SET description = ?, updated_at = ? WHERE id = ?").run(description, now, id).changes > 0;
}

/**
 * requeueFailedDeliveries makes every failed delivery of a subscription created in [since, until)
 * pending and due at `now`, and returns how many. Their ids are time-ordered, so the loop, which
 * takes due deliveries by due time then id, sends them oldest first.
 */
export function requeueFailedDeliveries(db: Database, subscriptionId: string, since: number, until: number, now: number): number {
  return db
    .query(
      `UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ?1, updated_at = ?1
       WHERE subscription_id = ?2 AND status = 'failed' AND created_at >= ?3 AND created_at < ?4`,
    )
    .run(now, subscriptionId, since, until).changes;
}

/** countFailedDeliveriesBetween counts a subscription's failed deliveries created in [since, until). */
export function countFailedDeliveriesBetween(db: Database, subscriptionId: string, since: number, until: number): number {
  return db
    .query<{ n: number }, [string, number, number]>("SELECT count(*) AS n FROM webhook_deliveries WHERE subscription_id = ? AND status = 'failed' AND created_at >= ? AND created_at < ?")
    .get(subscriptionId, since, until)!.n;
}

/** disableSubscription marks a subscription disabled, saying when and why. */
export function disableSubscription(db: Database, id: string, reason: string, now: number): void {
  db.query("UPDATE webhook_subscriptions SET status = 'disabled', disabled_at = ?, disabled_reason = ?, updated_at = ? WHERE id = ? AND status = 'active'").run(now, reason, now, id);
}

/** enableSubscription makes a disabled subscription active again, its failing streak forgotten; it tells whether it was disabled. */
export function enableSubscription(db: Database, id: string, now: number): boolean {
  return (
    db.query("UPDATE webhook_subscriptions SET status = 'active', disabled_at = NULL, disabled_reason = NULL, failing_since = NULL, updated_at = ? WHERE id = ? AND status = 'disabled'").run(now, id)
      .changes > 0
  );
}

/** markSubscriptionFailing notes the first failed attempt of a streak. */
export function markSubscriptionFailing(db: Database, id: string, since: number): void {
  db.query("UPDATE webhook_subscriptions SET failing_since = ? WHERE id = ? AND failing_since IS NULL").run(since, id);
}

/** markSubscriptionHealthy ends a streak of failed attempts; without one it writes nothing (it runs after every success). */
export function markSubscriptionHealthy(db: Database, id: string): void {
  db.query("UPDATE webhook_subscriptions SET failing_since = NULL WHERE id = ? AND failing_since IS NOT NULL").run(id);
}

/** failPendingDeliveries ends every pending delivery of a subscription with the given reason. */
export function failPendingDeliveries(db: Database, subscriptionId: string, reason: string, now: number): number {
  return db
    .query("UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL, last_error = ?, updated_at = ? WHERE subscription_id = ? AND status = 'pending'")
    .run(reason, now, subscriptionId).changes;
}

/** findActiveSubscriptionsForEvent returns the active subscriptions that want an event kind. */
export function findActiveSubscriptionsForEvent(db: Database, eventType: string): { id: string; target_url: string }[] {
  return db
    .query<{ id: string; target_url: string }, [string]>(
      // Runs in every contact write; as an IN subquery it costs a third of the equivalent join (bench/).
      `SELECT s.id, s.target_url FROM webhook_subscriptions s
       WHERE s.id IN (SELECT subscription_id FROM webhook_subscription_events WHERE event_type = ?) AND s.status = 'active'
       ORDER BY s.id`,
    )
    .all(eventType);
}

/** insertDelivery stores a pending delivery due at next_attempt_at. */
export function insertDelivery(db: Database, row: Pick<DeliveryRow, "id" | "event_id" | "event_type" | "subscription_id" | "target_url" | "next_attempt_at" | "created_at">): void {
  db.query(
    `INSERT INTO webhook_deliveries (id, event_id, event_type, subscription_id, target_url, next_attempt_at, created_at, updated_at)
     VALUES ($id, $event_id, $event_type, $subscription_id, $target_url, $next_attempt_at, $created_at, $created_at)`,
  ).run(row);
}

/** findDeliveryById returns one delivery row or null. */
export function findDeliveryById(db: Database, id: string): DeliveryRow | null {
  return db.query<DeliveryRow, [string]>("SELECT * FROM webhook_deliveries WHERE id = ?").get(id);
}

/** findEventPayload returns the JSON body of an event. */
export function findEventPayload(db: Database, eventId: string): string | null {
  return db.query<{ payload: string }, [string]>("SELECT payload FROM events WHERE id = ?").get(eventId)?.payload ?? null;
}

/**
 * findAttemptsByDelivery returns every attempt of a delivery, oldest first. The request headers
 * are the shared set plus what each attempt alone sent: webhook-id (the delivery id),
 * webhook-timestamp (the Unix second the attempt started) and its signature.
 */
export function findAttemptsByDelivery(db: Database, deliveryId: string): AttemptRow[] {
  return db
    .query<AttemptRow, [string]>(
      `SELECT a.delivery_id, a.attempt, a.triggered_by, a.started_at, a.duration_ms,
         json_set(rq.headers, '$."webhook-id"', a.delivery_id, '$."webhook-timestamp"', CAST(a.started_at / 1000 AS TEXT), '$."webhook-signature"', a.signature) AS request_headers,
         a.response_status, rs.headers AS response_headers, a.response_body, a.error
       FROM webhook_delivery_attempts a
       JOIN webhook_header_sets rq ON rq.id = a.request_header_set
       JOIN webhook_header_sets rs ON rs.id = a.response_header_set
       WHERE a.delivery_id = ? ORDER BY a.attempt`,
    )
    .all(deliveryId);
}

function deliveryFilter(filters: DeliveryFilters): { where: string[]; params: (string | number)[] } {
  const where: string[] = [];
  const params: (string | number)[] = [];
  const add = (clause: string, value: string | number | undefined) => {
    if (value === undefined) return;
    where.push(clause);
    params.push(value);
  };
  add("d.subscription_id = ?", filters.subscriptionId);
  add("d.event_type = ?", filters.eventType);
  add("d.event_id = ?", filters.eventId);
  add("d.status = ?", filters.status);
  // The literal term lets SQLite use the partial index of unfinished deliveries.
  if (filters.status !== undefined && filters.status !== "succeeded") where.push("d.status <> 'succeeded'");
  add("d.created_at > ?", filters.createdAfter);
  add("d.created_at < ?", filters.createdBefore);
  add("d.event_id IN (SELECT id FROM events WHERE subject_id = ?)", filters.subjectId);
  return { where, params };
}

/** countDeliveries counts the deliveries matching the filters. */
export function countDeliveries(db: Database, filters: DeliveryFilters): number {
  const { where, params } = deliveryFilter(filters);
  return db.query<{ n: number }, (string | number)[]>(`SELECT count(*) AS n FROM webhook_deliveries d ${where.length ? `WHERE ${where.join(" AND ")}` : ""}`).get(...params)!.n;
}

/** listDeliveries returns one page of deliveries, newest first. */
export function listDeliveries(db: Database, filters: DeliveryFilters, page: Page): DeliveryRow[] {
  const { where, params } = deliveryFilter(filters);
  const order = keysetOrder("d.created_at", "d.id", "desc", page.cursor);
  if (order.after) where.push(order.after);
  return db
    .query<DeliveryRow, (string | number)[]>(`SELECT d.* FROM webhook_deliveries d ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY ${order.orderBy} LIMIT ? OFFSET ?`)
    .all(...params, ...order.params, page.limit, page.offset);
}

/** selectDue selects what an attempt needs; `deliveries` names the deliveries table, possibly with an index. */
const selectDue = (deliveries: string) =>
  `SELECT d.id, d.subscription_id, d.event_type, d.target_url, d.locked_until, d.created_at, s.secret, s.previous_secret, s.previous_secret_expires_at,
     s.status AS subscription_status, s.paused_at AS subscription_paused_at, s.failing_since AS subscription_failing_since, e.payload
   FROM ${deliveries} LEFT JOIN webhook_subscriptions s ON s.id = d.subscription_id JOIN events e ON e.id = d.event_id`;

/**
 * findSubscriptionsWithDueDeliveries returns the active, unpaused subscriptions, other than those
 * skipped (already at their concurrency limit), that have a due delivery not leased, oldest due
 * first, with their rate caps.
 */
export function findSubscriptionsWithDueDeliveries(db: Database, now: number, skip: string[]): { id: string; max_rate: number | null }[] {
  const skipClause = skip.length ? `AND s.id NOT IN (${placeholders(skip.length)})` : "";
  return db
    .query<{ id: string; max_rate: number | null }, (string | number)[]>(
      `WITH due AS MATERIALIZED (
         SELECT s.id, s.max_rate, (SELECT d.next_attempt_at FROM webhook_deliveries d INDEXED BY webhook_deliveries_due_by_subscription
                       WHERE d.subscription_id = s.id AND d.status = 'pending' AND d.next_attempt_at <= ? AND (d.locked_until IS NULL OR d.locked_until <= ?)
                       ORDER BY d.next_attempt_at LIMIT 1) AS due_at
         FROM webhook_subscriptions s WHERE s.status = 'active' AND s.paused_at IS NULL ${skipClause})
       SELECT id, max_rate FROM due WHERE due_at IS NOT NULL ORDER BY due_at, id`,
    )
    .all(now, now, ...skip);
}

/** findDueDeliveriesOf returns up to `limit` due, unleased deliveries of one subscription, oldest due first. */
export function findDueDeliveriesOf(db: Database, subscriptionId: string, now: number, limit: number): DueDelivery[] {
  return db
    .query<DueDelivery, (string | number)[]>(
      `${selectDue("webhook_deliveries d INDEXED BY webhook_deliveries_due_by_subscription")}
       WHERE d.subscription_id = ? AND d.status = 'pending' AND d.next_attempt_at <= ? AND (d.locked_until IS NULL OR d.locked_until <= ?)
       ORDER BY d.next_attempt_at, d.id LIMIT ?`,
    )
    .all(subscriptionId, now, now, limit);
}

/** findDeliveryToSend returns a delivery with what an attempt needs, whatever its status, or null. */
export function findDeliveryToSend(db: Database, id: string): DueDelivery | null {
  return db.query<DueDelivery, [string]>(`${selectDue("webhook_deliveries d")} WHERE d.id = ?`).get(id);
}

/** leaseDeliveries marks deliveries as being attempted until the lease expires. */
export function leaseDeliveries(db: Database, ids: string[], until: number): void {
  if (ids.length === 0) return;
  db.query(`UPDATE webhook_deliveries SET locked_until = ? WHERE id IN (${placeholders(ids.length)})`).run(until, ...ids);
}

/** releaseLeases frees deliveries whose attempt was abandoned, so they are due again at once. */
export function releaseLeases(db: Database, ids: string[]): void {
  if (ids.length === 0) return;
  db.query(`UPDATE webhook_deliveries SET locked_until = NULL WHERE id IN (${placeholders(ids.length)})`).run(...ids);
}

/** headerSetId returns the id of a stored header set, storing it the first time it is seen. */
function headerSetId(db: Database, headers: Record<string, string>): number {
  const text = JSON.stringify(headers);
  const found = db.query<{ id: number }, [string]>("SELECT id FROM webhook_header_sets WHERE headers = ?").get(text);
  return found ? found.id : Number(db.query("INSERT INTO webhook_header_sets (headers) VALUES (?)").run(text).lastInsertRowid);
}

/**
 * insertAttempt records one attempt. Its header sets are stored once for all the attempts that
 * share them; of the request headers only the signature is the attempt's own (findAttemptsByDelivery
 * derives webhook-id and webhook-timestamp).
 */
export function insertAttempt(db: Database, row: NewAttempt): void {
  const { "webhook-id": _id, "webhook-timestamp": _timestamp, "webhook-signature": signature, ...shared } = row.request_headers;
  db.query(
    `INSERT INTO webhook_delivery_attempts (delivery_id, attempt, triggered_by, started_at, duration_ms, request_header_set, signature, response_status, response_header_set, response_body, error)
     VALUES ($delivery_id, $attempt, $triggered_by, $started_at, $duration_ms, $request_header_set, $signature, $response_status, $response_header_set, $response_body, $error)`,
  ).run({
    delivery_id: row.delivery_id,
    attempt: row.attempt,
    triggered_by: row.triggered_by,
    started_at: row.started_at,
    duration_ms: row.duration_ms,
    request_header_set: headerSetId(db, shared),
    signature: signature ?? "",
    response_status: row.response_status,
    response_header_set: headerSetId(db, row.response_headers),
    response_body: row.response_body,
    error: row.error,
  });
}

/** HistorySize is what the delivery history holds: rows, and bytes of database pages. */
export interface HistorySize {
  deliveries: number;
  attempts: number;
  /** pages of the history's tables and indexes (deliveries, attempts, header sets), in bytes */
  bytes: number;
}

/** measureDeliveryHistory counts the history's rows and the database pages its tables and indexes hold. */
export function measureDeliveryHistory(db: Database): HistorySize {
  return db
    .query<HistorySize, []>(
      `SELECT (SELECT count(*) FROM webhook_deliveries) AS deliveries,
         (SELECT count(*) FROM webhook_delivery_attempts) AS attempts,
         (SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE aggregate = 1 AND name IN (
            SELECT name FROM sqlite_schema WHERE tbl_name IN ('webhook_deliveries', 'webhook_delivery_attempts', 'webhook_header_sets'))) AS bytes`,
    )
    .get()!;
}

/** deleteUnusedHeaderSets forgets header sets no attempt refers to any more (after pruning). */
export function deleteUnusedHeaderSets(db: Database): number {
  return db
    .query(
      `DELETE FROM webhook_header_sets WHERE id NOT IN (
         SELECT request_header_set FROM webhook_delivery_attempts UNION SELECT response_header_set FROM webhook_delivery_attempts)`,
    )
    .run().changes;
}

/** updateDeliveryAfterAttempt stores the outcome of an attempt and frees the lease. */
export function updateDeliveryAfterAttempt(
  db: Database,
  row: Pick<DeliveryRow, "id" | "status" | "attempts" | "next_attempt_at" | "last_response_status" | "last_error" | "updated_at">,
): void {
  db.query(
    `UPDATE webhook_deliveries SET status = $status, attempts = $attempts, next_attempt_at = $next_attempt_at, locked_until = NULL,
       last_response_status = $last_response_status, last_error = $last_error, updated_at = $updated_at WHERE id = $id`,
  ).run(row);
}

/** findNextWakeTime returns the earliest future moment a pending delivery becomes due or a lease expires. */
export function findNextWakeTime(db: Database, now: number): number | null {
  const due = db.query<{ t: number | null }, [number]>("SELECT min(next_attempt_at) AS t FROM webhook_deliveries INDEXED BY webhook_deliveries_due WHERE status = 'pending' AND next_attempt_at > ?").get(now)!.t;
  const lease = db.query<{ t: number | null }, [number]>("SELECT min(locked_until) AS t FROM webhook_deliveries INDEXED BY webhook_deliveries_leased WHERE locked_until IS NOT NULL AND locked_until > ? AND status = 'pending'").get(now)!.t;
  if (due === null) return lease;
  return lease === null ? due : Math.min(due, lease);
}

/** countPendingDeliveries returns how many deliveries are pending and when the oldest was created. */
export function countPendingDeliveries(db: Database): { pending: number; oldest_created_at: number | null } {
  return db.query<{ pending: number; oldest_created_at: number | null }, []>(
    "SELECT count(*) AS pending, min(created_at) AS oldest_created_at FROM webhook_deliveries WHERE status = 'pending' AND status <> 'succeeded'",
  ).get()!;
}

/** countDeliveriesBySubscription counts each subscription's deliveries created since a time, by status. */
export function countDeliveriesBySubscription(db: Database, since: number): { subscription_id: string; succeeded: number; failed: number; pending: number }[] {
  // Each count is one range of webhook_deliveries_subscription_status, read from the index alone;
  // a GROUP BY over the time range would sort every delivery of the day in a temporary b-tree.
  return db
    .query<{ subscription_id: string; succeeded: number; failed: number; pending: number }, [number]>(
      `SELECT s.id AS subscription_id,
         (SELECT count(*) FROM webhook_deliveries WHERE subscription_id = s.id AND status = 'succeeded' AND created_at >= ?1) AS succeeded,
         (SELECT count(*) FROM webhook_deliveries WHERE subscription_id = s.id AND status = 'failed' AND created_at >= ?1) AS failed,
         (SELECT count(*) FROM webhook_deliveries WHERE subscription_id = s.id AND status = 'pending' AND created_at >= ?1) AS pending
       FROM webhook_subscriptions s`,
    )
    .all(since);
}

/** deleteFinishedDeliveriesBefore prunes up to `limit` finished deliveries (and their attempts) created before the cutoff. */
export function deleteFinishedDeliveriesBefore(db: Database, cutoff: number, limit: number): number {
  return db
    .query(
      `DELETE FROM webhook_deliveries WHERE id IN (
         SELECT id FROM webhook_deliveries WHERE created_at < ? AND status != 'pending' ORDER BY created_at LIMIT ?)`,
    )
    .run(cutoff, limit).changes;
}

/** deleteUnreferencedEventsBefore prunes up to `limit` events created before the cutoff that no delivery refers to. */
export function deleteUnreferencedEventsBefore(db: Database, cutoff: number, limit: number): number {
  return db
    .query(
      `DELETE FROM events WHERE id IN (
         SELECT e.id FROM events e WHERE e.created_at < ?
           AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id) ORDER BY e.created_at LIMIT ?)`,
    )
    .run(cutoff, limit).changes;
}

export type AttemptStatsRow = {
  subscription_id: string;
  hour: number;
  succeeded: number;
  failed: number;
  /** JSON array of counts per latency bucket */
  latency_buckets: string;
}

/** findAttemptStats returns a subscription's statistics of one hour, or null. */
export function findAttemptStats(db: Database, subscriptionId: string, hour: number): AttemptStatsRow | null {
  return db.query<AttemptStatsRow, [string, number]>("SELECT * FROM webhook_attempt_stats WHERE subscription_id = ? AND hour = ?").get(subscriptionId, hour);
}

/** writeAttemptStats stores (replaces) a subscription's statistics of one hour. */
export function writeAttemptStats(db: Database, row: AttemptStatsRow): void {
  db.query(
    "INSERT OR REPLACE INTO webhook_attempt_stats (subscription_id, hour, succeeded, failed, latency_buckets) VALUES ($subscription_id, $hour, $succeeded, $failed, $latency_buckets)",
  ).run(row);
}

/** listAttemptStatsSince returns a subscription's hourly statistics from an hour on. */
export function listAttemptStatsSince(db: Database, subscriptionId: string, fromHour: number): AttemptStatsRow[] {
  return db.query<AttemptStatsRow, [string, number]>("SELECT * FROM webhook_attempt_stats WHERE subscription_id = ? AND hour >= ? ORDER BY hour").all(subscriptionId, fromHour);
}

/** deleteAttemptStatsBefore prunes hourly statistics older than the cutoff, and those of subscriptions that no longer exist. */
export function deleteAttemptStatsBefore(db: Database, cutoff: number): number {
  return db
    .query("DELETE FROM webhook_attempt_stats WHERE hour < ? OR subscription_id NOT IN (SELECT id FROM webhook_subscriptions)")
    .run(cutoff).changes;
}

// Reads of the operator console (issue 17): health by hour, failures by reason, events by subject.

/** DeliveryHourRow is how many deliveries of a subscription created in one hour have a status now. */
export type DeliveryHourRow = {
  subscription_id: string;
  /** Unix ms at the start of the hour */
  hour: number;
  status: "pending" | "succeeded" | "failed";
  n: number;
}

/** listDeliveryHoursSince returns the hourly delivery counts of every existing subscription (or of one) from an hour on (migration 0015 keeps them). */
export function listDeliveryHoursSince(db: Database, fromHour: number, subscriptionId: string | null = null): DeliveryHourRow[] {
  // IN (subquery) seeks the primary key once per subscription rather than reading every hour kept.
  const of = subscriptionId === null ? "IN (SELECT id FROM webhook_subscriptions)" : "= ?";
  const sql = `SELECT subscription_id, hour, status, n FROM webhook_delivery_hours WHERE subscription_id ${of} AND hour >= ? AND n > 0`;
  return db.query<DeliveryHourRow, (string | number)[]>(sql).all(...(subscriptionId === null ? [] : [subscriptionId]), fromHour);
}

/** listDeliveryDaysSince sums the hourly delivery counts of every existing subscription (or of one) into UTC days, from a day on. */
export function listDeliveryDaysSince(db: Database, fromDay: number, subscriptionId: string | null = null): DeliveryHourRow[] {
  const of = subscriptionId === null ? "IN (SELECT id FROM webhook_subscriptions)" : "= ?";
  const sql = `SELECT subscription_id, hour - hour % 86400000 AS hour, status, sum(n) AS n FROM webhook_delivery_hours
    WHERE subscription_id ${of} AND hour >= ? AND n > 0 GROUP BY subscription_id, hour - hour % 86400000, status`;
  return db.query<DeliveryHourRow, (string | number)[]>(sql).all(...(subscriptionId === null ? [] : [subscriptionId]), fromDay);
}

/** sumDeliveryHours counts the deliveries of a subscription and/or status (each optional) from the hourly counts, without reading the deliveries. */
export function sumDeliveryHours(db: Database, filters: { subscriptionId?: string; status?: string }): number {
  const where: string[] = [];
  const params: string[] = [];
  if (filters.subscriptionId !== undefined) where.push("subscription_id = ?") && params.push(filters.subscriptionId);
  if (filters.status !== undefined) where.push("status = ?") && params.push(filters.status);
  const sql = `SELECT coalesce(sum(n), 0) AS n FROM webhook_delivery_hours ${where.length ? `WHERE ${where.join(" AND ")}` : ""}`;
  return db.query<{ n: number }, string[]>(sql).get(...params)!.n;
}

/** listAttemptStatsFrom returns the hourly attempt statistics of every existing subscription (or of one) from an hour on, in one query. */
export function listAttemptStatsFrom(db: Database, fromHour: number, subscriptionId: string | null = null): AttemptStatsRow[] {
  const of = subscriptionId === null ? "IN (SELECT id FROM webhook_subscriptions)" : "= ?";
  const sql = `SELECT * FROM webhook_attempt_stats WHERE subscription_id ${of} AND hour >= ?`;
  return db.query<AttemptStatsRow, (string | number)[]>(sql).all(...(subscriptionId === null ? [] : [subscriptionId]), fromHour);
}

/** FailureReasonRow is a group of a subscription's failing deliveries with the same last answer: a status code, or a network error. */
export type FailureReasonRow = {
  last_response_status: number | null;
  last_error: string | null;
  deliveries: number;
  latest_at: number;
  latest_id: string;
}

/** listFailureReasons groups a subscription's deliveries created since a time whose last attempt failed (failed, or pending with attempts), by reason, most frequent first. */
export function listFailureReasons(db: Database, subscriptionId: string, since: number, limit: number): FailureReasonRow[] {
  return db
    .query<FailureReasonRow, [string, number, number]>(
      `SELECT last_response_status, last_error, count(*) AS deliveries, max(created_at) AS latest_at, max(id) AS latest_id
       FROM webhook_deliveries
       WHERE subscription_id = ? AND status IN ('failed', 'pending') AND created_at >= ? AND attempts > 0
       GROUP BY last_response_status, last_error ORDER BY deliveries DESC, latest_at DESC LIMIT ?`,
    )
    .all(subscriptionId, since, limit);
}

/** findEventById returns one event, or null. */
export function findEventById(db: Database, id: string): EventRow | null {
  return db.query<EventRow, [string]>("SELECT id, type, payload, created_at FROM events WHERE id = ?").get(id);
}

/** listEventsAbout returns the latest events about one contact or account (the id in their data), newest first. */
export function listEventsAbout(db: Database, subjectId: string, limit: number): EventRow[] {
  return db
    .query<EventRow, [string, number]>("SELECT id, type, payload, created_at FROM events WHERE subject_id = ? ORDER BY created_at DESC, id DESC LIMIT ?")
    .all(subjectId, limit);
}

/** listDeliveriesOfEvents returns every delivery of the given events, oldest first. */
export function listDeliveriesOfEvents(db: Database, eventIds: readonly string[]): DeliveryRow[] {
  if (eventIds.length === 0) return [];
  return db.query<DeliveryRow, string[]>(`SELECT * FROM webhook_deliveries WHERE event_id IN (${placeholders(eventIds.length)}) ORDER BY created_at, id`).all(...eventIds);
}

/** listEventSubjects returns what each of the given events is about (the id in its data), for those that name one. */
export function listEventSubjects(db: Database, eventIds: readonly string[]): { id: string; subject_id: string }[] {
  if (eventIds.length === 0) return [];
  return db.query<{ id: string; subject_id: string }, string[]>(`SELECT id, subject_id FROM events WHERE id IN (${placeholders(eventIds.length)}) AND subject_id IS NOT NULL`).all(...eventIds);
}
