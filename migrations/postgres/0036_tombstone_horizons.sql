-- The PostgreSQL twin of SQLite migration 0034: the newest deletion time each resource's pruning
-- removed, so GET .../deleted answers 410 for a `since` before it whatever the instance's
-- --tombstone-retention-days (instances sharing the database may be configured differently).
CREATE TABLE tombstone_horizons (
  resource      text PRIMARY KEY,           -- 'contact' or 'account'
  newest_pruned bigint NOT NULL             -- the largest deleted_at of a tombstone pruned
);
