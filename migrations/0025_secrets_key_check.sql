-- The check value of the secrets key this database is used with: an HMAC of a fixed text under a key
-- derived from it (never the key, nor the sealing key). The first start records it, and every start
-- after compares its own key with it, so that an instance given another key is refused before it
-- seals a secret the others cannot open, even while no subscription exists to try the key on. One row.
CREATE TABLE secrets_key_check (
  singleton   INTEGER PRIMARY KEY CHECK (singleton = 1),
  check_value BLOB NOT NULL
);
