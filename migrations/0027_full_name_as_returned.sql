-- The name search reads the full_name the API returns (contacts/service.ts, fullName): first and
-- last name joined by a space when both are there, else the one that is. 0001 trimmed the join,
-- which took the names' own outer spaces with it: `full_name= Lead` missed " Lead Smith".
DROP TRIGGER contacts_full_name_update;
CREATE TRIGGER contacts_full_name_update AFTER UPDATE OF first_name, last_name ON contacts BEGIN
  UPDATE contacts_full_name
  SET full_name = CASE WHEN new.first_name <> '' AND new.last_name <> '' THEN new.first_name || ' ' || new.last_name ELSE coalesce(nullif(new.first_name, ''), new.last_name, '') END
  WHERE rowid = new.rowid;
END;

-- Only a name with an outer space was indexed differently; contacts still waiting for the index
-- (0017) get the new text when they reach it.
UPDATE contacts_full_name
SET full_name = (
  SELECT CASE WHEN c.first_name <> '' AND c.last_name <> '' THEN c.first_name || ' ' || c.last_name ELSE coalesce(nullif(c.first_name, ''), c.last_name, '') END
  FROM contacts c WHERE c.rowid = contacts_full_name.rowid
)
WHERE rowid IN (SELECT rowid FROM contacts WHERE first_name <> trim(first_name) OR last_name <> trim(last_name));
