-- When each operator last signed in or used the console: SQLite's migration 0026 (its comment says why).
ALTER TABLE operators ADD COLUMN last_seen_at bigint;
UPDATE operators SET last_seen_at = (SELECT max(s.last_seen_at) FROM operator_sessions s WHERE s.operator_id = operators.id);
