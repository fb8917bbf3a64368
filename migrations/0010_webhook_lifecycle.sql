-- Webhook lifecycle: secret rotation with a grace period, pausing, contact versions, event ids in bodies.

-- During a rotation's grace period every request is signed with the new secret and the previous
-- one, so receivers verifying with either keep working. previous_secret goes through the same
-- read and write path as secret.
ALTER TABLE webhook_subscriptions ADD COLUMN previous_secret TEXT;
ALTER TABLE webhook_subscriptions ADD COLUMN previous_secret_expires_at INTEGER;
ALTER TABLE webhook_subscriptions ADD COLUMN secret_rotated_at INTEGER;
-- A paused subscription still gets deliveries; they wait (pending) until it is resumed. A column
-- rather than a third status: the status CHECK constraint could only change by rebuilding the table.
ALTER TABLE webhook_subscriptions ADD COLUMN paused_at INTEGER;

-- Every change of a contact counts up its version, in the write that makes it, so receivers can
-- order events and drop stale ones (updated_at repeats within a millisecond; retries arrive late).
ALTER TABLE contacts ADD COLUMN version INTEGER NOT NULL DEFAULT 1;

-- Bodies carry their event's id, the same for every subscription, so a receiver can drop an event
-- it already got through another subscription. Events written before this carry it too when retried.
UPDATE events SET payload = json_set(payload, '$.event_id', id) WHERE json_extract(payload, '$.event_id') IS NULL;
