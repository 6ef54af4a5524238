-- Dead letters: activity invocations that exhausted their retries (or failed
-- non-retryably) while their workflow keeps waiting. Replay re-enqueues the
-- invocation with a fresh attempt budget; discard hands the failure to the
-- workflow, which may handle it or fail.

CREATE OR REPLACE FUNCTION harvest.list_dead_letters(
    p_limit integer DEFAULT 100,
    p_activity_name text DEFAULT NULL,
    p_workflow_name text DEFAULT NULL,
    p_before_id bigint DEFAULT NULL
)
RETURNS SETOF harvest.dead_letters
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..1000', p_limit USING ERRCODE = 'HR001';
    END IF;
    RETURN QUERY
    SELECT * FROM harvest.dead_letters AS d
    WHERE (p_activity_name IS NULL OR d.activity_name = p_activity_name)
      AND (p_workflow_name IS NULL OR d.workflow_name = p_workflow_name)
      AND (p_before_id IS NULL OR d.id < p_before_id)
    ORDER BY d.id DESC
    LIMIT p_limit;
END;
$$;

CREATE OR REPLACE FUNCTION harvest.get_dead_letter(p_id bigint)
RETURNS harvest.dead_letters
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_row harvest.dead_letters;
BEGIN
    SELECT * INTO v_row FROM harvest.dead_letters WHERE id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'dead letter % does not exist', p_id USING ERRCODE = 'HR002';
    END IF;
    RETURN v_row;
END;
$$;

-- Lock a dead letter's execution, then the dead letter (execution first, as everywhere).
CREATE OR REPLACE FUNCTION harvest._lock_dead_letter(p_id bigint)
RETURNS harvest.dead_letters
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution_id uuid;
    o_dead_letter harvest.dead_letters;
BEGIN
    SELECT d.execution_id INTO v_execution_id FROM harvest.dead_letters AS d WHERE d.id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'dead letter % does not exist', p_id USING ERRCODE = 'HR002';
    END IF;
    PERFORM 1 FROM harvest.executions WHERE id = v_execution_id FOR UPDATE;
    SELECT * INTO o_dead_letter FROM harvest.dead_letters WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'dead letter % was replayed or discarded meanwhile', p_id USING ERRCODE = 'HR002';
    END IF;
    RETURN o_dead_letter;
END;
$$;

CREATE OR REPLACE FUNCTION harvest.replay_dead_letter(p_id bigint)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
    v_dead harvest.dead_letters;
    v_now timestamptz := harvest.now();
    v_task_id bigint;
    v_stc double precision;
BEGIN
    v_dead := harvest._lock_dead_letter(p_id);
    SELECT * INTO v_execution FROM harvest.executions WHERE id = v_dead.execution_id;
    IF v_execution.status <> 'RUNNING' THEN
        RAISE EXCEPTION 'dead letter %: its execution % is %, so nothing waits for the activity',
            p_id, v_execution.id, v_execution.status USING ERRCODE = 'HR005',
            HINT = 'discard it, or start a new run';
    END IF;
    v_stc := (v_dead.options ->> 'schedule_to_close')::double precision;
    INSERT INTO harvest.tasks (
        execution_id, kind, queue, priority, due_at, seq, activity_name, input, options,
        scheduled_at, deadline_at
    ) VALUES (
        v_execution.id, 'activity', v_dead.queue, v_dead.priority, v_now, v_dead.seq,
        v_dead.activity_name, v_dead.input, v_dead.options, v_now,
        CASE WHEN v_stc IS NOT NULL THEN v_now + make_interval(secs => v_stc) END
    ) RETURNING id INTO v_task_id;
    DELETE FROM harvest.dead_letters WHERE id = p_id;
    PERFORM harvest._notify_queue(v_dead.queue);
    RETURN v_task_id;
END;
$$;

CREATE OR REPLACE FUNCTION harvest.discard_dead_letter(p_id bigint)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
    v_dead harvest.dead_letters;
BEGIN
    v_dead := harvest._lock_dead_letter(p_id);
    SELECT * INTO v_execution FROM harvest.executions WHERE id = v_dead.execution_id;
    DELETE FROM harvest.dead_letters WHERE id = p_id;
    IF v_execution.status = 'RUNNING' THEN
        PERFORM harvest._append_event(v_execution.id, 'ActivityFailed', jsonb_build_object(
            'seq', v_dead.seq, 'failure', v_dead.failure, 'attempt', v_dead.attempts));
        PERFORM harvest._ensure_workflow_task(v_execution.id);
    END IF;
END;
$$;
