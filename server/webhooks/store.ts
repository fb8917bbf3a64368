import type { Database as SqliteConnection } from "bun:sqlite";
import type { Db, Dialect, SqlValue } from "../db/sql.ts";
import { keysetOrder, unindexed } from "../db/keyset.ts";
import type { CursorPosition } from "../http/list-query.ts";
import { storedMaker, type ChangeMaker, type MadeByColumns } from "../shared/made-by.ts";
import { redirectError } from "./attempt-errors.ts";
import { RETRY_AFTER_CAP_MS } from "../limits/limits.ts";
import type { DeliveryStatus } from "./model.ts";

export type EventRow = {
  id: string;
  type: string;
  payload: string;
  /** the id of the request whose change made the event; null for one no request made, and those recorded before migration 0041 */
  request_id: string | null;
  /** the id of the API token that sent that request; null for a console form's, no request's, and those recorded before migration 0050 */
  token_id: string | null;
  /** who made it (storedMaker): the API token, the console's operator, the command or the delivery loop; null for those recorded before migration 0052 */
  made_by: string | null;
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
  /** the webhook.ping the console's wizard sent to test the last secret rotation; null until it sends one (each rotation clears it) */
  secret_test_delivery_id: string | null;
  /** when secrets-key reset gave it a secret no receiver knows (its own was lost with the key); null again once rotated, and enable is refused until then */
  secret_lost_at: number | null;
  status: "active" | "disabled";
  disabled_at: number | null;
  disabled_reason: string | null;
  /** set while paused: deliveries wait until it is resumed */
  paused_at: number | null;
  /** who paused it (storedMaker); null while not paused, and for a pause before migration 0052 */
  paused_by: string | null;
  /** who disabled it (storedMaker): an operator's removal, a command, the delivery loop; null while active, and for a disable before migration 0052 */
  disabled_by: string | null;
  /** requests per second at most; null: no cap */
  max_rate: number | null;
  /** first failed attempt since the last successful one */
  failing_since: number | null;
  /** until when its receiver's 429 or 503 with Retry-After holds every attempt but a test ping's (holdSubscription); null, or passed: not held */
  held_until: number | null;
  created_at: number;
  updated_at: number;
  /** who made the change updated_at dates (storedMaker): its creation, a pause, a resume, an enable, a rotation, an edit; null before migration 0052 */
  updated_by: string | null;
} & MadeByColumns;

/** shownStatus is the status a subscription shows: paused is an active one with paused_at set. */
export function shownStatus(row: Pick<SubscriptionRow, "status" | "paused_at">): "active" | "paused" | "disabled" {
  return row.status === "active" && row.paused_at !== null ? "paused" : row.status;
}

export type DeliveryRow = {
  id: string;
  event_id: string;
  event_type: string;
  subscription_id: string;
  target_url: string;
  status: DeliveryStatus;
  attempts: number;
  next_attempt_at: number | null;
  locked_until: number | null;
  last_response_status: number | null;
  last_error: string | null;
  /** set by a recovery (requeueFailedDeliveries): the next scheduled attempt is the last */
  recovered_at: number | null;
  created_at: number;
  updated_at: number;
  /** its event's (EventRow) */
  request_id: string | null;
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
  /** the webhook.ping the console's wizard sent to test the subscription's last secret rotation (signingSecrets) */
  secret_test_delivery_id: string | null;
  payload: string;
  /** when its event's payload was erased (eraseEventsAbout); null: never */
  event_erased_at: number | null;
  /** the id of the request that made its event (EventRow), for the attempt's log line */
  request_id: string | null;
  subscription_status: "active" | "disabled" | null;
  subscription_paused_at: number | null;
  /** when the delivery's lease ends, as read; once this instance has claimed it, the end of its own lease */
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
  /** deliveries of the events made by the request with this id (X-Request-Id) */
  requestId?: string;
  /**
   * (SQLite) the kind's index drives beside a subscription or an unfinished status: the kind has
   * fewer deliveries than that filter keeps; false when planDeliveryFilters chose the other index
   */
  kindDrives?: boolean;
}

export interface Page {
  cursor: CursorPosition | null;
  limit: number;
  offset: number;
}

const placeholders = (n: number) => Array(n).fill("?").join(", ");

/**
 * ROWS_PER_INSERT bounds the rows of one multi-row INSERT: 8 columns a row stay far below the
 * bound parameters a statement takes (SQLite 32,766, PostgreSQL 65,535).
 */
const ROWS_PER_INSERT = 500;

/** rowsInserter returns what stores rows of one table in multi-row INSERTs of at most ROWS_PER_INSERT rows, in order; a single row's text is built once. */
function rowsInserter<T>(table: string, columns: string[], values: (row: T) => SqlValue[]): (db: Db, rows: T[]) => Promise<void> {
  const head = `INSERT INTO ${table} (${columns.join(", ")}) VALUES `;
  const row = `(${placeholders(columns.length)})`;
  const one = head + row;
  return async (db, rows) => {
    for (let from = 0; from < rows.length; from += ROWS_PER_INSERT) {
      const chunk = rows.slice(from, from + ROWS_PER_INSERT);
      await db.run(chunk.length === 1 ? one : head + Array(chunk.length).fill(row).join(", "), chunk.flatMap(values));
    }
  };
}

const eventRows = rowsInserter<EventRow>("events", ["id", "type", "payload", "request_id", "token_id", "made_by", "created_at"], (row) => [row.id, row.type, row.payload, row.request_id, row.token_id, row.made_by, row.created_at]);

/** insertEvent stores one outbox event. */
export async function insertEvent(db: Db, row: EventRow): Promise<void> {
  await eventRows(db, [row]);
}

/** insertEvents stores many events in a few statements (a set-wise change records one per row it changed). */
export async function insertEvents(db: Db, rows: EventRow[]): Promise<void> {
  await eventRows(db, rows);
}

