-- The contact events holding an email, by that email: the console's Find finds a deleted contact
-- by its email ("forget me", "where did my contact go?"), when no contact row holds it any more,
-- through the contact.created and contact.updated events about it, whose payloads keep it. An
-- index on the payload's email, not a column: an erasure replaces those payloads with a marker
-- that holds no email, so an erased contact drops out of it, and is found by its old email no more.
-- Emails are stored lowercased with their domain in ASCII (asciiEmail): the payload's compares
-- as the contacts' own. PostgreSQL: the same index, on (payload::jsonb -> 'data') ->> 'email'.
CREATE INDEX events_contact_email ON events (json_extract(payload, '$.data.email')) WHERE type IN ('contact.created', 'contact.updated');
