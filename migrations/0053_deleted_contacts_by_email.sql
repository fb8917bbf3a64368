-- A deleted contact's email, kept on its tombstone: the console's Find finds a deleted contact by
-- it ("forget me", "where did my contact go?"), when no contact row holds it any more. Written by
-- the delete, which writes the tombstone anyway, not by every create and update (an index on the
-- events' payloads cost POST /contacts an entry each), and cleared by the erasure of the contact's
-- events: an erased contact is found by its old email no more. Null for an account's and a user's.
-- Kept only as long as the contact's events keep it: the hourly retention run clears it once the
-- delete is older than --delivery-retention-days, so a deleted person is gone from the database
-- after that retention, not after the tombstone's (longer) one.
ALTER TABLE tombstones ADD COLUMN email TEXT;

-- A contact deleted before this migration gets the email its newest contact.created or
-- contact.updated event held, the one it had when deleted, as the delete writes it (lowercased,
-- its domain in ASCII). None when those events were pruned by the delivery retention, or erased:
-- an erasure goes oldest first, so a newest one erased means all were.
UPDATE tombstones SET email = (
  SELECT json_extract(e.payload, '$.data.email') FROM events e
  WHERE e.subject_id = tombstones.id AND e.type IN ('contact.created', 'contact.updated')
  ORDER BY e.created_at DESC, e.id DESC LIMIT 1
) WHERE resource = 'contact';

CREATE INDEX tombstones_email ON tombstones (email) WHERE email IS NOT NULL;
-- The retention run finds the emails to clear by deletion time, reading only those.
CREATE INDEX tombstones_email_deleted ON tombstones (deleted_at) WHERE email IS NOT NULL;
