-- Operator console: operators, their sessions, first-run setup codes, sign-in throttling and
-- subscription rotations. Times are integer Unix milliseconds.

CREATE TABLE operators (
  id            TEXT PRIMARY KEY,
  email         TEXT NOT NULL UNIQUE,     -- stored lowercased
  password_hash TEXT NOT NULL,            -- Bun.password (argon2id, PHC string)
  created_at    INTEGER NOT NULL,
  updated_at    INTEGER NOT NULL
);

-- The cookie holds a random session id; only its SHA-256 is stored.
CREATE TABLE operator_sessions (
  id_hash      BLOB PRIMARY KEY,
  operator_id  TEXT NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
  created_at   INTEGER NOT NULL,
  last_seen_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX operator_sessions_operator ON operator_sessions (operator_id);
CREATE INDEX operator_sessions_last_seen ON operator_sessions (last_seen_at);

-- One-time codes of the first-run setup link printed by `serve` while no operator exists.
CREATE TABLE operator_setup_codes (
  code_hash  BLOB PRIMARY KEY,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
) WITHOUT ROWID;

-- Failed sign-ins per fixed window, by scope ('address' or 'account') and subject.
CREATE TABLE login_failures (
  scope           TEXT NOT NULL,
  subject         TEXT NOT NULL,
  failures        INTEGER NOT NULL,
  window_start_at INTEGER NOT NULL,
  PRIMARY KEY (scope, subject)
) WITHOUT ROWID;

-- A guided replacement of one webhook subscription by a new one, keyed by the new subscription.
-- The old subscription's URL and description are copied so the summary survives its deletion.
CREATE TABLE subscription_rotations (
  new_subscription_id TEXT PRIMARY KEY,
  old_subscription_id TEXT NOT NULL,
  old_target_url      TEXT NOT NULL,
  old_description     TEXT NOT NULL,
  test_delivery_id    TEXT,              -- the latest webhook.ping sent to the new subscription
  created_at          INTEGER NOT NULL,
  updated_at          INTEGER NOT NULL,
  completed_at        INTEGER            -- set when the old subscription was deleted
) WITHOUT ROWID;
CREATE INDEX subscription_rotations_old ON subscription_rotations (old_subscription_id);
