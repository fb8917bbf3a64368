-- Names are keyed with their white space folded (nameKey): each run of it, a no-break space (a
-- name pasted from a web page) or a doubled space, is one space, and none at either end. Before,
-- "Acme GmbH", "Acme\u00a0GmbH" and "Acme  GmbH" were three keys, so a batch upsert or crm import
-- made three accounts that look alike in every list. SQL cannot fold Unicode white space as the
-- service does: the backfill step rekeys the account names whose key changes (warning of the
-- accounts whose keys it makes one, as 0034 did) and the contact names' sort keys that change,
-- which the triggers copy to their tag and account rows, as on SQLite. No version, updated_at or
-- event changes. The script itself changes nothing.
SELECT 1;
