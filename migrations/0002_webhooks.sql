-- Webhooks: subscriptions, one delivery per event and subscription, and every attempt made.
-- Times are integer Unix milliseconds.

CREATE TABLE webhook_subscriptions (
  id              TEXT PRIMARY KEY,
  target_url      TEXT NOT NULL,
  description     TEXT,
  events          TEXT NOT NULL,         -- JSON array of event kinds, as given
  secret          TEXT NOT NULL,         -- whsec_...; kept in clear because every request is signed with it
  status          TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
  disabled_at     INTEGER,
  disabled_reason TEXT,
  created_at      INTEGER NOT NULL,
  updated_at      INTEGER NOT NULL
);
CREATE INDEX webhook_subscriptions_created ON webhook_subscriptions (created_at, id);

-- Which subscriptions want which event kind: the outbox fans an event out through this index.
CREATE TABLE webhook_subscription_events (
  event_type      TEXT NOT NULL,
  subscription_id TEXT NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
  PRIMARY KEY (event_type, subscription_id)
) WITHOUT ROWID;
CREATE INDEX webhook_subscription_events_subscription ON webhook_subscription_events (subscription_id);

CREATE TABLE webhook_deliveries (
  id                   TEXT PRIMARY KEY,  -- sent as webhook-id on every attempt
  event_id             TEXT NOT NULL REFERENCES events (id),
  event_type           TEXT NOT NULL,
  subscription_id      TEXT NOT NULL,     -- no foreign key: the history outlives a deleted subscription
  target_url           TEXT NOT NULL,
  status               TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'failed')),
  attempts             INTEGER NOT NULL DEFAULT 0,
  next_attempt_at      INTEGER,           -- while pending: when the next attempt is due
  locked_until         INTEGER,           -- lease of an attempt in progress; a crashed process's lease expires
  last_response_status INTEGER,
  last_error           TEXT,
  created_at           INTEGER NOT NULL,
  updated_at           INTEGER NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id) WHERE status = 'pending';
-- Claims go subscription by subscription, so a backlog for a saturated receiver is never scanned.
CREATE INDEX webhook_deliveries_due_by_subscription ON webhook_deliveries (subscription_id, next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (locked_until) WHERE locked_until IS NOT NULL;
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at, id);
CREATE INDEX webhook_deliveries_subscription ON webhook_deliveries (subscription_id, created_at, id);
-- Pending and failed deliveries only: succeeded ones, the great majority, would cost an index
-- update on every success; lists of succeeded deliveries walk the created index instead.
CREATE INDEX webhook_deliveries_unfinished ON webhook_deliveries (status, created_at, id) WHERE status <> 'succeeded';
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);

CREATE TABLE webhook_delivery_attempts (
  delivery_id      TEXT NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
  attempt          INTEGER NOT NULL,
  triggered_by     TEXT NOT NULL CHECK (triggered_by IN ('scheduled', 'manual')),
  started_at       INTEGER NOT NULL,
  duration_ms      REAL NOT NULL,
  request_headers  TEXT NOT NULL,         -- JSON object of the headers sent
  response_status  INTEGER,
  response_headers TEXT NOT NULL,         -- JSON object of the response headers of interest
  response_body    TEXT,                  -- first 4 KiB
  error            TEXT,                  -- network error, timeout or address refusal, in words
  PRIMARY KEY (delivery_id, attempt)
) WITHOUT ROWID;
