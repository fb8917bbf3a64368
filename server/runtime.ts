import type { Server } from "bun";
import type { Config } from "./config.ts";
import type { Database } from "./db/sql.ts";
import type { IdempotencyGuard } from "./idempotency/service.ts";
import type { AnswerBudget } from "./limits/answer-budget.ts";
import type { ApiRateLimits } from "./limits/api-rates.ts";
import type { ConnectionLimits } from "./limits/connections.ts";
import type { Metrics } from "./ops/metrics.ts";
import type { DatabaseGauges } from "./ops/service.ts";
import type { MigrationWatch } from "./ops/migration-watch.ts";
import type { Logger } from "./shared/log.ts";
import type { SecretBox } from "./webhooks/secrets.ts";
import type { Network } from "./webhooks/targets.ts";
import type { DeliveryLoop } from "./webhooks/worker.ts";

/** Runtime is what services need: the database (reads, and writes through `db.write`), config and log. */
export interface Runtime {
  db: Database;
  idempotency: IdempotencyGuard;
  config: Config;
  log: Logger;
  metrics: Metrics;
  /** the gauges /metrics reads from the database: one read at a time, and the line logged when a scrape goes without them */
  gauges: DatabaseGauges;
  /** deliveries sends webhook deliveries; started and stopped with the server */
  deliveries: DeliveryLoop;
  /** how webhook targets are resolved and reached; tests inject their own resolver */
  network: Network;
  /** seals and opens webhook signing secrets (stored encrypted) */
  secrets: SecretBox;
  /** the client connections: their limits, and the drain that ends them before a stop */
  connections: ConnectionLimits;
  /** the bytes of answers held until their clients read them, bounded in all and per client (--answer-buffer-max-mb) */
  answers: AnswerBudget;
  /** the API's rate limits: per token, and per client address for requests without a valid token */
  rateLimits: ApiRateLimits;
  /** notices a newer crm's migrations under the running instance, after which requests are refused; started with the server */
  migrations: MigrationWatch;
  /** contacts one write of an account's or a user's delete unlinks at most: UNLINK_CHUNK, tests choose smaller */
  unlinkChunk: number;
  /** rows one write of a bulk change of deliveries or records changes at most: BATCH_ROWS, tests choose smaller */
  batchRows: number;
  /**
   * listening is the Bun server the app listens on (its peers' addresses, per-request timeouts);
   * null before createApp's app listens, and under app.handle.
   */
  listening: () => Server<unknown> | null;
}
