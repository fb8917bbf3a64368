-- Limits: per-token rate limits set with `token create --rate`. NULL keeps the server's defaults
-- (--rate-read-per-second and friends), so changing a default reaches every token without one.
ALTER TABLE api_tokens ADD COLUMN rate_read_per_second REAL;
ALTER TABLE api_tokens ADD COLUMN rate_read_burst INTEGER;
ALTER TABLE api_tokens ADD COLUMN rate_write_per_second REAL;
ALTER TABLE api_tokens ADD COLUMN rate_write_burst INTEGER;
