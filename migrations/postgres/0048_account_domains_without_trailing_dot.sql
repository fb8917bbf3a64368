-- Account domains without a trailing dot: SQLite's migration 0048 (its comment says why). The
-- migration's backfill step drops the dot as on SQLite (accounts/store.ts,
-- dropPostgresDomainTrailingDots), with the same check of a host name. The script itself changes
-- nothing.
SELECT 1;
