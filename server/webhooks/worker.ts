import { databaseFailureOf } from "../db/backend.ts";
import { MAX_SUBSCRIPTIONS, RETRY_AFTER_CAP_MS } from "../limits/limits.ts";
import type { Database, Db } from "../db/sql.ts";
import { ConfigError, type Config } from "../config.ts";
import { SpacedLine, type Logger } from "../shared/log.ts";
import { settlesWithin, toTimestamp } from "../shared/time.ts";
import { AttemptInterrupted, sendAttempt, signingSecrets, type AttemptResult } from "./delivery.ts";
import { SecretUnreadable, type SecretBox } from "./secrets.ts";
import type { Network } from "./targets.ts";
import { disableGone, failEveryStoppedDelivery, failStoppedDeliveries, logStreakDisable, recordExhausted, StoppedLookFailed, trackFailingStreak, type StreakDisable } from "./health.ts";
import { ReceiverCaps } from "./receiver-caps.ts";
import { addAttemptStats } from "./stats.ts";
import {
  countLateAttempt,
  countLeases,
  findDeletedSubscriptions,
  findDeliveryToSend,
  findDueDeliveriesOf,
  findNextWakeTime,
  findStoredDelivery,
  isEventErased,
  findSubscriptionById,
  findSubscriptionsWithDueDeliveries,
  holdSendPacing,
  insertAttempt,
  leaseDeliveries,
  lockSubscriptionsWithDueDeliveries,
  holdSubscription,
  markSubscriptionsHealthy,
  readDatabaseClock,
  releaseLeases,
  setSendPacing,
  updateDeliveryAfterAttempt,
  type ClaimTimes,
  type DeliveryRow,
  type DueDelivery,
  type StoredDelivery,
  type SubscriptionRow,
} from "./store.ts";

/** MAX_IN_FLIGHT bounds the attempts running at once over all subscriptions. */
export const MAX_IN_FLIGHT = 128;
/** MAX_PER_SUBSCRIPTION bounds one receiver's share, so a slow one cannot hold up the others. */
export const MAX_PER_SUBSCRIPTION = 32;
/**
 * GUARANTEED_PER_SUBSCRIPTION attempts a subscription may always run, past MAX_IN_FLIGHT: a few
 * slow receivers at their MAX_PER_SUBSCRIPTION fill every slot between them, and would otherwise
 * hold up every other receiver until their attempts time out. One, not more: MAX_IN_FLIGHT plus
 * this many for each of MAX_SUBSCRIPTIONS must stay within BUN_FETCH_LIMIT.
 */
export const GUARANTEED_PER_SUBSCRIPTION = 1;
/**
 * RESERVED_SLOTS are the last of an instance's MAX_IN_FLIGHT slots, kept for subscriptions with
 * fewer than RESERVED_SHARE requests open there: a subscription with more starts another only while
 * fewer than MAX_IN_FLIGHT - RESERVED_SLOTS requests are open. Receivers that hang or answer slowly
 * hold their slots until their attempts end, so at MAX_PER_SUBSCRIPTION each a few would otherwise
 * fill every slot, and leave every other subscription its guaranteed share alone. Counted in open
 * requests, not in attempts under way: an attempt whose answer is in and waits to be recorded
 * holds no receiver up, and counting it would keep healthy receivers out of the slots past the
 * reserve whenever the database is slow to commit.
 */
export const RESERVED_SLOTS = 32;
/** RESERVED_SHARE is how many requests a subscription may have open in the RESERVED_SLOTS: a healthy receiver beside hung ones still gets that many at once. */
export const RESERVED_SHARE = 4;
if (RESERVED_SHARE < GUARANTEED_PER_SUBSCRIPTION) throw new Error("a subscription's share of the reserved slots is less than its guaranteed share");
/**
 * BUN_FETCH_LIMIT is how many requests Bun's fetch sends at once: BUN_CONFIG_MAX_HTTP_REQUESTS,
 * 256 by default, read once when the process starts (checkFetchLimit refuses less than the loop
 * needs). One more waits inside Bun's HTTP client with its attempt's timeout already running, so a
 * healthy receiver's attempts queued behind hung ones would be recorded as timeouts, and sent again.
 */
const BUN_FETCH_LIMIT = 256;
/** MAX_BUN_FETCH_LIMIT is the largest BUN_CONFIG_MAX_HTTP_REQUESTS Bun reads (a 16-bit number); it ignores any other value. */
const MAX_BUN_FETCH_LIMIT = 65535;
/** MAX_MANUAL_ATTEMPTS bounds the manual attempts (POST .../retry) under way at once; one more is refused. */
export const MAX_MANUAL_ATTEMPTS = 16;
/**
 * MAX_SCHEDULED_ATTEMPTS bounds the loop's attempts, guaranteed ones included: subscriptions
 * deleted while their attempts hang here (a delete aborts them on every instance, but here only
 * up to a poll later when its notification is lost: the notify failed, or this listening
 * connection was down), and others made in their place, would otherwise get shares beyond MAX_SUBSCRIPTIONS'.
 */
const MAX_SCHEDULED_ATTEMPTS = MAX_IN_FLIGHT + GUARANTEED_PER_SUBSCRIPTION * MAX_SUBSCRIPTIONS;
/** MAX_ATTEMPTS_AT_ONCE is the most requests the loop has Bun's fetch send at once, scheduled and manual. */
export const MAX_ATTEMPTS_AT_ONCE = MAX_SCHEDULED_ATTEMPTS + MAX_MANUAL_ATTEMPTS;
if (MAX_ATTEMPTS_AT_ONCE > BUN_FETCH_LIMIT) {
  throw new Error(`webhook attempts at once (${MAX_SCHEDULED_ATTEMPTS} scheduled + ${MAX_MANUAL_ATTEMPTS} manual) pass Bun's fetch limit of ${BUN_FETCH_LIMIT}`);
}

/**
 * checkFetchLimit refuses, in one line, a BUN_CONFIG_MAX_HTTP_REQUESTS (`value`, undefined when
 * unset) under MAX_ATTEMPTS_AT_ONCE, or one Bun does not read (it would keep its 256 after a
 * warning of its own): with less, hung receivers' attempts would hold a healthy one's in Bun's queue.
 */
export function checkFetchLimit(value: string | undefined): void {
  if (value === undefined) return;
  const limit = Number(value);
  if (/^\d+$/.test(value) && limit >= MAX_ATTEMPTS_AT_ONCE && limit <= MAX_BUN_FETCH_LIMIT) return;
  throw new ConfigError(
    `invalid BUN_CONFIG_MAX_HTTP_REQUESTS: ${JSON.stringify(value)} is not a whole number from ${MAX_ATTEMPTS_AT_ONCE} to ${MAX_BUN_FETCH_LIMIT} (the requests Bun's fetch sends at once: webhook delivery runs up to ${MAX_ATTEMPTS_AT_ONCE}, ${MAX_SCHEDULED_ATTEMPTS} scheduled attempts and ${MAX_MANUAL_ATTEMPTS} manual ones, and one more would wait inside Bun with its timeout running); leave it unset for Bun's ${BUN_FETCH_LIMIT}`,
  );
}
/**
 * REFILL is the fewest slots a busy subscription is topped up with: a busy receiver is topped up
 * in batches (each claim and each commit costs the same for 1 row as for 8), an idle one is
 * served at once.
 */
const REFILL = 8;
/**
 * ClaimRoom is what a claim round may still start: `free` slots of MAX_IN_FLIGHT, `spare` under
 * MAX_SCHEDULED_ATTEMPTS (which only a guaranteed share can reach), and `open`, the requests open
 * on this instance, its picks so far counted among them.
 */
interface ClaimRoom {
  free: number;
  spare: number;
  open: number;
}
/** pastReserve is how many attempts a subscription with RESERVED_SHARE requests open or more may start: free slots while fewer than MAX_IN_FLIGHT - RESERVED_SLOTS requests are open. */
const pastReserve = ({ free, open }: ClaimRoom) => Math.min(free, MAX_IN_FLIGHT - RESERVED_SLOTS - open);
/**
 * roomFor is how many more attempts a subscription may start with `running` under way (on every
 * instance, on PostgreSQL) and `openHere` of its requests open on this instance: the slots past the
 * reserve, or free slots up to RESERVED_SHARE open, or its guaranteed share, and no more than
 * MAX_PER_SUBSCRIPTION nor, here, than `cap`, its receiver's (ReceiverCaps).
 */
