-- Two migrations were changed after a crm had applied them, and a database that crm migrated keeps
-- what they first made; no later migration made up the difference, so this crm failed on it:
-- 0002 as first released (2026-11-21) had webhook_deliveries_status where it now has the partial
-- webhook_deliveries_unfinished, and no webhook_deliveries_due_by_subscription, which every claim
-- of the delivery loop names (INDEXED BY): "no such index", and no delivery went out again.
-- 0010 as first released (2026-11-23) gave contacts a version but not accounts: every read and
-- write of an account failed. The backfill adds the column where it is missing (SQLite has no
-- ADD COLUMN IF NOT EXISTS). A database that ran both migrations as they are now gets nothing here.
DROP INDEX IF EXISTS webhook_deliveries_status;
CREATE INDEX IF NOT EXISTS webhook_deliveries_due_by_subscription ON webhook_deliveries (subscription_id, next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS webhook_deliveries_unfinished ON webhook_deliveries (status, created_at, id) WHERE status <> 'succeeded';
