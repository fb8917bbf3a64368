-- Each tag row carries its contact's sort keys, and one index per documented sort walks a tag's
-- contacts in the page's order: a page of a tag costs its 25 index entries wherever in the sort
-- its contacts lie. Through contacts' own sort index, a tag carried only by the oldest 1 in 20 of
-- a million contacts (newest first) found none in the walk's window and fetched and sorted all
-- 50,000 of them (50 ms a page).
-- created_at never changes; the other keys are copied by the triggers below whenever the
-- contact's change. The names keep contacts' collation, so both orders agree.
CREATE TABLE contact_tags_sorted (
  contact_id TEXT NOT NULL REFERENCES contacts (id) ON DELETE CASCADE,
  tag        TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  first_name TEXT COLLATE NOCASE,
  last_name  TEXT COLLATE NOCASE,
  email      TEXT,
  PRIMARY KEY (contact_id, tag)
) WITHOUT ROWID;
INSERT INTO contact_tags_sorted (contact_id, tag, created_at, updated_at, first_name, last_name, email)
SELECT t.contact_id, t.tag, c.created_at, c.updated_at, c.first_name, c.last_name, c.email
FROM contact_tags t JOIN contacts c ON c.id = t.contact_id;
-- Dropping the table drops contact_tags_tag and the count triggers of 0013; both come back below.
DROP TABLE contact_tags;
ALTER TABLE contact_tags_sorted RENAME TO contact_tags;

-- (tag, created_at, contact_id) also serves what contact_tags_tag did: a tag's contacts, counted or fetched.
CREATE INDEX contact_tags_created ON contact_tags (tag, created_at, contact_id);
CREATE INDEX contact_tags_updated ON contact_tags (tag, updated_at, contact_id);
CREATE INDEX contact_tags_first_name ON contact_tags (tag, first_name, contact_id);
CREATE INDEX contact_tags_last_name ON contact_tags (tag, last_name, contact_id);
CREATE INDEX contact_tags_email ON contact_tags (tag, email, contact_id);

CREATE TRIGGER contact_tags_count_insert AFTER INSERT ON contact_tags BEGIN
  INSERT INTO contact_filter_counts (filter, value, n) VALUES ('tag', new.tag, 1) ON CONFLICT (filter, value) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER contact_tags_count_delete AFTER DELETE ON contact_tags BEGIN
  UPDATE contact_filter_counts SET n = n - 1 WHERE filter = 'tag' AND value = old.tag;
END;

-- Every change of a contact moves updated_at; a name or email is copied (and its index entry
-- moved) only when it changed, one trigger each, since the contacts service's UPDATE sets every
-- column and an UPDATE of all three moved three index entries per tag for a change of one.
-- BINARY: a change of case alone is a change, so the copy keeps the contact's spelling.
CREATE TRIGGER contact_tags_updated_at AFTER UPDATE OF updated_at ON contacts WHEN old.updated_at <> new.updated_at BEGIN
  UPDATE contact_tags SET updated_at = new.updated_at WHERE contact_id = new.id;
END;
CREATE TRIGGER contact_tags_first_name AFTER UPDATE OF first_name ON contacts WHEN old.first_name IS NOT new.first_name COLLATE BINARY BEGIN
  UPDATE contact_tags SET first_name = new.first_name WHERE contact_id = new.id;
END;
CREATE TRIGGER contact_tags_last_name AFTER UPDATE OF last_name ON contacts WHEN old.last_name IS NOT new.last_name COLLATE BINARY BEGIN
  UPDATE contact_tags SET last_name = new.last_name WHERE contact_id = new.id;
END;
CREATE TRIGGER contact_tags_email AFTER UPDATE OF email ON contacts WHEN old.email IS NOT new.email BEGIN
  UPDATE contact_tags SET email = new.email WHERE contact_id = new.id;
END;
