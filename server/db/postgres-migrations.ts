// Imported as text so `bun build --compile` embeds them, like the SQLite migrations.
import schema from "../../migrations/postgres/0001_schema.sql" with { type: "text" };
import deliveryPacing from "../../migrations/postgres/0003_delivery_pacing.sql" with { type: "text" };
import contactTagsSortKeys from "../../migrations/postgres/0014_contact_tags_sort_keys.sql" with { type: "text" };
import consoleReads from "../../migrations/postgres/0015_console_reads.sql" with { type: "text" };
import relationSortKeys from "../../migrations/postgres/0016_relation_sort_keys.sql" with { type: "text" };
import sortOrderAndFilterCounts from "../../migrations/postgres/0020_sort_order_and_filter_counts.sql" with { type: "text" };
import deliveriesByEventType from "../../migrations/postgres/0021_deliveries_by_event_type.sql" with { type: "text" };
import operatorDevices from "../../migrations/postgres/0022_operator_devices.sql" with { type: "text" };
import recoveredDeliveries from "../../migrations/postgres/0023_recovered_deliveries.sql" with { type: "text" };
import signInTurns from "../../migrations/postgres/0024_sign_in_turns.sql" with { type: "text" };
import secretsKeyCheck from "../../migrations/postgres/0025_secrets_key_check.sql" with { type: "text" };
import operatorLastSeen from "../../migrations/postgres/0026_operator_last_seen.sql" with { type: "text" };
import fullNameAsReturned from "../../migrations/postgres/0027_full_name_as_returned.sql" with { type: "text" };
import signInThrottleWithoutEmails from "../../migrations/postgres/0028_sign_in_throttle_without_emails.sql" with { type: "text" };
import secretRotationTest from "../../migrations/postgres/0029_secret_rotation_test.sql" with { type: "text" };
import keptAnswersByResource from "../../migrations/postgres/0030_kept_answers_by_resource.sql" with { type: "text" };
import deliveryKindHours from "../../migrations/postgres/0032_delivery_kind_hours.sql" with { type: "text" };
import wizardTestsSignedTwice from "../../migrations/postgres/0033_wizard_tests_signed_twice.sql" with { type: "text" };
import accountNameCaseFold from "../../migrations/postgres/0034_account_name_case_fold.sql" with { type: "text" };
import sortKeysInByteOrder from "../../migrations/postgres/0035_sort_keys_in_byte_order.sql" with { type: "text" };
import { dropPostgresDomainTrailingDots, keyPostgresAccountNames } from "../accounts/store.ts";
import { keyPostgresContactNames, normalizePostgresNamesAndTags } from "../contacts/store.ts";
import type { Db, MigrationWarn } from "./sql.ts";
import tombstoneHorizons from "../../migrations/postgres/0036_tombstone_horizons.sql" with { type: "text" };
import tombstoneVersions from "../../migrations/postgres/0037_tombstone_versions.sql" with { type: "text" };
import usersByTime from "../../migrations/postgres/0038_users_by_time.sql" with { type: "text" };
import secretLost from "../../migrations/postgres/0039_secret_lost.sql" with { type: "text" };
import namesAndTagsInNfc from "../../migrations/postgres/0040_names_and_tags_in_nfc.sql" with { type: "text" };
import eventRequestIds from "../../migrations/postgres/0041_event_request_ids.sql" with { type: "text" };
import accountNamesRekeyedAgain from "../../migrations/postgres/0042_account_names_rekeyed_again.sql" with { type: "text" };
import linksOfRemovedOperators from "../../migrations/postgres/0043_links_of_removed_operators.sql" with { type: "text" };
import headerSetsByAttempt from "../../migrations/postgres/0044_header_sets_by_attempt.sql" with { type: "text" };
import contactNameSortKeys from "../../migrations/postgres/0045_contact_name_sort_keys.sql" with { type: "text" };
import erasedEvents from "../../migrations/postgres/0046_erased_events.sql" with { type: "text" };
import tokenAndSubscriptionMakers from "../../migrations/postgres/0047_token_and_subscription_makers.sql" with { type: "text" };
import accountDomainsWithoutTrailingDot from "../../migrations/postgres/0048_account_domains_without_trailing_dot.sql" with { type: "text" };
import subscriptionHold from "../../migrations/postgres/0049_subscription_hold.sql" with { type: "text" };
import eventTokens from "../../migrations/postgres/0050_event_tokens.sql" with { type: "text" };
import namesKeyedWithWhiteSpaceFolded from "../../migrations/postgres/0051_names_keyed_with_white_space_folded.sql" with { type: "text" };
import changeMakers from "../../migrations/postgres/0052_change_makers.sql" with { type: "text" };
import deletedContactsByEmail from "../../migrations/postgres/0053_deleted_contacts_by_email.sql" with { type: "text" };
import { LOCK_TIMEOUT_STATE, READ_ONLY_HINT, type PostgresDatabase } from "./postgres.ts";
import { MigrationFailed, heldWarnings, migrationFailure } from "./migrations.ts";
import { ConfigError } from "../config.ts";
import { sqlStateOf } from "../shared/thrown.ts";

