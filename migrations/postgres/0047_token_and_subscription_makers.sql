-- Who made each API token and webhook subscription: SQLite's migration 0047 (its comment says why).
-- Nullable columns without a default are added to the catalogue alone, rewriting no row.
ALTER TABLE api_tokens ADD COLUMN created_by text;
ALTER TABLE api_tokens ADD COLUMN created_by_email text;
ALTER TABLE webhook_subscriptions ADD COLUMN created_by text;
ALTER TABLE webhook_subscriptions ADD COLUMN created_by_email text;
