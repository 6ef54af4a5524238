-- 0022: the last `task_queue` spellings of the worker protocol (issue 13). The
-- column claim_query_requests returns for the execution's queue is `queue`, and
-- claim_tasks returns one `queue`, the task's (a workflow task's queue is its
-- execution's, so the second column said the same thing twice for the task that
-- needs it). CREATE OR REPLACE cannot change the columns a function returns:
-- the old signatures are dropped here and functions/ re-creates them.
-- (start_workflows reads "queue", and "task_queue" as its deprecated spelling,
-- with no change of signature.)

DROP FUNCTION IF EXISTS harvest.claim_tasks(text, text[], integer, double precision);
DROP FUNCTION IF EXISTS harvest.claim_query_requests(text, text[], integer, double precision);

-- The files that define them are applied again after this migration, whatever
-- their recorded checksums say.
DELETE FROM harvest.function_files
WHERE file_name IN ('claim.sql', 'messages.sql');
