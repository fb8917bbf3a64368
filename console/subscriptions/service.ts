import { createHash } from "node:crypto";
import type { Database, Db } from "../../server/db/sql.ts";
import { fieldsChecker } from "../../server/http/schema-errors.ts";
import type { Runtime } from "../../server/runtime.ts";
import { notFound, ProblemError, validationProblem } from "../../server/shared/problem.ts";
import { changeMakerOf, madeByOf, madeByOperator, type ChangeMaker, type ChangeOrigin, type MadeBy, type MakerNames } from "../../server/shared/made-by.ts";
import { makerNames } from "../../server/auth/service.ts";
import { toOptionalTimestamp, toTimestamp } from "../../server/shared/time.ts";
import { SecretRotationInput, SubscriptionInput, SubscriptionUpdate, type Subscription, type SubscriptionWithSecret } from "../../server/webhooks/model.ts";
import {
  addSubscription,
  addTestEvent,
  checkSubscriptionTarget,
  countMatchingDeliveries,
  countRecoverable,
  createSubscription,
  endRotationGrace,
  findSubscription,
  getSubscription,
  listAllSubscriptions,
  openReplayedSecret,
  recoverDeliveries,
  recoveryWindow,
  replaceSecret,
  subscriptionDeliveryCounts,
  subscriptionRemoved,
  toSubscription,
  updateSubscription,
} from "../../server/webhooks/service.ts";
import { CONSOLE_SUBSCRIPTION_FORM_PATH, deleteSubscription as deleteSubscriptionRow, findSubscriptionById, listLostSecretSubscriptionIds, setSecretRotationTest, shownStatus, type SubscriptionRow } from "../../server/webhooks/store.ts";
import { findDeliveryWatch } from "../deliveries/service.ts";
import type { Operator } from "../../server/operators/model.ts";
import type { ConsoleSession, DeliveryWatchView } from "../model.ts";
import { disabledBecause, isolated, receiverUrl } from "../pages/parts.tsx";
import { changeOnceForForm, consoleTime, onceForForm } from "../shell.ts";
import { findRotation, insertRotation, listOpenRotations, listSubscriptionMakers, markRotationCompleted, setRotationTestDelivery, type RotationRow } from "./store.ts";

/** RECENT_MS is the span of the success and failure counts on the subscriptions page. */
const RECENT_MS = 24 * 60 * 60 * 1000;


/** SubscriptionForm is what the create form and the rotation wizard post. */
export interface SubscriptionForm {
  target_url: string;
  description: string;
  events: string[];
  /** requests per second, as typed; "" or absent for no cap */
  max_rate?: string;
}

const checkSubscriptionInput = fieldsChecker(SubscriptionInput);
const checkSecretRotationInput = fieldsChecker(SecretRotationInput);

/**
 * typedWholeNumber reads a whole number typed into a form field as a number; anything else stays
 * the text typed (" 5" too, as the API refuses it), so the API's model names the field.
 */
function typedWholeNumber(text: string): number | string {
  return /^\d{1,9}$/.test(text) ? Number(text) : text;
}

/** subscriptionInputFrom reads a subscription form into the API's SubscriptionInput and checks it with the API's own model and limits. */
function subscriptionInputFrom(form: SubscriptionForm): SubscriptionInput {
  const description = form.description.trim();
  const maxRate = form.max_rate ?? "";
  // Repeated events are left for the model to refuse, as the API does.
  const candidate = {
    target_url: form.target_url.trim(),
    events: form.events,
    ...(description ? { description } : {}),
    ...(maxRate ? { max_rate: typedWholeNumber(maxRate) } : {}),
  };
  return checkSubscriptionInput(candidate);
}

/**
 * createSubscriptionFromForm creates a subscription from the console form and returns it with its
 * secret (shown once), once per form key: the form sent again gets the same subscription and secret.
 */
export async function createSubscriptionFromForm(rt: Runtime, session: ConsoleSession, form: SubscriptionForm, formKey: string, requestId: string): Promise<SubscriptionWithSecret> {
  const input = subscriptionInputFrom(form);
  const answer = await onceForForm(rt, { session, path: CONSOLE_SUBSCRIPTION_FORM_PATH, key: formKey, values: input }, (scope) => createSubscription(rt, input, madeByOperator(session.operator), scope, requestId));
  return (await openReplayedSecret(rt, answer.body)).data;
}