const roomFor = (running: number, openHere: number, room: ClaimRoom, cap: number) =>
  Math.min(MAX_PER_SUBSCRIPTION - running, cap - openHere, room.spare, Math.max(pastReserve(room), Math.min(room.free, RESERVED_SHARE - openHere), GUARANTEED_PER_SUBSCRIPTION - running));
/**
 * served tells whether a claim asks for a subscription's deliveries at all: one with fewer than
 * RESERVED_SHARE requests open here (its guaranteed share among them) and below its receiver's
 * `cap` is served at once, a busy one only when it may be topped up by REFILL, so that each claim
 * and commit for it is worth its cost.
 */
const served = (running: number, openHere: number, room: ClaimRoom, cap: number) =>
  openHere < Math.min(RESERVED_SHARE, cap) || (running <= MAX_PER_SUBSCRIPTION - REFILL && openHere <= cap - REFILL && pastReserve(room) >= REFILL);
/** after is the room left once `picked` attempts are taken from it: each takes a slot, and opens a request. */
const after = (room: ClaimRoom, picked: number): ClaimRoom => ({ free: room.free - picked, spare: room.spare - picked, open: room.open + picked });
/**
 * fewestFirst orders subscriptions by the attempts they run, keeping the given order (oldest due
 * first) among equals: free slots go first to those running fewest, not to the oldest backlog,
 * which is the slowest receiver's, since it is slow.
 */
const fewestFirst = <T>(subscriptions: T[], running: (subscription: T) => number): T[] => subscriptions.toSorted((a, b) => running(a) - running(b));

/** LEASE_MARGIN_MS is how long past the request timeout a claimed delivery stays leased. */
const LEASE_MARGIN_MS = 2000;
/** MAX_TIMER_MS keeps the wake-up timer inside setTimeout's range; the loop re-arms it. */
const MAX_TIMER_MS = 60 * 60 * 1000;
/**
 * STOPPED_SWEEP_MS is how often a running loop fails what stopped subscriptions left pending
 * (failEveryStoppedDelivery): a chunk write refused after a delete or disable committed leaves
 * the rest pending, which nothing else fails while the instance runs. One read of a handful of
 * index entries when there is none.
 */
export const STOPPED_SWEEP_MS = 60_000;
/** DRAIN_DEADLINE_MS is how long stop() waits for attempts in flight before abandoning them. */
const DRAIN_DEADLINE_MS = 10_000;
/** DELIVERY_CHANNEL is the PostgreSQL notification channel on which instances wake each other's loops and tell of deleted subscriptions. */
export const DELIVERY_CHANNEL = "crm_deliveries";
/** DELETED_PREFIX starts the payload of a notification naming a subscription just deleted, whose attempts under way every instance aborts. */
const DELETED_PREFIX = "deleted:";
/**
 * SHARED_POLL_MS is the safety net of instances sharing a database: each claims at least this
 * often, and checks at most this often whether the subscriptions of its attempts under way were
 * deleted, in case a notification was lost (a listening connection that dropped is re-subscribed
 * and does both at once; this covers the rest).
 */
export const SHARED_POLL_MS = 5000;
/**
 * FULL_WAKE_INTERVAL_MS spaces the wake-ups an instance with its slots full sends for the due work
 * it leaves: instances all full would otherwise keep waking each other, none with room to take it.
 */
const FULL_WAKE_INTERVAL_MS = 1000;
/** CLOCK_READ_INTERVAL_MS spaces the reads of the database's clock by an instance sharing it (each inside a claim's write). */
const CLOCK_READ_INTERVAL_MS = 1000;
/** CLOCK_SKEW_WARNING_MS is how far this process's clock may be off the database's before a warning is logged. */
const CLOCK_SKEW_WARNING_MS = 1000;
/** CLOCK_SKEW_LOG_INTERVAL_MS spaces the warnings of a clock that stays off (1 hour). */
const CLOCK_SKEW_LOG_INTERVAL_MS = 60 * 60 * 1000;

export type Trigger = "scheduled" | "manual";

/** AttemptRefusal says why a manual attempt was not made; the webhooks service answers it over HTTP. */
export type AttemptRefusal =
  | { refused: "not-found" }
  | { refused: "in-progress" | "shutting-down" | "manual-attempts-busy" | "secrets-key-replaced" }
  | { refused: "event-erased"; erasedAt: number }
  | { refused: "subscription-deleted" | "subscription-disabled" | "subscription-paused"; subscriptionId: string }
  /** `cap`: MAX_PER_SUBSCRIPTION, over every instance, or less, this instance's cut of a receiver that leaves attempts unanswered (ReceiverCaps) */
  | { refused: "subscription-attempts-busy"; subscriptionId: string; cap: number };

/** DeliveryOutcome describes a finished attempt, for metrics. */
export interface DeliveryOutcome {
  delivery_id: string;
  subscription_id: string;
  event_type: string;
  /** the id of the request that made the delivery's event; null when none did */
  request_id: string | null;
  trigger: Trigger;
  /** the delivery's status before the attempt: one already succeeded or failed is not ended again */
  previous_status: DeliveryRow["status"];
  /** the delivery's status after the attempt */
  status: DeliveryRow["status"];
  /** recorded after its lease ran out and another claim took the delivery: the status is that claim's */
  late: boolean;
  /** not sent: it failed here, before reaching the receiver (AttemptResult.local_fault), and is no attempt */
  local_fault: boolean;
  response_status: number | null;
  /** what went wrong, in words; null when a complete answer arrived */
  error: string | null;
  duration_ms: number;
  /** from the event's creation to the end of this attempt */
  event_age_ms: number;
}

export interface LoopDependencies {
  db: Database;
  config: Config;
  log: Logger;
  network: Network;
  secrets: SecretBox;
  /** how often an instance sharing a database claims unasked (SHARED_POLL_MS; tests lengthen it) */
  sharedPollMs: number;
  /** pending deliveries of a disabled subscription one write fails at most (BATCH_ROWS; tests choose smaller) */
  batchRows: number;
  /** how often the loop fails what stopped subscriptions left pending (STOPPED_SWEEP_MS; tests shorten it) */
  stoppedSweepMs: number;
  /** told how many pending deliveries of a stopped subscription each of the loop's writes failed unsent, once it has committed */
  failedUnsent: (count: number) => void;
}

interface UnrecordedAttempt {
  due: DueDelivery;
  result: AttemptResult;
  trigger: Trigger;
  inRecordWrite?: (tx: Db) => Promise<void>;
  settle: PromiseWithResolvers<RecordedAttempt | null>;
}

/** Picks are what one claim round leased: the deliveries, the paced subscriptions among theirs, when a paced subscription may go next, and whether due work was left for others. */
interface Picks {
  picked: DueDelivery[];
  /** the interval between attempts, in milliseconds, of each subscription with a max_rate that a delivery was picked for */
  paced: Map<string, number>;
  rateWake: number | null;
  /** this instance's free slots held a subscription below its cap, with due deliveries possibly left that other instances could send */
  leftOver: boolean;
}

/** CLAIM_FAILURE_LOG_INTERVAL_MS spaces the log lines of claims that keep failing (they are retried every second). */
const CLAIM_FAILURE_LOG_INTERVAL_MS = 60_000;

/**
 * RecordedAttempt is the delivery after an attempt was recorded, its status before, whether the
 * attempt came after its lease was taken over, how many pending deliveries the disable it brought
 * about failed, and that disable when a failing streak made it (logged once the write has committed).
 */
interface RecordedAttempt {
  delivery: StoredDelivery;
  previousStatus: DeliveryRow["status"];
  late: boolean;
  pendingFailed: number;
  streakDisable: StreakDisable | null;
}

interface InFlight {
  due: DueDelivery;
  trigger: Trigger;
  controller: AbortController;
  done: Promise<void>;
  /** what the request came to, once it ended: its outcome is then on its way to being recorded */
  result?: AttemptResult;
  /** set when stop gives up on the attempt: its outcome is not recorded (its lease is released) */
  abandoned: boolean;
}

/**
 * nextRetryDelay returns the wait before the next scheduled attempt after `attemptsMade` attempts
 * (the schedule with ±20% jitter, never sooner than the receiver's Retry-After up to a cap), or
 * null when the schedule is exhausted.
 */
