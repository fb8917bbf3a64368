import { checkMakerStands } from "../auth/service.ts";
import { writeInSteps, type Database, type Db } from "../db/sql.ts";
import { randomBytes } from "node:crypto";
import { listMeta, pageRows, pageWindow, parseListQuery, parseTimestampFilter, readListPage, type CursorPosition, type ListMeta } from "../http/list-query.ts";
import { notFound, ProblemError, validationProblem } from "../shared/problem.ts";
import { keepIdempotentResponse, keptProgress, saveIdempotentProgress, saveIdempotentResponse, type IdempotencyScope } from "../idempotency/service.ts";
import { DEFAULT_SECRET_GRACE_HOURS, MAX_ATTEMPTS_SHOWN, MAX_RECOVERY_DAYS, MAX_SUBSCRIPTIONS, RECOVERY_GRACE_MS } from "../limits/limits.ts";
import type { Runtime } from "../runtime.ts";
import { newId } from "../shared/ids.ts";
import { changeMakerOf, commandOrigin, madeByColumns, makerKind, storedMaker, type ChangeMaker, type ChangeOrigin, type MadeBy } from "../shared/made-by.ts";
import { HOUR_MS, hourOf, LATEST_TIMESTAMP_MS, parseTimestamp, timestampRefusal, toOptionalTimestamp, toTimestamp } from "../shared/time.ts";
import {
  DELIVERY_FILTERS,
  EVENT_CATALOGUE,
  SUBSCRIPTION_FILTERS,
  WEBHOOK_EVENT_TYPES,
  type Attempt,
  type Delivery,
  type DeliveryDetail,
  type EventTypeInfo,
  type Recovery,
  type RecoveryInput,
  type SecretRotationInput,
  type Subscription,
  type SubscriptionInput,
  type SubscriptionStats,
  type SubscriptionUpdate,
  type SubscriptionWithSecret,
} from "./model.ts";
import { SECRET_PREFIX } from "./delivery.ts";
import { findStoredKey, hasSecretsKey, isDatabaseSecretsKey, isSealed, maskStoredSecret, isKeyReplaced, recordReplacedSecretsKey, sealInWrite, secretsKeyReplaced, SecretUnreadable, type SecretBox } from "./secrets.ts";
import { subscriptionStats } from "./stats.ts";
import { recordPing } from "./outbox.ts";
import { disableWithEvent, failStoppedDeliveries, MAKER_REMOVED_REASON, NO_OPEN_ATTEMPTS, type OpenAttempts } from "./health.ts";
import {
  countDeliveries,
  countFailedDeliveriesBetween,
  findEventById,
  listDeliveriesOfEvents,
  listEventsAbout,
  listEventSubjects,
  sumDeliveryHours,
  type DeliveryFilters,
  type StoredEvent,
  countDeliveriesBySubscription,
  countPendingDeliveries,
  countWaitingDeliveries,
  countSubscriptions,
  deleteSecretAnswers,
  deleteSubscription as deleteSubscriptionRow,
  enableSubscription as enableSubscriptionRow,
  endSecretGrace,
  findAttemptsByDelivery,
  findDeliveryById,
  findSubscriptionById,
  insertSubscription,
  listDeliveries,
  listEverySubscription,
  listSealedSecretAnswers,
  listSubscriptions,
  listSubscriptionsMadeBy,
  replaceAnswerSecret,
  replaceLostSecret,
  requeueFailedDeliveries,
  resealSubscriptionSecrets,
  type RecoveryPosition,
  rotateSubscriptionSecret,
  setSubscriptionPaused,
  shownStatus,
  updateSubscriptionSettings,
  type AttemptRow,
  type DeliveryRow,
  type SubscriptionRow,
} from "./store.ts";
import { checkTargetUrl, resolveTarget, TargetRefused } from "./targets.ts";
import { MAX_MANUAL_ATTEMPTS, MAX_PER_SUBSCRIPTION, type AttemptRefusal } from "./worker.ts";

/** toSubscription renders a subscription row with its secret masked. */
export function toSubscription(row: SubscriptionRow): Subscription {
  return {
    id: row.id,
    target_url: row.target_url,
    description: row.description,
    events: JSON.parse(row.events) as string[],
    status: shownStatus(row),
    disabled_at: toOptionalTimestamp(row.disabled_at),
    disabled_reason: row.disabled_reason,
    disabled_by: makerKind(changeMakerOf(row.disabled_by)),
    paused_at: toOptionalTimestamp(row.paused_at),
    paused_by: makerKind(changeMakerOf(row.paused_by)),
    max_rate: row.max_rate,
    failing_since: toOptionalTimestamp(row.failing_since),
    // A hold that has passed is left stored (the next one replaces it): it holds nothing.
    held_until: row.held_until !== null && row.held_until > Date.now() ? toTimestamp(row.held_until) : null,
    secret: maskStoredSecret(row.secret),
    secret_rotated_at: toOptionalTimestamp(row.secret_rotated_at),
    previous_secret_expires_at: toOptionalTimestamp(row.previous_secret_expires_at),
    created_at: toTimestamp(row.created_at),
    updated_at: toTimestamp(row.updated_at),
  };
}

/** toDelivery renders a delivery row for the API. */
function toDelivery(row: DeliveryRow): Delivery {
  return {
    id: row.id,
    event_id: row.event_id,
    event_type: row.event_type,
    subscription_id: row.subscription_id,
    target_url: row.target_url,
    status: row.status,
    attempts: row.attempts,
    last_response_status: row.last_response_status,
    last_error: row.last_error,
    // An earlier version took retry delays of any size: a next attempt stored past Date's range is
    // as good as never, and reads as the latest instant a timestamp writes rather than failing the list.
    // A test ping is stored due just before the subscription's earliest pending delivery, its place
    // ahead of them in the claim order (recordPing): it is due from its creation, not before.
    next_attempt_at: row.status === "pending" && row.next_attempt_at !== null ? toTimestamp(Math.min(Math.max(row.next_attempt_at, row.created_at), LATEST_TIMESTAMP_MS)) : null,
    request_id: row.request_id,
    created_at: toTimestamp(row.created_at),
    updated_at: toTimestamp(row.updated_at),
  };
}

/** toAttempt shows an attempt; of an erased event (`erased`), without the request headers, which an erasure dropped (eraseAttemptsOfEvents). */
function toAttempt(row: AttemptRow, erased: boolean): Attempt {
  return {
    attempt: row.attempt,
    trigger: row.triggered_by,
    started_at: toTimestamp(row.started_at),
    duration_ms: row.duration_ms,
    request_headers: erased ? null : (JSON.parse(row.request_headers) as Record<string, string>),
    response_status: row.response_status,
    response_headers: JSON.parse(row.response_headers) as Record<string, string>,
    response_body: row.response_body,
    error: row.error,
  };
}

