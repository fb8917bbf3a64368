-- The counts of contacts per tag, account and assigned user kept a row for every value ever used,
-- at 0 once no contact had it: a client that tags contacts with ever new values and deletes them
-- grew the table without bound (2,500 rows a second at the default write rate). A count that
-- falls to 0 is now deleted; a missing row reads as 0.
DELETE FROM contact_filter_counts WHERE n = 0;

DROP TRIGGER contact_tags_count_delete;
CREATE TRIGGER contact_tags_count_delete AFTER DELETE ON contact_tags BEGIN
  DELETE FROM contact_filter_counts WHERE filter = 'tag' AND value = old.tag AND n = 1;
  UPDATE contact_filter_counts SET n = n - 1 WHERE filter = 'tag' AND value = old.tag;
END;

DROP TRIGGER contact_accounts_count_delete;
CREATE TRIGGER contact_accounts_count_delete AFTER DELETE ON contact_accounts BEGIN
  DELETE FROM contact_filter_counts WHERE filter = 'account' AND value = old.account_id AND n = 1;
  UPDATE contact_filter_counts SET n = n - 1 WHERE filter = 'account' AND value = old.account_id;
END;

DROP TRIGGER contacts_assigned_count_delete;
CREATE TRIGGER contacts_assigned_count_delete AFTER DELETE ON contacts WHEN old.assigned_user_id IS NOT NULL BEGIN
  DELETE FROM contact_filter_counts WHERE filter = 'assigned_user' AND value = old.assigned_user_id AND n = 1;
  UPDATE contact_filter_counts SET n = n - 1 WHERE filter = 'assigned_user' AND value = old.assigned_user_id;
END;

DROP TRIGGER contacts_assigned_count_update;
CREATE TRIGGER contacts_assigned_count_update AFTER UPDATE OF assigned_user_id ON contacts
WHEN old.assigned_user_id IS NOT new.assigned_user_id BEGIN
  DELETE FROM contact_filter_counts WHERE filter = 'assigned_user' AND value = old.assigned_user_id AND n = 1;
  UPDATE contact_filter_counts SET n = n - 1 WHERE filter = 'assigned_user' AND value = old.assigned_user_id;
  INSERT INTO contact_filter_counts (filter, value, n) SELECT 'assigned_user', new.assigned_user_id, 1 WHERE new.assigned_user_id IS NOT NULL
  ON CONFLICT (filter, value) DO UPDATE SET n = n + 1;
END;
