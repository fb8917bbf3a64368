-- The deliveries list filtered by event kind alone (GET /webhook-deliveries?event=..., the
-- console's event filter) had no index of its own: it walked webhook_deliveries_created newest
-- first and read every delivery to check its kind, so a rare or absent kind (webhook.ping,
-- delivery.exhausted) read the whole history on every page. This index holds each kind's
-- deliveries in the list's order. Upkeep: one more index entry per delivery inserted or pruned,
-- never moved (a delivery's kind and creation time do not change).
CREATE INDEX webhook_deliveries_event_type ON webhook_deliveries (event_type, created_at, id);
