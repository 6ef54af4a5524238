-- Queries and updates: messages a worker answers from a running workflow's state.
--
-- A query is a row in harvest.query_requests; a worker polling the run's task
-- queue claims it, rebuilds the workflow's state (its sticky cache or a replay of
-- the history), runs the handler and answers. Nothing is written to the history.
--
-- An update is a row too. The worker runs the validator the same way; a rejection
-- is an answer and writes nothing else. An accepted update becomes an
-- UpdateAccepted{update_id, name, input} resolution event (accept_update), the
-- workflow runs its handler when that event is delivered, and the handler's end
-- is the command complete_update -> UpdateCompleted{seq, update_id, result,
-- failure} (applied by complete_workflow_task through _complete_update), which
-- also answers the request rows of that update id.
--
-- Notifications: harvest_queries (payload: the task queue) when a request needs
-- a worker, harvest_query_answers (payload: the request id) when a request's
-- status changed. See docs/internals.md, "Queries and updates".

CREATE OR REPLACE FUNCTION harvest._notify_query_answer(p_request_id bigint)
RETURNS void
LANGUAGE sql
AS $$
    SELECT pg_notify('harvest_query_answers', p_request_id::text);
$$;

CREATE OR REPLACE FUNCTION harvest._check_query_args(p_name text, p_timeout_secs double precision)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_name IS NULL OR btrim(p_name) = '' THEN
        RAISE EXCEPTION 'query or update name is empty' USING ERRCODE = 'HR001';
    END IF;
    IF p_timeout_secs IS NULL OR NOT (p_timeout_secs > 0 AND p_timeout_secs <= 86400) THEN
        RAISE EXCEPTION 'timeout % is out of range: give seconds in (0, 86400]',
            harvest._num_text(p_timeout_secs)
            USING ERRCODE = 'HR001';
    END IF;
END;
$$;

-- Ask a worker to answer query p_name on the run. Any run that exists can be
-- queried (a finished one is answered from a replay of its history). Returns the
-- request id; wait for harvest_query_answers with it, then read get_query_request.
CREATE OR REPLACE FUNCTION harvest.request_query(
    p_execution_id uuid, p_name text, p_arg jsonb DEFAULT 'null'::jsonb,
    p_timeout_secs double precision DEFAULT 10
)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_execution harvest.executions;
    v_queue text;
    v_id bigint;
BEGIN
    PERFORM harvest._check_query_args(p_name, p_timeout_secs);
    PERFORM harvest._check_sent(format('the argument of query %s', p_name), p_arg,
                                   harvest._payload_limit());
    SELECT * INTO v_execution FROM harvest.executions AS e WHERE e.id = p_execution_id;
    IF NOT FOUND THEN
        PERFORM harvest._execution_not_found(p_execution_id);  -- HR002 (retention.sql)
    END IF;
    PERFORM harvest._refuse_moved(v_execution, 'query');  -- a seal would answer from a stale copy
    v_queue := v_execution.queue;
    INSERT INTO harvest.query_requests (execution_id, kind, name, arg, queue, created_at, expires_at)
    VALUES (p_execution_id, 'query', p_name, coalesce(p_arg, 'null'::jsonb), v_queue, v_now,
            v_now + make_interval(secs => p_timeout_secs))
    RETURNING id INTO v_id;
    PERFORM pg_notify('harvest_queries', v_queue);
    RETURN v_id;
END;
$$;

