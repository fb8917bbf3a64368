-- When an event's payload was erased (POST /public/v1/contacts/deleted/:id/erase, crm contact
-- erase): the payload then holds only its type, event id and the record's id, so no reader, retry
-- or recovery finds the record in it, and this column tells them why. Null for every other event.
-- A column without a default: adding it rewrites no row.
ALTER TABLE events ADD COLUMN erased_at INTEGER;