/** insertSubscription stores a subscription and indexes the event kinds it wants. */
export async function insertSubscription(db: Db, row: SubscriptionRow, eventTypes: readonly string[]): Promise<void> {
  await db.run(
    `INSERT INTO webhook_subscriptions (id, target_url, description, events, secret, previous_secret, previous_secret_expires_at, secret_rotated_at, secret_test_delivery_id, secret_lost_at, status, disabled_at, disabled_reason, paused_at, paused_by, disabled_by, max_rate, failing_since, held_until, created_at, updated_at, updated_by, created_by, created_by_email)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    [
      row.id,
      row.target_url,
      row.description,
      row.events,
      row.secret,
      row.previous_secret,
      row.previous_secret_expires_at,
      row.secret_rotated_at,
      row.secret_test_delivery_id,
      row.secret_lost_at,
      row.status,
      row.disabled_at,
      row.disabled_reason,
      row.paused_at,
      row.paused_by,
      row.disabled_by,
      row.max_rate,
      row.failing_since,
      row.held_until,
      row.created_at,
      row.updated_at,
      row.updated_by,
      row.created_by,
      row.created_by_email,
    ],
  );
  for (const type of eventTypes) await db.run("INSERT INTO webhook_subscription_events (event_type, subscription_id) VALUES (?, ?)", [type, row.id]);
}

/** listUnsealedSubscriptionSecrets returns the subscriptions whose signing secret, or previous secret, is still stored in clear. */
// sqlite-only: a migration backfill (migrations run synchronously on the writer connection).
export function listUnsealedSubscriptionSecrets(db: SqliteConnection): { id: string; secret: string; previous_secret: string | null }[] {
  return db
    .query<{ id: string; secret: string; previous_secret: string | null }, []>(
      "SELECT id, secret, previous_secret FROM webhook_subscriptions WHERE secret NOT LIKE 'sealed-v1.%' OR previous_secret NOT LIKE 'sealed-v1.%'",
    )
    .all();
}

/** updateSubscriptionSecrets replaces the stored (sealed) signing secret and previous secret of a subscription. */
// sqlite-only: a migration backfill (migrations run synchronously on the writer connection).
export function updateSubscriptionSecrets(db: SqliteConnection, id: string, secret: string, previousSecret: string | null): void {
  db.query("UPDATE webhook_subscriptions SET secret = ?, previous_secret = ? WHERE id = ?").run(secret, previousSecret, id);
}

/** SecretAnswer is a kept answer of an idempotent create or secret rotation: its key, its subscription and the secret it shows. */
export interface SecretAnswer {
  token_id: string;
  method: string;
  path: string;
  idem_key: string;
  subscription_id: string;
  secret: string;
}

/** CONSOLE_SUBSCRIPTION_FORM_PATH is the path the console's create-subscription form keeps its answers under, as the API's create keeps its own. */
export const CONSOLE_SUBSCRIPTION_FORM_PATH = "/console/subscriptions";

/** SECRET_ANSWERS selects the kept idempotent answers that show a subscription's secret: the API's creates and rotations, and the console create form's. */
const SECRET_ANSWERS = `method = 'POST' AND (path IN ('/public/v1/webhook-subscriptions', '${CONSOLE_SUBSCRIPTION_FORM_PATH}') OR path LIKE '/public/v1/webhook-subscriptions/%/rotate-secret')`;

/**
 * listUnsealedSecretAnswers returns the kept answers that show a secret (SECRET_ANSWERS) whose
 * secret is in clear (a crm before migration 0011 kept them as sent; the console's form, newer, never did).
 */
// sqlite-only: a migration backfill (migrations run synchronously on the writer connection); the
// table has no rowid before 0019, so a record is named by its key.
export function listUnsealedSecretAnswers(db: SqliteConnection): SecretAnswer[] {
  return db
    .query<SecretAnswer, []>(
      `SELECT token_id, method, path, idem_key, answer ->> '$.data.id' AS subscription_id, answer ->> '$.data.secret' AS secret
       FROM (SELECT *, CASE WHEN json_valid(response_body) THEN response_body END AS answer FROM idempotency_keys
             WHERE ${SECRET_ANSWERS})
       WHERE answer ->> '$.data.secret' NOT LIKE 'sealed-v1.%'`,
    )
    .all();
}

/** updateAnswerSecret replaces the secret shown in a kept answer with its sealed form. */
// sqlite-only: a migration backfill (migrations run synchronously on the writer connection).
export function updateAnswerSecret(db: SqliteConnection, answer: SecretAnswer, sealedSecret: string): void {
  db.query("UPDATE idempotency_keys SET response_body = json_set(response_body, '$.data.secret', ?) WHERE token_id = ? AND method = ? AND path = ? AND idem_key = ?").run(
    sealedSecret,
    answer.token_id,
    answer.method,
    answer.path,
    answer.idem_key,
  );
}

/**
 * findOneSealedSecret returns any one secret the database holds sealed, with the subscription id it
 * is sealed to: a subscription's, else the one in a kept answer of a create or rotation
 * (SECRET_ANSWERS), which outlives its subscription's delete by up to 24 hours; null when there is none.
 */
export async function findOneSealedSecret(db: Db): Promise<{ id: string; secret: string } | null> {
  const subscription = await db.get<{ id: string; secret: string }>("SELECT id, secret FROM webhook_subscriptions LIMIT 1");
  if (subscription) return subscription;
  const [answer] = await listSealedSecretAnswers(db, 1);
  return answer ? { id: answer.subscription_id, secret: answer.secret } : null;
}

/** listSealedSecretAnswers returns the kept answers that show a secret (SECRET_ANSWERS) sealed, with the subscription it is sealed to; at most `limit`. */
export async function listSealedSecretAnswers(db: Db, limit = -1): Promise<SecretAnswer[]> {
  // Read as text on both backends; an answer kept in clear by a crm before 0011 holds no sealed secret.
  const rows = await db.all<Omit<SecretAnswer, "subscription_id" | "secret"> & { response_body: string }>(
    `SELECT token_id, method, path, idem_key, response_body FROM idempotency_keys WHERE ${SECRET_ANSWERS} AND response_body LIKE '%"secret":"sealed-v1.%'${limit < 0 ? "" : ` LIMIT ${limit}`}`,
  );
  return rows.map(({ response_body, ...key }) => {
    const { data } = JSON.parse(response_body) as { data: { id: string; secret: string } };
    return { ...key, subscription_id: data.id, secret: data.secret };
  });
}

/** replaceAnswerSecret puts `sealedSecret` in place of the sealed secret a kept answer shows (a secrets key rotation's re-seal), leaving the rest of its text as it was. */
export function replaceAnswerSecret(db: Db, answer: SecretAnswer, sealedSecret: string): Promise<number> {
  return db.run("UPDATE idempotency_keys SET response_body = REPLACE(response_body, ?, ?) WHERE token_id = ? AND method = ? AND path = ? AND idem_key = ?", [
    answer.secret,
    sealedSecret,
    answer.token_id,
    answer.method,
    answer.path,
    answer.idem_key,
  ]);
}

/** resealSubscriptionSecrets stores a subscription's signing secret and previous secret sealed anew (a secrets key rotation), its rotation's grace untouched. */
export function resealSubscriptionSecrets(db: Db, id: string, secret: string, previousSecret: string | null): Promise<number> {
  return db.run("UPDATE webhook_subscriptions SET secret = ?, previous_secret = ? WHERE id = ?", [secret, previousSecret, id]);
}

/** findSecretsKeyCheck returns the check value of the secrets key the database records, or null before a start has recorded one. */
export async function findSecretsKeyCheck(db: Db): Promise<Uint8Array | null> {
  return (await db.get<{ check_value: Uint8Array }>("SELECT check_value FROM secrets_key_check WHERE singleton = 1"))?.check_value ?? null;
}

/** insertSecretsKeyCheck records the check value of the secrets key (the database has none yet). */
export function insertSecretsKeyCheck(db: Db, checkValue: Uint8Array): Promise<number> {
  return db.run("INSERT INTO secrets_key_check (singleton, check_value) VALUES (1, ?)", [checkValue]);
}

/** deleteSecretsKeyCheck forgets the check value of the secrets key (a lost one's, replaced by secrets-key reset). */
export function deleteSecretsKeyCheck(db: Db): Promise<number> {
  return db.run("DELETE FROM secrets_key_check");
}

/**
 * deleteSecretAnswers removes the kept answers that show a secret (SECRET_ANSWERS): they hold it
 * sealed, which a replay opens, and returns how many went.
 */
export function deleteSecretAnswers(db: Db): Promise<number> {
  return db.run(`DELETE FROM idempotency_keys WHERE ${SECRET_ANSWERS}`);
}

/** listEverySubscription returns every subscription, oldest first (a subscription's id is time-ordered). */
export function listEverySubscription(db: Db): Promise<SubscriptionRow[]> {
  return db.all<SubscriptionRow>("SELECT * FROM webhook_subscriptions ORDER BY id");
}

/** listSubscriptionsMadeBy returns the subscriptions an operator made, or that were created with an API token they made, oldest first. */
export function listSubscriptionsMadeBy(db: Db, operatorId: string): Promise<SubscriptionRow[]> {
  return db.all<SubscriptionRow>("SELECT * FROM webhook_subscriptions WHERE created_by = ? OR created_by IN (SELECT id FROM api_tokens WHERE created_by = ?) ORDER BY id", [operatorId, operatorId]);
}

/** replaceSubscriptionMakerEmail puts `marker` in place of `email` where it is kept as the maker of subscriptions (created_by_email), and returns how many. */
export function replaceSubscriptionMakerEmail(db: Db, email: string, marker: string): Promise<number> {
  return db.run("UPDATE webhook_subscriptions SET created_by_email = ? WHERE created_by_email = ?", [marker, email]);
}

/** CHANGE_MAKER_COLUMNS are the columns that keep who made a change (storedMaker, migration 0052), as table.column. */
export const CHANGE_MAKER_COLUMNS = ["webhook_subscriptions.paused_by", "webhook_subscriptions.disabled_by", "webhook_subscriptions.updated_by", "events.made_by", "events.erased_by"] as const;

/** ChangeMakerColumn is one of CHANGE_MAKER_COLUMNS. */
export type ChangeMakerColumn = (typeof CHANGE_MAKER_COLUMNS)[number];

/**
 * storedMakersHolding returns the distinct change makers stored in `column` whose text holds
 * `text`, as stored, for the caller to read and pick from: a few values however many rows keep
 * them. No index: a scan, for a command as rare as an erasure request.
 */
export async function storedMakersHolding(db: Db, column: ChangeMakerColumn, text: string): Promise<string[]> {
  const [table, name] = column.split(".");
  const rows = await db.all<{ stored: string }>(`SELECT DISTINCT ${name} AS stored FROM ${table} WHERE ${name} LIKE ? ESCAPE '\\'`, [`%${text.replace(/[\\%_]/g, "\\$&")}%`]);
  return rows.map((row) => row.stored);
}

/** replaceStoredMaker puts the stored change maker `to` in place of `from` in `column`, and returns how many rows it changed. */
export function replaceStoredMaker(db: Db, column: ChangeMakerColumn, from: string, to: string): Promise<number> {
  const [table, name] = column.split(".");
  return db.run(`UPDATE ${table} SET ${name} = ? WHERE ${name} = ?`, [to, from]);
}

/** findSubscriptionById returns one subscription row or null. */
export function findSubscriptionById(db: Db, id: string): Promise<SubscriptionRow | null> {
  return db.get<SubscriptionRow>("SELECT * FROM webhook_subscriptions WHERE id = ?", [id]);
}

function subscriptionFilter(eventType: string | undefined): { where: string; params: string[] } {
  return eventType === undefined
    ? { where: "", params: [] }
    : { where: "s.id IN (SELECT subscription_id FROM webhook_subscription_events WHERE event_type = ?)", params: [eventType] };
}

/** countSubscriptions counts subscriptions, optionally only those wanting an event kind. */
export async function countSubscriptions(db: Db, eventType: string | undefined): Promise<number> {
  const filter = subscriptionFilter(eventType);
  return (await db.get<{ n: number }>(`SELECT count(*) AS n FROM webhook_subscriptions s ${filter.where ? `WHERE ${filter.where}` : ""}`, filter.params))!.n;
}

/** listSubscriptions returns one page of subscriptions, newest first. */
export function listSubscriptions(db: Db, eventType: string | undefined, page: Page): Promise<SubscriptionRow[]> {
  const filter = subscriptionFilter(eventType);
  const order = keysetOrder("s.created_at", "s.id", "desc", page.cursor);
  const where = [filter.where, order.after].filter(Boolean);
  return db.all<SubscriptionRow>(`SELECT s.* FROM webhook_subscriptions s ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY ${order.orderBy} LIMIT ? OFFSET ?`, [
    ...filter.params,
    ...order.params,
    page.limit,
    page.offset,
  ]);
}

/** deleteSubscription removes a subscription and tells whether it existed; its deliveries stay as history. */
export async function deleteSubscription(db: Db, id: string): Promise<boolean> {
  return (await db.run("DELETE FROM webhook_subscriptions WHERE id = ?", [id])) > 0;
}

/**
 * rotateSubscriptionSecret makes `secret` the signing secret and keeps the one it replaces, signing
 * until `previousExpiresAt` (not at all when that is not after `now`); it tells whether the
 * subscription exists. The old value is copied in SQL, so it is stored exactly as the current secret
 * was. The console's test of the rotation before
 * (setSecretRotationTest) is forgotten: it tested the secrets that signed then. A secret lost with
 * the secrets key (secret_lost_at) is so no more: the new one is shown to the caller.
 */
export async function rotateSubscriptionSecret(db: Db, id: string, secret: string, previousExpiresAt: number, now: number, by: ChangeMaker | null): Promise<boolean> {
  const changed = await db.run(
    `UPDATE webhook_subscriptions SET previous_secret = secret, secret = ?, previous_secret_expires_at = ?, secret_rotated_at = ?, secret_test_delivery_id = NULL, secret_lost_at = NULL, updated_at = ?, updated_by = ?
     WHERE id = ?`,
    [secret, previousExpiresAt, now, now, storedMaker(by), id],
  );
  return changed > 0;
}

/** setSecretRotationTest records the webhook.ping sent as the test of a subscription's last secret rotation (the console's wizard), until the next rotation. */
export async function setSecretRotationTest(db: Db, id: string, deliveryId: string): Promise<void> {
  await db.run("UPDATE webhook_subscriptions SET secret_test_delivery_id = ? WHERE id = ?", [deliveryId, id]);
}

/** endSecretGrace stops (and forgets) the previous secret of a subscription from `now` on, `by` whom; it tells whether one was still signing. */
export async function endSecretGrace(db: Db, id: string, now: number, by: ChangeMaker | null): Promise<boolean> {
  return (await db.run("UPDATE webhook_subscriptions SET previous_secret = NULL, previous_secret_expires_at = ?, updated_at = ?, updated_by = ? WHERE id = ? AND previous_secret_expires_at > ?", [now, now, storedMaker(by), id, now])) > 0;
}

/**
 * setSubscriptionPaused pauses (at `pausedAt`) a subscription that is not paused, or resumes (null)
 * one that is, `by` whom; it tells whether it changed. Pausing a paused one or resuming an active
 * one changes nothing, its updated_at and the first pause's time and maker included, as a PATCH
 * that changes nothing.
 */
export async function setSubscriptionPaused(db: Db, id: string, pausedAt: number | null, now: number, by: ChangeMaker | null): Promise<boolean> {
  const maker = storedMaker(by);
  const sql =
    pausedAt === null
      ? "UPDATE webhook_subscriptions SET paused_at = NULL, paused_by = NULL, updated_at = ?, updated_by = ? WHERE id = ? AND paused_at IS NOT NULL"
      : "UPDATE webhook_subscriptions SET paused_at = ?, paused_by = ?, updated_at = ?, updated_by = ? WHERE id = ? AND paused_at IS NULL";
  return (await db.run(sql, pausedAt === null ? [now, maker, id] : [pausedAt, maker, now, maker, id])) > 0;
}

/** updateSubscriptionSettings sets a subscription's description and rate cap, `by` whom; it tells whether the subscription exists. */
export async function updateSubscriptionSettings(db: Db, id: string, settings: { description: string | null; max_rate: number | null }, now: number, by: ChangeMaker | null): Promise<boolean> {
  return (await db.run("UPDATE webhook_subscriptions SET description = ?, max_rate = ?, updated_at = ?, updated_by = ? WHERE id = ?", [settings.description, settings.max_rate, now, storedMaker(by), id])) > 0;
}

/** RecoveryPosition is where a recovery stands in a subscription's history: the creation time and id of the last delivery it queued. */
export interface RecoveryPosition {
  created_at: number;
  id: string;
}

/** NOT_ERASED keeps, of deliveries named `d`, those whose event was not erased (eraseEventsAbout): nothing of it is left to send. */
const NOT_ERASED = "NOT EXISTS (SELECT 1 FROM events e WHERE e.id = d.event_id AND e.erased_at IS NOT NULL)";

/**
 * requeueFailedDeliveries makes at most `limit` failed deliveries of a subscription created after
 * `after` and before `until` pending and due at `now`, marked recovered (one more attempt), taking
 * them oldest first, skipping those whose event was erased, and returns their positions: a recovery goes on after the last one, so a
 * delivery it queued that fails again meanwhile is not queued twice. Their ids are time-ordered,
 * so the loop, which takes due deliveries by due time then id, sends them oldest first.
 */
export async function requeueFailedDeliveries(db: Db, subscriptionId: string, after: RecoveryPosition, until: number, now: number, limit: number): Promise<RecoveryPosition[]> {
  // sqlite-only: INDEXED BY pins the subscription's history in creation order, which the position continues.
  const deliveries = db.dialect === "postgres" ? "webhook_deliveries d" : "webhook_deliveries d INDEXED BY webhook_deliveries_subscription";
  const found = await db.all<RecoveryPosition>(
    `SELECT d.id, d.created_at FROM ${deliveries}
     WHERE d.subscription_id = ? AND (d.created_at, d.id) > (?, ?) AND d.created_at < ? AND d.status = 'failed' AND ${NOT_ERASED}
     ORDER BY d.created_at, d.id LIMIT ?`,
    [subscriptionId, after.created_at, after.id, until, limit],
  );
  if (found.length === 0) return found;
  await db.run(
    `UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ?, recovered_at = ?, updated_at = ? WHERE id IN (${placeholders(found.length)})`,
    [now, now, now, ...found.map((d) => d.id)],
  );
  return found;
}

/** countFailedDeliveriesBetween counts a subscription's failed deliveries created in [since, until) that a recovery would queue (their event not erased). */
export async function countFailedDeliveriesBetween(db: Db, subscriptionId: string, since: number, until: number): Promise<number> {
  return (await db.get<{ n: number }>(`SELECT count(*) AS n FROM webhook_deliveries d WHERE d.subscription_id = ? AND d.status = 'failed' AND d.created_at >= ? AND d.created_at < ? AND ${NOT_ERASED}`, [subscriptionId, since, until]))!.n;
}

/** disableSubscription marks a subscription disabled, saying when, why and by whom. */
export async function disableSubscription(db: Db, id: string, reason: string, now: number, by: ChangeMaker | null): Promise<void> {
  const maker = storedMaker(by);
  await db.run("UPDATE webhook_subscriptions SET status = 'disabled', disabled_at = ?, disabled_reason = ?, disabled_by = ?, updated_at = ?, updated_by = ? WHERE id = ? AND status = 'active'", [now, reason, maker, now, maker, id]);
}

/**
 * replaceLostSecret gives a subscription whose secrets were sealed with a lost secrets key a new
 * sealed secret, forgets the previous secret of a rotation (sealed with that key too) and the
 * console's test of it, and disables the subscription with `reason`, `by` whom (the command),
 * whatever its status, marking its secret lost (secret_lost_at) until the next rotation.
 */
export async function replaceLostSecret(db: Db, id: string, sealedSecret: string, reason: string, now: number, by: ChangeMaker | null): Promise<void> {
  const maker = storedMaker(by);
  await db.run(
    `UPDATE webhook_subscriptions SET secret = ?, previous_secret = NULL, previous_secret_expires_at = NULL, secret_test_delivery_id = NULL, secret_lost_at = ?,
       status = 'disabled', disabled_at = ?, disabled_reason = ?, disabled_by = ?, updated_at = ?, updated_by = ? WHERE id = ?`,
    [sealedSecret, now, now, reason, maker, now, maker, id],
  );
}

/** listLostSecretSubscriptionIds returns the ids of the subscriptions whose secret was lost with the secrets key and not rotated since (secret_lost_at). */
export async function listLostSecretSubscriptionIds(db: Db): Promise<Set<string>> {
  return new Set((await db.all<{ id: string }>("SELECT id FROM webhook_subscriptions WHERE secret_lost_at IS NOT NULL")).map((row) => row.id));
}

/**
 * enableSubscription makes a disabled subscription active again, its failing streak forgotten, not
 * paused (a pause a crm before 2026-11-28 let a disabled subscription take would keep it waiting)
 * and not held: its receiver's Retry-After was asked of the sender before the operator mended it
 * and enabled it; `by` whom; it tells whether it was disabled.
 */
export async function enableSubscription(db: Db, id: string, now: number, by: ChangeMaker | null): Promise<boolean> {
  return (
    (await db.run(
      "UPDATE webhook_subscriptions SET status = 'active', disabled_at = NULL, disabled_reason = NULL, disabled_by = NULL, failing_since = NULL, paused_at = NULL, paused_by = NULL, held_until = NULL, updated_at = ?, updated_by = ? WHERE id = ? AND status = 'disabled'",
      [now, storedMaker(by), id],
    )) > 0
  );
}

/** markSubscriptionFailing notes the first failed attempt of a streak. */
export async function markSubscriptionFailing(db: Db, id: string, since: number): Promise<void> {
  await db.run("UPDATE webhook_subscriptions SET failing_since = ? WHERE id = ? AND failing_since IS NULL", [since, id]);
}

/** markSubscriptionsHealthy ends the failing streak of each subscription given (a success was recorded). */
export async function markSubscriptionsHealthy(db: Db, ids: readonly string[]): Promise<void> {
  await db.run(`UPDATE webhook_subscriptions SET failing_since = NULL WHERE id IN (${placeholders(ids.length)}) AND failing_since IS NOT NULL`, ids);
}

/**
 * holdSubscription holds every attempt of a subscription but a test ping's until `until`, as its
 * receiver asked (a 429 or 503 with Retry-After); a longer hold already stored stays: attempts
 * answered together each ask for their own wait, and the longest is what the receiver can take.
 */
export async function holdSubscription(db: Db, id: string, until: number): Promise<void> {
  await db.run("UPDATE webhook_subscriptions SET held_until = ? WHERE id = ? AND (held_until IS NULL OR held_until < ?)", [until, id, until]);
}

/**
 * heldClause is the condition, on webhook_subscriptions `s`, of a subscription its receiver holds
 * (holdSubscription) at `now`, with its two parameters (heldParameters): a hold ends at held_until,
 * and one further ahead than RETRY_AFTER_CAP_MS was set before the clock went back, and would hold
 * the subscription for the length of the step.
 */
const heldClause = "(s.held_until IS NOT NULL AND s.held_until > ? AND s.held_until <= ?)";
const heldParameters = (now: number) => [now, now + RETRY_AFTER_CAP_MS];

/**
 * countUnsentDeliveriesOf counts the pending deliveries of a subscription that no attempt holds at
 * `now` (unsentClause), none of `openHere`: those failUnsentDeliveries fails.
 */
export async function countUnsentDeliveriesOf(db: Db, subscriptionId: string, now: number, openHere: readonly string[]): Promise<number> {
  return (await db.get<{ n: number }>(`SELECT count(*) AS n FROM webhook_deliveries WHERE subscription_id = ? AND status = 'pending' AND ${unsentClause(openHere)}`, [subscriptionId, now, ...openHere]))!.n;
}

/**
 * unsentClause is the condition of a delivery no attempt holds at its first parameter, now: its
 * lease, if any, has run out (its instance stopped without recording the attempt), and it is none
 * of `openHere`, the following parameters: the deliveries with an attempt open on this instance,
 * whose leases a wall clock stepped forward (or a recording write held up past the lease's margin)
 * may have run out while their requests wait for an answer.
 */
const unsentClause = (openHere: readonly string[]) => `(locked_until IS NULL OR locked_until <= ?)${openHere.length === 0 ? "" : ` AND id NOT IN (${placeholders(openHere.length)})`}`;

/**
 * failUnsentDeliveries ends at most `limit` pending deliveries of a subscription with the given
 * reason, those no attempt holds at `now`, none of `openHere` (unsentClause), and returns how many:
 * fewer than `limit` leaves none but those. A delivery with an attempt under way is left to it: the
 * attempt ends it, succeeded or failed, as the receiver answers (failed here, it would be counted
 * failed unsent, then answered 2xx).
 */
export function failUnsentDeliveries(db: Db, subscriptionId: string, reason: string, now: number, limit: number, openHere: readonly string[]): Promise<number> {
  return db.run(
    `UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL, last_error = ?, updated_at = ?
     WHERE id IN (SELECT id FROM webhook_deliveries WHERE subscription_id = ? AND status = 'pending' AND ${unsentClause(openHere)} LIMIT ?)`,
    [reason, now, subscriptionId, now, ...openHere, limit],
  );
}

/**
 * findStoppedSubscriptionsWithPending returns the ids of the deleted or disabled subscriptions that
 * still have pending deliveries: a stop whose deliveries were being failed a chunk at a time when
 * its process ended. It visits each subscription with pending deliveries once (a skip scan of the
 * index of due deliveries), not every pending delivery.
 */
export async function findStoppedSubscriptionsWithPending(db: Db): Promise<string[]> {
  // sqlite-only: INDEXED BY pins the index of due deliveries per subscription (PostgreSQL plans it alone).
  const deliveries = db.dialect === "postgres" ? "webhook_deliveries d" : "webhook_deliveries d INDEXED BY webhook_deliveries_due_by_subscription";
  const rows = await db.all<{ id: string }>(
    `WITH RECURSIVE pending (id) AS (
       SELECT (SELECT d.subscription_id FROM ${deliveries} WHERE d.status = 'pending' ORDER BY d.subscription_id LIMIT 1)
       UNION ALL
       SELECT (SELECT d.subscription_id FROM ${deliveries} WHERE d.status = 'pending' AND d.subscription_id > p.id ORDER BY d.subscription_id LIMIT 1)
       FROM pending p WHERE p.id IS NOT NULL)
     SELECT p.id FROM pending p LEFT JOIN webhook_subscriptions s ON s.id = p.id
     WHERE p.id IS NOT NULL AND (s.id IS NULL OR s.status = 'disabled') ORDER BY p.id`,
  );
  return rows.map((row) => row.id);
}

/** findActiveSubscriptionsForEvent returns the active subscriptions that want an event kind. */
export function findActiveSubscriptionsForEvent(db: Db, eventType: string): Promise<{ id: string; target_url: string }[]> {
  return db.all<{ id: string; target_url: string }>(
    // Runs in every contact write; as an IN subquery it costs a third of the equivalent join (bench/).
    `SELECT s.id, s.target_url FROM webhook_subscriptions s
     WHERE s.id IN (SELECT subscription_id FROM webhook_subscription_events WHERE event_type = ?) AND s.status = 'active'
     ORDER BY s.id`,
    [eventType],
  );
}

/** NewDelivery is what a pending delivery is stored with. */
type NewDelivery = Pick<DeliveryRow, "id" | "event_id" | "event_type" | "subscription_id" | "target_url" | "next_attempt_at" | "created_at">;

const deliveryRows = rowsInserter<NewDelivery>(
  "webhook_deliveries",
  ["id", "event_id", "event_type", "subscription_id", "target_url", "next_attempt_at", "created_at", "updated_at"],
  (row) => [row.id, row.event_id, row.event_type, row.subscription_id, row.target_url, row.next_attempt_at, row.created_at, row.created_at],
);

/** insertDelivery stores a pending delivery due at next_attempt_at. */
export async function insertDelivery(db: Db, row: NewDelivery): Promise<void> {
  await deliveryRows(db, [row]);
}

/** insertDeliveries stores many pending deliveries in a few statements, as insertDelivery stores one. */
export async function insertDeliveries(db: Db, rows: NewDelivery[]): Promise<void> {
  await deliveryRows(db, rows);
}

/**
 * DELIVERY_COLUMNS are a delivery row's (DeliveryRow) for a query naming webhook_deliveries `d`:
 * its own and its event's request id, looked up by the event's primary key beside the query, not
 * joined into it, so the delivery indexes serve the query's filters and order as before.
 */
const DELIVERY_COLUMNS = "d.*, (SELECT e.request_id FROM events e WHERE e.id = d.event_id) AS request_id";

/** findDeliveryById returns one delivery row or null. */
export function findDeliveryById(db: Db, id: string): Promise<DeliveryRow | null> {
  return db.get<DeliveryRow>(`SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d WHERE d.id = ?`, [id]);
}

/** StoredDelivery is a delivery's own row: a DeliveryRow without its event's request id. */
export type StoredDelivery = Omit<DeliveryRow, "request_id">;

/**
 * findStoredDelivery returns a delivery's own row or null, without its event's request id: the
 * delivery loop's record step reads it under the write lock for every attempt, and needs none.
 */
export function findStoredDelivery(db: Db, id: string): Promise<StoredDelivery | null> {
  return db.get<StoredDelivery>("SELECT * FROM webhook_deliveries WHERE id = ?", [id]);
}

/** isEventErased tells whether an event's payload was erased (eraseEventsAbout). */
export async function isEventErased(db: Db, eventId: string): Promise<boolean> {
  return (await db.get<{ erased_at: number | null }>("SELECT erased_at FROM events WHERE id = ?", [eventId]))?.erased_at != null;
}

/**
 * findAttemptsByDelivery returns the newest `limit` attempts of a delivery, newest first. The request headers
 * are the shared set plus what each attempt alone sent: webhook-id (the delivery id),
 * webhook-timestamp (the Unix second the attempt started) and its signature.
 */
export function findAttemptsByDelivery(db: Db, deliveryId: string, limit: number): Promise<AttemptRow[]> {
  // sqlite-only: json_set adds the attempt's own headers to the shared set. PostgreSQL appends them
  // to the set's text (written by JSON.stringify, never holding these three), keeping its order.
  const requestHeaders =
    db.dialect === "postgres"
      ? `left(rq.headers, -1) || CASE WHEN rq.headers = '{}' THEN '' ELSE ',' END || '"webhook-id":' || CAST(to_json(a.delivery_id) AS text)
           || ',"webhook-timestamp":' || CAST(to_json(CAST(a.started_at / 1000 AS text)) AS text)
           || ',"webhook-signature":' || coalesce(CAST(to_json(a.signature) AS text), 'null') || '}'`
      : `json_set(rq.headers, '$."webhook-id"', a.delivery_id, '$."webhook-timestamp"', CAST(a.started_at / 1000 AS TEXT), '$."webhook-signature"', a.signature)`;
  return db.all<AttemptRow>(
      `SELECT a.delivery_id, a.attempt, a.triggered_by, a.started_at, a.duration_ms,
         ${requestHeaders} AS request_headers,
         a.response_status, rs.headers AS response_headers, a.response_body, a.error
       FROM webhook_delivery_attempts a
       JOIN webhook_header_sets rq ON rq.id = a.request_header_set
       JOIN webhook_header_sets rs ON rs.id = a.response_header_set
       WHERE a.delivery_id = ? ORDER BY a.attempt DESC LIMIT ?`,
    [deliveryId, limit],
  );
}

function deliveryFilter(dialect: Dialect, filters: DeliveryFilters): { where: string[]; params: (string | number)[] } {
  const where: string[] = [];
  const params: (string | number)[] = [];
  const add = (clause: string, value: string | number | undefined) => {
    if (value === undefined) return;
    where.push(clause);
    params.push(value);
  };
  // The kind's index (migration 0021) drives only when no other filter's index does: without
  // statistics SQLite would take it for its order over the few deliveries of an event, contact or request,
  // and over a subscription's or the unfinished ones, which bound a page by their own size however
  // common the kind; PostgreSQL chooses by its statistics.
  // A kind rarer than the subscription's or unfinished deliveries drives after all (kindDrives).
  const unfinished = filters.status !== undefined && filters.status !== "succeeded";
  const otherIndexDrives = !filters.kindDrives && ([filters.subscriptionId, filters.eventId, filters.subjectId, filters.requestId].some((value) => value !== undefined) || unfinished);
  const checkedOnly = (column: string) => (filters.kindDrives ? unindexed(dialect, column) : column);
  add(`${checkedOnly("d.subscription_id")} = ?`, filters.subscriptionId);
  add(`${otherIndexDrives ? unindexed(dialect, "d.event_type") : "d.event_type"} = ?`, filters.eventType);
  add("d.event_id = ?", filters.eventId);
  add(`${checkedOnly("d.status")} = ?`, filters.status);
  // The literal term lets SQLite use the partial index of unfinished deliveries.
  if (unfinished && !filters.kindDrives) where.push("d.status <> 'succeeded'");
  add("d.created_at > ?", filters.createdAfter);
  add("d.created_at < ?", filters.createdBefore);
  add("d.event_id IN (SELECT id FROM events WHERE subject_id = ?)", filters.subjectId);
  add("d.event_id IN (SELECT id FROM events WHERE request_id = ?)", filters.requestId);
  return { where, params };
}

/** countDeliveries counts the deliveries matching the filters. */
export async function countDeliveries(db: Db, filters: DeliveryFilters): Promise<number> {
  const { where, params } = deliveryFilter(db.dialect, filters);
  return (await db.get<{ n: number }>(`SELECT count(*) AS n FROM webhook_deliveries d ${where.length ? `WHERE ${where.join(" AND ")}` : ""}`, params))!.n;
}

/** listDeliveries returns one page of deliveries, newest first. */
export function listDeliveries(db: Db, filters: DeliveryFilters, page: Page): Promise<DeliveryRow[]> {
  const { where, params } = deliveryFilter(db.dialect, filters);
  const order = keysetOrder("d.created_at", "d.id", "desc", page.cursor);
  if (order.after) where.push(order.after);
  return db.all<DeliveryRow>(`SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY ${order.orderBy} LIMIT ? OFFSET ?`, [
    ...params,
    ...order.params,
    page.limit,
    page.offset,
  ]);
}

/** deliveriesIndexedBy names the deliveries table read through `index`: SQLite's INDEXED BY pins a partial index, PostgreSQL plans it alone. */
function deliveriesIndexedBy(db: Db, index: string): string {
  return db.dialect === "postgres" ? "webhook_deliveries" : `webhook_deliveries INDEXED BY ${index}`;
}

/** selectDue selects what an attempt needs; `deliveries` names the deliveries table, possibly with an index. */
const selectDue = (deliveries: string) =>
  `SELECT d.id, d.subscription_id, d.event_type, d.target_url, d.locked_until, d.created_at, s.secret, s.previous_secret, s.previous_secret_expires_at,
     s.secret_test_delivery_id, s.status AS subscription_status, s.paused_at AS subscription_paused_at, e.payload, e.request_id, e.erased_at AS event_erased_at
   FROM ${deliveries} LEFT JOIN webhook_subscriptions s ON s.id = d.subscription_id JOIN events e ON e.id = d.event_id`;

/** ClaimSubscription is a subscription with due deliveries, with its rate cap and whether its receiver holds it (holdSubscription): then a test ping is due first, the one delivery a claim may take. */
export interface ClaimSubscription {
  id: string;
  max_rate: number | null;
  held: boolean;
}

/**
 * pingDueFirst is the condition that a test ping of the subscription `s` is among its due deliveries
 * not leased that are due first, `dueAt` (recordPing stores it due ahead of the others), with its
 * parameter, the time a lease ends by: a held subscription is claimed for it alone.
 */
const pingDueFirst = (deliveries: string, dueAt: string) =>
  `EXISTS (SELECT 1 FROM ${deliveries} WHERE p.subscription_id = s.id AND p.status = 'pending' AND p.next_attempt_at = ${dueAt} AND p.event_type = 'webhook.ping' AND (p.locked_until IS NULL OR p.locked_until <= ?))`;

/**
 * findSubscriptionsWithDueDeliveries returns the active, unpaused subscriptions, other than those
 * skipped (already at their concurrency limit), that have a due delivery not leased, oldest due
 * first, with their rate caps; one its receiver holds only while a test ping is due first.
 */
export async function findSubscriptionsWithDueDeliveries(db: Db, now: number, skip: string[]): Promise<ClaimSubscription[]> {
  const skipClause = skip.length ? `AND s.id NOT IN (${placeholders(skip.length)})` : "";
  // sqlite-only: INDEXED BY pins the index of due deliveries per subscription (PostgreSQL plans it alone).
  // Instances sharing a PostgreSQL database claim through lockSubscriptionsWithDueDeliveries.
  const indexed = (alias: string) => (db.dialect === "postgres" ? `webhook_deliveries ${alias}` : `webhook_deliveries ${alias} INDEXED BY webhook_deliveries_due_by_subscription`);
  const rows = await db.all<{ id: string; max_rate: number | null; held: boolean | number }>(
      `WITH due AS MATERIALIZED (
         SELECT s.id, s.max_rate, ${heldClause} AS held, (SELECT d.next_attempt_at FROM ${indexed("d")}
                       WHERE d.subscription_id = s.id AND d.status = 'pending' AND d.next_attempt_at <= ? AND (d.locked_until IS NULL OR d.locked_until <= ?)
                       ORDER BY d.next_attempt_at LIMIT 1) AS due_at
         FROM webhook_subscriptions s WHERE s.status = 'active' AND s.paused_at IS NULL ${skipClause})
       SELECT id, max_rate, held FROM due s WHERE due_at IS NOT NULL AND (NOT held OR ${pingDueFirst(indexed("p"), "s.due_at")}) ORDER BY due_at, id`,
    [...heldParameters(now), now, now, ...skip, now],
  );
  return rows.map((row) => ({ ...row, held: Boolean(row.held) }));
}

/**
 * ClaimTimes are the moments a claim compares with: a delivery is due once its due time is at most
 * `dueBy`, and unleased once its lease ended at `now` or before. They differ only for instances
 * sharing a database (see DeliveryLoop.now).
 */
export interface ClaimTimes {
  dueBy: number;
  now: number;
}

/**
 * findDueDeliveriesOf returns up to `limit` due, unleased deliveries of one subscription, oldest
 * due first, other than those `skip` names (the claiming process's attempts still open), only test
 * pings when `pingsOnly` (its receiver holds it). On PostgreSQL it locks them and skips those
 * another transaction holds, so two instances claiming at once never take the same delivery.
 */
export function findDueDeliveriesOf(db: Db, subscriptionId: string, at: ClaimTimes, limit: number, skip: readonly string[] = [], pingsOnly = false): Promise<DueDelivery[]> {
  const postgres = db.dialect === "postgres";
  // SQLite: INDEXED BY pins the index of due deliveries per subscription (PostgreSQL has no such hint).
  const deliveries = postgres ? "webhook_deliveries d" : "webhook_deliveries d INDEXED BY webhook_deliveries_due_by_subscription";
  const skipClause = skip.length ? ` AND d.id NOT IN (${placeholders(skip.length)})` : "";
  return db.all<DueDelivery>(
      `${selectDue(deliveries)}
       WHERE d.subscription_id = ? AND d.status = 'pending' AND d.next_attempt_at <= ? AND (d.locked_until IS NULL OR d.locked_until <= ?)${skipClause}${pingsOnly ? " AND d.event_type = 'webhook.ping'" : ""}
       ORDER BY d.next_attempt_at, d.id LIMIT ?${postgres ? " FOR UPDATE OF d SKIP LOCKED" : ""}`,
    [subscriptionId, at.dueBy, at.now, ...skip, limit],
  );
}

/** findEarliestPendingDueTime returns when the subscription's earliest pending delivery is due, leased or not; null when none is pending. */
export async function findEarliestPendingDueTime(db: Db, subscriptionId: string): Promise<number | null> {
  const deliveries = deliveriesIndexedBy(db, "webhook_deliveries_due_by_subscription");
  const row = await db.get<{ due: number | null }>(`SELECT min(next_attempt_at) AS due FROM ${deliveries} WHERE subscription_id = ? AND status = 'pending'`, [subscriptionId]);
  return row?.due ?? null;
}

/** SharedClaimSubscription is a subscription with due deliveries, locked for one claim, with what its caps need. */
export interface SharedClaimSubscription extends ClaimSubscription {
  /** its deliveries leased now by any instance */
  leased: number;
  /** with a max_rate: the earliest time its next attempt may be sent (0 when none was ever sent) */
  next_send_at: number;
}

/**
 * lockSubscriptionsWithDueDeliveries (PostgreSQL: several instances) locks the active, unpaused
 * subscriptions that have a due delivery not leased, oldest due first (one its receiver holds only
 * while a test ping is due first), skipping those another instance is claiming for right now, and
 * returns them with their leases and pacing. Until the
 * transaction ends no other instance claims for them, so the counts read here stay true while the
 * claim adds to them. The counts are read by statements after the lock, which see what an
 * instance that held it before has committed. `FOR NO KEY UPDATE` leaves the row's key alone, so
 * writes referring to the subscription are not held up.
 */
export async function lockSubscriptionsWithDueDeliveries(db: Db, at: ClaimTimes): Promise<SharedClaimSubscription[]> {
  const locked = await db.all<ClaimSubscription>(
    `SELECT s.id, s.max_rate, ${heldClause} AS held FROM webhook_subscriptions s
     CROSS JOIN LATERAL (SELECT d.next_attempt_at FROM webhook_deliveries d
                         WHERE d.subscription_id = s.id AND d.status = 'pending' AND d.next_attempt_at <= ? AND (d.locked_until IS NULL OR d.locked_until <= ?)
                         ORDER BY d.next_attempt_at LIMIT 1) due
     WHERE s.status = 'active' AND s.paused_at IS NULL AND (NOT ${heldClause} OR ${pingDueFirst("webhook_deliveries p", "due.next_attempt_at")})
     ORDER BY due.next_attempt_at, s.id
     FOR NO KEY UPDATE OF s SKIP LOCKED`,
    [...heldParameters(at.now), at.dueBy, at.now, ...heldParameters(at.now), at.now],
  );
  if (locked.length === 0) return [];
  const leased = await countLeases(db, locked.map((s) => s.id), at.now);
  const paced = locked.filter((s) => s.max_rate !== null).map((s) => s.id);
  const pacing = paced.length
    ? await db.all<{ subscription_id: string; next_send_at: number }>(`SELECT subscription_id, next_send_at FROM webhook_send_pacing WHERE subscription_id IN (${placeholders(paced.length)})`, paced)
    : [];
  const nextSend = new Map(pacing.map((p) => [p.subscription_id, p.next_send_at]));
  return locked.map((s) => ({ ...s, leased: leased.get(s.id) ?? 0, next_send_at: nextSend.get(s.id) ?? 0 }));
}

/**
 * findDeletedSubscriptions returns those of `ids` that name no subscription any more: deleted
 * ones (an id is never given again).
 */
export async function findDeletedSubscriptions(db: Db, ids: readonly string[]): Promise<string[]> {
  const kept = await db.all<{ id: string }>(`SELECT id FROM webhook_subscriptions WHERE id IN (${placeholders(ids.length)})`, ids);
  const existing = new Set(kept.map((row) => row.id));
  return ids.filter((id) => !existing.has(id));
}

/**
 * countLeases counts the unexpired leases of each subscription named, by every instance: its
 * attempts under way. Whatever the delivery's status: a manual attempt of a finished delivery is
 * a request open at the receiver too.
 */
export async function countLeases(db: Db, subscriptionIds: string[], now: number): Promise<Map<string, number>> {
  const leases = await db.all<{ subscription_id: string; n: number }>(
    `SELECT subscription_id, count(*) AS n FROM ${deliveriesIndexedBy(db, "webhook_deliveries_leased")}
     WHERE locked_until IS NOT NULL AND locked_until > ? AND subscription_id IN (${placeholders(subscriptionIds.length)}) GROUP BY subscription_id`,
    [now, ...subscriptionIds],
  );
  return new Map(leases.map((l) => [l.subscription_id, l.n]));
}

/**
 * holdSendPacing (PostgreSQL) sets the earliest next send of a subscription with a max_rate; a
 * claim holds it at its lease's end until the attempt is sent, then setSendPacing moves it.
 */
export async function holdSendPacing(db: Db, subscriptionId: string, until: number): Promise<void> {
  await db.run(
    `INSERT INTO webhook_send_pacing (subscription_id, next_send_at) VALUES (?, ?)
     ON CONFLICT (subscription_id) DO UPDATE SET next_send_at = excluded.next_send_at`,
    [subscriptionId, until],
  );
}

/** setSendPacing (PostgreSQL) sets when the next attempt of a subscription with a max_rate may be sent, once this one was. */
export async function setSendPacing(db: Db, subscriptionId: string, nextSendAt: number): Promise<void> {
  await db.run("UPDATE webhook_send_pacing SET next_send_at = ? WHERE subscription_id = ?", [nextSendAt, subscriptionId]);
}

/**
 * findDeliveryToSend returns a delivery with what an attempt needs, whatever its status, or null.
 * On PostgreSQL it locks the delivery for the transaction, so a claim by another instance either
 * waits for it or is seen by it.
 */
export function findDeliveryToSend(db: Db, id: string): Promise<DueDelivery | null> {
  return db.get<DueDelivery>(`${selectDue("webhook_deliveries d")} WHERE d.id = ?${db.dialect === "postgres" ? " FOR UPDATE OF d" : ""}`, [id]);
}

/**
 * readDatabaseClock (PostgreSQL) reads the database server's clock, in milliseconds since the epoch:
 * the one clock that instances sharing the database all see.
 */
export async function readDatabaseClock(db: Db): Promise<number> {
  return (await db.get<{ now: number }>("SELECT CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS bigint) AS now"))!.now;
}

/** leaseDeliveries marks deliveries as being attempted until the lease expires. */
export async function leaseDeliveries(db: Db, ids: string[], until: number): Promise<void> {
  if (ids.length === 0) return;
  await db.run(`UPDATE webhook_deliveries SET locked_until = ? WHERE id IN (${placeholders(ids.length)})`, [until, ...ids]);
}

/**
 * releaseLeases frees deliveries whose attempt was abandoned, so they are due again at once; a
 * delivery whose lease is no longer the one given (it ran out and was claimed again) is left to its holder.
 */
export async function releaseLeases(db: Db, leases: readonly Pick<DueDelivery, "id" | "locked_until">[]): Promise<void> {
  for (const lease of leases) await db.run("UPDATE webhook_deliveries SET locked_until = NULL WHERE id = ? AND locked_until = ?", [lease.id, lease.locked_until]);
}

/** headerSetId returns the id of a stored header set, storing it the first time it is seen. */
async function headerSetId(db: Db, headers: Record<string, string>): Promise<number> {
  const text = JSON.stringify(headers);
  const found = await db.get<{ id: number }>("SELECT id FROM webhook_header_sets WHERE headers = ?", [text]);
  return found ? found.id : (await db.get<{ id: number }>("INSERT INTO webhook_header_sets (headers) VALUES (?) RETURNING id", [text]))!.id;
}

/**
 * insertAttempt records one attempt. Its header sets are stored once for all the attempts that
 * share them; of the request headers only the signature is the attempt's own (findAttemptsByDelivery
 * derives webhook-id and webhook-timestamp).
 */
export async function insertAttempt(db: Db, row: NewAttempt): Promise<void> {
  const { "webhook-id": _id, "webhook-timestamp": _timestamp, "webhook-signature": signature, ...shared } = row.request_headers;
  const requestHeaderSet = await headerSetId(db, shared);
  const responseHeaderSet = await headerSetId(db, row.response_headers);
  await db.run(
    `INSERT INTO webhook_delivery_attempts (delivery_id, attempt, triggered_by, started_at, duration_ms, request_header_set, signature, response_status, response_header_set, response_body, error)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    [row.delivery_id, row.attempt, row.triggered_by, row.started_at, row.duration_ms, requestHeaderSet, signature ?? "", row.response_status, responseHeaderSet, row.response_body, row.error],
  );
}