-- Ask for update p_name on a running run. p_update_id (minted when NULL) makes it
-- idempotent: asking again for the same id returns the same request, or, once
-- the request row is gone, a fresh row answered from the history (accepted or
-- completed) of this run or of the runs it continued from (c_chain_runs
-- runs in all). Only an update never seen before goes to a worker
-- for validation. An id seen before under another update name is refused (HR001);
-- the argument of a later ask is not compared (the first ask's was applied).
CREATE OR REPLACE FUNCTION harvest.request_update(
    p_execution_id uuid, p_name text, p_arg jsonb DEFAULT 'null'::jsonb,
    p_update_id text DEFAULT NULL, p_timeout_secs double precision DEFAULT 30,
    -- The client's update span (W3C traceparent): the task that runs the handler links to it.
    p_traceparent text DEFAULT NULL
)
RETURNS TABLE (request_id bigint, update_id text, status text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_execution harvest.executions;
    v_update_id text := coalesce(p_update_id, gen_random_uuid()::text);
    v_request harvest.query_requests;
    -- How far back an id is looked for: this run and the runs it continued from, this many in
    -- all (a retry that reaches the successor of a rotated run; docs/messages.md).
    c_chain_runs CONSTANT integer := 16;
    v_chain uuid[] := ARRAY[p_execution_id];
    v_accepted_name text;
    v_accepted_in uuid;
    v_accepted_in_status text;
    v_done jsonb;
    v_status text := 'pending';
    v_answer jsonb;
    v_error jsonb;
BEGIN
    PERFORM harvest._check_query_args(p_name, p_timeout_secs);
    IF v_update_id = '' THEN
        RAISE EXCEPTION 'update id is empty' USING ERRCODE = 'HR001';
    END IF;
    -- Bounded as a workflow id is: the id is a key of query_requests_update and events_update_id,
    -- and a longer one failed their insert with the index's own error (its name, its page size).
    IF octet_length(v_update_id) > 1000 THEN
        RAISE EXCEPTION 'update id is % bytes, over the 1000 an update id may have', octet_length(v_update_id)
            USING ERRCODE = 'HR001', HINT = 'an update id names one update: send a UUID or a short key';
    END IF;
    PERFORM harvest._check_sent(format('the argument of update %s', p_name), p_arg,
                                   harvest._payload_limit());
    PERFORM harvest._check_traceparent(p_traceparent);
    v_execution := harvest._lock_execution(p_execution_id);
    PERFORM harvest._refuse_moved(v_execution, 'update');
    DELETE FROM harvest.query_requests AS r
    WHERE r.execution_id = p_execution_id AND r.kind = 'update' AND r.update_id = v_update_id
      AND r.expires_at <= v_now;
    SELECT * INTO v_request FROM harvest.query_requests AS r
    WHERE r.execution_id = p_execution_id AND r.kind = 'update' AND r.update_id = v_update_id
    FOR UPDATE;
    IF FOUND THEN
        IF v_request.name <> p_name THEN
            RAISE EXCEPTION 'update id % is already used by update "%" on execution %, not by "%"',
                v_update_id, v_request.name, p_execution_id, p_name USING ERRCODE = 'HR001',
                HINT = 'give each update its own update_id';
        END IF;
        UPDATE harvest.query_requests AS r
        SET expires_at = greatest(r.expires_at, v_now + make_interval(secs => p_timeout_secs))
        WHERE r.id = v_request.id;
        RETURN QUERY SELECT v_request.id, v_update_id, v_request.status;
        RETURN;
    END IF;
    -- The history is the truth for an update id seen before: this run's, or that of a run it
    -- continued from (an update_with_start, or an update by workflow_id, retried after the run
    -- rotated reaches the successor). A run that never rotated is one probe of events_update_id.
    IF v_execution.continued_from IS NOT NULL THEN
        WITH RECURSIVE back AS (
            SELECT v_execution.id AS id, v_execution.continued_from AS continued_from, 1 AS runs
            UNION ALL
            SELECT e.id, e.continued_from, back.runs + 1
            FROM back JOIN harvest.executions AS e ON e.id = back.continued_from
            WHERE back.runs < c_chain_runs
        )
        SELECT array_agg(back.id ORDER BY back.runs) INTO v_chain FROM back;
    END IF;
    -- The newest run's events first (a run that took the update on holds it as well).
    SELECT (array_agg(ev.event_data ->> 'name' ORDER BY c.runs)
                FILTER (WHERE ev.event_type = 'UpdateAccepted'))[1],
           (array_agg(c.id ORDER BY c.runs) FILTER (WHERE ev.event_type = 'UpdateAccepted'))[1],
           (array_agg(ev.event_data ORDER BY c.runs) FILTER (WHERE ev.event_type = 'UpdateCompleted'))[1]
    INTO v_accepted_name, v_accepted_in, v_done
    FROM unnest(v_chain) WITH ORDINALITY AS c (id, runs)
    JOIN harvest.events AS ev ON ev.execution_id = c.id
    WHERE ev.event_type IN ('UpdateAccepted', 'UpdateCompleted')
      AND ev.event_data ->> 'update_id' = v_update_id;
    -- One id is one update: the same id under another name would get that update's outcome.
    IF v_accepted_in IS NOT NULL AND v_accepted_name IS DISTINCT FROM p_name THEN
        RAISE EXCEPTION 'update id % is already used by update "%" on execution %, not by "%"',
            v_update_id, v_accepted_name, v_accepted_in, p_name USING ERRCODE = 'HR001',
            HINT = 'give each update its own update_id';
    END IF;
    IF v_done IS NOT NULL THEN
        v_answer := v_done -> 'result';
        v_error := nullif(v_done -> 'failure', 'null'::jsonb);
        v_status := CASE WHEN v_error IS NULL THEN 'completed' ELSE 'failed' END;
    ELSIF v_accepted_in IS NOT NULL THEN
        v_accepted_in_status := CASE WHEN v_accepted_in = v_execution.id THEN v_execution.status
            ELSE (SELECT e.status FROM harvest.executions AS e WHERE e.id = v_accepted_in) END;
        IF v_accepted_in_status IN ('RUNNING', 'PAUSED') THEN
            v_status := 'accepted';
        ELSE
            v_status := 'failed';
            v_error := jsonb_build_object('error_type', 'WorkflowNotRunning', 'non_retryable', true,
                'details', NULL, 'message', format('the run ended %s before update %s completed',
                                                   v_accepted_in_status, v_update_id));
        END IF;
    ELSIF v_execution.status = 'PAUSED' THEN
        RAISE EXCEPTION 'cannot update execution %: it is PAUSED (an update needs the workflow to run)',
            p_execution_id USING ERRCODE = 'HR023',
            HINT = 'resume it first (harvest workflow resume, harvest.resume_workflow)';
    ELSIF v_execution.status <> 'RUNNING' THEN
        RAISE EXCEPTION 'cannot update execution %: it is already %', p_execution_id, v_execution.status
            USING ERRCODE = 'HR005', HINT = 'update_with_start starts a new run when none is running';
    END IF;
    INSERT INTO harvest.query_requests (execution_id, kind, name, arg, update_id, queue, status,
                                        answer, error, created_at, expires_at, answered_at, traceparent)
    VALUES (p_execution_id, 'update', p_name, coalesce(p_arg, 'null'::jsonb), v_update_id,
            v_execution.queue, v_status, v_answer, v_error, v_now,
            v_now + make_interval(secs => p_timeout_secs),
            CASE WHEN v_status IN ('completed', 'failed') THEN v_now END, p_traceparent)
    RETURNING id INTO v_request.id;
    IF v_status = 'pending' THEN
        PERFORM pg_notify('harvest_queries', v_execution.queue);
    END IF;
    RETURN QUERY SELECT v_request.id, v_update_id, v_status;
END;
$$;

-- Attach to the running run of (workflow_name, workflow_id), starting one when
-- none runs, and request the update on it, in one transaction.
CREATE OR REPLACE FUNCTION harvest.update_with_start(
    p_workflow_name text,
    p_workflow_id text,
    p_update_name text,
    p_update_arg jsonb DEFAULT 'null'::jsonb,
    p_input jsonb DEFAULT '[]'::jsonb,
    p_queue text DEFAULT NULL,  -- NULL: the workflow's registered queue (start.sql, _start_queue)
    p_update_id text DEFAULT NULL,
    p_timeout_secs double precision DEFAULT 30,
    p_search_attributes jsonb DEFAULT '{}'::jsonb,
    -- The caller's span (W3C traceparent): for the run it starts and the update.
    p_traceparent text DEFAULT NULL
)
RETURNS TABLE (
    execution_id uuid, workflow_id text, started_fresh boolean, request_id bigint,
    update_id text, status text
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_started record;
    v_request record;
BEGIN
    IF p_workflow_id IS NULL OR p_workflow_id = '' THEN
        RAISE EXCEPTION 'update_with_start needs a workflow_id' USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._check_query_args(p_update_name, p_timeout_secs);
    SELECT * INTO v_started FROM harvest.start_workflow(
        p_workflow_name => p_workflow_name, p_input => p_input, p_workflow_id => p_workflow_id,
        p_queue => p_queue, p_reuse_policy => 'terminate_if_running',
        p_conflict_policy => 'use_existing', p_search_attributes => p_search_attributes,
        p_traceparent => p_traceparent);
    SELECT * INTO v_request FROM harvest.request_update(v_started.execution_id, p_update_name,
        p_update_arg, p_update_id, p_timeout_secs, p_traceparent);
    RETURN QUERY SELECT v_started.execution_id, v_started.workflow_id, v_started.started_fresh,
        v_request.request_id, v_request.update_id, v_request.status;
END;
$$;

-- A worker claims open requests of its queues (pending ones, and running ones
-- whose claimer's lease ran out), oldest first, never waiting on a lock.
CREATE OR REPLACE FUNCTION harvest.claim_query_requests(
    p_worker_id text, p_queues text[], p_limit integer DEFAULT 10,
    p_lease_secs double precision DEFAULT 30
)
RETURNS TABLE (
    request_id bigint, kind text, execution_id uuid, workflow_name text, workflow_id text,
    queue text, execution_status text, name text, arg jsonb, update_id text,
    expires_at timestamptz, traceparent text
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
BEGIN
    IF p_worker_id IS NULL OR p_worker_id = '' THEN
        RAISE EXCEPTION 'worker id is empty' USING ERRCODE = 'HR001';
    END IF;
    IF p_queues IS NULL OR cardinality(p_queues) = 0 THEN
        RAISE EXCEPTION 'no queues given' USING ERRCODE = 'HR001';
    END IF;
    -- The claims' one rule (as claim_tasks): 1..1000 requests, a lease of at most a day. A
    -- limit of 2^31-1 locked every open request in one call; a lease of 1e10 s held a request
    -- past its client's deadline, out of any other worker's reach, and 1e300 failed as 22008.
    PERFORM harvest._check_limit('claim_query_requests', p_limit, 1000);
    PERFORM harvest._check_lease('query request lease', p_lease_secs);
    -- Requests waiting for their run's first workflow task (wait_for_first_workflow_task) whose
    -- run has completed it or ended since: pending again, for this claim. Woken by the claims,
    -- which a worker makes at every wake-up and poll (the parking worker polls sooner), not by
    -- the decision or the close: every run's first decision and end would pay for what is rare
    -- (a query before it); a claim pays one probe of an index that is almost always empty.
    UPDATE harvest.query_requests AS r SET status = 'pending'
    FROM harvest.executions AS e
    WHERE r.status = 'waiting' AND r.queue = ANY(p_queues) AND e.id = r.execution_id
      AND (e.status NOT IN ('RUNNING', 'PAUSED')
           OR EXISTS (SELECT 1 FROM harvest.events AS ev
                      WHERE ev.execution_id = r.execution_id AND ev.event_type = 'WorkflowTaskCompleted'));
    RETURN QUERY
    WITH picked AS (
        SELECT r.id FROM harvest.query_requests AS r
        WHERE r.queue = ANY(p_queues) AND r.status IN ('pending', 'running')
          AND (r.status = 'pending' OR r.lease_expires_at < v_now) AND r.expires_at > v_now
          AND NOT r.unknown_to ? p_worker_id  -- it lacks the run's workflow (release_query_request)
        ORDER BY r.queue, r.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE harvest.query_requests AS r
        SET status = 'running', claimed_by = p_worker_id,
            lease_expires_at = v_now + make_interval(secs => p_lease_secs)
        FROM picked WHERE r.id = picked.id
        RETURNING r.*
    )
    SELECT c.id, c.kind, c.execution_id, e.workflow_name, e.workflow_id, e.queue, e.status,
           c.name, c.arg, c.update_id, c.expires_at, c.traceparent
    FROM claimed AS c JOIN harvest.executions AS e ON e.id = c.execution_id
    ORDER BY c.id;
END;
$$;

-- A request this worker claimed and still holds, locked (NULL when it expired, was answered,
-- or another worker claimed it after this one's lease ran out), and p_error, the answer a
-- worker gives it, checked: a JSON object within the payload limit (HR001, HR008).
CREATE OR REPLACE FUNCTION harvest._claimed_request(p_request_id bigint, p_worker_id text, p_error jsonb)
RETURNS harvest.query_requests
LANGUAGE plpgsql
AS $$
DECLARE
    v_request harvest.query_requests;
BEGIN
    SELECT * INTO v_request FROM harvest.query_requests AS r WHERE r.id = p_request_id FOR UPDATE;
    IF NOT FOUND OR v_request.status <> 'running' OR v_request.claimed_by IS DISTINCT FROM p_worker_id THEN
        RETURN NULL;
    END IF;
    IF p_error IS NOT NULL AND jsonb_typeof(p_error) <> 'object' THEN
        RAISE EXCEPTION 'error must be a JSON object {error_type, message, ...}' USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._check_payload(format('the error of %s %s', v_request.kind, v_request.name),
                                   p_error, harvest._payload_limit());
    RETURN v_request;
END;
$$;

-- Answer a claimed request: a query's answer (p_error NULL: completed, else
-- failed), or an update's rejection (p_error required: rejected). Returns the new
-- status, or NULL when the request is no longer this worker's to answer (it
-- expired, or another worker claimed it after this one's lease ran out).
CREATE OR REPLACE FUNCTION harvest.answer_query(
    p_request_id bigint, p_worker_id text, p_answer jsonb DEFAULT NULL, p_error jsonb DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_request harvest.query_requests := harvest._claimed_request(p_request_id, p_worker_id, p_error);
    v_status text;
BEGIN
    IF v_request.id IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM harvest._check_payload(format('the answer to %s %s', v_request.kind, v_request.name),
                                   p_answer, harvest._payload_limit());
    IF v_request.kind = 'update' THEN
        IF p_error IS NULL THEN
            RAISE EXCEPTION 'request % is an update: accept it with accept_update(), or reject it '
                'with an error', p_request_id USING ERRCODE = 'HR001';
        END IF;
        v_status := 'rejected';
    ELSE
        v_status := CASE WHEN p_error IS NULL THEN 'completed' ELSE 'failed' END;
    END IF;
    UPDATE harvest.query_requests AS r
    SET status = v_status, answer = CASE WHEN p_error IS NULL THEN coalesce(p_answer, 'null'::jsonb) END,
        error = p_error, answered_at = harvest.now(), lease_expires_at = NULL
    WHERE r.id = p_request_id;
    PERFORM harvest._notify_query_answer(p_request_id);
    RETURN v_status;
END;
$$;

-- A claimed request whose run has not completed its first workflow task: the state a query or
-- a validator reads does not exist yet (the worker's replay found no WorkflowTaskCompleted).
-- While the run is live and still has none, the request waits (status 'waiting', out of every
-- claim, no lease) until a claim finds the run's first decision or its end and sets it pending
-- again (claim_query_requests) or its deadline passes; else (the task completed meanwhile, the
-- run ended) it is pending again at once.
-- Returns 'waiting' or 'pending', or NULL when the request is no longer this worker's.
CREATE OR REPLACE FUNCTION harvest.wait_for_first_workflow_task(p_request_id bigint, p_worker_id text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_status text;
    v_request harvest.query_requests;
BEGIN
    -- (No lock on the run's row: a first decision that commits after this read is found by the
    -- next claim of the queue, which sets the parked request pending again.)
    SELECT e.status INTO v_status
    FROM harvest.query_requests AS r JOIN harvest.executions AS e ON e.id = r.execution_id
    WHERE r.id = p_request_id;
    v_request := harvest._claimed_request(p_request_id, p_worker_id, NULL);
    IF v_request.id IS NULL THEN
        RETURN NULL;
    END IF;
    IF v_status IN ('RUNNING', 'PAUSED') AND NOT EXISTS (
        SELECT 1 FROM harvest.events AS ev
        WHERE ev.execution_id = v_request.execution_id AND ev.event_type = 'WorkflowTaskCompleted'
    ) THEN
        UPDATE harvest.query_requests AS r
        SET status = 'waiting', claimed_by = NULL, lease_expires_at = NULL
        WHERE r.id = p_request_id;
        RETURN 'waiting';
    END IF;
    UPDATE harvest.query_requests AS r
    SET status = 'pending', claimed_by = NULL, lease_expires_at = NULL
    WHERE r.id = p_request_id;
    PERFORM pg_notify('harvest_queries', v_request.queue);
    RETURN 'pending';
END;
$$;

-- A claimed request the claiming worker cannot answer for want of code a newer deploy has (a
-- rolling deploy: an old worker won the claim): its App lacks the run's workflow, or its replay
-- knows no handler of that name. The worker is kept in the request's unknown_to, which its
-- claims skip, and the request goes back to the queue while a live worker polling it has not
-- tried it (harvest._unknown_to: the one rule of workflow tasks, activities and requests);
-- else it is answered, a query failed and an update rejected, with p_error (the worker's own
-- answer: UnknownQuery, UnknownUpdate), or the one an earlier decliner gave (kept on the
-- pending row), or else UnknownWorkflow naming the workflow. Returns
-- 'pending', 'failed' or 'rejected', or NULL when the request is no longer this worker's.
CREATE OR REPLACE FUNCTION harvest.release_query_request(
    p_request_id bigint, p_worker_id text, p_error jsonb DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_request harvest.query_requests := harvest._claimed_request(p_request_id, p_worker_id, p_error);
    v_workflow_name text;
    v_unknown_to jsonb;
    v_untried_live boolean;
    v_status text;
BEGIN
    IF v_request.id IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT e.workflow_name INTO v_workflow_name FROM harvest.executions AS e WHERE e.id = v_request.execution_id;
    SELECT u.unknown_to, u.untried_live INTO v_unknown_to, v_untried_live
    FROM harvest._unknown_to(v_request.unknown_to, p_worker_id, v_request.queue) AS u;
    IF v_untried_live THEN
        UPDATE harvest.query_requests AS r
        SET status = 'pending', claimed_by = NULL, lease_expires_at = NULL, unknown_to = v_unknown_to,
            error = coalesce(p_error, r.error)  -- the answer if no worker is left (a handler's beats none)
        WHERE r.id = p_request_id;
        PERFORM pg_notify('harvest_queries', v_request.queue);
        RETURN 'pending';
    END IF;
    v_status := CASE WHEN v_request.kind = 'update' THEN 'rejected' ELSE 'failed' END;
    UPDATE harvest.query_requests AS r
    SET status = v_status, answered_at = harvest.now(), lease_expires_at = NULL, unknown_to = v_unknown_to,
        error = coalesce(p_error, v_request.error, jsonb_build_object('error_type', 'UnknownWorkflow', 'non_retryable', true,
            'message', format('no live worker polling task queue %L registers workflow %L (%s claimed the %s '
                              'without it): start a worker whose App registers it, then ask again',
                              v_request.queue, v_workflow_name, jsonb_array_length(v_unknown_to)
                              || CASE WHEN jsonb_array_length(v_unknown_to) = 1 THEN ' worker' ELSE ' workers' END,
                              v_request.kind),
            'details', jsonb_build_object('workflow_name', v_workflow_name, 'queue', v_request.queue,
                                          'unknown_to', v_unknown_to)))
    WHERE r.id = p_request_id;
    PERFORM harvest._notify_query_answer(p_request_id);
    RETURN v_status;
END;
$$;

-- The validator passed: record UpdateAccepted once per update id and wake the
-- workflow, in one transaction. Returns 'accepted'; 'rejected' when the run has
-- ended meanwhile (the request is answered with WorkflowNotRunning); NULL when the
-- request is no longer this worker's.
CREATE OR REPLACE FUNCTION harvest.accept_update(p_request_id bigint, p_worker_id text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution_id uuid;
    v_execution harvest.executions;
    v_request harvest.query_requests;
BEGIN
    SELECT r.execution_id INTO v_execution_id FROM harvest.query_requests AS r WHERE r.id = p_request_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_execution := harvest._lock_execution(v_execution_id);
    SELECT * INTO v_request FROM harvest.query_requests AS r WHERE r.id = p_request_id FOR UPDATE;
    IF NOT FOUND OR v_request.status <> 'running' OR v_request.claimed_by IS DISTINCT FROM p_worker_id THEN
        RETURN NULL;
    END IF;
    IF v_request.kind <> 'update' THEN
        RAISE EXCEPTION 'request % is a query, not an update', p_request_id USING ERRCODE = 'HR001';
    END IF;
    IF v_execution.status NOT IN ('RUNNING', 'PAUSED') THEN  -- a paused run gets it on resume
        UPDATE harvest.query_requests AS r
        SET status = 'rejected', answered_at = harvest.now(), lease_expires_at = NULL,
            error = jsonb_build_object('error_type', 'WorkflowNotRunning', 'non_retryable', true,
                'details', NULL, 'message', format('cannot update execution %s: it is already %s',
                                                   v_execution.id, v_execution.status))
        WHERE r.id = p_request_id;
        PERFORM harvest._notify_query_answer(p_request_id);
        RETURN 'rejected';
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM harvest.events AS ev
        WHERE ev.execution_id = v_execution.id AND ev.event_type = 'UpdateAccepted'
          AND ev.event_data ->> 'update_id' = v_request.update_id
    ) THEN
        PERFORM harvest._append_event(v_execution.id, 'UpdateAccepted', jsonb_build_object(
            'update_id', v_request.update_id, 'name', v_request.name, 'input', v_request.arg)
            || CASE WHEN v_request.traceparent IS NULL THEN '{}'::jsonb
                    ELSE jsonb_build_object('traceparent', v_request.traceparent) END);
        PERFORM harvest._ensure_workflow_task(v_execution.id);
    END IF;
    UPDATE harvest.query_requests AS r
    SET status = 'accepted', lease_expires_at = NULL
    WHERE r.id = p_request_id;
    PERFORM harvest._notify_query_answer(p_request_id);
    RETURN 'accepted';
END;
$$;

-- Command complete_update (called by complete_workflow_task, which holds the run's
-- lock): UpdateCompleted{seq, update_id, result, failure}, and the update's open
-- request rows answered with it.
CREATE OR REPLACE FUNCTION harvest._complete_update(
    p_execution harvest.executions, p_seq integer, p_command jsonb
)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_update_id text := harvest._require(p_command, 'update_id', 'string') #>> '{}';
    v_failure jsonb := nullif(p_command -> 'failure', 'null'::jsonb);
    v_request_id bigint;
BEGIN
    IF v_failure IS NOT NULL AND jsonb_typeof(v_failure) <> 'object' THEN
        RAISE EXCEPTION 'command complete_update needs "failure" as a JSON object or null'
            USING ERRCODE = 'HR001';
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM harvest.events AS ev
        WHERE ev.execution_id = p_execution.id AND ev.event_type = 'UpdateAccepted'
          AND ev.event_data ->> 'update_id' = v_update_id
    ) THEN
        RAISE EXCEPTION 'complete_update: update % was never accepted by execution %', v_update_id,
            p_execution.id USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._append_event(p_execution.id, 'UpdateCompleted', jsonb_build_object(
        'seq', p_seq, 'update_id', v_update_id,
        'result', CASE WHEN v_failure IS NULL THEN coalesce(p_command -> 'result', 'null'::jsonb) END,
        'failure', v_failure));
    FOR v_request_id IN
        UPDATE harvest.query_requests AS r
        SET status = CASE WHEN v_failure IS NULL THEN 'completed' ELSE 'failed' END,
            answer = CASE WHEN v_failure IS NULL THEN coalesce(p_command -> 'result', 'null'::jsonb) END,
            error = v_failure, answered_at = harvest.now(), lease_expires_at = NULL
        WHERE r.execution_id = p_execution.id AND r.kind = 'update' AND r.update_id = v_update_id
          AND r.status IN ('pending', 'running', 'accepted')
        RETURNING r.id
    LOOP
        PERFORM harvest._notify_query_answer(v_request_id);
    END LOOP;
END;
$$;

-- A request and what a waiting client needs besides: the run's status (an update
-- still 'accepted' on a finished run will never complete), how many live
-- workers poll the run's queue (none: nobody will answer), and for a request waiting for the
-- run's first workflow task (status 'waiting') that task: waiting_for {task_status, lease_owner,
-- lease_owner_health, lease_expires_at, due_at, attempt, last_failure {error_type, message}}
-- (task_status NULL: the run has no workflow task queued), else NULL.
CREATE OR REPLACE FUNCTION harvest.get_query_request(p_request_id bigint)
RETURNS TABLE (
    request_id bigint, kind text, execution_id uuid, name text, update_id text, status text,
    answer jsonb, error jsonb, created_at timestamptz, expires_at timestamptz, answered_at timestamptz,
    claimed_by text, queue text, execution_status text, live_workers integer, waiting_for jsonb
)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN QUERY
    SELECT r.id, r.kind, r.execution_id, r.name, r.update_id, r.status, r.answer, r.error,
           r.created_at, r.expires_at, r.answered_at, r.claimed_by, r.queue, e.status,
           (SELECT count(*)::integer FROM harvest.workers AS w
            WHERE w.status = 'active' AND r.queue = ANY(w.queues) AND harvest._worker_health(w) = 'healthy'),
           CASE WHEN r.status = 'waiting' THEN coalesce(
               (SELECT jsonb_build_object(
                    'task_status', t.status, 'lease_owner', t.lease_owner,
                    'lease_owner_health', (SELECT harvest._worker_health(w) FROM harvest.workers AS w
                                           WHERE w.id = t.lease_owner),
                    'lease_expires_at', t.lease_expires_at, 'due_at', t.due_at, 'attempt', t.attempt,
                    'last_failure', CASE WHEN t.last_failure IS NOT NULL THEN jsonb_build_object(
                        'error_type', t.last_failure -> 'error_type', 'message', t.last_failure -> 'message') END)
                FROM harvest.tasks AS t WHERE t.execution_id = r.execution_id AND t.kind = 'workflow'),
               jsonb_build_object('task_status', NULL)) END
    FROM harvest.query_requests AS r JOIN harvest.executions AS e ON e.id = r.execution_id
    WHERE r.id = p_request_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'query request % does not exist (it may have expired)', p_request_id
            USING ERRCODE = 'HR002';
    END IF;
END;
$$;

-- A run's update requests no worker has accepted yet (pending, running: a worker is
-- validating one, or waiting: its validator waits for the run's first workflow task), oldest first, with how many live workers poll the run's queue (none: it
-- waits for one to start). Accepted ones are in the history (UpdateAccepted).
CREATE OR REPLACE FUNCTION harvest.list_update_requests(p_execution_id uuid)
RETURNS TABLE (
    request_id bigint, update_id text, name text, status text, queue text, created_at timestamptz,
    expires_at timestamptz, claimed_by text, live_workers integer
)
LANGUAGE sql STABLE
AS $$
    SELECT r.id, r.update_id, r.name, r.status, r.queue, r.created_at, r.expires_at, r.claimed_by,
           (SELECT count(*)::integer FROM harvest.workers AS w
            WHERE w.status = 'active' AND r.queue = ANY(w.queues) AND harvest._worker_health(w) = 'healthy')
    FROM harvest.query_requests AS r
    WHERE r.execution_id = p_execution_id AND r.kind = 'update' AND r.status IN ('pending', 'running', 'waiting')
      AND r.expires_at > harvest.now()
    ORDER BY r.created_at, r.id;
$$;

-- The cleaner: delete requests past their deadline (answered or not), and the offloaded
-- rows a query's answer was stored in (the worker stores them as the run's, so erasure finds
-- them; nothing else references them, and a run queried all day would pile them up).
-- An update's answer is its UpdateCompleted event's: its rows stay. Returns how many went.
CREATE OR REPLACE FUNCTION harvest.expire_query_requests(p_limit integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_count integer;
BEGIN
    PERFORM harvest._check_limit('expire_query_requests', p_limit, 10000);
    WITH gone AS (
        SELECT r.id FROM harvest.query_requests AS r
        WHERE r.expires_at <= harvest.now()
        ORDER BY r.expires_at
        LIMIT greatest(coalesce(p_limit, 1000), 1)
        FOR UPDATE SKIP LOCKED
    ),

    deleted AS (
        DELETE FROM harvest.query_requests AS r USING gone WHERE r.id = gone.id
        RETURNING r.kind, r.answer, r.error, r.execution_id
    ),

    -- A large answer's row: its run's. Never another run's nor a run-less one (another
    -- client's held-back start's input): an answer is what the workflow's code returned (a
    -- signal's value as sent, maybe), so a reference in it may name any row. An answer stored
    -- run-less (its run gone or moved meanwhile) goes by retention's run-less sweep. The
    -- references are listed first and joined by id (the primary key): an IN over a subquery
    -- naming d is a subplan, which scanned harvest.payloads once for each request.
    refs AS (
        SELECT d.execution_id, r.id
        FROM deleted AS d CROSS JOIN LATERAL harvest._payload_refs(jsonb_build_array(d.answer, d.error)) AS r (id)
        WHERE d.kind = 'query'
    ),

    answers AS (
        DELETE FROM harvest.payloads AS p USING refs AS a
        WHERE p.id = a.id AND p.execution_id = a.execution_id
    )

    SELECT count(*) INTO v_count FROM deleted;
    RETURN v_count;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.request_query IS
'Ask a worker to answer query p_name on a run (a finished run is answered from a replay); returns the request id '
'to wait on. HR002 when the run does not exist. Called by clients (role harvest_operator).';
COMMENT ON FUNCTION harvest.request_update IS
'Ask for update p_name on a RUNNING run, idempotent by p_update_id (the same id returns the same request); HR005 '
'when the run has ended. Called by clients (role harvest_operator).';
COMMENT ON FUNCTION harvest.update_with_start IS
'Request an update on the running run of (workflow_name, workflow_id), starting one first when none runs, in one '
'transaction. Called by clients (role harvest_operator).';
COMMENT ON FUNCTION harvest.claim_query_requests IS
'A worker claims open query and update requests of its queues (pending, or running past their claimer''s lease), '
'oldest first, never waiting on a lock, each with its client''s span (traceparent, or NULL): the parent of the '
'worker''s validation span; HR001 for a limit outside 1..1000 or a lease outside (0, 86400] seconds. Called by the '
'Python worker (role harvest_worker).';
COMMENT ON FUNCTION harvest.answer_query IS
'Answer a claimed request: a query''s answer or error, or an update''s rejection; returns the new status, or NULL'
' when the request is no longer this worker''s. Called by the Python worker (role harvest_worker).';
COMMENT ON FUNCTION harvest.release_query_request IS
'A claimed request the claiming worker lacks the code for (the run''s workflow, or the handler: a rolling deploy): back '
'to the queue, skipped by that worker''s claims, while a live worker polling it has not tried it (pending), else '
'answered p_error or UnknownWorkflow (failed, an update rejected); NULL when no longer this worker''s. Called by the '
'Python worker (role harvest_worker).';
COMMENT ON FUNCTION harvest.wait_for_first_workflow_task IS
'A claimed request whose run has not completed its first workflow task: it waits (status waiting, claimed by no '
'worker) until a claim finds the run''s first decision or its end and sets it pending again, or pending at once '
'when that came meanwhile; NULL when no longer this worker''s. Called by the Python worker (role harvest_worker).';
COMMENT ON FUNCTION harvest.accept_update IS
'An update passed its validator: record UpdateAccepted once per update id and wake the workflow; returns '
'accepted, rejected (the run ended) or NULL (no longer this worker''s). Called by the Python worker (role '
'harvest_worker).';
COMMENT ON FUNCTION harvest.get_query_request IS
'A query or update request with its run''s status, how many live workers poll the run''s queue, and for one waiting '
'for the run''s first workflow task that task''s state (waiting_for); HR002 once it is gone. Called by waiting clients (role harvest_operator).';
COMMENT ON FUNCTION harvest.list_update_requests IS
'The update requests of a run that no worker has accepted yet (pending or being validated), with the live '
'workers polling its queue. Read by the dashboard (role harvest_reader).';
COMMENT ON FUNCTION harvest.expire_query_requests IS
'Delete query and update requests past their deadline, answered or not; returns how many went. Called by the '
'worker''s cleaner (role harvest_worker).';
