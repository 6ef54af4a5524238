-- Workflow tasks: a worker replays the history, runs the workflow code and sends
-- back the commands it issued. complete_workflow_task applies them atomically:
-- a WorkflowTaskCompleted{through} marker, then one event per command, the
-- activity tasks and timers they create, and the run's end if it ended.
-- See docs/internals.md for the command shapes and the replay rule.
--
-- Layout: the claimed-task locks (_try_lock_claimed_task, _lock_claimed_task),
-- _require (a command's field), the command functions (_decide_<command type>,
-- one each) and the hard caps (_decide_history_caps), their dispatcher
-- _apply_decision, the entry points (complete_workflow_task,
-- complete_workflow_tasks, fail_workflow_task), and the two commands whose work
-- starts a run (_start_child, _continue_as_new).

-- Lock a running task of the given kind held under the caller's fencing token,
-- or say why not without raising (problem: gone, kind, stale or expired), so a
-- batch can refuse one item and go on. The execution row is locked first (the
-- documented lock order).
CREATE OR REPLACE FUNCTION harvest._try_lock_claimed_task(
    p_task_id bigint, p_fencing_token bigint, p_kind text,
    OUT task harvest.tasks, OUT problem text, OUT message text
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution_id uuid;
    v_try record;
BEGIN
    SELECT t.execution_id INTO v_execution_id FROM harvest.tasks AS t WHERE t.id = p_task_id;
    IF FOUND THEN
        PERFORM 1 FROM harvest.executions WHERE id = v_execution_id FOR UPDATE;
    END IF;
    v_try := harvest._try_lock_task_of_locked_run(p_task_id, p_fencing_token, p_kind);
    task := v_try.task;
    problem := v_try.problem;
    message := v_try.message;
END;
$$;

-- What is wrong with a task row for a worker that claimed it as a p_kind task under
-- p_fencing_token, at p_now: 'kind', 'stale' (claimed again, or no longer running), 'expired'
-- (its lease ended), or NULL (nothing: the worker may complete it). The one statement of
-- these rules: _try_lock_task_of_locked_run names the problem with it, and
-- complete_activities' one-statement DELETE of a usual result takes a task only where it is
-- NULL. A SQL function of its columns, so it is inlined into both (a row argument would
-- build the whole row per call).
CREATE OR REPLACE FUNCTION harvest._claimed_task_problem(
    p_kind text, p_status text, p_fencing_token bigint, p_lease_expires_at timestamptz,
    p_expected_kind text, p_expected_token bigint, p_now timestamptz
)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN p_kind <> p_expected_kind THEN 'kind'
        WHEN p_status <> 'running' OR p_fencing_token IS DISTINCT FROM p_expected_token THEN 'stale'
        WHEN p_lease_expires_at < p_now THEN 'expired'
    END
$$;

-- _try_lock_claimed_task's second half, for a caller that holds the task's run row already
-- (complete_activities' later results of one run: the lock order, run then task, holds):
-- lock the task row and say what is wrong with it, in _try_lock_claimed_task's words.
CREATE OR REPLACE FUNCTION harvest._try_lock_task_of_locked_run(
    p_task_id bigint, p_fencing_token bigint, p_kind text,
    OUT task harvest.tasks, OUT problem text, OUT message text
)
LANGUAGE plpgsql
AS $$
BEGIN
    SELECT * INTO task FROM harvest.tasks AS t WHERE t.id = p_task_id FOR UPDATE;
    IF NOT FOUND THEN
        problem := 'gone';
        message := format('task %s is gone: its lease expired or the run ended, and the work '
                          'was handed on', p_task_id);
    ELSE
        problem := harvest._claimed_task_problem(task.kind, task.status, task.fencing_token,
                                                 task.lease_expires_at, p_kind, p_fencing_token, harvest.now());
        message := CASE problem
            WHEN 'kind' THEN format('task %s is a %s task, not a %s task', p_task_id, task.kind, p_kind)
            WHEN 'stale' THEN format('task %s was claimed again (fencing token %s is stale)',
                                     p_task_id, p_fencing_token)
            WHEN 'expired' THEN format('task %s: the lease expired at %s, so this result is refused',
                                       p_task_id, harvest._iso_time(task.lease_expires_at))
        END;
    END IF;
    IF problem IS NOT NULL THEN
        task := NULL;
    END IF;
END;
$$;

-- The raising form of _try_lock_claimed_task, for single-task entry points.
CREATE OR REPLACE FUNCTION harvest._lock_claimed_task(
    p_task_id bigint, p_fencing_token bigint, p_kind text
)
RETURNS harvest.tasks
LANGUAGE plpgsql
AS $$
DECLARE
    v_try record;
BEGIN
    v_try := harvest._try_lock_claimed_task(p_task_id, p_fencing_token, p_kind);
    CASE v_try.problem
    WHEN 'kind' THEN
        RAISE EXCEPTION '%', v_try.message USING ERRCODE = 'HR001';
    WHEN 'expired' THEN
        RAISE EXCEPTION '%', v_try.message USING ERRCODE = 'HR004',
            HINT = 'raise the timeout (start_to_close or the workflow task lease) or heartbeat';
    WHEN 'gone', 'stale' THEN
        RAISE EXCEPTION '%', v_try.message USING ERRCODE = 'HR004';
    ELSE
        RETURN v_try.task;
    END CASE;
END;
$$;

-- Take the start locks (functions/start.sql) that a decision's commands will take, then their flow keys,
-- before any execution row: its own run's business key for a continue_as_new, a
-- local child's for a start_child_workflow (its workflow_id, or the one _start_child
-- derives). p_commands[i] is the command array of the task p_task_ids[i] (NULL: none).
-- Every start takes its key's start lock before it locks the key's runs, so a
-- decision that locked its run first and then waited on the lock deadlocked with a
-- signal_with_start (or any attaching start) of the rotating key: the start held the
-- lock and waited on the run's row (docs/internals.md, "Lock order"). Keys go in
-- (workflow_name, workflow_id) order, as start_workflows takes them. A run's name and
-- workflow_id never change, so they are read without a lock. Commands that are not
-- well formed lock nothing here: the dispatcher refuses them.
-- Whether one decision's commands (a JSON array; anything else: false) start a run,
-- a continue_as_new or a start_child_workflow: only those need their start locks.
-- An expression (inlined where it is called), so a commit of one decision asks it
-- without a statement: the lock function's call and its probe are two executor
-- start-ups on every commit (docs/performance.md, "Per-call costs at one item").
CREATE OR REPLACE FUNCTION harvest._starts_runs(p_commands jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(jsonb_typeof(p_commands) = 'array'
                    AND (p_commands @> '[{"type": "continue_as_new"}]'
                         OR p_commands @> '[{"type": "start_child_workflow"}]'), false);
$$;

-- Whether one decision's commands (a JSON array; anything else: false) act on its own run
-- only in a batch: each a schedule_activity, start_timer, cancel_timer, hold_wakeups, a
-- record_marker that is not a mutex's, or a close (complete_workflow, fail_workflow,
-- cancel_workflow: in a batch its row update and its _after_close are held with the
-- decision's append, _apply_decision, and made when the held rows go in). Any other command
-- may append to another run or read its row in the same transaction (a mutex grant, a
-- child's start, continue-as-new, an external command, an update's answer), so a batch's
-- caller writes the run rows it holds back (_update_held_rows) before such a decision. Such
-- decisions go in one append (none of these commands appends on its own). An expression
-- (inlined where it is called), as _starts_runs.
CREATE OR REPLACE FUNCTION harvest._acts_on_own_run(p_commands jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(jsonb_typeof(p_commands) = 'array'
                    AND NOT p_commands @? '$[*] ? (!(@.type == "schedule_activity" || @.type == "start_timer"
                                                   || @.type == "cancel_timer" || @.type == "hold_wakeups"
                                                   || @.type == "complete_workflow" || @.type == "fail_workflow"
                                                   || @.type == "cancel_workflow"
                                                   || (@.type == "record_marker" && !(@.kind == "mutex_acquire"
                                                                                      || @.kind == "mutex_release"))))',
                    false);
$$;

CREATE OR REPLACE FUNCTION harvest._lock_decision_start_keys(p_task_ids bigint[], p_commands jsonb[])
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_names text[];
    v_ids text[];
    v_inputs jsonb[];
    v_quotas boolean[];
    v_local boolean[];
    v_key record;
    v_starts jsonb;
BEGIN
    -- The common decision starts nothing: no lookup at all.
    IF NOT EXISTS (SELECT 1 FROM unnest(p_commands) AS c (commands) WHERE harvest._starts_runs(c.commands)) THEN
        RETURN;
    END IF;
    -- The starts the decisions make, each run probed and its commands read once for both
    -- passes below: a continue_as_new's successor (its run's name and key, its quota not
    -- checked again: _start_workflow), a child (its workflow_id, or <parent workflow_id>/<seq>;
    -- not local on another shard, where it is started, and gated, on its own).
    SELECT array_agg(k.workflow_name), array_agg(k.workflow_id), array_agg(c.command -> 'input'),
           array_agg(k.quota), array_agg(k.local)
    INTO v_names, v_ids, v_inputs, v_quotas, v_local
    FROM unnest(p_task_ids, p_commands) AS u (task_id, commands)
    -- (A scalar probe per id, not a join: see complete_workflow_tasks.)
    CROSS JOIN LATERAL (
        SELECT e.workflow_name, e.workflow_id FROM harvest.executions AS e
        WHERE e.id = (SELECT t.execution_id FROM harvest.tasks AS t WHERE t.id = u.task_id)
    ) AS e
    CROSS JOIN LATERAL jsonb_array_elements(
        CASE WHEN jsonb_typeof(u.commands) = 'array' THEN u.commands ELSE '[]' END) AS c (command)
    CROSS JOIN LATERAL (
        SELECT e.workflow_name, e.workflow_id, false AS quota, true AS local
        WHERE c.command ->> 'type' = 'continue_as_new'
        UNION ALL
        SELECT c.command ->> 'workflow_name',
               coalesce(c.command ->> 'workflow_id', CASE WHEN jsonb_typeof(c.command -> 'seq') = 'number'
                   THEN e.workflow_id || '/' || harvest._json_integer(c.command -> 'seq', 'seq') END),
               true,
               jsonb_typeof(c.command -> 'shard') IS DISTINCT FROM 'number'
               OR c.command -> 'shard' = to_jsonb(harvest.get_shard_id())
        WHERE c.command ->> 'type' = 'start_child_workflow'
          AND jsonb_typeof(c.command -> 'workflow_name') = 'string'
    ) AS k;
    FOR v_key IN
        SELECT DISTINCT s.workflow_name, s.workflow_id
        FROM unnest(v_names, v_ids) AS s (workflow_name, workflow_id)
        WHERE s.workflow_id IS NOT NULL
        ORDER BY s.workflow_name, s.workflow_id
    LOOP
        PERFORM harvest._lock_start_key(v_key.workflow_name, v_key.workflow_id);
    END LOOP;
    -- Then the flow keys those starts take (a local child's quota key, a cancel_running
    -- key): the starts took them after the run's row, and a client start holding a key and
    -- then locking that run (a run it supersedes, or a signal in the caller's transaction),
    -- or a decision taking two keys in the other order, deadlocked with them (40P01).
    -- Only where some workflow declares such a key: the statement below costs a decision
    -- that starts a child about 0.2 ms.
    IF NOT EXISTS (SELECT 1 FROM harvest.flow_policies AS p
                   WHERE p.kind = 'workflow'
                     AND (p.policy ? 'quota' OR p.policy #>> '{concurrency,on_conflict}' = 'cancel_running')) THEN
        RETURN;
    END IF;
    SELECT coalesce(jsonb_agg(jsonb_build_object(
        'workflow_name', s.workflow_name, 'input', s.input, 'quota', s.quota)), '[]')
    INTO v_starts
    FROM unnest(v_names, v_inputs, v_quotas, v_local) AS s (workflow_name, input, quota, local)
    WHERE s.local;
    PERFORM harvest._lock_flow_keys_of(v_starts);
    -- Then, where those starts supersede runs, the decisions' own runs and those, in id order,
    -- and every mutex key they hold or the decisions name, in key order, before the first
    -- start (flow_concurrency.sql, _lock_superseded_runs): each child's or successor's start
    -- locked its own key's runs as the decision reached it.
    PERFORM harvest._lock_superseded_runs(v_starts, p_task_ids, p_commands);
END;
$$;

-- The runs p_runs and those of the tasks p_task_ids, locked in id order, then every mutex key
-- those runs hold or wait for and the mutex markers of p_commands name (p_commands[i]: the
-- command array of a decision, NULL: none), in key order (_lock_mutex_keys; docs/internals.md,
-- "Lock order", 4 and 5): the one pass of _lock_batch_mutexes and _lock_superseded_runs.
CREATE OR REPLACE FUNCTION harvest._lock_runs_and_mutexes(
    p_runs uuid[], p_task_ids bigint[], p_commands jsonb[]
)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_runs uuid[];
BEGIN
    -- (The sort is below the row lock: locked in id order. By an id array, not a join: see
    -- complete_workflow_tasks.)
    v_runs := ARRAY(
        SELECT e.id FROM harvest.executions AS e
        WHERE e.id = ANY (
            coalesce(p_runs, '{}')
            || ARRAY(SELECT t.execution_id FROM harvest.tasks AS t WHERE t.id = ANY (p_task_ids))
        )
        ORDER BY e.id FOR UPDATE
    );
    PERFORM harvest._lock_mutex_keys(v_runs, ARRAY(
        SELECT c.command #>> '{value,key}'
        FROM unnest(p_commands) AS u (commands)
        CROSS JOIN LATERAL jsonb_array_elements(
            CASE WHEN jsonb_typeof(u.commands) = 'array' THEN u.commands ELSE '[]' END) AS c (command)
        WHERE c.command ->> 'type' = 'record_marker'
          AND c.command ->> 'kind' IN ('mutex_acquire', 'mutex_release')
    ));
END;
$$;

-- A group commit's mutex keys, all of them before its first decision (complete_workflow_tasks,
-- complete_activities with decisions ahead; p_commands[i] is the command array of the task
-- p_task_ids[i], NULL: none): first every run of the batch's tasks, locked in id order, then every
-- mutex key a decision of the batch may take, in key order as _apply_decision and
-- _mutex_release_all take theirs (docs/internals.md, "Lock order", 4 and 5): the keys its mutex
-- markers name, and those its runs hold or wait for (a close releases them). Taken as each item
-- came, a batch held its first run's key while it waited on a later run's row or key, and two
-- batches whose runs named two keys in opposite id orders deadlocked (40P01;
-- tests/integration/test_row_lock_order.py), as did a batch and a cancel of a later run holding
-- the key. After the rows: what a run holds or waits for changes only under its row lock (a
-- grant to a run takes its row SKIP LOCKED). The items' own locks then find all held. Nothing is
-- locked where no decision names a mutex and none is held or waited for (the usual batch).
CREATE OR REPLACE FUNCTION harvest._lock_batch_mutexes(p_task_ids bigint[], p_commands jsonb[])
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM unnest(p_commands) AS c (commands)
        WHERE jsonb_typeof(c.commands) = 'array'
          AND (c.commands @? '$[*] ? (@.type == "record_marker" && (@.kind == "mutex_acquire" || @.kind == "mutex_release"))'
               OR EXISTS (SELECT 1 FROM harvest.mutex_locks) OR EXISTS (SELECT 1 FROM harvest.mutex_waiters))
    ) THEN
        RETURN;
    END IF;
    PERFORM harvest._lock_runs_and_mutexes(NULL, p_task_ids, p_commands);
END;
$$;

-- Take the flow keys that starts will take (functions/flow_quotas.sql, flow_concurrency.sql),
-- in one order, before the caller locks any execution row or (start_workflows) starts the
-- first of them: quota keys (their rows of harvest.flow_keys) first, then cancel_running
-- keys (the advisory lock _supersede takes, then the row), each kind in (hashtext(key), key)
-- order (docs/internals.md, "Lock order", 3). The starts that follow find them held.
-- p_starts: a JSON array of {workflow_name, input, quota}; quota false for a continue-as-new
-- successor, whose quota is not checked. An element that is not well formed locks nothing.
CREATE OR REPLACE FUNCTION harvest._lock_flow_keys_of(p_starts jsonb)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_key record;
BEGIN
    FOR v_key IN
        SELECT DISTINCT f.kind, f.key, hashtext(f.key) AS bucket
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_starts) = 'array' THEN p_starts ELSE '[]' END)
            AS s (start)
        JOIN harvest.flow_policies AS p
          ON p.kind = 'workflow' AND jsonb_typeof(s.start) = 'object'
             AND p.name = s.start ->> 'workflow_name' AND jsonb_typeof(s.start -> 'workflow_name') = 'string'
        CROSS JOIN LATERAL harvest._resolve_flow_keys(coalesce(s.start -> 'input', '[]'), p.policy) AS r
        CROSS JOIN LATERAL (
            -- The rows the starts take: a quota key's (_check_quota), a cancel_running key's (_supersede).
            SELECT 'quota'::text AS kind, r.quota_key AS key
            WHERE s.start -> 'quota' = 'true'
            UNION ALL
            SELECT 'concurrency', r.concurrency_key
            WHERE p.policy #>> '{concurrency,on_conflict}' = 'cancel_running'
        ) AS f
        WHERE f.key IS NOT NULL
        ORDER BY f.kind DESC, bucket, f.key
    LOOP
        IF v_key.kind = 'concurrency' THEN
            PERFORM pg_advisory_xact_lock(v_key.bucket);  -- _supersede's lock
        END IF;
        PERFORM harvest._take_flow_key(v_key.kind, v_key.key);
    END LOOP;
