import { migrationState } from "../db/backend.ts";
import type { Db } from "../db/sql.ts";
import type { Logger } from "../shared/log.ts";
import { BUILD } from "../version.ts";

/**
 * MIGRATION_CHECK_INTERVAL_MS is how often a running instance reads the migrations its database
 * records (two small reads): within this long of a newer crm migrating the database under it, it
 * stops writing to it.
 */
const MIGRATION_CHECK_INTERVAL_MS = 5000;
/** EARLY_CHECK_SPACING_MS spaces the checks asked for between two timed ones, so that a burst of failed requests costs one check. */
const EARLY_CHECK_SPACING_MS = 1000;

/**
 * MigrationWatch notices, while the instance runs, that a newer crm has migrated its database: one
 * started beside it (a fleet upgraded one VM at a time). This instance's code would go on reading
 * and writing that schema the old way (retry schedules, sign-in records the newer migrations
 * rewrote), so once it finds such migrations it says so in `newer`, which the requests are refused
 * by, logs it once and calls `onFound` to stop the background work that writes. It checks every
 * MIGRATION_CHECK_INTERVAL_MS, and sooner when asked (checkSoon) after a failure a changed schema
 * could explain.
 */
export class MigrationWatch {
  private found: readonly string[] = [];
  private timer: ReturnType<typeof setInterval> | null = null;
  private checking: Promise<void> | null = null;
  private checkedAt = -Infinity;
  /** null until the watch is started: migrations a write noticed before then stop the background work at the start */
  private onFound: (() => Promise<void>) | null = null;
  private stoppingWork: Promise<void> = Promise.resolve();

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
  ) {}

  /** newer lists the migrations found that this version does not know; empty until then. */
  get newer(): readonly string[] {
    return this.found;
  }

  /**
   * start checks every MIGRATION_CHECK_INTERVAL_MS from now on; `onFound` stops the background work
   * once newer migrations are found, at once when a write found them before (serve starts the
   * watch after listening and writing the setup code, while every write looks from the start).
   */
  start(onFound: () => Promise<void>): void {
    this.onFound = onFound;
    if (this.found.length > 0) return this.stopWork();
    this.timer = setInterval(() => this.check(), MIGRATION_CHECK_INTERVAL_MS);
    this.timer.unref();
  }

  /** checkSoon checks now, unless the watch is not started, a check is under way or one began within EARLY_CHECK_SPACING_MS. */
  checkSoon(): void {
    if (this.timer !== null && performance.now() - this.checkedAt >= EARLY_CHECK_SPACING_MS) this.check();
  }

  private check(): void {
    if (this.checking || this.found.length > 0) return;
    this.checkedAt = performance.now();
    this.checking = migrationState(this.db)
      .then(
        ({ newer }) => {
          if (newer.length > 0 && this.timer !== null) this.noticed(newer);
        },
        // A database that cannot be used just now is reported by /readyz and the requests; the next check reads again.
        () => {},
      )
      .finally(() => {
        this.checking = null;
      });
  }

  /**
   * noticed takes `newer` for the migrations this version does not know, found by a check or by a
   * write that met them under the write lock (PostgresDatabase.refuseWritesAfter): it logs them once
   * and stops the background work (once the watch is started); told again, it does nothing.
   */
  noticed(newer: readonly string[]): void {
    if (this.found.length > 0) return;
    this.found = newer;
    if (this.timer !== null) clearInterval(this.timer);
    this.log.error(
      "the database was migrated by a newer crm: this instance refuses every API and console request (503 database-newer) and stops its webhook deliveries and background jobs; stop it and run the newer crm",
      { version: BUILD, newer_migrations: newer },
    );
    this.stopWork();
  }

  /** stopWork stops the background work with `onFound`, unless the watch is not started yet (start does then). */
  private stopWork(): void {
    if (this.onFound) this.stoppingWork = this.onFound().catch((error: unknown) => this.log.error("stopping the background work failed", { error: String(error) }));
  }

  /** stop ends the checks and waits for one under way, and for the background work's stop if a check began it. */
  async stop(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    await this.checking;
    await this.stoppingWork;
  }
}
