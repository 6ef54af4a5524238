-- 0007: workers say when they are asleep, so producers notify only then.
-- A transaction that calls pg_notify takes one cluster-wide lock at commit and
-- holds it through the WAL flush, which serialises such commits and defeats group
-- commit; busy workers claim again on their own and need no wake-up.

ALTER TABLE harvest.workers
ADD COLUMN sleeping boolean NOT NULL DEFAULT false;