/** HistorySize is what the delivery history holds: rows, and bytes of database pages. */
export interface HistorySize {
  deliveries: number;
  attempts: number;
  /** pages of the history's tables and indexes (deliveries, attempts, header sets), in bytes */
  bytes: number;
}

/** measureDeliveryHistory counts the history's rows and the database pages its tables and indexes hold. */
export async function measureDeliveryHistory(db: Db): Promise<HistorySize> {
  if (db.dialect === "postgres") {
    // The rows' own bytes: a table's files (pg_total_relation_size) keep deleted rows' space until
    // VACUUM and seldom shrink after it, so the size budget would prune the whole history.
    return (await db.get<HistorySize>(
      `SELECT (SELECT count(*) FROM webhook_deliveries) AS deliveries,
         (SELECT count(*) FROM webhook_delivery_attempts) AS attempts,
         CAST((SELECT coalesce(sum(pg_column_size(d.*)), 0) FROM webhook_deliveries d)
           + (SELECT coalesce(sum(pg_column_size(a.*)), 0) FROM webhook_delivery_attempts a)
           + (SELECT coalesce(sum(pg_column_size(h.*)), 0) FROM webhook_header_sets h) AS bigint) AS bytes`,
    ))!;
  }
  // sqlite-only: dbstat and sqlite_schema measure the pages.
  return (await db.get<HistorySize>(
      `SELECT (SELECT count(*) FROM webhook_deliveries) AS deliveries,
         (SELECT count(*) FROM webhook_delivery_attempts) AS attempts,
         (SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE aggregate = 1 AND name IN (
            SELECT name FROM sqlite_schema WHERE tbl_name IN ('webhook_deliveries', 'webhook_delivery_attempts', 'webhook_header_sets'))) AS bytes`,
  ))!;
}