export function nextRetryDelay(schedule: number[], attemptsMade: number, retryAfterMs: number | null, random = Math.random()): number | null {
  const seconds = schedule[attemptsMade - 1];
  if (seconds === undefined) return null;
  const scheduled = Math.round(seconds * 1000 * (0.8 + 0.4 * random));
  return retryAfterMs === null ? scheduled : Math.max(scheduled, Math.min(retryAfterMs, RETRY_AFTER_CAP_MS));
}

/**
 * heldBy is how long an answer holds its whole subscription, or null: a 429 or 503 with Retry-After
 * (up to RETRY_AFTER_CAP_MS). The receiver asks for no request before then (RFC 9110 10.2.3), not
 * for this one delivery later: the others, sent meanwhile at full concurrency, would each be
 * refused too, spend an attempt and lengthen the failing streak, then come back all at once.
 */
function heldBy(result: Pick<AttemptResult, "response_status" | "retry_after_ms">): number | null {
  if ((result.response_status !== 429 && result.response_status !== 503) || !result.retry_after_ms) return null;
  return Math.min(result.retry_after_ms, RETRY_AFTER_CAP_MS);
}

/** lease leases the picked deliveries until `until` and returns them as held under that lease. */
async function lease(tx: Db, picked: DueDelivery[], until: number): Promise<DueDelivery[]> {
  await leaseDeliveries(tx, picked.map((p) => p.id), until);
  return picked.map((p) => ({ ...p, locked_until: until }));
}

/** LOCAL_FAULT_RETRY_MS is how soon a delivery is tried again after an attempt that failed here, before reaching its receiver (AttemptResult.local_fault). */
const LOCAL_FAULT_RETRY_MS = 5000;

/** succeeded: a 2xx answer read to the end within the timeout (a 2xx whose body never ends is a failed attempt). */
const succeeded = (result: AttemptResult) => result.error === null && result.response_status !== null && result.response_status >= 200 && result.response_status < 300;

/**
 * recordAttempt stores an attempt and the delivery's next state: 2xx succeeds; 410 disables the
 * subscription and fails its pending deliveries; otherwise a pending delivery is rescheduled
 * until the schedule runs out (then delivery.exhausted is recorded). A manual attempt on a
 * finished delivery decides its status alone. A 429 or 503 with Retry-After holds the subscription
 * as long (heldBy). The subscription's failing streak is kept up to
 * date, and a streak longer than the limit disables it. An attempt whose lease was taken over
 * before it was recorded is stored and counted, and decides nothing else (late).
 */
async function recordAttempt(db: Db, config: Config, due: DueDelivery, result: AttemptResult, trigger: Trigger, now: number, healthy: Set<string>): Promise<RecordedAttempt | null> {
  const current = await findStoredDelivery(db, due.id);
  if (!current) return null;
  if (result.local_fault && current.locked_until === due.locked_until) {
    // Nothing reached the receiver: no attempt is stored or counted, its streak and schedule stay
    // as they were, and the delivery shows why it waits (last_error) until it is tried again soon.
    const next = current.status === "pending" && trigger === "scheduled" ? now + LOCAL_FAULT_RETRY_MS : current.next_attempt_at;
    const row = { ...current, next_attempt_at: next, locked_until: null, last_error: result.error, updated_at: now };
    await updateDeliveryAfterAttempt(db, row);
    return { delivery: row, previousStatus: current.status, late: false, pendingFailed: 0, streakDisable: null };
  }
  const attempt = current.attempts + 1;
  // An erasure committed while the attempt was under way failed the delivery (so only a delivery no
  // longer pending can be one) and dropped its attempts' answers, signatures and request headers
  // (eraseAttemptsOfEvents): this one keeps none either.
  const erased = current.status !== "pending" && (await isEventErased(db, current.event_id));
  await insertAttempt(db, {
    delivery_id: due.id,
    attempt,
    triggered_by: trigger,
    started_at: result.started_at,
    duration_ms: result.duration_ms,
    request_headers: erased ? {} : result.request_headers,
    response_status: result.response_status,
    response_headers: erased ? {} : result.response_headers,
    response_body: erased ? null : result.response_body,
    error: result.error,
  });
  // The lease ran out and the delivery was claimed again, here or on another instance: the attempt
  // is kept, but the delivery's status, its next retry and its subscription's health are for the
  // new holder to decide (a late failure must not undo its success, nor free its lease).
  if (current.locked_until !== due.locked_until) {
    await countLateAttempt(db, due.id, attempt, now);
    return { delivery: { ...current, attempts: attempt, updated_at: now }, previousStatus: current.status, late: true, pendingFailed: 0, streakDisable: null };
  }
  let status: DeliveryRow["status"] = "succeeded";
  let next: number | null = null;
  // Read only after a failure: a success needs nothing of it, and it is most attempts. A success
  // ends the failing streak whenever it began: one begun after this delivery was claimed (an
  // attempt sent beside it failed first) too, or a burst answered 500 then 200 x 9 would leave the
  // subscription failing, to be disabled by the next failure once the limit has passed. It is
  // noted in `healthy` and written once for the attempts recorded together (a statement for every
  // success cost PostgreSQL 12% of its delivery rate), or first thing before a failure after it.
  let subscription: SubscriptionRow | null = null;
  if (succeeded(result)) {
    healthy.add(due.subscription_id);
  } else {
    // A delivery the receiver has had stays succeeded when a manual attempt of it fails: failed
    // would list it among the failures to recover, and a recovery would send it again.
    status = current.status === "succeeded" ? "succeeded" : "failed";
    if (healthy.delete(due.subscription_id)) await markSubscriptionsHealthy(db, [due.subscription_id]);
    subscription = await findSubscriptionById(db, due.subscription_id);
    if (result.response_status !== 410 && current.status === "pending" && subscription?.status === "active") {
      if (trigger === "manual") {
        // A manual attempt failing leaves the delivery's next scheduled attempt to come, when it
        // was due (a recovery's one more attempt too), or later if the receiver asked for a wait
        // (Retry-After): it neither ends the delivery nor reports it exhausted.
        status = "pending";
        next = Math.max(current.next_attempt_at ?? now, now + Math.min(result.retry_after_ms ?? 0, RETRY_AFTER_CAP_MS));
      } else {
        // A recovered delivery's scheduled attempt is its last: its failure ends it.
        const delay = current.recovered_at !== null ? null : nextRetryDelay(config.retrySchedule, attempt, result.retry_after_ms);
        if (delay !== null) {
          status = "pending";
          next = now + delay;
        } else {
          await recordExhausted(db, due, attempt, result, now);
        }
      }
    }
  }
  const recovered_at = status === "pending" && trigger === "manual" ? current.recovered_at : null;
  const row = { ...current, status, attempts: attempt, next_attempt_at: next, locked_until: null, last_response_status: result.response_status, last_error: result.error, recovered_at, updated_at: now };
  await updateDeliveryAfterAttempt(db, row);
  const hold = heldBy(result);
  if (hold !== null && subscription?.status === "active") await holdSubscription(db, due.subscription_id, now + hold);
  // After the delivery's own update, so that disabling fails the other pending deliveries (a 410
  // has failed this one), or this one too (a failing streak ends its next retry unsent).
  let pendingFailed = 0;
  let streakDisable: StreakDisable | null = null;
  if (result.response_status === 410 && subscription?.status === "active") {
    pendingFailed = await disableGone(db, subscription, due.id, now);
  } else if (subscription) {
    streakDisable = await trackFailingStreak(db, config.disableFailingAfterHours, subscription, now);
    pendingFailed = streakDisable?.pendingFailed ?? 0;
  }
  return { delivery: row, previousStatus: current.status, late: false, pendingFailed, streakDisable };
}

/**
 * DeliveryLoop sends pending deliveries from inside the server process. It is woken by every
 * commit (new deliveries go out at once) and by a timer set only for the next scheduled retry or
 * lease expiry. It claims due deliveries in batches under a lease, runs at most MAX_IN_FLIGHT
 * attempts (MAX_PER_SUBSCRIPTION per subscription), and records the outcomes finished in one turn
 * together, in the next group commit.
 */
