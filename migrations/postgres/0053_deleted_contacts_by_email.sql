-- A deleted contact's email, kept on its tombstone: SQLite's migration 0053 (its comments say why
-- and what a contact deleted before it gets, and how long the email is kept).
ALTER TABLE tombstones ADD COLUMN email text;

UPDATE tombstones t SET email = (
  SELECT (e.payload::jsonb -> 'data') ->> 'email' FROM events e
  WHERE e.subject_id = t.id AND e.type IN ('contact.created', 'contact.updated')
  ORDER BY e.created_at DESC, e.id DESC LIMIT 1
) WHERE t.resource = 'contact';

CREATE INDEX tombstones_email ON tombstones (email) WHERE email IS NOT NULL;
CREATE INDEX tombstones_email_deleted ON tombstones (deleted_at) WHERE email IS NOT NULL;
