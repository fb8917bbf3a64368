import type { Database, Db } from "../server/db/sql.ts";
import { createApiToken, revokeApiToken, type ApiTokenInfo } from "../server/auth/service.ts";
import { notFound, ProblemError, validationProblem, type FieldError } from "../server/shared/problem.ts";
import { MAX_MAX_RATE, MIN_MAX_RATE } from "../server/limits/limits.ts";
import type { Runtime } from "../server/runtime.ts";
import type { ListMeta } from "../server/http/list-query.ts";
import { sameBytes, sha256 } from "../server/shared/crypto.ts";
import { newId } from "../server/shared/ids.ts";
import { toOptionalTimestamp, toTimestamp } from "../server/shared/time.ts";
import type { User } from "../server/users/model.ts";
import { listUsersPage } from "../server/users/service.ts";
import { DELIVERY_STATUSES, WEBHOOK_EVENT_TYPES, type DeliveryDetail, type Subscription, type SubscriptionInput, type SubscriptionWithSecret } from "../server/webhooks/model.ts";
import {
  countRecoverable,
  createSubscription,
  deleteSubscription,
  endRotationGrace,
  getDelivery,
  getSubscription,
  listDeliveriesPage,
  listSubscriptionsPage,
  recoverDeliveries,
  recoveryWindow,
  rotateSecret,
  sendTestEvent,
  subscriptionDeliveryCounts,
  updateSubscription,
} from "../server/webhooks/service.ts";
import { DEFAULT_SECRET_GRACE_HOURS, MAX_SECRET_GRACE_HOURS, MAX_SUBSCRIPTION_DESCRIPTION_LENGTH } from "../server/limits/limits.ts";
import type { ConsoleSession, DeliveriesView, DeliveryFilters, DeliveryWatchView, Operator } from "./model.ts";
import {
  clearLoginFailures,
  clearLoginFailuresOfAccount,
  countOperators,
  deleteIdleSessions,
  deleteLoginFailuresBefore,
  deleteSession,
  findLoginFailures,
  findRotation,
  findOperatorByEmail,
  findSessionWithOperator,
  insertFirstOperator,
  insertOperator,
  insertRotation,
  insertSession,
  listOpenRotations,
  markRotationCompleted,
  recordLoginFailure,
  replaceSetupCodes,
  setRotationTestDelivery,
  setupCodeIsValid,
  touchSession,
  type LoginFailureRow,
  type OperatorRow,
  type RotationRow,
} from "./store.ts";

/** SESSION_IDLE_MS ends a session that has not been used for 12 hours. */
export const SESSION_IDLE_MS = 12 * 60 * 60 * 1000;
const SESSION_TOUCH_MS = 60_000; // last_seen_at is written at most once a minute per session
/** SETUP_CODE_TTL_MS is how long the first-run setup link works. */
export const SETUP_CODE_TTL_MS = 30 * 60 * 1000;
/** LOGIN_WINDOW_MS is the window in which failed sign-ins are counted. */
export const LOGIN_WINDOW_MS = 15 * 60 * 1000;
/** FREE_PAIR_FAILURES is how many wrong passwords one address may type for one account before each next try waits. */
export const FREE_PAIR_FAILURES = 3;
/**
 * PACED_AFTER is how many failures in a window put an account, or an address, under attack:
 * from then on its password checks from addresses that have failed for that account are paced.
 */
export const PACED_AFTER = { account: 10, address: 20 } as const;
/** PACE_MS is the time between two paced password checks of one account, or from one address. */
const PACE_MS = 1000;
/** MAX_PACE_WAIT_MS is the longest a paced check waits for its turn; a longer queue is answered 429. */
const MAX_PACE_WAIT_MS = 5000;
const PASSWORD_MIN = 10;
const PASSWORD_MAX = 512; // argon2 hashes any length; a bound keeps a request from buying much CPU
const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

function randomSecret(): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
}

