-- 0001 was changed after its release to carry SQLite 0014 (contact_tags with its contact's sort
-- keys, kept by contact_tags_sort_keys), and 0016 builds on that. A database that a crm of the
-- time filled (copy-to-postgres, 2026-11-23) has contact_tags without them, and 0016 stopped every
-- start on it: "trigger contact_tags_sort_keys does not exist". This gives such a database what
-- 0001 makes now, before 0015 and 0016 run; a database whose contact_tags has its sort keys (any
-- other, including one that ran 0016 before this) gets nothing.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'contact_tags' AND column_name = 'created_at') THEN
    RETURN;
  END IF;
  ALTER TABLE contact_tags
    ADD COLUMN created_at bigint,
    ADD COLUMN updated_at bigint,
    ADD COLUMN first_name citext,
    ADD COLUMN last_name  citext,
    ADD COLUMN email      text;
  UPDATE contact_tags t SET created_at = c.created_at, updated_at = c.updated_at, first_name = c.first_name, last_name = c.last_name, email = c.email
  FROM contacts c WHERE c.id = t.contact_id;
  ALTER TABLE contact_tags ALTER COLUMN created_at SET NOT NULL, ALTER COLUMN updated_at SET NOT NULL;

  DROP INDEX contact_tags_tag;
  CREATE INDEX contact_tags_created ON contact_tags (tag, created_at, contact_id);
  CREATE INDEX contact_tags_updated ON contact_tags (tag, updated_at, contact_id);
  CREATE INDEX contact_tags_first_name ON contact_tags (tag, first_name, contact_id);
  CREATE INDEX contact_tags_last_name ON contact_tags (tag, last_name, contact_id);
  CREATE INDEX contact_tags_email ON contact_tags (tag, email, contact_id);

  CREATE FUNCTION contact_tags_sort_keys() RETURNS trigger LANGUAGE plpgsql AS $body$
  BEGIN
    IF OLD.updated_at <> NEW.updated_at
       OR OLD.first_name::text IS DISTINCT FROM NEW.first_name::text
       OR OLD.last_name::text IS DISTINCT FROM NEW.last_name::text
       OR OLD.email IS DISTINCT FROM NEW.email THEN
      UPDATE contact_tags SET updated_at = NEW.updated_at, first_name = NEW.first_name, last_name = NEW.last_name, email = NEW.email
      WHERE contact_id = NEW.id;
    END IF;
    RETURN NULL;
  END
  $body$;
  CREATE TRIGGER contact_tags_sort_keys AFTER UPDATE OF updated_at, first_name, last_name, email ON contacts
    FOR EACH ROW EXECUTE FUNCTION contact_tags_sort_keys();
END
$$;
