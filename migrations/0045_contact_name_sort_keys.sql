-- Contacts sorted by first_name or last_name sort by each name's key: the name as the service keys
-- it (nameKey: NFC, case folded in full in every script, as an account's name_key), compared byte
-- by byte. Before, SQLite's NOCASE folded only A to Z (ΣΊΣΥΦΟΣ and σίσυφος, Émile and émile sorted
-- apart) where PostgreSQL's citext lowercased every letter, so the two answered a name sort in two
-- orders, and a cursor walk carried from one to the other (copy-to-postgres) could skip or repeat
-- contacts. SQL cannot fold case beyond ASCII: the migration's backfill step keys every contact's
-- names (contacts/store.ts, keyContactNames), and the service keys them as it writes them.
--
-- The indexes of the name sorts keep their names and index the keys. The tag and account rows,
-- which carry the sort keys of their contact for the relation walks (0014, 0016), carry the name
-- keys instead of the names, copied by the triggers below when a contact's key changes.
ALTER TABLE contacts ADD COLUMN first_name_key TEXT;
ALTER TABLE contacts ADD COLUMN last_name_key TEXT;
DROP INDEX contacts_first_name;
DROP INDEX contacts_last_name;
DROP INDEX contacts_assigned_user_first_name;
DROP INDEX contacts_assigned_user_last_name;
CREATE INDEX contacts_first_name ON contacts (first_name_key, id);
CREATE INDEX contacts_last_name ON contacts (last_name_key, id);
CREATE INDEX contacts_assigned_user_first_name ON contacts (assigned_user_id, first_name_key, id) WHERE assigned_user_id IS NOT NULL;
CREATE INDEX contacts_assigned_user_last_name ON contacts (assigned_user_id, last_name_key, id) WHERE assigned_user_id IS NOT NULL;

DROP TRIGGER contact_relations_first_name;
DROP TRIGGER contact_relations_last_name;
DROP INDEX contact_tags_first_name;
DROP INDEX contact_tags_last_name;
DROP INDEX contact_accounts_first_name;
DROP INDEX contact_accounts_last_name;
ALTER TABLE contact_tags DROP COLUMN first_name;
ALTER TABLE contact_tags DROP COLUMN last_name;
ALTER TABLE contact_tags ADD COLUMN first_name_key TEXT;
ALTER TABLE contact_tags ADD COLUMN last_name_key TEXT;
ALTER TABLE contact_accounts DROP COLUMN first_name;
ALTER TABLE contact_accounts DROP COLUMN last_name;
ALTER TABLE contact_accounts ADD COLUMN first_name_key TEXT;
ALTER TABLE contact_accounts ADD COLUMN last_name_key TEXT;
CREATE INDEX contact_tags_first_name ON contact_tags (tag, first_name_key, contact_id);
CREATE INDEX contact_tags_last_name ON contact_tags (tag, last_name_key, contact_id);
CREATE INDEX contact_accounts_first_name ON contact_accounts (account_id, first_name_key, contact_id);
CREATE INDEX contact_accounts_last_name ON contact_accounts (account_id, last_name_key, contact_id);

CREATE TRIGGER contact_relations_first_name_key AFTER UPDATE OF first_name_key ON contacts WHEN old.first_name_key IS NOT new.first_name_key BEGIN
  UPDATE contact_tags SET first_name_key = new.first_name_key WHERE contact_id = new.id;
  UPDATE contact_accounts SET first_name_key = new.first_name_key WHERE contact_id = new.id;
END;
CREATE TRIGGER contact_relations_last_name_key AFTER UPDATE OF last_name_key ON contacts WHEN old.last_name_key IS NOT new.last_name_key BEGIN
  UPDATE contact_tags SET last_name_key = new.last_name_key WHERE contact_id = new.id;
  UPDATE contact_accounts SET last_name_key = new.last_name_key WHERE contact_id = new.id;
END;
