import { Elysia } from "elysia";
import { consoleRoutes } from "../console/routes.ts";
import { accountRoutes } from "./accounts/routes.ts";
import { authentication } from "./auth/routes.ts";
import { tokenRate } from "./auth/service.ts";
import { configFileOpenTo, databaseUrlFileOpenTo, type Config } from "./config.ts";
import { contactRoutes } from "./contacts/routes.ts";
import { UNLINK_CHUNK } from "./contacts/service.ts";
import { migrateBackend, refuseNewerDatabase, tablesHomeOf, type Backend } from "./db/backend.ts";
import { BATCH_ROWS } from "./db/sql.ts";
import { POSTGRES_MIGRATIONS } from "./db/postgres-migrations.ts";
import { docsRoutes } from "./docs/routes.ts";
import { NAMED_SCHEMAS } from "./docs/schemas.ts";
import { httpConventions } from "./http/conventions.ts";
import { IdempotencyGuard } from "./idempotency/service.ts";
import { answerBudget } from "./limits/answer-budget.ts";
import { ApiRateLimits } from "./limits/api-rates.ts";
import { connectionLimits } from "./limits/connections.ts";
import { limitsGuard } from "./limits/routes.ts";
import { Metrics } from "./ops/metrics.ts";
import { MigrationWatch } from "./ops/migration-watch.ts";
import { newerDatabaseGuard, opsRoutes } from "./ops/routes.ts";
import { DatabaseGauges, recordDeliveryOutcome } from "./ops/service.ts";
import type { Runtime } from "./runtime.ts";
import type { Logger } from "./shared/log.ts";
import { userRoutes } from "./users/routes.ts";
import { VERSION } from "./version.ts";
import { webhookRoutes } from "./webhooks/routes.ts";
import { assertDatabaseSecretsKey, loadSecretsKey, SecretBox } from "./webhooks/secrets.ts";
import { SYSTEM_NETWORK, type Network } from "./webhooks/targets.ts";
import { webhooksDocument } from "./webhooks/service.ts";
import { DeliveryLoop, SHARED_POLL_MS, STOPPED_SWEEP_MS } from "./webhooks/worker.ts";

export interface AppOptions {
  db: Backend;
  config: Config;
  log: Logger;
  /** defaults to the system's resolver and certificate authorities */
  network?: Network;
  /** defaults to SHARED_POLL_MS; tests lengthen it, so that only another instance's notification wakes an idle one */
  sharedPollMs?: number;
  /** defaults to UNLINK_CHUNK; tests make it small, to delete an account of a few contacts in several writes */
  unlinkChunk?: number;
  /** defaults to BATCH_ROWS; tests make it small, to change a few rows in several writes */
  batchRows?: number;
  /** defaults to STOPPED_SWEEP_MS; tests shorten it, to see a sweep finish what a refused write left */
  stoppedSweepMs?: number;
}

/**
 * createRuntime opens the secrets key (creating it on first start), migrates the database, checks
 * that the key is the database's (recording it on first start), and builds the services' shared dependencies.
 */
export async function createRuntime({ db, config, log, network = SYSTEM_NETWORK, sharedPollMs = SHARED_POLL_MS, unlinkChunk = UNLINK_CHUNK, batchRows = BATCH_ROWS, stoppedSweepMs = STOPPED_SWEEP_MS }: AppOptions): Promise<Runtime> {
  // Before the key is made: a database this binary will not serve gets no new file beside it.
  await refuseNewerDatabase(db);
  const secretsKey = loadSecretsKey(config);
  const secrets = new SecretBox(secretsKey.key);
  await migrateBackend(db, () => secrets, (message, fields) => log.warn(message, fields));
  await assertDatabaseSecretsKey(db, secrets, secretsKey);
  if (secretsKey.openTo) log.warn(secretsKey.openTo, { path: secretsKey.path });
  const urlFileOpenTo = databaseUrlFileOpenTo(config);
  if (urlFileOpenTo) log.warn(urlFileOpenTo, { path: config.databaseUrlFile });
  const configOpenTo = configFileOpenTo(config);
  if (configOpenTo) log.warn(configOpenTo, { path: config.configFileSecrets!.path });
  if (secretsKey.created) logCreatedSecretsKey(log, secretsKey.path);
  db.useReadLane(config.slowListLane, log);
  db.changeClock.logTo(log);
  await db.changeClock.seedAtStart(db);
  if (db.dialect === "postgres") db.logLocksTo(log);
  const metrics = new Metrics();
  const deliveries = new DeliveryLoop({ db, config, log, network, secrets, sharedPollMs, batchRows, stoppedSweepMs, failedUnsent: metrics.observePendingDeliveriesFailed });
  deliveries.onOutcome((outcome) => recordDeliveryOutcome(metrics, log, outcome));
  const migrations = new MigrationWatch(db, log);
  // Migrated: from here on a write that finds a newer crm's migrations under the write lock is refused.
  if (db.dialect === "postgres") db.refuseWritesAfter(POSTGRES_MIGRATIONS.at(-1)!.version, (newer) => migrations.noticed(newer));
  return { db, config, log, idempotency: new IdempotencyGuard(db), metrics, gauges: new DatabaseGauges(db, log), deliveries, network, secrets, connections: connectionLimits(config), answers: answerBudget(config), rateLimits: new ApiRateLimits(config, (tokenId) => tokenRate(db, tokenId)), migrations, unlinkChunk, batchRows, listening: () => null };
}

