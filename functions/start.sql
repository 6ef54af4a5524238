-- Starting workflows: one transaction creates the execution, its WorkflowStarted
-- event and its first workflow task, after resolving any prior run of the same
-- (workflow_name, workflow_id) by the reuse and conflict policies.
--
-- reuse_policy decides about a terminal prior, conflict_policy about a RUNNING one:
--
--   prior RUNNING        unspecified conflict_policy follows reuse_policy:
--                          allow_duplicate, allow_duplicate_failed_only -> attach
--                          reject_duplicate -> HR003, terminate_if_running -> replace
--                        use_existing -> attach, fail -> HR003, terminate_existing -> replace
--                        (a policy that can replace a running run needs harvest_admin)
--   prior terminal       allow_duplicate -> attach (a retried start gets its answer)
--                        allow_duplicate_failed_only -> new run after FAILED, CANCELLED,
--                          TERMINATED, TIMED_OUT; attach after COMPLETED, CONTINUED_AS_NEW
--                        reject_duplicate -> HR003; terminate_if_running -> new run
--
-- Concurrent starts of one key serialise on a transaction advisory lock taken
-- before the prior is read, so they converge on one run.
--
-- Flow control (docs/flow-control.md) is read from the workflow's declared
-- policy (harvest.flow_policies) so every start path gets it: a quota is
-- checked (flow_quotas.sql, HR006 when exceeded) and a per-key concurrency policy
-- stamps the run's key; "defer" gates the first workflow task at the claim,
-- "cancel_running" supersedes the oldest runs of the key here (flow_concurrency.sql).
-- A start throttle, debounce or batch (flow_throttle.sql) may defer the start: no
-- execution yet, status DEFERRED; the scanner releases it later.
-- Lock order of a start: the start-gate key, then the start lock, then the
-- quota key, then the concurrency key, then execution rows. A decision whose
-- commands start runs (continue_as_new, start_child_workflow) takes their start
-- locks, then their quota and cancel_running keys, before its own run's row (decide.sql,
-- _lock_decision_start_keys), so the start it makes keeps this order (docs/internals.md,
-- "Lock order").
--
-- Layout: start_workflow is a dispatcher over one function per gate, defined
-- above it in the order it calls them (_start_check_shard, _start_check_arguments, _start_check_admin,
-- _start_check_ranges, _start_check_registered, _start_defer, _start_resolve_prior
-- with _start_action, _start_flow_keys, _start_insert); start_workflows is the batch.

