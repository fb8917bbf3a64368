-- Several instances share the delivery work. A subscription's max_rate holds across all of them
-- through the earliest time its next attempt may be sent, kept here. PostgreSQL only: the one
-- SQLite process keeps the same time in memory.
CREATE TABLE webhook_send_pacing (
  subscription_id text PRIMARY KEY REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
  next_send_at    bigint NOT NULL   -- Unix ms; while an attempt is claimed and not yet sent, its lease's end
);