export class DeliveryLoop {
  private state: "idle" | "running" | "stopping" | "stopped" = "idle";
  private failingClaim: { since: number; error: unknown; loggedAt: number } | null = null;
  // By attempt, not by delivery id: an attempt abandoned by a stop (its lease released) may still
  // be running here, and each attempt holds a slot until it ends. A delivery with an attempt open
  // here is not claimed or attempted again here, even once its lease has run out (a wall clock
  // stepped forward past it): underWay names them.
  private readonly inFlight = new Set<InFlight>();
  /** the attempts of inFlight that the loop started (not manual ones), held to MAX_SCHEDULED_ATTEMPTS */
  private scheduledInFlight = 0;
  private readonly perSubscription = new Map<string, number>();
  /** how many of each subscription's attempts may be open here at once, cut for receivers that leave attempts unanswered */
  private readonly caps = new ReceiverCaps(MAX_PER_SUBSCRIPTION);
  /**
   * earliest time the next attempt may start, per subscription with a max_rate: Infinity while
   * its last claimed attempt has not been sent yet, then the send time plus the interval
   */
  private readonly nextSlot = new Map<string, number>();
  /** the interval between attempts of each subscription with a max_rate, in milliseconds */
  private readonly pacing = new Map<string, number>();
  private readonly unrecorded: UnrecordedAttempt[] = [];
  private readonly listeners: ((outcome: DeliveryOutcome) => void)[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;
  private wakeQueued = false;
  /** the failing of disabled (or deleted) subscriptions' pending deliveries under way, one job after the other; a stop waits for its write in flight only */
  private unsent: Promise<void> = Promise.resolve();
  /** runs a sweep of stopped subscriptions' pending deliveries every stoppedSweepMs while started */
  private sweepTimer: ReturnType<typeof setInterval> | undefined;
  /** a sweep is queued or under way: a slow one is not queued again behind itself */
  private sweeping = false;
  /** spaces the lines of refused failings of stopped subscriptions' deliveries: the sweep meets the same refusal each minute */
  private readonly unsentLine = new SpacedLine();
  /** a claim round is under way (it awaits its write); a wake meanwhile runs another round after it */
  private claiming: Promise<void> | null = null;
  private wakeAfterClaim = false;
  /** manual attempts under way, each counted from before its claim until it is recorded (MAX_MANUAL_ATTEMPTS) */
  private manualAttempts = 0;
  private registered = false;
  /** stops listening for other instances' wake-ups; set while started */
  private listening: Promise<(() => Promise<void>) | null> | null = null;
  /** the database's clock minus this process's, as last read (0 on SQLite: one process, one clock) */
  private clockOffset = 0;
  /** when the database's clock was last read, on the monotonic clock; when a clock that was off was last logged */
  private clockReadAt = -Infinity;
  private skewLoggedAt = -Infinity;
  /** when this instance last woke the others for work it left, on the monotonic clock */
  private othersWokenAt = -Infinity;
  /** when the subscriptions of the attempts under way here were last checked for deletes, on the monotonic clock */
  private deletesCheckedAt = -Infinity;

  constructor(private readonly deps: LoopDependencies) {}

  /**
   * shared tells whether other instances deliver from the same database (PostgreSQL): claims then
   * lock what they take and count every instance's leases, and instances wake each other.
   */
  private get shared(): boolean {
    return this.deps.db.dialect === "postgres";
  }

  /**
   * now is the time on the clock that every lease, retry time and send time is written in and
   * compared with: sharing a database, the database's (this process's clock plus the offset last
   * read), so that an instance whose clock runs ahead does not take over leases other live
   * instances still hold and send their attempts again beside them; on SQLite, this process's.
   */
  private now(): number {
    return Date.now() + this.clockOffset;
  }

  /**
   * readClock returns now(), reading the database's clock again first, in the caller's
   * transaction, when it was last read more than CLOCK_READ_INTERVAL_MS ago (sharing a database).
   */
  private async readClock(tx: Db): Promise<number> {
    if (!this.shared || performance.now() - this.clockReadAt < CLOCK_READ_INTERVAL_MS) return this.now();
    const sent = Date.now();
    const databaseNow = await readDatabaseClock(tx);
    const received = Date.now();
    // The server read its clock between the query's sending and its answer: halfway, give or take half the round trip.
    this.clockOffset = databaseNow - Math.round((sent + received) / 2);
    this.clockReadAt = performance.now();
    if (Math.abs(this.clockOffset) > CLOCK_SKEW_WARNING_MS && this.clockReadAt - this.skewLoggedAt >= CLOCK_SKEW_LOG_INTERVAL_MS) {
      this.skewLoggedAt = this.clockReadAt;
      // Deliveries go by the database's clock, but the updated_at this instance's requests stamp their changes with goes by its own, and pollers of updated_after rely on it.
      this.deps.log.warn("this instance's clock is off the database server's: keep the clocks in step with NTP", { ahead_ms: -this.clockOffset });
    }
    return this.now();
  }

  /** running tells whether the loop is claiming deliveries. */
  get running(): boolean {
    return this.state === "running";
  }

  /** claimFailure is the last claim round's error while no round has succeeded since it failed, and since when; null when the last round succeeded. */
  get claimFailure(): { since: number; error: unknown } | null {
    return this.failingClaim;
  }

  /** receiversCut is how many subscriptions' receivers this instance sends fewer attempts at once (ReceiverCaps), each an entry in memory. */
  get receiversCut(): number {
    return this.caps.cutIds().length;
  }

  /** inFlightCount is the number of attempts under way. */
  get inFlightCount(): number {
    return this.inFlight.size;
  }

  /** start begins sending: at once for everything due, then on every commit and timer. */
  start(): void {
    if (this.state === "running") return;
    this.state = "running";
    if (!this.registered) {
      this.registered = true;
      this.deps.db.onCommit(() => this.wake());
    }
    const refused = (error: unknown) =>
      this.deps.log.error("webhook delivery loop: cannot listen for other instances; polling until it listens again", { error: String(error) });
    this.listening ??= this.deps.db.listen(DELIVERY_CHANNEL, (payload) => this.heard(payload), refused).catch((error: unknown) => {
      refused(error);
      return null;
    });
    this.sweepStopped();
    this.sweepTimer ??= setInterval(() => this.sweepStopped(), this.deps.stoppedSweepMs);
    this.sweepTimer.unref?.();
    this.wake();
  }

  /** sweepStopped queues a failing of every stopped subscription's pending deliveries (failEveryStoppedDelivery), unless one is queued or under way. */
  private sweepStopped(): void {
    if (this.sweeping) return;
    this.sweeping = true;
    this.failUnsent((keepGoing) => failEveryStoppedDelivery(this.deps.db, this.deps.batchRows, this.deps.failedUnsent, keepGoing), () => (this.sweeping = false));
  }

  /**
   * failUnsent runs `job`, which fails pending deliveries of stopped subscriptions a chunk per write,
   * after the ones before it, until it is done or the loop stops; what a refusal or a stop leaves
   * is finished by the next sweep (sweepStopped, at start and every stoppedSweepMs), and meanwhile
   * no claim takes those deliveries. `settled` runs once it is done or skipped.
   */
  private failUnsent(job: (keepGoing: () => boolean) => Promise<void>, settled: () => void = () => undefined): void {
    const keepGoing = () => this.state === "running";
    this.unsent = this.unsent
      .then(() => (keepGoing() ? job(keepGoing) : undefined))
      .catch((error: unknown) => this.unsentRefused(error))
      .finally(settled);
  }

  /**
   * unsentRefused logs a failing of a stopped subscription's pending deliveries that a write refusal
   * ended (the loop's, or a delete's after it committed), at most once a minute with a count: the
   * next sweep finishes it. A sweep whose look failed is a warning that says only that.
   */
  unsentRefused(error: unknown): void {
    const unlogged = this.unsentLine.occurred(performance.now());
    if (unlogged === undefined) return;
    // A sweep that could not look (the database unreachable) knows of no delivery left unsent.
    if (error instanceof StoppedLookFailed) {
      this.deps.log.warn("webhook delivery loop: the look for pending deliveries of disabled or deleted subscriptions failed; it runs again within a minute", {
        error: String(error.cause),
        ...(unlogged === null ? {} : { refused_since_last_line: unlogged }),
      });
      return;
    }
    this.deps.log.error("webhook delivery loop: failing the pending deliveries of a disabled or deleted subscription was refused; they stay unsent, and the loop tries again within a minute", {
      error: String(error),
      ...(unlogged === null ? {} : { refused_since_last_line: unlogged }),
    });
  }

  /**
   * heard acts on a notification on DELIVERY_CHANNEL: one naming a deleted subscription aborts its
   * attempts here, any other wakes the loop. After the listener was subscribed again (null), the
   * claim it wakes also checks for deletes whose notifications were missed meanwhile.
   */
  private heard(payload: string | null): void {
    if (payload === null) this.deletesCheckedAt = -Infinity;
    if (payload?.startsWith(DELETED_PREFIX)) this.abortAttemptsOfDeleted(payload.slice(DELETED_PREFIX.length));
    else this.wake();
  }

  /** onOutcome registers a listener told about every finished attempt. */
  onOutcome(listener: (outcome: DeliveryOutcome) => void): void {
    this.listeners.push(listener);
  }

  /**
   * wake asks for a claim round in this turn of the event loop's check phase; every commit and
   * completion of the turn shares it, so a busy loop claims in batches.
   */
  wake(): void {
    if (this.state !== "running" || this.wakeQueued) return;
    // One round at a time: a second one would pick with the first one's picks not yet counted in flight.
    if (this.claiming) {
      this.wakeAfterClaim = true;
      return;
    }
    this.wakeQueued = true;
    setImmediate(() => {
      this.wakeQueued = false;
      if (this.state !== "running") return;
      this.claiming = this.claimRound()
        .then(() => {
          if (this.failingClaim) this.deps.log.info("webhook delivery loop: claims work again", { failing_since: toTimestamp(this.failingClaim.since) });
          this.failingClaim = null;
        })
        .catch((error: unknown) => {
          const now = Date.now();
          const failing = this.failingClaim;
          // Retried every second: one line when claims start failing, then one a minute while they go on;
          // none for a replaced database file, which the database's watch has logged once for everything.
          let loggedAt = failing?.loggedAt ?? now;
          if (databaseFailureOf(error) === "replaced") loggedAt = now;
          else if (!failing) this.deps.log.error("webhook delivery loop: claim failed", { error: String(error) });
          else if (now - failing.loggedAt >= CLAIM_FAILURE_LOG_INTERVAL_MS) {
            this.deps.log.error("webhook delivery loop: claims still failing", { error: String(error), failing_since: toTimestamp(failing.since) });
            loggedAt = now;
          }
          this.failingClaim = { since: failing?.since ?? now, error, loggedAt };
          this.armTimer(this.now() + 1000);
        })
        .finally(() => {
          this.claiming = null;
          if (!this.wakeAfterClaim) return;
          this.wakeAfterClaim = false;
          this.wake();
        });
    });
  }

  /**
   * claimRound leases as many due deliveries as there are free slots and starts their attempts.
   * Sharing a database, an instance that leaves due work behind wakes the others to take it.
   */
  private async claimRound(): Promise<void> {
    const { db } = this.deps;
    const room: ClaimRoom = { free: MAX_IN_FLIGHT - this.inFlight.size, spare: MAX_SCHEDULED_ATTEMPTS - this.scheduledInFlight, open: this.openRequests };
    // The time is read once the write holds the lock: after a wait behind another write (another
    // instance's, cut off from the database for seconds), a lease counted from before the wait
    // would end before its attempt's timeout, and another claim would send the delivery again.
    const claim = async (tx: Db) => {
      const now = await this.readClock(tx);
      // New and recovered deliveries are due from when the instance that made them says: one made
      // here is due at once although this process's clock runs ahead of the database's. Not the
      // change clock's time, which stands ahead of a clock stepped back: retries scheduled by the
      // wall clock would all be due at once, running a failing receiver's schedule in seconds.
      const at = { dueBy: Math.max(now, Date.now()), now };
      return { now, ...(await (this.shared ? this.pickDueShared(tx, at, room) : this.pickDue(tx, at, room))) };
    };
    // Without REFILL slots past the reserve a claim still serves the subscriptions inside the reserve's share.
    const { now, picked, paced, rateWake, leftOver } = await db.write(claim);
    if (this.state !== "running") {
      // Stopped while the claim committed: the leases are released, nothing is sent.
      if (picked.length > 0) await this.release(picked);
      return;
    }
    for (const [subscriptionId, interval] of paced) this.awaitSend(subscriptionId, interval);
    for (const due of picked) {
      this.holdReceiverSlot(due.subscription_id);
      this.dispatch(due, "scheduled");
    }
    if (this.shared) void this.abortAttemptsOfMissedDeletes();
    const othersWake = leftOver ? this.wakeOthersForLeftOver(pastReserve(room)) : null;
    const times = [await findNextWakeTime(db, now), rateWake, othersWake, this.shared ? now + this.deps.sharedPollMs : null].filter((t) => t !== null);
    this.armTimer(times.length ? Math.min(...times) : null);
  }

  /**
   * wakeOthersForLeftOver wakes the other instances to take the due work a claim left: at once, or,
   * when the claim had fewer than REFILL slots past the reserve (`pastReserve`: it could top up no
   * busy subscription), at most once every FULL_WAKE_INTERVAL_MS. It returns when to claim again to
   * wake them (a wake-up put off), or null.
   */
  private wakeOthersForLeftOver(pastReserve: number): number | null {
    const wait = pastReserve < REFILL ? this.othersWokenAt + FULL_WAKE_INTERVAL_MS - performance.now() : 0;
    if (wait > 0) return this.now() + wait;
    this.othersWokenAt = performance.now();
    this.wakeOthers();
    return null;
  }

  /** wakeOthers notifies the other instances sharing the database that deliveries wait; a failure only delays them until their poll. */
  private wakeOthers(): void {
    this.deps.db.notify(DELIVERY_CHANNEL).catch((error: unknown) => this.deps.log.warn("webhook delivery loop: cannot wake other instances", { error: String(error) }));
  }

  /** release frees leases of attempts not made, so they are due again at once, here or (woken) on another instance. */
  private async release(leases: DueDelivery[]): Promise<void> {
    await this.deps.db.write((tx) => releaseLeases(tx, leases));
    if (this.shared) this.wakeOthers();
  }

  /**
   * pickDue selects up to `free` due deliveries, at most MAX_PER_SUBSCRIPTION in flight per
   * subscription, the RESERVED_SLOTS only for those with fewer than RESERVED_SHARE, and leases them;
   * a subscription under GUARANTEED_PER_SUBSCRIPTION gets up to that many even without `free` slots,
   * within `spare`. It asks subscription by subscription, those running fewest first, and skips
   * those it would not serve (served), so a backlog for one busy receiver is not even read.
   * The reads and the lease are one write, so nothing else leases between them.
   * A subscription with a max_rate gets one attempt per 1/max_rate seconds, whatever the
   * attempt (first, retry, recovery): `rateWake` is when the next of them may start.
   */
  private async pickDue(tx: Db, at: ClaimTimes, room: ClaimRoom): Promise<Picks> {
    const { now } = at;
    this.forgetPassedSlots(now);
    const { config } = this.deps;
    // Its requests open here are all a subscription has under way: one process delivers.
    const running = (subscriptionId: string) => this.perSubscription.get(subscriptionId) ?? 0;
    const saturated = [...this.perSubscription].filter(([id, n]) => !served(n, n, room, this.caps.capOf(id))).map(([id]) => id);
    const underWay = this.underWay();
    const picked: DueDelivery[] = [];
    const paced = new Map<string, number>();
    let rateWake: number | null = null;
    const due = await findSubscriptionsWithDueDeliveries(tx, now, saturated);
    for (const { id: subscriptionId, max_rate, held } of fewestFirst(due, (s) => running(s.id))) {
      const left = after(room, picked.length);
      const n = running(subscriptionId);
      const cap = this.caps.capOf(subscriptionId);
      let take = served(n, n, left, cap) ? roomFor(n, n, left, cap) : 0;
      if (take <= 0) continue;
      // Held by its receiver, it is claimed for the test ping due first alone.
      if (held) take = 1;
      if (max_rate !== null) {
        const slot = this.nextSlotOf(subscriptionId, 1000 / max_rate, now);
        if (slot > now) {
          if (slot !== Infinity) rateWake = rateWake === null ? slot : Math.min(rateWake, slot);
          continue;
        }
        take = 1;
      }
      const deliveries = await findDueDeliveriesOf(tx, subscriptionId, at, take, underWay.get(subscriptionId), held);
      if (max_rate !== null && deliveries.length > 0) paced.set(subscriptionId, 1000 / max_rate);
      picked.push(...deliveries);
    }
    return { picked: await lease(tx, picked, now + config.deliveryTimeoutMs + LEASE_MARGIN_MS), paced, rateWake, leftOver: false };
  }

  /**
   * pickDueShared is pickDue for instances sharing a PostgreSQL database. The caps count what every
   * instance holds, read from the database under a lock on each subscription for the length of the
   * claim (another instance claiming for it at that moment is skipped; it serves the subscription):
   * at most MAX_PER_SUBSCRIPTION unexpired leases per subscription, topped up in batches of REFILL,
   * those with fewest first, this instance's RESERVED_SLOTS only for those with fewer than
   * RESERVED_SHARE requests open here (this instance's slots: its own requests, in memory);
   * with a max_rate, one attempt per 1/max_rate seconds, through the next send time stored on the
   * subscription's pacing row, held at the lease's end until the attempt is sent (dispatch moves it).
   * The deliveries are locked as they are read (`SKIP LOCKED`), so no two claims take the same one.
   */
  private async pickDueShared(tx: Db, at: ClaimTimes, room: ClaimRoom): Promise<Picks> {
    const { now } = at;
    this.forgetPassedSlots(now);
    const leaseUntil = now + this.deps.config.deliveryTimeoutMs + LEASE_MARGIN_MS;
    const underWay = this.underWay();
    const picked: DueDelivery[] = [];
    const paced = new Map<string, number>();
    let rateWake: number | null = null;
    let leftOver = false;
    for (const subscription of fewestFirst(await lockSubscriptionsWithDueDeliveries(tx, at), (s) => s.leased)) {
      const left = after(room, picked.length);
      const openHere = this.perSubscription.get(subscription.id) ?? 0;
      const cap = this.caps.capOf(subscription.id);
      const take = served(subscription.leased, openHere, left, cap) ? roomFor(subscription.leased, openHere, left, cap) : 0;
      // Held below its caps by this instance's slots, the subscription keeps due deliveries (it had
      // one at least; a room filled may leave more) that an instance with every slot free would
      // send. One with a max_rate is sent one attempt at a time by design, and leaves none over;
      // one held by its receiver's cut cap leaves none either: another instance waking for it, its
      // own cap cut alike, would wake this one back, and so on without end. One its receiver holds
      // is claimed for the test ping due first alone, and leaves nothing over either.
      const heldBelowCap =
        subscription.max_rate === null && !subscription.held && subscription.leased <= MAX_PER_SUBSCRIPTION - REFILL && take < Math.min(MAX_PER_SUBSCRIPTION - subscription.leased, cap - openHere);
      if (take <= 0) {
        leftOver ||= heldBelowCap;
        continue;
      }
      if (subscription.max_rate === null) {
        const due = await findDueDeliveriesOf(tx, subscription.id, at, subscription.held ? 1 : take, underWay.get(subscription.id), subscription.held);
        leftOver ||= heldBelowCap && due.length === take;
        picked.push(...due);
        continue;
      }
      const interval = 1000 / subscription.max_rate;
      let nextSendAt = subscription.next_send_at;
      // Set no further ahead than the interval, or a claim's hold to its lease's end: a time past
      // both was set before the database server's clock went back, and would hold the subscription
      // for the length of the step.
      if (nextSendAt > Math.max(now + interval, leaseUntil)) {
        nextSendAt = now + interval;
        await setSendPacing(tx, subscription.id, nextSendAt);
      }
      if (nextSendAt > now) {
        rateWake = rateWake === null ? nextSendAt : Math.min(rateWake, nextSendAt);
        continue;
      }
      const [due] = await findDueDeliveriesOf(tx, subscription.id, at, 1, underWay.get(subscription.id), subscription.held);
      if (!due) continue;
      await holdSendPacing(tx, subscription.id, leaseUntil);
      paced.set(subscription.id, interval);
      picked.push(due);
    }
    return { picked: await lease(tx, picked, leaseUntil), paced, rateWake, leftOver };
  }

  /**
   * awaitSend holds a paced subscription's next slot (Infinity) until the attempt just claimed for
   * it is sent: dispatch then sets it to the send time plus `interval`, not to when the attempt was
   * due or claimed, so a busy event loop or a late timer never lets two go out closer together.
   * Held only once the claim committed: a claim that failed sends nothing, and a slot held inside
   * it would keep the subscription from every later claim until a restart.
   */
  private awaitSend(subscriptionId: string, interval: number): void {
    this.nextSlot.set(subscriptionId, Infinity);
    this.pacing.set(subscriptionId, interval);
  }

  /**
   * nextSlotOf is the next slot of a subscription paced at `interval` (0 when it has none). A slot
   * further ahead than the interval was set before the clock went back: it is moved back to `now`
   * plus the interval, or the subscription would send nothing for the length of the step, and the
   * loop's timer, waiting for it, would sleep past the slot due once the clock is right again.
   */
  private nextSlotOf(subscriptionId: string, interval: number, now: number): number {
    const slot = this.nextSlot.get(subscriptionId) ?? 0;
    if (slot === Infinity || slot <= now + interval) return slot;
    this.nextSlot.set(subscriptionId, now + interval);
    return now + interval;
  }

  /**
   * forgetPassedSlots drops the pacing of subscriptions whose next slot has passed: a slot in the
   * past paces nothing, the next claim for the subscription sets it again, and the entry of a
   * deleted subscription would otherwise stay for the life of the process.
   */
  private forgetPassedSlots(now: number): void {
    for (const [subscriptionId, slot] of this.nextSlot) {
      if (slot > now) continue;
      this.nextSlot.delete(subscriptionId);
      this.pacing.delete(subscriptionId);
    }
  }

  /** armTimer wakes the loop at `at`, a time on the clock of now(), or never (null). */
  private armTimer(at: number | null): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (at === null || this.state !== "running") return;
    this.timer = setTimeout(() => this.wake(), Math.min(Math.max(at - this.now(), 0), MAX_TIMER_MS));
    this.timer.unref?.();
  }