/** newSecret makes a Standard Webhooks signing secret: whsec_ and 32 random bytes in base64. */
function newSecret(): string {
  return `${SECRET_PREFIX}${randomBytes(32).toString("base64")}`;
}

/**
 * checkSubscriptionTarget throws 422 for a target the URL rules refuse, or whose host resolves to a
 * non-public address --allow-private-targets does not allow. It runs before the write that stores the
 * subscription, as its address lookup may take a while: up to the delivery timeout, as an attempt's
 * does, past which the name is refused as unresolved (its name server may never answer). A name
 * refused for its address is logged with that address and `requestId`: the answer names only its kind.
 */
export async function checkSubscriptionTarget(rt: Runtime, targetUrl: string, requestId: string): Promise<void> {
  const urlError = checkTargetUrl(targetUrl);
  if (urlError) throw validationProblem([{ pointer: "/target_url", detail: urlError }]);
  // Every address allowed, the name need not be looked up (it may resolve only where the receiver runs).
  if (rt.config.allowPrivateTargets === true) return;
  const hostname = new URL(targetUrl).hostname;
  const deadline = AbortSignal.timeout(rt.config.deliveryTimeoutMs);
  try {
    await resolveTarget(hostname, rt.network.resolve, rt.config.allowPrivateTargets, deadline);
  } catch (error) {
    if (error instanceof TargetRefused && error.address !== null) {
      // The answer names only the kind of address (any token holder reads it); the operator learns which.
      rt.log.warn("webhook target refused: its name resolves to a non-public address", { request_id: requestId, target_host: hostname, address: error.address });
    }
    const refusal = error instanceof TargetRefused ? error.message : deadline.aborted ? `host ${hostname} could not be resolved (no answer within ${rt.config.deliveryTimeoutMs} ms)` : null;
    if (refusal) throw validationProblem([{ pointer: "/target_url", detail: refusal }], "The target URL is not allowed.");
    throw error;
  }
}

/**
 * createSubscription checks the target (checkSubscriptionTarget) and stores the subscription with
 * a new secret, who made it and the idempotent response in one commit. The secret appears in full
 * only in this response; the database holds it sealed, in the subscription and in the response kept for replays.
 */
export async function createSubscription(rt: Runtime, input: SubscriptionInput, madeBy: MadeBy, idempotency: IdempotencyScope | null, requestId: string): Promise<{ status: number; body: { data: SubscriptionWithSecret } }> {
  await checkSubscriptionTarget(rt, input.target_url, requestId);
  return rt.db.write((tx) => addSubscription(rt, tx, input, madeBy, idempotency));
}

/** addSubscription stores a subscription whose target was checked, with a new secret and who made it, inside the caller's write; past the cap it throws 422, and MakerGone when its maker was removed or revoked since the request began (checkMakerStands). */
export async function addSubscription(rt: Runtime, tx: Db, input: SubscriptionInput, madeBy: MadeBy, idempotency: IdempotencyScope | null): Promise<{ status: number; body: { data: SubscriptionWithSecret } }> {
  await checkMakerStands(tx, madeBy);
  // Counted inside the write, so concurrent creates cannot pass the cap together.
  if (await countSubscriptions(tx, undefined) >= MAX_SUBSCRIPTIONS) {
    throw validationProblem([{ pointer: "", detail: `the service already has ${MAX_SUBSCRIPTIONS} webhook subscriptions, the limit; delete one first` }], "Too many webhook subscriptions.");
  }
  const secret = newSecret();
  const now = Date.now();
  const id = newId("sub", now);
  const row = newSubscriptionRow(id, input, await sealInWrite(tx, rt.secrets, id, secret), madeBy, now);
  await insertSubscription(tx, row, input.events);
  return answerWithSecret(tx, row, secret, 201, idempotency, now);
}

/** newSubscriptionRow is the row of a subscription `madeBy` created at `now`: active, with one sealed secret and nothing rotated, paused or failing yet. */
export function newSubscriptionRow(id: string, input: SubscriptionInput, sealedSecret: string, madeBy: MadeBy, now: number): SubscriptionRow {
  return {
    id,
    target_url: input.target_url,
    description: input.description ?? null,
    events: JSON.stringify(input.events),
    secret: sealedSecret,
    previous_secret: null,
    previous_secret_expires_at: null,
    secret_rotated_at: null,
    secret_test_delivery_id: null,
    secret_lost_at: null,
    status: "active",
    disabled_at: null,
    disabled_reason: null,
    disabled_by: null,
    paused_at: null,
    paused_by: null,
    max_rate: input.max_rate ?? null,
    failing_since: null,
    held_until: null,
    created_at: now,
    updated_at: now,
    updated_by: storedMaker(madeBy),
    ...madeByColumns(madeBy),
  };
}

/**
 * answerWithSecret is the answer that shows a new secret in full (create, rotate-secret); the
 * response kept for an idempotent replay holds it sealed, as the subscription row does.
 */
async function answerWithSecret(db: Db, row: SubscriptionRow, secret: string, status: number, idempotency: IdempotencyScope | null, now: number) {
  const subscription = toSubscription(row);
  await saveIdempotentResponse(db, idempotency, status, { data: { ...subscription, secret: row.secret } }, now);
  return { status, body: { data: { ...subscription, secret } } };
}

/**
 * openReplayedSecret opens the sealed secret of a replayed create or rotate-secret response, so a
 * replay shows it in full like the first answer. One sealed with a key this server does not have
 * (kept by a start with another key) is refused with 410 replay-secret-lost: no retry can show it;
 * but on an instance left running with the key crm secrets-key rotate replaced, with 503
 * secrets-key-replaced: the instances with the new key show it.
 */
export async function openReplayedSecret(rt: Runtime, body: { data: SubscriptionWithSecret }): Promise<{ data: SubscriptionWithSecret }> {
  // A create answered before migration 0011 was kept with its secret in clear. 0011 seals such
  // answers too, but as applied by a crm before 2026-11-28 it sealed only the subscriptions: an
  // answer it left in clear replays, for the rest of its 24 hours, with that secret as it is.
  if (!isSealed(body.data.secret)) return body;
  const id = body.data.id;
  try {
    return { data: { ...body.data, secret: rt.secrets.open(id, body.data.secret) } };
  } catch (error) {
    if (!(error instanceof SecretUnreadable)) throw error;
    if (await isKeyReplaced(rt.db, rt.secrets)) {
      throw secretsKeyReplaced(
        "This instance still has the secrets key that crm secrets-key rotate replaced, which does not open the signing secret the answer kept for this Idempotency-Key shows, so it cannot show it. Send the request again to another instance, with the same key; the operator should restart this one with the new key file.",
      );
    }
    throw new ProblemError(
      410,
      "replay-secret-lost",
      `The answer kept for this Idempotency-Key shows the signing secret of webhook subscription ${id}, sealed with a secrets key this server does not have (the database was restored or reset without it), so it cannot be shown again. The subscription was created: rotate its secret for a new one, or delete it.`,
      undefined,
      {},
      { subscription_id: id },
    );
  }
}

