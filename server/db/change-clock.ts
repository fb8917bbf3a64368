import { SpacedLine, type Logger } from "../shared/log.ts";
import { DAY_MS, toTimestamp } from "../shared/time.ts";
import type { Db } from "./sql.ts";

/**
 * CHANGE_CLOCK_TICK_MS spaces the change clock's reads of the wall clock while nothing is stamped:
 * each raises its mark, so after a step back it holds the time the clock showed up to a tick before
 * the step, the time the Date headers of the answers before it gave, which a poller takes its
 * watermarks from too (the first run's T0, a round that lists no deletion).
 */
const CHANGE_CLOCK_TICK_MS = 100;

/**
 * CHANGE_CLOCK_SEED_LEAD_MS is how far ahead of the wall clock a stored stamp may be and still be
 * followed: further, a clock wrong by more than an NTP step wrote it (a host started with a bad
 * clock), and following it would stamp every change at that one instant for as long, years maybe.
 */
const CHANGE_CLOCK_SEED_LEAD_MS = DAY_MS;

/** CHANGE_CLOCK_LEAD_WARNING_MS is how far ahead of the wall clock the change clock stands before its stamps are logged (spaced). */
const CHANGE_CLOCK_LEAD_WARNING_MS = 60_000;

/** CLOCK_READING is where the mark came from when the wall clock itself showed it, before a step back. */
const CLOCK_READING = "this clock";

/**
 * ChangeClock gives the instants changes are stamped with (created_at, updated_at, deleted_at of
 * contacts, accounts and users, what an incremental sync polls): the wall clock, except that it
 * never goes back. It is the latest of every reading of the wall clock it made and of the largest
 * stamp the database held at its first stamp, unless that stamp is more than a day ahead
 * (CHANGE_CLOCK_SEED_LEAD_MS): after the clock is stepped back, it stands still until the clock
 * catches up, so no change is stamped below a poller's watermark taken before the step, which
 * would never list it. Changes stamped while it stands still share one millisecond, which the
 * lists' cursors order by id and a poller's overlap reads again. Not 1 ms past the last stamp: a
 * batch of 1,000 changes in one millisecond would then stamp a second ahead of every clock, and
 * below it what another instance, not knowing this mark, stamps meanwhile.
 */
export class ChangeClock {
  private latest = -Infinity;
  /** where `latest` came from, for the warning of a clock standing ahead: CLOCK_READING or a stamp's column */
  private from = CLOCK_READING;
  private seeded = false;
  private readonly ticker: Timer;
  private log: Logger | null = null;
  private readonly aheadLine = new SpacedLine();

  /** `read` is the wall clock (Date.now; a test gives one it steps). */
  constructor(private readonly read: () => number = Date.now) {
    this.ticker = setInterval(() => this.now(), CHANGE_CLOCK_TICK_MS);
    this.ticker.unref();
  }

  /** logTo has a stored stamp not followed, and stamps standing ahead of the wall clock, logged to `log` (a serving instance's). */
  logTo(log: Logger): void {
    this.log = log;
  }

  /**
   * seedAtStart seeds the mark when a service starts, in a read of its own, so that a serving
   * instance's first write reads no table but its own: seeded in that write, a create of an
   * account would wait on a lock another session holds on contacts. Refused (a table locked just
   * then, waited on for the answer timeout), it is logged, and the first write seeds it instead.
   */
  async seedAtStart(db: Db): Promise<void> {
    try {
      await this.seedBeforeWrites(db);
    } catch (error) {
      this.log?.warn("the change clock did not read the stamps stored at start (a lock another PostgreSQL session holds, or the database not answering): the first change reads them, in its write", { error: String(error) });
    }
  }

  /**
   * seedBeforeWrites seeds the mark, if not yet seeded, reading `db`: a command that stamps calls it
   * on the database before its write, whose first stamp would otherwise read it there, waiting on a
   * lock held on any of the stamped tables while holding the write lock, so holding up every
   * instance's writes meanwhile.
   */
  async seedBeforeWrites(db: Db): Promise<void> {
    if (this.seeded) return;
    await this.seed(db);
    this.seeded = true;
  }

  /** now reads the wall clock, or returns the latest time read or raised to before, when the clock shows less. */
  now(): number {
    return this.follow(this.read());
  }

  /** raise moves the mark up to `ms` (a stamp stored by a clock that was ahead, `from` naming it); one that is not later changes nothing. */
  raise(ms: number | null, from = CLOCK_READING): void {
    if (ms !== null && ms > this.latest) {
      this.latest = ms;
      this.from = from;
    }
  }

