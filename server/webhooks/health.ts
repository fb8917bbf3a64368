import { DELIVERY_LOOP, type ChangeOrigin } from "../shared/made-by.ts";
import { writeInSteps, type Database, type Db } from "../db/sql.ts";
import type { Logger } from "../shared/log.ts";
import { HOUR_MS, toTimestamp } from "../shared/time.ts";
import type { AttemptResult } from "./delivery.ts";
import { OPERATIONAL_EVENT_TYPES } from "./model.ts";
import { recordEvent } from "./outbox.ts";
import { countUnsentDeliveriesOf, disableSubscription, failUnsentDeliveries, findStoppedSubscriptionsWithPending, findSubscriptionById, markSubscriptionFailing, type DueDelivery, type SubscriptionRow } from "./store.ts";

/** duration says a span in the unit an operator reads best: seconds, minutes or hours. */
function duration(ms: number): string {
  if (ms < 60_000) return `${Math.round(ms / 100) / 10} s`;
  if (ms < 2 * HOUR_MS) return `${Math.round(ms / 6000) / 10} min`;
  return `${Math.round((ms / HOUR_MS) * 10) / 10} h`;
}

/** GONE_REASON begins the disabled_reason of a subscription whose receiver answered 410 Gone. */
const GONE_REASON = "the receiver answered 410 Gone to delivery";

/** MAKER_REMOVED_REASON begins the disabled_reason of a subscription disabled with the removal of the operator who made it, or made its API token. */
export const MAKER_REMOVED_REASON = "the operator who made";

/**
 * unsentReason is the last_error of a pending delivery failed because its subscription stopped:
 * deleted (null), or disabled by a secrets key reset, a 410 Gone, its maker's removal or a failing streak. Told by the
 * subscription as it is, so a start finishing a stop its process did not (failStoppedDeliveries)
 * says what the stop would have said.
 */
function unsentReason(subscription: SubscriptionRow | null): string {
  if (subscription === null) return "not sent: the subscription was deleted";
  if (subscription.secret_lost_at !== null) return "not sent: the subscription was disabled when its signing secret was lost with the secrets key";
  if (subscription.disabled_reason?.startsWith(GONE_REASON)) return "not sent: the subscription was disabled after its receiver answered 410 Gone";
  if (subscription.disabled_reason?.startsWith(MAKER_REMOVED_REASON)) return "not sent: the subscription was disabled with the removal of the operator who made it";
  return "not sent: the subscription was disabled after its attempts failed for too long";
}

/**
 * OpenAttempts returns the ids of a subscription's deliveries with an attempt open in this process
 * (DeliveryLoop.openAttemptsOf), not recorded yet: a stop leaves them to their attempts, their
 * leases run out or not.
 */
export type OpenAttempts = (subscriptionId: string) => readonly string[];

/** NO_OPEN_ATTEMPTS is the OpenAttempts of a process that sends nothing (a crm command): another's open attempts are theirs to record (recordAttempt). */
export const NO_OPEN_ATTEMPTS: OpenAttempts = () => [];

/**
 * failStoppedDeliveries fails the pending deliveries of a deleted or disabled subscription, at most
 * `chunk` per write, once the write that stopped it has committed: nothing claims them meanwhile
 * (claims take active subscriptions only), and the writes of others take their turns between
 * chunks. Those with an attempt under way are left to it (failUnsentDeliveries), those `openHere`
 * too: one whose instance stopped without ending it is failed by the sweep once its lease has run out. An active subscription (enabled again) has none to fail. Each write's deliveries are told
 * to `failedUnsent` once it has committed. It ends early when `keepGoing` turns false (a stop); the
 * delivery loop's sweep finishes what a stop or a refused write leaves (failEveryStoppedDelivery).
 */
export async function failStoppedDeliveries(db: Database, subscriptionId: string, chunk: number, failedUnsent: (count: number) => void, openHere: OpenAttempts, keepGoing: () => boolean = () => true): Promise<void> {
  // Counted as each write commits, not as the stop found them pending: an attempt may end its
  // delivery in between (failed, the subscription stopped, or succeeded), and counts it.
  let uncommitted = 0;
  const committed = () => {
    failedUnsent(uncommitted);
    uncommitted = 0;
  };
  await writeInSteps(db, async (tx) => {
    // A step after the first begins once the write before it has committed.
    committed();
    const subscription = await findSubscriptionById(tx, subscriptionId);
    if (subscription?.status === "active") return true;
    // Asked at each write: attempts open at the first may have been recorded since, and new ones are not claimed.
    uncommitted = await failUnsentDeliveries(tx, subscriptionId, unsentReason(subscription), Date.now(), chunk, openHere(subscriptionId));
    return uncommitted < chunk || !keepGoing() ? true : null;
  }, (steps) => `${steps * chunk} of the subscription's pending deliveries were failed (not sent)`);
  committed();
}

/** StoppedLookFailed is a sweep whose look for stopped subscriptions with pending deliveries failed: it found nothing left unsent, and changed nothing. */
export class StoppedLookFailed extends Error {
  constructor(override readonly cause: unknown) {
    super(`the look for stopped subscriptions' pending deliveries failed: ${String(cause)}`);
  }
}

/** failEveryStoppedDelivery finishes the stops whose pending deliveries a stopped process or a refused write left (failStoppedDeliveries); the delivery loop runs it at start and every STOPPED_SWEEP_MS. */
export async function failEveryStoppedDelivery(db: Database, chunk: number, failedUnsent: (count: number) => void, openHere: OpenAttempts, keepGoing: () => boolean): Promise<void> {
  const stopped = await db.read(findStoppedSubscriptionsWithPending).catch((error: unknown) => {
    throw new StoppedLookFailed(error);
  });
  for (const id of stopped) {
    if (!keepGoing()) return;
    await failStoppedDeliveries(db, id, chunk, failedUnsent, openHere, keepGoing);
  }
}