/** PostgresMigration is one numbered SQL file of migrations/postgres/. */
export interface PostgresMigration {
  version: number;
  name: string;
  sql: string;
  /** backfill computes, in the migration's transaction after its script, data SQL cannot (such as Unicode case folding); its warnings are held until the migration commits */
  backfill?: (tx: Db, warn: MigrationWarn) => Promise<void>;
}

/**
 * POSTGRES_MIGRATIONS lists every file of migrations/postgres/ in order; a test checks that none is
 * missing. A change of the SQLite schema needs its PostgreSQL twin here: test/postgres/migrations.test.ts
 * compares the two schemas, table by table, after the last migration of each.
 */
export const POSTGRES_MIGRATIONS: PostgresMigration[] = [
  { version: 1, name: "0001_schema.sql", sql: schema },
  { version: 3, name: "0003_delivery_pacing.sql", sql: deliveryPacing },
  { version: 14, name: "0014_contact_tags_sort_keys.sql", sql: contactTagsSortKeys },
  { version: 15, name: "0015_console_reads.sql", sql: consoleReads },
  { version: 16, name: "0016_relation_sort_keys.sql", sql: relationSortKeys },
  { version: 20, name: "0020_sort_order_and_filter_counts.sql", sql: sortOrderAndFilterCounts },
  { version: 21, name: "0021_deliveries_by_event_type.sql", sql: deliveriesByEventType },
  { version: 22, name: "0022_operator_devices.sql", sql: operatorDevices },
  { version: 23, name: "0023_recovered_deliveries.sql", sql: recoveredDeliveries },
  { version: 24, name: "0024_sign_in_turns.sql", sql: signInTurns },
  { version: 25, name: "0025_secrets_key_check.sql", sql: secretsKeyCheck },
  { version: 26, name: "0026_operator_last_seen.sql", sql: operatorLastSeen },
  { version: 27, name: "0027_full_name_as_returned.sql", sql: fullNameAsReturned },
  { version: 28, name: "0028_sign_in_throttle_without_emails.sql", sql: signInThrottleWithoutEmails },
  { version: 29, name: "0029_secret_rotation_test.sql", sql: secretRotationTest },
  { version: 30, name: "0030_kept_answers_by_resource.sql", sql: keptAnswersByResource },
  { version: 32, name: "0032_delivery_kind_hours.sql", sql: deliveryKindHours },
  { version: 33, name: "0033_wizard_tests_signed_twice.sql", sql: wizardTestsSignedTwice },
  { version: 34, name: "0034_account_name_case_fold.sql", sql: accountNameCaseFold, backfill: keyPostgresAccountNames },
  { version: 35, name: "0035_sort_keys_in_byte_order.sql", sql: sortKeysInByteOrder },
  { version: 36, name: "0036_tombstone_horizons.sql", sql: tombstoneHorizons },
  { version: 37, name: "0037_tombstone_versions.sql", sql: tombstoneVersions },
  { version: 38, name: "0038_users_by_time.sql", sql: usersByTime },
  { version: 39, name: "0039_secret_lost.sql", sql: secretLost },
  { version: 40, name: "0040_names_and_tags_in_nfc.sql", sql: namesAndTagsInNfc, backfill: normalizePostgresNamesAndTags },
  { version: 41, name: "0041_event_request_ids.sql", sql: eventRequestIds },
  { version: 42, name: "0042_account_names_rekeyed_again.sql", sql: accountNamesRekeyedAgain, backfill: keyPostgresAccountNames },
  { version: 43, name: "0043_links_of_removed_operators.sql", sql: linksOfRemovedOperators },
  { version: 44, name: "0044_header_sets_by_attempt.sql", sql: headerSetsByAttempt },
  { version: 45, name: "0045_contact_name_sort_keys.sql", sql: contactNameSortKeys, backfill: keyPostgresContactNames },
  { version: 46, name: "0046_erased_events.sql", sql: erasedEvents },
  { version: 47, name: "0047_token_and_subscription_makers.sql", sql: tokenAndSubscriptionMakers },
  { version: 48, name: "0048_account_domains_without_trailing_dot.sql", sql: accountDomainsWithoutTrailingDot, backfill: dropPostgresDomainTrailingDots },
  { version: 49, name: "0049_subscription_hold.sql", sql: subscriptionHold },
  { version: 50, name: "0050_event_tokens.sql", sql: eventTokens },
  {
    version: 51,
    name: "0051_names_keyed_with_white_space_folded.sql",
    sql: namesKeyedWithWhiteSpaceFolded,
    backfill: async (db, warn) => {
      await keyPostgresAccountNames(db, warn);
      await keyPostgresContactNames(db);
    },
  },
  { version: 52, name: "0052_change_makers.sql", sql: changeMakers },
  { version: 53, name: "0053_deleted_contacts_by_email.sql", sql: deletedContactsByEmail },
];

