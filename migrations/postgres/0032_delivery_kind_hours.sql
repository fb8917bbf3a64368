-- The PostgreSQL twin of SQLite migration 0032: deliveries per kind, subscription, hour of
-- creation and current status, kept by triggers (see the SQLite migration), for the totals of a
-- deliveries list filtered by kind. Like 0015's table, every delivery written and every change of
-- status updates one row here: deliveries of one kind and subscription made in one hour wait for
-- each other's counts until they commit.
CREATE TABLE webhook_delivery_kind_hours (
  event_type      text NOT NULL,
  subscription_id text NOT NULL,
  hour            bigint NOT NULL,
  status          text NOT NULL,
  n               bigint NOT NULL,
  PRIMARY KEY (event_type, subscription_id, hour, status)
);

INSERT INTO webhook_delivery_kind_hours (event_type, subscription_id, hour, status, n)
SELECT event_type, subscription_id, created_at - created_at % 3600000, status, count(*) FROM webhook_deliveries
GROUP BY event_type, subscription_id, created_at - created_at % 3600000, status;

-- One function for the three SQLite triggers, as 0015's.
CREATE FUNCTION webhook_delivery_kind_hours_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE webhook_delivery_kind_hours SET n = n - 1
    WHERE event_type = OLD.event_type AND subscription_id = OLD.subscription_id AND hour = OLD.created_at - OLD.created_at % 3600000 AND status = OLD.status;
    DELETE FROM webhook_delivery_kind_hours
    WHERE event_type = OLD.event_type AND subscription_id = OLD.subscription_id AND hour = OLD.created_at - OLD.created_at % 3600000 AND status = OLD.status AND n <= 0;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO webhook_delivery_kind_hours (event_type, subscription_id, hour, status, n)
    VALUES (NEW.event_type, NEW.subscription_id, NEW.created_at - NEW.created_at % 3600000, NEW.status, 1)
    ON CONFLICT (event_type, subscription_id, hour, status) DO UPDATE SET n = webhook_delivery_kind_hours.n + 1;
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER webhook_delivery_kind_hours AFTER INSERT OR DELETE ON webhook_deliveries
  FOR EACH ROW EXECUTE FUNCTION webhook_delivery_kind_hours_count();
CREATE TRIGGER webhook_delivery_kind_hours_status AFTER UPDATE OF status ON webhook_deliveries
  FOR EACH ROW WHEN (OLD.status <> NEW.status) EXECUTE FUNCTION webhook_delivery_kind_hours_count();