/** checkOperatorInput validates an operator's email and password and returns the normalised email. */
function checkOperatorInput(email: string, password: string): string {
  const normalised = email.trim().toLowerCase();
  const errors = [];
  if (!EMAIL.test(normalised) || normalised.length > 254) errors.push({ pointer: "/email", detail: "must be an email address" });
  if (password.length < PASSWORD_MIN || password.length > PASSWORD_MAX) errors.push({ pointer: "/password", detail: `must be ${PASSWORD_MIN} to ${PASSWORD_MAX} characters` });
  if (errors.length > 0) throw validationProblem(errors, errors.map((e) => `${e.pointer.slice(1)} ${e.detail}`).join("; ") + ".");
  return normalised;
}

async function operatorRow(email: string, password: string, now: number): Promise<OperatorRow> {
  const password_hash = await Bun.password.hash(password, { algorithm: "argon2id" });
  return { id: newId("opr", now), email, password_hash, created_at: now, updated_at: now };
}

/** createOperator adds an operator who can sign in to the console (the `operator create` command). */
export async function createOperator(db: Db, input: { email: string; password: string }, now = Date.now()): Promise<Operator> {
  const email = checkOperatorInput(input.email, input.password);
  if (await findOperatorByEmail(db, email)) throw new ProblemError(409, "operator-exists", `An operator with email ${email} already exists.`);
  const row = await operatorRow(email, input.password, now);
  await insertOperator(db, row);
  return { id: row.id, email: row.email };
}

/** hasOperators tells whether anyone can sign in yet. */
export async function hasOperators(db: Db): Promise<boolean> {
  return (await countOperators(db)) > 0;
}

/** issueSetupCode makes the one-time code of the first-run setup link; earlier codes stop working. */
export async function issueSetupCode(db: Database, now = Date.now()): Promise<string> {
  const code = randomSecret();
  await db.write((tx) => replaceSetupCodes(tx, sha256(code), now, now + SETUP_CODE_TTL_MS));
  return code;
}

/** setupCodeUsable tells whether a setup link still works: its code is current and no operator exists yet. */
export async function setupCodeUsable(db: Db, code: string, now = Date.now()): Promise<boolean> {
  return code.length > 0 && code.length <= 100 && !(await hasOperators(db)) && (await setupCodeIsValid(db, sha256(code), now));
}

/** completeSetup creates the first operator through a valid setup link and returns a new session secret. */
export async function completeSetup(db: Database, input: { code: string; email: string; password: string; passwordAgain: string }, now = Date.now()): Promise<string> {
  if (!(await setupCodeUsable(db, input.code, now))) throw setupLinkInvalid();
  const email = checkOperatorInput(input.email, input.password);
  if (input.password !== input.passwordAgain) throw validationProblem([{ pointer: "/password_again", detail: "must repeat the password" }], "The two passwords differ.");
  const row = await operatorRow(email, input.password, now);
  // Checked again inside the transaction: two people racing through the same link get one operator.
  if (!(await db.write((tx) => insertFirstOperator(tx, row)))) throw setupLinkInvalid();
  return startSession(db, row.id, now);
}

function setupLinkInvalid(): ProblemError {
  return new ProblemError(403, "setup-link-invalid", "This setup link is invalid, expired or already used. Restart the server for a new link, or run `crm operator create --email E --password-stdin`.");
}

let dummyHash: Promise<string> | undefined;

/** pairDelayMs is the wait after the last failure of an account and address pair: none for the first few, then 1 s doubling up to the window. */
export function pairDelayMs(failures: number): number {
  return failures < FREE_PAIR_FAILURES ? 0 : Math.min(1000 * 2 ** (failures - FREE_PAIR_FAILURES), LOGIN_WINDOW_MS);
}

/** pairSubject names an account and address pair in login_failures. */
function pairSubject(email: string, address: string): string {
  return `${email} ${address}`; // an operator's email holds no space, so unlocking one never matches another
}

/** failuresInWindow is a subject's failure count in the current window (0 once it has passed). */
async function failuresInWindow(db: Db, scope: "account" | "address" | "pair", subject: string, now: number): Promise<LoginFailureRow | null> {
  const row = await findLoginFailures(db, scope, subject);
  return row && row.window_start_at > now - LOGIN_WINDOW_MS ? row : null;
}

/** Pacer hands out turns at most one per PACE_MS per key; the turns of one database are shared by its server. */
class Pacer {
  private readonly next = new Map<string, number>();

