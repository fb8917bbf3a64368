-- The newest deletion time each resource's pruning removed, so GET .../deleted answers 410 for a
-- `since` before it whatever --tombstone-retention-days says now: the 410 was decided from the
-- current setting alone, and after the retention was raised (or beside another PostgreSQL instance
-- keeping tombstones fewer days) a poller away longer than what was pruned got 200 without the
-- pruned deletions, and kept those records for good. Prunes before this migration are not known:
-- the current setting alone decides for them, as before.
CREATE TABLE tombstone_horizons (
  resource      TEXT PRIMARY KEY,           -- 'contact' or 'account'
  newest_pruned INTEGER NOT NULL            -- the largest deleted_at of a tombstone pruned
) WITHOUT ROWID;