/** listSubscriptionsPage answers GET /webhook-subscriptions: newest first, filter `event`. */
export async function listSubscriptionsPage(db: Database, secrets: SecretBox, query: Record<string, unknown>): Promise<{ data: Subscription[]; meta: ListMeta }> {
  const list = parseListQuery(query, { list: "webhook-subscriptions", sorts: ["created_at"], defaultSort: "created_at", defaultDirection: "desc", filters: SUBSCRIPTION_FILTERS, fixedOrder: true }, secrets);
  const eventType = query.event as string | undefined;
  const { read, total } = await readListPage(
    db,
    list,
    (source) => listSubscriptions(source, eventType, pageWindow(list)),
    (source) => countSubscriptions(source, eventType),
  );
  const meta = listMeta(list, total, read, (row: SubscriptionRow) => row.created_at);
  return { data: pageRows(list, read).map((row) => toSubscription(row)), meta };
}

/** listAllSubscriptions returns every subscription, newest first; there are at most MAX_SUBSCRIPTIONS. */
export async function listAllSubscriptions(db: Db): Promise<Subscription[]> {
  return (await listSubscriptions(db, undefined, { cursor: null, limit: MAX_SUBSCRIPTIONS, offset: 0 })).map((row) => toSubscription(row));
}

/** findSubscription returns one subscription with its secret masked, or null. */
export async function findSubscription(db: Db, id: string): Promise<Subscription | null> {
  const row = await findSubscriptionById(db, id);
  return row ? toSubscription(row) : null;
}

/** getSubscription returns one subscription with its secret masked, or throws 404. */
export async function getSubscription(db: Db, id: string): Promise<Subscription> {
  const subscription = await findSubscription(db, id);
  if (!subscription) throw notFound("webhook subscription", id);
  return subscription;
}

/** getSubscriptionStats returns a subscription's endpoint health over the last 24 hours and 7 days, or throws 404. */
export async function getSubscriptionStats(db: Db, id: string): Promise<SubscriptionStats> {
  const row = await findSubscriptionById(db, id);
  if (!row) throw notFound("webhook subscription", id);
  return subscriptionStats(db, row);
}

/**
 * deleteSubscription removes a subscription and fails its pending deliveries, so nothing more is
 * sent to it; 404 when there is none. Once the delete has committed it is done, whatever the
 * failing of the deliveries meets (subscriptionRemoved).
 */
export async function deleteSubscription(rt: Runtime, id: string): Promise<void> {
  await rt.db.write(async (tx) => {
    if (!(await deleteSubscriptionRow(tx, id))) throw notFound("webhook subscription", id);
  });
  await subscriptionRemoved(rt, id);
}

/**
 * subscriptionRemoved finishes a subscription's delete (deleteSubscriptionRow, which no claim then
 * takes its pending deliveries from) once its write has committed: it aborts the subscription's
 * attempts under way, here and (notified) on the other instances sharing the database, and fails
 * and counts its pending deliveries rt.batchRows per write (failStoppedDeliveries): one write of
 * 100,000 held SQLite's event loop for 2 to 3 s, PostgreSQL's write lock for 40 s. Sent again (a
 * replayed form) it finishes a delete a stopped process left unfinished. A refused write of those
 * is logged, not thrown: the delete stands, a retry would find nothing to delete, and the delivery
 * loop's sweep fails what is left.
 */
export async function subscriptionRemoved(rt: Runtime, id: string): Promise<void> {
  rt.deliveries.subscriptionDeleted(id);
  await failStoppedDeliveries(rt.db, id, rt.batchRows, rt.metrics.observePendingDeliveriesFailed, rt.deliveries.openAttemptsOf).catch((error: unknown) => rt.deliveries.unsentRefused(error));
}

/** DisabledWithMaker is a subscription disabled with the removal of the operator who made it, and how many of its pending deliveries that fails. */
export interface DisabledWithMaker {
  id: string;
  pending: number;
}

/**
 * disableSubscriptionsMadeBy disables, inside the caller's write (the operator's removal), every
 * active subscription operator `operatorId` made or that was created with an API token they made, each with
 * its disable and subscription.disabled event made by `origin` (the console's request, or `crm operator remove`), counting none of
 * the deliveries `openHere`; call subscriptionsDisabled with what it returns once the write has committed. Enable brings one back.
 */
export async function disableSubscriptionsMadeBy(tx: Db, operatorId: string, origin: ChangeOrigin, now: number, openHere: OpenAttempts): Promise<DisabledWithMaker[]> {
  const disabled: DisabledWithMaker[] = [];
  for (const row of await listSubscriptionsMadeBy(tx, operatorId)) {
    if (row.status !== "active") continue;
    const made = row.created_by === operatorId ? "it" : "the API token it was created with";
    // Named by no one: every API token reads the reason, and receivers outside get it in
    // subscription.disabled; the console's "Made by" says who, to operators only.
    const reason = `${MAKER_REMOVED_REASON} ${made} was removed from the console; enable it if it is still wanted`;
    disabled.push({ id: row.id, pending: await disableWithEvent(tx, row, reason, now, origin, openHere) });
  }
  return disabled;
}

/** subscriptionsDisabled fails, once the write that disabled them has committed, the pending deliveries of the subscriptions disableSubscriptionsMadeBy disabled, `chunk` per write, telling `failedUnsent` how many each write failed, leaving those `openHere` to their attempts; a refused write goes to `refused`, and is left to the delivery loop's sweep. */
export async function subscriptionsDisabled(db: Database, disabled: readonly DisabledWithMaker[], chunk: number, refused: (error: unknown) => void, failedUnsent: (count: number) => void, openHere: OpenAttempts): Promise<void> {
  for (const { id, pending } of disabled) {
    if (pending > 0) await failStoppedDeliveries(db, id, chunk, failedUnsent, openHere).catch(refused);
  }
}

/** NothingLost is why a secrets key reset refused: the key given is the database's own, or the database has none (no check value, no secret), so any key is. */
export type NothingLost = "own-key" | "no-key";

/** LOST_SECRET_REASON is the disabled_reason a secrets key reset gives every subscription: its secret went with the key, and no receiver knows the one it holds now. */
export const LOST_SECRET_REASON = "its signing secret was lost with the secrets key (crm secrets-key reset): rotate its secret, give the new one to its receiver, then enable it";

/** ResetSubscription is a subscription as a secrets key reset lists it, before the reset: what finds its receiver, its status, and how many of its deliveries are pending. */
export interface ResetSubscription {
  id: string;
  target_url: string;
  events: string[];
  description: string | null;
  status: "active" | "paused" | "disabled";
  pending: number;
}

