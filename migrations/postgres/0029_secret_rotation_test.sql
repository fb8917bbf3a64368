-- The webhook.ping the console's secret rotation wizard sent as its test: SQLite's migration 0029 (its comment says why).
ALTER TABLE webhook_subscriptions ADD COLUMN secret_test_delivery_id text;
