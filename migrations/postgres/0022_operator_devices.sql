-- Device cookies of the console sign-in: SQLite's migration 0022 (its comment says why).
CREATE TABLE operator_devices (
  id_hash     bytea PRIMARY KEY,
  operator_id text NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
  failures    integer NOT NULL,
  created_at  bigint NOT NULL,
  expires_at  bigint NOT NULL
);
CREATE INDEX operator_devices_operator ON operator_devices (operator_id, created_at);
CREATE INDEX operator_devices_expires ON operator_devices (expires_at);