  /** openSigningSecrets opens the secrets a delivery is signed with now: the current one and, in a rotation's grace period, the previous one (signingSecrets). */
  private openSigningSecrets(due: DueDelivery): string[] {
    return signingSecrets({ ...due, secret: due.secret! }, due.id, Date.now()).map((sealed) => this.deps.secrets.open(due.subscription_id, sealed));
  }

  /** opensSigningSecrets tells whether this instance's secrets key opens the secrets a delivery is signed with (openSigningSecrets). */
  private opensSigningSecrets(due: DueDelivery): boolean {
    try {
      this.openSigningSecrets(due);
      return true;
    } catch (error) {
      if (error instanceof SecretUnreadable) return false;
      throw error;
    }
  }

  /** openRequests counts the requests open on this instance: the receiver slots held (holdReceiverSlot), manual attempts' too. */
  private get openRequests(): number {
    let open = 0;
    for (const n of this.perSubscription.values()) open += n;
    return open;
  }

  /** holdReceiverSlot counts an attempt about to start against its subscription's MAX_PER_SUBSCRIPTION, until freeReceiverSlot. */
  private holdReceiverSlot(subscriptionId: string): void {
    this.perSubscription.set(subscriptionId, (this.perSubscription.get(subscriptionId) ?? 0) + 1);
  }

