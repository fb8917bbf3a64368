import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp, createRuntime, type App } from "../../server/app.ts";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG, type Config } from "../../server/config.ts";
import { openBackend } from "../../server/db/backend.ts";
import type { SqliteDatabase } from "../../server/db/database.ts";
import type { Runtime } from "../../server/runtime.ts";
import { createLogger, type Logger } from "../../server/shared/log.ts";
import type { ChangeOrigin } from "../../server/shared/made-by.ts";
import type { Network } from "../../server/webhooks/targets.ts";
import { TEST_BACKEND, testBackend } from "./backend.ts";

export interface Harness {
  app: App;
  rt: Runtime;
  /**
   * db is rt.db as the SQLite backend it is, for tests about SQLite itself (db.sqlite: PRAGMAs,
   * query plans); reading it on PostgreSQL fails the test: such a file is SQLite-only (test/run.ts).
   */
  readonly db: SqliteDatabase;
  dataDir: string;
  token: string;
  /** request calls the app in-process with the harness token unless headers override it. */
  request(method: string, path: string, options?: { body?: unknown; headers?: Record<string, string> }): Promise<Response>;
  /** json is request() that also parses the body. */
  json<T = any>(method: string, path: string, options?: { body?: unknown; headers?: Record<string, string> }): Promise<{ status: number; headers: Headers; body: T }>;
  close(): Promise<void>;
}

/** HarnessOptions are runtime parts a test replaces: the network deliveries resolve names through, the log, the delivery loop's poll on PostgreSQL, the contacts a delete unlinks per write, the rows a bulk change of deliveries or records changes per write, how often the delivery loop fails stopped subscriptions' leftovers. */
export interface HarnessOptions {
  network?: Network;
  log?: Logger;
  sharedPollMs?: number;
  unlinkChunk?: number;
  batchRows?: number;
  stoppedSweepMs?: number;
}

/**
 * createHarness builds a fresh app with one API token on a throwaway database of the test backend
 * (CRM_TEST_BACKEND): a SQLite file in a temporary data directory, or a fresh PostgreSQL database.
 */
export async function createHarness(overrides: Partial<Config> = {}, options: HarnessOptions = {}): Promise<Harness> {
  const dataDir = mkdtempSync(join(tmpdir(), "crm-test-"));
  const backend = await testBackend(dataDir);
  const config: Config = { ...DEFAULT_CONFIG, dataDir, logLevel: "error", ...backend.config, ...overrides };
  const db = await openBackend(config);
  const rt = await createRuntime({ db, config, log: options.log ?? createLogger(config.logLevel), network: options.network, sharedPollMs: options.sharedPollMs, unlinkChunk: options.unlinkChunk, batchRows: options.batchRows, stoppedSweepMs: options.stoppedSweepMs });
  const app = createApp(rt);
  const { token } = await createApiToken(db, "test");
  const request = (method: string, path: string, options: { body?: unknown; headers?: Record<string, string> } = {}) => {
    const headers: Record<string, string> = { authorization: `Bearer ${token}` };
    if (options.body !== undefined) headers["content-type"] = "application/json";
    return app.handle(
      new Request(`http://localhost${path}`, {
        method,
        headers: { ...headers, ...options.headers },
        body: options.body === undefined ? undefined : typeof options.body === "string" ? options.body : JSON.stringify(options.body),
      }),
    );
  };
  return {
    app,
    rt,
    get db() {
      if (db.dialect !== "sqlite") throw new Error(`h.db is the SQLite backend, and this run is on ${TEST_BACKEND}: list the test file as SQLite-only in test/run.ts`);
      return db;
    },
    dataDir,
    token,
    request,
    async json(method, path, options) {
      const res = await request(method, path, options);
      const text = await res.text();
      return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : null };
    },
    async close() {
      await db.close();
      await backend.drop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** PROBLEM_TYPE matches the type URN of every problem response. */
export const PROBLEM_TYPE = /^urn:crm:problem:[a-z-]+$/;

/** UNKNOWN_ORIGIN is the origin of a change a test makes by calling a service, whose maker it does not look at: no request, no maker. */
export const UNKNOWN_ORIGIN: ChangeOrigin = { requestId: null, madeBy: null };

/**
 * afterBlockingCommand lets the event loop turn once. The server's reads of one turn share one
 * snapshot (server/db/database.ts); a command run with Bun.spawnSync writes while the loop is
 * stopped inside that turn, which a real command never can: its changes show from the next turn.
 */
export function afterBlockingCommand(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
