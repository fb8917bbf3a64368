-- Who made each change that makes an event or changes a subscription's state, so "who did this?"
-- has an answer whatever made it: an API token, an operator on the console, a command (named:
-- `crm user delete`), or the delivery loop. Each is the JSON of the maker as the console reads it
-- (storedMaker): {"kind":"operator","id":"opr_...","email":"..."} keeps the operator's email, since
-- a removed operator's row is deleted and their id then names nobody (as 0047's created_by_email).
-- events.made_by: the event's maker, written by the event's own insert (one more value, no
-- statement more); token_id (0050) stays as it was. events.erased_by: who erased its payload.
-- webhook_subscriptions.paused_by: who paused it (null while not paused); disabled_by: who disabled
-- it (null while active); updated_by: who made the change updated_at dates. All null for what was
-- recorded before this migration: unknown, but an event's token_id still names its token. Columns
-- without a default rewrite no row; no index: each is read with its row, never searched by.
ALTER TABLE events ADD COLUMN made_by TEXT;
ALTER TABLE events ADD COLUMN erased_by TEXT;
ALTER TABLE webhook_subscriptions ADD COLUMN paused_by TEXT;
ALTER TABLE webhook_subscriptions ADD COLUMN disabled_by TEXT;
ALTER TABLE webhook_subscriptions ADD COLUMN updated_by TEXT;
