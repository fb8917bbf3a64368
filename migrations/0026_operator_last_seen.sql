-- When each operator last signed in or used the console. Their sessions hold it only while they
-- last (sign-out deletes one, and every sign-in deletes the ended ones), so the operators page and
-- `crm operator list` showed "never" for someone who used the console yesterday. Sign-in and the
-- once-a-minute record of a visit write it here too; the sessions still there give its first value (an
-- operator whose sessions had all ended before the upgrade shows none until they sign in again).
ALTER TABLE operators ADD COLUMN last_seen_at INTEGER;
UPDATE operators SET last_seen_at = (SELECT max(s.last_seen_at) FROM operator_sessions s WHERE s.operator_id = operators.id);
