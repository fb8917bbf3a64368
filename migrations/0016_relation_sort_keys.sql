-- An account's contacts and an assigned user's contacts are walked in page order, as a tag's are
-- since 0014: a page costs its 25 index entries wherever in the sort its contacts lie. Before, an
-- account linked only to the oldest 1 in 20 of a million contacts (newest first) missed the walk's
-- window of contacts' sort index and fetched and sorted all 50,000 of them; an assigned user's
-- contacts were always fetched from contacts_assigned_user and sorted.

-- Each account row carries its contact's sort keys, with one index per documented sort, as
-- contact_tags does (created_at never changes; the triggers below copy the others).
CREATE TABLE contact_accounts_sorted (
  contact_id TEXT NOT NULL REFERENCES contacts (id) ON DELETE CASCADE,
  account_id TEXT NOT NULL REFERENCES accounts (id),
  position   INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  first_name TEXT COLLATE NOCASE,
  last_name  TEXT COLLATE NOCASE,
  email      TEXT,
  PRIMARY KEY (contact_id, account_id)
) WITHOUT ROWID;
INSERT INTO contact_accounts_sorted (contact_id, account_id, position, created_at, updated_at, first_name, last_name, email)
SELECT a.contact_id, a.account_id, a.position, c.created_at, c.updated_at, c.first_name, c.last_name, c.email
FROM contact_accounts a JOIN contacts c ON c.id = a.contact_id;
-- Dropping the table drops contact_accounts_account and the count triggers of 0013; both come back below.
DROP TABLE contact_accounts;
ALTER TABLE contact_accounts_sorted RENAME TO contact_accounts;

-- (account_id, created_at, contact_id) also serves what contact_accounts_account did: an account's contacts, counted, fetched or unlinked.
CREATE INDEX contact_accounts_created ON contact_accounts (account_id, created_at, contact_id);
CREATE INDEX contact_accounts_updated ON contact_accounts (account_id, updated_at, contact_id);
CREATE INDEX contact_accounts_first_name ON contact_accounts (account_id, first_name, contact_id);
CREATE INDEX contact_accounts_last_name ON contact_accounts (account_id, last_name, contact_id);
CREATE INDEX contact_accounts_email ON contact_accounts (account_id, email, contact_id);

CREATE TRIGGER contact_accounts_count_insert AFTER INSERT ON contact_accounts BEGIN
  INSERT INTO contact_filter_counts (filter, value, n) VALUES ('account', new.account_id, 1) ON CONFLICT (filter, value) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER contact_accounts_count_delete AFTER DELETE ON contact_accounts BEGIN
  UPDATE contact_filter_counts SET n = n - 1 WHERE filter = 'account' AND value = old.account_id;
END;

-- One trigger per key copies it to both relation tables (0014's copied it to the tags alone): a
-- trigger costs its own program per change, and a contact's tags and accounts change together.
DROP TRIGGER contact_tags_updated_at;
DROP TRIGGER contact_tags_first_name;
DROP TRIGGER contact_tags_last_name;
DROP TRIGGER contact_tags_email;
CREATE TRIGGER contact_relations_updated_at AFTER UPDATE OF updated_at ON contacts WHEN old.updated_at <> new.updated_at BEGIN
  UPDATE contact_tags SET updated_at = new.updated_at WHERE contact_id = new.id;
  UPDATE contact_accounts SET updated_at = new.updated_at WHERE contact_id = new.id;
END;
CREATE TRIGGER contact_relations_first_name AFTER UPDATE OF first_name ON contacts WHEN old.first_name IS NOT new.first_name COLLATE BINARY BEGIN
  UPDATE contact_tags SET first_name = new.first_name WHERE contact_id = new.id;
  UPDATE contact_accounts SET first_name = new.first_name WHERE contact_id = new.id;
END;
CREATE TRIGGER contact_relations_last_name AFTER UPDATE OF last_name ON contacts WHEN old.last_name IS NOT new.last_name COLLATE BINARY BEGIN
  UPDATE contact_tags SET last_name = new.last_name WHERE contact_id = new.id;
  UPDATE contact_accounts SET last_name = new.last_name WHERE contact_id = new.id;
END;
CREATE TRIGGER contact_relations_email AFTER UPDATE OF email ON contacts WHEN old.email IS NOT new.email BEGIN
  UPDATE contact_tags SET email = new.email WHERE contact_id = new.id;
  UPDATE contact_accounts SET email = new.email WHERE contact_id = new.id;
END;

-- An assigned user's contacts in each sort: contacts' own rows, so nothing to copy. Partial, so a
-- contact assigned to nobody costs no entry; `assigned_user_id = ?` implies the index's condition.
-- (assigned_user_id, created_at, id) also serves what contacts_assigned_user did.
DROP INDEX contacts_assigned_user;
CREATE INDEX contacts_assigned_user_created ON contacts (assigned_user_id, created_at, id) WHERE assigned_user_id IS NOT NULL;
CREATE INDEX contacts_assigned_user_updated ON contacts (assigned_user_id, updated_at, id) WHERE assigned_user_id IS NOT NULL;
CREATE INDEX contacts_assigned_user_first_name ON contacts (assigned_user_id, first_name, id) WHERE assigned_user_id IS NOT NULL;
CREATE INDEX contacts_assigned_user_last_name ON contacts (assigned_user_id, last_name, id) WHERE assigned_user_id IS NOT NULL;
CREATE INDEX contacts_assigned_user_email ON contacts (assigned_user_id, email, id) WHERE assigned_user_id IS NOT NULL;
