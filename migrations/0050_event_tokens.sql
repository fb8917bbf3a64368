-- The id of the API token whose request made an event (tok_..., never the token), so "which
-- integration deleted this contact?" has an answer: the request id alone (0041) names no sender.
-- Null for an event no API request made (a console form's, the command line's, the delivery
-- loop's) and for every event recorded before this migration. Written by the event's own insert:
-- the change's write costs no statement more. A column without a default rewrites no row; no
-- index: it is read with its event, never searched by.
ALTER TABLE events ADD COLUMN token_id TEXT;
