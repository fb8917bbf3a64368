import { errorCode, sqlStateOf } from "../shared/thrown.ts";
import type { Db } from "./sql.ts";

/** isStorageFull tells whether a database's error refused a write for want of room: SQLite's SQLITE_FULL, PostgreSQL's 53100 (disk full). */
export function isStorageFull(error: unknown): boolean {
  return errorCode(error) === "SQLITE_FULL" || sqlStateOf(error) === "53100";
}

/** StorageFull is the last write refused for want of room (isStorageFull) and when, by performance.now(). */
export interface StorageFull {
  error: unknown;
  at: number;
}

/** PendingWrite is one `write` waiting for its group: its work, and how its caller is answered. */
export interface PendingWrite {
  work: (tx: Db) => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
  /** set for bookkeeping (writeBookkeeping), which is refused rather than kept waiting while another process holds the write lock */
  givesUp: boolean;
}

/** GroupOutcome is how one write of a group ended, told to its caller once the group is committed. */
export type GroupOutcome = { ok: true; value: unknown } | { ok: false; value: unknown };

/** CommittedGroup is what a committed group tells: the outcome of each write it ran, in order, and whether any row changed. */
export interface CommittedGroup {
  outcomes: GroupOutcome[];
  changed: boolean;
}

/**
 * GROUP_TIME_MS bounds how long a group takes writes: once its writes have run this long, those
 * left wait for the next group. A delivery's claim commits with its group, and its lease (the
 * attempt's timeout + 2 s) runs from the claim: large batches after it in one group, each
 * statement a round trip to a PostgreSQL server elsewhere, could otherwise outlast that margin.
 */
export const GROUP_TIME_MS = 200;

/** Savepoints are the savepoint statements of a group's transaction, as its backend runs them. */
export interface Savepoints {
  open(): unknown;
  release(): unknown;
  rollBack(): unknown;
}

/**
 * runWrites runs a group's writes one after another on `tx`, each inside its own savepoint, and
 * returns the outcome of each write it ran. A write succeeds once its savepoint is released: on
 * PostgreSQL a work that caught a failed statement and returned left the transaction aborted, and
 * the release refuses it. No further write is taken once the group has run GROUP_TIME_MS; the
 * rest wait for the next group.
 */
export async function runWrites(batch: PendingWrite[], tx: Db, savepoints: Savepoints): Promise<GroupOutcome[]> {
  const started = performance.now();
  const outcomes: GroupOutcome[] = [];
  for (const item of batch) {
    if (outcomes.length > 0 && performance.now() - started >= GROUP_TIME_MS) break;
    await savepoints.open();
    try {
      const value = await item.work(tx);
      await savepoints.release();
      outcomes.push({ ok: true, value });
    } catch (error) {
      await savepoints.rollBack();
      outcomes.push({ ok: false, value: error });
    }
  }
  return outcomes;
}

/**
 * WriteGroups queues the writes of concurrent requests and commits them in groups, one group at a
 * time. `commitGroup` begins a transaction, takes the writes waiting at that moment (`take`: on
 * PostgreSQL once the write lock is granted, so writes that came while it waited for another
 * instance join the group), runs them (runWrites) and returns their outcomes once committed; the
 * writes it did not run (GROUP_TIME_MS) lead the next group. Should it throw (the transaction
 * failed), every write it took is refused with that error. After the callers of a group that
 * changed rows are answered, `committed` runs (it wakes the delivery loop); a group that changed
 * nothing (a claim round that found nothing due) wakes nobody, or the delivery loop's own empty
 * claims would wake it again and again.
 */
export class WriteGroups {
  private pending: PendingWrite[] = [];
  private scheduled = false;
  private flushing: Promise<void> | null = null;
  private answering = 0;
  private full: StorageFull | null = null;
  /** when (performance.now) the last group whose writes all succeeded committed a change */
  private changeCommittedAt = -Infinity;
  /** when a group last failed, or one of its writes was refused */
  private refusedAt = -Infinity;

