-- A recovery (POST .../recover) gives each failed delivery of its window one more attempt: if that
-- attempt fails too, the delivery is failed again. Put back to pending, a delivery looked like any
-- other and went on through the rest of the retry schedule (up to 7 attempts over 33 hours for one
-- ended early by a 410 or an auto-disable). recovered_at marks a delivery put back by a recovery
-- until its next scheduled attempt is recorded.
ALTER TABLE webhook_deliveries ADD COLUMN recovered_at bigint;