/**
 * disableWithEvent disables an active subscription, counts its pending deliveries that no attempt
 * holds (failed by failStoppedDeliveries once the write has committed; those under way, leased or
 * `openHere`, are their attempts' to end, and counted by none) and records a subscription.disabled event
 * for the subscriptions that want to hear of it, the disable and the event made by `origin` (a
 * request, a command, DELIVERY_LOOP), all in the caller's transaction; it returns the number of pending deliveries the disable fails.
 */
export async function disableWithEvent(db: Db, subscription: SubscriptionRow, reason: string, now: number, origin: ChangeOrigin, openHere: OpenAttempts): Promise<number> {
  await disableSubscription(db, subscription.id, reason, now, origin.madeBy);
  const failed = await countUnsentDeliveriesOf(db, subscription.id, now, openHere(subscription.id));
  await recordEvent(
    db,
    "subscription.disabled",
    {
      subscription_id: subscription.id,
      target_url: subscription.target_url,
      description: subscription.description,
      reason,
      disabled_at: toTimestamp(now),
      failing_since: subscription.failing_since === null ? null : toTimestamp(subscription.failing_since),
      pending_deliveries_failed: failed,
    },
    origin,
    now,
  );
  return failed;
}

/**
 * disableGone disables an active subscription whose receiver answered 410 Gone to delivery
 * `deliveryId`, as disableWithEvent does (`openHere` alike). The 410 is a failed attempt like any other (the stats
 * count it so), so it begins the failing streak when none runs: failing_since, on the
 * subscription and in the event, says since when its attempts fail.
 */
export async function disableGone(db: Db, subscription: SubscriptionRow, deliveryId: string, now: number, openHere: OpenAttempts): Promise<number> {
  if (subscription.failing_since === null) await markSubscriptionFailing(db, subscription.id, now);
  const failing = { ...subscription, failing_since: subscription.failing_since ?? now };
  // The delivery loop's own: a manual attempt's 410 disables too, but its receiver's answer did, not the request.
  return disableWithEvent(db, failing, `${GONE_REASON} ${deliveryId}`, now, DELIVERY_LOOP, openHere);
}

/** isOperational tells whether an event kind is one of ours about webhooks themselves (never reported on again). */
const isOperational = (eventType: string) => (OPERATIONAL_EVENT_TYPES as readonly string[]).includes(eventType);

/**
 * recordExhausted records a delivery.exhausted event for a delivery that used up its scheduled
 * attempts. Deliveries of operational events are left out, so a dying on-call receiver cannot
 * feed itself an endless chain of reports about its own failures.
 */
export async function recordExhausted(db: Db, due: DueDelivery, attempts: number, result: AttemptResult, now: number): Promise<void> {
  if (isOperational(due.event_type)) return;
  await recordEvent(
    db,
    "delivery.exhausted",
    {
      delivery_id: due.id,
      subscription_id: due.subscription_id,
      event_type: due.event_type,
      target_url: due.target_url,
      attempts,
      last_response_status: result.response_status,
      last_error: result.error,
    },
    DELIVERY_LOOP,
    now,
  );
}

/** StreakDisable is a disable trackFailingStreak made: the subscription, since when its attempts failed, and how many pending deliveries it failed. */
export interface StreakDisable {
  subscription: Pick<SubscriptionRow, "id" | "target_url">;
  failingSince: number;
  pendingFailed: number;
}

/**
 * trackFailingStreak, after a failed attempt, notes when the subscription's attempts started
 * failing (any success clears it: markSubscriptionsHealthy) and disables it, with a reason, once
 * every attempt for `disableAfterHours` has failed (0: never; the streak is still noted for the
 * API and the console; `openHere` as disableWithEvent's). `subscription` is the row as read before this attempt. It returns the
 * disable, or null without one: log it (logStreakDisable) once the write has committed.
 */
export async function trackFailingStreak(db: Db, disableAfterHours: number, subscription: SubscriptionRow, now: number, openHere: OpenAttempts): Promise<StreakDisable | null> {
  if (subscription.failing_since === null) {
    await markSubscriptionFailing(db, subscription.id, now);
    return null;
  }
  if (subscription.status !== "active" || disableAfterHours === 0 || now - subscription.failing_since < disableAfterHours * HOUR_MS) return null;
  const reason = `every attempt failed since ${toTimestamp(subscription.failing_since)}, for ${duration(now - subscription.failing_since)} (the limit is ${duration(disableAfterHours * HOUR_MS)}); enable it once the receiver works again`;
  const pendingFailed = await disableWithEvent(db, subscription, reason, now, DELIVERY_LOOP, openHere);
  return { subscription, failingSince: subscription.failing_since, pendingFailed };
}

/**
 * logStreakDisable logs a disable of trackFailingStreak, once its write has committed: a write
 * rolled back (and perhaps made again) would otherwise log a disable that did not happen, or twice.
 */
export function logStreakDisable(log: Logger, disableAfterHours: number, { subscription, failingSince }: StreakDisable): void {
  // The host, not the URL: a target URL can carry its receiver's secret (a token in the path or query).
  log.warn("webhook subscription disabled: every attempt failed for too long", {
    subscription_id: subscription.id,
    target_host: new URL(subscription.target_url).host,
    failing_since: toTimestamp(failingSince),
    disable_failing_after_hours: disableAfterHours,
  });
}
