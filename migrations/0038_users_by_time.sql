-- Users are listed in the sorts contacts and accounts have by time (created_at, the default, and
-- updated_at), and filtered by updated_after, so a copy of them is kept in step by polling as
-- theirs is: each sort and the filter read one range of its index. They were listed by id alone.
CREATE INDEX users_created ON users (created_at, id);
CREATE INDEX users_updated ON users (updated_at, id);
