-- Activity results: complete, fail (retry with backoff or end), heartbeat.
-- Each final outcome wakes the workflow in the same transaction.

-- The retry decision for one failed attempt of a locked activity task.
-- Resolution order for "do not retry": the failure's own non_retryable flag, then
-- retry.non_retryable_errors against error_type, then against the full message. The wait before
-- the retry is the failure's next_retry_delay (seconds) when it has one, else the backoff.
-- Returns 'retry_scheduled', 'dead_lettered' or 'failed'.
CREATE OR REPLACE FUNCTION harvest._fail_activity_attempt(
    p_execution harvest.executions, p_task harvest.tasks, p_failure jsonb, p_allow_retry boolean DEFAULT true
)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_retry jsonb := coalesce(p_task.options -> 'retry', '{}'::jsonb);
    v_max_attempts integer := coalesce(harvest._json_integer(v_retry -> 'max_attempts', 'retry.max_attempts'), 3);
    -- The attempts of this budget: a replayed dead letter's count on from the earlier
    -- budgets' (attempts_before_replay, functions/dead_letters.sql).
    v_budget_attempt integer := p_task.attempt - coalesce(harvest._json_integer(v_retry -> 'attempts_before_replay', 'retry.attempts_before_replay'), 0);
    v_initial double precision := coalesce((v_retry ->> 'initial_interval')::double precision, 1);
    v_backoff double precision := coalesce((v_retry ->> 'backoff')::double precision, 2);
    v_max_interval double precision := coalesce((v_retry ->> 'max_interval')::double precision, 100);
    v_listed jsonb := coalesce(v_retry -> 'non_retryable_errors', '[]'::jsonb);
    v_message text := coalesce(p_failure ->> 'message', '');
    v_error_type text := coalesce(p_failure ->> 'error_type', 'Error');
    v_non_retryable boolean;
    v_delay double precision;
    v_next timestamptz;
    v_failure jsonb := p_failure;
    v_unknown_to jsonb;
    v_untried_live boolean;
    v_uncharged boolean := false;  -- an ActivityNotRegistered claim that was no attempt
