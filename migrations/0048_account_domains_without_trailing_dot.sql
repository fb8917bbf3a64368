-- An account's domain is a host name since 2026-11-29, stored without a trailing dot: engines.example.
-- is the DNS name engines.example, yet was stored as another domain, so the domain filter and a
-- batch upsert or crm import of engines.example missed it (the upsert made a second account).
-- The migration's backfill step stores each host name as a write stores it now (accounts/store.ts,
-- dropDomainTrailingDots: the dot dropped, and the ASCII form of one an older crm kept otherwise),
-- leaves a domain that is no host name ("..", "a..b.") as it is, and warns of both. SQLite has no
-- regular expressions to tell them apart, hence this statement, which changes nothing.
SELECT 1;
