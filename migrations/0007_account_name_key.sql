-- Accounts are found by name case-insensitively in every script ("MÜLLER GMBH" finds "Müller GmbH"):
-- SQLite's NOCASE and lower() fold ASCII only, so name_key holds the name as the service keys it
-- (Unicode NFC, lowercased in JavaScript). The migration's backfill step keys the existing rows.
ALTER TABLE accounts ADD COLUMN name_key TEXT NOT NULL DEFAULT '';
DROP INDEX accounts_name;
CREATE INDEX accounts_name_key ON accounts (name_key, id);
