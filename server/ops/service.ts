import { Database } from "bun:sqlite";
import { existsSync, rmSync, statSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { bearerOf } from "../auth/service.ts";
import type { Config } from "../config.ts";
import { isBrowserRequest, isLoopback, isLoopbackHost, type ClientHints } from "../http/client-address.ts";
import { databaseNewer } from "../http/errors.ts";
import { databaseFile, openDatabase } from "../db/database.ts";
import { databaseFailureOf, databaseFaultOf, migrationState, tablesHomeOf, tablesMissing } from "../db/backend.ts";
import { ReadLaneFull } from "../db/slow-reads.ts";
import { ProblemError } from "../shared/problem.ts";
import type { Runtime } from "../runtime.ts";
import { settlesWithin, toTimestamp } from "../shared/time.ts";
import { BUILD, COMMIT, VERSION } from "../version.ts";
import { deliveryLoopStatus, deliveryQueueStats } from "../webhooks/service.ts";
import { recentHistorySize } from "../webhooks/retention.ts";
import { sameBytes } from "../shared/crypto.ts";
import { createOwnerOnlyFile, fsyncPath, partialName, publishFile, removeStalePartialsIn } from "../shared/files.ts";
import { SpacedLine, type Logger } from "../shared/log.ts";
import type { DeliveryOutcome } from "../webhooks/worker.ts";
import type { Gauge, Metrics } from "./metrics.ts";
import type { Health, Readiness, ReadinessChecks } from "./model.ts";
import { probeWrite, quickCheck, vacuumInto } from "./store.ts";
import { errorCode } from "../shared/thrown.ts";

const startedAt = Date.now();

/** health reports that the process is up and answering; it touches nothing else. */
export function health(): Health {
  return { status: "ok", version: VERSION, uptime_seconds: Math.floor((Date.now() - startedAt) / 1000) };
}

/**
 * READINESS_CHECK_TIMEOUT_MS bounds each readiness check: a database that does not answer (a
 * PostgreSQL server behind a dropped network path takes the client's 10 s connect timeout) fails
 * the check in time for a load balancer's probe, instead of holding the probe open.
 */
const READINESS_CHECK_TIMEOUT_MS = 3000;

/**
 * STORAGE_FULL_HOLD_MS is how long a write refused for want of room answers /readyz's database
 * check instead of its own write, unless a write succeeds meanwhile: one row changed and put back
 * fits in a page SQLite reuses where a create does not, and the check said ready between creates
 * refused 503 storage-full. Past it the check's write decides again, so an instance a load
 * balancer has taken out, which no write reaches, comes back once the disk has room.
 */
const STORAGE_FULL_HOLD_MS = 30_000;

/**
 * Failing is a readiness check's failure: a short cause code, which anyone may read in /readyz's
 * answer, and the reason, which may name file paths, PostgreSQL roles and databases and quote
 * driver errors: for the log and for a request that may read /metrics.
 */
class Failing {
  constructor(
    readonly code: string,
    readonly reason: string,
  ) {}
}

/** failingOf is the Failing of a check that threw: the database's fault or failure as its code (login-refused, storage-full, unavailable...), "failed" for anything else. */
function failingOf(error: unknown): Failing {
  return new Failing(databaseFaultOf(error) ?? databaseFailureOf(error) ?? "failed", String((error as Error)?.message ?? error));
}

async function check(run: () => Promise<Failing | null> | Failing | null): Promise<Failing | null> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<Failing>((resolve) => {
    timer = setTimeout(() => resolve(new Failing("no-answer", `no answer within ${READINESS_CHECK_TIMEOUT_MS / 1000} s`)), READINESS_CHECK_TIMEOUT_MS);
  });
  try {
    return await Promise.race([Promise.resolve().then(run), deadline]);
  } catch (error) {
    return failingOf(error);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * RECENT_WRITE_MS is how lately a write of the service must have committed a change to stand for
 * /readyz's own probe write (WriteProbe): a load balancer probes every few seconds, and a storage
 * that turned read-only since is found by the first write that tries it.
 */
const RECENT_WRITE_MS = 2000;

/**
 * WriteProbe tests, for /readyz, that the database takes a write. On SQLite a write of this process
 * that committed a change within RECENT_WRITE_MS, none refused since (committedRecently), already
 * showed it: the probe's write is a commit and a sync to disk, which the probe waits for behind the
 * group under way, and which alone holds up every request (the thread serving them runs the sync:
 * seconds on a slow disk). Otherwise it writes (probeWrite), and the probes asked meanwhile share
 * that write.
 */
export class WriteProbe {
  private underWay: Promise<void> | null = null;

  constructor(private readonly db: Runtime["db"]) {}

  /** test resolves once the database has shown that it takes a write, and rejects with what refused the probe's. */
  test(): Promise<void> {
    // PostgreSQL's probe is rolled back, no sync, and a server cut off since the last commit (a
    // network path dropped) must fail it at once, not pass on that commit's word.
    if (this.db.dialect === "sqlite" && this.db.committedRecently(RECENT_WRITE_MS)) return Promise.resolve();
    if (this.underWay) return this.underWay;
    const probe = probeWrite(this.db);
    this.underWay = probe;
    const done = () => void (this.underWay === probe && (this.underWay = null));
    probe.then(done, done);
    return probe;
  }
}

type ReadinessVerdicts = Record<keyof ReadinessChecks, Failing | null>;

/** readinessChecks runs every readiness check at once; each is null (ok) or says what is wrong. */
async function readinessChecks(rt: Runtime, probe: WriteProbe): Promise<ReadinessVerdicts> {
  const [database, migrations, delivery_loop] = await Promise.all([
    check(async () => {
      // Set until a restart, whatever a probe would say: later writes may well succeed.
      const fault = rt.db.storageFault();
      if (fault) return new Failing("storage-fault", fault);
      const full = rt.db.storageFull();
      if (full && performance.now() - full.at < STORAGE_FULL_HOLD_MS) return failingOf(full.error);
      // A write refused for a newer crm's migrations reached a database that answers: the migrations check tells why.
      await probe.test().catch((error: unknown) => {
        if (databaseFailureOf(error) !== "newer") throw error;
      });
      return null;
    }),
    check(async () => {
      const { pending, newer, recorded } = await migrationState(rt.db);
      // Every instance migrated its database before serving: none recorded means the tables are gone.
      if (!recorded && rt.db.dialect === "postgres") return new Failing("tables-missing", tablesMissing(tablesHomeOf(rt.config)));
      // A newer crm that migrated the database under running instances (started beside them) takes them out.
      if (newer.length > 0) return new Failing("newer-migrations", `migrated by a newer crm: ${newer.join(", ")}`);
      return pending.length === 0 ? null : new Failing("pending-migrations", `pending: ${pending.join(", ")}`);
    }),
    check(() => {
      const { running, claim_failure: failure } = deliveryLoopStatus(rt);
      if (!running) return new Failing("not-running", "not running");
      // A loop whose every claim fails sends nothing (a schema it cannot use) while the database
      // check passes. A database that cannot be used just now fails that check already, and its
      // claims' failures would keep this one failing for up to a second after it is back.
      if (!failure || databaseFailureOf(failure.error) !== null) return null;
      return new Failing("claims-failing", `claims failing since ${toTimestamp(failure.since)}: ${String(failure.error)}`);
    }),
  ]);
  return { database, migrations, delivery_loop };
}

/**
 * NotReadyLog logs why /readyz fails, with the reasons its answer gives only to a request that may
 * read /metrics: at once when the instance becomes not ready, then once a minute while it stays
 * so, as a load balancer probes every few seconds, whatever the reasons: spaced by its reasons,
 * two causes taking turns (a check failing now and then beside one failing throughout) logged a
 * line at every answer. It says when the instance is ready again. The spacing outlasts a ready
 * answer: a check failing every other probe, ready in between, is one condition too, not a
 * "not ready" and a "ready again" at each probe.
 */
export class NotReadyLog {
  private readonly line = new SpacedLine();
  /** whether a "not ready" was logged since the last "ready again" */
  private logged = false;

  constructor(private readonly log: Logger) {}

  /** failing notes the reasons of an answer that is not ready. */
  failing(reasons: Record<string, string>): void {
    const unlogged = this.line.occurred(Date.now());
    if (unlogged === undefined) return;
    this.logged = true;
    this.log.warn("not ready", { reasons, ...(unlogged ? { answers_unlogged: unlogged } : {}) });
  }

  /** ready notes an answer that is ready: after a logged not ready one it says so. */
  ready(): void {
    if (!this.logged) return;
    this.logged = false;
    this.log.info("ready again");
  }
}

/**
 * readiness answers whether the service can take traffic; 503 problem naming the failing checks
 * otherwise, each by a short code, with the reasons only for a request `trusted` as one that may
 * read /metrics (the metrics token, or loopback): /readyz needs no credential and a proxy may pass
 * it on. Once shutting down no check is run: the answer is the same.
 */
export async function readiness(rt: Runtime, notReadyLog: NotReadyLog, probe: WriteProbe, trusted: boolean): Promise<Readiness> {
  if (rt.connections.draining) {
    throw new ProblemError(503, "shutting-down", "Shutting down: this instance answers the requests it gets, closing each connection after its answer, until it stops listening; send new requests to another instance.");
  }
  const verdicts = await readinessChecks(rt, probe);
  const checks = Object.fromEntries(Object.entries(verdicts).map(([name, failing]) => [name, failing?.code ?? "ok"])) as ReadinessChecks;
  const failing = Object.entries(verdicts).filter((entry): entry is [string, Failing] => entry[1] !== null);
  if (failing.length === 0) {
    notReadyLog.ready();
    return { status: "ready", checks };
  }
  const reasons = Object.fromEntries(failing.map(([name, f]) => [name, f.reason]));
  notReadyLog.failing(reasons);
  const named = failing.map(([name, f]) => `${name}: ${f.code}`).join("; ");
  const detail = trusted ? `Not ready: ${failing.map(([name, f]) => `${name}: ${f.reason}`).join("; ")}.` : `Not ready: ${named}. The service's log says why.`;
  throw new ProblemError(503, "not-ready", detail, undefined, {}, trusted ? { checks, reasons } : { checks });
}

/**
 * mayReadMetrics tells whether a request would be let through to /metrics (authorizeMetrics): such
 * a request may read what /readyz's failing checks name.
 */
export function mayReadMetrics(config: Config, request: Request, hints: ClientHints): boolean {
  try {
    authorizeMetrics(config, request, hints);
    return true;
  } catch (error) {
    if (error instanceof ProblemError) return false;
    throw error;
  }
}

/**
 * refuseOnNewerDatabase answers 503 database-newer once the instance has found that a newer crm
 * migrated its database (rt.migrations): its code would read and write that schema the old way.
 * The refusal comes before anything is read or written, so any request may be sent again elsewhere.
 */
export function refuseOnNewerDatabase(rt: Runtime): void {
  const newer = rt.migrations.newer;
  if (newer.length > 0) throw databaseNewer(newer);
}

/**
 * authorizeMetrics lets a scrape through: never from a browser; with a metrics token configured,
 * only a request carrying it; without one, only a loopback peer that no proxy relayed (the request
 * carries no forwarding header) and that addresses this machine by a loopback name. A relayed
 * request is refused even from a trusted proxy naming a loopback client: the service cannot tell
 * an X-Forwarded-For the proxy set from the client's own, which a proxy setting only X-Real-IP
 * passes on. Browsers and the Host rule stop DNS rebinding: a page whose name points at 127.0.0.1
 * reaches the port from loopback, yet sends Sec-Fetch-Site or Origin (current browsers) and its
 * own name as Host (every browser).
 */
export function authorizeMetrics(config: Config, request: Request, hints: ClientHints): void {
  if (isBrowserRequest(request)) {
    throw new ProblemError(403, "browser-request", "GET /metrics does not answer browsers (the request carries Origin or Sec-Fetch-Site); scrape it with Prometheus, curl or another HTTP client.");
  }
  if (config.metricsToken !== "") {
    const presented = bearerOf(request.headers.get("authorization") ?? "") ?? "";
    if (!sameBytes(Buffer.from(presented), Buffer.from(config.metricsToken))) {
      throw new ProblemError(401, "unauthorized", "GET /metrics needs Authorization: Bearer with the metrics token (--metrics-token).", undefined, {
        "www-authenticate": 'Bearer realm="metrics"',
      });
    }
    return;
  }
  if (hints.forwarded || hints.peer === null || !isLoopback(hints.peer)) {
    throw new ProblemError(403, "forbidden", "GET /metrics answers loopback clients only; configure a metrics token (--metrics-token) to scrape from elsewhere.");
  }
  if (!isLoopbackHost(request.headers.get("host"))) {
    throw new ProblemError(403, "forbidden", "GET /metrics without a metrics token answers requests addressed to localhost or a loopback address only (the Host header); scrape 127.0.0.1, or configure a metrics token (--metrics-token).");
  }
}

/**
 * GAUGE_READ_LIMITS bound the statements of a scrape's read of the queue on PostgreSQL: a lock
 * another session holds on the deliveries (VACUUM FULL, ALTER TABLE, LOCK TABLE) is waited for
 * 1 s, then the read gives its connection back. The history's measure, which walks every row of it,
 * is not among them: it runs on the read lane (recentHistorySize).
 */
const GAUGE_READ_LIMITS = { lockTimeoutMs: 1000, statementTimeoutMs: 10_000 };

/** GAUGE_READ_DEADLINE_MS is how long a scrape waits for the database gauges (for a pooled connection too, or a server that does not answer) before it answers without them. */
const GAUGE_READ_DEADLINE_MS = 2000;

type DatabaseGaugeValues = { queue: Awaited<ReturnType<typeof deliveryQueueStats>>; history: Awaited<ReturnType<typeof recentHistorySize>> };

/**
 * DatabaseGauges reads, for one instance, the gauges /metrics takes from the database. The read
 * under way is shared by the scrapes that come meanwhile: scrapes that wait for a lock and that
 * Prometheus abandons hold one pooled connection between them, not one each. The scrapes answered
 * without these gauges are logged at most once a minute.
 */
export class DatabaseGauges {
  private underWay: Promise<DatabaseGaugeValues> | null = null;
  private readonly leftOutLine = new SpacedLine();

  constructor(
    private readonly db: Runtime["db"],
    private readonly log: Logger,
  ) {}

  /** values waits for the database gauges until GAUGE_READ_DEADLINE_MS: their values, or the failure they were left out for. */
  async values(): Promise<{ values: DatabaseGaugeValues } | { failure: unknown }> {
    const reading = this.read();
    if (!(await settlesWithin(reading, GAUGE_READ_DEADLINE_MS))) return { failure: `no answer within ${GAUGE_READ_DEADLINE_MS / 1000} s` };
    try {
      return { values: await reading };
    } catch (error) {
      // A full read lane leaves the history unmeasured, like a database that does not answer.
      if (databaseFailureOf(error) === null && !(error instanceof ReadLaneFull)) throw error;
      return { failure: error };
    }
  }

  /** read reads the queue in one bounded read (GAUGE_READ_LIMITS) and the history's size as last measured, or joins the read under way. */
  private read(): Promise<DatabaseGaugeValues> {
    if (this.underWay) return this.underWay;
    const read = Promise.all([this.db.readWithin(GAUGE_READ_LIMITS, (tx) => deliveryQueueStats(tx)), recentHistorySize(this.db)]).then(([queue, history]) => ({ queue, history }));
    this.underWay = read;
    const done = () => void (this.underWay === read && (this.underWay = null));
    read.then(done, done);
    return read;
  }

  /** leftOut logs, at most once a minute, that a scrape answered without the database gauges, and why. */
  leftOut(error: unknown): void {
    const unlogged = this.leftOutLine.occurred(performance.now());
    if (unlogged === undefined) return;
    this.log.warn(`/metrics: the gauges read from the database were left out of the scrape (crm_database_up 0): they were not read within ${GAUGE_READ_DEADLINE_MS / 1000} s, or the database refused them`, {
      error: String(error),
      ...(unlogged === null ? {} : { left_out_since_last_line: unlogged }),
    });
  }
}

/**
 * databaseGauges are the gauges read from the database: none while it cannot be used or does not
 * give them within GAUGE_READ_DEADLINE_MS, so the scrape still carries the process's own metrics
 * (crm_database_up says which it is).
 */
async function databaseGauges(rt: Runtime): Promise<Gauge[]> {
  const up = (value: number): Gauge => ({ name: "crm_database_up", help: "1 when the gauges read from the database (queue, history) could be read; 0 while it cannot be used or does not give them within 2 s, and they are left out.", value });
  const read = await rt.gauges.values();
  if ("failure" in read) {
    rt.gauges.leftOut(read.failure);
    return [up(0)];
  }
  const { queue, history } = read.values;
  return [
    up(1),
    { name: "crm_webhook_queue_depth", help: "Webhook deliveries pending (waiting for their first attempt or a retry).", value: queue.pending },
    { name: "crm_webhook_oldest_pending_age_seconds", help: "Age of the oldest pending webhook delivery; 0 when none is pending.", value: (queue.oldest_pending_age_ms ?? 0) / 1000 },
    {
      name: "crm_webhook_deliveries_waiting",
      help: "Webhook deliveries due and not started, of active subscriptions neither paused nor held by their receiver's Retry-After: waiting for a delivery slot (or a max_rate's pace), over every instance.",
      value: queue.waiting,
    },
    { name: "crm_webhook_history_rows", help: "Rows of the webhook delivery history, by table (deliveries, attempts).", value: history.deliveries, labels: { table: "deliveries" } },
    { name: "crm_webhook_history_rows", help: "Rows of the webhook delivery history, by table (deliveries, attempts).", value: history.attempts, labels: { table: "attempts" } },
    { name: "crm_webhook_history_bytes", help: "Database pages the webhook delivery history holds (deliveries, attempts, header sets, their indexes), in bytes.", value: history.bytes },
  ];
}

/** metricsText renders the process's metrics and the gauges read now, in the Prometheus text format. */
export async function metricsText(rt: Runtime): Promise<string> {
  const memory = process.memoryUsage();
  const loop = deliveryLoopStatus(rt);
  const gauges: Gauge[] = [
    ...(await databaseGauges(rt)),
    { name: "crm_webhook_attempts_in_flight", help: "Webhook delivery attempts under way.", value: loop.in_flight },
    { name: "crm_webhook_delivery_loop_running", help: "1 while the webhook delivery loop claims deliveries.", value: loop.running ? 1 : 0 },
    { name: "crm_slow_lists_held", help: "Slow contact lists on the read lane, waiting or running (--slow-list-lane bounds them).", value: rt.db.readsAside() },
    { name: "crm_answer_buffer_bytes", help: "Bytes of answers held until their clients read them, all clients together (--answer-buffer-max-mb bounds them).", value: rt.answers.inUse },
    { name: "crm_database_writes_waiting", help: "Writes of this process not committed yet: queued for the next group commit, or in the one being committed (on PostgreSQL, waiting for the write lock too).", value: rt.db.writesWaiting() },
    { name: "crm_up", help: "1 while the process answers.", value: 1 },
    { name: "crm_build_info", help: "The running version and the commit it was built from (source: run from source), as labels.", value: 1, labels: { version: VERSION, commit: COMMIT } },
    { name: "process_start_time_seconds", help: "Start time of the process since the Unix epoch, in seconds.", value: startedAt / 1000 },
    { name: "process_resident_memory_bytes", help: "Resident memory size in bytes.", value: memory.rss },
    { name: "crm_js_heap_used_bytes", help: "JavaScript heap in use, in bytes.", value: memory.heapUsed },
  ];
  return rt.metrics.render(gauges);
}

/**
 * recordDeliveryOutcome counts a finished webhook attempt and logs it as one line. The target URL
 * is left out (its query string may carry the receiver's own credentials); the subscription id
 * and the delivery id lead to it.
 */
export function recordDeliveryOutcome(metrics: Metrics, log: Logger, outcome: DeliveryOutcome): void {
  metrics.observeDeliveryOutcome(outcome);
  const line = {
    delivery_id: outcome.delivery_id,
    subscription_id: outcome.subscription_id,
    event_type: outcome.event_type,
    // Left out when no request made the event, as the request line leaves out a missing problem.
    request_id: outcome.request_id ?? undefined,
    trigger: outcome.trigger,
    response_status: outcome.response_status,
    // The attempt's recorded error, cut to its length and without the target URL (whose query string may hold the receiver's credentials).
    ...(outcome.error === null ? {} : { error: outcome.error }),
    duration_ms: outcome.duration_ms,
    delivery_status: outcome.status,
  };
  if (outcome.late) log.warn("webhook attempt recorded after its lease was taken over; the delivery's status is the new claim's", line);
  else if (outcome.status === "failed") log.warn("webhook attempt", line);
  else log.info("webhook attempt", line);
}

/** BackupError says why a backup could not be made; the CLI prints it as one line. */
export class BackupError extends Error {}

/** BackupResult says what was copied where, how big the copy is, and which partial files of killed backups it removed. */
export interface BackupResult {
  source: string;
  file: string;
  bytes: number;
  removedPartials: string[];
}

/**
 * backupDatabase copies the live database of a data directory into a new file with VACUUM INTO,
 * on its own connection: a consistent snapshot taken while the server keeps writing. The copy is
 * written 0600 under a partial name (never readable by others), synced and checked, and only then
 * given the file's name, never over an existing file.
 */
export async function backupDatabase(dataDir: string, file: string): Promise<BackupResult> {
  if (!existsSync(dataDir)) throw new BackupError(`data directory ${dataDir} does not exist`);
  // Not databasePath, which wants to write there: a backup only reads, from a file system turned read-only too.
  const source = databaseFile(dataDir);
  if (!existsSync(source)) throw new BackupError(`no database at ${source}`);
  const exists = () => new BackupError(`${file} already exists; backup never overwrites a file`);
  if (existsSync(file)) throw exists();
  // The copy is made under a partial name and takes FILE's name only once synced and checked: a
  // backup killed half-way (SIGKILL, a power cut) leaves no file that a restore could take for one.
  // Its half copy holds customers' rows: it goes with the next backup to the directory, whatever
  // that one's name (backups named by date never use a name again).
  const removedPartials = removeStalePartialsIn(dirname(resolve(file)));
  const partial = partialName(file);
  try {
    createOwnerOnlyFile(partial);
  } catch (error) {
    throw new BackupError(`cannot create ${file}: ${(error as Error).message}`);
  }
  try {
    const db = openDatabase(source, "full", { copying: true });
    try {
      db.waitingForLocks((writer) => vacuumInto(writer, partial));
    } finally {
      await db.close();
    }
    fsyncPath(partial);
    const copy = new Database(partial, { readonly: true });
    try {
      const verdict = quickCheck(copy);
      if (verdict !== "ok") throw new BackupError(`the copy failed its integrity check: ${verdict}`);
    } finally {
      copy.close();
    }
    if (!publishFile(partial, file)) throw exists();
  } catch (error) {
    for (const leftover of [partial, `${partial}-journal`]) rmSync(leftover, { force: true });
    if (error instanceof BackupError) throw error;
    // SQLite's own words, "database or disk is full", read as the service's disk being full.
    if (databaseFailureOf(error) === "storage-full" || errorCode(error) === "ENOSPC") {
      throw new BackupError(`backup failed: no space left on the file system of ${resolve(file)} (the copy needs up to ${statSync(source).size} bytes, the database's size); the live database ${source} is untouched`);
    }
    throw new BackupError(`backup failed: ${(error as Error).message}`);
  }
  return { source, file, bytes: statSync(file).size, removedPartials };
}
