-- The PostgreSQL twin of SQLite migration 0046: when an event's payload was erased (null for every
-- other event). Without a default, adding it rewrites no row.
ALTER TABLE events ADD COLUMN erased_at bigint;