  /** freeReceiverSlot gives back a slot holdReceiverSlot took, and wakes the loop to fill it. */
  private freeReceiverSlot(subscriptionId: string): void {
    const left = (this.perSubscription.get(subscriptionId) ?? 1) - 1;
    if (left > 0) this.perSubscription.set(subscriptionId, left);
    else this.perSubscription.delete(subscriptionId);
    this.wake();
  }

  /**
   * dispatch runs one attempt of a leased delivery, its receiver slot held (holdReceiverSlot), and
   * records its outcome; it resolves with whether a stop gave the attempt up.
   */
  private dispatch(due: DueDelivery, trigger: Trigger, inRecordWrite?: (tx: Db) => Promise<void>): Promise<boolean> {
    const { config, log } = this.deps;
    const controller = new AbortController();
    // The per-subscription cap bounds requests at the receiver: its slot frees when the answer is
    // in, not when the outcome is committed, or a receiver's throughput would be capped by our own
    // commit latency (at full create load: 1,200 deliveries/s behind 1,900 creates/s, p99 2.8 s).
    let receiverSlotHeld = true;
    const releaseReceiverSlot = () => {
      if (!receiverSlotHeld) return;
      receiverSlotHeld = false;
      this.freeReceiverSlot(due.subscription_id);
    };
    const interval = this.pacing.get(due.subscription_id);
    const paced = trigger === "scheduled" && interval !== undefined && this.nextSlot.get(due.subscription_id) === Infinity;
    const openSlot = () => {
      if (!paced || this.nextSlot.get(due.subscription_id) !== Infinity) return;
      const next = this.now() + interval;
      this.nextSlot.set(due.subscription_id, next);
      if (this.shared) {
        setSendPacing(this.deps.db, due.subscription_id, next).catch((error: unknown) =>
          log.error("webhook delivery loop: cannot store the next send time; the subscription waits for the lease to end", { subscription_id: due.subscription_id, error: String(error) }),
        );
      }
      this.wake();
    };
    const attempt = { due, trigger, controller, abandoned: false } as InFlight;
    attempt.done = (async () => {
      const result = await sendAttempt({
        deliveryId: due.id,
        targetUrl: due.target_url,
        secrets: this.openSigningSecrets(due),
        payload: due.payload,
        timeoutMs: config.deliveryTimeoutMs,
        responseBodyBytes: config.deliveryResponseBodyBytes,
        allowPrivateTargets: config.allowPrivateTargets,
        network: this.deps.network,
        signal: controller.signal,
        onSend: openSlot,
      });
      attempt.result = result;
      this.caps.attempted(due.subscription_id, result, this.perSubscription.get(due.subscription_id) ?? 1);
      if (result.refused_address !== null) {
        // The record names only the kind of address (any token holder reads it); the operator learns which.
        log.warn("webhook attempt refused: its target's name resolves to a non-public address", {
          delivery_id: due.id,
          subscription_id: due.subscription_id,
          target_host: new URL(due.target_url).host,
          address: result.refused_address,
        });
      }
      // An attempt refused before sending still spaces the next one.
      openSlot();
      releaseReceiverSlot();
      if (attempt.abandoned) return;
      const recorded = await this.record({ due, result, trigger, inRecordWrite });
      if (!recorded) return;
      if (recorded.streakDisable) logStreakDisable(log, config.disableFailingAfterHours, recorded.streakDisable);
      if (recorded.pendingFailed > 0) this.failUnsent((keepGoing) => failStoppedDeliveries(this.deps.db, due.subscription_id, this.deps.batchRows, this.deps.failedUnsent, keepGoing));
      const outcome: DeliveryOutcome = {
        delivery_id: due.id,
        subscription_id: due.subscription_id,
        event_type: due.event_type,
        request_id: due.request_id,
        trigger,
        previous_status: recorded.previousStatus,
        status: recorded.delivery.status,
        late: recorded.late,
        local_fault: result.local_fault,
        response_status: result.response_status,
        error: result.error,
        duration_ms: result.duration_ms,
        event_age_ms: Date.now() - due.created_at,
      };
      for (const listener of this.listeners) listener(outcome);
    })();
    this.inFlight.add(attempt);
    const scheduled = attempt.trigger === "scheduled";
    if (scheduled) this.scheduledInFlight++;
    return attempt.done
      .catch((error: unknown) =>
        // A secret this instance's key does not open: its key was replaced under it (crm secrets-key rotate); nothing was sent, and the lease's end frees the delivery for an instance with the new key.
        error instanceof SecretUnreadable
          ? log.error("webhook delivery not sent: this instance's secrets key does not open its subscription's signing secret; restart it with the database's key file (after crm secrets-key rotate, the new one)", { delivery_id: due.id, subscription_id: due.subscription_id })
          : log.error("webhook delivery attempt could not be recorded", { delivery_id: due.id, error: String(error) }),
      )
      .finally(() => {
        this.inFlight.delete(attempt);
        if (scheduled) this.scheduledInFlight--;
        openSlot();
        releaseReceiverSlot();
        this.wake();
      })
      .then(() => attempt.abandoned);
  }

