-- The resource a kept idempotent answer shows, for its withdrawal at the resource's delete: SQLite's migration 0030 (its comment says why).
-- A reservation (status 0) holds no answer yet; every other row holds the JSON the service wrote.
ALTER TABLE idempotency_keys ADD COLUMN resource_id text;
UPDATE idempotency_keys SET resource_id = response_body::jsonb #>> '{data,id}'
  WHERE status <> 0 AND jsonb_typeof(response_body::jsonb #> '{data,id}') = 'string';
CREATE INDEX idempotency_keys_resource ON idempotency_keys (resource_id) WHERE resource_id IS NOT NULL;
