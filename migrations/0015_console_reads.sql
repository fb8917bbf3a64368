-- Operator console (issue 17): the reads an operator on call makes, kept fast on a large history,
-- and one-time links that invite an operator or reset an operator's password.

-- What an event is about: the id in its data (a contact's or an account's; NULL for pings).
-- A contact's page lists every event about the contact, and the deliveries page filters by
-- contact, through this index instead of reading every payload. Computed from the payload, so
-- the outbox writes nothing more. PostgreSQL: a STORED generated column,
-- GENERATED ALWAYS AS ((payload::jsonb) -> 'data' ->> 'id') STORED, and the same partial index.
ALTER TABLE events ADD COLUMN subject_id TEXT GENERATED ALWAYS AS (json_extract(payload, '$.data.id')) VIRTUAL;
CREATE INDEX events_subject ON events (subject_id, created_at, id) WHERE subject_id IS NOT NULL;

-- Deliveries per subscription, hour of creation (Unix ms at the start of the hour) and current
-- status, kept by triggers: the health charts (24 hours, 7 days) and the deliveries page's totals
-- read a few hundred rows instead of counting a million deliveries (bench/console.ts: the start
-- page of 20 subscriptions and 1M deliveries in 6 to 9 ms at p50). Upkeep: about 2 us more per delivery
-- written and 3 to 4 us per change of status (100k of each, in memory). PostgreSQL: the same table and
-- three row triggers (plpgsql functions doing the same upserts).
CREATE TABLE webhook_delivery_hours (
  subscription_id TEXT NOT NULL,
  hour            INTEGER NOT NULL,
  status          TEXT NOT NULL,
  n               INTEGER NOT NULL,
  PRIMARY KEY (subscription_id, hour, status)
) WITHOUT ROWID;

INSERT INTO webhook_delivery_hours (subscription_id, hour, status, n)
SELECT subscription_id, created_at - created_at % 3600000, status, count(*) FROM webhook_deliveries
GROUP BY subscription_id, created_at - created_at % 3600000, status;

CREATE TRIGGER webhook_delivery_hours_insert AFTER INSERT ON webhook_deliveries BEGIN
  INSERT INTO webhook_delivery_hours (subscription_id, hour, status, n) VALUES (new.subscription_id, new.created_at - new.created_at % 3600000, new.status, 1)
  ON CONFLICT (subscription_id, hour, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER webhook_delivery_hours_status AFTER UPDATE OF status ON webhook_deliveries WHEN old.status <> new.status BEGIN
  UPDATE webhook_delivery_hours SET n = n - 1 WHERE subscription_id = old.subscription_id AND hour = old.created_at - old.created_at % 3600000 AND status = old.status;
  DELETE FROM webhook_delivery_hours WHERE subscription_id = old.subscription_id AND hour = old.created_at - old.created_at % 3600000 AND status = old.status AND n <= 0;
  INSERT INTO webhook_delivery_hours (subscription_id, hour, status, n) VALUES (new.subscription_id, new.created_at - new.created_at % 3600000, new.status, 1)
  ON CONFLICT (subscription_id, hour, status) DO UPDATE SET n = n + 1;
END;
-- A count that reaches zero goes (a status change, retention deleting old deliveries), so the table
-- holds no more rows than the deliveries kept have hours.
CREATE TRIGGER webhook_delivery_hours_delete AFTER DELETE ON webhook_deliveries BEGIN
  UPDATE webhook_delivery_hours SET n = n - 1 WHERE subscription_id = old.subscription_id AND hour = old.created_at - old.created_at % 3600000 AND status = old.status;
  DELETE FROM webhook_delivery_hours WHERE subscription_id = old.subscription_id AND hour = old.created_at - old.created_at % 3600000 AND status = old.status AND n <= 0;
END;

-- One-time links an operator hands to someone: an invitation to become an operator with the
-- given email, or a password reset of an existing operator. Only the code's SHA-256 is stored.
CREATE TABLE operator_links (
  code_hash   BLOB PRIMARY KEY,
  purpose     TEXT NOT NULL CHECK (purpose IN ('invite', 'reset')),
  email       TEXT NOT NULL,
  created_by  TEXT,                      -- the operator who made the link; NULL from the command line
  created_at  INTEGER NOT NULL,
  expires_at  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX operator_links_email ON operator_links (email);