/**
 * deleteUnusedHeaderSetsAfter forgets, of the `limit` header sets after id `after`, those no attempt
 * refers to any more (after pruning), each checked by two index probes; it returns the last id it
 * looked at, or null when none was left after `after`.
 */
export async function deleteUnusedHeaderSetsAfter(db: Db, after: number, limit: number): Promise<number | null> {
  // Number(): PostgreSQL answers max() of bigint as text.
  const found = (await db.get<{ id: number | string | null }>("SELECT max(id) AS id FROM (SELECT id FROM webhook_header_sets WHERE id > ? ORDER BY id LIMIT ?) AS w", [after, limit]))!.id;
  if (found === null) return null;
  const last = Number(found);
  await db.run(
    `DELETE FROM webhook_header_sets WHERE id > ? AND id <= ?
       AND NOT EXISTS (SELECT 1 FROM webhook_delivery_attempts a WHERE a.request_header_set = webhook_header_sets.id)
       AND NOT EXISTS (SELECT 1 FROM webhook_delivery_attempts a WHERE a.response_header_set = webhook_header_sets.id)`,
    [after, last],
  );
  return last;
}

/** countLateAttempt counts an attempt made under a lease that was lost, and changes nothing else of the delivery. */
export async function countLateAttempt(db: Db, id: string, attempts: number, now: number): Promise<void> {
  await db.run("UPDATE webhook_deliveries SET attempts = ?, updated_at = ? WHERE id = ?", [attempts, now, id]);
}

