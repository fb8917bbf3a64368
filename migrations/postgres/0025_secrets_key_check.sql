-- The check value of the secrets key this database is used with: SQLite's migration 0025 (its comment says why).
CREATE TABLE secrets_key_check (
  singleton   integer PRIMARY KEY CHECK (singleton = 1),
  check_value bytea NOT NULL
);