/**
 * MIGRATION_LOCK is the advisory lock key every instance takes before looking at or applying a
 * migration (the bytes of "crm-migr"), so instances starting together apply each one once.
 */
const MIGRATION_LOCK = 0x63726d2d6d696772n;

/**
 * MIGRATION_LOCK_TIMEOUT_MS is how long a migration's statements wait for a lock another session
 * holds on a table they change (a transaction left open, a long report, a VACUUM FULL): longer
 * than a request's, as a start refused leaves the instance down, but not for ever, as the
 * ALTER TABLE waiting in the lock's queue holds up every later read of its table meanwhile.
 */
const MIGRATION_LOCK_TIMEOUT_MS = 60_000;

/**
 * migratePostgres applies every pending migration in order, each in its own transaction under the
 * advisory lock, records it in schema_migrations and returns the names it applied. An instance
 * that waited for the lock finds the migration recorded and skips it, and one whose schema lacks
 * the tables another instance made meanwhile elsewhere is refused (refuseTablesElsewhere). The
 * warnings of a backfill go to `warn` once its migration committed, naming it. A migration's
 * statements wait `lockTimeoutMs` at most for a lock other sessions hold, then it is refused
 * naming them (lockWaitOutlasted).
 */
export async function migratePostgres(
  db: PostgresDatabase,
  migrations: PostgresMigration[] = POSTGRES_MIGRATIONS,
  warn?: MigrationWarn,
  lockTimeoutMs = MIGRATION_LOCK_TIMEOUT_MS,
): Promise<string[]> {
  const applied: string[] = [];
  for (const [index, migration] of migrations.entries()) {
    const held = heldWarnings(migration.name);
    const ran = await db.write(async (tx) => {
      // Waited for as long as another instance migrates, whatever lock_timeout the write
      // transaction, the sessions or the role set; the migration's own locks for lockTimeoutMs
      // (SET LOCAL: until this transaction ends).
      await tx.script(`SET LOCAL lock_timeout = 0; SELECT pg_advisory_xact_lock(${MIGRATION_LOCK}); SET LOCAL lock_timeout = ${lockTimeoutMs}`);
      // Once the first transaction commits, the sessions' schema holds the tables (it made them,
      // or found them there), and every later start sees them.
      if (index === 0) await db.refuseTablesElsewhere(tx);
      await tx.run(`CREATE TABLE IF NOT EXISTS schema_migrations (
        version    integer PRIMARY KEY,
        name       text NOT NULL,
        applied_at bigint NOT NULL
      )`);
      if (await tx.get("SELECT version FROM schema_migrations WHERE version = ?", [migration.version])) return false;
      const { backend } = (await tx.get<{ backend: number }>("SELECT pg_backend_pid() AS backend"))!;
      let blockers: Promise<Record<string, unknown>> | null = null;
      try {
        const applying = (async () => {
          await tx.script(migration.sql);
          await migration.backfill?.(tx, held.warn);
        })();
        await db.blockersReadHalfway(backend, lockTimeoutMs, applying, (sessions) => (blockers = sessions));
      } catch (error) {
        if ((error as { errno?: unknown })?.errno === LOCK_TIMEOUT_STATE) throw lockWaitOutlasted(migration.name, db.urlFrom, lockTimeoutMs, await blockers, error);
        throw migrationFailure(migration.name, error);
      }
      await tx.run("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)", [migration.version, migration.name, Date.now()]);
      return true;
    }).catch((error: unknown) => Promise.reject(migrationStepFailure(migration.name, db.urlFrom, error)));
    if (!ran) continue;
    held.release(warn);
    applied.push(migration.name);
  }
  return applied;
}

