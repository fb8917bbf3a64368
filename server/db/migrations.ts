import type { Database } from "bun:sqlite";
import { addMissingAccountVersion, dropDomainTrailingDots, keyAccountNames } from "../accounts/store.ts";
import { keyContactNames, normalizeStoredNamesAndTags } from "../contacts/store.ts";
// Imported as text so `bun build --compile` embeds them: the binary needs no files beside it.
import foundation from "../../migrations/0001_foundation.sql" with { type: "text" };
import webhooks from "../../migrations/0002_webhooks.sql" with { type: "text" };
import consoleTables from "../../migrations/0003_console.sql" with { type: "text" };
import limits from "../../migrations/0004_limits.sql" with { type: "text" };
import deliveryCountsIndex from "../../migrations/0005_delivery_counts_index.sql" with { type: "text" };
import contactRelationIds from "../../migrations/0006_contact_relation_ids.sql" with { type: "text" };
import accountNameKeyColumn from "../../migrations/0007_account_name_key.sql" with { type: "text" };
import contactsEmailCreatedIndex from "../../migrations/0008_contacts_email_created_index.sql" with { type: "text" };
import deliveryHistoryBounds from "../../migrations/0009_delivery_history_bounds.sql" with { type: "text" };
import webhookLifecycle from "../../migrations/0010_webhook_lifecycle.sql" with { type: "text" };
import endpointHealth from "../../migrations/0011_endpoint_health.sql" with { type: "text" };
import contactExternalId from "../../migrations/0012_contact_external_id.sql" with { type: "text" };
import syncApi from "../../migrations/0013_sync_api.sql" with { type: "text" };
import contactTagsSortKeys from "../../migrations/0014_contact_tags_sort_keys.sql" with { type: "text" };
import consoleReads from "../../migrations/0015_console_reads.sql" with { type: "text" };
import relationSortKeys from "../../migrations/0016_relation_sort_keys.sql" with { type: "text" };
import batchedNameIndex from "../../migrations/0017_batched_name_index.sql" with { type: "text" };
import releasedSchemaRepairs from "../../migrations/0018_released_schema_repairs.sql" with { type: "text" };
import idempotencyKeysByRowid from "../../migrations/0019_idempotency_keys_by_rowid.sql" with { type: "text" };
import forgetEmptyFilterCounts from "../../migrations/0020_forget_empty_filter_counts.sql" with { type: "text" };
import deliveriesByEventType from "../../migrations/0021_deliveries_by_event_type.sql" with { type: "text" };
import operatorDevices from "../../migrations/0022_operator_devices.sql" with { type: "text" };
import recoveredDeliveries from "../../migrations/0023_recovered_deliveries.sql" with { type: "text" };
import signInTurns from "../../migrations/0024_sign_in_turns.sql" with { type: "text" };
import secretsKeyCheck from "../../migrations/0025_secrets_key_check.sql" with { type: "text" };
import operatorLastSeen from "../../migrations/0026_operator_last_seen.sql" with { type: "text" };
import fullNameAsReturned from "../../migrations/0027_full_name_as_returned.sql" with { type: "text" };
import signInThrottleWithoutEmails from "../../migrations/0028_sign_in_throttle_without_emails.sql" with { type: "text" };
import secretRotationTest from "../../migrations/0029_secret_rotation_test.sql" with { type: "text" };
import keptAnswersByResource from "../../migrations/0030_kept_answers_by_resource.sql" with { type: "text" };
import nameIndexSecureDelete from "../../migrations/0031_name_index_secure_delete.sql" with { type: "text" };
import deliveryKindHours from "../../migrations/0032_delivery_kind_hours.sql" with { type: "text" };
import wizardTestsSignedTwice from "../../migrations/0033_wizard_tests_signed_twice.sql" with { type: "text" };
import accountNameCaseFold from "../../migrations/0034_account_name_case_fold.sql" with { type: "text" };
import tombstoneHorizons from "../../migrations/0036_tombstone_horizons.sql" with { type: "text" };
import tombstoneVersions from "../../migrations/0037_tombstone_versions.sql" with { type: "text" };
import usersByTime from "../../migrations/0038_users_by_time.sql" with { type: "text" };
import secretLost from "../../migrations/0039_secret_lost.sql" with { type: "text" };
import namesAndTagsInNfc from "../../migrations/0040_names_and_tags_in_nfc.sql" with { type: "text" };
import eventRequestIds from "../../migrations/0041_event_request_ids.sql" with { type: "text" };
import accountNamesRekeyedAgain from "../../migrations/0042_account_names_rekeyed_again.sql" with { type: "text" };
import linksOfRemovedOperators from "../../migrations/0043_links_of_removed_operators.sql" with { type: "text" };
import headerSetsByAttempt from "../../migrations/0044_header_sets_by_attempt.sql" with { type: "text" };
import contactNameSortKeys from "../../migrations/0045_contact_name_sort_keys.sql" with { type: "text" };
import erasedEvents from "../../migrations/0046_erased_events.sql" with { type: "text" };
import tokenAndSubscriptionMakers from "../../migrations/0047_token_and_subscription_makers.sql" with { type: "text" };
import accountDomainsWithoutTrailingDot from "../../migrations/0048_account_domains_without_trailing_dot.sql" with { type: "text" };
import subscriptionHold from "../../migrations/0049_subscription_hold.sql" with { type: "text" };
import eventTokens from "../../migrations/0050_event_tokens.sql" with { type: "text" };
import namesKeyedWithWhiteSpaceFolded from "../../migrations/0051_names_keyed_with_white_space_folded.sql" with { type: "text" };
import changeMakers from "../../migrations/0052_change_makers.sql" with { type: "text" };
import deletedContactsByEmail from "../../migrations/0053_deleted_contacts_by_email.sql" with { type: "text" };
import { sealStoredSecrets, type SecretBox } from "../webhooks/secrets.ts";
import { ConfigError } from "../config.ts";
import type { MigrationWarn } from "./sql.ts";