/**
 * lostKeySubscriptions lists every subscription a secrets key reset changes, or returns why it
 * refuses (NothingLost) when `box` (null: no key) is the database's key: then nothing is lost.
 */
async function lostKeySubscriptions(db: Db, box: SecretBox | null): Promise<{ rows: SubscriptionRow[]; listed: ResetSubscription[] } | NothingLost> {
  const stored = await findStoredKey(db);
  if (isDatabaseSecretsKey(stored, box)) return hasSecretsKey(stored) ? "own-key" : "no-key";
  const rows = await listEverySubscription(db);
  const pending = new Map((await countDeliveriesBySubscription(db, 0)).map((counts) => [counts.subscription_id, counts.pending]));
  const listed = rows.map((row) => ({ id: row.id, target_url: row.target_url, events: JSON.parse(row.events) as string[], description: row.description, status: shownStatus(row), pending: pending.get(row.id) ?? 0 }));
  return { rows, listed };
}

/** previewSecretsKeyReset lists what resetSecretsKey would change with the key in `box` (null: none made yet), changing nothing, or returns why it would refuse. */
export async function previewSecretsKeyReset(db: Database, box: SecretBox | null): Promise<ResetSubscription[] | NothingLost> {
  const found = await db.read((tx) => lostKeySubscriptions(tx, box));
  return typeof found === "string" ? found : found.listed;
}

/**
 * resetSecretsKey makes the database take the key in `box` for a lost one, in one write. Every
 * subscription is kept, with its id, settings and history, but its secret (sealed with the lost
 * key) is replaced by a new random one sealed with `box`, which no receiver knows, so it is
 * disabled (LOST_SECRET_REASON) until its secret is rotated and it is enabled; its pending
 * deliveries are to end failed as a disable ends them (failResetDeliveries, once the key is kept).
 * The kept answers of creates and rotations go (their replays would open a secret sealed with the
 * lost key), and the database records `box`'s key as its own. It refuses, returning why
 * (NothingLost) and changing nothing, when `box` is the database's key. It returns the
 * subscriptions as they were before.
 */
export async function resetSecretsKey(db: Database, box: SecretBox): Promise<ResetSubscription[] | NothingLost> {
  return db.write(async (tx) => {
    const found = await lostKeySubscriptions(tx, box);
    if (typeof found === "string") return found;
    const now = Date.now();
    const { madeBy } = commandOrigin("secrets-key reset");
    for (const row of found.rows) {
      // No subscription.disabled event: every subscription that could hear of it is disabled too.
      const reason = row.status === "disabled" ? `${LOST_SECRET_REASON}; disabled before that: ${row.disabled_reason}` : LOST_SECRET_REASON;
      await replaceLostSecret(tx, row.id, box.seal(row.id, newSecret()), reason, now, madeBy);
    }
    await deleteSecretAnswers(tx);
    await recordReplacedSecretsKey(tx, box);
    return found.listed;
  });
}

/** KeyRotationRefusal is why a secrets key rotation changed nothing: the current key is not the database's, or the new one already is (a rotation committed before). */
export type KeyRotationRefusal = "not-own-key" | "already-rotated";

/** ResealedSecrets counts what a secrets key rotation sealed anew: subscriptions' signing secrets, the previous secrets of their rotations, and the secrets kept answers show. */
export interface ResealedSecrets {
  subscriptions: number;
  previous: number;
  answers: number;
}

/**
 * rotateSecretsKey seals anew with `next`'s key, in one write, every secret the database holds
 * sealed with `current`'s, the database's key: each subscription's signing secret and its
 * rotation's previous one (in its grace period or not), and the secret in each answer kept for
 * replaying a create or rotation; then records `next`'s key as the database's. Until that write
 * commits `current`'s key opens all of them, after it only `next`'s. A secret `current` does not
 * open stops it (SecretUnreadable), changing nothing. It refuses, returning why
 * (KeyRotationRefusal), when `current` is not the database's key or `next` already is.
 */
export async function rotateSecretsKey(db: Database, current: SecretBox, next: SecretBox): Promise<ResealedSecrets | KeyRotationRefusal> {
  return db.write(async (tx) => {
    const stored = await findStoredKey(tx);
    if (hasSecretsKey(stored) && isDatabaseSecretsKey(stored, next)) return "already-rotated";
    if (!isDatabaseSecretsKey(stored, current)) return "not-own-key";
    const reseal = (id: string, sealed: string) => next.seal(id, current.open(id, sealed));
    const resealed: ResealedSecrets = { subscriptions: 0, previous: 0, answers: 0 };
    for (const row of await listEverySubscription(tx)) {
      await resealSubscriptionSecrets(tx, row.id, reseal(row.id, row.secret), row.previous_secret === null ? null : reseal(row.id, row.previous_secret));
      resealed.subscriptions++;
      if (row.previous_secret !== null) resealed.previous++;
    }
    for (const answer of await listSealedSecretAnswers(tx)) {
      await replaceAnswerSecret(tx, answer, reseal(answer.subscription_id, answer.secret));
      resealed.answers++;
    }
    await recordReplacedSecretsKey(tx, next);
    return resealed;
  });
}

/**
 * failResetDeliveries fails the pending deliveries of the subscriptions a secrets key reset
 * disabled, `batchRows` per write (failStoppedDeliveries), for POST .../recover to send again under
 * their webhook-ids: nothing sends them once the reset committed. A refusal of one of those writes
 * leaves the rest to the delivery loop (failEveryStoppedDelivery), the reset staying done.
 */
export async function failResetDeliveries(db: Database, subscriptions: ResetSubscription[], batchRows: number): Promise<void> {
  // A command's process serves no /metrics: what it fails is counted by no instance's.
  const uncounted = () => undefined;
  for (const subscription of subscriptions) if (subscription.pending > 0) await failStoppedDeliveries(db, subscription.id, batchRows, uncounted, NO_OPEN_ATTEMPTS);
}

/**
 * enableSubscription makes a disabled subscription active again (events from now on are delivered
 * to it, at once: a hold its receiver asked for ends; deliveries failed while it was disabled stay
 * failed) and returns it. An active one is
 * returned unchanged. One whose secret was lost with the secrets key is refused (409
 * secret-rotation-required) until its secret is rotated: it would sign with one no receiver knows.
 * `by` is who enabled it (updated_by).
 */