  /** turn is how long a check must wait for its turn (and takes it), or null when that is past MAX_PACE_WAIT_MS. */
  turn(key: string, now: number): number | null {
    for (const [k, at] of this.next) if (at <= now) this.next.delete(k);
    const at = Math.max(now, this.next.get(key) ?? now);
    if (at - now > MAX_PACE_WAIT_MS) return null;
    this.next.set(key, at + PACE_MS);
    return at - now;
  }
}

const pacers = new WeakMap<Db, Pacer>();

function tooManySignIns(waitMs: number): ProblemError {
  const seconds = Math.max(1, Math.ceil(waitMs / 1000));
  const when = seconds < 120 ? `${seconds} second${seconds === 1 ? "" : "s"}` : `${Math.ceil(seconds / 60)} minutes`;
  return new ProblemError(429, "too-many-sign-ins", `Too many failed sign-ins from here for this account. Try again in ${when}.`, undefined, { "retry-after": String(seconds) });
}

/**
 * signIn checks an operator's email and password and returns a new session secret. Throttling
 * slows guessing without locking anyone out: failures count per account and address pair, and
 * after FREE_PAIR_FAILURES each further try of that pair must wait a delay that doubles (429 with
 * Retry-After before then, unchecked). While an account or an address is under attack (PACED_AFTER
 * failures in the window), checks of pairs that have failed are paced to one per PACE_MS,
 * waiting for their turn. A pair without failures (the operator at their own address) is always
 * checked at once, so the right password gets in whatever others are guessing.
 */
export async function signIn(db: Db, input: { email: string; password: string; address: string }, now = Date.now()): Promise<string> {
  const email = input.email.trim().toLowerCase().slice(0, 254);
  const pair = await failuresInWindow(db, "pair", pairSubject(email, input.address), now);
  if (pair) {
    const wait = pair.last_failure_at + pairDelayMs(pair.failures) - now;
    if (wait > 0) throw tooManySignIns(wait);
    const pacer = pacers.get(db) ?? pacers.set(db, new Pacer()).get(db)!;
    const underAttack = [
      [((await failuresInWindow(db, "account", email, now))?.failures ?? 0) >= PACED_AFTER.account, `account:${email}`],
      [((await failuresInWindow(db, "address", input.address, now))?.failures ?? 0) >= PACED_AFTER.address, `address:${input.address}`],
    ] as const;
    let turn = 0;
    for (const [paced, key] of underAttack) {
      if (!paced) continue;
      const waitMs = pacer.turn(key, now);
      if (waitMs === null) throw tooManySignIns(MAX_PACE_WAIT_MS);
      turn = Math.max(turn, waitMs);
    }
    if (turn > 0) await Bun.sleep(turn);
  }
  const operator = await findOperatorByEmail(db, email);
  // Unknown emails cost the same argon2 verification, so timing does not tell which accounts exist.
  dummyHash ??= Bun.password.hash(randomSecret(), { algorithm: "argon2id" });
  const ok = input.password.length <= PASSWORD_MAX && (await Bun.password.verify(input.password, operator?.password_hash ?? (await dummyHash)));
  if (!operator || !ok) {
    await deleteLoginFailuresBefore(db, now - LOGIN_WINDOW_MS);
    for (const [scope, subject] of [["pair", pairSubject(email, input.address)], ["account", email], ["address", input.address]] as const) {
      await recordLoginFailure(db, scope, subject, now, now - LOGIN_WINDOW_MS);
    }
    throw new ProblemError(401, "sign-in-failed", "The email or password is wrong.");
  }
  await clearLoginFailures(db, "pair", pairSubject(email, input.address));
  return startSession(db, operator.id, now);
}

/** unlockOperator forgets every failed sign-in counted against an operator's account (the `operator unlock` command); returns how many records went. */
export async function unlockOperator(db: Db, email: string): Promise<number> {
  const normalised = email.trim().toLowerCase();
  if (!(await findOperatorByEmail(db, normalised))) throw new ProblemError(404, "not-found", `No operator has the email ${normalised}.`);
  return clearLoginFailuresOfAccount(db, normalised, pairSubject(normalised, ""));
}

async function startSession(db: Db, operatorId: string, now: number): Promise<string> {
  await deleteIdleSessions(db, now - SESSION_IDLE_MS);
  const secret = randomSecret();
  await insertSession(db, { id_hash: sha256(secret), operator_id: operatorId, created_at: now, last_seen_at: now });
  return secret;
}

