-- Migration 0034 rekeyed the account names with full case folding once. A crm from before it left
-- running beside the one that migrated (several instances upgraded one VM at a time, which the
-- README forbids) went on keying the accounts it created or renamed the old way (lowercased:
-- "große straße" where the key is "grosse strasse"): a write it had admitted waited for the write
-- lock behind the migrations and committed after 0034. Their capitals do not find them, and a
-- batch upsert of such a name makes a second account. The backfill step does 0034's again, as on
-- SQLite: it rekeys the names whose key is not the one accountNameKey gives, and warns of the
-- accounts whose keys it makes one; on a database no older crm wrote to after 0034 it changes
-- nothing. The script itself changes nothing.
SELECT 1;
