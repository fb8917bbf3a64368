-- Migration 0034 rekeyed the account names with full case folding once. A crm from before it left
-- running beside the one that migrated (several instances on one PostgreSQL, upgraded one VM at a
-- time, which the README forbids) went on keying the accounts it created or renamed the old way
-- (lowercased: "große straße" where the key is "grosse strasse"), so their capitals do not find
-- them and a batch upsert of such a name makes a second account. The backfill step does 0034's
-- again: it rekeys the names whose key is not the one accountNameKey gives, and warns of the
-- accounts whose keys it makes one; on a database no older crm wrote to after 0034 it changes
-- nothing. SQLite has one process and no such accounts, and runs it for the schemas to stay one;
-- it runs no script without a statement, hence this one, which changes nothing.
SELECT 1;
