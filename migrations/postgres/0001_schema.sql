-- The PostgreSQL schema: what SQLite migrations 0001..0014 produce, table for table, with the same
-- table, column and index names, so the same portable SQL (server/db/sql.ts) runs on both.
-- Instants are bigint Unix milliseconds, JSON is text, blobs are bytea, booleans integer 0/1.
-- SQLite's `COLLATE NOCASE` columns are citext: they compare and sort case-insensitively (by
-- lower(), which folds every script, where NOCASE folds ASCII only).

CREATE EXTENSION IF NOT EXISTS citext;
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE api_tokens (
  id                    text PRIMARY KEY,
  name                  text NOT NULL,
  prefix                text NOT NULL,     -- first characters of the token, shown in lists and used for lookup
  token_hash            bytea NOT NULL,    -- SHA-256 of the whole token; the token itself is never stored
  created_at            bigint NOT NULL,
  last_used_at          bigint,
  revoked_at            bigint,
  rate_read_per_second  double precision,
  rate_read_burst       bigint,
  rate_write_per_second double precision,
  rate_write_burst      bigint
);
CREATE INDEX api_tokens_prefix ON api_tokens (prefix);

CREATE TABLE users (
  id         text PRIMARY KEY,
  name       text NOT NULL,
  email      text NOT NULL UNIQUE,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL
);

CREATE TABLE accounts (
  id         text PRIMARY KEY,
  name       citext NOT NULL,
  domain     citext,
  properties text NOT NULL DEFAULT '{}',
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  name_key   text NOT NULL DEFAULT '',
  version    bigint NOT NULL DEFAULT 1
);
CREATE INDEX accounts_created ON accounts (created_at, id);
CREATE INDEX accounts_updated ON accounts (updated_at, id);
CREATE INDEX accounts_domain ON accounts (domain, id);
CREATE INDEX accounts_name_key ON accounts (name_key, id);

CREATE TABLE contacts (
  id                text PRIMARY KEY,
  first_name        citext,
  last_name         citext,
  email             text,                  -- stored lowercased
  phone             text,
  assigned_user_id  text REFERENCES users (id),
  properties        text NOT NULL DEFAULT '{}', -- tags, custom_fields, consent and any further properties, as given
  created_at        bigint NOT NULL,
  updated_at        bigint NOT NULL,
  account_ids       text NOT NULL DEFAULT '[]',
  assigned_user_ids text NOT NULL DEFAULT '[]',
  version           bigint NOT NULL DEFAULT 1,
  external_id       text,
  -- What SQLite keeps in its FTS5 trigram table contacts_full_name; searched with
  -- `full_name ILIKE '%needle%'` through the trigram index below.
  full_name         text GENERATED ALWAYS AS (trim(coalesce(first_name::text, '') || ' ' || coalesce(last_name::text, ''))) STORED
);
CREATE INDEX contacts_created ON contacts (created_at, id);
CREATE INDEX contacts_updated ON contacts (updated_at, id);
CREATE INDEX contacts_first_name ON contacts (first_name, id);
CREATE INDEX contacts_last_name ON contacts (last_name, id);
CREATE INDEX contacts_email ON contacts (email, id);
CREATE INDEX contacts_email_created ON contacts (email, created_at, id);
CREATE INDEX contacts_assigned_user ON contacts (assigned_user_id);
CREATE UNIQUE INDEX contacts_external_id ON contacts (external_id) WHERE external_id IS NOT NULL;
CREATE INDEX contacts_full_name ON contacts USING gin (full_name gin_trgm_ops);

-- Each tag row carries its contact's sort keys (kept by contact_tags_sort_keys below), so one
-- index per documented sort walks a tag's contacts in the page's order.
CREATE TABLE contact_tags (
  contact_id text NOT NULL REFERENCES contacts (id) ON DELETE CASCADE,
  tag        text NOT NULL,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  first_name citext,
  last_name  citext,
  email      text,
  PRIMARY KEY (contact_id, tag)
);
CREATE INDEX contact_tags_created ON contact_tags (tag, created_at, contact_id);
CREATE INDEX contact_tags_updated ON contact_tags (tag, updated_at, contact_id);
CREATE INDEX contact_tags_first_name ON contact_tags (tag, first_name, contact_id);
CREATE INDEX contact_tags_last_name ON contact_tags (tag, last_name, contact_id);
CREATE INDEX contact_tags_email ON contact_tags (tag, email, contact_id);

CREATE TABLE contact_accounts (
  contact_id text NOT NULL REFERENCES contacts (id) ON DELETE CASCADE,
  account_id text NOT NULL REFERENCES accounts (id),
  position   integer NOT NULL,
  PRIMARY KEY (contact_id, account_id)
);
CREATE INDEX contact_accounts_account ON contact_accounts (account_id);

CREATE TABLE contact_assigned_users (
  contact_id text NOT NULL REFERENCES contacts (id) ON DELETE CASCADE,
  user_id    text NOT NULL REFERENCES users (id),
  position   integer NOT NULL,
  PRIMARY KEY (contact_id, user_id)
);
CREATE INDEX contact_assigned_users_user ON contact_assigned_users (user_id);