BEGIN
    v_non_retryable := coalesce(harvest._json_boolean(p_failure -> 'non_retryable', 'non_retryable'), false)
        OR v_listed ? v_error_type
        OR v_listed ? v_message
        OR v_listed ? (v_error_type || ': ' || v_message);
    -- The failure's own next_retry_delay (an activity that read a 429's Retry-After) replaces the
    -- backoff, max_interval included; attempts and schedule_to_close still bound the retry.
    -- Else initial * backoff^(attempt-1), capped by max_interval, taken in log space with the
    -- exponent bounded: power(2, 1024) overflows a double, and a policy with max_attempts 0
    -- (unbounded) or a large count reaches such attempts.
    v_delay := coalesce(
        harvest._json_number(p_failure -> 'next_retry_delay', 'failure.next_retry_delay'),
        least(v_initial * exp(least(ln(greatest(v_backoff, 1e-9)) * greatest(v_budget_attempt - 1, 0), 600)),
              v_max_interval));
    v_next := v_now + make_interval(secs => v_delay);

    IF v_error_type = 'ActivityNotRegistered' AND p_task.lease_owner IS NOT NULL THEN
        -- The claiming worker's App lacks the activity (a rolling deploy's old worker: the new
        -- code schedules a new activity). Its id is kept (details.unknown_to, while the failures
        -- are of this kind), and while a live worker polling the queue has not tried it the
        -- claim was no attempt: the task waits for one that may have it, its attempt given
        -- back (not if the policy lists it non-retryable). Once none is left the retry policy
        -- counts it as any failure.
        SELECT u.unknown_to, u.untried_live INTO v_unknown_to, v_untried_live
        FROM harvest._unknown_to(
            CASE WHEN p_task.last_failure ->> 'error_type' = 'ActivityNotRegistered'
                 THEN p_task.last_failure -> 'details' -> 'unknown_to' END,
            p_task.lease_owner, p_task.queue) AS u;
        v_failure := jsonb_set(p_failure, '{details}',
                               CASE WHEN jsonb_typeof(p_failure -> 'details') = 'object' THEN p_failure -> 'details'
                                    ELSE '{}'::jsonb END || jsonb_build_object('unknown_to', v_unknown_to));
        p_failure := v_failure;
        v_uncharged := v_untried_live AND p_allow_retry AND NOT v_non_retryable
                       AND (p_task.deadline_at IS NULL OR v_next < p_task.deadline_at);
    END IF;

    IF v_uncharged OR (p_allow_retry AND NOT v_non_retryable
                       AND (v_max_attempts <= 0 OR v_budget_attempt < v_max_attempts)
                       AND (p_task.deadline_at IS NULL OR v_next < p_task.deadline_at)) THEN
        -- (A PAUSED run's retry waits for its resume: lifecycle.sql.) A rate limit's mark goes
        -- (rate_due_at, in this same write): a backoff is no place in the bucket's line, and an
        -- override never moves it (flow_rate_limits.sql, _repace_rate_bucket).
        UPDATE harvest.tasks
        SET status = CASE WHEN p_execution.status = 'PAUSED' THEN 'paused' ELSE 'pending' END,
            due_at = v_next, lease_owner = NULL, lease_expires_at = NULL, rate_due_at = NULL,
            attempt = p_task.attempt - CASE WHEN v_uncharged THEN 1 ELSE 0 END,
            last_failure = p_failure
        WHERE id = p_task.id;
        IF v_delay <= 0 AND p_execution.status IS DISTINCT FROM 'PAUSED' THEN
            PERFORM harvest._notify_queue(p_task.queue);
        END IF;
        RETURN 'retry_scheduled';
    END IF;

    IF p_allow_retry AND NOT v_non_retryable AND p_task.deadline_at IS NOT NULL
       AND v_next >= p_task.deadline_at
       AND (v_max_attempts <= 0 OR v_budget_attempt < v_max_attempts) THEN
        -- Retries remained, but the next one would start past schedule_to_close.
        v_failure := jsonb_build_object('error_type', 'ScheduleToCloseTimeout', 'non_retryable', true,
            'message', 'activity ' || p_task.activity_name || ' ran out of its schedule_to_close of '
                       || (p_task.options ->> 'schedule_to_close') || 's after attempt ' || p_task.attempt,
            'details', jsonb_build_object('last_failure', p_failure));
    END IF;

    DELETE FROM harvest.tasks WHERE id = p_task.id;
    IF p_execution.status NOT IN ('RUNNING', 'PAUSED') THEN
        RETURN 'failed';
    END IF;
    IF coalesce(harvest._json_boolean(p_task.options -> 'dead_letter', 'options.dead_letter'), true) THEN
        -- Parked: the workflow keeps waiting until an operator replays or discards.
        INSERT INTO harvest.dead_letters (
            execution_id, workflow_name, seq, activity_name, queue, input, options, priority,
            attempts, failure, scheduled_at, failed_at
        ) VALUES (
            p_execution.id, p_execution.workflow_name, p_task.seq, p_task.activity_name, p_task.queue,
            p_task.input, p_task.options, p_task.priority, p_task.attempt, v_failure,
            p_task.scheduled_at, v_now
        );
        RETURN 'dead_lettered';
    END IF;
    PERFORM harvest._append_event(p_execution.id, 'ActivityFailed', jsonb_build_object(
        'seq', p_task.seq, 'failure', v_failure, 'attempt', p_task.attempt) || harvest._attempt_started(p_task));
    PERFORM harvest._ensure_workflow_task(p_execution.id);
    RETURN 'failed';
END;
$$;

-- When the final attempt of an activity started, for its outcome event: {"started_at": ...}
-- while a worker holds the attempt, {} for one a worker let go of (completed elsewhere by its
-- task token: not worker compute) or never started. The usage report's
-- activity_compute_seconds is the outcome's time minus this (functions/flow_usage.sql).
-- STABLE, as its body is (jsonb_build_object of a timestamptz is STABLE: the output
-- depends on TimeZone), and so are its callers here: PostgreSQL inlines a SQL function
-- into the expression that calls it only when the function is no less volatile than its
-- body, and a call that is not inlined runs as a statement of its own (in a complete_activities
-- batch: once per result; docs/performance.md, "Fan-out row, fifth cut").
CREATE OR REPLACE FUNCTION harvest._attempt_started(p_task harvest.tasks)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_task.lease_owner IS NOT NULL AND p_task.started_at IS NOT NULL
                THEN jsonb_build_object('started_at', p_task.started_at)
                ELSE '{}'::jsonb END;
$$;

-- The data of an activity task's ActivityCompleted event.
-- (STABLE: see _attempt_started.)
CREATE OR REPLACE FUNCTION harvest._activity_completed(p_task harvest.tasks, p_result jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT harvest._activity_completed_data(p_task.seq, p_task.attempt, p_task.lease_owner,
                                            p_task.started_at, p_result);
$$;

-- The same from the task's columns, which is what complete_activities has of a task it
-- deleted (the DELETE's RETURNING list): no row of tasks made a composite per result,
-- and one object built, not two joined (_attempt_started's started_at is the fourth
-- key here; docs/performance.md, "Fan-out row, eighth cut").
CREATE OR REPLACE FUNCTION harvest._activity_completed_data(
    p_seq integer, p_attempt integer, p_lease_owner text, p_started_at timestamptz, p_result jsonb
)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_lease_owner IS NOT NULL AND p_started_at IS NOT NULL
                THEN jsonb_build_object('seq', p_seq, 'result', coalesce(p_result, 'null'::jsonb),
                                        'attempt', p_attempt, 'started_at', p_started_at)
                ELSE jsonb_build_object('seq', p_seq, 'result', coalesce(p_result, 'null'::jsonb),
                                        'attempt', p_attempt) END;
$$;

-- Record a locked activity task's result in the history of its locked execution
-- and drop the task; returns the execution as it was before, or NULL (and records
-- nothing) when the run has ended.
CREATE OR REPLACE FUNCTION harvest._store_activity_result(p_task harvest.tasks, p_result jsonb)
RETURNS harvest.executions
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
BEGIN
    SELECT * INTO v_execution FROM harvest.executions WHERE id = p_task.execution_id;
    DELETE FROM harvest.tasks WHERE id = p_task.id;
    IF v_execution.status NOT IN ('RUNNING', 'PAUSED') THEN  -- a paused run records it (lifecycle.sql)
        RETURN NULL;
    END IF;
    PERFORM harvest._append_event(v_execution.id, 'ActivityCompleted',
                                  harvest._activity_completed(p_task, p_result));
    RETURN v_execution;
END;
$$;

-- Record a locked activity task's result and wake its workflow. With a worker
-- given (p_worker_queues: its queues, from _hand_off_queues), the wake-up is
-- handed to that worker when its cached run decided last and the hand-off rules
-- allow it (claim.sql); returns the handed workflow task's id, or NULL.
CREATE OR REPLACE FUNCTION harvest._record_activity_result(
    p_task harvest.tasks, p_result jsonb, p_worker_id text, p_worker_queues text[],
    p_workflow_lease_secs double precision
)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
BEGIN
    v_execution := harvest._store_activity_result(p_task, p_result);
    IF v_execution.id IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN harvest._wake_after_results(v_execution, p_worker_id, p_worker_queues, p_workflow_lease_secs);
END;
$$;

-- Record the results of one locked run's activity tasks (already dropped) in one
-- append, as _record_activity_result records one: the ActivityCompleted events in
-- the given order, one row update, and one wake-up of the workflow (handed to
-- p_worker_id under the same rules, or queued). A run that has ended records
-- nothing. Returns the handed workflow task's id, or NULL.
CREATE OR REPLACE FUNCTION harvest._record_activity_results(
    p_execution_id uuid, p_event_types text[], p_event_datas jsonb[], p_worker_id text,
    p_worker_queues text[], p_workflow_lease_secs double precision
)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
BEGIN
    SELECT * INTO v_execution FROM harvest.executions AS e WHERE e.id = p_execution_id;
    IF v_execution.status NOT IN ('RUNNING', 'PAUSED') THEN  -- a paused run records them (lifecycle.sql)
        RETURN NULL;
    END IF;
    PERFORM harvest._append_events(p_execution_id, p_event_types, p_event_datas);
    RETURN harvest._wake_after_results(v_execution, p_worker_id, p_worker_queues, p_workflow_lease_secs);
END;
$$;

-- Wake a run's workflow once results are recorded in its history (p_execution: the run's
-- row as read before, under its lock): the workflow task is handed to p_worker_id
-- (p_worker_queues: its queues, from _hand_off_queues) when that worker's cached run
-- decided last and the hand-off rules allow it (claim.sql), else queued. Returns the
-- handed task's id, or NULL.
-- Held wake-ups: a run whose last decision said it waits for all of its open activities
-- at once (wake_hold, a hold_wakeups command: _apply_decision) is not woken while another
-- of its activity tasks is open; the result that leaves none (the run's row lock orders
-- the batches that record its results, so one of them sees none left) wakes it. A final
-- failure (_fail_activity_attempt) and every other wake-up go their own ways, unheld.
CREATE OR REPLACE FUNCTION harvest._wake_after_results(
    p_execution harvest.executions, p_worker_id text, p_worker_queues text[],
    p_workflow_lease_secs double precision
)
RETURNS bigint
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_execution.wake_hold AND EXISTS (
        SELECT 1 FROM harvest.tasks AS t WHERE t.execution_id = p_execution.id AND t.kind = 'activity'
    ) THEN
        RETURN NULL;
    END IF;
    IF p_worker_queues IS NOT NULL AND p_execution.decided_by = p_worker_id AND p_execution.status = 'RUNNING'
       AND (SELECT h FROM harvest._may_hand_off(p_execution.queue, 0, p_worker_queues) AS h) THEN
        RETURN harvest._hand_workflow_task(p_execution.id, p_worker_id, p_workflow_lease_secs);
    END IF;
    PERFORM harvest._ensure_workflow_task(p_execution.id);
    RETURN NULL;
END;
$$;

-- Whether a worker's decision made on an activity's result, before the result was
-- committed, is the decision the workflow task this result wakes would make, so
-- it may be applied in the same transaction (docs/internals.md, "Deciding
-- ahead"). It is when the worker's run had seen the whole history (nothing was
-- appended after its last decision, event p_after), no workflow task is open, the
-- hand-off rules would give that workflow task to this worker, and the run saw
-- the result exactly as it is stored (p_result_text, the jsonb text). p_execution:
-- the run's row as the caller read it under its lock (complete_activities passes it
-- on to _apply_decision: one read of the row where there were three).
CREATE OR REPLACE FUNCTION harvest._may_decide_on_result(
    p_execution harvest.executions, p_result jsonb, p_after bigint, p_result_text text,
    p_worker_id text, p_worker_queues text[]
)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_execution.status IS DISTINCT FROM 'RUNNING' OR p_execution.last_event_id <> p_after
       OR p_execution.decided_by IS DISTINCT FROM p_worker_id
       OR coalesce(p_result, 'null'::jsonb)::text IS DISTINCT FROM p_result_text THEN
        RETURN false;
    END IF;
    PERFORM 1 FROM harvest.tasks AS t WHERE t.execution_id = p_execution.id AND t.kind = 'workflow';
    RETURN NOT FOUND AND (SELECT h FROM harvest._may_hand_off(p_execution.queue, 0, p_worker_queues) AS h);
END;
$$;

CREATE OR REPLACE FUNCTION harvest.complete_activity(
    p_task_id bigint, p_fencing_token bigint, p_result jsonb DEFAULT 'null'::jsonb
)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._check_payload(format('the result of activity task %s', p_task_id), p_result,
                                   harvest._payload_limit());
    PERFORM harvest._check_depth(format('the result of activity task %s', p_task_id), p_result);
    PERFORM harvest._record_activity_result(
        harvest._lock_claimed_task(p_task_id, p_fencing_token, 'activity'), p_result, NULL, NULL, NULL);
END;
$$;

-- A decided item's answer in complete_activities ({"last_event_id", "execution_status",
-- "handed"}: the keys the worker reads), built once with its handed tasks' rows inside (a
-- build and a jsonb_set of the handed tasks were two conversions; docs/performance.md, "SQL
-- path, ninth cut"). A SQL expression that inlines into its caller.
CREATE OR REPLACE FUNCTION harvest._decided_answer(
    p_last_event_id bigint, p_execution_status text, p_handed harvest.worker_activity_task[]
)
RETURNS jsonb
LANGUAGE sql STABLE  -- (as jsonb_build_object: so it inlines)
AS $$
    SELECT jsonb_build_object('last_event_id', p_last_event_id, 'execution_status', p_execution_status,
                              'handed', p_handed);
