-- The sort keys (a contact's names and email, on contacts and on its tag and account rows; an
-- account's name key and domain) were collated by the database's locale. In a UTF-8 locale other
-- than C (en_US.UTF-8, or an ICU locale, as managed services create databases) that is a
-- language's order, which sets punctuation apart: `a_b@` sorted before `a+b@`, `Anne_Marie` before
-- `Anne-Marie`, and every such list answered in another order than SQLite's. Collated "C", they
-- sort by bytes (code points) whatever the locale, as SQLite's BINARY and NOCASE columns do, and
-- their indexes are rebuilt in that order with them. citext still lowercases by the database's
-- locale (every script in a UTF-8 one) before it compares, so names fold case as before; and
-- the name search (full_name, ILIKE) keeps the locale too. On a database in C.UTF-8, as the
-- README makes one, nothing sorts otherwise than before.
--
-- A column's collation is changed as its type is, which PostgreSQL refuses for a column a
-- generated column or a trigger's column list names: full_name is made again (which rewrites
-- contacts, and rebuilds its trigram index), and the trigger that copies the keys is dropped and
-- made again around the change.
DROP TRIGGER contact_relations_sort_keys ON contacts;
ALTER TABLE contacts DROP COLUMN full_name;
ALTER TABLE contacts
  ALTER COLUMN first_name TYPE citext COLLATE "C",
  ALTER COLUMN last_name TYPE citext COLLATE "C",
  ALTER COLUMN email TYPE text COLLATE "C";
ALTER TABLE contacts ADD COLUMN full_name text COLLATE "default" GENERATED ALWAYS AS (
  CASE WHEN first_name::text <> '' AND last_name::text <> '' THEN first_name::text || ' ' || last_name::text ELSE coalesce(nullif(first_name::text, ''), last_name::text, '') END
) STORED;
CREATE INDEX contacts_full_name ON contacts USING gin (full_name gin_trgm_ops);
CREATE TRIGGER contact_relations_sort_keys AFTER UPDATE OF updated_at, first_name, last_name, email ON contacts
  FOR EACH ROW EXECUTE FUNCTION contact_relations_sort_keys();

ALTER TABLE contact_tags
  ALTER COLUMN first_name TYPE citext COLLATE "C",
  ALTER COLUMN last_name TYPE citext COLLATE "C",
  ALTER COLUMN email TYPE text COLLATE "C";
ALTER TABLE contact_accounts
  ALTER COLUMN first_name TYPE citext COLLATE "C",
  ALTER COLUMN last_name TYPE citext COLLATE "C",
  ALTER COLUMN email TYPE text COLLATE "C";
ALTER TABLE accounts
  ALTER COLUMN name_key TYPE text COLLATE "C",
  ALTER COLUMN domain TYPE citext COLLATE "C";
