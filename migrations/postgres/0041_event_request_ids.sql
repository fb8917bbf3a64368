-- The id of the request whose change made an event: SQLite's migration 0041 (its comment says why).
-- A nullable column without a default is added to the catalogue alone, rewriting no row.
ALTER TABLE events ADD COLUMN request_id text;
CREATE INDEX events_request ON events (request_id, created_at, id) WHERE request_id IS NOT NULL;
