-- FTS5's secure-delete for the name index: a contact's delete, and a rename, take the old name's
-- trigrams (with the row's id and positions) out of the index's segments at once. In FTS5's default
-- mode they stayed in contacts_full_name_data, written again as delete markers, until a merge
-- happened to reach those segments: in a quiet or large database for good, in the live file and in
-- every backup taken after the delete. The option is kept in the table's config, so every
-- connection uses it; it needs SQLite 3.42 or later (Bun's is 3.54). 'optimize' then merges the
-- segments into one, which drops the names deleted before this migration (about 0.1 s per 100,000 names).
INSERT INTO contacts_full_name (contacts_full_name, rank) VALUES ('secure-delete', 1);
INSERT INTO contacts_full_name (contacts_full_name) VALUES ('optimize');
