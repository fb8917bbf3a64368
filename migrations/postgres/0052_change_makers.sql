-- Who made each change that makes an event or changes a subscription's state: SQLite's migration
-- 0052 (its comment says why). Nullable columns without a default are added to the catalogue
-- alone, rewriting no row.
ALTER TABLE events ADD COLUMN made_by text;
ALTER TABLE events ADD COLUMN erased_by text;
ALTER TABLE webhook_subscriptions ADD COLUMN paused_by text;
ALTER TABLE webhook_subscriptions ADD COLUMN disabled_by text;
ALTER TABLE webhook_subscriptions ADD COLUMN updated_by text;
