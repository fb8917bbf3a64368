-- Device cookies of the console sign-in (OWASP, "Slow Down Online Guessing Attacks with Device
-- Cookies"): a browser that signed in as an operator keeps a signed cookie naming one row here,
-- and its sign-ins as that operator are not held by the pacing of the address it comes from.
-- The cookie holds a random nonce; only its SHA-256 is stored. `failures` counts the password
-- checks made with the cookie, each counted before it runs, so a burst sent at once cannot outrun
-- the cookie's budget; a successful sign-in replaces the row with a new one (a new cookie).
CREATE TABLE operator_devices (
  id_hash     BLOB PRIMARY KEY,
  operator_id TEXT NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
  failures    INTEGER NOT NULL,
  created_at  INTEGER NOT NULL,
  expires_at  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX operator_devices_operator ON operator_devices (operator_id, created_at);
CREATE INDEX operator_devices_expires ON operator_devices (expires_at);
