-- The id of the API token whose request made an event: SQLite's migration 0050 (its comment says
-- why). A nullable column without a default is added to the catalogue alone, rewriting no row.
ALTER TABLE events ADD COLUMN token_id text;
