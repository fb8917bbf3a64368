import type { Db } from "./sql.ts";

/**
 * CHANGE_CLOCK_TICK_MS spaces the change clock's reads of the wall clock while nothing is stamped:
 * each raises its mark, so after a step back it holds the time the clock showed up to a tick before
 * the step, the time the Date headers of the answers before it gave, which a poller takes its
 * watermarks from too (the first run's T0, a round that lists no deletion).
 */
const CHANGE_CLOCK_TICK_MS = 100;

/**
 * ChangeClock gives the instants changes are stamped with (created_at, updated_at, deleted_at of
 * contacts, accounts and users, what an incremental sync polls): the wall clock, except that it
 * never goes back. It is the latest of every reading of the wall clock it made and of the largest
 * stamp the database held at its first stamp: after the clock is stepped back, it stands still
 * until the clock catches up, so no change is stamped below a poller's watermark taken before the
 * step, which would never list it. Changes stamped while it stands still share one millisecond,
 * which the lists' cursors order by id and a poller's overlap reads again. Not 1 ms past the last
 * stamp: a batch of 1,000 changes in one millisecond would then stamp a second ahead of every
 * clock, and below it what another instance, not knowing this mark, stamps meanwhile.
 */
export class ChangeClock {
  private latest = -Infinity;
  private seeded = false;
  private readonly ticker: Timer;

  /** `read` is the wall clock (Date.now; a test gives one it steps). */
  constructor(private readonly read: () => number = Date.now) {
    this.ticker = setInterval(() => this.now(), CHANGE_CLOCK_TICK_MS);
    this.ticker.unref();
  }

  /** now reads the wall clock, or returns the latest time read or raised to before, when the clock shows less. */
  now(): number {
    const wall = this.read();
    if (wall > this.latest) this.latest = wall;
    return this.latest;
  }

  /** raise moves the mark up to `ms` (a stamp stored by a clock that was ahead); one that is not later changes nothing. */
  raise(ms: number | null): void {
    if (ms !== null && ms > this.latest) this.latest = ms;
  }

  /**
   * stamp returns the instant for the changes of a write (`tx`): now(), raised the first time to
   * the largest stamp the database holds, so that a restart, or another instance's start, after
   * the clock was stepped back stamps no earlier than what was stamped before the step.
   */
  async stamp(tx: Db): Promise<number> {
    if (!this.seeded) {
      this.raise(await findLatestChangeStamp(tx));
      this.seeded = true;
    }
    return this.now();
  }

  /** stop ends the ticks (the database is closed). */
  stop(): void {
    clearInterval(this.ticker);
  }
}

/** findLatestChangeStamp returns the largest updated_at of contacts, accounts and users and deleted_at of their tombstones (null in an empty database), each read from its index's end. */
async function findLatestChangeStamp(db: Db): Promise<number | null> {
  const row = await db.get<{ latest: number | null }>(
    `SELECT max(latest) AS latest FROM (
       SELECT max(updated_at) AS latest FROM contacts
       UNION ALL SELECT max(updated_at) FROM accounts
       UNION ALL SELECT max(updated_at) FROM users
       UNION ALL SELECT max(deleted_at) FROM tombstones WHERE resource = 'contact'
       UNION ALL SELECT max(deleted_at) FROM tombstones WHERE resource = 'account'
       UNION ALL SELECT max(deleted_at) FROM tombstones WHERE resource = 'user'
     ) stamps`,
  );
  return row?.latest === null || row?.latest === undefined ? null : Number(row.latest);
}
