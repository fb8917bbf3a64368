-- The PostgreSQL twin of SQLite migration 0036: users listed by created_at or updated_at, and
-- filtered by updated_after, each read as one range of its index.
CREATE INDEX users_created ON users (created_at, id);
CREATE INDEX users_updated ON users (updated_at, id);