  /**
   * stamp returns the instant for the changes of a write (`tx`): now(), raised the first time to
   * the largest stamp the database holds no more than a day ahead, so that a restart, or another
   * instance's start, after the clock was stepped back stamps no earlier than what was stamped
   * before the step. Stamps more than a minute ahead of the wall clock are logged, a line a minute.
   */
  async stamp(tx: Db): Promise<number> {
    await this.seedBeforeWrites(tx);
    const wall = this.read();
    const stamp = this.follow(wall);
    const ahead = stamp - wall;
    if (ahead > CHANGE_CLOCK_LEAD_WARNING_MS && this.log) {
      // performance.now(): the wall clock is what stands behind.
      const unlogged = this.aheadLine.occurred(performance.now());
      if (unlogged !== undefined) {
        this.log.warn("changes are stamped ahead of this clock, at a later time it showed before it was stepped back or a stamp stored, until it catches up", {
          ahead_ms: ahead,
          stamp: toTimestamp(stamp),
          from: this.from,
          ...(unlogged === null ? {} : { stamps_since_last_line: unlogged }),
        });
      }
    }
    return stamp;
  }

  /** stop ends the ticks (the database is closed). */
  stop(): void {
    clearInterval(this.ticker);
  }

  /** follow moves the mark up to a reading of the wall clock that passed it, and returns the mark. */
  private follow(wall: number): number {
    if (wall > this.latest) {
      this.latest = wall;
      this.from = CLOCK_READING;
    }
    return this.latest;
  }

  /** seed raises the mark to the largest stamp stored up to a day ahead, and logs the largest further ahead, which is not followed. */
  private async seed(tx: Db): Promise<void> {
    const wall = this.read();
    const stamps = await findLatestChangeStamps(tx, wall + CHANGE_CLOCK_SEED_LEAD_MS);
    for (const { where, followed } of stamps) this.raise(followed, storedIn(where));
    const [wrong] = stamps.filter((row) => row.latest !== null && row.latest !== row.followed).sort((a, b) => b.latest! - a.latest!);
    if (wrong && this.log) {
      this.log.warn("a change stamp stored more than a day ahead of this clock is not followed: a clock that was wrong wrote it, and changes are stamped below it from now on; correct it and have pollers start again (Keeping another system in step, in the README)", {
        ...wrong.where,
        stamp: toTimestamp(wrong.latest!),
        ahead_ms: wrong.latest! - wall,
      });
    }
  }
}

/** CHANGE_STAMPS are where changes are stamped: each a column with an index to read its largest from, the tombstones' per resource. */
const CHANGE_STAMPS = [
  { table: "contacts", column: "updated_at" },
  { table: "accounts", column: "updated_at" },
  { table: "users", column: "updated_at" },
  { table: "tombstones", column: "deleted_at", resource: "contact" },
  { table: "tombstones", column: "deleted_at", resource: "account" },
  { table: "tombstones", column: "deleted_at", resource: "user" },
] as const;

type StampColumn = (typeof CHANGE_STAMPS)[number];

/** storedIn names a stamp column in a log line: contacts.updated_at, tombstones.deleted_at of users. */
const storedIn = (where: StampColumn) => `${where.table}.${where.column}${"resource" in where ? ` of ${where.resource}s` : ""}`;

/**
 * findLatestChangeStamps returns, for each of CHANGE_STAMPS, its largest stamp and its largest up
 * to `followedUntil` (null when none), each read from its index's end, in one statement.
 */
async function findLatestChangeStamps(db: Db, followedUntil: number): Promise<{ where: StampColumn; latest: number | null; followed: number | null }[]> {
  const largest = ({ table, column, ...of }: StampColumn, upTo: boolean) => {
    const where = ["resource" in of ? `resource = '${of.resource}'` : null, upTo ? `${column} <= ?` : null].filter((term) => term !== null);
    return `(SELECT max(${column}) FROM ${table}${where.length ? ` WHERE ${where.join(" AND ")}` : ""})`;
  };
  const rows = await db.all<{ source: number | string; latest: number | string | null; followed: number | string | null }>(
    CHANGE_STAMPS.map((where, source) => `SELECT ${source} AS source, ${largest(where, false)} AS latest, ${largest(where, true)} AS followed`).join("\nUNION ALL "),
    CHANGE_STAMPS.map(() => followedUntil),
  );
  const stamp = (value: number | string | null) => (value === null ? null : Number(value));
  return rows.map((row) => ({ where: CHANGE_STAMPS[Number(row.source)]!, latest: stamp(row.latest), followed: stamp(row.followed) }));
}