/**
 * lockWaitOutlasted is the one line of a migration given up for its lock timeout, naming the
 * sessions it waited for (`blockers`, read halfway through the wait: blockersReadHalfway; null
 * when the wait was shorter than half the timeout, as when it came late in a long backfill).
 */
function lockWaitOutlasted(name: string, urlFrom: string, lockTimeoutMs: number, blockers: Record<string, unknown> | null, cause: unknown): MigrationFailed {
  const sessions = blockers?.blocking_sessions as { pid: number; application: string; role: string; client: string | null; state: string; transaction_seconds: number | null }[] | undefined;
  const named = sessions?.length
    ? `blocking sessions: ${sessions.map((s) => `pid ${s.pid} (application ${s.application || "unnamed"}, role ${s.role}, client ${s.client ?? "local"}, ${s.state}, in a transaction for ${s.transaction_seconds ?? 0} s)`).join(", ")}`
    : `the blocking sessions ${blockers?.blocking_sessions_unknown ? `could not be read (${blockers.blocking_sessions_unknown})` : "were not read"}: look for long transactions in pg_stat_activity (ORDER BY xact_start)`;
  return new MigrationFailed(
    name,
    `cannot migrate the PostgreSQL database (${urlFrom}) to ${name}, and nothing of it was applied: it waited ${lockTimeoutMs / 1000} s for a lock other sessions hold (a transaction left open, a long query, a VACUUM FULL), given up by its lock_timeout; ${named}; end them (SELECT pg_terminate_backend(pid)) or let them finish, then start again`,
    { cause },
  );
}

/**
 * MIGRATION_STEP_HINTS say what to do about the SQLSTATEs a role or server set up otherwise than
 * the README's gives the statements around a migration (its locks and schema_migrations).
 */
const MIGRATION_STEP_HINTS: Record<string, string> = {
  "42501": "the role needs CREATE on the schema --database-schema names (GRANT CREATE ON SCHEMA ... TO the role), or set --database-schema to a schema it owns",
  "25006": READ_ONLY_HINT,
  "55P03": `another session held a lock the migrations need (on schema_migrations) for longer than their lock timeout: end it or let it finish (pg_stat_activity, ORDER BY xact_start), then start again`,
  "57014": "the role's statement_timeout ended the wait for the write lock, which another instance's writes or migration held: lift it for the role (ALTER ROLE ... SET statement_timeout = 0), or start again",
};

/**
 * migrationStepFailure gives an error of the statements around a migration (its locks, the
 * schema_migrations table) the context migrationFailure gives the migration's own: which
 * migration, that nothing of it was applied, and what to do about the usual causes.
 */
function migrationStepFailure(name: string, urlFrom: string, error: unknown): unknown {
  if (error instanceof ConfigError || error instanceof MigrationFailed) return error;
  const hint = MIGRATION_STEP_HINTS[sqlStateOf(error) ?? ""];
  const text = `cannot migrate the PostgreSQL database (${urlFrom}) to ${name}, and nothing of it was applied: ${(error as Error)?.message ?? String(error)}`;
  return new MigrationFailed(name, hint ? `${text}; ${hint}` : text, { cause: error });
}
