-- 0062: a run's row rules on an UPDATE move from the BEFORE trigger executions_checks to
-- an AFTER UPDATE OF trigger, executions_checks_update, calling the same function
-- (docs/performance.md, "A run's row rules after the update"). Any BEFORE UPDATE row
-- trigger on a table makes PostgreSQL fetch and lock each updated row before the update,
-- whichever columns the statement sets (the column list is tested after), and a run's row
-- is updated on every event append, which sets none of the rules' columns; an AFTER
-- trigger with a column list is skipped by a bitmap test. executions_checks stays for
-- INSERT. The same rules, SQLSTATE (23514), constraint names and messages; existing rows
-- passed them. Replacing triggers scans nothing: the DROP TRIGGER takes harvest.executions'
-- ACCESS EXCLUSIVE lock, which waits for the transactions using the table and is held to
-- the migration's commit, a moment on any size of table.
DROP TRIGGER executions_checks ON harvest.executions;

CREATE TRIGGER executions_checks
BEFORE INSERT ON harvest.executions
FOR EACH ROW
EXECUTE FUNCTION harvest._executions_checks();

CREATE TRIGGER executions_checks_update
AFTER UPDATE OF status, parent_close_policy, search_attributes, migrated_to_shard
ON harvest.executions
FOR EACH ROW
EXECUTE FUNCTION harvest._executions_checks();
