-- Waiting for results. handle.result() LISTENs on harvest_done, marks itself as a
-- waiter for the run, then reads the run; _close_execution notifies only runs
-- somebody waits for, so the notify lock stays off the hot path of unattended
-- runs. A close that races the mark is caught by the waiter's periodic re-read.

-- Mark p_waiter_id as waiting for p_execution_id and return the run as it is now.
CREATE OR REPLACE FUNCTION harvest.wait_for_result(p_execution_id uuid, p_waiter_id uuid)
RETURNS harvest.executions
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions := harvest.get_execution(p_execution_id);
BEGIN
    IF v_execution.status = 'RUNNING' THEN
        INSERT INTO harvest.result_waiters (execution_id, waiter_id, since)
        VALUES (p_execution_id, p_waiter_id, harvest.now())
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN v_execution;
END;
$$;

-- Drop a waiter's marks (it got its answer, timed out or gave up).
CREATE OR REPLACE FUNCTION harvest.stop_waiting(p_waiter_id uuid)
RETURNS void
LANGUAGE sql
AS $$
    DELETE FROM harvest.result_waiters WHERE waiter_id = p_waiter_id;
$$;
