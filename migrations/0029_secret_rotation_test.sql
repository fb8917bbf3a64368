-- The webhook.ping the console's secret rotation wizard sent as its test, while the rotation it
-- tests is the subscription's last (each rotation clears it). The wizard found its test as the
-- latest ping stamped after the rotation, comparing stamps of two instances' clocks: one behind
-- missed its own ping, and one ahead made an older ping look newer. Null: no test sent yet.
ALTER TABLE webhook_subscriptions ADD COLUMN secret_test_delivery_id TEXT;
