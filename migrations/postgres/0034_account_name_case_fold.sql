-- Account names are keyed with full case folding (accountNameKey: NFC, lowercased, upper-cased,
-- lowercased again, NFC; Turkish dotted and dotless i as one letter): "GROSSHANDEL SÜD GMBH" and
-- "GROẞHANDEL SÜD GMBH" find "Großhandel Süd GmbH", where lowercasing alone kept ß and SS apart,
-- and a batch upsert of the capitals made a second account. PostgreSQL's upper()
-- maps one character to one (ß stays ß) and depends on the collation: the migration's backfill
-- step rekeys the names whose key changes, and warns of the accounts whose keys it makes one, as on
-- SQLite. The script itself changes nothing.
SELECT 1;
