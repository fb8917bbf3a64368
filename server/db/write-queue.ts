import type { Database } from "bun:sqlite";

interface PendingWrite {
  work: () => unknown;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

/**
 * WriteQueue commits the writes of concurrent requests together (group commit): every write
 * submitted during one turn of the event loop runs in one transaction, each inside its own
 * savepoint so a failing write rolls back alone, and each caller is answered after the commit.
 * The savepoint statements are prepared once (db.run would prepare them on every write).
 */
export class WriteQueue {
  private pending: PendingWrite[] = [];
  private scheduled = false;
  private readonly afterCommitCallbacks: (() => void)[] = [];

  constructor(private readonly db: Database) {}

  /** submit runs work inside the next group transaction and resolves with its result once committed. */
  submit<T>(work: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ work, resolve: resolve as (value: unknown) => void, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  /** onCommit registers a callback run after every group commit (used to wake the delivery loop). */
  onCommit(callback: () => void): void {
    this.afterCommitCallbacks.push(callback);
  }

  /** flush commits everything submitted so far; it is also called on shutdown. */
  flush(): void {
    this.scheduled = false;
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return;
    const outcomes: { ok: boolean; value: unknown }[] = [];
    try {
      this.db.transaction(() => {
        for (const item of batch) {
          this.db.query("SAVEPOINT write").run();
          try {
            outcomes.push({ ok: true, value: item.work() });
            this.db.query("RELEASE write").run();
          } catch (error) {
            this.db.query("ROLLBACK TO write").run();
            this.db.query("RELEASE write").run();
            outcomes.push({ ok: false, value: error });
          }
        }
      }).immediate();
    } catch (error) {
      for (const item of batch) item.reject(error);
      return;
    }
    batch.forEach((item, i) => {
      const outcome = outcomes[i]!;
      if (outcome.ok) item.resolve(outcome.value);
      else item.reject(outcome.value);
    });
    for (const callback of this.afterCommitCallbacks) callback();
  }
}
