-- The PostgreSQL twin of SQLite migration 0035: a tombstone keeps the version its contact.deleted
-- or account.deleted carries (null for those written before), and the deleted lists return it.
ALTER TABLE tombstones ADD COLUMN version bigint;
