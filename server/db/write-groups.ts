import type { Db } from "./sql.ts";

/** PendingWrite is one `write` waiting for its group: its work, and how its caller is answered. */
export interface PendingWrite {
  work: (tx: Db) => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

/** GroupOutcome is how one write of a group ended, told to its caller once the group is committed. */
export type GroupOutcome = { ok: true; value: unknown } | { ok: false; value: unknown };

/** CommittedGroup is what a committed group tells: each write's outcome, in order, and whether any row changed. */
export interface CommittedGroup {
  outcomes: GroupOutcome[];
  changed: boolean;
}

/**
 * WriteGroups queues the writes of concurrent requests and commits them in groups, one group at a
 * time. `commitGroup` begins a transaction, takes the writes waiting at that moment (`take`: on
 * PostgreSQL once the write lock is granted, so writes that came while it waited for another
 * instance join the group), runs each inside its own savepoint and returns their outcomes once
 * committed; should it throw (the transaction failed), every write of the group is refused with
 * that error. After the callers of a group that changed rows are answered, `committed` runs (it
 * wakes the delivery loop); a group that changed nothing (a claim round that found nothing due)
 * wakes nobody, or the delivery loop's own empty claims would wake it again and again.
 */
export class WriteGroups {
  private pending: PendingWrite[] = [];
  private scheduled = false;
  private flushing: Promise<void> | null = null;
  private answering = 0;

  constructor(
    private readonly commitGroup: (take: () => PendingWrite[]) => Promise<CommittedGroup>,
    private readonly committed: () => void,
  ) {}

  /** submit queues `work` for the next group and resolves with its result once that group is committed. */
  submit<T>(work: (tx: Db) => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ work, resolve: resolve as (value: unknown) => void, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => void this.flush());
      }
    });
  }

  /** waiting counts the writes submitted and not answered yet: queued, or in the group being committed. */
  waiting(): number {
    return this.pending.length + this.answering;
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
      // A transaction that failed before it took its writes (it could not begin) fails those waiting.
      for (const item of batch ?? take()) item.reject(error);
      return;
    } finally {
      this.answering = 0;
    }
    const answered: PendingWrite[] = batch ?? [];
    answered.forEach((item, i) => {
      const outcome = group.outcomes[i]!;
      if (outcome.ok) item.resolve(outcome.value);
      else item.reject(outcome.value);
    });
    if (group.changed) this.committed();
  }
}
