-- 0112: a query or an update's validation asked of a run that has not completed its first
-- workflow task waits for it (docs/messages.md, "Before the run's first workflow task"): the
-- request's new status 'waiting' (harvest.wait_for_first_workflow_task), the index its wake-up
-- reads (harvest.claim_query_requests), and get_query_request answering waiting_for. The
-- old signature goes here; the new one is installed with the functions, after the migrations.
ALTER TABLE harvest.query_requests DROP CONSTRAINT IF EXISTS query_requests_status_check;
ALTER TABLE harvest.query_requests ADD CONSTRAINT query_requests_status_check CHECK (
    status IN ('pending', 'running', 'waiting', 'accepted', 'completed', 'failed', 'rejected')
);
CREATE INDEX IF NOT EXISTS query_requests_waiting
ON harvest.query_requests (execution_id)
WHERE status = 'waiting';
DROP FUNCTION IF EXISTS harvest.get_query_request(bigint);
