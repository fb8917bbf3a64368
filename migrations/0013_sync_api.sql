-- What a two-way sync needs: contacts found by tag, account and assigned user through indexes,
-- deletions a poller can find (tombstones), and accounts listed in every sort.

-- The tags of each contact, one row per distinct tag: the relation the tag filter reads. The
-- contact's properties keep `tags` as given (in order); the contacts service writes both in one
-- transaction, as it does for account_ids.
CREATE TABLE contact_tags (
  contact_id TEXT NOT NULL REFERENCES contacts (id) ON DELETE CASCADE,
  tag        TEXT NOT NULL,
  PRIMARY KEY (contact_id, tag)
) WITHOUT ROWID;
CREATE INDEX contact_tags_tag ON contact_tags (tag, contact_id);
INSERT OR IGNORE INTO contact_tags (contact_id, tag)
SELECT c.id, j.value FROM contacts c, json_each(c.properties, '$.tags') j
WHERE json_type(c.properties, '$.tags') = 'array' AND j.type = 'text';

-- How many contacts each tag, account and assigned user has, kept by triggers: a page of a broad
-- filter (half of a million contacts) is found in a few rows of the sort index, but counting its
-- matches for meta.total would read them all (tens of ms) on every request.
CREATE TABLE contact_filter_counts (
  filter TEXT NOT NULL,                 -- 'tag', 'account' or 'assigned_user'
  value  TEXT NOT NULL,
  n      INTEGER NOT NULL,
  PRIMARY KEY (filter, value)
) WITHOUT ROWID;
INSERT INTO contact_filter_counts (filter, value, n) SELECT 'tag', tag, count(*) FROM contact_tags GROUP BY tag;
INSERT INTO contact_filter_counts (filter, value, n) SELECT 'account', account_id, count(*) FROM contact_accounts GROUP BY account_id;
INSERT INTO contact_filter_counts (filter, value, n)
SELECT 'assigned_user', assigned_user_id, count(*) FROM contacts WHERE assigned_user_id IS NOT NULL GROUP BY assigned_user_id;

CREATE TRIGGER contact_tags_count_insert AFTER INSERT ON contact_tags BEGIN
  INSERT INTO contact_filter_counts (filter, value, n) VALUES ('tag', new.tag, 1) ON CONFLICT (filter, value) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER contact_tags_count_delete AFTER DELETE ON contact_tags BEGIN
  UPDATE contact_filter_counts SET n = n - 1 WHERE filter = 'tag' AND value = old.tag;
END;
CREATE TRIGGER contact_accounts_count_insert AFTER INSERT ON contact_accounts BEGIN
  INSERT INTO contact_filter_counts (filter, value, n) VALUES ('account', new.account_id, 1) ON CONFLICT (filter, value) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER contact_accounts_count_delete AFTER DELETE ON contact_accounts BEGIN
  UPDATE contact_filter_counts SET n = n - 1 WHERE filter = 'account' AND value = old.account_id;
END;
CREATE TRIGGER contacts_assigned_count_insert AFTER INSERT ON contacts WHEN new.assigned_user_id IS NOT NULL BEGIN
  INSERT INTO contact_filter_counts (filter, value, n) VALUES ('assigned_user', new.assigned_user_id, 1) ON CONFLICT (filter, value) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER contacts_assigned_count_delete AFTER DELETE ON contacts WHEN old.assigned_user_id IS NOT NULL BEGIN
  UPDATE contact_filter_counts SET n = n - 1 WHERE filter = 'assigned_user' AND value = old.assigned_user_id;
END;
CREATE TRIGGER contacts_assigned_count_update AFTER UPDATE OF assigned_user_id ON contacts
WHEN old.assigned_user_id IS NOT new.assigned_user_id BEGIN
  UPDATE contact_filter_counts SET n = n - 1 WHERE filter = 'assigned_user' AND value = old.assigned_user_id;
  INSERT INTO contact_filter_counts (filter, value, n) SELECT 'assigned_user', new.assigned_user_id, 1 WHERE new.assigned_user_id IS NOT NULL
  ON CONFLICT (filter, value) DO UPDATE SET n = n + 1;
END;

-- Deleted contacts and accounts, so a poller learns of deletions after any downtime shorter than
-- the tombstone retention (pruned by the retention job).
CREATE TABLE tombstones (
  resource   TEXT NOT NULL,             -- 'contact' or 'account'
  id         TEXT NOT NULL,
  deleted_at INTEGER NOT NULL,
  PRIMARY KEY (resource, id)
) WITHOUT ROWID;
CREATE INDEX tombstones_deleted ON tombstones (resource, deleted_at, id);

-- Accounts are listed in every sort, like contacts.
CREATE INDEX accounts_created ON accounts (created_at, id);
CREATE INDEX accounts_updated ON accounts (updated_at, id);
