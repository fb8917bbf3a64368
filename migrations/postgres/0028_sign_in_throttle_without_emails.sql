-- The sign-in throttle keeps typed emails as a keyed hash: SQLite's migration 0028 (its comment says why).
DELETE FROM login_failures WHERE scope <> 'address';
DELETE FROM sign_in_turns WHERE pace_key LIKE 'account:%';