/** resumeSession returns the operator of a session cookie used within the last 12 hours, and keeps the session alive. */
export async function resumeSession(db: Db, secret: string | undefined, now = Date.now()): Promise<ConsoleSession | null> {
  if (!secret || secret.length > 100) return null;
  const idHash = sha256(secret);
  const row = await findSessionWithOperator(db, idHash, now - SESSION_IDLE_MS);
  if (!row) return null;
  if (now - row.last_seen_at >= SESSION_TOUCH_MS) await touchSession(db, idHash, now);
  return { operator: { id: row.operator_id, email: row.email }, csrfToken: csrfTokenFor(secret) };
}

/** endSession signs out: the session secret stops working. */
export async function endSession(db: Db, secret: string | undefined): Promise<void> {
  if (secret) await deleteSession(db, sha256(secret));
}

/** newCsrfSeed makes the random value a pre-session cookie holds for the sign-in and setup forms. */
export function newCsrfSeed(): string {
  return randomSecret();
}

/** csrfTokenFor derives the CSRF token of a seed (the session secret, or the pre-session cookie); it reveals nothing of the seed. */
export function csrfTokenFor(seed: string): string {
  return Buffer.from(sha256(`csrf\u0000${seed}`)).toString("base64url");
}

/** csrfTokenMatches compares a submitted CSRF token with the seed's in constant time. */
export function csrfTokenMatches(seed: string | undefined, presented: unknown): boolean {
  if (!seed || typeof presented !== "string") return false;
  return sameBytes(Buffer.from(csrfTokenFor(seed)), Buffer.from(presented));
}

/** LATEST_DELIVERIES is how many deliveries the deliveries page shows (the contract's "latest 50"). */
export const LATEST_DELIVERIES = 50;
/** RECENT_MS is the span of the success and failure counts on the subscriptions page. */
const RECENT_MS = 24 * 60 * 60 * 1000;

/** allSubscriptions returns every subscription, newest first; there are few (one per receiver and event set). */
export async function allSubscriptions(db: Db): Promise<Subscription[]> {
  const all: Subscription[] = [];
  let cursor: string | null = null;
  do {
    const page = await listSubscriptionsPage(db, { per_page: "100", ...(cursor ? { cursor } : {}) });
    all.push(...page.data);
    cursor = page.meta.next_cursor;
  } while (cursor);
  return all;
}

/** findSubscription returns a subscription (secret masked), or null once it was deleted. */
async function findSubscription(db: Db, id: string): Promise<Subscription | null> {
  try {
    return await getSubscription(db, id);
  } catch (error) {
    if (error instanceof ProblemError && error.status === 404) return null;
    throw error;
  }
}

/** checkDeliveryFilters returns the filters that are set, or throws 422 naming a wrong one. */
function checkDeliveryFilters(filters: DeliveryFilters): Record<string, string> {
  const errors: FieldError[] = [];
  const set: Record<string, string> = {};
  if (filters.status) {
    if ((DELIVERY_STATUSES as readonly string[]).includes(filters.status)) set.status = filters.status;
    else errors.push({ parameter: "status", detail: `must be one of: ${DELIVERY_STATUSES.join(", ")}` });
  }
  if (filters.event) {
    if ((WEBHOOK_EVENT_TYPES as readonly string[]).includes(filters.event)) set.event = filters.event;
    else errors.push({ parameter: "event", detail: `must be one of: ${WEBHOOK_EVENT_TYPES.join(", ")}` });
  }
  if (filters.subscription_id) {
    if (/^sub_[0-9A-Z]{26}$/.test(filters.subscription_id)) set.subscription_id = filters.subscription_id;
    else errors.push({ parameter: "subscription_id", detail: "must be a subscription id (sub_...)" });
  }
  if (errors.length > 0) throw validationProblem(errors, `The filter is invalid: ${errors.map((e) => `${e.parameter} ${e.detail}`).join("; ")}.`);
  return set;
}

