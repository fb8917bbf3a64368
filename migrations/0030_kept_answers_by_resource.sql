-- The id of the one resource a kept idempotent answer shows (its data.id), indexed, so that a
-- contact's or account's delete finds the answers showing its record without reading the table
-- and withdraws them in its own transaction: a replay handed out the deleted record for 24 hours.
-- Answers kept before this migration are filled from their bodies, and those of a contact or
-- account already deleted (its tombstone) are withdrawn as its delete does now
-- (withdrawIdempotencyRecordsOf): else they replayed the deleted record until they expired.
ALTER TABLE idempotency_keys ADD COLUMN resource_id TEXT;
UPDATE idempotency_keys SET resource_id = json_extract(response_body, '$.data.id')
  WHERE json_valid(response_body) AND json_type(response_body, '$.data.id') = 'text';
CREATE INDEX idempotency_keys_resource ON idempotency_keys (resource_id) WHERE resource_id IS NOT NULL;
UPDATE idempotency_keys SET status = 410, response_body = json_object('resource', t.resource, 'id', t.id)
  FROM tombstones AS t WHERE t.id = idempotency_keys.resource_id;
