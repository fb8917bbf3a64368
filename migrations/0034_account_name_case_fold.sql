-- Account names are keyed with full case folding (accountNameKey: NFC, lowercased, upper-cased,
-- lowercased again, NFC; Turkish dotted and dotless i as one letter): "GROSSHANDEL SÜD GMBH" and
-- "GROẞHANDEL SÜD GMBH" find "Großhandel Süd GmbH", where lowercasing alone kept ß and SS apart,
-- and a batch upsert of the capitals made a second account. SQL cannot fold case
-- beyond ASCII: the migration's backfill step rekeys the names whose key changes, and warns of the
-- accounts whose keys it makes one (a batch upsert by their name is ambiguous from then on). SQLite
-- runs no script without a statement, hence this one, which changes nothing.
SELECT 1;
