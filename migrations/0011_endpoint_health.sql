-- Endpoint health (issue 14): a receiver's rate cap, how long its deliveries have all failed,
-- hourly attempt statistics, and signing secrets sealed at rest.

-- Requests per second the delivery loop sends to this subscription at most; NULL: no cap.
ALTER TABLE webhook_subscriptions ADD COLUMN max_rate INTEGER CHECK (max_rate IS NULL OR max_rate BETWEEN 1 AND 1000);
-- When the first failed attempt after the last successful one was made; NULL while the last attempt
-- succeeded. A subscription failing for --disable-failing-after-hours is disabled.
ALTER TABLE webhook_subscriptions ADD COLUMN failing_since INTEGER;

-- Attempts per subscription and hour: counts by outcome and a latency histogram (JSON array of
-- counts per bucket, bounds in server/webhooks/stats.ts). GET .../stats sums 24 or 168 rows
-- instead of reading every attempt of a week.
CREATE TABLE webhook_attempt_stats (
  subscription_id TEXT NOT NULL,
  hour            INTEGER NOT NULL,      -- Unix milliseconds at the start of the hour
  succeeded       INTEGER NOT NULL,
  failed          INTEGER NOT NULL,
  latency_buckets TEXT NOT NULL,
  PRIMARY KEY (subscription_id, hour)
) WITHOUT ROWID;

-- Signing secrets in clear are sealed (AES-256-GCM, key outside the database) by this migration's
-- backfill, sealStoredSecrets in server/webhooks/secrets.ts.
