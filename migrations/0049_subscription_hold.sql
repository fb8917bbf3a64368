-- held_until: until when a receiver's 429 or 503 with Retry-After holds its subscription (at most an
-- hour after the answer): the claims of every instance skip it, but for a test ping, and its
-- deliveries' own due times stay as they were. Null: never held; a time passed holds nothing. No
-- index: subscriptions are few (MAX_SUBSCRIPTIONS) and the claim reads them whole.
ALTER TABLE webhook_subscriptions ADD COLUMN held_until INTEGER;
