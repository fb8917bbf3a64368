-- Three repairs of the released schema, the third the twin of SQLite's 0020:
--
-- 1. A list sorted by a nullable key (a contact's first_name, last_name or email, an account's
--    domain) asks for NULLs first ascending and last descending, as SQLite sorts them. The indexes
--    kept PostgreSQL's default (NULLs last ascending), so neither scan direction gave that order:
--    every such page, cursor pages included, sorted the whole table (0.9 s for page 2,000 of
--    300,000 contacts, against 0.2 ms through an index in that order).
DROP INDEX contacts_first_name;
DROP INDEX contacts_last_name;
DROP INDEX contacts_email;
CREATE INDEX contacts_first_name ON contacts (first_name NULLS FIRST, id);
CREATE INDEX contacts_last_name ON contacts (last_name NULLS FIRST, id);
CREATE INDEX contacts_email ON contacts (email NULLS FIRST, id);

DROP INDEX contact_tags_first_name;
DROP INDEX contact_tags_last_name;
DROP INDEX contact_tags_email;
CREATE INDEX contact_tags_first_name ON contact_tags (tag, first_name NULLS FIRST, contact_id);
CREATE INDEX contact_tags_last_name ON contact_tags (tag, last_name NULLS FIRST, contact_id);
CREATE INDEX contact_tags_email ON contact_tags (tag, email NULLS FIRST, contact_id);

DROP INDEX contact_accounts_first_name;
DROP INDEX contact_accounts_last_name;
DROP INDEX contact_accounts_email;
CREATE INDEX contact_accounts_first_name ON contact_accounts (account_id, first_name NULLS FIRST, contact_id);
CREATE INDEX contact_accounts_last_name ON contact_accounts (account_id, last_name NULLS FIRST, contact_id);
CREATE INDEX contact_accounts_email ON contact_accounts (account_id, email NULLS FIRST, contact_id);

DROP INDEX contacts_assigned_user_first_name;
DROP INDEX contacts_assigned_user_last_name;
DROP INDEX contacts_assigned_user_email;
CREATE INDEX contacts_assigned_user_first_name ON contacts (assigned_user_id, first_name NULLS FIRST, id) WHERE assigned_user_id IS NOT NULL;
CREATE INDEX contacts_assigned_user_last_name ON contacts (assigned_user_id, last_name NULLS FIRST, id) WHERE assigned_user_id IS NOT NULL;
CREATE INDEX contacts_assigned_user_email ON contacts (assigned_user_id, email NULLS FIRST, id) WHERE assigned_user_id IS NOT NULL;

DROP INDEX accounts_domain;
CREATE INDEX accounts_domain ON accounts (domain NULLS FIRST, id);

-- 2. The contacts per tag and per account were counted by a trigger on each row, which updated
--    one counter row once per linked row. Within one transaction each update adds a version to
--    that row's chain, and the next one walks it: unlinking an account from 20,000 contacts took
--    10.7 s, and from 75,000 about 85 s, holding the write lock. A trigger per statement counts
--    the statement's rows by value and updates each counter once.
DROP TRIGGER contact_tags_count ON contact_tags;
DROP TRIGGER contact_accounts_count ON contact_accounts;
DROP FUNCTION relation_count();

CREATE FUNCTION relation_count_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO contact_filter_counts (filter, value, n)
  SELECT TG_ARGV[0], to_jsonb(r) ->> TG_ARGV[1], count(*) FROM added r GROUP BY 2
  ON CONFLICT (filter, value) DO UPDATE SET n = contact_filter_counts.n + EXCLUDED.n;
  RETURN NULL;
END
$$;

CREATE FUNCTION relation_count_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE contact_filter_counts f SET n = f.n - gone.n
  FROM (SELECT to_jsonb(r) ->> TG_ARGV[1] AS value, count(*) AS n FROM removed r GROUP BY 1) gone
  WHERE f.filter = TG_ARGV[0] AND f.value = gone.value;
  DELETE FROM contact_filter_counts f USING (SELECT DISTINCT to_jsonb(r) ->> TG_ARGV[1] AS value FROM removed r) gone
  WHERE f.filter = TG_ARGV[0] AND f.value = gone.value AND f.n = 0;
  RETURN NULL;
END
$$;

CREATE TRIGGER contact_tags_added AFTER INSERT ON contact_tags
  REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION relation_count_added('tag', 'tag');
CREATE TRIGGER contact_tags_removed AFTER DELETE ON contact_tags
  REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION relation_count_removed('tag', 'tag');
CREATE TRIGGER contact_accounts_added AFTER INSERT ON contact_accounts
  REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION relation_count_added('account', 'account_id');
CREATE TRIGGER contact_accounts_removed AFTER DELETE ON contact_accounts
  REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION relation_count_removed('account', 'account_id');

-- 3. The counts kept a row for every tag, account and assigned user ever used, at 0 once no
--    contact had it: a client that tags contacts with ever new values and deletes them grew the
--    table without bound. A count that falls to 0 is deleted; a missing row reads as 0.
DELETE FROM contact_filter_counts WHERE n = 0;

CREATE FUNCTION uncount_filter_value(filter_name text, filter_value text) RETURNS void LANGUAGE sql AS $$
  DELETE FROM contact_filter_counts WHERE filter = filter_name AND value = filter_value AND n = 1;
  UPDATE contact_filter_counts SET n = n - 1 WHERE filter = filter_name AND value = filter_value;
$$;

CREATE OR REPLACE FUNCTION contacts_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    UPDATE row_counts SET n = n + 1 WHERE table_name = 'contacts';
    IF NEW.assigned_user_id IS NOT NULL THEN PERFORM count_filter_value('assigned_user', NEW.assigned_user_id); END IF;
  ELSIF TG_OP = 'DELETE' THEN
    UPDATE row_counts SET n = n - 1 WHERE table_name = 'contacts';
    IF OLD.assigned_user_id IS NOT NULL THEN PERFORM uncount_filter_value('assigned_user', OLD.assigned_user_id); END IF;
  ELSIF OLD.assigned_user_id IS DISTINCT FROM NEW.assigned_user_id THEN
    IF OLD.assigned_user_id IS NOT NULL THEN PERFORM uncount_filter_value('assigned_user', OLD.assigned_user_id); END IF;
    IF NEW.assigned_user_id IS NOT NULL THEN PERFORM count_filter_value('assigned_user', NEW.assigned_user_id); END IF;
  END IF;
  RETURN NULL;
END
$$;
