-- Until when a receiver's 429 or 503 with Retry-After holds its subscription: SQLite's migration
-- 0049 (its comment says why). A nullable column without a default rewrites no row.
ALTER TABLE webhook_subscriptions ADD COLUMN held_until bigint;
