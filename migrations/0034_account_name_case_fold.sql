-- Account names are keyed with full case folding (accountNameKey: NFC, upper-cased, then
-- lowercased): "GROSSHANDEL SÜD GMBH" finds "Großhandel Süd GmbH", where lowercasing alone kept ß
-- and SS apart, and a batch upsert of the capitals made a second account. SQL cannot fold case
-- beyond ASCII: the migration's backfill step rekeys the names whose key changes. SQLite runs no
-- script without a statement, hence this one, which changes nothing.
SELECT 1;
