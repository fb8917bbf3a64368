-- Who made each API token and webhook subscription, so that an operator removed for cause can be
-- told apart from the credentials and receivers they left behind. created_by is the operator's id
-- (opr_...: a console form), the API token's id (tok_...: a subscription created through the API)
-- or 'cli' (`crm token create`); created_by_email is the operator's email at the time, kept since a
-- removed operator's row is deleted and their id then names nobody. Both null: made before this
-- migration, unknown. Columns without a default rewrite no row. No index: tokens and subscriptions
-- are few (MAX_SUBSCRIPTIONS) and read whole by the pages that show their makers.
ALTER TABLE api_tokens ADD COLUMN created_by TEXT;
ALTER TABLE api_tokens ADD COLUMN created_by_email TEXT;
ALTER TABLE webhook_subscriptions ADD COLUMN created_by TEXT;
ALTER TABLE webhook_subscriptions ADD COLUMN created_by_email TEXT;