/**
 * deleteSubscriptionFromForm deletes a subscription once per form key: the confirm form sent
 * again (a double click) answers as the first did, where the delete alone would be 404 by then.
 */
export async function deleteSubscriptionFromForm(rt: Runtime, session: ConsoleSession, id: string, formKey: string): Promise<void> {
  await changeOnceForForm(rt, { session, path: `/console/subscriptions/${id}/delete`, key: formKey }, async (tx) => {
    if (!(await deleteSubscriptionRow(tx, id))) throw notFound("webhook subscription", id);
    return { deleted: id };
  });
  // A replay finds nothing left to fail, or fails and counts what the first sending's process left.
  await subscriptionRemoved(rt, id);
}

/** SubscriptionChoice is a subscription and the rotation away from it that is still open, if any. */
export interface SubscriptionChoice {
  subscription: Subscription;
  rotationId: string | null;
}

/** SubscriptionOverview adds a subscription's delivery counts of the last 24 hours, whether its secret must be rotated before it can be enabled, and who made it. */
export interface SubscriptionOverview extends SubscriptionChoice {
  counts: { succeeded: number; failed: number; pending: number };
  /** its secret was lost with the secrets key (crm secrets-key reset): enable is refused until a rotation */
  secretLost: boolean;
  /** null: made before migration 0047, unknown */
  madeBy: MadeBy | null;
}