/** MigrationContext is what a backfill may need beyond the database. */
export interface MigrationContext {
  /** the box sealing signing secrets; opened only when a backfill needs it (a key file may be created) */
  secrets?: () => SecretBox;
  /** where a backfill's warnings go once its migration committed (none: dropped, as in tests of other things) */
  warn?: MigrationWarn;
}

/** BackfillContext is the MigrationContext a backfill gets: its warnings are held until the migration commits. */
type BackfillContext = MigrationContext & { warn: MigrationWarn };

export interface Migration {
  version: number;
  name: string;
  sql: string;
  /** backfill computes, in the migration's transaction, data SQL cannot (such as Unicode case folding) */
  backfill?: (db: Database, context: BackfillContext) => void;
}

/** MIGRATIONS lists every file of migrations/ in order; a test checks that none is missing. */
export const MIGRATIONS: Migration[] = [
  { version: 1, name: "0001_foundation.sql", sql: foundation },
  { version: 2, name: "0002_webhooks.sql", sql: webhooks },
  { version: 3, name: "0003_console.sql", sql: consoleTables },
  { version: 4, name: "0004_limits.sql", sql: limits },
  { version: 5, name: "0005_delivery_counts_index.sql", sql: deliveryCountsIndex },
  { version: 6, name: "0006_contact_relation_ids.sql", sql: contactRelationIds },
  { version: 7, name: "0007_account_name_key.sql", sql: accountNameKeyColumn, backfill: (db, context) => keyAccountNames(db, context.warn) },
  { version: 8, name: "0008_contacts_email_created_index.sql", sql: contactsEmailCreatedIndex },
  { version: 9, name: "0009_delivery_history_bounds.sql", sql: deliveryHistoryBounds },
  { version: 10, name: "0010_webhook_lifecycle.sql", sql: webhookLifecycle },
  { version: 11, name: "0011_endpoint_health.sql", sql: endpointHealth, backfill: (db, context) => sealStoredSecrets(db, context.secrets) },
  { version: 12, name: "0012_contact_external_id.sql", sql: contactExternalId },
  { version: 13, name: "0013_sync_api.sql", sql: syncApi },
  { version: 14, name: "0014_contact_tags_sort_keys.sql", sql: contactTagsSortKeys },
  { version: 15, name: "0015_console_reads.sql", sql: consoleReads },
  { version: 16, name: "0016_relation_sort_keys.sql", sql: relationSortKeys },
  { version: 17, name: "0017_batched_name_index.sql", sql: batchedNameIndex },
  { version: 18, name: "0018_released_schema_repairs.sql", sql: releasedSchemaRepairs, backfill: addMissingAccountVersion },
  { version: 19, name: "0019_idempotency_keys_by_rowid.sql", sql: idempotencyKeysByRowid },
  { version: 20, name: "0020_forget_empty_filter_counts.sql", sql: forgetEmptyFilterCounts },
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
  { version: 31, name: "0031_name_index_secure_delete.sql", sql: nameIndexSecureDelete },
  { version: 32, name: "0032_delivery_kind_hours.sql", sql: deliveryKindHours },
  { version: 33, name: "0033_wizard_tests_signed_twice.sql", sql: wizardTestsSignedTwice },
  { version: 34, name: "0034_account_name_case_fold.sql", sql: accountNameCaseFold, backfill: (db, context) => keyAccountNames(db, context.warn) },
  { version: 36, name: "0036_tombstone_horizons.sql", sql: tombstoneHorizons },
  { version: 37, name: "0037_tombstone_versions.sql", sql: tombstoneVersions },
  { version: 38, name: "0038_users_by_time.sql", sql: usersByTime },
  { version: 39, name: "0039_secret_lost.sql", sql: secretLost },
  { version: 40, name: "0040_names_and_tags_in_nfc.sql", sql: namesAndTagsInNfc, backfill: normalizeStoredNamesAndTags },
  { version: 41, name: "0041_event_request_ids.sql", sql: eventRequestIds },
  { version: 42, name: "0042_account_names_rekeyed_again.sql", sql: accountNamesRekeyedAgain, backfill: (db, context) => keyAccountNames(db, context.warn) },
  { version: 43, name: "0043_links_of_removed_operators.sql", sql: linksOfRemovedOperators },
  { version: 44, name: "0044_header_sets_by_attempt.sql", sql: headerSetsByAttempt },
  { version: 45, name: "0045_contact_name_sort_keys.sql", sql: contactNameSortKeys, backfill: keyContactNames },
  { version: 46, name: "0046_erased_events.sql", sql: erasedEvents },
  { version: 47, name: "0047_token_and_subscription_makers.sql", sql: tokenAndSubscriptionMakers },
  { version: 48, name: "0048_account_domains_without_trailing_dot.sql", sql: accountDomainsWithoutTrailingDot, backfill: (db, context) => dropDomainTrailingDots(db, context.warn) },
  { version: 49, name: "0049_subscription_hold.sql", sql: subscriptionHold },
  { version: 50, name: "0050_event_tokens.sql", sql: eventTokens },
  {
    version: 51,
    name: "0051_names_keyed_with_white_space_folded.sql",
    sql: namesKeyedWithWhiteSpaceFolded,
    backfill: (db, context) => {
      keyAccountNames(db, context.warn);
      keyContactNames(db);
    },
  },
  { version: 52, name: "0052_change_makers.sql", sql: changeMakers },
  { version: 53, name: "0053_deleted_contacts_by_email.sql", sql: deletedContactsByEmail },
];

