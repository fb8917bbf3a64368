-- The PostgreSQL twin of SQLite migration 0044: the attempts of a header set found by index, so
-- forgetting the unused ones after pruning probes each set rather than reading every attempt.
CREATE INDEX webhook_delivery_attempts_request_header_set ON webhook_delivery_attempts (request_header_set);
CREATE INDEX webhook_delivery_attempts_response_header_set ON webhook_delivery_attempts (response_header_set);
