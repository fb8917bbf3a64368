-- Contacts' first and last names and tags are stored in Unicode NFC since 3fa1225; those stored
-- before keep the form they were given in, and a decomposed one (José with a combining accent, as a
-- Mac or an export writes it) was then not found by its own value, nor removed as a tag, and adding
-- the tag as typed gave the contact the same tag twice. The migration's backfill step rewrites
-- them as on SQLite (contacts/store.ts, normalizePostgresNamesAndTags): PostgreSQL's normalize()
-- could do the names, not the tags inside the properties' JSON text. The trigger copies the names
-- to the tag and account rows, full_name (the name search's) follows them. The script itself
-- changes nothing.
SELECT 1;