/** updateDeliveryAfterAttempt stores the outcome of an attempt and frees the lease. */
export async function updateDeliveryAfterAttempt(
  db: Db,
  row: Pick<DeliveryRow, "id" | "status" | "attempts" | "next_attempt_at" | "last_response_status" | "last_error" | "recovered_at" | "updated_at">,
): Promise<void> {
  await db.run(
    `UPDATE webhook_deliveries SET status = ?, attempts = ?, next_attempt_at = ?, locked_until = NULL,
       last_response_status = ?, last_error = ?, recovered_at = ?, updated_at = ? WHERE id = ?`,
    [row.status, row.attempts, row.next_attempt_at, row.last_response_status, row.last_error, row.recovered_at, row.updated_at, row.id],
  );
}

/** findNextWakeTime returns the earliest future moment a pending delivery becomes due, a lease expires or a receiver's hold ends. */
export async function findNextWakeTime(db: Db, now: number): Promise<number | null> {
  const due = (await db.get<{ t: number | null }>(`SELECT min(next_attempt_at) AS t FROM ${deliveriesIndexedBy(db, "webhook_deliveries_due")} WHERE status = 'pending' AND next_attempt_at > ?`, [now]))!.t;
  const lease = (await db.get<{ t: number | null }>(`SELECT min(locked_until) AS t FROM ${deliveriesIndexedBy(db, "webhook_deliveries_leased")} WHERE locked_until IS NOT NULL AND locked_until > ? AND status = 'pending'`, [now]))!.t;
  const hold = (await db.get<{ t: number | null }>(`SELECT min(held_until) AS t FROM webhook_subscriptions s WHERE s.status = 'active' AND ${heldClause}`, heldParameters(now)))!.t;
  const times = [due, lease, hold].filter((t) => t !== null);
  return times.length === 0 ? null : Math.min(...times);
}