$$;

-- A worker's group commit: complete many activity tasks in one transaction.
-- Each item succeeds or is refused on its own (outcome 'completed', or the
-- problem of _try_lock_claimed_task with its message); a refused item changes
-- nothing. A result over the payload limit is refused on its own too (outcome
-- 'too_large', the message of _check_payload): the worker then fails the
-- activity with a typed, non-retryable PayloadTooLarge; so is one nested deeper than
-- 200 levels (outcome 'too_deep', _check_depth's bound: a non-retryable PayloadError;
-- a result under 402 bytes cannot be, and is not walked). With p_hand_off, a woken
-- workflow task may be handed to p_worker_id
-- (handed: the task as the worker receives it, claim.sql _worker_task, carrying every
-- event up to the end of this batch).
--
-- An item may carry the worker's decision on its result (p_decisions, NULL for
-- none: {"after", "result_text", "commands", "hand_off_slots"}, see
-- _may_decide_on_result). When it may be applied, the result and the decision
-- commit together, as complete_workflow_task would have committed it through
-- the woken workflow task, and decided says what the decision wrote
-- ({"last_event_id", "execution_status", "handed"}); otherwise the result is
-- recorded alone (decided is NULL) and the worker drops its speculative run.
CREATE OR REPLACE FUNCTION harvest.complete_activities(
    p_worker_id text,
    p_task_ids bigint[],
    p_fencing_tokens bigint[],
    p_results jsonb[],
    p_hand_off boolean DEFAULT false,
    p_workflow_lease_secs double precision DEFAULT 30,
    p_decisions jsonb[] DEFAULT NULL,
    p_event_cap bigint DEFAULT 50000,
    p_byte_cap bigint DEFAULT 52428800
)
RETURNS TABLE (task_id bigint, outcome text, message text, handed jsonb, decided jsonb)
LANGUAGE plpgsql
-- Planned once per session (a hot entry point of the worker; docs/performance.md, "One plan per
-- statement for the hot entry points"): every statement the call runs, nested ones too.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_queues text[];
    v_item record;
    v_try record;
    v_task harvest.tasks;
    v_problem text;
    v_message text;
    -- The run whose row this batch locked last (items come in run order): its next
    -- items need their task's lock only.
    v_locked_run uuid;
    v_deleted boolean;  -- the item's task was taken by the one-statement way
    v_now timestamptz := harvest.now();  -- the engine's clock: once per batch
    v_decision jsonb;
    v_applied harvest.applied_decision;
    v_ids bigint[] := ARRAY[]::bigint[];
    v_outcomes text[] := ARRAY[]::text[];
    v_messages text[] := ARRAY[]::text[];
    v_handed bigint[] := ARRAY[]::bigint[];
    v_decided jsonb[] := ARRAY[]::jsonb[];
    v_i integer;
    v_limit integer := harvest._payload_limit();  -- once per batch
    v_bytes bigint;
    v_owner_mode boolean := harvest._owner_mode_on();  -- once per batch (owners.sql)
    v_item_queues text[];
    -- The plain results of one run gathered for one append (see _record_activity_results).
    v_run uuid;
    v_run_types text[] := ARRAY[]::text[];
    v_run_datas jsonb[] := ARRAY[]::jsonb[];
    v_run_queues text[];
    v_run_last integer;
    -- A decision's run as read for it (_may_decide_on_result, _apply_decision), and whether
    -- this item's own lock read it: nothing has written the row since (docs/performance.md,
    -- "A decision ahead reads its run once").
    v_execution harvest.executions;
    v_row_read boolean;
    -- The applied decisions' last events, inserted once (_apply_decision's p_defer_events,
    -- core.sql _insert_events): their runs, id offsets, types and data. (These buffers start
    -- NULL, not empty: a default is evaluated on every call, a call of one item's too.)
    v_ev_runs uuid[];
    v_ev_offsets bigint[];
    v_ev_types text[];
    v_ev_datas jsonb[];
    v_n integer;
    -- (A call of one item appends as complete_activity does: one statement either way,
    -- and the buffer's plumbing costs it some 20 us; docs/performance.md, as above.)
    v_batched boolean := cardinality(p_task_ids) > 1;
    -- The applied decisions' handed activities, one each, handed once likewise
    -- (_apply_decision's p_defer_hand, decide.sql _hand_activities_of_runs): the item each
    -- answers, its run's row as the decision read it and id, its seq and command.
    v_hd_items integer[];
    v_hd_runs harvest.executions[];
    v_hd_ids uuid[];
    v_hd_seqs integer[];
    v_hd_cmds jsonb[];
    v_hd_lasts bigint[];  -- (and the answer's last event id and run status)
    v_hd_statuses text[];
    v_hd_tasks harvest.worker_activity_task[];
    v_held_run uuid;  -- the run of the events held last (NULL: none held)
    -- The applied decisions' appends' row updates, written once likewise (_apply_decision's
    -- p_defer_events, core.sql _update_held_rows): the runs, their last ids, the events
    -- counted, the bytes added, decided_through and wake_hold.
    v_held_rows harvest.held_run_row[];
    v_cap record;
BEGIN
    IF p_task_ids IS NULL OR p_fencing_tokens IS NULL OR p_results IS NULL
       OR cardinality(p_task_ids) <> cardinality(p_fencing_tokens)
       OR cardinality(p_task_ids) <> cardinality(p_results)
       OR cardinality(p_task_ids) <> coalesce(cardinality(p_decisions), cardinality(p_task_ids))
       -- (the loop below reads every array at p_task_ids' subscripts)
       OR array_lower(p_fencing_tokens, 1) IS DISTINCT FROM array_lower(p_task_ids, 1)
       OR array_lower(p_results, 1) IS DISTINCT FROM array_lower(p_task_ids, 1)
       OR (p_decisions IS NOT NULL AND array_lower(p_decisions, 1) IS DISTINCT FROM array_lower(p_task_ids, 1)) THEN
        RAISE EXCEPTION 'task ids, fencing tokens, results (and decisions, if given) must be '
            'arrays of one length and one first subscript' USING ERRCODE = 'HR001';
    END IF;
    IF p_hand_off THEN
        PERFORM harvest._check_lease('workflow task lease', p_workflow_lease_secs);
        v_queues := harvest._hand_off_queues(p_worker_id);
    END IF;
    -- The start locks of the decisions first (decide.sql), then executions in one
    -- order in every batch, so two batches never deadlock.
    -- (Only when a decision starts a run: asked per decision by an expression, not by
    -- the lock function's statements, decide.sql _starts_runs.)
    IF p_decisions IS NOT NULL THEN
        FOREACH v_decision IN ARRAY p_decisions LOOP
            IF harvest._starts_runs(v_decision -> 'commands') THEN
                PERFORM harvest._lock_decision_start_keys(p_task_ids,
                    ARRAY(SELECT d.decision -> 'commands' FROM unnest(p_decisions) WITH ORDINALITY AS d (decision, n)
                          ORDER BY d.n));
                EXIT;
            END IF;
        END LOOP;
        -- Then, in a batch, its runs' rows and its decisions' mutex keys (decide.sql).
        IF v_batched THEN
            PERFORM harvest._lock_batch_mutexes(p_task_ids,
                ARRAY(SELECT d.decision -> 'commands' FROM unnest(p_decisions) WITH ORDINALITY AS d (decision, n)
                      ORDER BY d.n));
        END IF;
    END IF;
    FOR v_item IN
        -- (A scalar probe per id, not a join: a cached generic plan of a join with
        -- an id list scans the whole table. The items by subscript, not unnest, so the
        -- cached generic plan serves a call of one item too: complete_workflow_tasks.)
        SELECT p_task_ids[s.i] AS id, p_fencing_tokens[s.i] AS token, p_results[s.i] AS result,
               p_decisions[s.i] AS decision,
               (SELECT t.execution_id FROM harvest.tasks AS t WHERE t.id = p_task_ids[s.i]) AS run
        FROM generate_subscripts(p_task_ids, 1) AS s (i)
        ORDER BY run, id
    LOOP
        -- The usual item (its task still the worker's, its result within the limit) is
        -- taken by one statement: its run's row locked first (once per run: the lock
        -- order, run then task), then the task deleted where _claimed_task_problem, the
        -- rules _try_lock_task_of_locked_run applies, finds nothing wrong, under the row
        -- lock the DELETE takes. Any other item goes the full way below, which locks and
        -- names its problem (docs/performance.md, "Fan-out row, sixth cut"). The rules
        -- are one CASE, which no partial index's predicate follows from: the primary key
        -- is the DELETE's only way in (written as plain conditions, a plan read every
        -- running task through tasks_running_lease).
        v_task := NULL;
        v_problem := NULL;
        v_message := NULL;
        v_deleted := false;
        v_row_read := false;
        v_bytes := octet_length(v_item.result::text);
        -- A run's decided row updates, events and handed activity held here go in before
        -- anything else of the run is done (its next result or decision: a decision reads its
        -- row and may read its history, a result's wake-up asks for its activity tasks and its
        -- wake_hold, a held close deletes its tasks, this item's too); another run's may wait:
        -- nothing of this run reads them. (One test per item: a decision's row and handed
        -- activity are held only with its events, so the run held last is the events'. By the
        -- task's run as read without a lock: the run held is the one this batch locked last,
        -- and an item then refused finds the earlier items' writes made a little earlier.)
        IF v_item.run = v_held_run THEN
            v_hd_tasks := harvest._write_held(v_held_rows, v_ev_runs, v_ev_offsets, v_ev_types, v_ev_datas,
                v_hd_runs, v_hd_ids, v_hd_seqs, v_hd_cmds, p_worker_id, v_now);
            FOR v_i IN 1 .. coalesce(cardinality(v_hd_items), 0) LOOP
                v_decided[v_hd_items[v_i]] := harvest._decided_answer(v_hd_lasts[v_i], v_hd_statuses[v_i],
                                                                      v_hd_tasks[v_i:v_i]);
            END LOOP;
            v_held_rows := NULL;
            v_ev_runs := NULL;
            v_ev_offsets := NULL;
            v_ev_types := NULL;
            v_ev_datas := NULL;
            v_hd_items := NULL;
            v_hd_runs := NULL;
            v_hd_ids := NULL;
            v_hd_seqs := NULL;
            v_hd_cmds := NULL;
            v_hd_lasts := NULL;
            v_hd_statuses := NULL;
            v_held_run := NULL;
        END IF;
        IF v_item.run IS NOT NULL AND NOT v_bytes > v_limit
           AND (v_bytes < 402 OR NOT harvest._too_deep(v_item.result)) THEN
            IF v_item.run IS DISTINCT FROM v_locked_run THEN
                -- An item with a decision keeps the row its lock reads: the decision's checks
                -- and its application read it (a result alone reads nothing of it).
                IF v_item.decision IS NULL THEN
                    PERFORM 1 FROM harvest.executions AS e WHERE e.id = v_item.run FOR UPDATE;
                ELSE
                    -- (The row as one value, not its columns: see complete_workflow_tasks.)
                    v_execution := (SELECT e FROM harvest.executions AS e WHERE e.id = v_item.run FOR UPDATE);
                    v_row_read := true;
                END IF;
                v_locked_run := v_item.run;
            END IF;
            DELETE FROM harvest.tasks AS t
            WHERE t.id = v_item.id
              AND harvest._claimed_task_problem(t.kind, t.status, t.fencing_token, t.lease_expires_at,
                                                'activity', v_item.token, v_now) IS NULL
            -- The columns the item's recording reads (its run, for _may_decide_on_result and
            -- the append; its event's data, _activity_completed), not *: a RETURNING list is
            -- built again on every execution (a tuple descriptor of every column of tasks, per
            -- result; docs/performance.md, "Fan-out row, seventh cut").
            RETURNING t.id, t.execution_id, t.seq, t.attempt, t.lease_owner, t.started_at
            INTO v_task.id, v_task.execution_id, v_task.seq, v_task.attempt, v_task.lease_owner, v_task.started_at;
            v_deleted := FOUND;
        END IF;
        IF NOT v_deleted THEN
            IF v_item.run = v_locked_run THEN  -- a run's later item: its row is ours already
                v_try := harvest._try_lock_task_of_locked_run(v_item.id, v_item.token, 'activity');
            ELSE
                v_try := harvest._try_lock_claimed_task(v_item.id, v_item.token, 'activity');
            END IF;
            v_task := v_try.task;
            v_problem := v_try.problem;
            v_message := v_try.message;
            IF v_problem IS NULL THEN
                v_locked_run := v_task.execution_id;
                IF v_bytes > v_limit THEN
                    v_problem := 'too_large';
                    v_message := format('the result of activity task %s is %s bytes, over the payload '
                        'limit of %s bytes', v_item.id, v_bytes, v_limit);
                ELSIF v_bytes >= 402 AND harvest._too_deep(v_item.result) THEN
                    v_problem := 'too_deep';
                    v_message := format('the result of activity task %s: arrays and objects nest deeper than '
                        '200 levels', v_item.id);
                END IF;
            END IF;
        END IF;
        -- A run's gathered results go in before anything else touches it: before the
        -- next run's, and before a decision, which must see every result before it.
        IF v_problem IS NULL AND cardinality(v_run_types) > 0
           AND (v_task.execution_id IS DISTINCT FROM v_run OR v_item.decision IS NOT NULL) THEN
            v_handed[v_run_last] := harvest._record_activity_results(
                v_run, v_run_types, v_run_datas, p_worker_id, v_run_queues, p_workflow_lease_secs);
            v_run_types := ARRAY[]::text[];
            v_run_datas := ARRAY[]::jsonb[];
        END IF;
        v_ids := v_ids || v_item.id;
        v_outcomes := v_outcomes || coalesce(v_problem, 'completed');
        v_messages := v_messages || v_message;
        v_decision := v_item.decision;
        IF v_decision IS NOT NULL AND (jsonb_typeof(v_decision -> 'after') IS DISTINCT FROM 'number'
                                       OR jsonb_typeof(v_decision -> 'result_text') IS DISTINCT FROM 'string') THEN
            RAISE EXCEPTION 'the decision sent with task % needs "after" (a JSON number) and '
                '"result_text" (a JSON string), got %', v_item.id, v_decision USING ERRCODE = 'HR001';
        END IF;
        -- Owner mode: only the partition's owner decides ahead (at the epoch it sends,
        -- "owner_epoch") or is handed the woken workflow task; a result without them
        -- is recorded alone, a foreign writer's append.
        v_item_queues := v_queues;
        IF v_problem IS NULL AND v_owner_mode AND v_queues IS NOT NULL THEN
            IF v_decision IS NOT NULL AND harvest._check_owner(v_task.execution_id, p_worker_id,
                                                               (v_decision ->> 'owner_epoch')::bigint) IS NOT NULL THEN
                v_decision := NULL;
            END IF;
            IF v_decision IS NULL AND harvest._owner_epoch(
                   (SELECT e.workflow_id FROM harvest.executions AS e WHERE e.id = v_task.execution_id),
                   p_worker_id) IS NULL THEN
                v_item_queues := NULL;
            END IF;
        END IF;
        -- The run's row for a decision: as this item's lock read it when the task went by the
        -- one-statement way (since then only the task's DELETE ran, which does not write the
        -- row); read again when the full way took it, or an earlier item of the run locked it
        -- (its results or decision may have written the row since).
        IF v_problem IS NULL AND v_decision IS NOT NULL AND v_queues IS NOT NULL
           AND NOT (v_row_read AND v_deleted) THEN
            SELECT * INTO v_execution FROM harvest.executions AS e WHERE e.id = v_task.execution_id;
        END IF;
        IF v_problem IS NOT NULL THEN
            v_handed := v_handed || NULL::bigint;
            v_decided := v_decided || NULL::jsonb;
        ELSIF v_decision IS NOT NULL AND v_queues IS NOT NULL
              AND harvest._may_decide_on_result(v_execution, v_item.result,
                    (v_decision ->> 'after')::bigint, v_decision ->> 'result_text',
                    p_worker_id, v_queues) THEN
            -- The result's event goes in with the decision's (one row update for both);
            -- the decision is through it. _may_decide_on_result saw the run RUNNING and
            -- its history ending at "after".
            IF NOT v_deleted THEN
                DELETE FROM harvest.tasks AS t WHERE t.id = v_task.id;
            END IF;
            -- The held run rows go in before a decision that may act on another run (one of
            -- them, perhaps: a close's relay to its parent, a mutex grant, a signal).
            IF v_held_rows IS NOT NULL AND NOT harvest._acts_on_own_run(v_decision -> 'commands') THEN
                PERFORM harvest._update_held_rows(v_held_rows, p_worker_id);
                v_held_rows := NULL;
            END IF;
            v_applied := harvest._apply_decision(v_task.execution_id,
                (v_decision ->> 'after')::bigint + 1,
                v_decision -> 'commands', p_worker_id, p_event_cap, p_byte_cap,
                coalesce((v_decision ->> 'hand_off_slots')::integer, 0),
                ARRAY['ActivityCompleted'], ARRAY[harvest._activity_completed_data(v_task.seq, v_task.attempt,
                    v_task.lease_owner, v_task.started_at, v_item.result)],
                CASE WHEN v_owner_mode THEN (v_decision ->> 'owner_epoch')::bigint END,
                -- What this item read already: the row, the worker's queues, the limit, and the
                -- run's queue, which _may_decide_on_result found open to a hand-off at priority 0.
                v_execution, v_queues, v_limit, v_execution.queue, p_defer_events => v_batched,
                p_defer_hand => v_batched, p_now => v_now);
            IF v_applied.deferred_bytes IS NOT NULL THEN
                v_held_rows := v_held_rows || ROW(v_task.execution_id, v_applied.deferred_last,
                    cardinality(v_applied.deferred_types), v_applied.deferred_bytes, v_applied.deferred_through,
                    v_applied.deferred_hold, v_applied.deferred_status, v_applied.deferred_output,
                    v_applied.deferred_failure)::harvest.held_run_row;
            END IF;
            IF v_applied.caps_pending THEN
                -- Past a history cap (rare): the held rows go in, then the caps as _apply_decision
                -- checks them; a run they close keeps no handed activity.
                PERFORM harvest._update_held_rows(v_held_rows, p_worker_id);
                v_held_rows := NULL;
                v_cap := harvest._decide_history_caps(v_task.execution_id, p_event_cap, p_byte_cap, v_now);
                IF v_cap.capped THEN
                    v_applied.last_event_id := v_cap.last_event_id;
                    v_applied.execution_status := v_cap.execution_status;
                    v_applied.handed := ARRAY[]::harvest.worker_activity_task[];
                    v_applied.deferred_hand_seq := NULL;
                END IF;
            END IF;
            IF v_applied.deferred_hand_seq IS NOT NULL THEN
                v_hd_items := v_hd_items || (cardinality(v_decided) + 1);  -- (this item's, below)
                v_hd_runs := v_hd_runs || v_execution;
                v_hd_ids := v_hd_ids || v_execution.id;
                v_hd_seqs := v_hd_seqs || v_applied.deferred_hand_seq;
                v_hd_cmds := v_hd_cmds || v_applied.deferred_hand;
                v_hd_lasts := v_hd_lasts || v_applied.last_event_id;
                v_hd_statuses := v_hd_statuses || v_applied.execution_status;
            END IF;
            v_n := cardinality(v_applied.deferred_types);
            IF v_n > 0 THEN
                v_ev_types := v_ev_types || v_applied.deferred_types;
                v_ev_datas := v_ev_datas || v_applied.deferred_datas;
                v_ev_runs := v_ev_runs || array_fill(v_task.execution_id, ARRAY[v_n]);
                v_ev_offsets := v_ev_offsets || array_fill(v_applied.deferred_last - cardinality(v_ev_types),
                                                           ARRAY[v_n]);
                v_held_run := v_task.execution_id;
            END IF;
            v_handed := v_handed || NULL::bigint;
            -- The answer, built once with its handed tasks' rows inside (a held one's as it goes
            -- in, above: one build, where a build and a jsonb_set were two).
            v_decided := v_decided || CASE WHEN v_applied.deferred_hand_seq IS NULL THEN harvest._decided_answer(
                v_applied.last_event_id, v_applied.execution_status, v_applied.handed) END;
        ELSE
            -- Gathered: one append, one row update and one wake-up for all of a run's
            -- results in this batch, not one each (a fan-in of many activities).
            IF NOT v_deleted THEN
                DELETE FROM harvest.tasks AS t WHERE t.id = v_task.id;
            END IF;
            IF cardinality(v_run_types) = 0 THEN
                v_run := v_task.execution_id;
                v_run_queues := v_item_queues;
            ELSIF v_item_queues IS NULL THEN
                v_run_queues := NULL;  -- one result that may not be handed: none is
            END IF;
            v_run_types := v_run_types || 'ActivityCompleted'::text;
            v_run_datas := v_run_datas || harvest._activity_completed_data(v_task.seq, v_task.attempt,
                v_task.lease_owner, v_task.started_at, v_item.result);
            v_handed := v_handed || NULL::bigint;
            v_decided := v_decided || NULL::jsonb;
            v_run_last := cardinality(v_handed);
        END IF;
    END LOOP;
    IF cardinality(v_run_types) > 0 THEN
        v_handed[v_run_last] := harvest._record_activity_results(
            v_run, v_run_types, v_run_datas, p_worker_id, v_run_queues, p_workflow_lease_secs);
    END IF;
    IF v_held_run IS NOT NULL THEN  -- (something is held: a row or a handed activity only with its events)
        v_hd_tasks := harvest._write_held(v_held_rows, v_ev_runs, v_ev_offsets, v_ev_types, v_ev_datas,
            v_hd_runs, v_hd_ids, v_hd_seqs, v_hd_cmds, p_worker_id, v_now);
        FOR v_i IN 1 .. coalesce(cardinality(v_hd_items), 0) LOOP
            v_decided[v_hd_items[v_i]] := harvest._decided_answer(v_hd_lasts[v_i], v_hd_statuses[v_i],
                                                                  v_hd_tasks[v_i:v_i]);
        END LOOP;
    END IF;
    -- Handed tasks are read after the loop, so they carry this whole batch's events.
    -- (RETURN NEXT by primary key: a set query here would be planned on every call.)
    FOR v_i IN 1 .. cardinality(v_ids) LOOP
        task_id := v_ids[v_i];
        outcome := v_outcomes[v_i];
        message := v_messages[v_i];
        decided := v_decided[v_i];
        handed := NULL;
        IF v_handed[v_i] IS NOT NULL THEN
            handed := harvest._handed_task(v_handed[v_i], p_worker_id, v_owner_mode);
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION harvest.fail_activity(
    p_task_id bigint, p_fencing_token bigint, p_failure jsonb
)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
    v_task harvest.tasks;
BEGIN
    IF p_failure IS NULL OR jsonb_typeof(p_failure) <> 'object' THEN
        RAISE EXCEPTION 'failure must be a JSON object {error_type, message, non_retryable, details}'
            USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._check_payload(format('the failure of activity task %s', p_task_id), p_failure,
                                   harvest._payload_limit());
    v_task := harvest._lock_claimed_task(p_task_id, p_fencing_token, 'activity');
    SELECT * INTO v_execution FROM harvest.executions WHERE id = v_task.execution_id;
    RETURN harvest._fail_activity_attempt(v_execution, v_task, p_failure);
END;
$$;

-- Extend the lease (never past start_to_close nor schedule_to_close), keep the details for the next
-- attempt, and answer whether the run has been asked to cancel.
CREATE OR REPLACE FUNCTION harvest.heartbeat_activity(
    p_task_id bigint, p_fencing_token bigint, p_details jsonb DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_task harvest.tasks;
    v_now timestamptz := harvest.now();
    v_cancel boolean;
BEGIN
    PERFORM harvest._check_payload(format('the heartbeat details of activity task %s', p_task_id),
                                   p_details, harvest._payload_limit());
    SELECT * INTO v_task FROM harvest.tasks AS t WHERE t.id = p_task_id AND t.kind = 'activity' FOR UPDATE;
    IF NOT FOUND OR v_task.status <> 'running' OR v_task.fencing_token IS DISTINCT FROM p_fencing_token THEN
        RAISE EXCEPTION 'task % is no longer held by this worker', p_task_id USING ERRCODE = 'HR004';
    END IF;
    IF v_task.lease_expires_at < v_now THEN
        RAISE EXCEPTION 'task %: the lease expired at %', p_task_id, harvest._iso_time(v_task.lease_expires_at)
            USING ERRCODE = 'HR004';
    END IF;
    UPDATE harvest.tasks
    SET heartbeat_at = v_now,
        heartbeat_details = coalesce(p_details, heartbeat_details),
        lease_expires_at = least(
            started_at + make_interval(secs => coalesce((options ->> 'start_to_close')::double precision, 300)),
            v_now + make_interval(secs => coalesce((options ->> 'heartbeat_timeout')::double precision,
                                                   (options ->> 'start_to_close')::double precision, 300)),
            deadline_at)  -- (never past schedule_to_close; NULL: none)
    WHERE id = p_task_id;
    SELECT e.cancel_requested INTO v_cancel FROM harvest.executions AS e WHERE e.id = v_task.execution_id;
    RETURN coalesce(v_cancel, false);
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.complete_activity IS
'Record a claimed activity task''s result under its fencing token and wake its workflow in the same transaction; '
'a stale token or lost lease raises HR004, a result over payload_limit() HR008. Called by workers (role '
'harvest_worker).';
COMMENT ON FUNCTION harvest.complete_activities IS
'A worker''s group commit of activity results (and of decisions made on them): each item completes or is refused '
'on its own (outcome completed, too_large, too_deep or the lock problem), in one transaction. Called by the Python worker '
'(role harvest_worker).';
COMMENT ON FUNCTION harvest.fail_activity IS
'Fail one attempt of a claimed activity task: retried after its backoff (or the failure''s next_retry_delay, in'
' seconds), dead-lettered or failed for good per its retry policy; returns retry_scheduled, dead_lettered or failed. Called by workers (role harvest_worker); a '
'stale token raises HR004.';
COMMENT ON FUNCTION harvest.heartbeat_activity IS
'Extend a running activity''s lease (never past start_to_close) and keep its details for the next attempt; '
'returns whether the run was asked to cancel, raises HR004 once the task is no longer this claim''s. Called by '
'workers (role harvest_worker).';