export async function enableSubscription(rt: Runtime, id: string, idempotency: IdempotencyScope | null, by: ChangeMaker | null): Promise<Subscription> {
  // A disable whose process stopped before it had failed every pending delivery is finished first:
  // enabled, the subscription would send them.
  await failStoppedDeliveries(rt.db, id, rt.batchRows, rt.metrics.observePendingDeliveriesFailed, rt.deliveries.openAttemptsOf);
  const { subscription, enabled } = await rt.db.write(async (tx) => {
    const now = Date.now();
    const row = await findSubscriptionById(tx, id);
    if (!row) throw notFound("webhook subscription", id);
    if (row.secret_lost_at !== null) {
      throw new ProblemError(
        409,
        "secret-rotation-required",
        `The subscription ${id} stays disabled until its secret is rotated: its signing secret was lost with the secrets key (crm secrets-key reset), and the one it has now is known to no receiver. Rotate it (POST /public/v1/webhook-subscriptions/${id}/rotate-secret), give the new secret to its receiver, then enable it.`,
      );
    }
    const enabled = await enableSubscriptionRow(tx, id, now, by);
    const subscription = toSubscription((await findSubscriptionById(tx, id))!);
    await saveIdempotentResponse(tx, idempotency, 200, { data: subscription }, now);
    return { subscription, enabled };
  });
  if (enabled) rt.deliveries.subscriptionEnabled(id);
  return subscription;
}

/** updateSubscription applies a PATCH (the description, the rate cap), made `by` whom, and returns the subscription, or throws 404. */
export async function updateSubscription(rt: Runtime, id: string, input: SubscriptionUpdate, by: ChangeMaker | null): Promise<Subscription> {
  const fixed = [
    ...("target_url" in input ? [{ pointer: "/target_url", detail: "does not change in place: create a subscription to the new URL, confirm it receives, then delete this one" }] : []),
    ...("events" in input ? [{ pointer: "/events", detail: "do not change in place: create a subscription with the new events, confirm it receives, then delete this one" }] : []),
  ];
  if (fixed.length > 0) return Promise.reject(validationProblem(fixed, "The target URL and events of a subscription do not change in place."));
  return rt.db.write(async (tx) => {
    const current = await findSubscriptionById(tx, id);
    if (!current) throw notFound("webhook subscription", id);
    const settings = { description: input.description === undefined ? current.description : input.description, max_rate: input.max_rate === undefined ? current.max_rate : input.max_rate };
    if (settings.description === current.description && settings.max_rate === current.max_rate) return toSubscription(current);
    await updateSubscriptionSettings(tx, id, settings, Date.now(), by);
    return toSubscription((await findSubscriptionById(tx, id))!);
  });
}

/**
 * rotateSecret gives a subscription a new signing secret, returned in full only here; the
 * previous one keeps signing beside it for `grace_hours` (default 24), so receivers can switch
 * at their own pace. A second rotation within the grace period drops the oldest secret. `by` is
 * who rotated it (updated_by).
 */
export async function rotateSecret(rt: Runtime, id: string, input: SecretRotationInput, idempotency: IdempotencyScope | null, by: ChangeMaker | null): Promise<{ status: number; body: { data: SubscriptionWithSecret } }> {
  return rt.db.write(async (tx) => {
    const rotated = await replaceSecret(rt, tx, id, input, idempotency, by);
    if (!rotated) throw notFound("webhook subscription", id);
    return rotated;
  });
}

/** replaceSecret is rotateSecret inside the caller's write; null when there is no such subscription. */
export async function replaceSecret(rt: Runtime, tx: Db, id: string, input: SecretRotationInput, idempotency: IdempotencyScope | null, by: ChangeMaker | null): Promise<{ status: number; body: { data: SubscriptionWithSecret } } | null> {
  const secret = newSecret();
  const now = Date.now();
  const graceMs = (input.grace_hours ?? DEFAULT_SECRET_GRACE_HOURS) * 3_600_000;
  if (!(await rotateSubscriptionSecret(tx, id, await sealInWrite(tx, rt.secrets, id, secret), now + graceMs, now, by))) return null;
  return answerWithSecret(tx, (await findSubscriptionById(tx, id))!, secret, 200, idempotency, now);
}

/** endRotationGrace stops a subscription's previous secret from signing now, `by` whom, or throws 404; it tells whether one was still signing. */
export async function endRotationGrace(rt: Runtime, id: string, by: ChangeMaker | null): Promise<boolean> {
  return rt.db.write(async (tx) => {
    if (!await findSubscriptionById(tx, id)) throw notFound("webhook subscription", id);
    return endSecretGrace(tx, id, Date.now(), by);
  });
}

/**
 * pauseSubscription pauses (or resumes) a subscription: while paused its deliveries wait, pending,
 * and go out on resume. A disabled one is not paused (409): it sends nothing already, and its
 * enable is to make it active. Pausing a paused one or resuming an active one changes nothing and
 * answers the subscription as it is. `by` is who paused or resumed it (paused_by, updated_by).
 */
export async function pauseSubscription(rt: Runtime, id: string, paused: boolean, idempotency: IdempotencyScope | null, by: ChangeMaker | null): Promise<{ status: number; body: { data: Subscription } }> {
  return rt.db.write(async (tx) => {
    const now = Date.now();
    const row = await findSubscriptionById(tx, id);
    if (!row) throw notFound("webhook subscription", id);
    if (paused && row.status !== "active") {
      throw new ProblemError(409, "subscription-disabled", `The subscription ${id} is disabled (${row.disabled_reason}); it sends nothing: enable it with POST /public/v1/webhook-subscriptions/${id}/enable, then pause it.`);
    }
    const changed = await setSubscriptionPaused(tx, id, paused ? now : null, now, by);
    const body = { data: toSubscription(changed ? (await findSubscriptionById(tx, id))! : row) };
    await saveIdempotentResponse(tx, idempotency, 200, body, now);
    return { status: 200, body };
  });
}

/** RecoveryWindow is a checked recovery window in Unix milliseconds. */
export interface RecoveryWindow {
  since: number;
  until: number;
}

/** recoveryWindow checks a recovery window: RFC 3339 times, since at most MAX_RECOVERY_DAYS ago (and RECOVERY_GRACE_MS), until after since and not in the future. */
export function recoveryWindow(input: RecoveryInput, now = Date.now()): RecoveryWindow {
  const since = parseTimestamp(input.since);
  const until = input.until === undefined ? now : parseTimestamp(input.until);
  const errors: { pointer: string; detail: string }[] = [];
  if (since === null) errors.push({ pointer: "/since", detail: timestampRefusal(input.since) });
  else if (since < now - MAX_RECOVERY_DAYS * 86_400_000 - RECOVERY_GRACE_MS) errors.push({ pointer: "/since", detail: `must be at most ${MAX_RECOVERY_DAYS} days ago` });
  else if (since >= now) errors.push({ pointer: "/since", detail: "must be in the past" });
  if (until === null) errors.push({ pointer: "/until", detail: timestampRefusal(input.until) });
  else if (since !== null && since < now && until <= since) errors.push({ pointer: "/until", detail: "must be after since" });
  if (errors.length > 0) throw validationProblem(errors, "The recovery window is invalid.");
  return { since: since!, until: Math.min(until!, now) };
}

/** countRecoverable counts the failed deliveries of a subscription in a recovery window, or throws 404. */
export async function countRecoverable(db: Db, id: string, window: RecoveryWindow): Promise<number> {
  if (!await findSubscriptionById(db, id)) throw notFound("webhook subscription", id);
  return countFailedDeliveriesBetween(db, id, window.since, window.until);
}

