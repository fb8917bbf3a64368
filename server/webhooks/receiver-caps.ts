import type { AttemptResult } from "./delivery.ts";

/**
 * ReceiverCaps holds how many attempts of each subscription this process may have open at once,
 * additive increase, multiplicative decrease: `full` (MAX_PER_SUBSCRIPTION) until its receiver
 * leaves an attempt unanswered (a timeout, no connection), then half the requests it had open at
 * each one, down to 1, and one more at each answer, back up to `full`. A receiver that hangs holds
 * each slot it gets for the whole timeout: at their full caps, eleven of them with a backlog held
 * all MAX_IN_FLIGHT slots and left every other subscription one attempt at a time. In memory only,
 * so each instance learns on its own and a restart starts every receiver at `full`; only the
 * receivers cut have an entry, so a healthy one costs a Map miss per claim. Keyed by subscription,
 * whose target never changes: a new receiver is a new subscription, at `full`.
 */
export class ReceiverCaps {
  private readonly cut = new Map<string, number>();

  constructor(private readonly full: number) {}

  /** capOf is how many attempts of the subscription may be open here at once. */
  capOf(subscriptionId: string): number {
    return this.cut.get(subscriptionId) ?? this.full;
  }

  /**
   * attempted adjusts the subscription's cap by an attempt's result, `open` its requests open here
   * with this one: an unanswered one halves what was open (not the cap, which a receiver kept to its
   * share of the reserve never reached), an answer, whatever its status, adds one.
   */
  attempted(subscriptionId: string, result: AttemptResult, open: number): void {
    const cap = this.capOf(subscriptionId);
    if (result.unanswered) this.cut.set(subscriptionId, Math.max(1, Math.floor(Math.min(cap, open) / 2)));
    else if (result.response_status === null || cap >= this.full) return;
    else if (cap + 1 >= this.full) this.cut.delete(subscriptionId);
    else this.cut.set(subscriptionId, cap + 1);
  }

  /** forget drops a subscription's cap: deleted, or enabled again once its receiver was mended. */
  forget(subscriptionId: string): void {
    this.cut.delete(subscriptionId);
  }

  /** cutIds names the subscriptions whose receivers are cut, each with an entry. */
  cutIds(): string[] {
    return [...this.cut.keys()];
  }
}
