-- Dead letters: activity invocations that exhausted their retries (or failed
-- non-retryably) while their workflow keeps waiting. Replay re-enqueues the
-- invocation with a fresh attempt budget; discard hands the failure to the
-- workflow, which may handle it or fail.
--
-- A replay's budget is fresh but its attempts keep counting: the task starts at the dead
-- letter's attempts (its next claim is attempt attempts + 1) and its retry policy counts
-- max_attempts from there (retry.attempts_before_replay, read by _fail_activity_attempt).
-- So the outcome's attempt, which the usage report sums (flow_usage.sql), counts every
-- attempt of the invocation, a second dead letter says how many were made in all, and an
-- attempt-scoped key (ctx.attempt()) never comes back. max_attempts bounds the automatic
-- retries between two operator decisions, not the invocation's whole life: each replay is
-- an operator's grant of max_attempts more (docs/failures.md).

-- Dead letters, newest failure first: (failed_at, id) descending, the order every shard's rows
-- are merged in (harvest.shard.fanout), so a shard's page is its share of the merged page. An
-- id is taken at the insert, failed_at at the statement's start: they disagree across
-- concurrent failures (and under the test clock), so the id alone orders nothing a reader
-- means by "newest". A page goes on after a position: p_before_failed_at with p_before_id (the
-- last row's; the keyset, which outlives the row: replayed or discarded, it is gone), or
-- p_before_id alone, a dead letter of this database whose failure time is read (HR002 when it
-- is gone: give its failed_at as well).
CREATE OR REPLACE FUNCTION harvest.list_dead_letters(
    p_limit integer DEFAULT 100,
    p_activity_name text DEFAULT NULL,
    p_workflow_name text DEFAULT NULL,
    p_before_id bigint DEFAULT NULL,
    p_before_failed_at timestamptz DEFAULT NULL
)
RETURNS SETOF harvest.dead_letters
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_before timestamptz := p_before_failed_at;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..1000', p_limit USING ERRCODE = 'HR001';
    END IF;
    IF p_before_id IS NOT NULL AND v_before IS NULL THEN
        SELECT d.failed_at INTO v_before FROM harvest.dead_letters AS d WHERE d.id = p_before_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'dead letter % does not exist (replayed or discarded since): page with the list''s '
                'cursor, or give its failed_at as well', p_before_id USING ERRCODE = 'HR002';
        END IF;
    END IF;
    RETURN QUERY
    SELECT * FROM harvest.dead_letters AS d
    WHERE (p_activity_name IS NULL OR d.activity_name = p_activity_name)
      AND (p_workflow_name IS NULL OR d.workflow_name = p_workflow_name)
      -- Without an id, a time alone: the rows that failed before it (id 0 precedes every id).
      AND (v_before IS NULL OR (d.failed_at, d.id) < (v_before, coalesce(p_before_id, 0)))
    ORDER BY d.failed_at DESC, d.id DESC
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

-- Replay one dead letter (the work of replay_dead_letter, which audits it; a bulk
-- replay audits once for all its letters).
CREATE OR REPLACE FUNCTION harvest._replay_dead_letter(p_id bigint)
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
    -- (FOR SHARE: a pause cannot change the status read here before the task is in.)
    SELECT * INTO v_execution FROM harvest.executions WHERE id = v_dead.execution_id FOR SHARE;
    IF v_dead.kind = 'workflow' THEN
        RAISE EXCEPTION 'dead letter % records run % that failed with %: a run cannot be replayed',
            p_id, v_execution.id, v_dead.failure ->> 'error_type' USING ERRCODE = 'HR001',
            HINT = 'start a new run (a capped one: have the workflow call ctx.continue_as_new() before the '
                   'cap; an unknown_workflow one: once a worker registers it); discard the dead letter once handled';
    END IF;
    IF v_execution.status NOT IN ('RUNNING', 'PAUSED') THEN
        RAISE EXCEPTION 'dead letter %: its execution % is %, so nothing waits for the activity',
            p_id, v_execution.id, v_execution.status USING ERRCODE = 'HR005',
            HINT = 'discard it, or start a new run';
    END IF;
    v_stc := (v_dead.options ->> 'schedule_to_close')::double precision;
    INSERT INTO harvest.tasks (
        execution_id, kind, queue, priority, due_at, seq, activity_name, input, options,
        scheduled_at, deadline_at, status, attempt, run_workflow_name, run_workflow_id
    ) VALUES (
        v_execution.id, 'activity', v_dead.queue, v_dead.priority, v_now, v_dead.seq,
        v_dead.activity_name, v_dead.input,
        -- A fresh budget counted from the attempts made so far (see the top of this file).
        v_dead.options || jsonb_build_object('retry', coalesce(v_dead.options -> 'retry', '{}'::jsonb)
                                                      || jsonb_build_object('attempts_before_replay', v_dead.attempts)),
        v_now,
        CASE WHEN v_stc IS NOT NULL THEN v_now + make_interval(secs => v_stc) END,
        CASE WHEN v_execution.status = 'PAUSED' THEN 'paused' ELSE 'pending' END,  -- waits for the resume
        v_dead.attempts, v_execution.workflow_name, v_execution.workflow_id
    ) RETURNING id INTO v_task_id;
    DELETE FROM harvest.dead_letters WHERE id = p_id;
    PERFORM harvest._notify_queue(v_dead.queue);
    RETURN v_task_id;
END;
$$;

-- Discard one dead letter (see _replay_dead_letter).
CREATE OR REPLACE FUNCTION harvest._discard_dead_letter(p_id bigint)
RETURNS harvest.dead_letters
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
    v_dead harvest.dead_letters;
BEGIN
    v_dead := harvest._lock_dead_letter(p_id);
    SELECT * INTO v_execution FROM harvest.executions WHERE id = v_dead.execution_id;
    DELETE FROM harvest.dead_letters WHERE id = p_id;
    IF v_dead.kind = 'activity' AND v_execution.status IN ('RUNNING', 'PAUSED') THEN
        PERFORM harvest._append_event(v_execution.id, 'ActivityFailed', jsonb_build_object(
            'seq', v_dead.seq, 'failure', v_dead.failure, 'attempt', v_dead.attempts));
        PERFORM harvest._ensure_workflow_task(v_execution.id);
    END IF;
    RETURN v_dead;
END;
$$;

CREATE OR REPLACE FUNCTION harvest.replay_dead_letter(p_id bigint)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_task_id bigint := harvest._replay_dead_letter(p_id);
BEGIN
    PERFORM harvest._audit('dead_letter.replay', p_id::text, NULL, (
        SELECT jsonb_build_object('execution_id', t.execution_id, 'activity_name', t.activity_name,
                                  'task_id', t.id)
        FROM harvest.tasks AS t WHERE t.id = v_task_id));
    RETURN v_task_id;
END;
$$;

CREATE OR REPLACE FUNCTION harvest.discard_dead_letter(p_id bigint)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_dead harvest.dead_letters := harvest._discard_dead_letter(p_id);
BEGIN
    PERFORM harvest._audit('dead_letter.discard', p_id::text, NULL, jsonb_build_object(
        'execution_id', v_dead.execution_id, 'kind', v_dead.kind, 'activity_name', v_dead.activity_name,
        'error_type', v_dead.failure ->> 'error_type'));
END;
$$;

-- How many dead letters, grouped by activity, workflow or error type (or all
-- three), with the first and last failure time of each group.
CREATE OR REPLACE FUNCTION harvest.count_dead_letters(p_group_by text DEFAULT 'all')
RETURNS TABLE (
    activity_name text, workflow_name text, error_type text, dead_letters bigint,
    first_failed_at timestamptz, last_failed_at timestamptz
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_by text := lower(coalesce(p_group_by, 'all'));
BEGIN
    IF v_by NOT IN ('all', 'activity', 'workflow', 'error_type') THEN
        RAISE EXCEPTION 'cannot group dead letters by "%"', p_group_by USING ERRCODE = 'HR001',
            HINT = 'group by activity, workflow, error_type or all';
    END IF;
    RETURN QUERY
    SELECT g.activity_name, g.workflow_name, g.error_type, count(*), min(g.failed_at), max(g.failed_at)
    FROM (
        SELECT CASE WHEN v_by IN ('all', 'activity') THEN d.activity_name END AS activity_name,
               CASE WHEN v_by IN ('all', 'workflow') THEN d.workflow_name END AS workflow_name,
               CASE WHEN v_by IN ('all', 'error_type') THEN coalesce(d.failure ->> 'error_type', 'Error') END
                   AS error_type,
               d.failed_at
        FROM harvest.dead_letters AS d
    ) AS g
    GROUP BY g.activity_name, g.workflow_name, g.error_type
    ORDER BY count(*) DESC, 1, 2, 3;
END;
$$;

-- The rows a bulk action works on: at least one filter, oldest first, at most
-- p_limit (default 100, at most 1000). Returns (matched before the limit, ids).
CREATE OR REPLACE FUNCTION harvest._select_dead_letters(
    p_activity_name text, p_workflow_name text, p_failed_after timestamptz, p_failed_before timestamptz,
    p_limit integer, OUT matched bigint, OUT ids bigint[]
)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_activity_name IS NULL AND p_workflow_name IS NULL AND p_failed_after IS NULL
       AND p_failed_before IS NULL THEN
        RAISE EXCEPTION 'a bulk dead-letter action needs a filter' USING ERRCODE = 'HR001',
            HINT = 'give at least one of activity_name, workflow_name, failed_after, failed_before';
    END IF;
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..1000', p_limit USING ERRCODE = 'HR001';
    END IF;
    SELECT count(*) INTO matched FROM harvest.dead_letters AS d
    WHERE (p_activity_name IS NULL OR d.activity_name = p_activity_name)
      AND (p_workflow_name IS NULL OR d.workflow_name = p_workflow_name)
      AND (p_failed_after IS NULL OR d.failed_at >= p_failed_after)
      AND (p_failed_before IS NULL OR d.failed_at < p_failed_before);
    SELECT coalesce(array_agg(s.id ORDER BY s.failed_at, s.id), ARRAY[]::bigint[]) INTO ids FROM (
        SELECT d.id, d.failed_at FROM harvest.dead_letters AS d
        WHERE (p_activity_name IS NULL OR d.activity_name = p_activity_name)
          AND (p_workflow_name IS NULL OR d.workflow_name = p_workflow_name)
          AND (p_failed_after IS NULL OR d.failed_at >= p_failed_after)
          AND (p_failed_before IS NULL OR d.failed_at < p_failed_before)
        ORDER BY d.failed_at, d.id
        LIMIT p_limit
    ) AS s;
END;
$$;

-- Replay or discard many dead letters by filter. Each row runs in its own
-- subtransaction: a row that cannot be acted on (its run is no longer RUNNING,
-- or someone replayed it meanwhile) is reported in failures, never aborts the
-- rest. A dry run writes nothing: it reports what would be acted on (ids) and
-- the failures it can foresee. matched counts every row the filter selects,
-- before the limit: call again until matched is 0.
CREATE OR REPLACE FUNCTION harvest._bulk_dead_letters(
    p_action text, p_activity_name text, p_workflow_name text, p_failed_after timestamptz,
    p_failed_before timestamptz, p_limit integer, p_dry_run boolean, p_operator_id text
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_selected record;
    v_id bigint;
    v_acted bigint[] := ARRAY[]::bigint[];
    v_failures jsonb := '[]'::jsonb;
    v_status text;
    v_result jsonb;
BEGIN
    SELECT * INTO v_selected FROM harvest._select_dead_letters(
        p_activity_name, p_workflow_name, p_failed_after, p_failed_before, p_limit);
    FOREACH v_id IN ARRAY v_selected.ids LOOP
        IF coalesce(p_dry_run, false) THEN
            IF p_action = 'replay' THEN
                SELECT e.status INTO v_status FROM harvest.dead_letters AS d
                JOIN harvest.executions AS e ON e.id = d.execution_id WHERE d.id = v_id;
                IF v_status NOT IN ('RUNNING', 'PAUSED') THEN
                    v_failures := v_failures || jsonb_build_object('id', v_id, 'sqlstate', 'HR005',
                        'error', format('its execution is %s, so nothing waits for the activity', v_status));
                    CONTINUE;
                END IF;
            END IF;
            v_acted := v_acted || v_id;
            CONTINUE;
        END IF;
        BEGIN
            IF p_action = 'replay' THEN
                PERFORM harvest._replay_dead_letter(v_id);
            ELSE
                PERFORM harvest._discard_dead_letter(v_id);
            END IF;
            v_acted := v_acted || v_id;
        EXCEPTION WHEN OTHERS THEN
            v_failures := v_failures || jsonb_build_object('id', v_id, 'sqlstate', SQLSTATE, 'error', SQLERRM);
        END;
    END LOOP;
    v_result := jsonb_build_object(
        'dry_run', coalesce(p_dry_run, false),
        'matched', v_selected.matched,
        'acted_on', CASE WHEN coalesce(p_dry_run, false) THEN 0 ELSE cardinality(v_acted) END,
        'ids', to_jsonb(v_acted),
        'failures', v_failures);
    IF NOT coalesce(p_dry_run, false) THEN
        PERFORM harvest._audit('dead_letters.bulk_' || p_action, NULL, p_operator_id, jsonb_build_object(
            'activity_name', p_activity_name, 'workflow_name', p_workflow_name,
            'failed_after', p_failed_after, 'failed_before', p_failed_before, 'limit', p_limit,
            'matched', v_selected.matched, 'acted_on', cardinality(v_acted),
            'failed', jsonb_array_length(v_failures)));
    END IF;
    RETURN v_result;
END;
$$;

CREATE OR REPLACE FUNCTION harvest.replay_dead_letters(
    p_activity_name text DEFAULT NULL, p_workflow_name text DEFAULT NULL,
    p_failed_after timestamptz DEFAULT NULL, p_failed_before timestamptz DEFAULT NULL,
    p_limit integer DEFAULT 100, p_dry_run boolean DEFAULT false, p_operator_id text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql
AS $$
    SELECT harvest._bulk_dead_letters('replay', p_activity_name, p_workflow_name, p_failed_after,
                                      p_failed_before, p_limit, p_dry_run, p_operator_id);
$$;

CREATE OR REPLACE FUNCTION harvest.discard_dead_letters(
    p_activity_name text DEFAULT NULL, p_workflow_name text DEFAULT NULL,
    p_failed_after timestamptz DEFAULT NULL, p_failed_before timestamptz DEFAULT NULL,
    p_limit integer DEFAULT 100, p_dry_run boolean DEFAULT false, p_operator_id text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql
AS $$
    SELECT harvest._bulk_dead_letters('discard', p_activity_name, p_workflow_name, p_failed_after,
                                      p_failed_before, p_limit, p_dry_run, p_operator_id);
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.list_dead_letters IS
'Dead letters, newest failure first (failed_at, then id), optionally of one activity or workflow and after a '
'position (keyset paging: p_before_failed_at and p_before_id, the last row''s; p_before_id alone: that dead letter, '
'HR002 when it is gone); p_limit 1..1000 (else HR001). For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.get_dead_letter IS
'One dead letter; HR002 when it does not exist. For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.replay_dead_letter IS
'Re-enqueue a dead-lettered activity with a fresh attempt budget (its attempts keep counting from the dead '
'letter''s) and audit it; returns the new task id. HR005 '
'when its run is no longer RUNNING, HR001 for a run''s own dead letter. For operators (role harvest_operator).';
COMMENT ON FUNCTION harvest.discard_dead_letter IS
'Drop a dead letter and audit it: a RUNNING workflow receives ActivityFailed and may handle it or fail. For '
'admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.count_dead_letters IS
'How many dead letters, grouped by activity, workflow or error type (or all three), with the first and last '
'failure time of each group. For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.replay_dead_letters IS
'Replay the dead letters a filter selects (up to p_limit, oldest first), each on its own: a row that cannot be '
'replayed is reported in failures, never aborts the rest; p_dry_run writes nothing; audited once. For operators '
'(role harvest_operator).';
COMMENT ON FUNCTION harvest.discard_dead_letters IS
'Discard the dead letters a filter selects (up to p_limit, oldest first), each on its own, reporting failures '
'without aborting the rest; p_dry_run writes nothing; audited once. For admins (role harvest_admin).';
