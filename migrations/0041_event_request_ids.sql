-- The id of the request whose change made an event (its answer's X-Request-Id: the client's own
-- when it sent a safe one), so a delivery can be traced to the request that caused it and the
-- deliveries of one request found (GET /webhook-deliveries?request_id=...). Null for the events
-- made by no request (the delivery loop's subscription.disabled and delivery.exhausted, commands
-- of the crm binary) and for every event recorded before this migration. A column without a
-- default: adding it rewrites no row. The index holds only the events with a request id, in the
-- order of the subject index beside it (0015); building it reads the events once and writes
-- nothing for the old ones.
ALTER TABLE events ADD COLUMN request_id TEXT;
CREATE INDEX events_request ON events (request_id, created_at, id) WHERE request_id IS NOT NULL;
