-- The PostgreSQL twin of SQLite migration 0015 (operator console): events found by what they are
-- about, deliveries counted per subscription, hour and status by triggers, one-time operator links.

-- What an event is about: the id in its data (a contact's or an account's; NULL for pings).
-- A stored generated column (SQLite's is virtual: it adds no bytes there), the same partial index.
ALTER TABLE events ADD COLUMN subject_id text GENERATED ALWAYS AS ((payload::jsonb -> 'data') ->> 'id') STORED;
CREATE INDEX events_subject ON events (subject_id, created_at, id) WHERE subject_id IS NOT NULL;

-- Deliveries per subscription, hour of creation and current status (see the SQLite migration).
-- Every delivery written, and every change of status, updates one row of this table: deliveries
-- of one subscription made in one hour wait for each other's counts there until they commit.
CREATE TABLE webhook_delivery_hours (
  subscription_id text NOT NULL,
  hour            bigint NOT NULL,
  status          text NOT NULL,
  n               bigint NOT NULL,
  PRIMARY KEY (subscription_id, hour, status)
);

INSERT INTO webhook_delivery_hours (subscription_id, hour, status, n)
SELECT subscription_id, created_at - created_at % 3600000, status, count(*) FROM webhook_deliveries
GROUP BY subscription_id, created_at - created_at % 3600000, status;

-- One function for the three SQLite triggers: the old status's count goes down (and its row when
-- it reaches zero), the new one's goes up.
CREATE FUNCTION webhook_delivery_hours_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE webhook_delivery_hours SET n = n - 1
    WHERE subscription_id = OLD.subscription_id AND hour = OLD.created_at - OLD.created_at % 3600000 AND status = OLD.status;
    DELETE FROM webhook_delivery_hours
    WHERE subscription_id = OLD.subscription_id AND hour = OLD.created_at - OLD.created_at % 3600000 AND status = OLD.status AND n <= 0;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO webhook_delivery_hours (subscription_id, hour, status, n)
    VALUES (NEW.subscription_id, NEW.created_at - NEW.created_at % 3600000, NEW.status, 1)
    ON CONFLICT (subscription_id, hour, status) DO UPDATE SET n = webhook_delivery_hours.n + 1;
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER webhook_delivery_hours AFTER INSERT OR DELETE ON webhook_deliveries
  FOR EACH ROW EXECUTE FUNCTION webhook_delivery_hours_count();
CREATE TRIGGER webhook_delivery_hours_status AFTER UPDATE OF status ON webhook_deliveries
  FOR EACH ROW WHEN (OLD.status <> NEW.status) EXECUTE FUNCTION webhook_delivery_hours_count();

-- One-time links to become an operator (invite) or to set a new password (reset); only the
-- code's SHA-256 is stored.
CREATE TABLE operator_links (
  code_hash  bytea PRIMARY KEY,
  purpose    text NOT NULL CHECK (purpose IN ('invite', 'reset')),
  email      text NOT NULL,
  created_by text,
  created_at bigint NOT NULL,
  expires_at bigint NOT NULL
);
CREATE INDEX operator_links_email ON operator_links (email);
