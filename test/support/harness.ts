import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp, createRuntime, type App } from "../../server/app.ts";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG, type Config } from "../../server/config.ts";
import { databasePath, openDatabase, type SqliteDatabase } from "../../server/db/database.ts";
import type { Runtime } from "../../server/runtime.ts";
import { createLogger, type Logger } from "../../server/shared/log.ts";
import type { Network } from "../../server/webhooks/targets.ts";

export interface Harness {
  app: App;
  rt: Runtime;
  /** db is rt.db as the SQLite backend it is, for tests about SQLite itself (db.sqlite: PRAGMAs, query plans) */
  db: SqliteDatabase;
  dataDir: string;
  token: string;
  /** request calls the app in-process with the harness token unless headers override it. */
  request(method: string, path: string, options?: { body?: unknown; headers?: Record<string, string> }): Promise<Response>;
  /** json is request() that also parses the body. */
  json<T = any>(method: string, path: string, options?: { body?: unknown; headers?: Record<string, string> }): Promise<{ status: number; headers: Headers; body: T }>;
  close(): Promise<void>;
}

/** HarnessOptions are runtime parts a test replaces: the network deliveries resolve names through, the log. */
export interface HarnessOptions {
  network?: Network;
  log?: Logger;
}

/** createHarness builds a fresh app on a throwaway SQLite file with one API token. */
export async function createHarness(overrides: Partial<Config> = {}, options: HarnessOptions = {}): Promise<Harness> {
  const dataDir = mkdtempSync(join(tmpdir(), "crm-test-"));
  const config: Config = { ...DEFAULT_CONFIG, dataDir, logLevel: "error", ...overrides };
  const db = openDatabase(databasePath(dataDir));
  const rt = await createRuntime({ db, config, log: options.log ?? createLogger(config.logLevel), network: options.network });
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
    db,
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
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** PROBLEM_TYPE matches the type URN of every problem response. */
export const PROBLEM_TYPE = /^urn:crm:problem:[a-z-]+$/;