/** latestDeliveries returns the latest 50 deliveries matching the filters, newest first, with their subscriptions' descriptions. */
export async function latestDeliveries(db: Db, filters: DeliveryFilters, now = Date.now()): Promise<DeliveriesView> {
  const page = await listDeliveriesPage(db, { per_page: String(LATEST_DELIVERIES), ...checkDeliveryFilters(filters) });
  const descriptions = new Map((await allSubscriptions(db)).map((s) => [s.id, s.description]));
  return {
    data: page.data.map((d) => ({
      id: d.id,
      created_at: d.created_at,
      event_type: d.event_type,
      subscription_id: d.subscription_id,
      subscription_description: descriptions.get(d.subscription_id) ?? null,
      target_url: d.target_url,
      status: d.status,
      attempts: d.attempts,
      last_response_status: d.last_response_status,
      next_attempt_at: d.next_attempt_at,
    })),
    total: page.meta.total,
    refreshed_at: toTimestamp(now),
  };
}

/** deliveryWatch returns a delivery's status and its receiver's last answer, or throws 404. */
export async function deliveryWatch(db: Db, id: string): Promise<DeliveryWatchView> {
  const delivery = await getDelivery(db, id);
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

/** deliveryWithSubscription returns a delivery with every attempt, and its subscription while it exists. */
export async function deliveryWithSubscription(db: Db, id: string): Promise<{ delivery: DeliveryDetail; subscription: Subscription | null }> {
  const delivery = await getDelivery(db, id);
  return { delivery, subscription: await findSubscription(db, delivery.subscription_id) };
}

/** SubscriptionForm is what the create form and the rotation wizard post. */
export interface SubscriptionForm {
  target_url: string;
  description: string;
  events: string[];
  /** requests per second, as typed; "" or absent for no cap */
  max_rate?: string;
}

/** subscriptionInputFrom checks a subscription form: events from the known kinds, lengths within the API's limits. */
function subscriptionInputFrom(form: SubscriptionForm): SubscriptionInput {
  const errors: FieldError[] = [];
  const target = form.target_url.trim();
  const description = form.description.trim();
  if (target === "" || target.length > 2048) errors.push({ pointer: "/target_url", detail: "must be an absolute http or https URL of at most 2048 characters" });
  if (description.length > 500) errors.push({ pointer: "/description", detail: "must be at most 500 characters" });
  const events = [...new Set(form.events)];
  if (events.length === 0 || events.some((e) => !(WEBHOOK_EVENT_TYPES as readonly string[]).includes(e))) {
    errors.push({ pointer: "/events", detail: `must be one or more of: ${WEBHOOK_EVENT_TYPES.join(", ")}` });
  }
  const maxRateText = (form.max_rate ?? "").trim();
  const maxRate = Number(maxRateText);
  if (maxRateText !== "" && (!/^\d+$/.test(maxRateText) || maxRate < MIN_MAX_RATE || maxRate > MAX_MAX_RATE)) {
    errors.push({ pointer: "/max_rate", detail: `must be a whole number of requests per second from ${MIN_MAX_RATE} to ${MAX_MAX_RATE}` });
  }
  if (errors.length > 0) throw validationProblem(errors, errors.map((e) => `${e.pointer!.slice(1).replace("_", " ")} ${e.detail}`).join("; ") + ".");
  return { target_url: target, events, ...(description ? { description } : {}), ...(maxRateText ? { max_rate: maxRate } : {}) };
}

/** createSubscriptionFromForm creates a subscription from the console form and returns it with its secret (shown once). */
export async function createSubscriptionFromForm(rt: Runtime, form: SubscriptionForm): Promise<SubscriptionWithSecret> {
  return (await createSubscription(rt, subscriptionInputFrom(form), null)).body.data;
}

/** SubscriptionChoice is a subscription and the rotation away from it that is still open, if any. */
export interface SubscriptionChoice {
  subscription: Subscription;
  rotationId: string | null;
}

/** SubscriptionOverview adds a subscription's delivery counts of the last 24 hours. */
export interface SubscriptionOverview extends SubscriptionChoice {
  counts: { succeeded: number; failed: number; pending: number };
}

/** openRotationsFrom maps each subscription being rotated away from to its rotation (whose new subscription still exists). */
async function openRotationsFrom(db: Db): Promise<Map<string, string>> {
  const open = new Map<string, string>();
  for (const row of await listOpenRotations(db)) {
    if (!open.has(row.old_subscription_id) && await findSubscription(db, row.new_subscription_id)) open.set(row.old_subscription_id, row.new_subscription_id);
  }
  return open;
}

/** openRotationFrom returns the id of the unfinished rotation away from a subscription, or null. */
export async function openRotationFrom(db: Db, subscriptionId: string): Promise<string | null> {
  return (await openRotationsFrom(db)).get(subscriptionId) ?? null;
}

/** subscriptionChoices lists every subscription with its open rotation, for the wizard's first step. */
export async function subscriptionChoices(db: Db): Promise<SubscriptionChoice[]> {
  const open = await openRotationsFrom(db);
  return (await allSubscriptions(db)).map((subscription) => ({ subscription, rotationId: open.get(subscription.id) ?? null }));
}

/** subscriptionsOverview lists every subscription with its recent counts, and the rotations still open. */
export async function subscriptionsOverview(db: Db, now = Date.now()): Promise<{ subscriptions: SubscriptionOverview[]; rotations: RotationView[] }> {
  const counts = await subscriptionDeliveryCounts(db, now - RECENT_MS);
  const rotations = (await Promise.all((await listOpenRotations(db)).map((row) => toRotationView(db, row)))).filter((r) => r.step !== "abandoned");
  return {
    subscriptions: (await subscriptionChoices(db)).map((choice) => ({ ...choice, counts: counts.get(choice.subscription.id) ?? { succeeded: 0, failed: 0, pending: 0 } })),
    rotations,
  };
}

/** RotationView is the rotation wizard's state, derived from the database so it can be resumed at any time. */
export interface RotationView {
  /** the new subscription's id, which names the rotation */
  id: string;
  old: { id: string; target_url: string; description: string; subscription: Subscription | null };
  replacement: Subscription | null;
  /** deliveries to the old subscription still pending: deleting it ends them as failed */
  oldPending: number;
  test: DeliveryWatchView | null;
  /** test: steps 3 and 4 (delete unlocks after a successful test); done: old deleted; abandoned: the new subscription is gone */
  step: "test" | "done" | "abandoned";
  created_at: string;
  completed_at: string | null;
}

async function toRotationView(db: Db, row: RotationRow): Promise<RotationView> {
  const replacement = await findSubscription(db, row.new_subscription_id);
  let test: DeliveryWatchView | null = null;
  try {
    test = row.test_delivery_id ? await deliveryWatch(db, row.test_delivery_id) : null;
  } catch (error) {
    // Retention may have removed an old test delivery; the wizard then asks for a new test.
    if (!(error instanceof ProblemError && error.status === 404)) throw error;
  }
  const old = await findSubscription(db, row.old_subscription_id);
  return {
    id: row.new_subscription_id,
    old: { id: row.old_subscription_id, target_url: row.old_target_url, description: row.old_description, subscription: old },
    replacement,
    oldPending: old ? (await listDeliveriesPage(db, { subscription_id: old.id, status: "pending", per_page: "1" })).meta.total : 0,
    test,
    step: row.completed_at !== null ? "done" : replacement ? "test" : "abandoned",
    created_at: toTimestamp(row.created_at),
    completed_at: toOptionalTimestamp(row.completed_at),
  };
}

/** rotationView returns the state of one rotation, or throws 404. */
export async function rotationView(db: Db, id: string): Promise<RotationView> {
  const row = await findRotation(db, id);
  if (!row) throw notFound("rotation", id);
  return toRotationView(db, row);
}

/**
 * startRotation creates the new subscription that is to replace `oldId` and returns the rotation
 * with the new secret (shown once). If a rotation away from `oldId` is already under way it is
 * returned instead, without a secret, so a repeated form post does not create a second subscription.
 */
export async function startRotation(rt: Runtime, oldId: string, form: SubscriptionForm, now = Date.now()): Promise<{ id: string; secret: string | null }> {
  const old = await getSubscription(rt.db, oldId);
  const open = await openRotationFrom(rt.db, oldId);
  if (open) return { id: open, secret: null };
  const created = await createSubscriptionFromForm(rt, form);
  await insertRotation(rt.db, { new_subscription_id: created.id, old_subscription_id: old.id, old_target_url: old.target_url, old_description: old.description ?? "", created_at: now });
  return { id: created.id, secret: created.secret };
}

/** sendRotationTest sends a webhook.ping to the rotation's new subscription only and remembers its delivery. */
export async function sendRotationTest(rt: Runtime, id: string, now = Date.now()): Promise<void> {
  const view = await rotationView(rt.db, id);
  if (view.step !== "test") throw new ProblemError(409, "rotation-closed", view.step === "done" ? "This rotation is finished." : "The new subscription of this rotation was deleted.");
  const sent = await sendTestEvent(rt, id);
  await setRotationTestDelivery(rt.db, id, sent.delivery_id, now);
}

/**
 * finishRotation deletes the old subscription, which the wizard allows only after a test event
 * reached the new one and the operator confirmed; a finished rotation stays finished.
 */
export async function finishRotation(rt: Runtime, id: string, confirmed: boolean, now = Date.now()): Promise<void> {
  const view = await rotationView(rt.db, id);
  if (view.step === "done") return;
  if (view.step === "abandoned") throw new ProblemError(409, "rotation-closed", "The new subscription of this rotation was deleted; start a new rotation.");
  if (view.test?.status !== "succeeded") {
    throw new ProblemError(409, "rotation-untested", "The old subscription can be deleted only after a test event was delivered successfully to the new one.");
  }
  if (view.old.subscription) {
    if (!confirmed) throw validationProblem([{ pointer: "/confirm", detail: "must be ticked" }], "Tick the box to confirm that the old subscription is to be deleted.");
    try {
      await deleteSubscription(rt, view.old.id);
    } catch (error) {
      // Deleted meanwhile (another tab, the API): the goal is reached all the same.
      if (!(error instanceof ProblemError && error.status === 404)) throw error;
    }
  }
  await markRotationCompleted(rt.db, id, now);
}

/** SecretRotationView is a secret rotation's state, derived from the subscription: its grace period and latest test event since the rotation. */
export interface SecretRotationView {
  subscription: Subscription;
  /** rotate: step 2 (no grace period running); test: steps 3 and 4 while both secrets sign */
  step: "rotate" | "test";
  test: DeliveryWatchView | null;
}

/** secretRotationView returns where the secret rotation of a subscription stands, or throws 404. */
export async function secretRotationView(db: Db, id: string, now = Date.now()): Promise<SecretRotationView> {
  const subscription = await getSubscription(db, id);
  const graceRunning = subscription.previous_secret_expires_at !== null && Date.parse(subscription.previous_secret_expires_at) > now;
  if (!graceRunning) return { subscription, step: "rotate", test: null };
  // The latest webhook.ping sent since the rotation is the wizard's test event.
  const since = new Date(Date.parse(subscription.secret_rotated_at!) - 1).toISOString();
  const [ping] = (await listDeliveriesPage(db, { subscription_id: id, event: "webhook.ping", created_after: since, per_page: "1" })).data;
  return { subscription, step: "test", test: ping ? await deliveryWatch(db, ping.id) : null };
}

/** rotateSecretFromForm rotates a subscription's secret with the grace period typed in hours, and returns the new secret (shown once). */
export async function rotateSecretFromForm(rt: Runtime, id: string, graceHours: string): Promise<string> {
  const text = graceHours.trim() === "" ? String(DEFAULT_SECRET_GRACE_HOURS) : graceHours.trim();
  if (!/^\d{1,3}$/.test(text) || Number(text) > MAX_SECRET_GRACE_HOURS) {
    throw validationProblem([{ pointer: "/grace_hours", detail: `must be a whole number of hours from 0 to ${MAX_SECRET_GRACE_HOURS}` }], `The grace period must be a whole number of hours from 0 to ${MAX_SECRET_GRACE_HOURS}.`);
  }
  return (await rotateSecret(rt, id, { grace_hours: Number(text) }, null)).body.data.secret;
}

/** sendSecretRotationTest sends a webhook.ping, signed with both secrets, while the rotation's grace period runs. */
export async function sendSecretRotationTest(rt: Runtime, id: string): Promise<void> {
  if ((await secretRotationView(rt.db, id)).step !== "test") throw new ProblemError(409, "rotation-closed", "No secret rotation is under way for this subscription: both secrets no longer sign.");
  await sendTestEvent(rt, id);
}

/** finishSecretRotation retires the previous secret, which the wizard allows only after a test event succeeded and the operator confirmed. */
export async function finishSecretRotation(rt: Runtime, id: string, confirmed: boolean): Promise<void> {
  const view = await secretRotationView(rt.db, id);
  if (view.step !== "test") return;
  if (view.test?.status !== "succeeded") throw new ProblemError(409, "rotation-untested", "The previous secret can be retired only after a test event was delivered successfully.");
  if (!confirmed) throw validationProblem([{ pointer: "/confirm", detail: "must be ticked" }], "Tick the box to confirm that the previous secret is to stop signing.");
  await endRotationGrace(rt, id);
}

/** editSubscriptionFromForm sets a subscription's description from the console's edit form (empty clears it). */
export async function editSubscriptionFromForm(rt: Runtime, id: string, description: string): Promise<void> {
  const text = description.trim();
  if (text.length > MAX_SUBSCRIPTION_DESCRIPTION_LENGTH) {
    throw validationProblem([{ pointer: "/description", detail: `must be at most ${MAX_SUBSCRIPTION_DESCRIPTION_LENGTH} characters` }], `The description must be at most ${MAX_SUBSCRIPTION_DESCRIPTION_LENGTH} characters.`);
  }
  await updateSubscription(rt, id, { description: text === "" ? null : text });
}

/** consoleTime reads a console date-time field (datetime-local, taken as UTC) into RFC 3339, or returns it unchanged for the API's check to refuse. */
function consoleTime(value: string): string {
  return /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$/.test(value) ? `${value}:00Z` : /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$/.test(value) ? `${value}Z` : value;
}

/** RecoveryPreview is a recovery window the operator picked and the failed deliveries it would send again. */
export interface RecoveryPreview {
  since: string;
  until: string;
  count: number;
}

/** recoveryPreview checks the window of the console's recover form and counts its failed deliveries, or throws 422 or 404. */
export async function recoveryPreview(db: Db, id: string, since: string, until: string, now = Date.now()): Promise<RecoveryPreview> {
  const window = recoveryWindow({ since: consoleTime(since), ...(until ? { until: consoleTime(until) } : {}) }, now);
  return { since: toTimestamp(window.since), until: toTimestamp(window.until), count: await countRecoverable(db, id, window) };
}

/** recoverFromForm queues the failed deliveries of the confirmed window again and returns how many. */
export async function recoverFromForm(rt: Runtime, id: string, since: string, until: string): Promise<number> {
  return (await recoverDeliveries(rt, id, { since: consoleTime(since), until: consoleTime(until) }, null)).body.data.queued;
}

/** createTokenFromForm creates an API token named in the console; the token is returned once. */
export async function createTokenFromForm(db: Db, name: string): Promise<{ token: string; info: ApiTokenInfo }> {
  const trimmed = name.trim();
  if (trimmed === "" || trimmed.length > 100) throw validationProblem([{ pointer: "/name", detail: "must be 1 to 100 characters" }], "The name must be 1 to 100 characters.");
  return createApiToken(db, trimmed);
}

/** revokeTokenFromConsole revokes an API token, or throws 404 when no active token has that id. */
export async function revokeTokenFromConsole(db: Database, id: string): Promise<void> {
  if (!(await revokeApiToken(db, id))) throw new ProblemError(404, "not-found", `No active API token with id ${JSON.stringify(id)} exists.`);
}

/** USERS_PER_PAGE is how many users the users page lists at once. */
const USERS_PER_PAGE = 50;

/** usersOnPage returns one page of users (page "1" when absent), or throws 422 for a page that is not a number. */
export async function usersOnPage(db: Db, page: string | undefined): Promise<{ data: User[]; meta: ListMeta }> {
  if (page !== undefined && !/^[1-9][0-9]{0,8}$/.test(page)) throw validationProblem([{ parameter: "page", detail: "must be a whole number of at least 1" }], "The page number must be a whole number of at least 1.");
  return listUsersPage(db, { per_page: String(USERS_PER_PAGE), ...(page ? { page } : {}) });
}