  /**
   * record stores an attempt's outcome. The attempts finished in one turn of the event loop are
   * recorded together, in one savepoint of the next group commit.
   */
  private record(attempt: Omit<UnrecordedAttempt, "settle">): Promise<RecordedAttempt | null> {
    const settle = Promise.withResolvers<RecordedAttempt | null>();
    this.unrecorded.push({ ...attempt, settle });
    if (this.unrecorded.length === 1) void this.recordTogether();
    return settle.promise;
  }

  /**
   * recordTogether records the attempts waiting in one write. When the database refused that
   * write, each is recorded again in a write of its own: an attempt that cannot be stored fails
   * alone, instead of failing the others beside it, which would then be sent again once their
   * leases ran out. A database that cannot be used just now (databaseFailureOf) fails them all, to
   * be sent again after their leases and recorded whole.
   */
  private async recordTogether(): Promise<void> {
    let batch: UnrecordedAttempt[] = [];
    try {
      const rows = await this.deps.db.write((tx) => {
        batch = this.unrecorded.splice(0);
        return this.recordAttempts(tx, batch);
      });
      batch.forEach((a, i) => a.settle.resolve(rows[i]!));
    } catch (error) {
      if (batch.length === 0) batch = this.unrecorded.splice(0);
      if (databaseFailureOf(error) !== null) return batch.forEach((a) => a.settle.reject(error));
      for (const a of batch) void (batch.length === 1 ? this.recordWithoutResponse(a, error) : this.recordAlone(a));
    }
  }

  /** recordAlone records one attempt in a write of its own, or without the receiver's response when the database refuses it. */
  private async recordAlone(attempt: UnrecordedAttempt): Promise<void> {
    try {
      attempt.settle.resolve((await this.deps.db.write((tx) => this.recordAttempts(tx, [attempt])))[0]!);
    } catch (error) {
      if (databaseFailureOf(error) !== null) attempt.settle.reject(error);
      else await this.recordWithoutResponse(attempt, error);
    }
  }

  /**
   * recordWithoutResponse records an attempt the database refused once more without the headers
   * and body the receiver sent back, what it refused until now (a NUL, an overlong header): its
   * outcome is kept, so it is not sent again after every lease for as long as it is refused.
   */
  private async recordWithoutResponse(attempt: UnrecordedAttempt, refusal: unknown): Promise<void> {
    const stripped = { ...attempt, result: { ...attempt.result, response_headers: {}, response_body: null } };
    try {
      const [row] = await this.deps.db.write((tx) => this.recordAttempts(tx, [stripped]));
      this.deps.log.warn("webhook delivery attempt recorded without the receiver's headers and body, which the database refused", { delivery_id: attempt.due.id, error: String(refusal) });
      attempt.settle.resolve(row!);
    } catch {
      attempt.settle.reject(refusal);
    }
  }

  /** recordAttempts stores each attempt's outcome and runs its inRecordWrite, then adds them to their subscriptions' statistics. */
  private async recordAttempts(tx: Db, attempts: UnrecordedAttempt[]): Promise<(RecordedAttempt | null)[]> {
    const now = this.now();
    const rows: (RecordedAttempt | null)[] = [];
    const healthy = new Set<string>();
    for (const a of attempts) {
      rows.push(await recordAttempt(tx, this.deps.config, a.due, a.result, a.trigger, now, healthy));
      await a.inRecordWrite?.(tx);
    }
    if (healthy.size > 0) await markSubscriptionsHealthy(tx, [...healthy]);
    const sent = attempts.filter((a) => !a.result.local_fault);
    await addAttemptStats(tx, sent.map((a) => ({ subscription_id: a.due.subscription_id, started_at: a.result.started_at, duration_ms: a.result.duration_ms, succeeded: succeeded(a.result) })));
    return rows;
  }

