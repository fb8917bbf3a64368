-- Contacts' first and last names and tags are stored in Unicode NFC since 3fa1225; those stored
-- before keep the form they were given in, and a decomposed one (José with a combining accent, as a
-- Mac or an export writes it) was then not found by its own value, nor removed as a tag, and adding
-- the tag as typed gave the contact the same tag twice. SQLite has no normalize(): the migration's
-- backfill step rewrites them (contacts/store.ts, normalizeStoredNamesAndTags), the triggers
-- copying the names to the tag and account rows and to the name search. SQLite runs no script
-- without a statement, hence this one, which changes nothing.
SELECT 1;