/** countPendingDeliveries returns how many deliveries are pending and when the oldest was created. */
export async function countPendingDeliveries(db: Db): Promise<{ pending: number; oldest_created_at: number | null }> {
  return (await db.get<{ pending: number; oldest_created_at: number | null }>(
    "SELECT count(*) AS pending, min(created_at) AS oldest_created_at FROM webhook_deliveries WHERE status = 'pending' AND status <> 'succeeded'",
  ))!;
}

/**
 * countWaitingDeliveries counts the pending deliveries due by `now` that no unexpired lease holds,
 * of every active subscription not paused nor held by its receiver, whose wait is for a delivery
 * slot (or a max_rate's pace), not for a resume or the receiver's Retry-After. The due ones are
 * counted in the index of each subscription's due deliveries alone, less the leases, a few hundred at most.
 */
export async function countWaitingDeliveries(db: Db, now: number): Promise<number> {
  const subscriptions = `subscription_id IN (SELECT id FROM webhook_subscriptions s WHERE status = 'active' AND paused_at IS NULL AND NOT ${heldClause})`;
  const ids = heldParameters(now);
  const row = await db.get<{ due: number; leased: number }>(
    `SELECT (SELECT count(*) FROM ${deliveriesIndexedBy(db, "webhook_deliveries_due_by_subscription")} WHERE status = 'pending' AND next_attempt_at <= ? AND ${subscriptions}) AS due,
            (SELECT count(*) FROM ${deliveriesIndexedBy(db, "webhook_deliveries_leased")}
             WHERE locked_until IS NOT NULL AND locked_until > ? AND status = 'pending' AND next_attempt_at <= ? AND ${subscriptions}) AS leased`,
    [now, ...ids, now, now, ...ids],
  );
  return row!.due - row!.leased;
}

