-- Contacts sorted by first_name or last_name sort by each name's key: the name as the service keys
-- it (nameKey: NFC, case folded in full in every script, as an account's name_key), collated "C"
-- (byte by byte, as on SQLite). Before, citext lowercased every letter by the database's locale
-- where SQLite's NOCASE folded only A to Z (ΣΊΣΥΦΟΣ and σίσυφος, Émile and émile sorted apart
-- there), so the two answered a name sort in two orders, and a cursor walk carried from one to the
-- other could skip or repeat contacts. The migration's backfill step keys every contact's names as
-- on SQLite (contacts/store.ts, keyPostgresContactNames), and the service keys them as it writes them.
--
-- The indexes of the name sorts keep their names and index the keys. The tag and account rows
-- carry the name keys instead of the names, copied by contact_relations_sort_keys when a
-- contact's key changes (dropping their name columns drops those columns' indexes).
ALTER TABLE contacts ADD COLUMN first_name_key text COLLATE "C", ADD COLUMN last_name_key text COLLATE "C";
DROP INDEX contacts_first_name;
DROP INDEX contacts_last_name;
DROP INDEX contacts_assigned_user_first_name;
DROP INDEX contacts_assigned_user_last_name;
CREATE INDEX contacts_first_name ON contacts (first_name_key NULLS FIRST, id);
CREATE INDEX contacts_last_name ON contacts (last_name_key NULLS FIRST, id);
CREATE INDEX contacts_assigned_user_first_name ON contacts (assigned_user_id, first_name_key NULLS FIRST, id) WHERE assigned_user_id IS NOT NULL;
CREATE INDEX contacts_assigned_user_last_name ON contacts (assigned_user_id, last_name_key NULLS FIRST, id) WHERE assigned_user_id IS NOT NULL;

DROP TRIGGER contact_relations_sort_keys ON contacts;
ALTER TABLE contact_tags DROP COLUMN first_name, DROP COLUMN last_name, ADD COLUMN first_name_key text COLLATE "C", ADD COLUMN last_name_key text COLLATE "C";
ALTER TABLE contact_accounts DROP COLUMN first_name, DROP COLUMN last_name, ADD COLUMN first_name_key text COLLATE "C", ADD COLUMN last_name_key text COLLATE "C";
CREATE INDEX contact_tags_first_name ON contact_tags (tag, first_name_key NULLS FIRST, contact_id);
CREATE INDEX contact_tags_last_name ON contact_tags (tag, last_name_key NULLS FIRST, contact_id);
CREATE INDEX contact_accounts_first_name ON contact_accounts (account_id, first_name_key NULLS FIRST, contact_id);
CREATE INDEX contact_accounts_last_name ON contact_accounts (account_id, last_name_key NULLS FIRST, contact_id);

CREATE OR REPLACE FUNCTION contact_relations_sort_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.updated_at <> NEW.updated_at
     OR OLD.first_name_key IS DISTINCT FROM NEW.first_name_key
     OR OLD.last_name_key IS DISTINCT FROM NEW.last_name_key
     OR OLD.email IS DISTINCT FROM NEW.email THEN
    UPDATE contact_tags SET updated_at = NEW.updated_at, first_name_key = NEW.first_name_key, last_name_key = NEW.last_name_key, email = NEW.email
    WHERE contact_id = NEW.id;
    UPDATE contact_accounts SET updated_at = NEW.updated_at, first_name_key = NEW.first_name_key, last_name_key = NEW.last_name_key, email = NEW.email
    WHERE contact_id = NEW.id;
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER contact_relations_sort_keys AFTER UPDATE OF updated_at, first_name_key, last_name_key, email ON contacts
  FOR EACH ROW EXECUTE FUNCTION contact_relations_sort_keys();