/** logCreatedSecretsKey logs the secrets key a start created: it must be kept with the database. */
export function logCreatedSecretsKey(log: Logger, path: string): void {
  log.info("created the key that encrypts webhook signing secrets; keep it with the database: backups do not include it", { path });
}

/** createApp builds the HTTP application without listening, so tests can call app.handle. */
export function createApp(runtime: Runtime) {
  let app: Elysia | undefined;
  // Hooks and handlers take the server from here, not from their context: one that names `server`
  // there makes Elysia define it anew on every request's context, which cost 10-15% of a read's CPU.
  const rt: Runtime = { ...runtime, listening: () => built.server };
  const routes = () => (app?.routes ?? []).map((r) => ({ method: r.method, path: r.path, query: r.hooks?.query !== undefined, body: r.hooks?.body !== undefined }));
  // normalize: false, so a body field a schema does not allow is a 422 naming it, not silently dropped.
  const built = new Elysia({ name: "crm", normalize: false })
    .use(
      httpConventions({
        log: rt.log,
        routes,
        metrics: rt.metrics,
        bodyTimeoutMs: rt.config.bodyTimeoutMs,
        idleTimeoutSeconds: rt.config.idleTimeoutSeconds,
        draining: () => rt.connections.draining,
        listening: rt.listening,
        metricsToken: rt.config.metricsToken,
        unexpectedFailure: () => rt.migrations.checkSoon(),
        tablesHome: rt.config.databaseUrl ? tablesHomeOf(rt.config) : "",
        databaseUrlFrom: rt.config.databaseUrlFrom.named,
      }),
    )
    .use(limitsGuard(rt))
    .use(newerDatabaseGuard(rt))
    .use(authentication(rt))
    .use(opsRoutes(rt))
    .use(
      docsRoutes({
        info: {
          title: "CRM contacts and webhooks API",
          version: VERSION,
          description: "Contacts, accounts and users for server-side integrations, with signed, retried, recorded webhook deliveries. Errors are RFC 9457 problem+json.",
        },
        securitySchemes: {
          bearerAuth: { type: "http", scheme: "bearer", description: "API token (crm_...) created with `crm token create`." },
          metricsToken: { type: "http", scheme: "bearer", description: "The metrics token (--metrics-token), when one is configured." },
        },
        schemas: NAMED_SCHEMAS,
        webhooks: webhooksDocument(),
        tags: [
          { name: "Contacts", description: "People: create, read, change and delete them, find them by filters, link them to accounts, tag them, and upsert them 100 at a time." },
          { name: "Accounts", description: "Companies, matched by domain: create, read, change and delete them, and upsert them 100 at a time." },
          { name: "Users", description: "The people of your team that contacts are assigned to." },
          { name: "Webhook subscriptions", description: "Where events are sent: a target URL and the event kinds it wants, with its signing secret, rate cap, pause, test, recovery and endpoint health." },
          { name: "Webhook deliveries", description: "What was sent to each subscription, every attempt and its answer, and a retry of one delivery." },
          { name: "Webhook event types", description: "The event kinds a subscription can ask for, each with the JSON Schema of its body." },
          { name: "Webhook events", description: "The signed requests the service sends to a subscription's target URL (Standard Webhooks), one per event kind: what a receiver gets." },
          { name: "Operations", description: "Liveness and readiness probes for load balancers, and Prometheus metrics." },
        ],
      }),
    )
    .use(contactRoutes(rt))
    .use(accountRoutes(rt))
    .use(userRoutes(rt))
    .use(webhookRoutes(rt))
    .use(consoleRoutes(rt));
  app = built as unknown as Elysia;
  return built;
}

export type App = ReturnType<typeof createApp>;
