-- The turns of the console's paced password checks (an account or an address under attack gets one
-- check a second), kept here rather than in a process so that several instances on one database
-- hand out one sequence of turns: a guesser spread over N instances gets no N times the rate.
-- `next_turn_at` is when the key's next check may run; a row whose time has passed is deleted by
-- the next paced check, so the table holds only the keys paced in the last few seconds.
CREATE TABLE sign_in_turns (
  pace_key     TEXT PRIMARY KEY,
  next_turn_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX sign_in_turns_next ON sign_in_turns (next_turn_at);