  constructor(
    private readonly commitGroup: (take: () => PendingWrite[]) => Promise<CommittedGroup>,
    private readonly committed: () => void,
  ) {}

  /**
   * submit queues `work` for the next group and resolves with its result once that group is
   * committed; a work that `givesUp` is refused by refuseThoseGivingUp instead.
   */
  submit<T>(work: (tx: Db) => Promise<T>, givesUp = false): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ work, resolve: resolve as (value: unknown) => void, reject, givesUp });
      this.schedule();
    });
  }

  /** refuseThoseGivingUp refuses with `error` the queued writes that give up rather than wait (submit), and keeps the others queued. */
  refuseThoseGivingUp(error: unknown): void {
    const refused = this.pending.filter((item) => item.givesUp);
    if (refused.length === 0) return;
    this.pending = this.pending.filter((item) => !item.givesUp);
    for (const item of refused) item.reject(error);
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => void this.flush());
  }

  /**
   * storageFull is the last write refused for want of room, unless a group has since committed a
   * change with no write refused so: on a nearly full disk a small write fits where others do not,
   * so one that succeeds does not tell that the disk has room until the refused ones do.
   */
  storageFull(): StorageFull | null {
    return this.full;
  }

  /** waiting counts the writes submitted and not answered yet: queued, or in the group being committed. */
  waiting(): number {
    return this.pending.length + this.answering;
  }

  /**
   * committedRecently tells whether a group whose every write succeeded committed a change within
   * the last `withinMs`, with no group failed nor write refused since: the database took a write
   * as a readiness probe's would test it. A refusal for the request's own sake counts too, as the
   * groups cannot tell it from the database's: it only makes the next probe write.
   */
  committedRecently(withinMs: number): boolean {
    return this.changeCommittedAt > this.refusedAt && performance.now() - this.changeCommittedAt <= withinMs;
  }

  /** drain commits everything submitted so far, and what is submitted meanwhile. */
  async drain(): Promise<void> {
    while (this.flushing || this.pending.length > 0) await this.flush();
  }

  private async flush(): Promise<void> {
    // Never two groups at once: a group still awaiting its works is waited for.
    while (this.flushing) await this.flushing;
    this.scheduled = false;
    if (this.pending.length === 0) return;
    this.flushing = this.answer();
    try {
      await this.flushing;
    } finally {
      this.flushing = null;
    }
  }

  private async answer(): Promise<void> {
    let batch: PendingWrite[] | null = null;
    const take = () => {
      batch = this.pending;
      this.pending = [];
      this.answering = batch.length;
      return batch;
    };
    let group: CommittedGroup;
    try {
      group = await this.commitGroup(take);
    } catch (error) {
      this.refusedAt = performance.now();
      if (isStorageFull(error)) this.full = { error, at: this.refusedAt };
      // A transaction that failed before it took its writes (it could not begin) fails those waiting.
      for (const item of batch ?? take()) item.reject(error);
      return;
    } finally {
      this.answering = 0;
    }
    const refused = group.outcomes.find((outcome) => !outcome.ok && isStorageFull(outcome.value));
    if (refused) this.full = { error: refused.value, at: performance.now() };
    else if (group.changed) this.full = null;
    if (group.outcomes.some((outcome) => !outcome.ok)) this.refusedAt = performance.now();
    else if (group.changed) this.changeCommittedAt = performance.now();
    const taken: PendingWrite[] = batch ?? [];
    const left = taken.slice(group.outcomes.length);
    if (left.length > 0) {
      this.pending = [...left, ...this.pending];
      this.schedule();
    }
    group.outcomes.forEach((outcome, i) => {
      if (outcome.ok) taken[i]!.resolve(outcome.value);
      else taken[i]!.reject(outcome.value);
    });
    if (group.changed) this.committed();
  }
}