function ensureMigrationsTable(db: Database): void {
  db.run(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at INTEGER NOT NULL
  )`);
}

/** appliedVersions returns the migration versions recorded in the database. */
export function appliedVersions(db: Database): number[] {
  ensureMigrationsTable(db);
  return db
    .query<{ version: number }, []>("SELECT version FROM schema_migrations ORDER BY version")
    .all()
    .map((row) => row.version);
}

/** pendingMigrations returns the migrations not yet applied, in order. */
export function pendingMigrations(db: Database, migrations: Migration[] = MIGRATIONS): Migration[] {
  const applied = new Set(appliedVersions(db));
  return migrations.filter((m) => !applied.has(m.version));
}

/**
 * migrate applies every pending migration in order, each in its own transaction, and returns their
 * names; the warnings of each backfill go to context.warn once its migration committed, naming it.
 * Tests pass their own list to check ordering and rollback with migrations that fail.
 */
export function migrate(db: Database, migrations: Migration[] = MIGRATIONS, context: MigrationContext = {}): string[] {
  const applied: string[] = [];
  for (const migration of pendingMigrations(db, migrations)) {
    const held = heldWarnings(migration.name);
    try {
      db.transaction(() => {
        db.run(migration.sql);
        migration.backfill?.(db, { ...context, warn: held.warn });
        db.query("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)").run(
          migration.version,
          migration.name,
          Date.now(),
        );
      }).immediate();
    } catch (error) {
      throw migrationFailure(migration.name, error);
    }
    held.release(context.warn);
    applied.push(migration.name);
  }
  return applied;
}

/** heldWarnings holds a migration's warnings, each naming it, until `release` hands them on: a migration rolled back warns of nothing. */
export function heldWarnings(name: string): { warn: MigrationWarn; release: (to: MigrationWarn | undefined) => void } {
  const warnings: Parameters<MigrationWarn>[] = [];
  return {
    warn: (message, fields) => void warnings.push([message, { migration: name, ...fields }]),
    release: (to) => {
      for (const warning of warnings) to?.(...warning);
    },
  };
}

/** MigrationFailed is a migration that failed and was rolled back whole; main prints its message as one line. */
export class MigrationFailed extends Error {
  constructor(
    /** migration is the failed migration's name (those before it stay applied) */
    readonly migration: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** migrationFailure names the migration an error stopped, unless the error already speaks for itself (a setting to fix). */
export function migrationFailure(name: string, error: unknown): unknown {
  if (error instanceof ConfigError) return error;
  return new MigrationFailed(name, `migration ${name} failed, and nothing of it was applied (the database is as it was): ${(error as Error)?.message ?? String(error)}`, { cause: error });
}