/**
 * countWaitingDeliveriesOf counts one subscription's pending deliveries due by `now` that no
 * unexpired lease holds, up to `upTo`: the limit ends the walk of its range of the index of due
 * deliveries, so a backlog of millions costs a stats request `upTo` rows (and the leases), not all of it.
 */
export async function countWaitingDeliveriesOf(db: Db, now: number, subscriptionId: string, upTo: number): Promise<number> {
  const row = await db.get<{ waiting: number }>(
    `SELECT count(*) AS waiting FROM (SELECT 1 FROM ${deliveriesIndexedBy(db, "webhook_deliveries_due_by_subscription")}
       WHERE subscription_id = ? AND status = 'pending' AND next_attempt_at <= ? AND (locked_until IS NULL OR locked_until <= ?) LIMIT ?) AS due`,
    [subscriptionId, now, now, upTo],
  );
  return Number(row!.waiting);
}

/** countDeliveriesBySubscription counts each subscription's deliveries created since a time, by status. */
export function countDeliveriesBySubscription(db: Db, since: number): Promise<{ subscription_id: string; succeeded: number; failed: number; pending: number }[]> {
  // Each count is one range of webhook_deliveries_subscription_status, read from the index alone;
  // a GROUP BY over the time range would sort every delivery of the day in a temporary b-tree.
  return db.all<{ subscription_id: string; succeeded: number; failed: number; pending: number }>(
    `SELECT s.id AS subscription_id,
       (SELECT count(*) FROM webhook_deliveries WHERE subscription_id = s.id AND status = 'succeeded' AND created_at >= ?) AS succeeded,
       (SELECT count(*) FROM webhook_deliveries WHERE subscription_id = s.id AND status = 'failed' AND created_at >= ?) AS failed,
       (SELECT count(*) FROM webhook_deliveries WHERE subscription_id = s.id AND status = 'pending' AND created_at >= ?) AS pending
     FROM webhook_subscriptions s`,
    [since, since, since],
  );
}

/** deleteFinishedDeliveriesBefore prunes up to `limit` finished deliveries (and their attempts) created before the cutoff. */
export function deleteFinishedDeliveriesBefore(db: Db, cutoff: number, limit: number): Promise<number> {
  return db.run(
    `DELETE FROM webhook_deliveries WHERE id IN (
       SELECT id FROM webhook_deliveries WHERE created_at < ? AND status != 'pending' ORDER BY created_at LIMIT ?)`,
    [cutoff, limit],
  );
}