-- Refuse a start of a workflow name that no worker registered on the queue (HR010),
-- naming the names its workers did register. DETAIL is JSON
-- {workflow_name, queue, registered}. p_what: what refuses it (a schedule's, schedules.sql),
-- before the message; p_hint: what to do, if not a start's.
CREATE OR REPLACE FUNCTION harvest._refuse_unregistered(
    p_workflow_name text, p_queue text, p_what text DEFAULT NULL, p_hint text DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_registered text[];
BEGIN
    SELECT array_agg(r.workflow_name ORDER BY r.workflow_name) INTO v_registered
    FROM harvest.registered_workflows AS r WHERE r.queue = p_queue;
    RAISE EXCEPTION '%workflow "%" is not registered on queue "%" (registered there: %)',
        coalesce(p_what || ': ', ''), p_workflow_name, p_queue,
        coalesce(array_to_string(v_registered[1:20], ', ') || CASE WHEN cardinality(v_registered) > 20
            THEN ', ... ' || cardinality(v_registered) - 20 || ' more' ELSE '' END, 'none')
        USING ERRCODE = 'HR010',
        DETAIL = jsonb_build_object('workflow_name', p_workflow_name, 'queue', p_queue,
                                    'registered', to_jsonb(v_registered))::text,
        HINT = coalesce(p_hint, 'check the name and the queue, or start a worker whose App registers the workflow');
END;
$$;

-- The queue of a start that names none (NULL p_queue): the queue the fleet's workers registered
-- the workflow on (harvest.registered_workflows), since over SQL no App says where its code
-- runs (a psql start, the CLI and a Client starting by name, a schedule made over SQL). One
-- queue: that one. Several with 'default' among them: 'default', where such a start always went
-- and was run (a worker registers every workflow of its App on every queue it polls, so a fleet
-- polling default and billing has each name on both). Several without it: refused (HR001)
-- naming them, as a guess would start the run where another part of the fleet looks. None:
-- 'default' (a workflow no worker runs yet). Asked only when no queue is given: a start naming
-- its queue never reads it.
CREATE OR REPLACE FUNCTION harvest._start_queue(p_workflow_name text)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_queues text[];
BEGIN
    SELECT array_agg(r.queue ORDER BY r.queue) INTO v_queues
    FROM harvest.registered_workflows AS r WHERE r.workflow_name = p_workflow_name;
    IF v_queues IS NULL OR 'default' = ANY (v_queues) THEN
        RETURN 'default';
    END IF;
    IF cardinality(v_queues) > 1 THEN
        RAISE EXCEPTION 'workflow "%" is registered on % queues (%): say which', p_workflow_name,
            cardinality(v_queues),
            array_to_string(v_queues[1:20], ', ') || CASE WHEN cardinality(v_queues) > 20
                THEN ', ... ' || cardinality(v_queues) - 20 || ' more' ELSE '' END
            USING ERRCODE = 'HR001',
            DETAIL = jsonb_build_object('workflow_name', p_workflow_name, 'queues', to_jsonb(v_queues))::text,
            HINT = '--queue on the CLI, queue= in Python, p_queue in SQL';
    END IF;
    RETURN v_queues[1];
END;
$$;

-- The gates of a start, one function each, in the order start_workflow calls them:
-- the shard, the arguments, the admin check, the ranges, the registration check, the deferral
-- (throttle, debounce, batch), the prior run (reuse and conflict policies), the
-- flow keys (quota, concurrency), and the insert. A gate that refuses raises;
-- nothing is written before the deferral.

-- A W3C traceparent (version 00: 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>,
-- ids not all zero) or NULL, returned as given; anything else is refused (HR001), so
-- what a history carries is always a context a worker can continue.
CREATE OR REPLACE FUNCTION harvest._check_traceparent(p_traceparent text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_traceparent IS NOT NULL AND (
        p_traceparent !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
        OR substr(p_traceparent, 4, 32) = repeat('0', 32) OR substr(p_traceparent, 37, 16) = repeat('0', 16)
    ) THEN
        RAISE EXCEPTION 'traceparent "%" is not a W3C traceparent', left(p_traceparent, 100) USING ERRCODE = 'HR001',
            HINT = 'pass 00-<32 lowercase hex trace id>-<16 hex span id>-<2 hex flags>, or none';
    END IF;
    RETURN p_traceparent;
END;
$$;

-- The arguments' shapes (HR001), and the input within the payload limit (HR008) and 200 levels
-- deep, as the search attributes (HR001, _check_depth).
CREATE OR REPLACE FUNCTION harvest._start_check_arguments(
    p_workflow_name text, p_input jsonb, p_workflow_id text, p_queue text,
    p_search_attributes jsonb, p_reuse_policy text, p_conflict_policy text
)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_bytes bigint := octet_length(p_input::text);
BEGIN
    IF p_workflow_name IS NULL OR btrim(p_workflow_name) = '' THEN
        RAISE EXCEPTION 'workflow name is empty' USING ERRCODE = 'HR001',
            HINT = 'pass the registered name of a @workflow function';
    END IF;
    IF p_workflow_id = '' THEN
        RAISE EXCEPTION 'workflow_id is empty' USING ERRCODE = 'HR001',
            HINT = 'omit it to have one minted, or pass a non-empty business key';
    END IF;
    IF p_queue IS NULL OR btrim(p_queue) = '' THEN
        RAISE EXCEPTION 'task queue is empty' USING ERRCODE = 'HR001';
    END IF;
    -- Each is a key of the runs' and tasks' indexes, whose entries PostgreSQL bounds (2,704
    -- bytes a b-tree entry): over it the insert failed with the server's own error.
    IF octet_length(p_workflow_id) > 1000 OR octet_length(p_workflow_name) > 1000 OR octet_length(p_queue) > 1000 THEN
        RAISE EXCEPTION '% is % bytes, over the limit of 1000',
            CASE WHEN octet_length(p_workflow_id) > 1000 THEN 'workflow_id'
                 WHEN octet_length(p_workflow_name) > 1000 THEN 'the workflow name' ELSE 'the task queue' END,
            greatest(octet_length(p_workflow_id), octet_length(p_workflow_name), octet_length(p_queue))
            USING ERRCODE = 'HR001',
            HINT = 'use a shorter key (a hash of a long business key, for example)';
    END IF;
    IF p_input IS NULL OR jsonb_typeof(p_input) <> 'array' THEN
        RAISE EXCEPTION 'input must be a JSON array of positional arguments, got %',
            coalesce(jsonb_typeof(p_input), 'NULL')
            USING ERRCODE = 'HR001', HINT = 'for one argument 42 pass ''[42]''::jsonb';
    END IF;
    IF v_bytes > harvest._payload_limit() THEN  -- (_check_payload's measure)
        PERFORM harvest._check_payload(format('the input of workflow %s', p_workflow_name), p_input,
                                       harvest._payload_limit());
    END IF;
    PERFORM harvest._check_depth(format('the input of workflow %s', p_workflow_name), p_input, v_bytes);
    IF p_search_attributes IS NULL OR jsonb_typeof(p_search_attributes) <> 'object' THEN
        RAISE EXCEPTION 'search attributes must be a JSON object, got %',
            coalesce(jsonb_typeof(p_search_attributes), 'NULL') USING ERRCODE = 'HR001';
    END IF;
    IF p_search_attributes <> '{}' THEN
        PERFORM harvest._check_depth('the search attributes', p_search_attributes);
    END IF;
    IF p_reuse_policy IS NULL OR p_reuse_policy NOT IN (
        'allow_duplicate', 'allow_duplicate_failed_only', 'reject_duplicate', 'terminate_if_running'
    ) THEN
        RAISE EXCEPTION 'unknown reuse_policy "%"', p_reuse_policy USING ERRCODE = 'HR001',
            HINT = 'use allow_duplicate, allow_duplicate_failed_only, reject_duplicate or terminate_if_running';
    END IF;
    IF p_conflict_policy IS NULL OR p_conflict_policy NOT IN (
        'unspecified', 'use_existing', 'fail', 'terminate_existing'
    ) THEN
        RAISE EXCEPTION 'unknown conflict_policy "%"', p_conflict_policy USING ERRCODE = 'HR001',
            HINT = 'use unspecified, use_existing, fail or terminate_existing';
    END IF;
END;
$$;

-- A start that can end a live run needs harvest_admin, as terminate_workflow does
-- (spec 002, "Conflict policies"): conflict_policy terminate_existing, or
-- reuse_policy terminate_if_running with conflict_policy unspecified; whether a
-- run is live right now does not matter (42501). Checked before anything is written.
-- The engine's own starts are exempt: a continue-as-new successor and a released
-- deferred start (_start_workflow's p_flow_gates => false, which no client can pass)
-- run in a worker's session, and a deferred start passed this check when it was deferred.
CREATE OR REPLACE FUNCTION harvest._start_check_admin(
    p_reuse_policy text, p_conflict_policy text, p_flow_gates boolean
)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF (p_conflict_policy = 'terminate_existing'
        OR (p_conflict_policy = 'unspecified' AND p_reuse_policy = 'terminate_if_running'))
       AND NOT harvest._session_has_role('harvest_admin')
       AND (coalesce(p_flow_gates, true) OR NOT harvest._session_has_role('harvest_worker')) THEN
        RAISE EXCEPTION '% can terminate a running execution, which needs the harvest_admin role; '
            '% does not have it',
            CASE WHEN p_conflict_policy = 'terminate_existing' THEN 'conflict_policy "terminate_existing"'
                 ELSE 'reuse_policy "terminate_if_running" (with conflict_policy unspecified)' END,
            harvest._session_caller()
            USING ERRCODE = '42501',
            HINT = 'pass conflict_policy use_existing (attach to a running run) or fail, '
                   'or ask a harvest_admin to terminate the run';
    END IF;
END;
$$;

-- The shard the run's id is minted for: this database's (harvest.shard_identity, one
-- primary-key read). A p_shard that names another is refused (HR011, WrongShard)
-- before anything is written, naming both numbers: the id would route to a shard
-- that does not hold the run. NULL means this database's shard.
CREATE OR REPLACE FUNCTION harvest._start_check_shard(p_shard integer)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_shard integer := harvest.get_shard_id();
BEGIN
    IF p_shard IS NULL OR p_shard = v_shard THEN
        RETURN v_shard;
    END IF;
    IF p_shard < 0 OR p_shard > 65535 THEN
        RAISE EXCEPTION 'shard % is out of range: a shard number is 0..65535', p_shard
            USING ERRCODE = 'HR001';
    END IF;
    RAISE EXCEPTION 'start addressed to shard % reached shard %', p_shard, v_shard
        USING ERRCODE = 'HR011',
        DETAIL = jsonb_build_object('requested_shard_id', p_shard, 'shard_id', v_shard)::text,
        HINT = 'start it on the database of that shard (check the shard urls), or omit the shard';
END;
$$;

-- The numbers' ranges (HR001): the timeouts, and the priority.
CREATE OR REPLACE FUNCTION harvest._start_check_ranges(
    p_execution_timeout_secs double precision, p_run_timeout_secs double precision, p_priority integer
)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    -- NaN sorts above every number in PostgreSQL, so "<= 0" alone let it through; 100 years is
    -- the longest duration Harvest accepts anywhere (harvest/definitions.py MAX_DURATION_SECS).
    IF NOT (p_execution_timeout_secs > 0 AND p_execution_timeout_secs <= 3155760000)
       OR NOT (p_run_timeout_secs > 0 AND p_run_timeout_secs <= 3155760000) THEN
        RAISE EXCEPTION 'workflow timeouts must be positive seconds, at most 100 years: got execution_timeout %, run_timeout %',
            coalesce(p_execution_timeout_secs::text, 'none'), coalesce(p_run_timeout_secs::text, 'none')
            USING ERRCODE = 'HR001';
    END IF;
    IF p_priority NOT BETWEEN -1000000 AND 1000000 THEN
        RAISE EXCEPTION 'priority % is out of range -1000000 to 1000000', p_priority USING ERRCODE = 'HR001';
    END IF;
END;
$$;

-- A name no worker registered on a queue whose workers registered names is refused
-- before anything is written (_workflow_registered, HR010 from
-- _refuse_unregistered): one primary-key probe when the name is known. A released
-- deferred start and a continue-as-new successor (p_flow_gates false) were admitted
-- already.
CREATE OR REPLACE FUNCTION harvest._start_check_registered(
    p_workflow_name text, p_queue text, p_flow_gates boolean
)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF coalesce(p_flow_gates, true)
       AND (SELECT r FROM harvest._workflow_registered(p_workflow_name, p_queue) AS r) IS FALSE THEN
        PERFORM harvest._refuse_unregistered(p_workflow_name, p_queue);
    END IF;
END;
$$;

-- Every check of a start before anything is written, in _start_workflow's order (_start_check_*,
-- _check_traceparent); returns the shard its run's id is minted for. A batch of starts runs
-- them for its gated starts before it admits them at their gates (start_workflows).
CREATE OR REPLACE FUNCTION harvest._start_check(
    p_workflow_name text, p_input jsonb, p_workflow_id text, p_queue text, p_reuse_policy text,
    p_conflict_policy text, p_search_attributes jsonb, p_priority integer, p_shard integer,
    p_execution_timeout_secs double precision, p_run_timeout_secs double precision,
    p_flow_gates boolean, p_traceparent text
)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_shard integer := harvest._start_check_shard(p_shard);
    v_traceparent text := harvest._check_traceparent(p_traceparent);  -- (raises when malformed)
BEGIN
    PERFORM harvest._start_check_arguments(p_workflow_name, p_input, p_workflow_id, p_queue,
                                           p_search_attributes, p_reuse_policy, p_conflict_policy);
    PERFORM harvest._start_check_admin(p_reuse_policy, p_conflict_policy, p_flow_gates);
    PERFORM harvest._start_check_ranges(p_execution_timeout_secs, p_run_timeout_secs, p_priority);
    PERFORM harvest._start_check_registered(p_workflow_name, p_queue, p_flow_gates);
    RETURN v_shard;
END;
$$;

-- A start of a workflow whose policy declares a start throttle, debounce or batch
-- (flow_throttle.sql, _start_gate): action 'start' lets it through (under the
-- workflow_id the gate chose); 'deferred' admits it without an execution (status
-- DEFERRED, execution_id NULL, the run's workflow_id; audited here); 'release': it filled a
-- batch, whose pending row (release) the caller starts (_release_pending_start).
CREATE OR REPLACE FUNCTION harvest._start_defer(
    p_workflow_name text, p_policy jsonb, p_input jsonb, p_workflow_id text, p_queue text,
    p_reuse_policy text, p_conflict_policy text, p_search_attributes jsonb, p_priority integer,
    p_execution_timeout_secs double precision, p_run_timeout_secs double precision,
    p_traceparent text DEFAULT NULL,
    OUT action text, OUT workflow_id text, OUT release harvest.pending_starts
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_gate record;
BEGIN
    IF p_conflict_policy <> 'unspecified' THEN
        -- (signal_with_start and update_with_start start with use_existing: named, as their
        -- callers passed no policy.)
        RAISE EXCEPTION 'workflow % declares a start throttle, debounce or batch: conflict_policy "%"% '
            'cannot be combined with it', p_workflow_name, p_conflict_policy,
            CASE WHEN p_conflict_policy = 'use_existing'
                 THEN ' (which signal_with_start and update_with_start use)' ELSE '' END
            USING ERRCODE = 'HR001',
            HINT = 'a deferred start has no running execution to resolve a conflict against; '
                   'use conflict_policy unspecified, and signal or update the run once it has started';
    END IF;
    SELECT * INTO v_gate
    FROM harvest._start_gate(p_workflow_name, p_policy, p_input, p_workflow_id,
        p_queue, p_reuse_policy, p_search_attributes, coalesce(p_priority, 0),
        p_execution_timeout_secs, p_run_timeout_secs, p_traceparent) AS g;
    action := v_gate.action;
    workflow_id := v_gate.workflow_id;
    release := v_gate.release;
    IF action = 'deferred' THEN
        PERFORM harvest._audit_asserted('workflow.start', NULL, jsonb_build_object(
            'workflow_name', p_workflow_name, 'workflow_id', workflow_id, 'outcome', 'deferred'));
    END IF;
END;
$$;

-- What a start does about the prior run of its key (NULL status: there is none), by
-- the policies (the table at the top of this file): 'start' a new run, 'attach' to
-- the prior, 'reject' the start, or 'replace' the running prior.
CREATE OR REPLACE FUNCTION harvest._start_action(
    p_prior_status text, p_reuse_policy text, p_conflict_policy text
)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN p_prior_status IS NULL THEN 'start'
        WHEN p_prior_status IN ('RUNNING', 'PAUSED') THEN CASE p_conflict_policy
            WHEN 'use_existing' THEN 'attach'
            WHEN 'fail' THEN 'reject'
            WHEN 'terminate_existing' THEN 'replace'
            ELSE CASE p_reuse_policy
                WHEN 'reject_duplicate' THEN 'reject'
                WHEN 'terminate_if_running' THEN 'replace'
                ELSE 'attach'
            END
        END
        ELSE CASE p_reuse_policy
            WHEN 'allow_duplicate' THEN 'attach'
            WHEN 'reject_duplicate' THEN 'reject'
            WHEN 'terminate_if_running' THEN 'start'
            ELSE CASE WHEN p_prior_status IN ('FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT')
                THEN 'start' ELSE 'attach' END
        END
    END;
$$;

-- The start lock of a business key: every path that creates or replaces a run of
-- (workflow_name, workflow_id) takes it before it reads or locks the key's runs (starts,
-- continue_as_new and child starts in decide.sql, a reset's fork, a moved run's import),
-- so concurrent starts of the key converge on one run and see each other's rows.
CREATE OR REPLACE FUNCTION harvest._lock_start_key(p_workflow_name text, p_workflow_id text)
RETURNS void
LANGUAGE sql
AS $$
    SELECT pg_advisory_xact_lock(hashtextextended('harvest.start:' || p_workflow_name || ':' || p_workflow_id, 0));
$$;

-- The prior run of the key under the reuse and conflict policies, with the start
-- lock held: returns the run to attach to, or NULL when a new run is to start (after
-- the running prior it replaces was terminated); a rejected start raises HR003.
CREATE OR REPLACE FUNCTION harvest._start_resolve_prior(
    p_workflow_name text, p_workflow_id text, p_reuse_policy text, p_conflict_policy text
)
RETURNS harvest.executions
LANGUAGE plpgsql
AS $$
DECLARE
    v_prior harvest.executions;
BEGIN
    PERFORM harvest._lock_start_key(p_workflow_name, p_workflow_id);

    -- The prior: the RUNNING run of the key, else its latest, down
    -- executions_workflow_id_runs (workflow_id, workflow_name, created_at DESC). Why the
    -- name as BETWEEN and a leading sort key: a generic plan (PL/pgSQL caches one per
    -- session) costs executions_name_created (every run of the name) against that index
    -- by the estimates of the conditions it can start from; with the name an equality
    -- and the id a range, a name of few runs took executions_name_created, and with both
    -- equalities a key of many runs took the table. The id an equality and the name a
    -- range puts both in the index's bounds, and a range makes no equivalence class, so
    -- workflow_name stays a sort key that the index delivers after its constant id: it
    -- wins on any statistics (tests/integration/test_generic_plans.py; migration 0136).
    -- BETWEEN x AND x is = x, and a constant leading sort key changes no order.
    SELECT * INTO v_prior FROM harvest.executions AS e
    WHERE e.workflow_id = p_workflow_id
      AND e.workflow_name BETWEEN p_workflow_name AND p_workflow_name
    ORDER BY e.workflow_name, (e.status IN ('RUNNING', 'PAUSED', 'MIGRATING', 'MIGRATED')) DESC, e.created_at DESC
    LIMIT 1
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;

    -- A prior moved to another shard (MIGRATED) or being staged here (MIGRATING) is a
    -- live run under the policies; replacing it is refused (HR013, retryable): the
    -- terminate could not reach the live copy, and sealing the prior would release
    -- the key while the real run keeps executing (functions/rebalance.sql).
    IF v_prior.status IN ('MIGRATING', 'MIGRATED') THEN
        IF harvest._start_action('RUNNING', p_reuse_policy, p_conflict_policy) = 'replace' THEN
            PERFORM harvest._raise_migration('replace_migrated_prior', format(
                'workflow %s with id "%s" runs as execution %s, which %s: a start cannot replace it',
                p_workflow_name, p_workflow_id, v_prior.id,
                CASE WHEN v_prior.migrated_to_shard IS NOT NULL
                    THEN format('moved to shard %s', v_prior.migrated_to_shard)
                    ELSE 'is being moved to this shard' END),
                v_prior.id, v_prior.migrated_to_shard, '{}',
                'cancel or terminate the execution by its id (routed to where it lives), then start again');
        END IF;
    END IF;

    CASE harvest._start_action(
        CASE WHEN v_prior.status IN ('MIGRATING', 'MIGRATED') THEN 'RUNNING' ELSE v_prior.status END,
        p_reuse_policy, p_conflict_policy)
    WHEN 'attach' THEN
        RETURN v_prior;
    WHEN 'reject' THEN
        RAISE EXCEPTION 'workflow % with id "%" already exists (execution %, %)',
            p_workflow_name, p_workflow_id, v_prior.id, v_prior.status
            USING ERRCODE = 'HR003',
            DETAIL = jsonb_build_object('existing_execution_id', v_prior.id,
                                        'existing_status', v_prior.status)::text,
            HINT = 'attach to it, or pass another reuse_policy/conflict_policy';
    WHEN 'replace' THEN
        PERFORM harvest._append_event(v_prior.id, 'WorkflowTerminated',
            jsonb_build_object('reason', 'replaced by a new start (' || p_reuse_policy || ', '
                                         || p_conflict_policy || ')'));
        PERFORM harvest._close_execution(v_prior.id, 'TERMINATED', NULL,
            jsonb_build_object('error_type', 'Terminated', 'message', 'replaced by a new start',
                               'non_retryable', true, 'details', NULL));
    ELSE
        NULL;  -- 'start': a new run beside the terminal prior
    END CASE;
    RETURN NULL;
END;
$$;

-- The flow keys of a new run under its workflow's policy (flow_concurrency.sql,
-- _resolve_flow_keys), its quota checked under its key's lock (flow_quotas.sql, HR006 when
-- exhausted).
CREATE OR REPLACE FUNCTION harvest._start_flow_keys(
    p_workflow_name text, p_input jsonb, p_policy jsonb,
    OUT quota_key text, OUT concurrency_key text
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_keys record;
BEGIN
    v_keys := harvest._resolve_flow_keys(p_input, p_policy);
    quota_key := v_keys.quota_key;
    concurrency_key := v_keys.concurrency_key;
    IF quota_key IS NOT NULL THEN
        PERFORM harvest._check_quota(p_workflow_name, quota_key, p_policy -> 'quota');
    END IF;
END;
$$;

-- The new run: its execution row, WorkflowStarted, and its first workflow task, then
-- a wake-up of its queue. A per-key concurrency policy stamps the run's key: "defer"
-- gates the task at the claim; "cancel_running" supersedes the oldest runs of the
-- key here (flow_concurrency.sql). Returns the new execution's id.
CREATE OR REPLACE FUNCTION harvest._start_insert(
    p_workflow_name text, p_input jsonb, p_workflow_id text, p_queue text,
    p_search_attributes jsonb, p_priority integer, p_parent_id uuid, p_shard integer,
    p_execution_timeout_secs double precision, p_run_timeout_secs double precision,
    p_policy jsonb, p_quota_key text, p_concurrency_key text,
    -- NULL: mint one for p_shard; a cross-shard child brings the id its parent minted.
    p_execution_id uuid DEFAULT NULL,
    -- The W3C traceparent of the span that started the run (docs/observability.md), or NULL.
    p_traceparent text DEFAULT NULL
)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_execution_deadline timestamptz := v_now + make_interval(secs => p_execution_timeout_secs);
    v_concurrency_key text := p_concurrency_key;
    v_id uuid;
    v_first bigint;  -- (the append is an assignment: a PERFORM would be a statement of its own)
    v_trace jsonb := '{}'::jsonb;  -- WorkflowStarted's trace_root and traceparent, when given
BEGIN
    v_id := coalesce(p_execution_id, harvest._new_execution_id(p_shard));
    INSERT INTO harvest.executions (
        id, workflow_name, workflow_id, queue, input, search_attributes, parent_id, created_at,
        execution_timeout_at, timeout_at, concurrency_key, quota_key, run_timeout_secs
    ) VALUES (
        v_id, p_workflow_name, p_workflow_id, p_queue, p_input, p_search_attributes,
        p_parent_id, v_now, v_execution_deadline,
        least(v_execution_deadline, v_now + make_interval(secs => p_run_timeout_secs)),
        v_concurrency_key, p_quota_key, p_run_timeout_secs
    );
    -- A child's trace is its root run's (docs/observability.md): the parent's own root, or
    -- the parent itself (also when the parent lives on another shard and is not read here).
    -- (Read apart from the append below: with the parent's read inside it, the append's
    -- cached generic plan looked dearer than a plan made for a run without a parent, so
    -- every start planned the append afresh; alone, it is a simple expression.)
    IF p_parent_id IS NOT NULL THEN
        v_trace := jsonb_build_object('trace_root', coalesce(
            (SELECT ev.event_data ->> 'trace_root' FROM harvest.events AS ev
             WHERE ev.execution_id = p_parent_id AND ev.event_id = 1), p_parent_id::text));
    END IF;
    -- The span that started it: the caller's start, the parent's child.start, or the
    -- predecessor's continue_as_new; its spans continue that trace.
    IF p_traceparent IS NOT NULL THEN
        v_trace := v_trace || jsonb_build_object('traceparent', harvest._check_traceparent(p_traceparent));
    END IF;
    v_first := harvest._append_event(v_id, 'WorkflowStarted', jsonb_build_object(
        'workflow_name', p_workflow_name, 'workflow_id', p_workflow_id,
        'input', p_input, 'task_queue', p_queue, 'parent_id', p_parent_id) || v_trace);
    IF v_concurrency_key IS NOT NULL AND p_policy #>> '{concurrency,on_conflict}' = 'cancel_running' THEN
        PERFORM harvest._supersede(p_workflow_name, v_concurrency_key,
                                   harvest._json_integer(p_policy #> '{concurrency,limit}', 'concurrency.limit', 1), v_id);
        v_concurrency_key := NULL;  -- latest wins is enforced here; the claim does not gate it
    END IF;
    INSERT INTO harvest.tasks (
        execution_id, kind, queue, priority, due_at, scheduled_at, concurrency_key, concurrency_limit,
        fairness_key
    ) VALUES (
        v_id, 'workflow', p_queue, coalesce(p_priority, 0), v_now, v_now, v_concurrency_key,
        CASE WHEN v_concurrency_key IS NOT NULL THEN harvest._json_integer(p_policy #> '{concurrency,limit}', 'concurrency.limit', 1) END,
        -- (Its fairness_key answered here, as _start_plain_batch's.)
        coalesce((SELECT '' FROM harvest.fair_queues AS f WHERE f.queue = p_queue), E'\x01')
    );
    PERFORM harvest._notify_queue(p_queue);
    RETURN v_id;
END;
$$;

-- Whether every start of a start_workflows batch is plain, so _start_plain_batch may
-- start them all with one statement per table instead of start_workflow's statements
-- per run: a minted workflow_id (none given: a new key has no prior and no other start
-- can contend for its lock), the default policies, no shard, traceparent or timeouts, an
-- array input within the payload limit, an object of search attributes, a priority in
-- range, a queue (none: one the name is registered on, as _start_queue resolves it), no flow policy for the name (a worker declares its App's workflows
-- without one as {}, which start_workflow reads as none), a name the queue's workers registered (or
-- a queue with no registrations), and no asserted actor to audit. One statement; any
-- other batch goes one start at a time, with start_workflow's checks and errors. The
-- policy and the registrations are read once per distinct (name, queue) of the batch, by
-- primary key (scalar subqueries; the queue's first registration in key order, so that
-- LIMIT 1 is not a table scan that finds none): written as EXISTS per start, the planner
-- hashed both whole tables on every call, so a start cost more the more workflows were
-- registered (3,000 registrations: 1-1.7 ms instead of 0.05 ms; docs/performance.md,
-- "Latency rows, seventh cut").
CREATE OR REPLACE FUNCTION harvest._starts_plain(p_starts jsonb, p_limit integer)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN jsonb_array_length(p_starts) > 0
        AND (SELECT c.actor FROM harvest._audit_context() AS c) IS NULL
        AND NOT EXISTS (
            SELECT 1 FROM jsonb_array_elements(p_starts) AS s (v)
            WHERE NOT coalesce(
                jsonb_typeof(s.v) = 'object'
                AND jsonb_typeof(s.v -> 'workflow_name') = 'string' AND btrim(s.v ->> 'workflow_name') <> ''
                -- (longer ones go start_workflow's way, which refuses them: its _start_check_args)
                AND octet_length(s.v ->> 'workflow_name') <= 1000
                AND octet_length(coalesce(s.v ->> 'queue', 'default')) <= 1000
                AND s.v ->> 'workflow_id' IS NULL
                AND coalesce(s.v ->> 'reuse_policy', 'allow_duplicate') = 'allow_duplicate'
                AND coalesce(s.v ->> 'conflict_policy', 'unspecified') = 'unspecified'
                AND s.v ->> 'shard' IS NULL AND s.v ->> 'traceparent' IS NULL AND s.v ->> 'task_queue' IS NULL
                AND s.v ->> 'execution_timeout' IS NULL AND s.v ->> 'run_timeout' IS NULL
                AND jsonb_typeof(coalesce(s.v -> 'input', '[]')) = 'array'
                AND octet_length(coalesce(s.v -> 'input', '[]')::text) <= p_limit
                -- (nesting past 200 levels: start_workflow's way, which refuses it)
                AND NOT harvest._too_deep(s.v -> 'input') AND NOT harvest._too_deep(s.v -> 'search_attributes')
                AND jsonb_typeof(coalesce(s.v -> 'search_attributes', '{}')) = 'object'
                AND (s.v ->> 'priority' IS NULL OR (jsonb_typeof(s.v -> 'priority') = 'number'
                                                    AND s.v ->> 'priority' ~ '^-?[0-9]{1,7}$'
                                                    AND (s.v ->> 'priority')::integer BETWEEN -1000000 AND 1000000))
                AND btrim(coalesce(s.v ->> 'queue', 'default')) <> '', false)
        )
        -- Once per distinct (name, queue) of the batch (a batch mostly starts one workflow).
        -- An empty policy is none: a worker declares one for every workflow of its App ('{}'
        -- without flow control, clearing an earlier one), and start_workflow reads only its keys.
        -- A start that names no queue: _start_queue's is a queue the name is registered on (or
        -- it refuses, naming them), else 'default' for a name registered nowhere; so the name
        -- registered anywhere, or no registration on 'default', is the same check without
        -- resolving it here: _start_plain_batch resolves it once per name (it was resolved
        -- twice, here and again per row).
        AND NOT EXISTS (
            SELECT 1
            FROM (SELECT DISTINCT s.v ->> 'workflow_name' AS name, s.v ->> 'queue' AS queue
                  FROM jsonb_array_elements(p_starts) AS s (v)) AS k
            WHERE NOT coalesce(
                (SELECT true FROM harvest.flow_policies AS p
                 WHERE p.kind = 'workflow' AND p.name = k.name AND p.policy <> '{}'::jsonb) IS NULL
                AND ((SELECT r FROM harvest._workflow_registered(k.name, coalesce(k.queue, 'default')) AS r)
                         IS NOT FALSE
                     -- (a count, not LIMIT 1: that read the table whole while it looked small)
                     OR k.queue IS NULL AND (SELECT count(*) FROM harvest.registered_workflows AS r
                                             WHERE r.workflow_name = k.name) > 0), false)
        );
END;
$$;

-- Start a batch of plain starts (_starts_plain) as start_workflow starts each, in
-- start_workflows' order ((workflow_name, position): their workflow_ids are minted):
-- the execution rows, their WorkflowStarted events and first workflow tasks, each one
-- statement for the batch, then one wake-up per queue. Each row is what _start_insert
-- writes (the row is inserted with the event already counted, one row version instead
-- of two); the stream is notified per run, as _append_events notifies.
CREATE OR REPLACE FUNCTION harvest._start_plain_batch(p_starts jsonb)
RETURNS TABLE (n integer, execution_id uuid, workflow_id text, status text, started_fresh boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_shard integer := harvest.get_shard_id();
    v_runs record;
    v_queue text;
    v_start jsonb;
    v_id uuid;
    v_workflow_id text;
    v_input jsonb;
    v_data jsonb;
    v_queues jsonb;  -- {name: queue} of the names started without a queue, _start_queue's
BEGIN
    -- A batch of one (every start of a client starting one run at a time): the same rows,
    -- written by single-row INSERTs of values computed here, not by the statements for many
    -- below (an aggregate of nine sorted arrays, then three INSERTs over unnest with a sort
    -- each), whose plan nodes are set up and torn down on every call, as _hand_activities
    -- does for one activity (docs/performance.md, "One-item calls").
    IF jsonb_array_length(p_starts) = 1 THEN
        v_start := p_starts -> 0;
        v_id := harvest._new_execution_id(v_shard);
        v_workflow_id := gen_random_uuid()::text;
        v_queue := coalesce(v_start ->> 'queue', harvest._start_queue(v_start ->> 'workflow_name'));
        v_input := coalesce(v_start -> 'input', '[]');
        v_data := jsonb_build_object('workflow_name', v_start ->> 'workflow_name', 'workflow_id', v_workflow_id,
                                     'input', v_input, 'task_queue', v_queue, 'parent_id', NULL);
        INSERT INTO harvest.executions (
            id, workflow_name, workflow_id, queue, input, search_attributes, parent_id, created_at,
            execution_timeout_at, timeout_at, concurrency_key, quota_key, run_timeout_secs,
            last_event_id, history_bytes
        ) VALUES (
            v_id, v_start ->> 'workflow_name', v_workflow_id, v_queue, v_input,
            coalesce(v_start -> 'search_attributes', '{}'), NULL, v_now,
            NULL, NULL, NULL, NULL, NULL, 1, harvest._event_bytes(v_data)
        );
        INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)
        VALUES (v_id, 1, 'WorkflowStarted', v_data, v_now);
        -- (Its fairness_key answered here, as the batch's below.)
        INSERT INTO harvest.tasks (execution_id, kind, queue, priority, due_at, scheduled_at, fairness_key)
        VALUES (v_id, 'workflow', v_queue, coalesce((v_start ->> 'priority')::integer, 0), v_now, v_now,
                coalesce((SELECT '' FROM harvest.fair_queues AS f WHERE f.queue = v_queue), E'\x01'));
        -- A caller that will wait for the run's result marks itself in the start
        -- (harvest.wait_for_result's mark, without its lock: no close can see this run yet).
        IF v_start ? 'result_waiter' THEN
            INSERT INTO harvest.result_waiters (execution_id, waiter_id, since)
            VALUES (v_id, (v_start ->> 'result_waiter')::uuid, v_now);
        END IF;
        PERFORM harvest._notify_events(v_id);  -- only while a process streams (event_streams.sql)
        PERFORM harvest._notify_queue(v_queue);
        n := 1;
        execution_id := v_id;
        workflow_id := v_workflow_id;
        status := 'RUNNING';
        started_fresh := true;
        RETURN NEXT;
        RETURN;
    END IF;
    -- Once per distinct name started without a queue, not per row.
    SELECT jsonb_object_agg(d.name, harvest._start_queue(d.name)) INTO v_queues
    FROM (SELECT DISTINCT s.value ->> 'workflow_name' AS name
          FROM jsonb_array_elements(p_starts) AS s WHERE s.value ->> 'queue' IS NULL) AS d;
    SELECT array_agg(r.n ORDER BY r.k) AS ns, array_agg(r.id ORDER BY r.k) AS ids,
           array_agg(r.workflow_name ORDER BY r.k) AS names, array_agg(r.workflow_id ORDER BY r.k) AS workflow_ids,
           array_agg(r.queue ORDER BY r.k) AS queues, array_agg(r.input ORDER BY r.k) AS inputs,
           array_agg(r.search_attributes ORDER BY r.k) AS search_attributes,
           array_agg(r.priority ORDER BY r.k) AS priorities,
           array_agg(jsonb_build_object('workflow_name', r.workflow_name, 'workflow_id', r.workflow_id,
                                        'input', r.input, 'task_queue', r.queue, 'parent_id', NULL)
                     ORDER BY r.k) AS datas,
           array_agg(r.waiter ORDER BY r.k) AS waiters, bool_or(r.waiter IS NOT NULL) AS waited
    INTO v_runs
    FROM (
        SELECT s.ordinality::integer AS n, harvest._new_execution_id(v_shard) AS id,
               s.value ->> 'workflow_name' AS workflow_name, gen_random_uuid()::text AS workflow_id,
               coalesce(s.value ->> 'queue', v_queues ->> (s.value ->> 'workflow_name')) AS queue,
               coalesce(s.value -> 'input', '[]') AS input,
               coalesce(s.value -> 'search_attributes', '{}') AS search_attributes,
               coalesce((s.value ->> 'priority')::integer, 0) AS priority,
               (s.value ->> 'result_waiter')::uuid AS waiter,
               row_number() OVER (ORDER BY s.value ->> 'workflow_name', s.ordinality) AS k
        FROM jsonb_array_elements(p_starts) WITH ORDINALITY AS s
    ) AS r;
    INSERT INTO harvest.executions (
        id, workflow_name, workflow_id, queue, input, search_attributes, parent_id, created_at,
        execution_timeout_at, timeout_at, concurrency_key, quota_key, run_timeout_secs,
        last_event_id, history_bytes
    )
    SELECT u.id, u.name, u.workflow_id, u.queue, u.input, u.search_attributes, NULL, v_now,
           NULL, NULL, NULL, NULL, NULL, 1, harvest._event_bytes(u.data)
    FROM unnest(v_runs.ids, v_runs.names, v_runs.workflow_ids, v_runs.queues, v_runs.inputs,
                v_runs.search_attributes, v_runs.datas) WITH ORDINALITY
        AS u (id, name, workflow_id, queue, input, search_attributes, data, k)
    ORDER BY u.k;
    INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)
    SELECT u.id, 1, 'WorkflowStarted', u.data, v_now
    FROM unnest(v_runs.ids, v_runs.datas) WITH ORDINALITY AS u (id, data, k)
    ORDER BY u.k;
    -- The workflow tasks answer "is the queue fair" in the statement: '' on a fair queue, else
    -- the marker E'\x01' for no key, so the insert trigger asks no query per row (sql/triggers.sql;
    -- no row of a start names a fairness key, so none of them makes a queue fair; as decide.sql
    -- _queue_activities does; docs/performance.md, "SQL path, eleventh cut").
    INSERT INTO harvest.tasks (execution_id, kind, queue, priority, due_at, scheduled_at, fairness_key)
    SELECT u.id, 'workflow', u.queue, u.priority, v_now, v_now,
           -- (The batch's fair queues read once, not a probe per row.)
           CASE WHEN u.queue = ANY (ARRAY(SELECT f.queue FROM harvest.fair_queues AS f
                                          WHERE f.queue = ANY (v_runs.queues))) THEN '' ELSE E'\x01' END
    FROM unnest(v_runs.ids, v_runs.queues, v_runs.priorities) WITH ORDINALITY AS u (id, queue, priority, k)
    ORDER BY u.k;
    IF v_runs.waited THEN  -- the marks of callers that will wait (as for a batch of one, above)
        INSERT INTO harvest.result_waiters (execution_id, waiter_id, since)
        SELECT u.id, u.waiter, v_now
        FROM unnest(v_runs.ids, v_runs.waiters) AS u (id, waiter)
        WHERE u.waiter IS NOT NULL;
    END IF;
    -- The stream (_notify_events' probe and message, per run) only while a process streams.
    PERFORM pg_notify('harvest_events', u.id::text)
    FROM unnest(v_runs.ids) WITH ORDINALITY AS u (id, k)
    WHERE EXISTS (SELECT 1 FROM harvest._live_event_listeners())  -- (event_streams.sql)
    ORDER BY u.k;
    -- One queue (a batch's usual case, and every start of one): its wake-up without the
    -- query for the distinct queues (a cursor opened on every start).
    IF v_runs.queues <@ v_runs.queues[1:1] THEN
        PERFORM harvest._notify_queue(v_runs.queues[1]);
    ELSE
        FOR v_queue IN SELECT DISTINCT q.queue FROM unnest(v_runs.queues) AS q (queue) ORDER BY 1 LOOP
            PERFORM harvest._notify_queue(v_queue);
        END LOOP;
    END IF;
    RETURN QUERY
    SELECT u.n, u.id, u.workflow_id, 'RUNNING'::text, true
    FROM unnest(v_runs.ns, v_runs.ids, v_runs.workflow_ids) WITH ORDINALITY AS u (n, id, workflow_id, k)
    ORDER BY u.k;
END;
$$;

-- Start a run of p_workflow_name (the dispatcher of the gates above): the arguments,
-- the admin check, the ranges and the registration are checked; a throttle,
-- debounce or batch may defer the start; a prior run of the key is attached to,
-- rejected or replaced; the quota and concurrency keys are resolved; the run is
-- inserted. The engine's own starts call it directly: a child (p_parent_id), a
-- continue-as-new successor and a released deferred start (p_flow_gates false, as
-- they passed the gates already). A client's start goes through start_workflow, which
-- passes neither: a client naming a parent would graft its run onto another's history
-- (the child's close appends a ChildWorkflow* event to the parent), and one skipping
-- the gates would jump a throttle (and, in the worker's and client's usual login,
-- pass for the engine's continue-as-new in _start_check_admin).
CREATE OR REPLACE FUNCTION harvest._start_workflow(
    p_workflow_name text,
    p_input jsonb DEFAULT '[]'::jsonb,
    p_workflow_id text DEFAULT NULL,
    p_queue text DEFAULT 'default',
    p_reuse_policy text DEFAULT 'allow_duplicate',
    p_conflict_policy text DEFAULT 'unspecified',
    p_search_attributes jsonb DEFAULT '{}'::jsonb,
    p_priority integer DEFAULT 0,
    p_parent_id uuid DEFAULT NULL,
    -- NULL: this database's shard; another shard's number is refused (HR011).
    p_shard integer DEFAULT NULL,
    p_execution_timeout_secs double precision DEFAULT NULL,
    p_run_timeout_secs double precision DEFAULT NULL,
    -- false: skip the deferring gates (throttle, debounce, batch); a released
    -- pending start and a continue-as-new successor pass false.
    p_flow_gates boolean DEFAULT true,
    -- The W3C traceparent of the starting span: the run's spans continue its trace.
    p_traceparent text DEFAULT NULL,
    -- true: a continue-as-new successor, the same run going on: its quota key is resolved
    -- and not checked again (a key whose dead-letter or history quota is spent refuses new
    -- runs, not the rotation of a live one, which would fail its decision for good).
    p_continues boolean DEFAULT false
)
RETURNS TABLE (execution_id uuid, workflow_id text, status text, started_fresh boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_workflow_id text := coalesce(p_workflow_id, gen_random_uuid()::text);
    v_policy jsonb;
    v_gate record;
    v_prior harvest.executions;
    v_replaced uuid[];
    v_keys record;
    v_quota_key text;
    v_concurrency_key text;
    v_id uuid;
    v_shard integer;
BEGIN
    v_shard := harvest._start_check(p_workflow_name, p_input, v_workflow_id, p_queue, p_reuse_policy,
        p_conflict_policy, p_search_attributes, p_priority, p_shard, p_execution_timeout_secs,
        p_run_timeout_secs, p_flow_gates, p_traceparent);

    SELECT p.policy INTO v_policy FROM harvest.flow_policies AS p
    WHERE p.kind = 'workflow' AND p.name = p_workflow_name;
    IF v_policy ?| ARRAY['throttle', 'debounce', 'batch'] AND coalesce(p_flow_gates, true)
       AND p_parent_id IS NULL THEN
        v_gate := harvest._start_defer(p_workflow_name, v_policy, p_input, p_workflow_id, p_queue,
            p_reuse_policy, p_conflict_policy, p_search_attributes, p_priority,
            p_execution_timeout_secs, p_run_timeout_secs, p_traceparent);
        IF v_gate.action = 'deferred' THEN
            RETURN QUERY SELECT NULL::uuid, v_gate.workflow_id, 'DEFERRED'::text, false;
            RETURN;
        ELSIF v_gate.action = 'release' THEN  -- (it filled a batch: that batch's run starts)
            RETURN QUERY SELECT * FROM harvest._release_pending_start(v_gate.release);
            RETURN;
        END IF;
        v_workflow_id := v_gate.workflow_id;
    END IF;

    -- A start that may end a live prior (terminate_existing, terminate_if_running) takes its
    -- flow keys after the start lock and before the prior's row (docs/internals.md, "Lock
    -- order", 2 to 5): the prior's close releases its mutexes, and a quota or cancel_running key
    -- taken after them waited in a cycle (40P01) with a start of that key superseding a run
    -- queued for one of them (tests/integration/test_mutex_flow_key_order.py). The start below
    -- finds them held. (An attaching or fresh start locks no live run before its keys; a
    -- continue-as-new successor's decision took them before its run's row, _lock_decision_start_keys.)
    IF v_policy ?| ARRAY['quota', 'concurrency'] AND NOT coalesce(p_continues, false)
       AND harvest._start_action('RUNNING', p_reuse_policy, p_conflict_policy) = 'replace' THEN
        PERFORM harvest._lock_start_key(p_workflow_name, v_workflow_id);
        PERFORM harvest._lock_flow_keys_of(jsonb_build_array(jsonb_build_object(
            'workflow_name', p_workflow_name, 'input', p_input, 'quota', true)));
        -- Then the live prior's row with those of the runs the start supersedes (a
        -- cancel_running key, _superseded_runs, read under the key's lock), all in id order,
        -- then every mutex key they hold or wait for, in key order (docs/internals.md, "Lock
        -- order", 4 and 5). Locked one by one, the prior (and its mutexes, by its terminate)
        -- before the supersede's runs, the start met a group commit of those runs' decisions
        -- (rows in id order, then mutex keys) in a cycle (40P01; tests/integration/
        -- test_mutex_flow_key_order.py). (The prior's close only shrinks what the start
        -- supersedes: the runs older than it move up the key's list.)
        v_replaced := ARRAY(
            SELECT e.id FROM harvest.executions AS e
            WHERE e.workflow_id = v_workflow_id
              AND e.workflow_name BETWEEN p_workflow_name AND p_workflow_name
              AND e.status IN ('RUNNING', 'PAUSED')
            ORDER BY e.workflow_name  -- (read as _start_resolve_prior reads it: by its index)
        ) || harvest._superseded_runs(jsonb_build_array(jsonb_build_object(
            'workflow_name', p_workflow_name, 'input', p_input)));
        IF cardinality(v_replaced) > 0 THEN
            -- (The sort is below the row lock: locked in id order.)
            v_replaced := ARRAY(
                SELECT e.id FROM harvest.executions AS e
                WHERE e.id = ANY (v_replaced) AND e.status IN ('RUNNING', 'PAUSED')
                ORDER BY e.id FOR UPDATE
            );
            PERFORM harvest._lock_mutex_keys(v_replaced);
        END IF;
    END IF;
    v_prior := harvest._start_resolve_prior(p_workflow_name, v_workflow_id, p_reuse_policy, p_conflict_policy);
    IF v_prior.id IS NOT NULL THEN
        RETURN QUERY SELECT v_prior.id, v_prior.workflow_id, v_prior.status, false;
        RETURN;
    END IF;

    IF v_policy ?| ARRAY['quota', 'concurrency'] THEN
        IF p_continues THEN  -- the same run going on: its keys, its quota not checked again
            v_keys := harvest._resolve_flow_keys(p_input, v_policy);
        ELSE
            v_keys := harvest._start_flow_keys(p_workflow_name, p_input, v_policy);
        END IF;
        v_quota_key := v_keys.quota_key;
        v_concurrency_key := v_keys.concurrency_key;
    END IF;
    v_id := harvest._start_insert(p_workflow_name, p_input, v_workflow_id, p_queue, p_search_attributes,
        p_priority, p_parent_id, v_shard, p_execution_timeout_secs, p_run_timeout_secs, v_policy,
        v_quota_key, v_concurrency_key, NULL, p_traceparent);
    -- Through the HTTP API or the dashboard (an asserted actor): audited (functions/audit.sql).
    PERFORM harvest._audit_asserted('workflow.start', v_id::text, jsonb_build_object(
        'workflow_name', p_workflow_name, 'workflow_id', v_workflow_id, 'queue', p_queue,
        'reuse_policy', p_reuse_policy, 'conflict_policy', p_conflict_policy, 'outcome', 'started'));
    RETURN QUERY SELECT v_id, v_workflow_id, 'RUNNING'::text, true;
END;
$$;

-- A client's start (the Python Client, the CLI, the HTTP API, psql): _start_workflow with
-- no parent and every gate.
CREATE OR REPLACE FUNCTION harvest.start_workflow(
    p_workflow_name text,
    p_input jsonb DEFAULT '[]'::jsonb,
    p_workflow_id text DEFAULT NULL,
    -- NULL: the queue the workers registered the workflow on (_start_queue).
    p_queue text DEFAULT NULL,
    p_reuse_policy text DEFAULT 'allow_duplicate',
    p_conflict_policy text DEFAULT 'unspecified',
    p_search_attributes jsonb DEFAULT '{}'::jsonb,
    p_priority integer DEFAULT 0,
    -- NULL: this database's shard; another shard's number is refused (HR011).
    p_shard integer DEFAULT NULL,
    p_execution_timeout_secs double precision DEFAULT NULL,
    p_run_timeout_secs double precision DEFAULT NULL,
    -- The W3C traceparent of the starting span: the run's spans continue its trace.
    p_traceparent text DEFAULT NULL
)
RETURNS TABLE (execution_id uuid, workflow_id text, status text, started_fresh boolean)
LANGUAGE sql
AS $$
    SELECT * FROM harvest._start_workflow(
        p_workflow_name => p_workflow_name, p_input => p_input, p_workflow_id => p_workflow_id,
        p_queue => coalesce(p_queue, harvest._start_queue(p_workflow_name)), p_reuse_policy => p_reuse_policy, p_conflict_policy => p_conflict_policy,
        p_search_attributes => p_search_attributes, p_priority => p_priority, p_parent_id => NULL,
        p_shard => p_shard, p_execution_timeout_secs => p_execution_timeout_secs,
        p_run_timeout_secs => p_run_timeout_secs, p_flow_gates => true, p_traceparent => p_traceparent);
$$;
COMMENT ON FUNCTION harvest.start_workflow(
    text, jsonb, text, text, text, text, jsonb, integer, integer, double precision, double precision, text
) IS
'Start a workflow run: the execution, its WorkflowStarted event and first workflow task, after the reuse and conflict '
'policies resolve any prior run of (workflow_name, workflow_id) and the flow policy''s gates admit it; returns '
'execution_id, workflow_id, status (RUNNING, a prior''s, or DEFERRED) and started_fresh; the id is minted for this '
'database''s shard, and a p_shard naming another is refused with HR011; p_queue NULL (the default) is the one queue '
'the workers registered the workflow on, default when none did or default is among several, HR001 naming them when '
'several others did; p_traceparent (a W3C traceparent, HR001 when '
'malformed) puts the run''s spans in the caller''s trace. Called by clients (Python '
'Client, CLI, psql; role harvest_operator, and harvest_admin for a policy that can terminate a live run); the '
'engine''s own starts (children, continue-as-new, released deferred starts) go through harvest._start_workflow.';

-- Whether a workflow's declared policy has a start gate (a throttle, debounce or batch,
-- flow_throttle.sql), which a client's start takes before its start lock.
CREATE OR REPLACE FUNCTION harvest._start_gated(p_workflow_name text)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT coalesce((SELECT p.policy ?| ARRAY['throttle', 'debounce', 'batch'] FROM harvest.flow_policies AS p
                     WHERE p.kind = 'workflow' AND p.name = p_workflow_name), false);
$$;

-- The live runs that replacing starts among p_starts (terminate_existing, terminate_if_running;
-- start_workflows' elements, or what _start_admission says a gated start will do) end: each
-- named key's live prior, read as _start_resolve_prior reads it, for the caller's id-ordered
-- pass (_lock_superseded_runs, p_runs), under the starts' locks.
CREATE OR REPLACE FUNCTION harvest._replaced_runs(p_starts jsonb)
RETURNS uuid[]
LANGUAGE sql STABLE
AS $$
    SELECT ARRAY(
        SELECT r.id
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_starts) = 'array' THEN p_starts ELSE '[]' END) AS u
        CROSS JOIN LATERAL (
            SELECT e.id FROM harvest.executions AS e
            WHERE e.workflow_id = u.value ->> 'workflow_id'
              AND e.workflow_name BETWEEN u.value ->> 'workflow_name' AND u.value ->> 'workflow_name'
              AND e.status IN ('RUNNING', 'PAUSED')
            ORDER BY e.workflow_name  -- (read as _start_resolve_prior reads it: by its index)
        ) AS r
        WHERE jsonb_typeof(u.value) = 'object' AND jsonb_typeof(u.value -> 'workflow_id') = 'string'
          AND harvest._start_action('RUNNING', coalesce(u.value ->> 'reuse_policy', 'allow_duplicate'),
                                    coalesce(u.value ->> 'conflict_policy', 'unspecified')) = 'replace'
    );
$$;

-- One element of a batch of starts (start_workflows; p_n its position, for the message) as
-- start_workflow's arguments, the defaults filled in; HR001 for an element that is not an
-- object naming its workflow, or whose "queue" and "task_queue" (its deprecated spelling)
-- disagree.
CREATE OR REPLACE FUNCTION harvest._start_args(
    p_args jsonb, p_n integer,
    OUT workflow_name text, OUT input jsonb, OUT workflow_id text, OUT queue text, OUT reuse_policy text,
    OUT conflict_policy text, OUT search_attributes jsonb, OUT priority integer, OUT shard integer,
    OUT execution_timeout_secs double precision, OUT run_timeout_secs double precision, OUT traceparent text
)
LANGUAGE plpgsql
AS $$
BEGIN
    IF jsonb_typeof(p_args) IS DISTINCT FROM 'object'
       OR jsonb_typeof(p_args -> 'workflow_name') IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION 'start % needs "workflow_name" as a JSON string', p_n USING ERRCODE = 'HR001';
    END IF;
    -- "task_queue" is the deprecated spelling of "queue" (accepted for one release).
    IF p_args ? 'queue' AND p_args ? 'task_queue' AND p_args -> 'queue' IS DISTINCT FROM p_args -> 'task_queue' THEN
        RAISE EXCEPTION 'start % gives "queue" % and "task_queue" %, which disagree', p_n,
            p_args -> 'queue', p_args -> 'task_queue' USING ERRCODE = 'HR001',
            HINT = 'pass "queue" only ("task_queue" is its deprecated spelling)';
    END IF;
    workflow_name := p_args ->> 'workflow_name';
    input := coalesce(p_args -> 'input', '[]'::jsonb);
    workflow_id := p_args ->> 'workflow_id';
    queue := coalesce(p_args ->> 'queue', p_args ->> 'task_queue', harvest._start_queue(workflow_name));
    reuse_policy := coalesce(p_args ->> 'reuse_policy', 'allow_duplicate');
    conflict_policy := coalesce(p_args ->> 'conflict_policy', 'unspecified');
    search_attributes := coalesce(p_args -> 'search_attributes', '{}'::jsonb);
    -- (_start_check_ranges and _start_check_shard bound them; these refuse what is no number)
    priority := coalesce(harvest._json_integer(p_args -> 'priority', 'priority', p_where => 'start ' || p_n), 0);
    shard := harvest._json_integer(p_args -> 'shard', 'shard', p_where => 'start ' || p_n);
    execution_timeout_secs := harvest._json_number(p_args -> 'execution_timeout', 'execution_timeout',
                                                   p_where => 'start ' || p_n);
    run_timeout_secs := harvest._json_number(p_args -> 'run_timeout', 'run_timeout', p_where => 'start ' || p_n);
    traceparent := p_args ->> 'traceparent';
END;
$$;

-- The admission of a gated start (one whose workflow declares a start throttle, debounce or
-- batch) of a transaction that starts it after it locks every run its starts may end
-- (start_workflows; a terminate_other slot, schedules.sql _fire_slot): its checks, then its
-- gate (_start_defer), and no start yet. p_args: a start_workflows element. Returns
-- {action, workflow_id, release, start}: start is what the start that follows will do, for
-- the caller's lock pass (workflow_name, workflow_id, input, reuse_policy, conflict_policy,
-- as start_workflows' elements spell them): p_args under the gate's workflow_id when the gate
-- lets it through, the filled batch's run when it releases one, and JSON null when it defers
-- the start, which then locks and ends nothing. _start_admitted starts it.
CREATE OR REPLACE FUNCTION harvest._start_admission(p_args jsonb, p_n integer DEFAULT 1)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_args record := harvest._start_args(p_args, p_n);
    v_gate record;
BEGIN
    PERFORM harvest._start_check(v_args.workflow_name, v_args.input, v_args.workflow_id, v_args.queue,
        v_args.reuse_policy, v_args.conflict_policy, v_args.search_attributes, v_args.priority, v_args.shard,
        v_args.execution_timeout_secs, v_args.run_timeout_secs, true, v_args.traceparent);
    v_gate := harvest._start_defer(v_args.workflow_name,
        (SELECT p.policy FROM harvest.flow_policies AS p WHERE p.kind = 'workflow' AND p.name = v_args.workflow_name),
        v_args.input, v_args.workflow_id, v_args.queue, v_args.reuse_policy, v_args.conflict_policy,
        v_args.search_attributes, v_args.priority, v_args.execution_timeout_secs, v_args.run_timeout_secs,
        v_args.traceparent);
    RETURN jsonb_build_object(
        'action', v_gate.action, 'workflow_id', v_gate.workflow_id, 'release', to_jsonb(v_gate.release),
        'start', CASE v_gate.action
            WHEN 'start' THEN p_args || jsonb_build_object('workflow_id', v_gate.workflow_id)
            WHEN 'release' THEN harvest._pending_start_args(v_gate.release)  -- (the filled batch's run)
            ELSE 'null'::jsonb END);
END;
$$;

-- The start a gate admitted (_start_admission, p_admission; p_args the start_workflows element
-- it admitted): a deferred start's answer (no execution), a filled batch's run, or the start
-- under the gate's workflow_id, past its gate (p_flow_gates false: its checks ran at admission).
CREATE OR REPLACE FUNCTION harvest._start_admitted(p_admission jsonb, p_args jsonb, p_n integer DEFAULT 1)
RETURNS TABLE (execution_id uuid, workflow_id text, status text, started_fresh boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_args record := harvest._start_args(p_args, p_n);
BEGIN
    IF p_admission ->> 'action' = 'deferred' THEN
        RETURN QUERY SELECT NULL::uuid, p_admission ->> 'workflow_id', 'DEFERRED'::text, false;
    ELSIF p_admission ->> 'action' = 'release' THEN
        RETURN QUERY SELECT * FROM harvest._release_pending_start(
            jsonb_populate_record(NULL::harvest.pending_starts, p_admission -> 'release'));
    ELSE
        RETURN QUERY SELECT * FROM harvest._start_workflow(
            p_workflow_name => v_args.workflow_name, p_input => v_args.input,
            p_workflow_id => p_admission ->> 'workflow_id', p_queue => v_args.queue,
            p_reuse_policy => v_args.reuse_policy, p_conflict_policy => v_args.conflict_policy,
            p_search_attributes => v_args.search_attributes, p_priority => v_args.priority,
            p_shard => v_args.shard, p_execution_timeout_secs => v_args.execution_timeout_secs,
            p_run_timeout_secs => v_args.run_timeout_secs, p_flow_gates => false,
            p_traceparent => v_args.traceparent);
    END IF;
END;
$$;

-- A client's group commit of starts: each element of p_starts (a JSON array of
-- objects with start_workflow's arguments, without the p_ prefix; "shard" is
-- p_shard, refused with HR011 when it is not this database's; "task_queue" is
-- still read as the deprecated spelling of "queue") is started as
-- start_workflow would, in one transaction; n is the element's position (from 1).
-- Any start that raises fails the whole call; the client then starts the
-- elements one by one, so each gets its own answer or error. Starts of named
-- runs go in (workflow_name, workflow_id) order, so two batches take the start
-- locks in one order.
CREATE OR REPLACE FUNCTION harvest.start_workflows(p_starts jsonb)
RETURNS TABLE (n integer, execution_id uuid, workflow_id text, status text, started_fresh boolean)
LANGUAGE plpgsql
-- Planned once per session (a hot entry point of the worker; docs/performance.md, "One plan per
-- statement for the hot entry points"): every statement the call runs, nested ones too.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_start record;
    v_args record;
    v_row record;
    v_going jsonb;
    v_admissions jsonb := '{}';
    v_gated integer[];  -- the positions of the gated starts, read once
BEGIN
    IF p_starts IS NULL OR jsonb_typeof(p_starts) <> 'array' THEN
        RAISE EXCEPTION 'starts must be a JSON array of objects' USING ERRCODE = 'HR001';
    END IF;
    -- A batch of plain starts (the common one: no workflow_id, no policy): one statement
    -- per table for the lot (_starts_plain, _start_plain_batch).
    IF harvest._starts_plain(p_starts, harvest._payload_limit()) THEN
        RETURN QUERY SELECT * FROM harvest._start_plain_batch(p_starts);
        RETURN;
    END IF;
    -- More than one start: first the gates of its gated starts (a throttle, debounce or batch),
    -- in one order, and their admissions under them (_start_admission), in the starts' order;
    -- then the start locks of every start that will start (the ungated ones, those a gate lets
    -- through, the runs of the batches they fill: not a deferred one), then their flow keys
    -- (quota and cancel_running keys) in one order, before the first start (docs/internals.md,
    -- "Lock order", 1 to 3). Taken start by start, the first start's quota key came before
    -- the second's start lock and the keys in the batch's order, so two batches naming two
    -- quota keys in opposite orders deadlocked (40P01); and a gated start, left to its turn,
    -- took its gate after the locks of the starts before it and its runs after the batch's
    -- pass (tests/integration/test_row_lock_order.py).
    IF jsonb_array_length(p_starts) > 1 THEN
        SELECT coalesce(array_agg(s.ordinality::integer), '{}') INTO v_gated
        FROM jsonb_array_elements(p_starts) WITH ORDINALITY AS s
        WHERE jsonb_typeof(s.value -> 'workflow_name') = 'string'
          AND harvest._start_gated(s.value ->> 'workflow_name');
        IF cardinality(v_gated) > 0 THEN  -- (a batch with no gated start reads no policy again)
            PERFORM harvest._lock_start_gates(p_starts);
        END IF;
        FOR v_start IN
            SELECT s.value AS args, s.ordinality::integer AS n
            FROM jsonb_array_elements(p_starts) WITH ORDINALITY AS s
            WHERE s.ordinality::integer = ANY (v_gated)
            ORDER BY s.value ->> 'workflow_name', s.value ->> 'workflow_id' NULLS LAST, s.ordinality
        LOOP
            v_admissions := v_admissions
                || jsonb_build_object(v_start.n::text, harvest._start_admission(v_start.args, v_start.n));
        END LOOP;
        SELECT coalesce(jsonb_agg(g.start), '[]') INTO v_going
        FROM (
            SELECT s.value AS start FROM jsonb_array_elements(p_starts) WITH ORDINALITY AS s
            WHERE jsonb_typeof(s.value -> 'workflow_name') = 'string'
              AND s.ordinality::integer <> ALL (v_gated)
            UNION ALL
            SELECT a.value -> 'start' FROM jsonb_each(v_admissions) AS a
            WHERE jsonb_typeof(a.value -> 'start') = 'object'
        ) AS g;
        FOR v_start IN
            SELECT u.value ->> 'workflow_name' AS workflow_name, u.value ->> 'workflow_id' AS workflow_id
            FROM jsonb_array_elements(v_going) AS u
            WHERE jsonb_typeof(u.value -> 'workflow_id') = 'string'
            ORDER BY 1, 2
        LOOP
            PERFORM harvest._lock_start_key(v_start.workflow_name, v_start.workflow_id);
        END LOOP;
        PERFORM harvest._lock_flow_keys_of(coalesce(jsonb_agg(jsonb_build_object(
            'workflow_name', u.value -> 'workflow_name', 'input', u.value -> 'input', 'quota', true)), '[]'))
        FROM jsonb_array_elements(v_going) AS u;
        -- Then every run their latest-wins starts may supersede and the live prior of each
        -- replacing start (terminate_existing, terminate_if_running), all in id order, and the
        -- mutex keys those runs hold, before the first start supersedes or ends any (decide.sql,
        -- _lock_superseded_runs): each start locked its own key's runs, in the batch's order,
        -- and a replacing start its prior after the batch held the superseded runs, a lower id
        -- after a higher: 40P01 with a group commit of those runs (tests/integration/
        -- test_mutex_flow_key_order.py). (Read under the start locks taken above.)
        PERFORM harvest._lock_superseded_runs(v_going, p_runs => harvest._replaced_runs(v_going));
    END IF;
    FOR v_start IN
        SELECT s.value AS args, s.ordinality::integer AS n
        FROM jsonb_array_elements(p_starts) WITH ORDINALITY AS s
        ORDER BY s.value ->> 'workflow_name', s.value ->> 'workflow_id' NULLS LAST, s.ordinality
    LOOP
        IF v_admissions ? v_start.n::text THEN  -- (admitted at its gate above)
            SELECT * INTO v_row FROM harvest._start_admitted(v_admissions -> v_start.n::text, v_start.args, v_start.n);
        ELSE
            v_args := harvest._start_args(v_start.args, v_start.n);
            SELECT * INTO v_row FROM harvest.start_workflow(
                p_workflow_name => v_args.workflow_name, p_input => v_args.input,
                p_workflow_id => v_args.workflow_id, p_queue => v_args.queue,
                p_reuse_policy => v_args.reuse_policy, p_conflict_policy => v_args.conflict_policy,
                p_search_attributes => v_args.search_attributes, p_priority => v_args.priority,
                p_shard => v_args.shard, p_execution_timeout_secs => v_args.execution_timeout_secs,
                p_run_timeout_secs => v_args.run_timeout_secs, p_traceparent => v_args.traceparent);
        END IF;
        -- A caller that will wait marks itself on a run this start created (and only there:
        -- a run it attached to may be closing, so that one is marked by wait_for_result).
        IF v_start.args ? 'result_waiter' AND v_row.started_fresh AND v_row.status = 'RUNNING'
           AND v_row.execution_id IS NOT NULL THEN
            INSERT INTO harvest.result_waiters (execution_id, waiter_id, since)
            VALUES (v_row.execution_id, (v_start.args ->> 'result_waiter')::uuid, harvest.now())
            ON CONFLICT DO NOTHING;
        END IF;
        n := v_start.n;
        execution_id := v_row.execution_id;
        workflow_id := v_row.workflow_id;
        status := v_row.status;
        started_fresh := v_row.started_fresh;
        RETURN NEXT;
    END LOOP;
END;
$$;
COMMENT ON FUNCTION harvest.start_workflows(jsonb) IS
'A client''s group commit of starts: each element of a JSON array of start_workflow''s arguments (without the p_ '
'prefix, "shard" for p_shard) started as start_workflow would, in one transaction; any error (HR011 for a '
'shard that is not this database''s) fails the whole call. Called by the Python '
'Client''s batched starts (role harvest_operator).';
