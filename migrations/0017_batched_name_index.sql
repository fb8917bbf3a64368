-- Names reach the trigram search index in batches instead of in each create's transaction. FTS5
-- writes a segment for every transaction that adds rows: about 20 us per contact in group commits
-- of 25, against about 1 us added a thousand at a time. A new contact's rowid waits here; a
-- background job indexes what waits every fraction of a second, and a name search indexes it first
-- (contacts/service.ts), so a search never misses a contact. Updates and deletes of a contact not
-- indexed yet find no row in contacts_full_name; the batch reads the name as it is then.
CREATE TABLE contacts_full_name_pending (contact_rowid INTEGER PRIMARY KEY);

DROP TRIGGER contacts_full_name_insert;
CREATE TRIGGER contacts_full_name_insert AFTER INSERT ON contacts BEGIN
  INSERT INTO contacts_full_name_pending (contact_rowid) VALUES (new.rowid);
END;

DROP TRIGGER contacts_full_name_delete;
CREATE TRIGGER contacts_full_name_delete AFTER DELETE ON contacts BEGIN
  DELETE FROM contacts_full_name WHERE rowid = old.rowid;
  DELETE FROM contacts_full_name_pending WHERE contact_rowid = old.rowid;
END;
