-- A contact's id in the system it was imported from: optional, unique when set, so batch upserts
-- and re-run imports find the same contact again without relying on email (which is not unique).
ALTER TABLE contacts ADD COLUMN external_id TEXT;
CREATE UNIQUE INDEX contacts_external_id ON contacts (external_id) WHERE external_id IS NOT NULL;