  /**
   * attemptNow makes a manual attempt of a delivery whatever its status, and resolves with null
   * once it is recorded, or with why it was not made: the delivery or its subscription is gone,
   * its event's payload was erased, the subscription is disabled or paused, an attempt of the delivery is under way,
   * MAX_PER_SUBSCRIPTION of its subscription are (or here as many as its receiver's cut cap), MAX_MANUAL_ATTEMPTS are, or the loop is
   * shutting down. `inRecordWrite` runs inside the write that records the outcome.
   */
  async attemptNow(id: string, inRecordWrite?: (tx: Db) => Promise<void>): Promise<AttemptRefusal | null> {
    const { db, config } = this.deps;
    if (this.state === "stopping" || this.state === "stopped") return { refused: "shutting-down" };
    let counted = false;
    let slotHeldFor: string | null = null;
    try {
      const claim = await db.write(async (tx): Promise<AttemptRefusal | DueDelivery> => {
        const now = await this.readClock(tx);
        const row = await findDeliveryToSend(tx, id);
        if (!row) return { refused: "not-found" };
        if (row.event_erased_at !== null) return { refused: "event-erased", erasedAt: row.event_erased_at };
        if (row.secret === null) return { refused: "subscription-deleted", subscriptionId: row.subscription_id };
        if (row.subscription_status !== "active") return { refused: "subscription-disabled", subscriptionId: row.subscription_id };
        if (row.subscription_paused_at !== null) return { refused: "subscription-paused", subscriptionId: row.subscription_id };
        if ((row.locked_until !== null && row.locked_until > now) || this.underWay().get(row.subscription_id)?.includes(id)) return { refused: "in-progress" };
        // Left running on the key crm secrets-key rotate replaced, this instance could not sign it: the attempt would send nothing and record nothing.
        if (!this.opensSigningSecrets(row)) return { refused: "secrets-key-replaced" };
        if ((await this.attemptsUnderWay(tx, row.subscription_id, now)) >= MAX_PER_SUBSCRIPTION) return { refused: "subscription-attempts-busy", subscriptionId: row.subscription_id, cap: MAX_PER_SUBSCRIPTION };
        // A receiver cut for leaving attempts unanswered gets no more at once by hand than the loop
        // sends it: a few presses of Retry now would otherwise open as many requests at a receiver
        // that hangs, each held for the whole timeout.
        const cap = this.caps.capOf(row.subscription_id);
        if ((this.perSubscription.get(row.subscription_id) ?? 0) >= cap) return { refused: "subscription-attempts-busy", subscriptionId: row.subscription_id, cap };
        // Counted in the claim's write, after the refusals above: writes run one at a time, so
        // requests arriving together each see the attempts claimed before them, and a request
        // refused as in progress is never counted as an attempt under way.
        if (this.manualAttempts >= MAX_MANUAL_ATTEMPTS) return { refused: "manual-attempts-busy" };
        this.manualAttempts++;
        counted = true;
        const [leased] = await lease(tx, [row], now + config.deliveryTimeoutMs + LEASE_MARGIN_MS);
        // Held inside the write: a claim round whose write runs after this one, in the same group,
        // picks with this attempt counted, though it starts only once the group has committed.
        this.holdReceiverSlot(row.subscription_id);
        slotHeldFor = row.subscription_id;
        return leased!;
      });
      if ("refused" in claim) return claim;
      slotHeldFor = null;
      return (await this.dispatch(claim, "manual", inRecordWrite)) ? { refused: "shutting-down" } : null;
    } finally {
      // The write failed after its slot was held: no attempt is made.
      if (slotHeldFor !== null) this.freeReceiverSlot(slotHeldFor);
      if (counted) this.manualAttempts--;
    }
  }

  /**
   * underWay returns the ids of the deliveries with an attempt open here, by subscription: a claim
   * leaves them out and a manual attempt is refused as in progress, though a wall clock stepped
   * forward may have run their leases out, which would send them again beside the open attempt.
   */
  private underWay(): Map<string, string[]> {
    const ids = new Map<string, string[]>();
    for (const { due } of this.inFlight) {
      const of = ids.get(due.subscription_id);
      if (of) of.push(due.id);
      else ids.set(due.subscription_id, [due.id]);
    }
    return ids;
  }

  /**
   * attemptsUnderWay counts a subscription's attempts under way, in the caller's write: the leases
   * every instance holds (the writes before it in its group included, claimed but not started
   * yet), or this process's attempts, whose leases may have run out while their requests stay open.
   */
  private async attemptsUnderWay(tx: Db, subscriptionId: string, now: number): Promise<number> {
    const leased = (await countLeases(tx, [subscriptionId], now)).get(subscriptionId) ?? 0;
    return Math.max(leased, this.perSubscription.get(subscriptionId) ?? 0);
  }

  /**
   * subscriptionEnabled is told of a disabled subscription enabled again (its write committed): its
   * receiver's cut is forgotten, as an operator enables one once its receiver is mended, which the
   * cut learnt while it failed would otherwise send one attempt at a time until answers raised it
   * again. Other instances learn on their own, as they learnt the cut.
   */
  subscriptionEnabled(subscriptionId: string): void {
    this.caps.forget(subscriptionId);
  }

  /**
   * subscriptionDeleted is told of a subscription whose delete has just committed: it aborts the
   * subscription's attempts under way here, and notifies the other instances sharing the database
   * to abort theirs. A failed notify leaves those to the instances' next polls
   * (abortAttemptsOfMissedDeletes); the delete stands.
   */
  subscriptionDeleted(subscriptionId: string): void {
    this.abortAttemptsOfDeleted(subscriptionId);
    if (!this.shared) return;
    this.deps.db
      .notify(DELIVERY_CHANNEL, `${DELETED_PREFIX}${subscriptionId}`)
      .catch((error: unknown) => this.deps.log.warn("webhook delivery loop: cannot tell other instances of a deleted subscription; its attempts under way there run until their next poll finds it gone", { subscription_id: subscriptionId, error: String(error) }));
  }

  /**
   * abortAttemptsOfDeleted ends the attempts of a subscription just deleted that are still waiting
   * for an answer, each recorded as failed: they would otherwise hold their slots, MAX_IN_FLIGHT's
   * and MAX_SCHEDULED_ATTEMPTS', until their timeouts, and a subscription made in its place could wait for them.
   * Its receiver's cap goes with it.
   */
  private abortAttemptsOfDeleted(subscriptionId: string): void {
    this.caps.forget(subscriptionId);
    for (const attempt of this.inFlight) {
      if (attempt.due.subscription_id === subscriptionId && attempt.result === undefined) attempt.controller.abort(new AttemptInterrupted("subscription deleted while the attempt was under way"));
    }
  }

  /**
   * abortAttemptsOfMissedDeletes aborts, as abortAttemptsOfDeleted does, the attempts under way here
   * whose subscriptions no longer exist though no notification told of their deletes (the notify
   * failed, or this listening connection was down), and drops their receivers' cuts: the safety net
   * of instances sharing a database. A cut receiver whose subscription was deleted has no attempt
   * left to raise its cap back, so its entry would otherwise stay for the life of the process. One
   * query, at most every sharedPollMs (each poll, then), and only while attempts are under way or
   * receivers are cut.
   */
  private async abortAttemptsOfMissedDeletes(): Promise<void> {
    const known = new Set([...this.inFlight].filter((attempt) => attempt.result === undefined).map((attempt) => attempt.due.subscription_id));
    for (const subscriptionId of this.caps.cutIds()) known.add(subscriptionId);
    if (known.size === 0 || performance.now() - this.deletesCheckedAt < this.deps.sharedPollMs) return;
    this.deletesCheckedAt = performance.now();
    try {
      for (const subscriptionId of await findDeletedSubscriptions(this.deps.db, [...known])) this.abortAttemptsOfDeleted(subscriptionId);
    } catch (error) {
      this.deps.log.warn("webhook delivery loop: cannot check for deleted subscriptions among those of the attempts under way and the receivers cut; checked again at the next poll", { error: String(error) });
    }
  }

  /**
   * abandonManualAttempts gives up the manual attempts still waiting for an answer, as stop gives
   * up the others, so that each request waiting for one is answered (refused: shutting down)
   * before the shutdown deadline closes its connection: an attempt may take longer than the deadline.
   */
  async abandonManualAttempts(): Promise<void> {
    await this.abandon([...this.inFlight].filter((attempt) => attempt.trigger === "manual" && attempt.result === undefined));
  }

  /** abandon aborts attempts without recording them and releases their leases, so they are sent again after a restart. */
  private async abandon(attempts: InFlight[]): Promise<void> {
    for (const attempt of attempts) {
      attempt.abandoned = true;
      attempt.controller.abort();
    }
    if (attempts.length === 0) return;
    await this.release(attempts.map((f) => f.due));
    this.deps.log.warn("webhook attempts abandoned at shutdown; the deliveries among them still pending are sent again after restart", { count: attempts.length });
  }

  /**
   * stop stops claiming, waits up to `deadlineMs` for attempts in flight to be recorded, then
   * aborts the rest and releases their leases so the next start sends them again at once.
   */
  async stop(deadlineMs = DRAIN_DEADLINE_MS): Promise<void> {
    if (this.state === "stopped") return;
    this.state = "stopping";
    this.armTimer(null);
    clearInterval(this.sweepTimer);
    this.sweepTimer = undefined;
    await this.claiming;
    await settlesWithin(Promise.allSettled([...this.inFlight].map((f) => f.done)), deadlineMs);
    // An attempt with its answer in is being recorded, in a write already queued: it is left to it.
    await this.abandon([...this.inFlight].filter((attempt) => attempt.result === undefined && !attempt.abandoned));
    await this.unsent;
    const stopListening = await this.listening;
    this.listening = null;
    await stopListening?.();
    this.state = "stopped";
  }
}
