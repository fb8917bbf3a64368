-- The contact events holding an email, by that email: SQLite's migration 0052 (its comment says
-- why). An expression index, rewriting no row; an erased payload holds no email and leaves it.
CREATE INDEX events_contact_email ON events (((payload::jsonb -> 'data') ->> 'email')) WHERE type IN ('contact.created', 'contact.updated');