END;
$$;

-- Before the first of several latest-wins starts (a batch of starts, start_workflows; a
-- decision's or a group commit's children and successors, _lock_decision_start_keys, after
-- their flow keys): every run they may supersede (flow_concurrency.sql, _superseded_runs) and
-- the runs of the tasks p_task_ids, all in id order, then every mutex key those runs hold or
-- wait for and the mutex markers of p_commands name, in key order (_lock_mutex_keys;
-- docs/internals.md, "Lock order", 4 and 5). Each _supersede locked its own key's runs as its
-- start came, so a transaction superseding runs of two keys held the one it reached first and
-- waited on the other while a group commit of both runs' decisions, locking them in id order,
-- held the other: 40P01 (tests/integration/test_row_lock_order.py). p_runs: more runs to lock
-- with them (a batch's replacing starts' live priors, start_workflows: each start's replace
-- pass locked its prior after the batch held these, out of id order, 40P01;
-- tests/integration/test_mutex_flow_key_order.py). Nothing is locked where the starts
-- supersede nothing and p_runs is empty (the usual call).
CREATE OR REPLACE FUNCTION harvest._lock_superseded_runs(
    p_starts jsonb, p_task_ids bigint[] DEFAULT NULL, p_commands jsonb[] DEFAULT NULL,
    p_runs uuid[] DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_runs uuid[] := harvest._superseded_runs(p_starts) || coalesce(p_runs, '{}');
BEGIN
    IF cardinality(v_runs) = 0 THEN
        RETURN;
    END IF;
    PERFORM harvest._lock_runs_and_mutexes(v_runs, p_task_ids, p_commands);
END;
$$;

CREATE OR REPLACE FUNCTION harvest._require(p_command jsonb, p_field text, p_type text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF jsonb_typeof(p_command -> p_field) IS DISTINCT FROM p_type THEN
        RAISE EXCEPTION 'command % needs "%" as a JSON %, got %', p_command ->> 'type', p_field,
            p_type, coalesce(jsonb_typeof(p_command -> p_field), 'nothing') USING ERRCODE = 'HR001',
            -- (as core.sql's _refuse_json_value names a field: InvalidArgument.field, a 400's "field")
            DETAIL = jsonb_build_object('field', p_field,
                                        'given', left(coalesce((p_command -> p_field)::text, 'nothing'), 100))::text;
    END IF;
    RETURN p_command -> p_field;
END;
$$;

-- The commands of a decision, one function each (_decide_<command type>), which
-- _apply_decision calls in the commands' order. Each checks its command, does its
-- work (tasks, a child's start, an update's answer) and returns the one event the
-- decision appends for it in event_type/event_data, or NULL there when it appended
-- its own events (start_child_workflow, complete_update, continue_as_new, a mutex
-- marker, signal_external_workflow and cancel_external_workflow, whose outcome may
-- follow at once: the dispatcher appends the events buffered before such a command
-- first).
-- A command that ends the run sets ends_run, and close_status/close_output/
-- close_failure when the dispatcher closes the run after the append (continue_as_new
-- closes it itself). p_seq is the command's "seq", which the dispatcher reads for the
-- commands that carry one; p_now and p_limit are the decision's clock reading and
-- payload limit.

-- A schedule_activity command's checks passed: a name, its input within p_limit, and
-- options that every later reader can cast (an inlined SQL expression: the usual command
-- is checked with no call). The options are read long after the decision, by other
-- callers: a claim of the queue (the timeouts, the rate limit's bucket), a failed attempt
-- and the scanner's expiry (the retry policy, dead_letter). A value they cannot cast (a
-- string, an array, a fraction where an integer goes, a duration that overflows an
-- interval) made every claim of the queue, and then every scan, fail while the task
-- waited, so each is held here to what those readers take: a timeout a number of seconds
-- from 1e-300 to 100 years (3155760000), as harvest.core.durations bounds it;
-- priority and retry.max_attempts 32-bit integers; retry intervals 0 or 1e-300 to 100 years;
-- backoff a number; dead_letter a boolean; priority_aging_secs a timeout's range and
-- max_concurrent an integer of at least 1 (the task's insert trigger casts them); rate_limit an object with rps from 1e-300 and
-- burst at least 1 (backoff, rps and burst at most 1e300 in size: a double's range, 1e400 was
-- 22003 at every claim of the queue; and a number nearer 0 than 1e-300 but 0 is refused, as
-- core.sql's _json_number refuses it: 1e-400 passed `@ <= 0` and was 22003 at the cast, 1e-310
-- a timeout of nothing); null anywhere the default. One jsonpath, a constant of the cached
-- plan: strict, so an array is not unwrapped into its element and a key that is absent
-- only leaves its exists() unknown (lax, or strict without exists(), was 1.1-2.2x dearer on
-- the SDK's options). _activity_scheduled names the value out of place with the same
-- tests, one field at a time (keep the two alike). The options' part depends on the options
-- alone: _apply_decision runs it once for a decision's commands with equal options (the 100
-- of a gather: the jsonpath was about 8 us of backend CPU per activity; docs/performance.md,
-- "Fan-out row, thirteenth cut"), the rest (_activity_command_head_ok) for every command.
CREATE OR REPLACE FUNCTION harvest._activity_command_ok(p_command jsonb, p_limit integer)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT harvest._activity_command_head_ok(p_command, p_limit)
        AND coalesce(jsonb_typeof(p_command -> 'options') IN ('object', 'null'), true)
        AND NOT coalesce(p_command @? 'strict $.options ? (
            exists(@.start_to_close ? (@.type() != "number" && @.type() != "null" || @ < 1e-300 || @ > 3155760000))
            || exists(@.schedule_to_close ? (@.type() != "number" && @.type() != "null" || @ < 1e-300 || @ > 3155760000))
            || exists(@.heartbeat_timeout ? (@.type() != "number" && @.type() != "null" || @ < 1e-300 || @ > 3155760000))
            || exists(@.priority ? (@.type() != "number" && @.type() != "null"
                                    || @.floor() != @ || @ < -2147483648 || @ > 2147483647))
            || exists(@.dead_letter ? (@.type() != "boolean" && @.type() != "null"))
            || exists(@.priority_aging_secs ? (@.type() != "number" && @.type() != "null" || @ < 1e-300 || @ > 3155760000))
            || exists(@.max_concurrent ? (@.type() != "number" && @.type() != "null"
                                          || @.floor() != @ || @ < 1 || @ > 2147483647))
            || exists(@.retry ? (@.type() != "object" && @.type() != "null"
                || exists(@.max_attempts ? (@.type() != "number" && @.type() != "null"
                                            || @.floor() != @ || @ < -2147483648 || @ > 2147483647))
                || exists(@.initial_interval ? (@.type() != "number" && @.type() != "null" || @ < 0 || @ > 0 && @ < 1e-300 || @ > 3155760000))
                || exists(@.max_interval ? (@.type() != "number" && @.type() != "null" || @ < 0 || @ > 0 && @ < 1e-300 || @ > 3155760000))
                || exists(@.backoff ? (@.type() != "number" && @.type() != "null" || @ < -1e300 || @ > 1e300 || @ != 0 && @ > -1e-300 && @ < 1e-300))))
            || exists(@.rate_limit ? (@.type() != "object" && @.type() != "null"
                || @.type() == "object" && !exists(@.keyvalue() ? (@.key == "rps"))
                || exists(@.rps ? (@.type() != "number" || @ < 1e-300 || @ > 1e300))
                || exists(@.burst ? (@.type() != "number" && @.type() != "null" || @ < 1 || @ > 1e300)))))', false)
$$;

-- The checks of a schedule_activity command that do not read its options (see
-- _activity_command_ok): a string name and an input within p_limit bytes (or none).
-- Inlined into its caller's expression, as _activity_command_ok is.
CREATE OR REPLACE FUNCTION harvest._activity_command_head_ok(p_command jsonb, p_limit integer)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT jsonb_typeof(p_command -> 'name') IS NOT DISTINCT FROM 'string'
        AND (octet_length((p_command -> 'input')::text) > p_limit) IS NOT TRUE
$$;

-- A schedule_activity command's priority (0: none), on a command _activity_command_ok passed:
-- its jsonpath held options.priority to a whole number in 32 bits or null, so the text goes
-- through numeric (2.0 is 2) with no check of its own. The core rule (_json_integer) cost 2-3 us
-- an activity here, about 4% of the SQL path's server CPU a workflow (sql_path_ab, 8 pairs).
-- Inlined into its caller's expression (the command is read once).
CREATE OR REPLACE FUNCTION harvest._activity_priority(p_command jsonb)
RETURNS integer
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce((p_command #>> '{options,priority}')::numeric::integer, 0)
$$;

-- The data of a scheduled activity's ActivityScheduled event, on p_queue (the
-- command's, else its run's). SQL and STABLE (jsonb_build_object is), so a caller's
-- expression inlines it.
CREATE OR REPLACE FUNCTION harvest._activity_scheduled_data(p_queue text, p_seq integer, p_command jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'seq', p_seq, 'name', p_command ->> 'name', 'input', p_command -> 'input',
        'queue', p_queue, 'options', coalesce(p_command -> 'options', '{}'::jsonb))
$$;

-- A schedule_activity command checked (a name, else HR001; its input within p_limit,
-- else HR008) and the data of its ActivityScheduled event: the one description of both
-- the activity that is handed and the one that queues (_apply_decision, which tests
-- _activity_command_ok itself for both and calls this only to raise:
-- a call per queued activity, with the run's row as a composite argument, was most of
-- the dispatch's cost; docs/performance.md, "Fan-out row, seventh cut"). _require and
-- _check_payload are called only to raise: a PERFORM is a statement of its own
-- ("Fan-out row, sixth cut").
CREATE OR REPLACE FUNCTION harvest._activity_scheduled(
    p_execution harvest.executions, p_seq integer, p_command jsonb, p_limit integer
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_rule record;
BEGIN
    IF NOT harvest._activity_command_ok(p_command, p_limit) THEN
        IF jsonb_typeof(p_command -> 'name') IS DISTINCT FROM 'string' THEN
            PERFORM harvest._require(p_command, 'name', 'string');
        END IF;
        PERFORM harvest._check_payload(format('the input of activity %s (command %s)',
            p_command ->> 'name', p_seq), p_command -> 'input', p_limit);
        IF jsonb_typeof(p_command -> 'options') NOT IN ('object', 'null') THEN
            PERFORM harvest._require(p_command, 'options', 'object');
        END IF;
        -- The options' tests of _activity_command_ok, one field at a time, to name the one out of place.
        FOR v_rule IN
            SELECT r.field, r.accepts, r.bad::jsonpath AS bad FROM (VALUES
                ('start_to_close', 'a number of seconds from 1e-300 to 3155760000 (100 years), or null',
                 'strict $.start_to_close ? (@.type() != "number" && @.type() != "null" || @ < 1e-300 || @ > 3155760000)'),
                ('schedule_to_close', 'a number of seconds from 1e-300 to 3155760000 (100 years), or null',
                 'strict $.schedule_to_close ? (@.type() != "number" && @.type() != "null" || @ < 1e-300 || @ > 3155760000)'),
                ('heartbeat_timeout', 'a number of seconds from 1e-300 to 3155760000 (100 years), or null',
                 'strict $.heartbeat_timeout ? (@.type() != "number" && @.type() != "null" || @ < 1e-300 || @ > 3155760000)'),
                ('priority', 'an integer (a 32-bit one), or null',
                 'strict $.priority ? (@.type() != "number" && @.type() != "null"
                                       || @.floor() != @ || @ < -2147483648 || @ > 2147483647)'),
                ('dead_letter', 'a JSON boolean, or null',
                 'strict $.dead_letter ? (@.type() != "boolean" && @.type() != "null")'),
                ('priority_aging_secs', 'a number of seconds from 1e-300 to 3155760000 (100 years), or null',
                 'strict $.priority_aging_secs ? (@.type() != "number" && @.type() != "null" || @ < 1e-300 || @ > 3155760000)'),
                ('max_concurrent', 'an integer from 1 to 2147483647, or null',
                 'strict $.max_concurrent ? (@.type() != "number" && @.type() != "null"
                                             || @.floor() != @ || @ < 1 || @ > 2147483647)'),
                ('retry', 'a JSON object, or null', 'strict $.retry ? (@.type() != "object" && @.type() != "null")'),
                ('retry.max_attempts', 'an integer (a 32-bit one; 0: no limit), or null',
                 'strict $.retry.max_attempts ? (@.type() != "number" && @.type() != "null"
                                                 || @.floor() != @ || @ < -2147483648 || @ > 2147483647)'),
                ('retry.initial_interval', 'a number of seconds, 0 or from 1e-300 to 3155760000 (100 years), or null',
                 'strict $.retry.initial_interval ? (@.type() != "number" && @.type() != "null" || @ < 0 || @ > 0 && @ < 1e-300 || @ > 3155760000)'),
                ('retry.max_interval', 'a number of seconds, 0 or from 1e-300 to 3155760000 (100 years), or null',
                 'strict $.retry.max_interval ? (@.type() != "number" && @.type() != "null" || @ < 0 || @ > 0 && @ < 1e-300 || @ > 3155760000)'),
                ('retry.backoff', 'a number (of a double''s range: 0, or 1e-300 to 1e300 in size), or null',
                 'strict $.retry.backoff ? (@.type() != "number" && @.type() != "null" || @ < -1e300 || @ > 1e300 || @ != 0 && @ > -1e-300 && @ < 1e-300)'),
                ('rate_limit', 'a JSON object {rps, burst, key}, or null',
                 'strict $.rate_limit ? (@.type() != "object" && @.type() != "null")'),
                ('rate_limit.rps', 'a number from 1e-300 to 1e300',
                 'strict $.rate_limit ? (@.type() == "object" && !exists(@.keyvalue() ? (@.key == "rps"))
                                         || exists(@.rps ? (@.type() != "number" || @ < 1e-300 || @ > 1e300)))'),
                ('rate_limit.burst', 'a number from 1 to 1e300, or null',
                 'strict $.rate_limit.burst ? (@.type() != "number" && @.type() != "null" || @ < 1 || @ > 1e300)')
            ) AS r (field, accepts, bad)
        LOOP
            IF coalesce((p_command -> 'options') @? v_rule.bad, false) THEN
                RAISE EXCEPTION 'command schedule_activity (seq %) needs options.% as %, got %', p_seq,
                    v_rule.field, v_rule.accepts,
                    coalesce((p_command #> ('{options,' || replace(v_rule.field, '.', ',') || '}')::text[])::text,
                             'nothing')
                    USING ERRCODE = 'HR001', HINT = 'see docs/internals.md ("Commands") for the option shapes',
                    -- (as core.sql's _refuse_json_value names a field: InvalidArgument.field, a 400's "field")
                    DETAIL = jsonb_build_object(
                        'field', 'options.' || v_rule.field,
                        'given', left(coalesce((p_command #> ('{options,' || replace(v_rule.field, '.', ',')
                                                              || '}')::text[])::text, 'nothing'), 100))::text;
            END IF;
        END LOOP;
        RAISE EXCEPTION 'command schedule_activity (seq %) has options out of place: %', p_seq,
            p_command -> 'options' USING ERRCODE = 'HR001';  -- (the rules above name every case)
    END IF;
    RETURN harvest._activity_scheduled_data(coalesce(p_command ->> 'queue', p_execution.queue), p_seq, p_command);
END;
$$;

-- The task rows of a decision's queued activities (gathered by _apply_decision), in
-- command order, one INSERT: the rows of the activities it does not hand ('paused' on a
-- PAUSED run), and one notification per queue that gained pending work.
CREATE OR REPLACE FUNCTION harvest._queue_activities(
    p_execution harvest.executions, p_seqs integer[], p_commands jsonb[], p_now timestamptz
)
RETURNS void
LANGUAGE plpgsql
-- Planned once per session, whichever entry point calls it (the worker's batch entry points set
-- this for all they run; complete_workflow_task does not, and planned this INSERT with its fair
-- queue probe afresh on every call: about 250 us of a one-activity decision here).
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_queues text[];
    v_queue text;
    -- No command names a fairness key, so no row of the INSERT makes a queue fair: each row's
    -- fairness_key ('' on a fair queue, else none) is answered in the statement, and the
    -- insert trigger asks nothing per row (sql/triggers.sql: E'\x01' is its marker for none).
    v_resolved boolean := NOT EXISTS (SELECT 1 FROM unnest(p_commands) AS c (command)
                                      WHERE c.command -> 'options' ? 'fairness_key');
BEGIN
    WITH queued AS (
        INSERT INTO harvest.tasks (
            execution_id, kind, queue, priority, due_at, seq, activity_name, input, options,
            scheduled_at, deadline_at, status, run_workflow_name, run_workflow_id, fairness_key
        )
        SELECT p_execution.id, 'activity', coalesce(q.command ->> 'queue', p_execution.queue),
               harvest._activity_priority(q.command), p_now, q.seq,
               q.command ->> 'name', coalesce(q.command -> 'input', '[]'::jsonb),
               coalesce(q.command -> 'options', '{}'::jsonb), p_now,
               p_now + make_interval(secs => (q.command #>> '{options,schedule_to_close}')::double precision),
               CASE WHEN p_execution.status = 'PAUSED' THEN 'paused' ELSE 'pending' END,
               -- What a claim answers of the run (sql/tasks.sql). A handed activity carries
               -- none: its worker has it, and a claim of it after a lost lease or for a retry
               -- reads the run; the hand-off's insert, the canonical drain's, stays as narrow.
               p_execution.workflow_name, p_execution.workflow_id,
               CASE WHEN v_resolved THEN coalesce((SELECT '' FROM harvest.fair_queues AS f
                                                   WHERE f.queue = coalesce(q.command ->> 'queue', p_execution.queue)),
                                                  E'\x01') END
        FROM unnest(p_seqs, p_commands) WITH ORDINALITY AS q (seq, command, n)
        ORDER BY q.n
        RETURNING queue, status
    )
    SELECT array_agg(DISTINCT queued.queue) FILTER (WHERE queued.status = 'pending') INTO v_queues FROM queued;
    FOREACH v_queue IN ARRAY coalesce(v_queues, ARRAY[]::text[]) LOOP
        PERFORM harvest._notify_queue(v_queue);
    END LOOP;
END;
$$;

-- The task rows of a decision's handed activities (gathered by _apply_decision, each
-- one _may_hand_off allowed), in command order, one INSERT: leased to p_worker_id as a
-- claim would lease them (claim.sql, "Hand-off"); returns them as the worker receives
-- them, as rows (claim.sql _activity_for_worker), in command order. One statement for the
-- lot: an INSERT of one row pays its statement's set-up (the table's checks and its
-- trigger's WHEN read back, the executor's start) per task (docs/performance.md, "Fan-out
-- row, eighth cut"). Each row's fairness_key is answered in the INSERT ('' on a fair queue,
-- else the trigger's marker for none: a handed activity names no key; sql/triggers.sql), so
-- the insert trigger asks no query per row (docs/performance.md, "SQL path, eleventh cut").
CREATE OR REPLACE FUNCTION harvest._hand_activities(
    p_execution harvest.executions, p_seqs integer[], p_commands jsonb[], p_worker_id text,
    p_now timestamptz
)
RETURNS harvest.worker_activity_task[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_handed harvest.worker_activity_task[];
BEGIN
    -- A run of one (every handed activity of the canonical drain: a decision hands one) as
    -- a single-row INSERT ... VALUES: the statement of many below is seven plan nodes (two
    -- sorts, two tuplestores, an aggregate) against one, set up and torn down per call, and
    -- made the canonical drain's backends 1.05-1.09x (docs/performance.md, "Hand-off
    -- batching, again").
    IF cardinality(p_seqs) = 1 THEN
        INSERT INTO harvest.tasks AS t (
            execution_id, kind, queue, priority, due_at, seq, activity_name, input, options,
            scheduled_at, deadline_at, status, attempt, started_at, lease_owner, fencing_token,
            lease_expires_at, fairness_key
        ) VALUES (
            p_execution.id, 'activity', coalesce(p_commands[1] ->> 'queue', p_execution.queue),
            harvest._activity_priority(p_commands[1]), p_now, p_seqs[1],
            p_commands[1] ->> 'name', coalesce(p_commands[1] -> 'input', '[]'::jsonb),
            coalesce(p_commands[1] -> 'options', '{}'::jsonb), p_now,
            p_now + make_interval(secs => (p_commands[1] #>> '{options,schedule_to_close}')::double precision),
            'running', 1, p_now, p_worker_id, nextval('harvest.fencing_tokens'),
            p_now + make_interval(secs => harvest._lease_secs(
                'activity', coalesce(p_commands[1] -> 'options', '{}'::jsonb), 0)),
            coalesce((SELECT '' FROM harvest.fair_queues AS f
                      WHERE f.queue = coalesce(p_commands[1] ->> 'queue', p_execution.queue)), E'\x01')
        ) RETURNING ARRAY[harvest._activity_for_worker(t, p_execution)] INTO v_handed;
        RETURN v_handed;
    END IF;
    -- (The statement of many of one run: its row a constant of the statement. Through
    -- _hand_activities_of_runs, the row taken from an array per activity, the c500 fan-out's
    -- backends were 1.031x; pgTAP decide.sql holds the two statements' rows equal.)
    WITH handed AS (
        INSERT INTO harvest.tasks AS t (
            execution_id, kind, queue, priority, due_at, seq, activity_name, input, options,
            scheduled_at, deadline_at, status, attempt, started_at, lease_owner, fencing_token,
            lease_expires_at, fairness_key
        )
        SELECT p_execution.id, 'activity', coalesce(q.command ->> 'queue', p_execution.queue),
               harvest._activity_priority(q.command), p_now, q.seq,
               q.command ->> 'name', coalesce(q.command -> 'input', '[]'::jsonb),
               coalesce(q.command -> 'options', '{}'::jsonb), p_now,
               p_now + make_interval(secs => (q.command #>> '{options,schedule_to_close}')::double precision),
               'running', 1, p_now, p_worker_id, nextval('harvest.fencing_tokens'),
               p_now + make_interval(secs => harvest._lease_secs(
                   'activity', coalesce(q.command -> 'options', '{}'::jsonb), 0)),
               coalesce((SELECT '' FROM harvest.fair_queues AS f
                         WHERE f.queue = coalesce(q.command ->> 'queue', p_execution.queue)), E'\x01')
        -- (By subscript, not unnest: the planner takes unnest's size from the array, so a
        -- custom plan of one item always looked cheaper than the cached generic one and
        -- the statement was planned afresh on every call; a decision hands one activity
        -- at a time in the canonical drain.)
        FROM (SELECT s.i, p_seqs[s.i] AS seq, p_commands[s.i] AS command
              FROM generate_subscripts(p_seqs, 1) AS s (i)) AS q
        ORDER BY q.i
        -- (Built in the RETURNING list, where _activity_for_worker inlines into the row's own
        -- columns: a whole row returned and described afterwards was made a composite and
        -- taken apart again per field, a dearer statement than the single-row INSERT
        -- it replaced for a decision that hands one activity.)
        RETURNING t.id, harvest._activity_for_worker(t, p_execution) AS task
    )
    SELECT array_agg(h.task ORDER BY h.id) INTO v_handed FROM handed AS h;
    RETURN v_handed;
END;
$$;

-- _hand_activities' statement, for activities of several runs at once:
-- activity i is of run p_executions[p_runs[i]] (its row as its decision read it, which the
-- worker's copy of the task is built from: _task_for_worker), p_execution_ids those runs'
-- ids in the same order. complete_activities hands a batch's decisions' activities with
-- it (_apply_decision's p_defer_hand), one statement for the batch; _hand_activities its
-- one run's. Returns the tasks as the worker receives them (rows, as _hand_activities), in
-- the arrays' order.
CREATE OR REPLACE FUNCTION harvest._hand_activities_of_runs(
    p_executions harvest.executions[], p_execution_ids uuid[], p_runs integer[], p_seqs integer[],
    p_commands jsonb[], p_worker_id text, p_now timestamptz
)
RETURNS harvest.worker_activity_task[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_handed harvest.worker_activity_task[];
BEGIN
    IF cardinality(p_seqs) = 1 THEN  -- (the one-row statement: see _hand_activities)
        RETURN harvest._hand_activities(p_executions[p_runs[1]], p_seqs, p_commands, p_worker_id, p_now);
    END IF;
    WITH handed AS (
        INSERT INTO harvest.tasks AS t (
            execution_id, kind, queue, priority, due_at, seq, activity_name, input, options,
            scheduled_at, deadline_at, status, attempt, started_at, lease_owner, fencing_token,
            lease_expires_at, fairness_key
        )
        SELECT (q.x).id, 'activity', coalesce(q.command ->> 'queue', (q.x).queue),
               harvest._activity_priority(q.command), p_now, q.seq,
               q.command ->> 'name', coalesce(q.command -> 'input', '[]'::jsonb),
               coalesce(q.command -> 'options', '{}'::jsonb), p_now,
               p_now + make_interval(secs => (q.command #>> '{options,schedule_to_close}')::double precision),
               'running', 1, p_now, p_worker_id, nextval('harvest.fencing_tokens'),
               p_now + make_interval(secs => harvest._lease_secs(
                   'activity', coalesce(q.command -> 'options', '{}'::jsonb), 0)),
               coalesce((SELECT '' FROM harvest.fair_queues AS f
                         WHERE f.queue = coalesce(q.command ->> 'queue', (q.x).queue)), E'\x01')
        -- (unnest, not subscripts: an element of a flat array of variable-width elements, a
        -- command, is found by walking the ones before it, so a buffer of hundreds cost its
        -- square; the one-item call, whose custom plan unnest would make dearer, goes the
        -- one-row way above.)
        FROM (SELECT u.i, u.seq, u.command, p_executions[u.r] AS x
              FROM unnest(p_runs, p_seqs, p_commands) WITH ORDINALITY AS u (r, seq, command, i)) AS q
        ORDER BY q.i
        RETURNING t.id, harvest._activity_for_worker(t, p_executions[array_position(p_execution_ids, t.execution_id)])
            AS task
    )
    SELECT array_agg(h.task ORDER BY h.id) INTO v_handed FROM handed AS h;
    RETURN v_handed;
END;
$$;

-- What a batch call (complete_activities, complete_workflow_tasks) held back of its applied
-- decisions goes in: their appends' row updates with one _update_held_rows (core.sql; the
-- p_rows, NULL when none is held), their events with one _insert_events, then their
-- handed activities, one a decision, with one _hand_activities_of_runs (each activity on its
-- own row of p_hd_runs). Returns the handed tasks as the worker receives them (rows: see
-- _hand_activities), in the held order (NULL when none was held); the caller puts each in
-- its decision's answer.
CREATE OR REPLACE FUNCTION harvest._write_held(
    p_rows harvest.held_run_row[],
    p_ev_runs uuid[], p_ev_offsets bigint[], p_ev_types text[], p_ev_datas jsonb[],
    p_hd_runs harvest.executions[], p_hd_ids uuid[], p_hd_seqs integer[], p_hd_cmds jsonb[],
    p_worker_id text, p_now timestamptz
)
RETURNS harvest.worker_activity_task[]
LANGUAGE plpgsql
AS $$
BEGIN
    IF cardinality(p_rows) > 0 THEN
        PERFORM harvest._update_held_rows(p_rows, p_worker_id);
    END IF;
    IF cardinality(p_ev_runs) > 0 THEN
        PERFORM harvest._insert_events(p_ev_runs, p_ev_offsets, p_ev_types, p_ev_datas);
    END IF;
    IF cardinality(p_hd_ids) > 0 THEN
        RETURN harvest._hand_activities_of_runs(p_hd_runs, p_hd_ids,
            ARRAY(SELECT generate_series(1, cardinality(p_hd_ids))), p_hd_seqs, p_hd_cmds, p_worker_id, p_now);
    END IF;
    RETURN NULL;
END;
$$;

-- start_timer: TimerStarted{fire_at} and the timer task, due then ('paused' on a
-- PAUSED run: it fires once the run is resumed).
CREATE OR REPLACE FUNCTION harvest._decide_start_timer(
    p_execution harvest.executions, p_seq integer, p_command jsonb, p_now timestamptz,
    OUT event_type text, OUT event_data jsonb, OUT ends_run boolean,
    OUT close_status text, OUT close_output jsonb, OUT close_failure jsonb
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_fire_at timestamptz;
BEGIN
    PERFORM harvest._require(p_command, 'duration', 'number');
    INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, seq, scheduled_at, status)
    VALUES (p_execution.id, 'timer', p_execution.queue,
            -- (0 to 100 years, as harvest.core.durations bounds ctx.sleep: past that, an interval overflows)
            p_now + make_interval(secs => harvest._json_number(p_command -> 'duration', 'duration',
                                                               p_where => format('command start_timer (seq %s)', p_seq))),
            p_seq, p_now, CASE WHEN p_execution.status = 'PAUSED' THEN 'paused' ELSE 'pending' END)
    RETURNING due_at INTO v_fire_at;
    event_type := 'TimerStarted';
    event_data := jsonb_build_object('seq', p_seq, 'fire_at', v_fire_at);
END;
$$;

-- record_marker: MarkerRecorded. A mutex marker is appended alone, at once, and applied here
-- (_mutex_marker): a grant it makes to this run is the next event. Applied by the decision that
-- issues it, not by a trigger on harvest.events (until 0093): a reset's fork and a moved run copy
-- their history's markers, which re-ran a finished block's acquire and appended a second
-- MutexAcquired that no replay could match (tests/integration/test_flow_control_mutex.py).
-- A version marker (ctx.version()) is read across runs by count_versions, which casts its
-- value.version to an integer: one that is not (a string, a fraction, over 32 bits) made
-- count_versions of its change_id fail for every caller, so it is refused (HR001), as is a
-- change_id that is not a string.
CREATE OR REPLACE FUNCTION harvest._decide_record_marker(
    p_execution harvest.executions, p_seq integer, p_command jsonb, p_limit integer,
    OUT event_type text, OUT event_data jsonb, OUT ends_run boolean,
    OUT close_status text, OUT close_output jsonb, OUT close_failure jsonb
)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._require(p_command, 'kind', 'string');
    IF p_command ->> 'kind' = 'version'
       AND NOT coalesce(p_command @? 'strict $.value ? (@.change_id.type() == "string" && @.version.type() == "number"
                                                       && @.version.floor() == @.version
                                                       && @.version >= -2147483648 && @.version <= 2147483647)',
                        false) THEN
        RAISE EXCEPTION 'command record_marker (seq %) of kind version needs "value" as {"change_id": a string, '
            '"version": an integer (a 32-bit one)}, got %', p_seq, coalesce((p_command -> 'value')::text, 'nothing')
            USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._check_payload(format('the value of marker %s (command %s)',
        p_command ->> 'kind', p_seq), p_command -> 'value', p_limit);
    event_type := 'MarkerRecorded';
    event_data := jsonb_build_object(
        'seq', p_seq, 'kind', p_command ->> 'kind', 'value', p_command -> 'value');
    IF p_command ->> 'kind' IN ('mutex_acquire', 'mutex_release') THEN
        PERFORM harvest._append_events(p_execution.id, ARRAY[event_type], ARRAY[event_data]);
        PERFORM harvest._mutex_marker(p_execution.id, p_seq, p_command ->> 'kind', p_command #>> '{value,key}');
        event_type := NULL;
        event_data := NULL;
    END IF;
END;
$$;

-- cancel_timer: TimerCancelled, and the timer task is gone (a fired timer's too: its
-- TimerFired is already in the history).
CREATE OR REPLACE FUNCTION harvest._decide_cancel_timer(
    p_execution harvest.executions, p_seq integer, p_command jsonb,
    OUT event_type text, OUT event_data jsonb, OUT ends_run boolean,
    OUT close_status text, OUT close_output jsonb, OUT close_failure jsonb
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_timer_seq integer;
BEGIN
    PERFORM harvest._require(p_command, 'timer_seq', 'number');
    v_timer_seq := harvest._json_integer(p_command -> 'timer_seq', 'timer_seq',
                                         p_where => format('command cancel_timer (seq %s)', p_seq));
    -- Not "t.kind = 'timer'": that implies the partial index tasks_timers_due and
    -- a generic plan scans every timer; this form probes (execution_id, seq).
    DELETE FROM harvest.tasks AS t
    WHERE t.execution_id = p_execution.id AND t.kind IN ('activity', 'timer')
      AND (t.kind = 'timer') IS TRUE AND t.seq = v_timer_seq;
    event_type := 'TimerCancelled';
    event_data := jsonb_build_object('seq', p_seq, 'timer_seq', v_timer_seq);
END;
$$;

-- start_child_workflow: the child's start and ChildWorkflowStarted (or a typed failed
-- start), appended by _start_child (below).
CREATE OR REPLACE FUNCTION harvest._decide_start_child_workflow(
    p_execution harvest.executions, p_seq integer, p_command jsonb,
    OUT event_type text, OUT event_data jsonb, OUT ends_run boolean,
    OUT close_status text, OUT close_output jsonb, OUT close_failure jsonb
)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._start_child(p_execution, p_seq, p_command);
END;
$$;

-- complete_update: UpdateCompleted, and the update's requests answered
-- (queries.sql, _complete_update).
CREATE OR REPLACE FUNCTION harvest._decide_complete_update(
    p_execution harvest.executions, p_seq integer, p_command jsonb, p_limit integer,
    OUT event_type text, OUT event_data jsonb, OUT ends_run boolean,
    OUT close_status text, OUT close_output jsonb, OUT close_failure jsonb
)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._check_payload(format('the result of update %s', p_command ->> 'update_id'),
                                   p_command -> 'result', p_limit);
    PERFORM harvest._check_payload(format('the failure of update %s', p_command ->> 'update_id'),
                                   p_command -> 'failure', p_limit);
    PERFORM harvest._complete_update(p_execution, p_seq, p_command);
END;
$$;

-- signal_external_workflow: ExternalSignalRequested{seq, execution_id, workflow_id,
-- workflow_name, signal_name, payload[, traceparent]} and its relay (relays.sql, _decide_external);
-- the outcome comes back as ExternalSignalDelivered or ExternalSignalFailed. The
-- payload is held to the limit a client's signal is (HR008).
CREATE OR REPLACE FUNCTION harvest._decide_signal_external_workflow(
    p_execution harvest.executions, p_seq integer, p_command jsonb, p_limit integer,
    OUT event_type text, OUT event_data jsonb, OUT ends_run boolean,
    OUT close_status text, OUT close_output jsonb, OUT close_failure jsonb
)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._require(p_command, 'signal_name', 'string');
    IF btrim(p_command ->> 'signal_name') = '' THEN
        RAISE EXCEPTION 'command signal_external_workflow has an empty signal_name' USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._check_payload(format('the payload of signal %s', p_command ->> 'signal_name'),
                                   p_command -> 'payload', p_limit);
    PERFORM harvest._decide_external(p_execution, p_seq, p_command, 'external_signal', jsonb_build_object(
        'signal_name', p_command ->> 'signal_name', 'payload', coalesce(p_command -> 'payload', 'null'::jsonb))
        -- The sending task's span (tracing on): the target's SignalReceived carries it, for a link.
        || CASE WHEN p_command ->> 'traceparent' IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('traceparent', harvest._check_traceparent(p_command ->> 'traceparent')) END);
END;
$$;

-- cancel_external_workflow: ExternalCancelRequested{seq, execution_id, workflow_id,
-- workflow_name, reason} and its relay; the outcome comes back as
-- ExternalCancelDelivered{already_requested} or ExternalCancelFailed.
CREATE OR REPLACE FUNCTION harvest._decide_cancel_external_workflow(
    p_execution harvest.executions, p_seq integer, p_command jsonb, p_limit integer,
    OUT event_type text, OUT event_data jsonb, OUT ends_run boolean,
    OUT close_status text, OUT close_output jsonb, OUT close_failure jsonb
)
LANGUAGE plpgsql
AS $$
BEGIN
    IF jsonb_typeof(p_command -> 'reason') NOT IN ('string', 'null') THEN
        RAISE EXCEPTION 'command cancel_external_workflow needs "reason" as a JSON string or null, got %',
            jsonb_typeof(p_command -> 'reason') USING ERRCODE = 'HR001';
    END IF;
    PERFORM harvest._check_payload('the reason of an external cancel', p_command -> 'reason', p_limit);
    PERFORM harvest._decide_external(p_execution, p_seq, p_command, 'external_cancel',
                                     jsonb_build_object('reason', coalesce(p_command -> 'reason', 'null'::jsonb)));
END;
$$;

-- cancel_workflow: WorkflowCancelled; the run ends CANCELLED.
CREATE OR REPLACE FUNCTION harvest._decide_cancel_workflow(
    p_command jsonb, p_limit integer,
    OUT event_type text, OUT event_data jsonb, OUT ends_run boolean,
    OUT close_status text, OUT close_output jsonb, OUT close_failure jsonb
)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._check_payload('the cancellation details of the workflow', p_command -> 'details',
                                   p_limit);
    event_type := 'WorkflowCancelled';
    event_data := jsonb_build_object('details', p_command -> 'details');
    ends_run := true;
    close_status := 'CANCELLED';
    close_failure := jsonb_build_object(
        'error_type', 'Cancelled', 'message', coalesce(p_command ->> 'details', 'cancelled'),
        'non_retryable', true, 'details', p_command -> 'details');
END;
$$;

-- continue_as_new: the run ends CONTINUED_AS_NEW and its successor starts
-- (_continue_as_new, below, appends and closes).
CREATE OR REPLACE FUNCTION harvest._decide_continue_as_new(
    p_execution harvest.executions, p_command jsonb, p_through bigint, p_limit integer,
    OUT event_type text, OUT event_data jsonb, OUT ends_run boolean,
    OUT close_status text, OUT close_output jsonb, OUT close_failure jsonb
)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._check_payload(format('the continue-as-new input of workflow %s',
        p_execution.workflow_name), p_command -> 'input', p_limit);
    PERFORM harvest._continue_as_new(p_execution, coalesce(p_command -> 'input', '[]'::jsonb),
                                     p_through, coalesce(p_command -> 'signals', '[]'::jsonb),
                                     p_command ->> 'traceparent');
    ends_run := true;
END;
$$;

-- complete_workflow: WorkflowCompleted; the run ends COMPLETED with the result.
-- (_apply_decision writes the same itself and calls this only to raise: keep the two alike.)
CREATE OR REPLACE FUNCTION harvest._decide_complete_workflow(
    p_execution harvest.executions, p_command jsonb, p_limit integer,
    OUT event_type text, OUT event_data jsonb, OUT ends_run boolean,
    OUT close_status text, OUT close_output jsonb, OUT close_failure jsonb
)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._check_payload(format('the result of workflow %s', p_execution.workflow_name),
                                   p_command -> 'result', p_limit);
    event_type := 'WorkflowCompleted';
    event_data := jsonb_build_object('result', p_command -> 'result');
    ends_run := true;
    close_status := 'COMPLETED';
    close_output := p_command -> 'result';
END;
$$;

-- fail_workflow: WorkflowFailed; the run ends FAILED with the failure.
CREATE OR REPLACE FUNCTION harvest._decide_fail_workflow(
    p_execution harvest.executions, p_command jsonb, p_limit integer,
    OUT event_type text, OUT event_data jsonb, OUT ends_run boolean,
    OUT close_status text, OUT close_output jsonb, OUT close_failure jsonb
)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._require(p_command, 'failure', 'object');
    PERFORM harvest._check_payload(format('the failure of workflow %s', p_execution.workflow_name),
                                   p_command -> 'failure', p_limit);
    event_type := 'WorkflowFailed';
    event_data := jsonb_build_object('failure', p_command -> 'failure');
    ends_run := true;
    close_status := 'FAILED';
    close_failure := p_command -> 'failure';
END;
$$;

-- The hard caps, after a decision that did not end the run: a run whose history is
-- past p_event_cap events or p_byte_cap bytes (NULL: no cap) fails with a typed
-- reason (HistoryEventCapExceeded, HistoryByteCapExceeded) and is dead-lettered
-- beside exhausted activities. Returns whether it did, and the run's last event id
-- and status as read for the check (after the failure, when it failed).
CREATE OR REPLACE FUNCTION harvest._decide_history_caps(
    p_execution_id uuid, p_event_cap bigint, p_byte_cap bigint, p_now timestamptz,
    OUT capped boolean, OUT last_event_id bigint, OUT execution_status text
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
    v_cap_type text;
    v_cap_failure jsonb;
BEGIN
    SELECT * INTO v_execution FROM harvest.executions AS e WHERE e.id = p_execution_id;
    capped := coalesce(v_execution.last_event_id > p_event_cap OR v_execution.history_bytes > p_byte_cap, false);
    IF NOT capped THEN
        last_event_id := v_execution.last_event_id;
        execution_status := v_execution.status;
        RETURN;
    END IF;
    v_cap_type := CASE WHEN v_execution.last_event_id > p_event_cap
        THEN 'HistoryEventCapExceeded' ELSE 'HistoryByteCapExceeded' END;
    v_cap_failure := jsonb_build_object('error_type', v_cap_type, 'non_retryable', true,
        'message', 'the history reached ' || v_execution.last_event_id || ' events / '
                   || v_execution.history_bytes || ' bytes (caps ' || coalesce(p_event_cap::text, 'none')
                   || ' events, ' || coalesce(p_byte_cap::text, 'none') || ' bytes); '
                   || 'call ctx.continue_as_new() before the history grows this large',
        'details', jsonb_build_object('events', v_execution.last_event_id,
                                      'bytes', v_execution.history_bytes,
                                      'event_cap', p_event_cap, 'byte_cap', p_byte_cap));
    PERFORM harvest._append_event(v_execution.id, 'WorkflowFailed',
        jsonb_build_object('failure', v_cap_failure));
    PERFORM harvest._close_execution(v_execution.id, 'FAILED', NULL, v_cap_failure);
    -- Operators find capped runs beside exhausted activities, typed.
    INSERT INTO harvest.dead_letters (
        kind, execution_id, workflow_name, queue, attempts, failure, scheduled_at, failed_at
    ) VALUES (
        'workflow', v_execution.id, v_execution.workflow_name, v_execution.queue, 1,
        v_cap_failure, v_execution.created_at, p_now
    );
    SELECT e.last_event_id, e.status INTO last_event_id, execution_status
    FROM harvest.executions AS e WHERE e.id = p_execution_id;
END;
$$;

-- Apply one decision to a locked, running execution whose workflow task (if it
-- had one) is already gone: the WorkflowTaskCompleted{through} marker, then one
-- event per command, the tasks they create, and the run's end if it ended. Both
-- ways a decision arrives use it: complete_workflow_task, and complete_activities
-- when the deciding worker decided on an activity's result before committing it.
-- That caller passes the result's event in p_lead_types/p_lead_datas: it is
-- appended just before the marker, in the same row update, and the decision may
-- be through it. The dispatcher: each command goes to its _decide_<type> (above);
-- this function buffers their events, hands off, ends the run, checks the caps.
-- With p_defer_events (a batch's caller), the decision's last append takes its ids
-- but leaves the events to the caller (deferred_types, deferred_datas, deferred_last:
-- the last one's id), which inserts its batch's with one _insert_events (core.sql);
-- an append a command needs in the history at once (a mutex marker, and whatever goes
-- before a child's start, an update, continue-as-new, an external command) is made
-- as without it, and so are a continued run's last events. With p_defer_hand (the
-- caller's p_execution given), a decision that hands one activity, after all of its other
-- commands and without ending the run, leaves it to the caller likewise (deferred_hand_seq,
-- deferred_hand: its seq and command; handed is then []), which hands its batch's with one
-- _hand_activities_of_runs, p_execution the run's row; a decision the history caps then
-- close leaves none.
-- With p_defer_events, a decision that goes in one append (its marker in its last append:
-- no command appended on its own before) leaves that append's row update to the caller too
-- (deferred_bytes, deferred_through, deferred_hold: what _append_events would have added and
-- set; deferred_last is then the run's row's last_event_id as read, p_execution or read
-- here, plus the append's events), and the close of a decision that ends its run
-- (deferred_status, deferred_output, deferred_failure: what _append_closing_events would
-- set), which writes its batch's with one _update_held_rows (core.sql). The history caps of
-- a decision that does not end its run are then the caller's to check when caps_pending says
-- the counters are past one (the caller writes the held rows, then calls
-- _decide_history_caps); the wake-up for events that came in flight is made here.
-- The await_signals directive's signals (the worker's ctx.wait_for_signal calls still pending
-- after its step: docs/internals.md, "Awaited signals") as the decision's marker keeps them:
-- [{name, since, timer_seq}], since the event id of the marker of the step that began the wait
-- (absent: this decision's, p_marker_id), timer_seq the timeout's timer (NULL: none). At most
-- 1,000 waits, each name a non-empty string of at most 1,000 characters; else HR001 and nothing
-- of the decision is written.
CREATE OR REPLACE FUNCTION harvest._awaited_signals_of(p_command jsonb, p_marker_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_signals jsonb := p_command -> 'signals';
    v_out jsonb := '[]'::jsonb;
    v_wait jsonb;
BEGIN
    IF jsonb_typeof(v_signals) IS DISTINCT FROM 'array' OR jsonb_array_length(v_signals) > 1000 THEN
        RAISE EXCEPTION 'await_signals: signals must be an array of at most 1000 waits' USING ERRCODE = 'HR001',
            HINT = 'send [{"name": ..., "timer_seq": ..., "since": ...}] (docs/internals.md, "Awaited signals")';
    END IF;
    FOR v_wait IN SELECT w FROM jsonb_array_elements(v_signals) AS w LOOP
        IF jsonb_typeof(v_wait -> 'name') IS DISTINCT FROM 'string' OR btrim(v_wait ->> 'name') = ''
           OR length(v_wait ->> 'name') > 1000 THEN
            RAISE EXCEPTION 'await_signals: each wait needs a name, a non-empty string of at most 1000 characters'
                USING ERRCODE = 'HR001', HINT = 'the name is the one ctx.wait_for_signal waits for';
        END IF;
        v_out := v_out || jsonb_build_array(jsonb_build_object(
            'name', v_wait -> 'name',
            'since', coalesce(harvest._json_bigint(v_wait -> 'since', 'since', 1, p_marker_id, 'await_signals'),
                              p_marker_id),
            'timer_seq', harvest._json_integer(v_wait -> 'timer_seq', 'timer_seq', 1, p_where => 'await_signals')));
    END LOOP;
    RETURN v_out;
END;
$$;

CREATE OR REPLACE FUNCTION harvest._apply_decision(
    p_execution_id uuid,
    p_through bigint,
    p_commands jsonb,
    p_worker_id text,
    p_event_cap bigint,
    p_byte_cap bigint,
    p_hand_off_slots integer,
    p_lead_types text[] DEFAULT ARRAY[]::text[],
    p_lead_datas jsonb[] DEFAULT ARRAY[]::jsonb[],
    -- Owner mode: the owner epoch the decision was committed under (checked by the
    -- caller, owners.sql _check_owner), recorded on its WorkflowTaskCompleted marker.
    p_owner_epoch bigint DEFAULT NULL,
    -- What the caller read already, so that the decision reads it no more (NULL: read here;
    -- docs/performance.md, "A decision ahead reads its run once"): the run's row as it is
    -- now (read under the caller's lock, with nothing written to it since), the worker's
    -- queues (_hand_off_queues), the payload limit, and a queue that _may_hand_off allowed
    -- at priority 0 in this transaction with nothing written since.
    p_execution harvest.executions DEFAULT NULL,
    p_worker_queues text[] DEFAULT NULL,
    p_payload_limit integer DEFAULT NULL,
    p_hand_off_queue text DEFAULT NULL,
    -- The decision's last events left to the caller (see above).
    p_defer_events boolean DEFAULT false,
    -- A decision's one handed activity left to the caller too (see above).
    p_defer_hand boolean DEFAULT false,
    -- The caller's clock (NULL: read here).
    p_now timestamptz DEFAULT NULL
)
-- One named composite, not fifteen OUT parameters: PL/pgSQL builds a function's result
-- descriptor from pg_proc's argument arrays on every call of one with OUT parameters, and
-- takes a named type's from the type cache (docs/performance.md, "SQL path, ninth cut").
-- The fields: sql/executions.sql, harvest.applied_decision.
RETURNS harvest.applied_decision
LANGUAGE plpgsql
AS $$
DECLARE
    r harvest.applied_decision;  -- the answer
    v_execution harvest.executions;
    v_now timestamptz := coalesce(p_now, harvest.now());
    -- once per decision (core.sql, payload size)
    v_limit integer := coalesce(p_payload_limit, harvest._payload_limit());
    v_seen_until bigint;
    v_command jsonb;
    v_type text;
    v_seq integer;
    v_step record;  -- the command's _decide_<type> result
    v_closed boolean := false;
    v_close_status text;
    v_close_output jsonb;
    v_close_failure jsonb;
    v_worker_queues text[];
    -- The handed tasks, gathered as an array of rows (the caller's answer makes them JSON).
    v_handed harvest.worker_activity_task[] := ARRAY[]::harvest.worker_activity_task[];
    v_cap record;
    v_appended record;  -- the last _append_events: the run's counters and status after it
    v_may_cap boolean := true;  -- until that append's counters say the run is under both caps
    -- Events not yet appended: the decision's marker and its commands' events go in
    -- one _append_events call, flushed before a command whose own work appends
    -- events (a child's start, an update, continue-as-new, a mutex marker, whose
    -- trigger may append a grant), so the history's order is the commands' order.
    v_types text[] := p_lead_types || 'WorkflowTaskCompleted'::text;
    v_datas jsonb[] := p_lead_datas || CASE
        WHEN p_owner_epoch IS NULL THEN jsonb_build_object('through', p_through, 'worker_id', p_worker_id)
        ELSE jsonb_build_object('through', p_through, 'worker_id', p_worker_id, 'owner_epoch', p_owner_epoch) END;
    v_decided_through bigint := p_through;  -- the marker's, until it is flushed
    -- Activities that queue (no hand-off slot left), gathered for one INSERT
    -- (_queue_activities), flushed before any other command and before the events.
    v_queued_seqs integer[] := ARRAY[]::integer[];
    v_queued jsonb[] := ARRAY[]::jsonb[];
    -- Activities handed (hand-off slots left, _may_hand_off allowed), gathered for one
    -- INSERT (_hand_activities) the same way.
    v_hand_seqs integer[] := ARRAY[]::integer[];
    v_hand_cmds jsonb[] := ARRAY[]::jsonb[];
    v_may_hand boolean;
    v_queue text;
    v_priority integer;
    v_mutex_keys_locked boolean := false;  -- the decision's mutex keys, in key order (below)
    v_mutex_key text;
    v_hand_queue text;  -- the queue and priority _may_hand_off allowed for the gathered handed ones
    v_hand_priority integer;
    v_allowed boolean;  -- _may_hand_off's answer, or an earlier one that holds
    -- A hold_wakeups command came before the marker went in: the run's results wake it
    -- only once its activities drain (_wake_after_results).
    v_hold boolean := false;
    -- Every command so far one its worker's run records itself (WorkflowRun.recorded's
    -- _SELF_RECORDING): when the decision goes in one append and saw the whole history,
    -- decided_through covers its events, which the next claim of the run then leaves out
    -- (_append_events).
    v_own boolean := true;
    -- The options of the last schedule_activity whose checks passed (above, _activity_command_ok).
    v_options_ok jsonb;
    v_first integer := 0;  -- the first command the loop dispatches (1: after await_signals)
BEGIN
    IF p_execution.id IS NULL THEN
        SELECT * INTO v_execution FROM harvest.executions AS e WHERE e.id = p_execution_id;
    ELSE
        v_execution := p_execution;
    END IF;
    IF cardinality(p_lead_types) IS DISTINCT FROM cardinality(p_lead_datas) THEN
        RAISE EXCEPTION 'the leading events need one datum per type' USING ERRCODE = 'HR001';
    END IF;
    -- The history the decision saw: what is stored, and the leading events.
    v_seen_until := v_execution.last_event_id + cardinality(p_lead_types);
    IF p_through IS NULL OR p_through < 1 OR p_through > v_seen_until THEN
        RAISE EXCEPTION 'through=% is outside the history (1..%)', p_through,
            v_seen_until USING ERRCODE = 'HR001';
    END IF;
    IF p_commands IS NULL OR jsonb_typeof(p_commands) <> 'array' THEN
        RAISE EXCEPTION 'commands must be a JSON array' USING ERRCODE = 'HR001';
    END IF;
    -- A decision that ends the run must have seen every message its senders were told it took:
    -- a signal or an update accepted while its task was in flight (past p_through) would be
    -- dropped by the close. So the close is refused, nothing of the decision is written, and the
    -- run's next workflow task reads them where this decision was made; the answer says the run
    -- is still live (docs/messages.md, "A message that lands as the run ends"). A continue-as-new
    -- hands unread signals to the next run, so only an update stops it, or a cancel request:
    -- a successor does not carry one, and its caller was told the run would be asked to cancel.
    -- (Nested, not one condition: the common case, nothing past p_through, reads nothing.)
    IF v_seen_until > p_through THEN
        v_type := p_commands -> -1 ->> 'type';  -- (a closing command is the last: see below)
        IF v_type IN ('complete_workflow', 'fail_workflow', 'cancel_workflow', 'continue_as_new')
           AND EXISTS (SELECT 1 FROM harvest.events AS ev
                       WHERE ev.execution_id = v_execution.id AND ev.event_id > p_through
                         AND (ev.event_type = 'UpdateAccepted'
                              OR (ev.event_type = 'SignalReceived' AND v_type <> 'continue_as_new')
                              OR (ev.event_type = 'WorkflowCancelRequested' AND v_type = 'continue_as_new'))) THEN
            PERFORM harvest._ensure_workflow_task(v_execution.id);
            r.last_event_id := v_execution.last_event_id;
            r.execution_status := v_execution.status;
            r.handed := ARRAY[]::harvest.worker_activity_task[];
            RETURN r;
        END IF;
    END IF;

    -- An await_signals directive, first when the worker sends one (the run waits on signals):
    -- no event, its waits kept in the decision's marker, which get_execution_stack and
    -- list_awaited_signals read (docs/internals.md, "Awaited signals"). One expression per
    -- decision; a run that waits on no signal sends none and its marker is as before.
    IF p_commands -> 0 ->> 'type' = 'await_signals' THEN
        v_datas[cardinality(v_datas)] := v_datas[cardinality(v_datas)]
            || jsonb_build_object('awaiting', harvest._awaited_signals_of(p_commands -> 0, v_seen_until + 1));
        v_first := 1;
    END IF;
    -- (By subscript, not a FOR over jsonb_array_elements: a query loop opens a cursor per
    -- decision; an expression per command opens none.)
    FOR v_n IN v_first .. jsonb_array_length(p_commands) - 1 LOOP
        v_command := p_commands -> v_n;
        v_type := v_command ->> 'type';
        IF v_closed THEN
            RAISE EXCEPTION 'command % follows the end of the workflow', v_type USING ERRCODE = 'HR001';
        END IF;
        IF v_type = 'hold_wakeups' THEN
            -- No event: the worker's word that its run waits for all of its open activities
            -- at once (a gather of them), written with the marker (the worker sends it
            -- first). Whatever it said, the run wakes when they drain, when one fails for
            -- good, and on every other wake-up (docs/internals.md, "Held wake-ups").
            v_hold := true;
            CONTINUE;
        END IF;
        IF v_type NOT IN ('schedule_activity', 'start_timer', 'record_marker', 'cancel_timer') THEN
            v_own := false;
        END IF;
        IF v_type IN ('schedule_activity', 'start_timer', 'record_marker', 'cancel_timer',
                      'start_child_workflow', 'complete_update', 'signal_external_workflow',
                      'cancel_external_workflow') THEN
            IF jsonb_typeof(v_command -> 'seq') IS DISTINCT FROM 'number' THEN
                PERFORM harvest._require(v_command, 'seq', 'number');  -- (it raises)
            END IF;
            v_seq := harvest._json_integer(v_command -> 'seq', 'seq', p_where => 'command ' || v_type);
        END IF;
        -- An activity may be handed while a hand-off slot is left and its queue is one the
        -- worker polls (read at the first attempt); any other activity queues.
        v_may_hand := v_type = 'schedule_activity'
            AND cardinality(v_handed) + cardinality(v_hand_seqs) < coalesce(p_hand_off_slots, 0)
            AND (v_worker_queues IS NULL OR coalesce(v_command ->> 'queue', v_execution.queue) = ANY(v_worker_queues));
        -- The gathered queued activities go in before anything that does not queue too: task
        -- ids keep the commands' order, and a hand-off's rules see every task before it.
        IF cardinality(v_queued) > 0 AND (v_type IS DISTINCT FROM 'schedule_activity' OR v_may_hand) THEN
            PERFORM harvest._queue_activities(v_execution, v_queued_seqs, v_queued, v_now);
            v_queued_seqs := ARRAY[]::integer[];
            v_queued := ARRAY[]::jsonb[];
        END IF;
        -- The gathered handed activities likewise, before anything that is not handed too.
        IF cardinality(v_hand_seqs) > 0 AND NOT v_may_hand THEN
            v_handed := v_handed || harvest._hand_activities(v_execution, v_hand_seqs, v_hand_cmds, p_worker_id, v_now);
            v_hand_seqs := ARRAY[]::integer[];
            v_hand_cmds := ARRAY[]::jsonb[];
        END IF;
        -- The first mutex marker takes the locks of every mutex key the decision names, in key
        -- order, as _mutex_release_all does (flow_mutex.sql): taken marker by marker in the
        -- commands' order, two decisions naming two keys in opposite orders deadlocked (40P01).
        IF v_type = 'record_marker' AND v_command ->> 'kind' IN ('mutex_acquire', 'mutex_release')
           AND NOT v_mutex_keys_locked THEN
            FOR v_mutex_key IN
                SELECT DISTINCT c.command #>> '{value,key}' FROM jsonb_array_elements(p_commands) AS c (command)
                WHERE c.command ->> 'type' = 'record_marker' AND c.command ->> 'kind' IN ('mutex_acquire', 'mutex_release')
                  AND c.command #>> '{value,key}' <> ''
                ORDER BY 1
            LOOP
                PERFORM pg_advisory_xact_lock(hashtext('harvest.mutex:' || v_mutex_key));
            END LOOP;
            v_mutex_keys_locked := true;
        END IF;
        IF (v_type IN ('start_child_workflow', 'complete_update', 'continue_as_new', 'signal_external_workflow',
                       'cancel_external_workflow')
            OR (v_type = 'record_marker' AND v_command ->> 'kind' IN ('mutex_acquire', 'mutex_release')))
           AND cardinality(v_types) > 0 THEN
            PERFORM harvest._append_events(v_execution.id, v_types, v_datas, p_worker_id, v_decided_through, v_hold);
            v_types := ARRAY[]::text[];
            v_datas := ARRAY[]::jsonb[];
            v_decided_through := NULL;
        END IF;
        CASE v_type
        WHEN 'schedule_activity' THEN
            -- Its event only here; its row goes in with the others it is gathered with: the
            -- handed (_hand_activities) or the queued (_queue_activities). The checks and the
            -- event's data are inlined expressions; _activity_scheduled, the one description,
            -- is called only to raise. Options equal (jsonb's =) to ones that passed in this
            -- decision pass again: only the name and the input are checked then.
            IF (v_command -> 'options' = v_options_ok) IS NOT TRUE
               OR NOT harvest._activity_command_head_ok(v_command, v_limit) THEN
                IF NOT harvest._activity_command_ok(v_command, v_limit) THEN
                    PERFORM harvest._activity_scheduled(v_execution, v_seq, v_command, v_limit);
                END IF;
                v_options_ok := v_command -> 'options';
            END IF;
            v_queue := coalesce(v_command ->> 'queue', v_execution.queue);
            v_types := v_types || 'ActivityScheduled'::text;
            v_datas := v_datas || harvest._activity_scheduled_data(v_queue, v_seq, v_command);
            -- Handed (claim.sql, "Hand-off") when a slot is left, the run is RUNNING, the
            -- activity has no admission gate or claim-order key and _may_hand_off allows it;
            -- else it queues ('paused' on a PAUSED run: a decision in flight when it was paused).
            IF v_may_hand AND v_execution.status = 'RUNNING'
               AND NOT coalesce(v_command -> 'options', '{}'::jsonb)
                       ?| ARRAY['concurrency_key', 'rate_limit', 'fairness_key', 'priority_aging_secs'] THEN
                IF v_worker_queues IS NULL THEN
                    v_worker_queues := coalesce(p_worker_queues, harvest._hand_off_queues(p_worker_id),
                                                ARRAY[]::text[]);
                    r.worker_queues := v_worker_queues;  -- (a batch's next decisions read them no more)
                END IF;
                v_priority := harvest._activity_priority(v_command);
                -- The rules' answer holds for the next activity of the same queue and priority
                -- while the ones gathered with it are not yet inserted: nothing of this
                -- transaction has written a task since it was asked (a handed row is running).
                -- The caller's answer (p_hand_off_queue) likewise for the first command, before
                -- which this decision wrote nothing.
                -- (The rules' own query only when neither answer holds: a condition that reads
                -- them is a query of its own, where these two are plain expressions.)
                v_allowed := (cardinality(v_hand_seqs) > 0 AND v_queue = v_hand_queue AND v_priority = v_hand_priority)
                             OR (v_n = v_first AND v_queue = p_hand_off_queue AND v_priority = 0);
                IF NOT coalesce(v_allowed, false) THEN
                    v_allowed := (SELECT h FROM harvest._may_hand_off(v_queue, v_priority, v_worker_queues) AS h);
                END IF;
                IF v_allowed THEN
                    v_hand_queue := v_queue;
                    v_hand_priority := v_priority;
                    v_hand_seqs := v_hand_seqs || v_seq;
                    v_hand_cmds := v_hand_cmds || v_command;
                    CONTINUE;
                END IF;
            END IF;
            IF cardinality(v_hand_seqs) > 0 THEN  -- (ids in command order)
                v_handed := v_handed || harvest._hand_activities(v_execution, v_hand_seqs, v_hand_cmds,
                    p_worker_id, v_now);
                v_hand_seqs := ARRAY[]::integer[];
                v_hand_cmds := ARRAY[]::jsonb[];
            END IF;
            v_queued_seqs := v_queued_seqs || v_seq;
            v_queued := v_queued || v_command;
            CONTINUE;  -- (nothing below applies: no other event, the run goes on)
        WHEN 'start_timer' THEN
            v_step := harvest._decide_start_timer(v_execution, v_seq, v_command, v_now);
        WHEN 'record_marker' THEN
            v_step := harvest._decide_record_marker(v_execution, v_seq, v_command, v_limit);
        WHEN 'cancel_timer' THEN
            v_step := harvest._decide_cancel_timer(v_execution, v_seq, v_command);
        WHEN 'start_child_workflow' THEN
            v_step := harvest._decide_start_child_workflow(v_execution, v_seq, v_command);
        WHEN 'complete_update' THEN
            v_step := harvest._decide_complete_update(v_execution, v_seq, v_command, v_limit);
        WHEN 'signal_external_workflow' THEN
            v_step := harvest._decide_signal_external_workflow(v_execution, v_seq, v_command, v_limit);
        WHEN 'cancel_external_workflow' THEN
            v_step := harvest._decide_cancel_external_workflow(v_execution, v_seq, v_command, v_limit);
        WHEN 'cancel_workflow' THEN
            v_step := harvest._decide_cancel_workflow(v_command, v_limit);
        WHEN 'continue_as_new' THEN
            v_step := harvest._decide_continue_as_new(v_execution, v_command, p_through, v_limit);
        WHEN 'complete_workflow' THEN
            -- Its event and the close written here, as _decide_complete_workflow (the one
            -- description) gives them; that function is called only for a result over the
            -- limit, to raise: its call, its OUT parameters' descriptor and its check's PERFORM
            -- were three statements' worth of a canonical workflow's last decision
            -- (docs/performance.md, "SQL path, ninth cut").
            IF (octet_length((v_command -> 'result')::text) > v_limit) IS TRUE THEN
                v_step := harvest._decide_complete_workflow(v_execution, v_command, v_limit);  -- (it raises)
            END IF;
            v_types := v_types || 'WorkflowCompleted'::text;
            v_datas := v_datas || jsonb_build_object('result', v_command -> 'result');
            v_closed := true;
            v_close_status := 'COMPLETED';
            v_close_output := v_command -> 'result';
            CONTINUE;
        WHEN 'fail_workflow' THEN
            v_step := harvest._decide_fail_workflow(v_execution, v_command, v_limit);
        ELSE
            IF v_type = 'await_signals' THEN  -- (a directive, read before the loop: see above)
                RAISE EXCEPTION 'await_signals must be the decision''s first command' USING ERRCODE = 'HR001',
                    HINT = 'send it before hold_wakeups and the other commands (docs/internals.md, "Awaited signals")';
            END IF;
            RAISE EXCEPTION 'unknown command type "%"', v_type USING ERRCODE = 'HR001',
                HINT = 'see docs/internals.md for the command shapes';
        END CASE;
        IF v_step.event_type IS NOT NULL THEN
            v_types := v_types || v_step.event_type;
            v_datas := v_datas || v_step.event_data;
        END IF;
        IF v_step.ends_run THEN
            v_closed := true;
            v_close_status := v_step.close_status;
            v_close_output := v_step.close_output;
            v_close_failure := v_step.close_failure;
        END IF;
    END LOOP;
    IF cardinality(v_hand_seqs) > 0 THEN
        IF p_defer_hand AND p_execution.id IS NOT NULL AND cardinality(v_hand_seqs) = 1 AND cardinality(v_handed) = 0
           AND NOT v_closed THEN
            r.deferred_hand_seq := v_hand_seqs[1];
            r.deferred_hand := v_hand_cmds[1];
        ELSE
            v_handed := v_handed || harvest._hand_activities(v_execution, v_hand_seqs, v_hand_cmds, p_worker_id, v_now);
        END IF;
    END IF;
    IF cardinality(v_queued) > 0 THEN
        PERFORM harvest._queue_activities(v_execution, v_queued_seqs, v_queued, v_now);
    END IF;
    IF v_close_status IS NOT NULL AND p_defer_events AND v_decided_through IS NOT NULL THEN
        -- The run ended in the decision's one append: the close is left to the caller with the
        -- append (deferred_status, deferred_output, deferred_failure; _update_held_rows closes
        -- it as _append_closing_events would, then _after_close), the counters as below.
        r.deferred_bytes := octet_length(array_to_string(v_datas::text[], '', '{}'));
        r.deferred_last := v_execution.last_event_id + cardinality(v_types);
        r.deferred_through := v_decided_through;
        r.deferred_status := v_close_status;
        r.deferred_output := v_close_output;
        r.deferred_failure := v_close_failure;
        r.deferred_types := v_types;
        r.deferred_datas := v_datas;
        r.last_event_id := r.deferred_last;
        r.execution_status := v_close_status;
        r.handed := ARRAY[]::harvest.worker_activity_task[];  -- the close drops the tasks handed above
        RETURN r;
    END IF;
    IF v_close_status IS NOT NULL THEN
        -- The run ended: its end event (always among these, the last) and the close in one
        -- update of its row (core.sql, _append_closing_events).
        r.last_event_id := harvest._append_closing_events(v_execution.id, v_types, v_datas, p_worker_id,
            v_decided_through, v_close_status, v_close_output, v_close_failure, p_defer_events);
        IF p_defer_events THEN
            r.deferred_types := v_types;
            r.deferred_datas := v_datas;
            r.deferred_last := r.last_event_id;
        END IF;
        r.execution_status := v_close_status;
        r.handed := ARRAY[]::harvest.worker_activity_task[];  -- the close dropped the tasks handed above
        RETURN r;
    END IF;
    IF p_defer_events AND cardinality(v_types) > 0 AND v_decided_through IS NOT NULL AND NOT v_closed THEN
        -- The decision's one append, row and events left to the caller: the counters as the
        -- update would leave them, from the row as read (nothing of this decision wrote it).
        -- (The bytes as _event_bytes counts them, summed by one expression: the elements'
        -- texts joined, a NULL as '{}'.)
        r.deferred_bytes := octet_length(array_to_string(v_datas::text[], '', '{}'));
        r.deferred_last := v_execution.last_event_id + cardinality(v_types);
        r.deferred_through := CASE WHEN v_own AND p_through = v_seen_until THEN r.deferred_last
                                 ELSE v_decided_through END;
        r.deferred_hold := v_hold;
        r.deferred_types := v_types;
        r.deferred_datas := v_datas;
        r.last_event_id := r.deferred_last;
        r.execution_status := v_execution.status;
        r.caps_pending := coalesce(r.deferred_last > p_event_cap
                                 OR v_execution.history_bytes + r.deferred_bytes > p_byte_cap, false);
        IF v_seen_until > p_through THEN
            -- (Before the caps, which the caller checks: a run they close drops this task.)
            PERFORM harvest._ensure_workflow_task(v_execution.id);
        END IF;
        r.handed := v_handed;
        RETURN r;
    END IF;
    IF cardinality(v_types) > 0 THEN
        -- The run's row as this last append left it, for the history caps below.
        -- (Own events only when the decision saw the whole history: its marker lands at
        -- through + 1, nothing it did not read before it, as WorkflowRun.recorded expects.)
        v_appended := harvest._append_events(v_execution.id, v_types, v_datas, p_worker_id, v_decided_through,
            v_hold, v_own AND p_through = v_seen_until, p_defer_events AND NOT v_closed);
        IF p_defer_events AND NOT v_closed THEN
            r.deferred_types := v_types;
            r.deferred_datas := v_datas;
            r.deferred_last := v_appended.last_event_id;
        END IF;
    END IF;
    IF v_closed THEN  -- continued as new: _continue_as_new closed it
        SELECT e.last_event_id, e.status INTO r.last_event_id, r.execution_status
        FROM harvest.executions AS e WHERE e.id = v_execution.id;
        r.handed := ARRAY[]::harvest.worker_activity_task[];
        RETURN r;
    END IF;

    -- A run past a hard cap fails with a typed reason unless it just ended. The last
    -- append returned the counters the check reads; a run under both caps (the usual
    -- case) needs no second read of its row.
    IF cardinality(v_types) > 0 THEN
        v_may_cap := coalesce(v_appended.last_event_id > p_event_cap OR v_appended.history_bytes > p_byte_cap, false);
    END IF;
    IF NOT v_may_cap THEN
        r.last_event_id := v_appended.last_event_id;
        r.execution_status := v_appended.execution_status;
    ELSE
        v_cap := harvest._decide_history_caps(v_execution.id, p_event_cap, p_byte_cap, v_now);
        r.last_event_id := v_cap.last_event_id;
        r.execution_status := v_cap.execution_status;
        IF v_cap.capped THEN
            r.handed := ARRAY[]::harvest.worker_activity_task[];  -- the close dropped the tasks handed above
            r.deferred_hand_seq := NULL;  -- and one left to the caller is not handed
            r.deferred_hand := NULL;
            RETURN r;
        END IF;
    END IF;
    -- Events that arrived while this task was in flight belong to the next batch.
    IF v_seen_until > p_through THEN
        PERFORM harvest._ensure_workflow_task(v_execution.id);
    END IF;
    r.handed := v_handed;
    RETURN r;
END;
$$;

CREATE OR REPLACE FUNCTION harvest.complete_workflow_task(
    p_task_id bigint,
    p_fencing_token bigint,
    p_through bigint,
    p_commands jsonb DEFAULT '[]'::jsonb,
    p_worker_id text DEFAULT NULL,
    -- Last-resort guardrails against a runaway loop; NULL means unlimited.
    p_event_cap bigint DEFAULT 50000,
    p_byte_cap bigint DEFAULT 52428800,
    -- Up to this many scheduled activities are handed straight to p_worker_id
    -- (claim.sql, "Hand-off") and returned in handed; 0 queues them all.
    p_hand_off_slots integer DEFAULT 0,
    -- Owner mode (owners.sql): the owner epoch the claim handed out with the task.
    p_owner_epoch bigint DEFAULT NULL
)
RETURNS TABLE (last_event_id bigint, execution_status text, handed jsonb)
LANGUAGE plpgsql
AS $$
DECLARE
    v_task harvest.tasks;
    v_decided record;
    v_refusal text;
    v_owner_mode boolean := harvest._owner_mode_on();
BEGIN
    PERFORM harvest._lock_decision_start_keys(ARRAY[p_task_id], ARRAY[p_commands]);
    v_task := harvest._lock_claimed_task(p_task_id, p_fencing_token, 'workflow');
    IF v_owner_mode THEN
        v_refusal := harvest._check_owner(v_task.execution_id, p_worker_id, p_owner_epoch);
        IF v_refusal IS NOT NULL THEN
            RAISE EXCEPTION '%', v_refusal USING ERRCODE = 'HR004',
                HINT = 'claim the workflow task again: the partition''s owner decides it';
        END IF;
    END IF;
    -- Free the execution's one workflow-task slot first, so a wake-up raised while
    -- applying these commands (a child that failed to start) enqueues a new task.
    DELETE FROM harvest.tasks AS t WHERE t.id = p_task_id;
    v_decided := harvest._apply_decision(v_task.execution_id, p_through, p_commands, p_worker_id,
                                         p_event_cap, p_byte_cap, p_hand_off_slots,
                                         p_owner_epoch => CASE WHEN v_owner_mode THEN p_owner_epoch END);
    -- (RETURN NEXT, not RETURN QUERY: a query would be planned anew on every call.)
    last_event_id := v_decided.last_event_id;
    execution_status := v_decided.execution_status;
    handed := to_jsonb(v_decided.handed);  -- (the tasks' rows as JSON, once)
    RETURN NEXT;
END;
$$;
COMMENT ON FUNCTION harvest.complete_workflow_task(bigint, bigint, bigint, jsonb, text, bigint, bigint, integer, bigint) IS
'Complete one claimed workflow task: append WorkflowTaskCompleted{through} and one event per command, create the '
'tasks they schedule, end the run if a command ended it; returns the last event id, the run''s status and the '
'activities handed to the worker; in owner mode HR004 unless p_worker_id holds the run''s partition at '
'p_owner_epoch. The single-task form of complete_workflow_tasks, for SQL callers (role harvest_worker).';

-- A worker's group commit of decisions: complete many workflow tasks in one
-- transaction, each as complete_workflow_task would. An item held under a stale
-- token (or gone, or of the wrong kind, or past its lease) is refused on its own
-- (outcome: the problem of _try_lock_claimed_task, with its message) and changes
-- nothing; a decision the database refuses (a bad command) fails the whole call,
-- and the worker then sends its items one by one.
CREATE OR REPLACE FUNCTION harvest.complete_workflow_tasks(
    p_worker_id text,
    p_task_ids bigint[],
    p_fencing_tokens bigint[],
    p_throughs bigint[],
    p_commands jsonb[],
    p_hand_off_slots integer[],
    p_event_cap bigint DEFAULT 50000,
    p_byte_cap bigint DEFAULT 52428800,
    -- Owner mode (owners.sql): each task's owner epoch, as the claim handed it out.
    p_owner_epochs bigint[] DEFAULT NULL
)
RETURNS TABLE (
    task_id bigint, outcome text, message text, last_event_id bigint,
    execution_status text, handed jsonb
)
LANGUAGE plpgsql
-- Planned once per session (a hot entry point of the worker; docs/performance.md, "One plan per
-- statement for the hot entry points"): every statement the call runs, nested ones too.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_item record;
    v_try record;
    v_decided harvest.applied_decision;
    v_count integer := cardinality(p_task_ids);
    v_owner_mode boolean := harvest._owner_mode_on();
    v_commands jsonb;
    v_now timestamptz := harvest.now();
    -- Read once per call, not once per decision (_apply_decision's p_payload_limit and
    -- p_worker_queues): the payload limit, and the worker's queues once a decision read them.
    v_limit integer := harvest._payload_limit();
    v_queues text[];
    v_run uuid;  -- the item's run, when its task was taken by the one-statement way
    -- The decisions' last events, inserted once (_apply_decision's p_defer_events,
    -- core.sql _insert_events): their runs, id offsets, types and data. (Not for a call
    -- of one item: one statement either way, and the buffer's plumbing costs it some 20 us.
    -- The buffers start NULL, not empty: a default is an expression evaluated on every
    -- call, and a call of one item paid some 10 us for those of this call's buffers.)
    v_ev_runs uuid[];
    v_ev_offsets bigint[];
    v_ev_types text[];
    v_ev_datas jsonb[];
    v_n integer;
    v_batched boolean := v_count > 1;
    -- The run's row as the item's lock read it (NULL when the item went the full way), for
    -- the decision (_apply_decision's p_execution) and its held handed activity.
    v_execution harvest.executions;
    -- The decisions' handed activities, one each, handed once (_apply_decision's
    -- p_defer_hand, _hand_activities_of_runs) as complete_activities hands them: the answer
    -- each belongs to, its run's row and id, its seq and command; and the answers, held to
    -- the end of the call in a batch (returned as they go in a call of one item).
    v_hd_items integer[];
    v_hd_runs harvest.executions[];
    v_hd_ids uuid[];
    v_hd_seqs integer[];
    v_hd_cmds jsonb[];
    v_hd_tasks harvest.worker_activity_task[];
    v_held_run uuid;  -- the run of the events held last (NULL: none held)
    v_o_ids bigint[];
    v_o_outcomes text[];
    v_o_messages text[];
    v_o_lasts bigint[];
    v_o_statuses text[];
    v_o_handed jsonb[];
    v_i integer;
    -- The decisions' appends' row updates, written once likewise (_apply_decision's
    -- p_defer_events, core.sql _update_held_rows), as complete_activities holds them.
    v_held_rows harvest.held_run_row[];
    v_cap record;
BEGIN
    IF p_owner_epochs IS NOT NULL AND cardinality(p_owner_epochs) IS DISTINCT FROM v_count THEN
        RAISE EXCEPTION 'owner epochs, when given, must be an array of the task ids'' length' USING ERRCODE = 'HR001';
    END IF;
    IF p_task_ids IS NULL OR v_count IS DISTINCT FROM cardinality(p_fencing_tokens)
       OR v_count IS DISTINCT FROM cardinality(p_throughs)
       OR v_count IS DISTINCT FROM cardinality(p_commands)
       OR v_count IS DISTINCT FROM cardinality(p_hand_off_slots)
       -- (the loop below reads every array at p_task_ids' subscripts)
       OR array_lower(p_fencing_tokens, 1) IS DISTINCT FROM array_lower(p_task_ids, 1)
       OR array_lower(p_throughs, 1) IS DISTINCT FROM array_lower(p_task_ids, 1)
       OR array_lower(p_commands, 1) IS DISTINCT FROM array_lower(p_task_ids, 1)
       OR array_lower(p_hand_off_slots, 1) IS DISTINCT FROM array_lower(p_task_ids, 1)
       OR (p_owner_epochs IS NOT NULL AND array_lower(p_owner_epochs, 1) IS DISTINCT FROM array_lower(p_task_ids, 1)) THEN
        RAISE EXCEPTION 'task ids, fencing tokens, throughs, commands and hand-off slots must be '
            'arrays of one length and one first subscript' USING ERRCODE = 'HR001';
    END IF;
    -- The start locks first, then executions in one order in every batch, so two
    -- batches never deadlock (docs/internals.md, "Lock order"). Only when a decision
    -- starts a run: asked per decision by an expression, not by the lock function's
    -- statements (_starts_runs).
    FOREACH v_commands IN ARRAY p_commands LOOP
        IF harvest._starts_runs(v_commands) THEN
            PERFORM harvest._lock_decision_start_keys(p_task_ids, p_commands);
            EXIT;
        END IF;
    END LOOP;
    -- Then, in a batch, its runs' rows and its mutex keys, all before its first decision.
    IF v_batched THEN
        PERFORM harvest._lock_batch_mutexes(p_task_ids, p_commands);
    END IF;
    -- (RETURN NEXT per answer: a set query here would be planned on every call.)
    FOR v_item IN
        -- (A scalar probe per id, not a join: a cached generic plan of a join with
        -- an id list scans the whole table. The items by subscript, not unnest: the
        -- planner sizes unnest by the array a custom plan sees, so a call of one item
        -- always looked cheaper planned afresh, and was; generate_subscripts has one
        -- size for every plan, so the cached generic plan serves (performance.md,
        -- "Latency rows, sixth cut").)
        SELECT p_task_ids[s.i] AS id, p_fencing_tokens[s.i] AS token, p_throughs[s.i] AS through,
               p_commands[s.i] AS commands, p_hand_off_slots[s.i] AS slots, p_owner_epochs[s.i] AS epoch,
               (SELECT t.execution_id FROM harvest.tasks AS t WHERE t.id = p_task_ids[s.i]) AS run
        FROM generate_subscripts(p_task_ids, 1) AS s (i)
        ORDER BY run, id
    LOOP
        task_id := v_item.id;
        last_event_id := NULL;
        execution_status := NULL;
        handed := NULL;
        -- The usual item (its task still this worker's) is taken as complete_activities takes
        -- a result: its run's row locked (the lock order, run then task), then the task
        -- deleted where _claimed_task_problem finds nothing wrong, under the row lock the
        -- DELETE takes; two statements where the lock, its probe, the task's lock and the
        -- delete were four (docs/performance.md, "One-item calls"). Any other item, and
        -- every item in owner mode (a stale owner's task stays, to go back to the queue),
        -- goes the full way, which names its problem.
        v_run := NULL;
        v_execution := NULL;
        -- What is held of a run (its row update, its events, its handed activity) goes in
        -- before its next decision, which reads its row and may read its history; another
        -- run's may wait (nothing of this run reads them). Before the row is read for the
        -- decision: its held update is in the row then. (By the unlocked read of the task's
        -- run: an item then refused finds the earlier items' writes made a little earlier.)
        IF v_item.run = v_held_run THEN
            v_hd_tasks := harvest._write_held(v_held_rows, v_ev_runs, v_ev_offsets, v_ev_types, v_ev_datas,
                v_hd_runs, v_hd_ids, v_hd_seqs, v_hd_cmds, p_worker_id, v_now);
            FOR v_i IN 1 .. coalesce(cardinality(v_hd_items), 0) LOOP
                v_o_handed[v_hd_items[v_i]] := to_jsonb(v_hd_tasks[v_i:v_i]);
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
            v_held_run := NULL;
        END IF;
        IF v_item.run IS NOT NULL AND NOT v_owner_mode THEN
            -- The row locked and read as one value, not as its columns: a statement's every plan
            -- node builds a tuple descriptor of its target list at start-up, an entry (a type
            -- lookup, a name copied) per column, and SELECT * FOR UPDATE had three of them, the
            -- index scan's, the row lock's and the junk filter's, of every column of executions:
            -- about half the statement (docs/performance.md, "A batch's closes in one pass").
            -- Not found (no such run: the task's delete below refuses the item), the row is NULL.
            v_execution := (SELECT e FROM harvest.executions AS e WHERE e.id = v_item.run FOR UPDATE);
            DELETE FROM harvest.tasks AS t
            WHERE t.id = v_item.id
              AND harvest._claimed_task_problem(t.kind, t.status, t.fencing_token, t.lease_expires_at,
                                                'workflow', v_item.token, v_now) IS NULL
            RETURNING t.execution_id INTO v_run;
        END IF;
        IF v_run IS NULL THEN
            v_execution := NULL;  -- (the full way reads the run's row again)
        END IF;
        IF v_run IS NOT NULL THEN
            outcome := 'completed';
            message := NULL;
        ELSE
            v_try := harvest._try_lock_claimed_task(v_item.id, v_item.token, 'workflow');
            outcome := coalesce(v_try.problem, 'completed');
            message := v_try.message;
            IF v_try.problem IS NULL AND v_owner_mode THEN
                -- A stale owner's decision is refused and its task goes back to the queue at
                -- once, for the partition's owner to claim.
                message := harvest._check_owner((v_try.task).execution_id, p_worker_id, v_item.epoch);
                IF message IS NOT NULL THEN
                    outcome := 'not_owner';
                    UPDATE harvest.tasks AS t
                    SET status = harvest._queued_status(t.execution_id), lease_owner = NULL, lease_expires_at = NULL,
                        due_at = harvest.now()
                    WHERE t.id = v_item.id;
                    PERFORM harvest._notify_queue((v_try.task).queue);
                END IF;
            END IF;
            IF outcome = 'completed' THEN
                DELETE FROM harvest.tasks AS t WHERE t.id = v_item.id;
                v_run := (v_try.task).execution_id;
            END IF;
        END IF;
        IF outcome = 'completed' THEN
            -- (The item's run is the held one only as the unlocked read above saw it: a task's
            -- run never changes, so this is that run.) The held run rows go in before a
            -- decision that may act on another run (one of them, perhaps: a close's relay to
            -- its parent, a mutex grant, a signal).
            IF v_held_rows IS NOT NULL AND NOT harvest._acts_on_own_run(v_item.commands) THEN
                PERFORM harvest._update_held_rows(v_held_rows, p_worker_id);
                v_held_rows := NULL;
            END IF;
            v_decided := harvest._apply_decision(v_run, v_item.through, v_item.commands, p_worker_id,
                p_event_cap, p_byte_cap, v_item.slots,
                p_owner_epoch => CASE WHEN v_owner_mode THEN v_item.epoch END, p_execution => v_execution,
                p_worker_queues => v_queues, p_payload_limit => v_limit,
                p_defer_events => v_batched, p_defer_hand => v_batched, p_now => v_now);
            v_queues := coalesce(v_queues, v_decided.worker_queues);
            IF v_decided.deferred_bytes IS NOT NULL THEN
                v_held_rows := v_held_rows || ROW(v_run, v_decided.deferred_last,
                    cardinality(v_decided.deferred_types), v_decided.deferred_bytes, v_decided.deferred_through,
                    v_decided.deferred_hold, v_decided.deferred_status, v_decided.deferred_output,
                    v_decided.deferred_failure)::harvest.held_run_row;
            END IF;
            IF v_decided.caps_pending THEN
                -- Past a history cap (rare): the held rows go in, then the caps as _apply_decision
                -- checks them; a run they close keeps no handed activity.
                PERFORM harvest._update_held_rows(v_held_rows, p_worker_id);
                v_held_rows := NULL;
                v_cap := harvest._decide_history_caps(v_run, p_event_cap, p_byte_cap, v_now);
                IF v_cap.capped THEN
                    v_decided.last_event_id := v_cap.last_event_id;
                    v_decided.execution_status := v_cap.execution_status;
                    v_decided.handed := ARRAY[]::harvest.worker_activity_task[];
                    v_decided.deferred_hand_seq := NULL;
                END IF;
            END IF;
            v_n := cardinality(v_decided.deferred_types);
            IF v_n > 0 THEN
                v_ev_types := v_ev_types || v_decided.deferred_types;
                v_ev_datas := v_ev_datas || v_decided.deferred_datas;
                v_ev_runs := v_ev_runs || array_fill(v_run, ARRAY[v_n]);
                v_ev_offsets := v_ev_offsets || array_fill(v_decided.deferred_last - cardinality(v_ev_types), ARRAY[v_n]);
                v_held_run := v_run;
            END IF;
            IF v_decided.deferred_hand_seq IS NOT NULL THEN
                v_hd_items := v_hd_items || (coalesce(cardinality(v_o_ids), 0) + 1);  -- (this item's answer, below)
                v_hd_runs := v_hd_runs || v_execution;
                v_hd_ids := v_hd_ids || v_run;
                v_hd_seqs := v_hd_seqs || v_decided.deferred_hand_seq;
                v_hd_cmds := v_hd_cmds || v_decided.deferred_hand;
            END IF;
            last_event_id := v_decided.last_event_id;
            execution_status := v_decided.execution_status;
            -- The handed tasks' rows as JSON, once (a held one's as it goes in, above).
            handed := CASE WHEN v_decided.deferred_hand_seq IS NULL THEN to_jsonb(v_decided.handed) END;
        END IF;
        IF v_batched THEN
            v_o_ids := v_o_ids || task_id;
            v_o_outcomes := v_o_outcomes || outcome;
            v_o_messages := v_o_messages || message;
            v_o_lasts := v_o_lasts || last_event_id;
            v_o_statuses := v_o_statuses || execution_status;
            v_o_handed := v_o_handed || handed;
        ELSE
            RETURN NEXT;
        END IF;
    END LOOP;
    IF v_held_run IS NOT NULL THEN  -- (something is held: a row or a handed activity only with its events)
        v_hd_tasks := harvest._write_held(v_held_rows, v_ev_runs, v_ev_offsets, v_ev_types, v_ev_datas,
            v_hd_runs, v_hd_ids, v_hd_seqs, v_hd_cmds, p_worker_id, v_now);
        FOR v_i IN 1 .. coalesce(cardinality(v_hd_items), 0) LOOP
            v_o_handed[v_hd_items[v_i]] := to_jsonb(v_hd_tasks[v_i:v_i]);
        END LOOP;
    END IF;
    IF v_batched THEN  -- (a batch's answers, held: see above)
        FOR v_i IN 1 .. cardinality(v_o_ids) LOOP
            task_id := v_o_ids[v_i];
            outcome := v_o_outcomes[v_i];
            message := v_o_messages[v_i];
            last_event_id := v_o_lasts[v_i];
            execution_status := v_o_statuses[v_i];
            handed := v_o_handed[v_i];
            RETURN NEXT;
        END LOOP;
    END IF;
END;
$$;
COMMENT ON FUNCTION harvest.complete_workflow_tasks(text, bigint[], bigint[], bigint[], jsonb[], integer[], bigint, bigint, bigint[]) IS
'A worker''s group commit of decisions: each item as complete_workflow_task, in one transaction; an item under a '
'stale token, gone, of another kind or past its lease is refused on its own (outcome), and in owner mode one '
'whose partition p_worker_id no longer holds at its epoch (outcome not_owner: the task goes back to the queue). '
'Called by the Python worker (role harvest_worker).';

-- A workflow task that could not complete (non-determinism, a worker-side error):
-- nothing is written to the history; the task is retried after a backoff, and the
-- error is kept on the task for operators.
CREATE OR REPLACE FUNCTION harvest.fail_workflow_task(
    p_task_id bigint,
    p_fencing_token bigint,
    p_failure jsonb,
    p_retry_in_secs double precision DEFAULT 5
)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
    v_task harvest.tasks;
    v_failure jsonb;
    v_unknown_to jsonb;
    v_untried_live boolean;
    -- Claims of a task whose workflow the claiming worker does not have before the run
    -- fails: a worker of another deploy that has it may take any of them meanwhile.
    c_unknown_attempts CONSTANT integer := 10;
BEGIN
    v_task := harvest._lock_claimed_task(p_task_id, p_fencing_token, 'workflow');
    SELECT * INTO v_execution FROM harvest.executions WHERE id = v_task.execution_id;
    IF p_failure ->> 'error_type' IN ('UnknownWorkflow', 'UnknownUpdate') THEN
        -- The workers that failed the task so since its last other outcome (the claim's
        -- lease owner), the latest last: in a rolling deploy the old workers tend to win
        -- every claim of the retry, and a live worker that has not tried it may have it
        -- (the workflow, or the handler of an accepted update: release_workflow_task).
        SELECT u.unknown_to, u.untried_live INTO v_unknown_to, v_untried_live
        FROM harvest._unknown_to(
            CASE WHEN v_task.last_failure ->> 'error_type' = p_failure ->> 'error_type'
                 THEN v_task.last_failure -> 'details' -> 'unknown_to' END,
            coalesce(v_task.lease_owner, p_failure -> 'details' ->> 'worker_id'), v_task.queue) AS u;
    END IF;
    -- The backstop of the registration check at the start (start.sql): a run of a
    -- workflow no claiming worker has fails with a typed reason after a bounded number
    -- of attempts instead of retrying forever, and is dead-lettered beside capped runs;
    -- only once no live worker polling the queue is missing from unknown_to (while one
    -- is, the task is retried: it may have the workflow). A full unknown_to fails it too.
    IF p_failure ->> 'error_type' = 'UnknownWorkflow' AND v_task.attempt >= c_unknown_attempts
       AND NOT v_untried_live THEN
        v_failure := jsonb_build_object('error_type', 'UnknownWorkflow', 'reason', 'unknown_workflow',
            'non_retryable', true,
            'message', 'no worker that claimed it has workflow ' || v_execution.workflow_name || ' (queue '
                       || v_task.queue || ', ' || v_task.attempt || ' attempts): start a worker whose App '
                       || 'registers it, or start the name the App registers',
            'details', CASE WHEN jsonb_typeof(p_failure -> 'details') = 'object' THEN p_failure -> 'details'
                            ELSE '{}'::jsonb END || jsonb_build_object(
                'attempts', v_task.attempt, 'workflow_name', v_execution.workflow_name,
                'queue', v_task.queue));
        PERFORM harvest._append_event(v_execution.id, 'WorkflowFailed', jsonb_build_object('failure', v_failure));
        PERFORM harvest._close_execution(v_execution.id, 'FAILED', NULL, v_failure);
        INSERT INTO harvest.dead_letters (
            kind, execution_id, workflow_name, queue, attempts, failure, scheduled_at, failed_at
        ) VALUES (
            'workflow', v_execution.id, v_execution.workflow_name, v_task.queue, v_task.attempt,
            v_failure, v_execution.created_at, harvest.now()
        );
        RETURN;
    END IF;
    v_failure := CASE WHEN v_unknown_to IS NULL THEN p_failure
                      ELSE jsonb_set(p_failure, '{details}',
                                     CASE WHEN jsonb_typeof(p_failure -> 'details') = 'object'
                                          THEN p_failure -> 'details' ELSE '{}'::jsonb END
                                     || jsonb_build_object('unknown_to', v_unknown_to)) END;
    -- The failure is kept with failing_since, when the task's first failure in a row was
    -- recorded (carried from the failure it replaces; a task's row goes once a decision
    -- commits): the workflow list's failing filter and mark say since when a run is stuck.
    IF jsonb_typeof(v_failure) = 'object' THEN
        v_failure := v_failure || jsonb_build_object(
            'failing_since', coalesce(v_task.last_failure -> 'failing_since', to_jsonb(harvest.now())));
    END IF;
    UPDATE harvest.tasks
    SET status = CASE WHEN v_execution.status = 'PAUSED' THEN 'paused' ELSE 'pending' END,
        lease_owner = NULL, lease_expires_at = NULL,
        due_at = harvest.now() + make_interval(secs => greatest(coalesce(p_retry_in_secs, 5), 0)),
        last_failure = v_failure
    WHERE id = p_task_id;
END;
$$;
COMMENT ON FUNCTION harvest.fail_workflow_task(bigint, bigint, jsonb, double precision) IS
'A claimed workflow task that could not complete (non-determinism, a worker-side error): nothing is appended, the task '
'is retried after p_retry_in_secs with the failure kept on it; UnknownWorkflow keeps the ids of the workers that '
'failed it so in a row (details.unknown_to) and fails the run from the 10th attempt on, once no live worker '
'polling the task''s queue is missing from them (UnknownUpdate keeps them too, and never fails the run). '
'Called by the Python worker (role harvest_worker).';

-- A claimed workflow task whose decision would fail an accepted update UnknownUpdate (the
-- claiming worker's App has the workflow, not the handler: a rolling deploy's older worker).
-- While a live worker polling the queue has not tried the task (harvest._unknown_to), it is
-- handed back with nothing written (fail_workflow_task, error_type UnknownUpdate, the workers
-- that tried it in details.unknown_to) and true is returned; once every live one has, nothing
-- changes and false is returned: the claim stays the caller's, which records the UnknownUpdate.
CREATE OR REPLACE FUNCTION harvest.release_workflow_task(
    p_task_id bigint,
    p_fencing_token bigint,
    p_failure jsonb,
    p_retry_in_secs double precision DEFAULT 5
)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_task harvest.tasks;
    v_untried_live boolean;
BEGIN
    IF p_failure ->> 'error_type' IS DISTINCT FROM 'UnknownUpdate' THEN
        RAISE EXCEPTION 'release_workflow_task() hands back for error_type UnknownUpdate, not %',
            coalesce(p_failure ->> 'error_type', 'none') USING ERRCODE = 'HR001',
            HINT = 'fail the task with harvest.fail_workflow_task';
    END IF;
    v_task := harvest._lock_claimed_task(p_task_id, p_fencing_token, 'workflow');
    SELECT u.untried_live INTO v_untried_live
    FROM harvest._unknown_to(
        CASE WHEN v_task.last_failure ->> 'error_type' = 'UnknownUpdate'
             THEN v_task.last_failure -> 'details' -> 'unknown_to' END,
        v_task.lease_owner, v_task.queue) AS u;
    IF NOT v_untried_live THEN
        RETURN false;
    END IF;
    PERFORM harvest.fail_workflow_task(p_task_id, p_fencing_token, p_failure, p_retry_in_secs);
    RETURN true;
END;
$$;
COMMENT ON FUNCTION harvest.release_workflow_task(bigint, bigint, jsonb, double precision) IS
'A claimed workflow task whose accepted update the claiming worker has no handler for: handed back as '
'fail_workflow_task (UnknownUpdate, details.unknown_to) while a live worker polling its queue has not tried it '
'(true); false once every live one has, the claim unchanged: the caller records UnknownUpdate. '
'Called by the Python worker (role harvest_worker).';

-- Start a child for a start_child_workflow command. A running run already holding
-- the child's workflow_id is not adopted: the parent receives ChildWorkflowFailed
-- (WorkflowAlreadyExists) in its next batch instead.
CREATE OR REPLACE FUNCTION harvest._start_child(
    p_parent harvest.executions, p_seq integer, p_command jsonb
)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_name text := harvest._require(p_command, 'workflow_name', 'string') #>> '{}';
    v_workflow_id text := coalesce(p_command ->> 'workflow_id', p_parent.workflow_id || '/' || p_seq);
    v_policy text := coalesce(p_command ->> 'parent_close_policy', 'terminate');
    v_child_id uuid;
    v_failure jsonb;
    v_error_message text;
    v_error_detail text;
    v_target integer;
BEGIN
    IF v_policy NOT IN ('terminate', 'request_cancel', 'abandon') THEN
        RAISE EXCEPTION 'unknown parent_close_policy "%"', v_policy USING ERRCODE = 'HR001',
            HINT = 'use terminate, request_cancel or abandon';
    END IF;
    v_target := harvest._json_integer(p_command -> 'shard', 'shard', 0, 65535,
                                      format('command start_child_workflow (seq %s)', p_seq));
    IF v_target IS NOT NULL AND v_target <> harvest.get_shard_id() THEN
        -- A cross-shard child (cross_shard.sql): its id minted for its shard, its
        -- lifecycle row here; the pump starts it there.
        v_child_id := harvest._new_execution_id(v_target);
        INSERT INTO harvest.cross_shard_children (
            child_execution_id, parent_execution_id, parent_seq, target_shard, workflow_name, workflow_id,
            queue, input, parent_close_policy, created_at, traceparent
        ) VALUES (
            v_child_id, p_parent.id, p_seq, v_target, v_name, v_workflow_id,
            coalesce(p_command ->> 'task_queue', p_parent.queue), coalesce(p_command -> 'input', '[]'::jsonb),
            v_policy, harvest.now(), harvest._check_traceparent(p_command ->> 'traceparent')
        );
        PERFORM harvest._append_event(p_parent.id, 'ChildWorkflowStarted', jsonb_build_object(
            'seq', p_seq, 'workflow_name', v_name, 'workflow_id', v_workflow_id,
            'child_execution_id', v_child_id, 'parent_close_policy', v_policy));
        RETURN;
    END IF;
    BEGIN
        SELECT s.execution_id INTO v_child_id FROM harvest._start_workflow(
            p_workflow_name => v_name, p_input => coalesce(p_command -> 'input', '[]'::jsonb),
            p_workflow_id => v_workflow_id,
            p_queue => coalesce(p_command ->> 'task_queue', p_parent.queue),
            p_reuse_policy => 'terminate_if_running', p_conflict_policy => 'fail',
            -- NULL: this database's shard (a moved parent's id names its origin shard).
            p_parent_id => p_parent.id, p_shard => NULL,
            -- The parent's child.start span (a worker with tracing on): the child continues it.
            p_traceparent => p_command ->> 'traceparent') AS s;
        UPDATE harvest.executions SET parent_seq = p_seq, parent_close_policy = v_policy
        WHERE id = v_child_id;
    EXCEPTION
        WHEN SQLSTATE 'HR003' THEN
            v_failure := jsonb_build_object('error_type', 'WorkflowAlreadyExists', 'non_retryable', true,
                'message', 'a run of ' || v_name || ' with workflow_id ' || v_workflow_id || ' is already running',
                'details', NULL);
        WHEN SQLSTATE 'HR006' OR SQLSTATE 'HR008' THEN
            -- A quota, or the payload limit (the child's input), refused the child: the
            -- parent hears it as a failed start, typed, and its code may catch it.
            GET STACKED DIAGNOSTICS v_error_message = MESSAGE_TEXT, v_error_detail = PG_EXCEPTION_DETAIL;
            v_failure := jsonb_build_object(
                'error_type', CASE WHEN SQLSTATE = 'HR006' THEN 'QuotaExceeded' ELSE 'PayloadTooLarge' END,
                'non_retryable', true, 'message', v_error_message, 'details', v_error_detail::jsonb);
        WHEN SQLSTATE 'HR001' THEN
            -- Its start refused what the parent's code asked (a workflow_id or a queue over the
            -- limit, an empty one): the same on every retry of this decision, so a typed failed
            -- start the parent's code may catch, not a workflow task failing for good.
            GET STACKED DIAGNOSTICS v_error_message = MESSAGE_TEXT;
            v_failure := jsonb_build_object('error_type', 'InvalidArgument', 'non_retryable', true,
                'message', v_error_message, 'details', NULL);
        WHEN SQLSTATE 'HR010' THEN
            -- No worker registered the child's name on its queue: a typed failed start.
            GET STACKED DIAGNOSTICS v_error_message = MESSAGE_TEXT, v_error_detail = PG_EXCEPTION_DETAIL;
            v_failure := jsonb_build_object('error_type', 'UnknownWorkflow', 'non_retryable', true,
                'reason', 'unknown_workflow', 'message', v_error_message, 'details', v_error_detail::jsonb);
    END;
    PERFORM harvest._append_event(p_parent.id, 'ChildWorkflowStarted', jsonb_build_object(
        'seq', p_seq, 'workflow_name', v_name, 'workflow_id', v_workflow_id,
        'child_execution_id', v_child_id, 'parent_close_policy', v_policy));
    IF v_failure IS NOT NULL THEN
        PERFORM harvest._append_event(p_parent.id, 'ChildWorkflowFailed', jsonb_build_object(
            'seq', p_seq, 'child_execution_id', NULL, 'status', 'START_FAILED', 'failure', v_failure));
        PERFORM harvest._ensure_workflow_task(p_parent.id);
    END IF;
END;
$$;

-- End this run as CONTINUED_AS_NEW and start its successor (same workflow_id,
-- name, queue, search attributes, parent link and chain deadline) atomically.
CREATE OR REPLACE FUNCTION harvest._continue_as_new(
    p_execution harvest.executions, p_input jsonb, p_through bigint, p_signals jsonb DEFAULT '[]'::jsonb,
    -- The continue_as_new span of the decision (a worker with tracing on): the successor
    -- continues its trace; NULL: the successor keeps its predecessor's starting span.
    p_traceparent text DEFAULT NULL
)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_new_id uuid;
    v_signal record;
    v_late jsonb[];  -- the signals it never saw (after p_through), in order
    v_renamed jsonb;  -- {their offloaded payload's id: the successor's copy's}
BEGIN
    PERFORM harvest._close_execution(p_execution.id, 'CONTINUED_AS_NEW', NULL, NULL);
    SELECT s.execution_id INTO v_new_id FROM harvest._start_workflow(
        p_workflow_name => p_execution.workflow_name, p_input => p_input,
        p_workflow_id => p_execution.workflow_id, p_queue => p_execution.queue,
        p_reuse_policy => 'terminate_if_running', p_search_attributes => p_execution.search_attributes,
        -- NULL: this database's shard (a moved run's id names its origin shard).
        p_parent_id => p_execution.parent_id, p_shard => NULL,
        p_run_timeout_secs => p_execution.run_timeout_secs, p_flow_gates => false, p_continues => true,
        p_traceparent => coalesce(p_traceparent, (
            SELECT ev.event_data ->> 'traceparent' FROM harvest.events AS ev
            WHERE ev.execution_id = p_execution.id AND ev.event_id = 1))) AS s;
    -- A cross-shard child's owed end (cross_shard.sql) moves to the run that will end: read
    -- from the row, which this decision holds locked (an acknowledgement waits for it).
    UPDATE harvest.executions
    SET parent_seq = p_execution.parent_seq, parent_close_policy = p_execution.parent_close_policy,
        continued_from = p_execution.id, execution_timeout_at = p_execution.execution_timeout_at,
        timeout_at = least(timeout_at, p_execution.execution_timeout_at),
        end_owed_to_shard = (SELECT o.end_owed_to_shard FROM harvest.executions AS o WHERE o.id = p_execution.id)
    WHERE id = v_new_id;
    UPDATE harvest.executions SET output = jsonb_build_object('continued_as_new', v_new_id), end_owed_to_shard = NULL
    WHERE id = p_execution.id;
    PERFORM harvest._append_event(p_execution.id, 'WorkflowContinuedAsNew',
        jsonb_build_object('new_execution_id', v_new_id, 'input', p_input));
    -- A rotation loses no signal: first those the old run received but its code had
    -- not read yet (carried by the command, encoded inline by the worker), then those it
    -- never saw (after p_through).
    FOR v_signal IN
        SELECT jsonb_build_object('name', c.value -> 'name', 'payload', c.value -> 'payload',
                                  'signal_id', gen_random_uuid()::text) AS event_data
        FROM jsonb_array_elements(p_signals) WITH ORDINALITY AS c (value, n)
        ORDER BY c.n
    LOOP
        PERFORM harvest._append_event(v_new_id, 'SignalReceived', v_signal.event_data);
    END LOOP;
    SELECT array_agg(ev.event_data ORDER BY ev.event_id) INTO v_late
    FROM harvest.events AS ev
    WHERE ev.execution_id = p_execution.id AND ev.event_id > p_through AND ev.event_type = 'SignalReceived';
    IF v_late IS NOT NULL THEN
        -- Their offloaded payloads are copied under ids the successor owns, as a reset fork's
        -- (reset.sql): the old run's retention or erasure must not take the successor's signals.
        -- Only the old run's rows (a signal's offloaded payload is its run's): a reference is
        -- what the sender wrote, and a copy of another run's row would outlive its erasure.
        SELECT coalesce(jsonb_object_agg(r.id, gen_random_uuid()), '{}'::jsonb) INTO v_renamed
        FROM (SELECT harvest._payload_refs(d) AS id FROM unnest(v_late) AS d) AS r
        WHERE EXISTS (SELECT 1 FROM harvest.payloads AS p WHERE p.id = r.id AND p.execution_id = p_execution.id);
        IF v_renamed <> '{}'::jsonb THEN
            PERFORM harvest._copy_payloads(v_renamed, v_new_id, harvest.now());
        END IF;
        FOR v_i IN 1 .. cardinality(v_late) LOOP
            PERFORM harvest._append_event(v_new_id, 'SignalReceived', harvest._renamed_refs(v_late[v_i], v_renamed));
        END LOOP;
    END IF;
    RETURN v_new_id;
END;
$$;