/**
 * recoverDeliveries queues again every failed delivery of a subscription created in the window:
 * each gets one more attempt with the same webhook-id, oldest first, through the delivery loop
 * and its per-subscription limits (a paused subscription's wait for resume). 409 if disabled.
 * It queues rt.batchRows per write, oldest first (one write of 200,000 held SQLite's event loop for
 * 5 s), each write checking the subscription (404, 409): a recovery ended so (or by a crash) keeps
 * what it queued. Each write but the last keeps, under the Idempotency-Key, where it got to and
 * how many it queued: sent again with the key, it goes on from there, so what the first writes
 * queued and failed again meanwhile is not queued twice. The last write saves the answer, with the total.
 */
export async function recoverDeliveries(rt: Runtime, id: string, input: RecoveryInput, idempotency: IdempotencyScope | null): Promise<{ status: number; body: { data: Recovery } }> {
  const window = recoveryWindow(input);
  const kept = keptProgress<{ after: RecoveryPosition; queued: number }>(idempotency);
  let after: RecoveryPosition = kept?.after ?? { created_at: window.since, id: "" };
  let queued = kept?.queued ?? 0;
  return writeInSteps(rt.db, async (tx) => {
    const now = Date.now();
    const row = await findSubscriptionById(tx, id);
    if (!row) throw notFound("webhook subscription", id);
    if (row.status !== "active") throw new ProblemError(409, "subscription-disabled", `The subscription ${id} is disabled (${row.disabled_reason}); nothing can be sent to it.`);
    const requeued = await requeueFailedDeliveries(tx, id, after, window.until, now, rt.batchRows);
    // Counted as the step runs: a step that fails ends the recovery, so no count outlives its rollback.
    queued += requeued.length;
    if (requeued.length === rt.batchRows) {
      after = requeued.at(-1)!;
      await saveIdempotentProgress(tx, idempotency, { after, queued }, now);
      return null;
    }
    const body = { data: { subscription_id: id, since: toTimestamp(window.since), until: toTimestamp(window.until), queued } };
    await saveIdempotentResponse(tx, idempotency, 202, body, now);
    return { status: 202, body };
  }, (committed) => `${committed * rt.batchRows} of the subscription's failed deliveries were queued again`);
}

// Through JSON: TypeBox marks its schemas with symbol keys, which are not part of the JSON Schema.
const EVENT_TYPES: EventTypeInfo[] = WEBHOOK_EVENT_TYPES.map((type) => ({
  type,
  description: EVENT_CATALOGUE[type].description,
  schema: JSON.parse(JSON.stringify(EVENT_CATALOGUE[type].schema)) as Record<string, unknown>,
}));

/** eventTypes lists every event kind with its description and the JSON Schema of its body. */
export function eventTypes(): EventTypeInfo[] {
  return EVENT_TYPES;
}

const webhookHeader = (name: string, description: string) => ({ name, in: "header", required: true, description, schema: { type: "string" } });

/** webhooksDocument builds the OpenAPI 3.1 `webhooks` object: one POST per event kind, with its body schema and headers. */
export function webhooksDocument(): Record<string, unknown> {
  return Object.fromEntries(
    eventTypes().map(({ type, description, schema }) => [
      type,
      {
        post: {
          operationId: `receive${type.split(".").map((part) => part[0]!.toUpperCase() + part.slice(1)).join("")}Event`,
          summary: `${type} event`,
          description: `${description} Verify webhook-signature (Standard Webhooks) before trusting the body.`,
          tags: ["Webhook events"],
          parameters: [
            webhookHeader("webhook-id", "The delivery id: the same on every attempt of this delivery (dlv_...)."),
            webhookHeader("webhook-timestamp", "Unix seconds when this attempt was signed."),
            webhookHeader("webhook-signature", "Space-separated v1,<base64 HMAC-SHA256> signatures, newest secret first (two during a secret rotation's grace period)."),
          ],
          requestBody: { required: true, content: { "application/json": { schema } } },
          responses: { "200": { description: "Any 2xx within the timeout counts as delivered; 410 Gone disables the subscription; anything else is retried." } },
        },
      },
    ]),
  );
}

/** sendTestEvent writes a webhook.ping event, made by the request `origin`, with one delivery to this subscription only; the loop sends it ahead of the subscription's backlog (recordPing). */
export async function sendTestEvent(rt: Runtime, subscriptionId: string, idempotency: IdempotencyScope | null, origin: ChangeOrigin): Promise<{ delivery_id: string; event_id: string }> {
  return rt.db.write(async (tx) => {
    const now = Date.now();
    const row = await findSubscriptionById(tx, subscriptionId);
    if (!row) throw notFound("webhook subscription", subscriptionId);
    const sent = await addTestEvent(tx, row, origin, now);
    await saveIdempotentResponse(tx, idempotency, 202, { data: sent }, now);
    return sent;
  });
}

/** addTestEvent is sendTestEvent's part inside a write, so the caller's write commits the ping with whatever else it records. */
export async function addTestEvent(tx: Db, row: SubscriptionRow, origin: ChangeOrigin, now: number): Promise<{ delivery_id: string; event_id: string }> {
  if (row.status !== "active") throw new ProblemError(409, "subscription-disabled", `The subscription ${row.id} is disabled (${row.disabled_reason}); enable it with POST /public/v1/webhook-subscriptions/${row.id}/enable.`);
  return recordPing(tx, row, origin, now);
}

/** listDeliveriesPage answers GET /webhook-deliveries: newest first, filters subscription_id, event, event_id, request_id, status, created_after. */
export async function listDeliveriesPage(db: Database, secrets: SecretBox, query: Record<string, unknown>): Promise<{ data: Delivery[]; meta: ListMeta }> {
  const list = parseListQuery(query, { list: "webhook-deliveries", sorts: ["created_at"], defaultSort: "created_at", defaultDirection: "desc", filters: DELIVERY_FILTERS, fixedOrder: true }, secrets);
  const filters = {
    subscriptionId: query.subscription_id as string | undefined,
    eventType: query.event as string | undefined,
    eventId: query.event_id as string | undefined,
    requestId: query.request_id as string | undefined,
    status: query.status as string | undefined,
    createdAfter: parseTimestampFilter("created_after", query.created_after),
  };
  let planned: DeliveryFilters | null = null;
  const plan = async (source: Db) => (planned ??= await planDeliveryFilters(source, filters));
  const { read, total } = await readListPage(
    db,
    list,
    async (source) => listDeliveries(source, await plan(source), pageWindow(list)),
    async (source) => countMatchingDeliveries(source, await plan(source)),
  );
  const meta = listMeta(list, total, read, (row: DeliveryRow) => row.created_at);
  return { data: pageRows(list, read).map(toDelivery), meta };
}

