-- The historical usage report (docs/flow-control.md): what each workflow type or
-- tenant consumed over a window, computed read-only from the durable events, so
-- a later change to an execution row (a reset, a dead-letter replay) never
-- rewrites history. The point-in-time companion is list_concurrency_keys().
--
-- Each unit is counted once, in the window its event was written, over the
-- half-open window [from, to) (adjacent windows never count a unit twice):
--   workflow_starts             WorkflowStarted events (a continue-as-new successor is a start)
--   completed / failed /        WorkflowCompleted / WorkflowFailed / WorkflowCancelled
--   cancelled / timed_out       (superseded runs included) / WorkflowTimedOut events;
--                               TERMINATED and CONTINUED_AS_NEW are not broken out
--   activity_executions         attempts of the activities whose outcome (ActivityCompleted /
--                               ActivityFailed, which carry the attempt count) falls in the
--                               window: a 3-attempt activity contributes 3 (a replayed dead
--                               letter's attempts count on from its dead-lettered ones:
--                               dead_letters.sql, so its outcome counts them all)
--   activity_executions_failed  ActivityFailed events (retries exhausted, non-retryable, or a
--                               discarded dead letter)
--   activity_compute_seconds    per finished activity, its final attempt's start (the outcome's
--                               started_at, functions/activities.sql) to its outcome, summed:
--                               retry backoff and queueing are excluded by construction; an
--                               activity completed elsewhere by its task token, a discarded dead
--                               letter and outcomes written before 0037 carry no start and add 0
--   llm_calls, llm_input_tokens, the agent cost ledger (harvest.llm_calls) rows recorded in the
--   llm_output_tokens,          window: calls, token sums, cost in millionths of a US dollar
--   llm_cost_usd_micros,        (priced rows only), rows with no cost, latency sum
--   llm_unpriced_calls,
--   llm_latency_ms
-- Local activities are markers, not activities, and are not counted.
-- A reset fork's copies of its source's events (those before its WorkflowResetFork marker,
-- which keep their original times) are counted once, on the source; the fork counts what it
-- appends after the marker.
-- A run moved by a shard rebalance is counted once across the shards: each event
-- on the shard that appended it (the events a copy brought are skipped, and so is
-- a staged copy), so the per-shard reports add up. Ledger rows stay on the shard
-- that recorded them (a move does not copy them): the sealed source counts its rows.
--
-- group_by: 'workflow_name' (default) or 'search_attr:<key>' (a key a filter can
-- name: harvest._search_attr_key_ok, as the dashboard checks it); a run without the
-- key is grouped under '(unattributed)', never dropped. A window wider than the
-- ceiling is refused (HR001) naming it. The ceiling is the server's alone:
-- harvest.engine_settings.usage_max_window (default 90 days, owner-only); no
-- caller's parameter can widen or bypass it.
--
-- Cost: the runs considered are those alive during the window (created before
-- its end, not closed before its start), found by their completed_at (the runs
-- closed since the window's start) and their status (the running ones); their
-- events are read by the events primary key, their ledger rows by (execution_id,
-- recorded_at). No index on events.created_at is needed or added. A window that
-- ended long ago still reads every run closed since its start.

CREATE OR REPLACE FUNCTION harvest.count_usage(
    p_from timestamptz,
    p_to timestamptz,
    p_group_by text DEFAULT 'workflow_name'
)
RETURNS TABLE (
    group_name text,
    workflow_starts bigint,
    completed bigint,
    failed bigint,
    cancelled bigint,
    timed_out bigint,
    activity_executions bigint,
    activity_executions_failed bigint,
    activity_compute_seconds double precision,
    llm_calls bigint,
    llm_input_tokens bigint,
    llm_output_tokens bigint,
    llm_cost_usd_micros bigint,
    llm_unpriced_calls bigint,
    llm_latency_ms bigint
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_attr text;
    -- The server's ceiling; reading it here (not taking it from the caller) is the point.
    v_ceiling interval := coalesce(
        (SELECT s.usage_max_window FROM harvest.engine_settings AS s WHERE s.id), interval '90 days');
BEGIN
    IF p_from IS NULL OR p_to IS NULL THEN
        RAISE EXCEPTION 'usage report: from and to are required' USING ERRCODE = 'HR001';
    END IF;
    IF p_to <= p_from THEN
        RAISE EXCEPTION 'usage report: to (%) must be after from (%)', harvest._iso_time(p_to),
            harvest._iso_time(p_from) USING ERRCODE = 'HR001';
    END IF;
    IF p_to - p_from > v_ceiling THEN
        RAISE EXCEPTION 'usage report: the window % .. % (% seconds) is wider than the ceiling of % seconds',
            harvest._iso_time(p_from), harvest._iso_time(p_to), harvest._secs_text(p_to - p_from),
            harvest._secs_text(v_ceiling) USING ERRCODE = 'HR001',
            HINT = 'ask for a narrower window (several reports can be added up); the ceiling is the '
                   || 'server''s (harvest.engine_settings.usage_max_window, set by the schema owner)';
    END IF;
    IF coalesce(p_group_by, 'workflow_name') = 'workflow_name' THEN
        v_attr := NULL;
    ELSIF p_group_by LIKE 'search_attr:_%' THEN
        v_attr := substr(p_group_by, length('search_attr:') + 1);
        IF NOT harvest._search_attr_key_ok(v_attr) THEN
            RAISE EXCEPTION 'usage report: group_by "%" names no search attribute key', left(p_group_by, 200)
                USING ERRCODE = 'HR001', HINT = 'a search attribute key is letters, digits, _, . and - only';
        END IF;
    ELSE
        RAISE EXCEPTION 'usage report: unknown group_by "%"', p_group_by USING ERRCODE = 'HR001',
            HINT = 'use workflow_name or search_attr:<key>';
    END IF;

    -- EXECUTE: planned for this window each call (a cached generic plan guesses a third of the
    -- runs for completed_at >= $1 and reads them all).
    RETURN QUERY EXECUTE $query$
    WITH runs AS (
        SELECT x.id,
               CASE WHEN $3 IS NULL THEN x.workflow_name
                    ELSE coalesce(x.search_attributes ->> $3, '(unattributed)') END AS grp,
               fork.marker
        -- The runs alive during the window, read by the indexes that hold them: the closed runs
        -- by their completed_at (executions_retention, and executions_seals and
        -- executions_end_owed for the runs those leave out: the four parts are every run once,
        -- by status), the running ones by status. A scan of every run was 3.7 s a report of the
        -- last 24 hours over 2M runs, each view of the dashboard's concurrency page (0114).
        FROM (
            SELECT e.id, e.workflow_name, e.search_attributes, e.created_at, e.completed_at, e.status
            FROM harvest.executions AS e
            WHERE (e.completed_at >= $1 OR e.completed_at IS NULL)
              AND e.status NOT IN ('RUNNING', 'MIGRATED') AND e.end_owed_to_shard IS NULL
            UNION ALL
            SELECT e.id, e.workflow_name, e.search_attributes, e.created_at, e.completed_at, e.status
            FROM harvest.executions AS e
            WHERE e.status = 'RUNNING'
            UNION ALL
            SELECT e.id, e.workflow_name, e.search_attributes, e.created_at, e.completed_at, e.status
            FROM harvest.executions AS e
            WHERE (e.completed_at >= $1 OR e.completed_at IS NULL) AND e.status = 'MIGRATED'
            UNION ALL
            SELECT e.id, e.workflow_name, e.search_attributes, e.created_at, e.completed_at, e.status
            FROM harvest.executions AS e
            WHERE e.end_owed_to_shard IS NOT NULL AND e.status NOT IN ('RUNNING', 'MIGRATED')
        ) AS x
        -- A reset fork (functions/reset.sql) holds copies of its source's events, with their
        -- times, before its WorkflowResetFork marker; the source counts them. The last marker
        -- (a fork of a fork copies the first), by the events primary key.
        LEFT JOIN LATERAL (
            SELECT max(f.event_id) AS marker FROM harvest.events AS f
            WHERE f.execution_id = x.id AND f.event_type = 'WorkflowResetFork'
        ) AS fork ON true
        WHERE x.created_at < $2 AND (x.completed_at IS NULL OR x.completed_at >= $1)
          AND x.status <> 'MIGRATING'
    ),
    ev AS (
        SELECT r.grp, e.event_type, e.event_data, e.created_at
        FROM runs AS r
        JOIN harvest.events AS e ON e.execution_id = r.id
        -- A moved run's copied events are counted on the shard that appended them
        -- (functions/rebalance.sql): once across shards.
        LEFT JOIN harvest.shard_arrivals AS a ON a.execution_id = r.id
        WHERE e.created_at >= $1 AND e.created_at < $2
          AND NOT coalesce(a.copied_events @> e.event_id, false)
          AND e.event_id > coalesce(r.marker, 0)
          AND e.event_type IN ('WorkflowStarted', 'WorkflowCompleted', 'WorkflowFailed', 'WorkflowCancelled',
                               'WorkflowTimedOut', 'ActivityCompleted', 'ActivityFailed')
    ),
    counted AS (
        SELECT ev.grp,
               count(*) FILTER (WHERE ev.event_type = 'WorkflowStarted') AS workflow_starts,
               count(*) FILTER (WHERE ev.event_type = 'WorkflowCompleted') AS completed,
               count(*) FILTER (WHERE ev.event_type = 'WorkflowFailed') AS failed,
               count(*) FILTER (WHERE ev.event_type = 'WorkflowCancelled') AS cancelled,
               count(*) FILTER (WHERE ev.event_type = 'WorkflowTimedOut') AS timed_out,
               coalesce(sum(greatest(coalesce((ev.event_data ->> 'attempt')::integer, 1), 1))
                   FILTER (WHERE ev.event_type IN ('ActivityCompleted', 'ActivityFailed')), 0)::bigint
                   AS activity_executions,
               count(*) FILTER (WHERE ev.event_type = 'ActivityFailed') AS activity_executions_failed,
               coalesce(sum(greatest(extract(EPOCH FROM ev.created_at
                                             - (ev.event_data ->> 'started_at')::timestamptz), 0))
                   FILTER (WHERE ev.event_type IN ('ActivityCompleted', 'ActivityFailed')
                           AND ev.event_data ? 'started_at'), 0)::double precision AS activity_compute_seconds
        FROM ev
        GROUP BY ev.grp
    ),
    ledger AS (
        SELECT r.grp,
               count(*) AS llm_calls,
               coalesce(sum(l.input_tokens), 0)::bigint AS llm_input_tokens,
               coalesce(sum(l.output_tokens), 0)::bigint AS llm_output_tokens,
               coalesce(sum(l.cost_usd_micros), 0)::bigint AS llm_cost_usd_micros,
               count(*) FILTER (WHERE l.cost_usd_micros IS NULL) AS llm_unpriced_calls,
               coalesce(sum(l.latency_ms), 0)::bigint AS llm_latency_ms
        FROM runs AS r
        JOIN harvest.llm_calls AS l ON l.execution_id = r.id
        WHERE l.recorded_at >= $1 AND l.recorded_at < $2
        GROUP BY r.grp
    )
    SELECT coalesce(c.grp, l.grp),
           coalesce(c.workflow_starts, 0), coalesce(c.completed, 0), coalesce(c.failed, 0),
           coalesce(c.cancelled, 0), coalesce(c.timed_out, 0), coalesce(c.activity_executions, 0),
           coalesce(c.activity_executions_failed, 0), coalesce(c.activity_compute_seconds, 0),
           coalesce(l.llm_calls, 0), coalesce(l.llm_input_tokens, 0), coalesce(l.llm_output_tokens, 0),
           coalesce(l.llm_cost_usd_micros, 0), coalesce(l.llm_unpriced_calls, 0), coalesce(l.llm_latency_ms, 0)
    FROM counted AS c
    FULL JOIN ledger AS l ON l.grp = c.grp
    ORDER BY 1
    $query$ USING p_from, p_to, v_attr;
END;
$$;

-- Record one model call of an agent workload in the cost ledger, from the activity attempt that
-- made it (its task id and fencing token: only the worker holding the attempt can write, and
-- the row is its run's); returns the row's id. HR004 when the attempt is no longer held.
-- p_cost_usd_micros NULL: a call with no known price (the report counts it as unpriced).
CREATE OR REPLACE FUNCTION harvest.record_llm_call(
    p_task_id bigint,
    p_fencing_token bigint,
    p_model text,
    p_input_tokens bigint DEFAULT 0,
    p_output_tokens bigint DEFAULT 0,
    p_cost_usd_micros bigint DEFAULT NULL,
    p_latency_ms bigint DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_task harvest.tasks;
    v_id bigint;
BEGIN
    IF p_model IS NULL OR p_model = '' THEN
        RAISE EXCEPTION 'an LLM call needs its model name' USING ERRCODE = 'HR001';
    END IF;
    IF coalesce(p_input_tokens, 0) < 0 OR coalesce(p_output_tokens, 0) < 0 OR p_cost_usd_micros < 0
       OR p_latency_ms < 0 THEN
        RAISE EXCEPTION 'an LLM call''s tokens, cost and latency cannot be negative' USING ERRCODE = 'HR001';
    END IF;
    SELECT * INTO v_task FROM harvest.tasks AS t WHERE t.id = p_task_id AND t.kind = 'activity';
    IF NOT FOUND OR v_task.status <> 'running' OR v_task.fencing_token IS DISTINCT FROM p_fencing_token THEN
        RAISE EXCEPTION 'task % is no longer held by this worker', p_task_id USING ERRCODE = 'HR004';
    END IF;
    INSERT INTO harvest.llm_calls (
        execution_id, seq, attempt, model, input_tokens, output_tokens, cost_usd_micros, latency_ms, recorded_at
    ) VALUES (
        v_task.execution_id, v_task.seq, v_task.attempt, left(p_model, 200), coalesce(p_input_tokens, 0),
        coalesce(p_output_tokens, 0), p_cost_usd_micros, p_latency_ms, harvest.now()
    )
    RETURNING id INTO v_id;
    RETURN v_id;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.count_usage IS
'What each workflow type or search-attribute group consumed over [p_from, p_to), from the durable events (starts,'
' outcomes, activity attempts and compute seconds) and the agent cost ledger (llm_*); a window wider than the '
'server''s ceiling raises HR001. For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.record_llm_call IS
'Record one model call (model, tokens, cost in micro-USD or NULL, latency) in the agent cost ledger from the '
'activity attempt that made it; HR004 once the attempt is no longer held. Called by the Python worker (role '
'harvest_worker).';