/** deleteUnreferencedEventsBefore prunes up to `limit` events created before the cutoff that no delivery refers to. */
export function deleteUnreferencedEventsBefore(db: Db, cutoff: number, limit: number): Promise<number> {
  return db.run(
    `DELETE FROM events WHERE id IN (
       SELECT e.id FROM events e WHERE e.created_at < ?
         AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id) ORDER BY e.created_at LIMIT ?)`,
    [cutoff, limit],
  );
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
export function findAttemptStats(db: Db, subscriptionId: string, hour: number): Promise<AttemptStatsRow | null> {
  return db.get<AttemptStatsRow>("SELECT * FROM webhook_attempt_stats WHERE subscription_id = ? AND hour = ?", [subscriptionId, hour]);
}

/** writeAttemptStats stores (replaces) a subscription's statistics of one hour. */
export async function writeAttemptStats(db: Db, row: AttemptStatsRow): Promise<void> {
  await db.run(
    `INSERT INTO webhook_attempt_stats (subscription_id, hour, succeeded, failed, latency_buckets) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT (subscription_id, hour) DO UPDATE SET succeeded = excluded.succeeded, failed = excluded.failed, latency_buckets = excluded.latency_buckets`,
    [row.subscription_id, row.hour, row.succeeded, row.failed, row.latency_buckets],
  );
}

/** listAttemptStatsSince returns a subscription's hourly statistics from an hour on. */
export function listAttemptStatsSince(db: Db, subscriptionId: string, fromHour: number): Promise<AttemptStatsRow[]> {
  return db.all<AttemptStatsRow>("SELECT * FROM webhook_attempt_stats WHERE subscription_id = ? AND hour >= ? ORDER BY hour", [subscriptionId, fromHour]);
}

/** deleteAttemptStatsBefore prunes hourly statistics older than the cutoff, and those of subscriptions that no longer exist. */
export function deleteAttemptStatsBefore(db: Db, cutoff: number): Promise<number> {
  return db.run("DELETE FROM webhook_attempt_stats WHERE hour < ? OR subscription_id NOT IN (SELECT id FROM webhook_subscriptions)", [cutoff]);
}

// Reads of the operator console (issue 17): health by hour, failures by reason, events by subject.

/** DeliveryHourRow is how many deliveries of a subscription created in one hour have a status now. */
export type DeliveryHourRow = {
  subscription_id: string;
  /** Unix ms at the start of the hour */
  hour: number;
  status: DeliveryStatus;
  n: number;
}

/** listDeliveryHoursSince returns the hourly delivery counts of every existing subscription (or of one) from an hour on (migration 0015 keeps them). */
export function listDeliveryHoursSince(db: Db, fromHour: number, subscriptionId: string | null = null): Promise<DeliveryHourRow[]> {
  // IN (subquery) seeks the primary key once per subscription rather than reading every hour kept.
  const of = subscriptionId === null ? "IN (SELECT id FROM webhook_subscriptions)" : "= ?";
  const sql = `SELECT subscription_id, hour, status, n FROM webhook_delivery_hours WHERE subscription_id ${of} AND hour >= ?`;
  return db.all<DeliveryHourRow>(sql, [...(subscriptionId === null ? [] : [subscriptionId]), fromHour]);
}

/** listDeliveryDaysSince sums the hourly delivery counts of every existing subscription (or of one) into UTC days, from a day on. */
export function listDeliveryDaysSince(db: Db, fromDay: number, subscriptionId: string | null = null): Promise<DeliveryHourRow[]> {
  const of = subscriptionId === null ? "IN (SELECT id FROM webhook_subscriptions)" : "= ?";
  const sql = `SELECT subscription_id, hour - hour % 86400000 AS hour, status, sum(n) AS n FROM webhook_delivery_hours
    WHERE subscription_id ${of} AND hour >= ? GROUP BY subscription_id, hour - hour % 86400000, status`;
  return db.all<DeliveryHourRow>(sql, [...(subscriptionId === null ? [] : [subscriptionId]), fromDay]);
}

/**
 * sumDeliveryHours counts the deliveries of a kind, a subscription and/or a status created in the
 * whole hours from `fromHour` up to `untilHour` (each optional) from the hourly counts (a kind's
 * from its own, migration 0032), without reading the deliveries.
 */
export async function sumDeliveryHours(db: Db, filters: { eventType?: string; subscriptionId?: string; status?: string; fromHour?: number; untilHour?: number }): Promise<number> {
  const where: string[] = [];
  const params: (string | number)[] = [];
  if (filters.eventType !== undefined) where.push("event_type = ?") && params.push(filters.eventType);
  if (filters.subscriptionId !== undefined) where.push("subscription_id = ?") && params.push(filters.subscriptionId);
  if (filters.status !== undefined) where.push("status = ?") && params.push(filters.status);
  if (filters.fromHour !== undefined) where.push("hour >= ?") && params.push(filters.fromHour);
  if (filters.untilHour !== undefined) where.push("hour < ?") && params.push(filters.untilHour);
  const sql = `SELECT coalesce(sum(n), 0) AS n FROM ${filters.eventType === undefined ? "webhook_delivery_hours" : "webhook_delivery_kind_hours"} ${where.length ? `WHERE ${where.join(" AND ")}` : ""}`;
  return Number((await db.get<{ n: number }>(sql, params))!.n);
}

/** listAttemptStatsFrom returns the hourly attempt statistics of every existing subscription (or of one) from an hour on, in one query. */
export function listAttemptStatsFrom(db: Db, fromHour: number, subscriptionId: string | null = null): Promise<AttemptStatsRow[]> {
  const of = subscriptionId === null ? "IN (SELECT id FROM webhook_subscriptions)" : "= ?";
  const sql = `SELECT * FROM webhook_attempt_stats WHERE subscription_id ${of} AND hour >= ?`;
  return db.all<AttemptStatsRow>(sql, [...(subscriptionId === null ? [] : [subscriptionId]), fromHour]);
}

/** FailureReasonRow is a group of a subscription's failing deliveries with the same last answer: a status code, or a network error. */
export type FailureReasonRow = {
  last_response_status: number | null;
  last_error: string | null;
  deliveries: number;
  /** when a delivery of the group last changed, at its failed attempt (updated_at), and which one: the reason last met */
  latest_at: number;
  latest_id: string;
}

/**
 * listFailureReasons groups a subscription's deliveries created since a time whose last attempt
 * failed (failed, or pending with attempts), by reason, most frequent first, then last met first:
 * each group with the delivery that failed last (by id within a millisecond). A backlog made
 * yesterday may be failing now, so when its newest delivery was made says nothing of that.
 */
export function listFailureReasons(db: Db, subscriptionId: string, since: number, limit: number): Promise<FailureReasonRow[]> {
  return db.all<FailureReasonRow>(
    `SELECT last_response_status, last_error, deliveries, updated_at AS latest_at, id AS latest_id FROM (
       SELECT last_response_status, last_error, updated_at, id,
         count(*) OVER reason AS deliveries,
         row_number() OVER (reason ORDER BY updated_at DESC, id DESC) AS place
       FROM webhook_deliveries
       WHERE subscription_id = ? AND status IN ('failed', 'pending') AND created_at >= ? AND attempts > 0
       WINDOW reason AS (PARTITION BY last_response_status, last_error)
     ) AS failing
     WHERE place = 1 ORDER BY deliveries DESC, latest_at DESC, latest_id DESC LIMIT ?`,
    [subscriptionId, since, limit],
  );
}

/** StoredEvent is an event as read back: with when its payload was erased (null: never) and who erased it (storedMaker; null: never, or before migration 0052). */
export type StoredEvent = EventRow & { erased_at: number | null; erased_by: string | null };

/** findEventById returns one event, or null. */
export function findEventById(db: Db, id: string): Promise<StoredEvent | null> {
  return db.get<StoredEvent>("SELECT id, type, payload, request_id, token_id, made_by, erased_at, erased_by, created_at FROM events WHERE id = ?", [id]);
}

/** listEventsAbout returns the latest events about one contact or account (the id in their data), newest first. */
export function listEventsAbout(db: Db, subjectId: string, limit: number): Promise<StoredEvent[]> {
  return db.all<StoredEvent>("SELECT id, type, payload, request_id, token_id, made_by, erased_at, erased_by, created_at FROM events WHERE subject_id = ? ORDER BY created_at DESC, id DESC LIMIT ?", [subjectId, limit]);
}

/** hasEventsAbout tells whether any event is about a contact or account (the id in its data). */
export async function hasEventsAbout(db: Db, subjectId: string): Promise<boolean> {
  return (await db.get<{ one: number }>("SELECT 1 AS one FROM events WHERE subject_id = ? LIMIT 1", [subjectId])) !== null;
}

/**
 * eraseEventsAbout replaces the payloads of at most `limit` not yet erased events of the given
 * kinds about one record (the id in their data), oldest first, with a marker holding only the
 * event's type, its id and the record's id (kept so that the subject index, migration 0015, still
 * finds them), marks them erased at `now` by `by`, and returns their ids.
 */
export async function eraseEventsAbout(db: Db, subjectId: string, types: readonly string[], now: number, by: ChangeMaker | null, limit: number): Promise<string[]> {
  // Built in SQL so the marker's text never passes through a parse of the payload it replaces.
  const marker =
    db.dialect === "postgres"
      ? "CAST(json_build_object('type', type, 'event_id', id, 'data', json_build_object('id', CAST(? AS text))) AS text)"
      : "json_object('type', type, 'event_id', id, 'data', json_object('id', ?))";
  const rows = await db.all<{ id: string }>(
    `UPDATE events SET payload = ${marker}, erased_at = ?, erased_by = ?
     WHERE id IN (SELECT id FROM events WHERE subject_id = ? AND type IN (${placeholders(types.length)}) AND erased_at IS NULL ORDER BY created_at, id LIMIT ?)
     RETURNING id`,
    [subjectId, now, storedMaker(by), subjectId, ...types, limit],
  );
  return rows.map((row) => row.id);
}

/** failPendingDeliveriesOfEvents ends the pending deliveries of the given events with the given reason, their leases too, and returns how many. */
export async function failPendingDeliveriesOfEvents(db: Db, eventIds: readonly string[], reason: string, now: number): Promise<number> {
  if (eventIds.length === 0) return 0;
  return db.run(
    `UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL, last_error = ?, updated_at = ?
     WHERE event_id IN (${placeholders(eventIds.length)}) AND status = 'pending'`,
    [reason, now, ...eventIds],
  );
}

/** QUOTES_LOCATION tells whether an error (the column named) is a redirect's as versions before session 35 wrote it, quoting the Location: "redirect to URL not followed; ...". */
const QUOTES_LOCATION = (column: string) => `substr(${column}, 1, 12) = 'redirect to '`;

/**
 * eraseAttemptsOfEvents drops from the attempts of the given events' deliveries what tells of their
 * record: what the receivers answered (each response body, and its headers: the empty header set),
 * what was sent beside the payload (its signature, an HMAC that confirms a guessed payload to whoever
 * holds the secret, and the request headers: the empty set), and the Location an error written
 * before session 35 quoted (reworded as redirectError words it, in the deliveries' last_error too).
 * It forgets the header sets no attempt refers to any more.
 */
export async function eraseAttemptsOfEvents(db: Db, eventIds: readonly string[]): Promise<void> {
  if (eventIds.length === 0) return;
  const events = placeholders(eventIds.length);
  const ofEvents = `delivery_id IN (SELECT id FROM webhook_deliveries WHERE event_id IN (${events}))`;
  const quoting = await db.all<{ delivery_id: string; attempt: number; response_status: number }>(
    `SELECT delivery_id, attempt, response_status FROM webhook_delivery_attempts WHERE ${ofEvents} AND ${QUOTES_LOCATION("error")}`,
    eventIds,
  );
  for (const row of quoting) {
    await db.run("UPDATE webhook_delivery_attempts SET error = ? WHERE delivery_id = ? AND attempt = ?", [redirectError(row.response_status, true), row.delivery_id, row.attempt]);
  }
  const lastQuoting = await db.all<{ id: string; last_response_status: number }>(
    `SELECT id, last_response_status FROM webhook_deliveries WHERE event_id IN (${events}) AND ${QUOTES_LOCATION("last_error")}`,
    eventIds,
  );
  for (const row of lastQuoting) await db.run("UPDATE webhook_deliveries SET last_error = ? WHERE id = ?", [redirectError(row.last_response_status, true), row.id]);
  // Number(): PostgreSQL answers a bigint as text.
  const sets = (
    await db.all<{ id: number | string }>(
      `SELECT response_header_set AS id FROM webhook_delivery_attempts WHERE ${ofEvents} UNION SELECT request_header_set AS id FROM webhook_delivery_attempts WHERE ${ofEvents}`,
      [...eventIds, ...eventIds],
    )
  ).map((row) => Number(row.id));
  if (sets.length === 0) return;
  const none = await headerSetId(db, {});
  await db.run(`UPDATE webhook_delivery_attempts SET signature = '', request_header_set = ?, response_body = NULL, response_header_set = ? WHERE ${ofEvents}`, [none, none, ...eventIds]);
  const unused = sets.filter((id) => id !== none);
  if (unused.length === 0) return;
  await db.run(
    `DELETE FROM webhook_header_sets WHERE id IN (${placeholders(unused.length)})
       AND NOT EXISTS (SELECT 1 FROM webhook_delivery_attempts a WHERE a.request_header_set = webhook_header_sets.id)
       AND NOT EXISTS (SELECT 1 FROM webhook_delivery_attempts a WHERE a.response_header_set = webhook_header_sets.id)`,
    unused,
  );
}

/** listDeliveriesOfEvents returns every delivery of the given events, oldest first. */
export async function listDeliveriesOfEvents(db: Db, eventIds: readonly string[]): Promise<DeliveryRow[]> {
  if (eventIds.length === 0) return [];
  return db.all<DeliveryRow>(`SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d WHERE d.event_id IN (${placeholders(eventIds.length)}) ORDER BY d.created_at, d.id`, eventIds);
}

/** listEventSubjects returns what each of the given events is about (the id in its data), for those that name one. */
export async function listEventSubjects(db: Db, eventIds: readonly string[]): Promise<{ id: string; subject_id: string }[]> {
  if (eventIds.length === 0) return [];
  return db.all<{ id: string; subject_id: string }>(`SELECT id, subject_id FROM events WHERE id IN (${placeholders(eventIds.length)}) AND subject_id IS NOT NULL`, eventIds);
}