-- Contacts per tag, account and assigned user, kept by the triggers below, as on SQLite.
CREATE TABLE contact_filter_counts (
  filter text NOT NULL,                   -- 'tag', 'account' or 'assigned_user'
  value  text NOT NULL,
  n      bigint NOT NULL,
  PRIMARY KEY (filter, value)
);

CREATE TABLE row_counts (
  table_name text PRIMARY KEY,
  n          bigint NOT NULL
);
INSERT INTO row_counts VALUES ('contacts', 0);

CREATE TABLE idempotency_keys (
  token_id      text NOT NULL,
  method        text NOT NULL,
  path          text NOT NULL,
  idem_key      text NOT NULL,
  fingerprint   bytea NOT NULL,
  status        integer NOT NULL,
  response_body text NOT NULL,
  created_at    bigint NOT NULL,
  PRIMARY KEY (token_id, method, path, idem_key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

CREATE TABLE events (
  id         text PRIMARY KEY,
  type       text NOT NULL,
  payload    text NOT NULL,               -- the JSON body sent to receivers: {type, timestamp, data}
  created_at bigint NOT NULL
);
CREATE INDEX events_created ON events (created_at);

CREATE TABLE tombstones (
  resource   text NOT NULL,               -- 'contact' or 'account'
  id         text NOT NULL,
  deleted_at bigint NOT NULL,
  PRIMARY KEY (resource, id)
);
CREATE INDEX tombstones_deleted ON tombstones (resource, deleted_at, id);

CREATE TABLE webhook_subscriptions (
  id                          text PRIMARY KEY,
  target_url                  text NOT NULL,
  description                 text,
  events                      text NOT NULL, -- JSON array of event kinds, as given
  secret                      text NOT NULL, -- the signing secret, as the service stores it
  status                      text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
  disabled_at                 bigint,
  disabled_reason             text,
  created_at                  bigint NOT NULL,
  updated_at                  bigint NOT NULL,
  previous_secret             text,
  previous_secret_expires_at  bigint,
  secret_rotated_at           bigint,
  paused_at                   bigint,
  max_rate                    integer CHECK (max_rate IS NULL OR max_rate BETWEEN 1 AND 1000),
  failing_since               bigint
);
CREATE INDEX webhook_subscriptions_created ON webhook_subscriptions (created_at, id);

CREATE TABLE webhook_subscription_events (
  event_type      text NOT NULL,
  subscription_id text NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
  PRIMARY KEY (event_type, subscription_id)
);
CREATE INDEX webhook_subscription_events_subscription ON webhook_subscription_events (subscription_id);

CREATE TABLE subscription_rotations (
  new_subscription_id text PRIMARY KEY,
  old_subscription_id text NOT NULL,
  old_target_url      text NOT NULL,
  old_description     text NOT NULL,
  test_delivery_id    text,               -- the latest webhook.ping sent to the new subscription
  created_at          bigint NOT NULL,
  updated_at          bigint NOT NULL,
  completed_at        bigint              -- set when the old subscription was deleted
);
CREATE INDEX subscription_rotations_old ON subscription_rotations (old_subscription_id);

CREATE TABLE webhook_deliveries (
  id                   text PRIMARY KEY,  -- sent as webhook-id on every attempt
  event_id             text NOT NULL REFERENCES events (id),
  event_type           text NOT NULL,
  subscription_id      text NOT NULL,     -- no foreign key: the history outlives a deleted subscription
  target_url           text NOT NULL,
  status               text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'failed')),
  attempts             integer NOT NULL DEFAULT 0,
  next_attempt_at      bigint,            -- while pending: when the next attempt is due
  locked_until         bigint,            -- lease of an attempt in progress; a crashed instance's lease expires
  last_response_status integer,
  last_error           text,
  created_at           bigint NOT NULL,
  updated_at           bigint NOT NULL
);
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at, id);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_due_by_subscription ON webhook_deliveries (subscription_id, next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (locked_until) WHERE locked_until IS NOT NULL;
CREATE INDEX webhook_deliveries_subscription ON webhook_deliveries (subscription_id, created_at, id);
CREATE INDEX webhook_deliveries_subscription_status ON webhook_deliveries (subscription_id, status, created_at);
CREATE INDEX webhook_deliveries_unfinished ON webhook_deliveries (status, created_at, id) WHERE status <> 'succeeded';

-- Header sets are stored once, however many attempts share them. Ids come from the identity
-- (SQLite's rowid); INSERT ... RETURNING id reads the new one on both backends.
CREATE TABLE webhook_header_sets (
  id      bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  headers text NOT NULL UNIQUE            -- JSON object, as the service wrote it
);

CREATE TABLE webhook_delivery_attempts (
  delivery_id         text NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
  attempt             integer NOT NULL,
  triggered_by        text NOT NULL CHECK (triggered_by IN ('scheduled', 'manual')),
  started_at          bigint NOT NULL,
  duration_ms         double precision NOT NULL,
  request_header_set  bigint NOT NULL,    -- webhook_header_sets.id: the headers every attempt sends alike
  signature           text NOT NULL,      -- webhook-signature of this attempt
  response_status     integer,
  response_header_set bigint NOT NULL,    -- webhook_header_sets.id: the response headers of interest
  response_body       text,               -- the first --delivery-response-body-bytes (at most 4 KiB)
  error               text,               -- network error, timeout or address refusal, in words
  PRIMARY KEY (delivery_id, attempt)
);

CREATE TABLE webhook_attempt_stats (
  subscription_id text NOT NULL,
  hour            bigint NOT NULL,        -- Unix milliseconds at the start of the hour
  succeeded       bigint NOT NULL,
  failed          bigint NOT NULL,
  latency_buckets text NOT NULL,
  PRIMARY KEY (subscription_id, hour)
);

CREATE TABLE operators (
  id            text PRIMARY KEY,
  email         text NOT NULL UNIQUE,     -- stored lowercased
  password_hash text NOT NULL,            -- Bun.password (argon2id, PHC string)
  created_at    bigint NOT NULL,
  updated_at    bigint NOT NULL
);

CREATE TABLE operator_sessions (
  id_hash      bytea PRIMARY KEY,
  operator_id  text NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
  created_at   bigint NOT NULL,
  last_seen_at bigint NOT NULL
);
CREATE INDEX operator_sessions_operator ON operator_sessions (operator_id);
CREATE INDEX operator_sessions_last_seen ON operator_sessions (last_seen_at);

CREATE TABLE operator_setup_codes (
  code_hash  bytea PRIMARY KEY,
  created_at bigint NOT NULL,
  expires_at bigint NOT NULL
);

CREATE TABLE login_failures (
  scope           text NOT NULL,
  subject         text NOT NULL,
  failures        integer NOT NULL,
  window_start_at bigint NOT NULL,
  last_failure_at bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (scope, subject)
);

-- The counting triggers of SQLite, as PL/pgSQL: row_counts holds the number of contacts and
-- contact_filter_counts the contacts per tag, account and assigned user.

CREATE FUNCTION count_filter_value(filter_name text, filter_value text) RETURNS void LANGUAGE sql AS $$
  INSERT INTO contact_filter_counts (filter, value, n) VALUES (filter_name, filter_value, 1)
  ON CONFLICT (filter, value) DO UPDATE SET n = contact_filter_counts.n + 1
$$;

CREATE FUNCTION contacts_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    UPDATE row_counts SET n = n + 1 WHERE table_name = 'contacts';
    IF NEW.assigned_user_id IS NOT NULL THEN PERFORM count_filter_value('assigned_user', NEW.assigned_user_id); END IF;
  ELSIF TG_OP = 'DELETE' THEN
    UPDATE row_counts SET n = n - 1 WHERE table_name = 'contacts';
    IF OLD.assigned_user_id IS NOT NULL THEN
      UPDATE contact_filter_counts SET n = n - 1 WHERE filter = 'assigned_user' AND value = OLD.assigned_user_id;
    END IF;
  ELSIF OLD.assigned_user_id IS DISTINCT FROM NEW.assigned_user_id THEN
    UPDATE contact_filter_counts SET n = n - 1 WHERE filter = 'assigned_user' AND value = OLD.assigned_user_id;
    IF NEW.assigned_user_id IS NOT NULL THEN PERFORM count_filter_value('assigned_user', NEW.assigned_user_id); END IF;
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER contacts_count AFTER INSERT OR DELETE OR UPDATE OF assigned_user_id ON contacts
  FOR EACH ROW EXECUTE FUNCTION contacts_count();

-- One function keeps the counts of both relation tables; the trigger names the filter and the column.
CREATE FUNCTION relation_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    PERFORM count_filter_value(TG_ARGV[0], to_jsonb(NEW) ->> TG_ARGV[1]);
  ELSE
    UPDATE contact_filter_counts SET n = n - 1 WHERE filter = TG_ARGV[0] AND value = to_jsonb(OLD) ->> TG_ARGV[1];
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER contact_tags_count AFTER INSERT OR DELETE ON contact_tags
  FOR EACH ROW EXECUTE FUNCTION relation_count('tag', 'tag');
CREATE TRIGGER contact_accounts_count AFTER INSERT OR DELETE ON contact_accounts
  FOR EACH ROW EXECUTE FUNCTION relation_count('account', 'account_id');

-- A contact's tag rows follow its sort keys. SQLite copies each changed key in a trigger of its
-- own; here one UPDATE copies them all, since PostgreSQL writes a whole new row version anyway.
-- Names compare as text: a change of case alone is a change, so the copy keeps the spelling.
CREATE FUNCTION contact_tags_sort_keys() RETURNS trigger LANGUAGE plpgsql AS $$
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
$$;
CREATE TRIGGER contact_tags_sort_keys AFTER UPDATE OF updated_at, first_name, last_name, email ON contacts
  FOR EACH ROW EXECUTE FUNCTION contact_tags_sort_keys();