/** openRotationsFrom maps each subscription being rotated away from to its rotation (whose new subscription still exists). */
async function openRotationsFrom(db: Db): Promise<Map<string, string>> {
  const open = new Map<string, string>();
  for (const row of await listOpenRotations(db)) {
    if (!open.has(row.old_subscription_id) && (await findSubscription(db, row.new_subscription_id))) open.set(row.old_subscription_id, row.new_subscription_id);
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
  return (await listAllSubscriptions(db)).map((subscription) => ({ subscription, rotationId: open.get(subscription.id) ?? null }));
}

/** subscriptionsOverview lists every subscription with its recent counts and maker, what names the makers, and the rotations still open. */
export function subscriptionsOverview(db: Database, now = Date.now()): Promise<{ subscriptions: SubscriptionOverview[]; rotations: RotationView[]; names: MakerNames }> {
  return db.read(async (snapshot) => {
    const counts = await subscriptionDeliveryCounts(snapshot, now - RECENT_MS);
    const rotations = (await Promise.all((await listOpenRotations(snapshot)).map((row) => toRotationView(snapshot, row)))).filter((r) => r.step !== "abandoned");
    const lost = await listLostSecretSubscriptionIds(snapshot);
    const makers = new Map((await listSubscriptionMakers(snapshot)).map((row) => [row.id, madeByOf(row)]));
    return {
      subscriptions: (await subscriptionChoices(snapshot)).map((choice) => ({
        ...choice,
        counts: counts.get(choice.subscription.id) ?? { succeeded: 0, failed: 0, pending: 0 },
        secretLost: lost.has(choice.subscription.id),
        madeBy: makers.get(choice.subscription.id) ?? null,
      })),
      rotations,
      names: await makerNames(snapshot),
    };
  });
}

/** SubscriptionMakers are who made a subscription (migration 0047) and who made its pause, its disable and its last change (0052); null: unknown, or none. */
export interface SubscriptionMakers {
  madeBy: MadeBy | null;
  pausedBy: ChangeMaker | null;
  disabledBy: ChangeMaker | null;
  updatedBy: ChangeMaker | null;
}

/** subscriptionMakers returns who made a subscription and its pause, disable and last change, or throws 404. */
export async function subscriptionMakers(db: Db, id: string): Promise<SubscriptionMakers> {
  const row = await findSubscriptionById(db, id);
  if (!row) throw notFound("webhook subscription", id);
  return { madeBy: madeByOf(row), pausedBy: changeMakerOf(row.paused_by), disabledBy: changeMakerOf(row.disabled_by), updatedBy: changeMakerOf(row.updated_by) };
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
  // Retention may have removed an old test delivery (null); the wizard then asks for a new test.
  const test = row.test_delivery_id ? await findDeliveryWatch(db, row.test_delivery_id) : null;
  const old = await findSubscription(db, row.old_subscription_id);
  return {
    id: row.new_subscription_id,
    old: { id: row.old_subscription_id, target_url: row.old_target_url, description: row.old_description, subscription: old },
    replacement,
    oldPending: old ? await countMatchingDeliveries(db, { subscriptionId: old.id, status: "pending" }) : 0,
    test,
    step: row.completed_at !== null ? "done" : replacement ? "test" : "abandoned",
    created_at: toTimestamp(row.created_at),
    completed_at: toOptionalTimestamp(row.completed_at),
  };
}

/** rotationView returns the state of one rotation, read in one snapshot, or throws 404. */
export function rotationView(db: Database, id: string): Promise<RotationView> {
  return db.read(async (snapshot) => {
    const row = await findRotation(snapshot, id);
    if (!row) throw notFound("rotation", id);
    return toRotationView(snapshot, row);
  });
}

/**
 * startRotation creates the new subscription, made by `operator`, that is to replace `oldId` and returns the rotation
 * with the new secret (shown once). If a rotation away from `oldId` is already under way it is
 * returned instead: with its secret while it has sent no test event, so the form sent twice (a
 * double click, a retry) is answered alike, as an idempotent retry of the API is; later without.
 * The check and the creation commit together, so the form sent twice at once starts one rotation.
 */
export async function startRotation(rt: Runtime, operator: Operator, oldId: string, form: SubscriptionForm, requestId: string, now = Date.now()): Promise<{ id: string; secret: string | null }> {
  const input = subscriptionInputFrom(form);
  await checkSubscriptionTarget(rt, input.target_url, requestId);
  return rt.db.write(async (tx) => {
    const old = await getSubscription(tx, oldId);
    const open = await openRotationFrom(tx, oldId);
    if (open) {
      const untested = (await findRotation(tx, open))!.test_delivery_id === null;
      return { id: open, secret: untested ? rt.secrets.open(open, (await findSubscriptionById(tx, open))!.secret) : null };
    }
    const created = (await addSubscription(rt, tx, input, madeByOperator(operator), null)).body.data;
    await insertRotation(tx, { new_subscription_id: created.id, old_subscription_id: old.id, old_target_url: old.target_url, old_description: old.description ?? "", created_at: now });
    return { id: created.id, secret: created.secret };
  });
}

/**
 * addWizardTestEvent is addTestEvent for the rotation wizards: a disabled subscription is refused in
 * the console's words, naming its Enable button; the API's words name the API's route. A paused one
 * is refused too, naming its Resume button, though the API would queue the ping: the wizard's step
 * waits for the test's answer, which would not come until someone resumed the subscription.
 */
function addWizardTestEvent(tx: Db, row: SubscriptionRow, origin: ChangeOrigin, now: number): Promise<{ delivery_id: string; event_id: string }> {
  const name = isolated(row.description ?? receiverUrl(row.target_url));
  if (row.status === "disabled") {
    throw new ProblemError(409, "subscription-disabled", `No test event was sent: the subscription ${name} is disabled${disabledBecause(row.disabled_reason)}. Enable it with its Enable button on the Subscriptions page, then send the test event again.`);
  }
  if (shownStatus(row) === "paused") {
    throw new ProblemError(
      409,
      "subscription-paused",
      `No test event was sent: the subscription ${name} is paused, and the test event would wait until it is resumed. Resume it with its Resume button on the Subscriptions page (its pending deliveries then go out), then send the test event again.`,
    );
  }
  return addTestEvent(tx, row, origin, now);
}

/**
 * sendRotationTest sends a webhook.ping to the rotation's new subscription only and remembers its
 * delivery, in one commit: a ping the rotation does not know of would leave the wizard asking for
 * a test that was sent. Once per form key: sent twice (a double click), it sends one ping, made by
 * the console's request `origin`.
 */
export async function sendRotationTest(rt: Runtime, session: ConsoleSession, id: string, formKey: string, origin: ChangeOrigin): Promise<void> {
  await changeOnceForForm(rt, { session, path: `/console/rotations/${id}/test`, key: formKey }, async (tx, now) => {
    const rotation = await findRotation(tx, id);
    if (!rotation) throw notFound("rotation", id);
    if (rotation.completed_at !== null) throw new ProblemError(409, "rotation-closed", "This rotation is finished.");
    const replacement = await findSubscriptionById(tx, id);
    if (!replacement) throw new ProblemError(409, "rotation-closed", "The new subscription of this rotation was deleted.");
    const sent = await addWizardTestEvent(tx, replacement, origin, now);
    await setRotationTestDelivery(tx, id, sent.delivery_id, now);
    return sent;
  });
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
  if (view.old.subscription && !confirmed) throw validationProblem([{ pointer: "/confirm", detail: "must be ticked" }], "Tick the box to confirm that the old subscription is to be deleted.");
  // One commit, so the rotation is never seen with its old subscription gone and itself not done.
  // An old subscription deleted meanwhile (another tab, the API) reaches the goal all the same.
  await rt.db.write(async (tx) => {
    await deleteSubscriptionRow(tx, view.old.id);
    await markRotationCompleted(tx, id, now);
  });
  await subscriptionRemoved(rt, view.old.id);
}

/** SecretRotationView is a secret rotation's state, derived from the subscription: its grace period and latest test event since the rotation. */
export interface SecretRotationView {
  subscription: Subscription;
  /** rotate: step 2 (no grace period running); test: steps 3 and 4 while both secrets sign */
  step: "rotate" | "test";
  test: DeliveryWatchView | null;
  /** names the current secret (secretTag), so the rotate form says which secret it rotates away from */
  secretTag: string;
}

/**
 * secretTag names one stored secret without telling anything about it: a digest of its sealed
 * form, which is sealed afresh (with a new nonce) for every secret: the rotate form names by it the
 * secret it rotates away from, and its kept answer the secret its rotation made.
 */
function secretTag(sealed: string): string {
  return createHash("sha256").update(sealed).digest("base64url").slice(0, 22);
}

/** secretRotationView returns where the secret rotation of a subscription stands, or throws 404. */
export function secretRotationView(db: Database, id: string, now = Date.now()): Promise<SecretRotationView> {
  return db.read(async (snapshot) => {
    const row = await findSubscriptionById(snapshot, id);
    if (!row) throw notFound("webhook subscription", id);
    const subscription = toSubscription(row);
    const secretTagOfRow = secretTag(row.secret);
    if (!graceRunning(row, now)) return { subscription, step: "rotate", test: null, secretTag: secretTagOfRow };
    // The ping the wizard sent since the rotation, by its id: the stamps of two instances' clocks cannot tell which came after the rotation.
    const test = row.secret_test_delivery_id === null ? null : await findDeliveryWatch(snapshot, row.secret_test_delivery_id);
    return { subscription, step: "test", test, secretTag: secretTagOfRow };
  });
}

/** graceRunning tells whether a subscription's previous secret still signs. */
function graceRunning(row: SubscriptionRow, now: number): boolean {
  return row.previous_secret !== null && row.previous_secret_expires_at !== null && row.previous_secret_expires_at > now;
}

/**
 * ROTATION_REPLAY_MS is how long after its rotation the rotate-secret form sent again (a double
 * click, a retry, a reload of its answer) shows the secret it made: long enough for those, too
 * short for a tab left open to be the way to read a subscription's secret.
 */
const ROTATION_REPLAY_MS = 10 * 60_000;

function rotatedMeanwhile(): ProblemError {
  return new ProblemError(409, "secret-rotated-meanwhile", "The secret was rotated since this page was shown, so it was not rotated again; the page now shows where that rotation stands.");
}

/**
 * rotateSecretFromForm rotates a subscription's secret away from the one the form was shown with
 * (`formSecretTag`), with the grace period typed in hours, and returns the new secret (shown once),
 * once per form key: rotating again would drop the secret the receiver still uses before the grace
 * period began. The form sent again by the operator who sent it gets the secret its own rotation
 * made (its kept answer names it by its secretTag) while that is still the current secret, for
 * ROTATION_REPLAY_MS. Any other sending of a form shown before a rotation (another operator's, a
 * tab left open, a rotation by the API since) rotates nothing and shows no secret: 409.
 */
export async function rotateSecretFromForm(rt: Runtime, session: ConsoleSession, id: string, form: { graceHours: string; secretTag: string; formKey: string }): Promise<string> {
  // Checked with the API's model, as the subscription form's max_rate is; left empty, the API's default.
  const input = checkSecretRotationInput(form.graceHours === "" ? {} : { grace_hours: typedWholeNumber(form.graceHours) });
  let made = "";
  const path = `/console/subscriptions/${id}/rotate-secret`;
  const { body, replayed } = await changeOnceForForm(rt, { session, path, key: form.formKey, values: { ...input, secret_tag: form.secretTag } }, async (tx) => {
    const row = await findSubscriptionById(tx, id);
    if (!row) throw notFound("webhook subscription", id);
    if (secretTag(row.secret) !== form.secretTag) throw rotatedMeanwhile();
    made = (await replaceSecret(rt, tx, id, input, null, madeByOperator(session.operator)))!.body.data.secret;
    return { secret_tag: secretTag((await findSubscriptionById(tx, id))!.secret) };
  });
  if (!replayed) return made;
  const row = await findSubscriptionById(rt.db, id);
  if (!row) throw notFound("webhook subscription", id);
  if (secretTag(row.secret) !== body.secret_tag || row.secret_rotated_at === null || Date.now() - row.secret_rotated_at > ROTATION_REPLAY_MS) throw rotatedMeanwhile();
  return rt.secrets.open(id, row.secret);
}

/**
 * sendSecretRotationTest sends a webhook.ping while the rotation's grace period runs, and remembers
 * its delivery as the rotation's test, in one commit: a ping the wizard does not know of would leave
 * it asking for a test that was sent, and the record is what has the ping signed with the new secret
 * alone (signingSecrets). Once per form key: sent twice (a double click), it sends one ping, made
 * by the console's request `origin`.
 */
export async function sendSecretRotationTest(rt: Runtime, session: ConsoleSession, id: string, formKey: string, origin: ChangeOrigin): Promise<void> {
  await changeOnceForForm(rt, { session, path: `/console/subscriptions/${id}/secret-rotation/test`, key: formKey }, async (tx, now) => {
    const row = await findSubscriptionById(tx, id);
    if (!row) throw notFound("webhook subscription", id);
    if (!graceRunning(row, now)) throw new ProblemError(409, "rotation-closed", "No secret rotation is under way for this subscription: both secrets no longer sign.");
    const sent = await addWizardTestEvent(tx, row, origin, now);
    await setSecretRotationTest(tx, id, sent.delivery_id);
    return sent;
  });
}

/** finishSecretRotation retires the previous secret, which the wizard allows only after a test event succeeded and the session's operator confirmed. */
export async function finishSecretRotation(rt: Runtime, session: ConsoleSession, id: string, confirmed: boolean): Promise<void> {
  const view = await secretRotationView(rt.db, id);
  if (view.step !== "test") return;
  if (view.test?.status !== "succeeded") throw new ProblemError(409, "rotation-untested", "The previous secret can be retired only after a test event was delivered successfully.");
  if (!confirmed) throw validationProblem([{ pointer: "/confirm", detail: "must be ticked" }], "Tick the box to confirm that the previous secret is to stop signing.");
  await endRotationGrace(rt, id, madeByOperator(session.operator));
}

const checkSubscriptionUpdate = fieldsChecker(SubscriptionUpdate);

/** editSubscriptionFromForm sets a subscription's description from the console's edit form (empty clears it), checked with the API's update model, made by the session's operator. */
export async function editSubscriptionFromForm(rt: Runtime, session: ConsoleSession, id: string, description: string): Promise<void> {
  const text = description.trim();
  await updateSubscription(rt, id, checkSubscriptionUpdate({ description: text === "" ? null : text }), madeByOperator(session.operator));
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

/** recoverFromForm queues the failed deliveries of the confirmed window again and returns how many, once per form key: sent twice, both answers give the first count. */
export async function recoverFromForm(rt: Runtime, session: ConsoleSession, id: string, since: string, until: string, formKey: string): Promise<number> {
  const input = { since: consoleTime(since), until: consoleTime(until) };
  return (await onceForForm(rt, { session, path: `/console/subscriptions/${id}/recover`, key: formKey, values: input }, (scope) => recoverDeliveries(rt, id, input, scope))).body.data.queued;
}