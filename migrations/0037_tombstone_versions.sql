-- A tombstone keeps the version its contact.deleted or account.deleted carries, and the deleted
-- lists return it: a copy kept by polling could only forget a deleted id, so a contact.updated
-- retried after the poll found "0 when unknown" and brought the contact back for good. Tombstones
-- written before this migration have none (null): their deletion is final all the same.
ALTER TABLE tombstones ADD COLUMN version INTEGER;
