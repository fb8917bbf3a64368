-- The searched full_name is the one the API returns: SQLite's migration 0027 (its comment says why).
-- A generated column's expression can be changed in place only from PostgreSQL 17 on, so the
-- column is made again, which rewrites contacts, and its trigram index with it.
ALTER TABLE contacts DROP COLUMN full_name;
ALTER TABLE contacts ADD COLUMN full_name text GENERATED ALWAYS AS (
  CASE WHEN first_name::text <> '' AND last_name::text <> '' THEN first_name::text || ' ' || last_name::text ELSE coalesce(nullif(first_name::text, ''), last_name::text, '') END
) STORED;
CREATE INDEX contacts_full_name ON contacts USING gin (full_name gin_trgm_ops);
