-- 0106: the max_dead_letters quota counts its key's dead letters, not every kept run of the key
-- (re-runnable: IF NOT EXISTS, CREATE OR REPLACE, DROP ... IF EXISTS, and the backfill writes
-- only the rows whose key differs from their run's).
--
-- A start of a workflow with max_dead_letters joined the runs of its key to their dead letters
-- (functions/flow_quotas.sql, quota_usage). No index leads to a key's dead letters, so the join
-- read every kept run of the key (executions_quota_key) or every dead letter of the shard,
-- whichever the planner thought fewer: 1,026 buffers (custom plan) or 580 (generic) for a key
-- with 3 dead letters among 10,000 kept runs beside 10,000 dead letters of other keys. A dead
-- letter now carries its run's key, and the check counts the key's dead letters down
-- dead_letters_quota_key (a partial index: no entry for a run without a key).
--
-- The key is set by a BEFORE INSERT trigger from the run's row, not by the three statements that
-- park a dead letter: those are replaced by the functions' step, which commits after this
-- migration, so until then the old statements park rows without a key; the trigger, created
-- here under dead_letters' ACCESS EXCLUSIVE lock (the ADD COLUMN's, to the commit), keys every
-- row inserted after the backfill whichever statement inserts it. A run's key is written when it
-- starts and no statement of Harvest changes it (a shard move's staged copy over a seal writes
-- the same run's key back), so the dead letter's copy stays its run's; an UPDATE of a dead
-- letter's execution_id or quota_key takes the run's key again.
--
-- The backfill is one UPDATE in this transaction: dead letters are rare rows (a parked failure
-- each), and the lock that keeps new ones out until the commit is on dead_letters alone, which
-- only parking, replaying and discarding write (and retention's cascade, which waits). Batches
-- in their own transactions would need the trigger committed first and would gain nothing on a
-- table this size.
ALTER TABLE harvest.dead_letters ADD COLUMN IF NOT EXISTS quota_key text;

-- sql/triggers.sql holds the same function and trigger.
CREATE OR REPLACE FUNCTION harvest._dead_letter_quota_key()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.quota_key := (SELECT e.quota_key FROM harvest.executions AS e WHERE e.id = NEW.execution_id);
    RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS dead_letters_quota_key ON harvest.dead_letters;
CREATE TRIGGER dead_letters_quota_key
BEFORE INSERT OR UPDATE OF execution_id, quota_key ON harvest.dead_letters
FOR EACH ROW
EXECUTE FUNCTION harvest._dead_letter_quota_key();

UPDATE harvest.dead_letters AS d
SET quota_key = e.quota_key
FROM harvest.executions AS e
WHERE
    e.id = d.execution_id
    AND d.quota_key IS DISTINCT FROM e.quota_key;

CREATE INDEX IF NOT EXISTS dead_letters_quota_key
ON harvest.dead_letters (quota_key) WHERE quota_key IS NOT NULL;
