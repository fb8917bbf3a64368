-- Bounded delivery history. Header sets are stored once, however many attempts share them: an
-- attempt keeps the ids of its request and response header sets and, of the request headers,
-- only its signature (webhook-id is the delivery id and webhook-timestamp the Unix second of
-- started_at). Stored response bodies are cut to at most 4 KiB (--delivery-response-body-bytes).
-- The attempts table is rebuilt for this, as a rowid table (see below).

CREATE TABLE webhook_header_sets (
  id      INTEGER PRIMARY KEY,
  headers TEXT NOT NULL UNIQUE           -- JSON object, as the service wrote it
);

INSERT OR IGNORE INTO webhook_header_sets (headers)
  SELECT json_remove(request_headers, '$."webhook-id"', '$."webhook-timestamp"', '$."webhook-signature"') FROM webhook_delivery_attempts;
INSERT OR IGNORE INTO webhook_header_sets (headers)
  SELECT json_remove(response_headers, '$.date') FROM webhook_delivery_attempts;

CREATE TABLE webhook_delivery_attempts_bounded (
  delivery_id         TEXT NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
  attempt             INTEGER NOT NULL,
  triggered_by        TEXT NOT NULL CHECK (triggered_by IN ('scheduled', 'manual')),
  started_at          INTEGER NOT NULL,
  duration_ms         REAL NOT NULL,
  request_header_set  INTEGER NOT NULL,  -- webhook_header_sets.id: the headers every attempt sends alike
  signature           TEXT NOT NULL,     -- webhook-signature of this attempt
  response_status     INTEGER,
  response_header_set INTEGER NOT NULL,  -- webhook_header_sets.id: the response headers of interest
  response_body       TEXT,              -- the first --delivery-response-body-bytes (at most 4 KiB)
  error               TEXT,              -- network error, timeout or address refusal, in words
  PRIMARY KEY (delivery_id, attempt)
);
-- A rowid table, unlike the WITHOUT ROWID one before: rows of a kilobyte or more, inserted in
-- random key order, left three quarters of its pages empty; by rowid they are appended in order.

INSERT INTO webhook_delivery_attempts_bounded
  SELECT a.delivery_id, a.attempt, a.triggered_by, a.started_at, a.duration_ms,
    (SELECT id FROM webhook_header_sets WHERE headers = json_remove(a.request_headers, '$."webhook-id"', '$."webhook-timestamp"', '$."webhook-signature"')),
    coalesce(json_extract(a.request_headers, '$."webhook-signature"'), ''),
    a.response_status,
    (SELECT id FROM webhook_header_sets WHERE headers = json_remove(a.response_headers, '$.date')),
    substr(a.response_body, 1, 4096),
    a.error
  FROM webhook_delivery_attempts a;

DROP TABLE webhook_delivery_attempts;
ALTER TABLE webhook_delivery_attempts_bounded RENAME TO webhook_delivery_attempts;

-- Console sign-in throttling keys failures by account and address together, with delays that
-- grow from the last failure (a lockout of the account or of the address is gone).
ALTER TABLE login_failures ADD COLUMN last_failure_at INTEGER NOT NULL DEFAULT 0;
UPDATE login_failures SET last_failure_at = window_start_at;