/** findDeliverySummary returns a delivery as lists show it (no body, no attempts), or null. */
export async function findDeliverySummary(db: Db, id: string): Promise<Delivery | null> {
  const row = await findDeliveryById(db, id);
  return row ? toDelivery(row) : null;
}

/**
 * shownPayload is how an event's body is shown: as sent, or, once erased, null with the time of
 * the erasure. The marker stored in its place is not shown: read as a contact, its lone id would
 * look like one whose every field was cleared.
 */
function shownPayload(event: { payload: string; erased_at: number | null } | null): { payload: unknown; payload_erased_at: string | null } {
  if (event?.erased_at != null) return { payload: null, payload_erased_at: toTimestamp(event.erased_at) };
  return { payload: JSON.parse(event?.payload ?? "null") as unknown, payload_erased_at: null };
}

/** findDelivery returns a delivery with the body it sends and its newest attempts (MAX_ATTEMPTS_SHOWN), oldest first, or null. */
export async function findDelivery(db: Db, id: string): Promise<DeliveryDetail | null> {
  const row = await findDeliveryById(db, id);
  if (!row) return null;
  const event = await findEventById(db, row.event_id);
  const erased = event?.erased_at != null;
  return {
    ...toDelivery(row),
    ...shownPayload(event),
    attempt_history: (await findAttemptsByDelivery(db, id, MAX_ATTEMPTS_SHOWN)).reverse().map((attempt) => toAttempt(attempt, erased)),
  };
}

/** getDelivery returns a delivery with the body it sends and every attempt, read in one snapshot, or throws 404. */
export async function getDelivery(db: Database, id: string): Promise<DeliveryDetail> {
  const delivery = await db.read((snapshot) => findDelivery(snapshot, id));
  if (!delivery) throw notFound("webhook delivery", id);
  return delivery;
}

/** retryDelivery makes a manual attempt now and returns the delivery as it stands afterwards. */
export async function retryDelivery(rt: Runtime, id: string, idempotency: IdempotencyScope | null): Promise<Delivery> {
  // The attempt was sent by now: it is recorded even if the key was taken over meanwhile (keepIdempotentResponse),
  // and a refusal here would roll back the other attempts recorded in the same write.
  const refusal = await rt.deliveries.attemptNow(id, async (tx) => void (await keepIdempotentResponse(tx, idempotency, 200, { data: toDelivery((await findDeliveryById(tx, id))!) })));
  if (refusal) throw attemptRefusalProblem(id, refusal);
  return toDelivery((await findDeliveryById(rt.db, id))!);
}

/** eventErased is the 409 of a delivery whose event's payload was erased at `erasedAt`: nothing of the record is left to send. */
export function eventErased(erasedAt: number): ProblemError {
  return new ProblemError(409, "event-erased", `The payload of this delivery's event was erased at ${toTimestamp(erasedAt)}, after its record was deleted; nothing of it is left to send.`);
}

/** attemptsCount says a number of attempts: "1 attempt", "3 attempts". */
const attemptsCount = (n: number) => `${n} attempt${n === 1 ? "" : "s"}`;

/** attemptRefusalProblem is the HTTP answer to a manual attempt the delivery loop did not make: its status and headers, in the API's words. */
export function attemptRefusalProblem(id: string, refusal: AttemptRefusal): ProblemError {
  switch (refusal.refused) {
    case "not-found":
      return notFound("webhook delivery", id);
    case "event-erased":
      return eventErased(refusal.erasedAt);
    case "shutting-down":
      return new ProblemError(503, "shutting-down", "The server is shutting down; retry the delivery after it restarts.", undefined, { "retry-after": "5" });
    case "manual-attempts-busy":
      return new ProblemError(503, "manual-attempts-busy", `${MAX_MANUAL_ATTEMPTS} manual attempts are under way, the most at once; retry the delivery in a moment.`, undefined, { "retry-after": String(refusal.retryAfter) });
    case "subscription-attempts-busy":
      return new ProblemError(
        503,
        "subscription-attempts-busy",
        refusal.cap === MAX_PER_SUBSCRIPTION
          ? `The subscription ${refusal.subscriptionId} has ${MAX_PER_SUBSCRIPTION} attempts under way, the most at once; retry the delivery in a moment.`
          : `The subscription ${refusal.subscriptionId} has ${attemptsCount(refusal.cap)} under way on this instance, the most it sends at once to a receiver that left attempts unanswered (timed out, or no connection) until it answers again; retry the delivery in a moment.`,
        undefined,
        { "retry-after": String(refusal.retryAfter) },
      );
    case "subscription-deleted":
      return new ProblemError(409, "subscription-deleted", `The subscription ${refusal.subscriptionId} of this delivery was deleted; nothing can be sent for it.`);
    case "subscription-disabled":
      return new ProblemError(409, "subscription-disabled", `The subscription ${refusal.subscriptionId} is disabled; enable it with POST /public/v1/webhook-subscriptions/${refusal.subscriptionId}/enable.`);
    case "subscription-paused":
      return new ProblemError(409, "subscription-paused", `The subscription ${refusal.subscriptionId} is paused; resume it and its deliveries go out.`);
    case "secrets-key-replaced":
      return secretsKeyReplaced(
        "This instance still has the secrets key that crm secrets-key rotate replaced, which does not open the subscription's signing secret, so nothing was sent. Retry the delivery on another instance; the operator should restart this one with the new key file.",
      );
    case "in-progress":
      return new ProblemError(409, "delivery-in-progress", "An attempt of this delivery is under way; read the delivery again when it has finished.", undefined, { "retry-after": "1" });
  }
}

/** subscriptionDeliveryCounts counts deliveries created since `sinceMs` per existing subscription and outcome. */
export async function subscriptionDeliveryCounts(db: Db, sinceMs: number): Promise<Map<string, { succeeded: number; failed: number; pending: number }>> {
  return new Map((await countDeliveriesBySubscription(db, sinceMs)).map(({ subscription_id, ...counts }) => [subscription_id, counts]));
}

/** deliveryQueueStats reports the pending deliveries, the age of the oldest, and those of active subscriptions due and not started (waiting for a slot), for metrics. */
export async function deliveryQueueStats(db: Db, now = Date.now()): Promise<{ pending: number; oldest_pending_age_ms: number | null; waiting: number }> {
  const { pending, oldest_created_at } = await countPendingDeliveries(db);
  return { pending, oldest_pending_age_ms: oldest_created_at === null ? null : now - oldest_created_at, waiting: await countWaitingDeliveries(db, now) };
}

/** deliveryLoopStatus tells whether the delivery loop is running, how many attempts are under way, and why its claims fail, if they do. */
export function deliveryLoopStatus(rt: Runtime): { running: boolean; in_flight: number; claim_failure: { since: number; error: unknown } | null } {
  return { running: rt.deliveries.running, in_flight: rt.deliveries.inFlightCount, claim_failure: rt.deliveries.claimFailure };
}

