import type { Config } from "./config.ts";
import type { Database } from "./db/sql.ts";
import type { IdempotencyGuard } from "./idempotency/service.ts";
import type { ConnectionLimits } from "./limits/connections.ts";
import type { Metrics } from "./ops/metrics.ts";
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
  /** deliveries sends webhook deliveries; started and stopped with the server */
  deliveries: DeliveryLoop;
  /** how webhook targets are resolved and reached; tests inject their own resolver */
  network: Network;
  /** seals and opens webhook signing secrets (stored encrypted) */
  secrets: SecretBox;
  /** the client connections: their limits, and the drain that ends them before a stop */
  connections: ConnectionLimits;
}
