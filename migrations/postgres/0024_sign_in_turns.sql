-- The turns of the console's paced password checks: SQLite's migration 0024 (its comment says why).
CREATE TABLE sign_in_turns (
  pace_key     text PRIMARY KEY,
  next_turn_at bigint NOT NULL
);
CREATE INDEX sign_in_turns_next ON sign_in_turns (next_turn_at);
