-- After pruning, a header set is forgotten once no attempt refers to it. Without these indexes the
-- check read every attempt, in one write: 0.6 to 1 s on SQLite at a million attempts, every hour
-- the retention job pruned anything. With them each header set is two index probes, a batch a write.
CREATE INDEX webhook_delivery_attempts_request_header_set ON webhook_delivery_attempts (request_header_set);
CREATE INDEX webhook_delivery_attempts_response_header_set ON webhook_delivery_attempts (response_header_set);
