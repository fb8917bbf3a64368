import type { Database as SqliteDatabase } from "bun:sqlite";

// What the tests of `crm copy-to-postgres` share: the tables it copies, and reading them whole on
// either side.

/** TABLES are the service's tables: what a migrated SQLite database has besides its FTS index and schema_migrations. */
export const TABLES = [
  "accounts", "api_tokens", "contact_accounts", "contact_assigned_users", "contact_filter_counts", "contact_tags", "contacts",
  "events", "idempotency_keys", "login_failures", "operator_devices", "operator_links", "operator_sessions", "operator_setup_codes", "operators", "row_counts", "secrets_key_check", "sign_in_turns",
  "subscription_rotations", "tombstone_horizons", "tombstones", "users", "webhook_attempt_stats", "webhook_deliveries", "webhook_delivery_attempts",
  "webhook_delivery_hours", "webhook_delivery_kind_hours", "webhook_header_sets", "webhook_subscription_events", "webhook_subscriptions",
];

/** selectEveryColumn is a SELECT of every SQLite column of a table, which reads it alike on both backends. */
export function selectEveryColumn(sqlite: SqliteDatabase, table: string): string {
  const columns = sqlite.query<{ name: string }, [string]>("SELECT name FROM pragma_table_info(?) ORDER BY cid").all(table);
  return `SELECT ${columns.map((c) => `"${c.name}"`).join(", ")} FROM "${table}"`;
}

/** inOneOrder sorts rows by their JSON text, an order both backends' rows can be put in (their text orders differ). */
export function inOneOrder<T>(rows: T[]): T[] {
  return rows.map((row) => [JSON.stringify(row), row] as const).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, row]) => row);
}