// Typed reads for the operator console (issue 17): no query strings, no 404 problems to catch.

/** DeliveryPosition is where a newest-first page of deliveries stopped: the next page starts after it. */
export type DeliveryPosition = CursorPosition;

/** deliveriesAfter returns up to `limit` deliveries matching typed filters, newest first, after a position; `next` is set when more follow. */
export async function deliveriesAfter(db: Db, filters: DeliveryFilters, after: DeliveryPosition | null, limit: number): Promise<{ data: Delivery[]; next: DeliveryPosition | null }> {
  const rows = await listDeliveries(db, await planDeliveryFilters(db, filters), { cursor: after, limit: limit + 1, offset: 0 });
  const page = rows.slice(0, limit);
  const last = page.at(-1);
  return { data: page.map(toDelivery), next: rows.length > limit && last ? { value: last.created_at, id: last.id } : null };
}

/**
 * countMatchingDeliveries counts the deliveries matching typed filters. Filtered by kind,
 * subscription, status and creation time alone, it sums the hourly counts (migrations 0015 and
 * 0032) of the whole hours in range and counts only the deliveries of the part hours at its ends:
 * the same snapshot holds both, so the sum is exact. A kind beside a status or a subscription read
 * each of its deliveries (618 ms for 617,608 succeeded of 1,000,000, on SQLite's main thread).
 */
export async function countMatchingDeliveries(db: Db, filters: DeliveryFilters): Promise<number> {
  // kindDrives is how a page is read (planDeliveryFilters), not a filter.
  const { eventType, subscriptionId, status, createdAfter, createdBefore, kindDrives: _, ...others } = filters;
  if (Object.values(others).some((value) => value !== undefined)) return countDeliveries(db, await planDeliveryFilters(db, filters));
  const fromHour = createdAfter === undefined ? undefined : hourOf(createdAfter) + HOUR_MS;
  const untilHour = createdBefore === undefined ? undefined : hourOf(createdBefore);
  // Within an hour or two no whole hour is in range, and what is counted is at most those hours.
  if (fromHour !== undefined && untilHour !== undefined && fromHour >= untilHour) return countDeliveries(db, filters);
  let total = await sumDeliveryHours(db, { eventType, subscriptionId, status, fromHour, untilHour });
  // Creation times are whole milliseconds: an end within a millisecond of its hour has no part hour.
  if (fromHour !== undefined && createdAfter! < fromHour - 1) total += await countDeliveries(db, { ...filters, createdBefore: fromHour });
  if (untilHour !== undefined && createdBefore! > untilHour) total += await countDeliveries(db, { ...filters, createdAfter: untilHour - 1 });
  return total;
}

/**
 * planDeliveryFilters lets the kind's index drive (SQLite) beside a subscription or an unfinished
 * status when the kind has fewer deliveries in the time range than that filter keeps: each walk
 * reads its index's deliveries until a page is found, all of them when matches are rare, and SQLite
 * keeps no statistics to choose. Both are counted from the hourly counts (the kind's, migration
 * 0032) and the deliveries of a time range's part hours. PostgreSQL plans by its statistics.
 * Filters planned already (kindDrives set) are returned as they are: plan once for a page and its total.
 */
export async function planDeliveryFilters(db: Db, filters: DeliveryFilters): Promise<DeliveryFilters> {
  const { eventType, subscriptionId, status, createdAfter, createdBefore } = filters;
  const otherDriver = subscriptionId !== undefined || (status !== undefined && status !== "succeeded");
  if (filters.kindDrives !== undefined || db.dialect !== "sqlite" || eventType === undefined || !otherDriver || filters.eventId !== undefined || filters.subjectId !== undefined || filters.requestId !== undefined) return filters;
  const kept = await countMatchingDeliveries(db, { subscriptionId, status, createdAfter, createdBefore });
  return { ...filters, kindDrives: (await countMatchingDeliveries(db, { eventType, createdAfter, createdBefore })) < kept };
}

/** WebhookEvent is an event as recorded in the outbox, with the deliveries made of it. */
export interface WebhookEvent {
  id: string;
  type: string;
  created_at: string;
  /** the body sent; null once erased */
  payload: unknown;
  /** when the payload was erased; null: never */
  payload_erased_at: string | null;
  /** who erased it; null: never, or erased before migration 0052 */
  payload_erased_by: ChangeMaker | null;
  /** the contact or account it is about (the id in its data, kept by an erasure), or null */
  subject_id: string | null;
  /** the X-Request-Id of the request that made it (the console's "Request"); null: the service or a command made it, or before migration 0041 */
  request_id: string | null;
  /** the API token whose request made it; null: no API request, or before migration 0050 */
  token_id: string | null;
  /** who made it (the console's "Made by"; the API leaves it out): its token (token_id), an operator, a command, the delivery loop; null: recorded before migration 0052 by no API request */
  made_by: ChangeMaker | null;
  deliveries: Delivery[];
}

async function toWebhookEvents(db: Db, rows: StoredEvent[]): Promise<WebhookEvent[]> {
  const deliveries = Map.groupBy((await listDeliveriesOfEvents(db, rows.map((row) => row.id))).map(toDelivery), (d) => d.event_id);
  return rows.map((row) => {
    const subject = (JSON.parse(row.payload) as { data?: { id?: unknown } } | null)?.data?.id;
    // An event an API request made before migration 0052 has its token_id only.
    const madeBy = changeMakerOf(row.made_by) ?? (row.token_id === null ? null : { kind: "api_token" as const, id: row.token_id });
    return {
      id: row.id,
      type: row.type,
      created_at: toTimestamp(row.created_at),
      ...shownPayload(row),
      payload_erased_by: changeMakerOf(row.erased_by),
      subject_id: typeof subject === "string" ? subject : null,
      request_id: row.request_id,
      token_id: row.token_id,
      made_by: madeBy,
      deliveries: deliveries.get(row.id) ?? [],
    };
  });
}

/** findWebhookEvent returns an event with its deliveries, or null. */
export async function findWebhookEvent(db: Db, id: string): Promise<WebhookEvent | null> {
  const row = await findEventById(db, id);
  return row ? (await toWebhookEvents(db, [row]))[0]! : null;
}

/** eventsAbout returns the latest `limit` events about a contact or account, newest first, each with its deliveries. */
export async function eventsAbout(db: Db, subjectId: string, limit: number): Promise<WebhookEvent[]> {
  return toWebhookEvents(db, await listEventsAbout(db, subjectId, limit));
}

/** eventSubjects maps each of the given events that is about a contact or account to that id. */
export async function eventSubjects(db: Db, eventIds: readonly string[]): Promise<Map<string, string>> {
  return new Map((await listEventSubjects(db, [...new Set(eventIds)])).map((row) => [row.id, row.subject_id]));
}
