-- Foundation: API tokens, users, accounts, contacts with relations, idempotency keys, event outbox.
-- Times are integer Unix milliseconds; ids are type-prefixed, time-sortable strings.

CREATE TABLE api_tokens (
  id           TEXT PRIMARY KEY,
  name         TEXT NOT NULL,
  prefix       TEXT NOT NULL,            -- first characters of the token, shown in lists and used for lookup
  token_hash   BLOB NOT NULL,            -- SHA-256 of the whole token; the token itself is never stored
  created_at   INTEGER NOT NULL,
  last_used_at INTEGER,
  revoked_at   INTEGER
);
CREATE INDEX api_tokens_prefix ON api_tokens (prefix);

CREATE TABLE users (
  id         TEXT PRIMARY KEY,
  name       TEXT NOT NULL,
  email      TEXT NOT NULL UNIQUE,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);

CREATE TABLE accounts (
  id         TEXT PRIMARY KEY,
  name       TEXT NOT NULL COLLATE NOCASE,
  domain     TEXT COLLATE NOCASE,
  properties TEXT NOT NULL DEFAULT '{}',
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE INDEX accounts_name ON accounts (name, id);
CREATE INDEX accounts_domain ON accounts (domain, id);

CREATE TABLE contacts (
  id               TEXT PRIMARY KEY,
  first_name       TEXT COLLATE NOCASE,
  last_name        TEXT COLLATE NOCASE,
  email            TEXT,                 -- stored lowercased
  phone            TEXT,
  assigned_user_id TEXT REFERENCES users (id),
  properties       TEXT NOT NULL DEFAULT '{}', -- tags, custom_fields, consent and any further properties, as given
  created_at       INTEGER NOT NULL,
  updated_at       INTEGER NOT NULL
);
CREATE INDEX contacts_created ON contacts (created_at, id);
CREATE INDEX contacts_updated ON contacts (updated_at, id);
CREATE INDEX contacts_first_name ON contacts (first_name, id);
CREATE INDEX contacts_last_name ON contacts (last_name, id);
CREATE INDEX contacts_email ON contacts (email, id);
CREATE INDEX contacts_assigned_user ON contacts (assigned_user_id);

-- Case-insensitive substring search on full_name through trigram FTS (LIKE '%x%' uses it).
CREATE VIRTUAL TABLE contacts_full_name USING fts5 (full_name, tokenize = 'trigram');
CREATE TRIGGER contacts_full_name_insert AFTER INSERT ON contacts BEGIN
  INSERT INTO contacts_full_name (rowid, full_name)
  VALUES (new.rowid, trim(coalesce(new.first_name, '') || ' ' || coalesce(new.last_name, '')));
END;
CREATE TRIGGER contacts_full_name_update AFTER UPDATE OF first_name, last_name ON contacts BEGIN
  UPDATE contacts_full_name
  SET full_name = trim(coalesce(new.first_name, '') || ' ' || coalesce(new.last_name, ''))
  WHERE rowid = new.rowid;
END;
CREATE TRIGGER contacts_full_name_delete AFTER DELETE ON contacts BEGIN
  DELETE FROM contacts_full_name WHERE rowid = old.rowid;
END;

-- Row count kept by triggers so an unfiltered list does not count a million rows per request.
CREATE TABLE row_counts (table_name TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO row_counts VALUES ('contacts', 0);
CREATE TRIGGER contacts_count_insert AFTER INSERT ON contacts BEGIN
  UPDATE row_counts SET n = n + 1 WHERE table_name = 'contacts';
END;
CREATE TRIGGER contacts_count_delete AFTER DELETE ON contacts BEGIN
  UPDATE row_counts SET n = n - 1 WHERE table_name = 'contacts';
END;

CREATE TABLE contact_accounts (
  contact_id TEXT NOT NULL REFERENCES contacts (id) ON DELETE CASCADE,
  account_id TEXT NOT NULL REFERENCES accounts (id),
  position   INTEGER NOT NULL,
  PRIMARY KEY (contact_id, account_id)
) WITHOUT ROWID;
CREATE INDEX contact_accounts_account ON contact_accounts (account_id);

CREATE TABLE contact_assigned_users (
  contact_id TEXT NOT NULL REFERENCES contacts (id) ON DELETE CASCADE,
  user_id    TEXT NOT NULL REFERENCES users (id),
  position   INTEGER NOT NULL,
  PRIMARY KEY (contact_id, user_id)
) WITHOUT ROWID;
CREATE INDEX contact_assigned_users_user ON contact_assigned_users (user_id);

-- Finished idempotent POSTs, replayed for 24 hours. Written in the same transaction as the change.
CREATE TABLE idempotency_keys (
  token_id      TEXT NOT NULL,
  method        TEXT NOT NULL,
  path          TEXT NOT NULL,
  idem_key      TEXT NOT NULL,
  fingerprint   BLOB NOT NULL,
  status        INTEGER NOT NULL,
  response_body TEXT NOT NULL,
  created_at    INTEGER NOT NULL,
  PRIMARY KEY (token_id, method, path, idem_key)
) WITHOUT ROWID;
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- Transactional outbox: every change writes its event in the same transaction.
CREATE TABLE events (
  id         TEXT PRIMARY KEY,
  type       TEXT NOT NULL,
  payload    TEXT NOT NULL,              -- the JSON body sent to receivers: {type, timestamp, data}
  created_at INTEGER NOT NULL
);
CREATE INDEX events_created ON events (created_at);
