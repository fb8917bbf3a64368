-- The PostgreSQL twin of SQLite migration 0016: an account's and an assigned user's contacts are
-- walked in page order, as a tag's are. Each account row carries its contact's sort keys (kept by
-- contact_relations_sort_keys below) with one index per documented sort; contacts get one partial
-- index per sort led by the assigned user.
ALTER TABLE contact_accounts
  ADD COLUMN created_at bigint,
  ADD COLUMN updated_at bigint,
  ADD COLUMN first_name citext,
  ADD COLUMN last_name  citext,
  ADD COLUMN email      text;
UPDATE contact_accounts a SET created_at = c.created_at, updated_at = c.updated_at, first_name = c.first_name, last_name = c.last_name, email = c.email
FROM contacts c WHERE c.id = a.contact_id;
ALTER TABLE contact_accounts ALTER COLUMN created_at SET NOT NULL, ALTER COLUMN updated_at SET NOT NULL;

DROP INDEX contact_accounts_account;
CREATE INDEX contact_accounts_created ON contact_accounts (account_id, created_at, contact_id);
CREATE INDEX contact_accounts_updated ON contact_accounts (account_id, updated_at, contact_id);
CREATE INDEX contact_accounts_first_name ON contact_accounts (account_id, first_name, contact_id);
CREATE INDEX contact_accounts_last_name ON contact_accounts (account_id, last_name, contact_id);
CREATE INDEX contact_accounts_email ON contact_accounts (account_id, email, contact_id);

-- One function copies a contact's changed sort keys to its tag and account rows.
DROP TRIGGER contact_tags_sort_keys ON contacts;
DROP FUNCTION contact_tags_sort_keys();
CREATE FUNCTION contact_relations_sort_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.updated_at <> NEW.updated_at
     OR OLD.first_name::text IS DISTINCT FROM NEW.first_name::text
     OR OLD.last_name::text IS DISTINCT FROM NEW.last_name::text
     OR OLD.email IS DISTINCT FROM NEW.email THEN
    UPDATE contact_tags SET updated_at = NEW.updated_at, first_name = NEW.first_name, last_name = NEW.last_name, email = NEW.email
    WHERE contact_id = NEW.id;
    UPDATE contact_accounts SET updated_at = NEW.updated_at, first_name = NEW.first_name, last_name = NEW.last_name, email = NEW.email
    WHERE contact_id = NEW.id;
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER contact_relations_sort_keys AFTER UPDATE OF updated_at, first_name, last_name, email ON contacts
  FOR EACH ROW EXECUTE FUNCTION contact_relations_sort_keys();

DROP INDEX contacts_assigned_user;
CREATE INDEX contacts_assigned_user_created ON contacts (assigned_user_id, created_at, id) WHERE assigned_user_id IS NOT NULL;
CREATE INDEX contacts_assigned_user_updated ON contacts (assigned_user_id, updated_at, id) WHERE assigned_user_id IS NOT NULL;
CREATE INDEX contacts_assigned_user_first_name ON contacts (assigned_user_id, first_name, id) WHERE assigned_user_id IS NOT NULL;
CREATE INDEX contacts_assigned_user_last_name ON contacts (assigned_user_id, last_name, id) WHERE assigned_user_id IS NOT NULL;
CREATE INDEX contacts_assigned_user_email ON contacts (assigned_user_id, email, id) WHERE assigned_user_id IS NOT NULL;
