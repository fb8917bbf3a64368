-- The resource a kept idempotent answer shows, for its withdrawal at the resource's delete: SQLite's migration 0030 (its comment says why).
-- A reservation (status 0) holds no answer yet; every other row holds the JSON the service wrote.
ALTER TABLE idempotency_keys ADD COLUMN resource_id text;
UPDATE idempotency_keys SET resource_id = response_body::jsonb #>> '{data,id}'
  WHERE status <> 0 AND jsonb_typeof(response_body::jsonb #> '{data,id}') = 'string';
CREATE INDEX idempotency_keys_resource ON idempotency_keys (resource_id) WHERE resource_id IS NOT NULL;
-- The answers of a contact or account deleted before it, withdrawn as its delete does now, in the
-- text it writes ({"resource":…,"id":…}, which json_build_object would space differently).
UPDATE idempotency_keys SET status = 410, response_body = '{"resource":' || to_json(t.resource)::text || ',"id":' || to_json(t.id)::text || '}'
  FROM tombstones AS t WHERE t.id = idempotency_keys.resource_id;
