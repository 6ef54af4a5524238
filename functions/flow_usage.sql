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
--                               window: a 3-attempt activity contributes 3
--   activity_executions_failed  ActivityFailed events (retries exhausted, non-retryable, or a
--                               discarded dead letter)
--   activity_span_seconds       per finished activity, ActivityScheduled to its outcome, summed
--                               (the history does not record when the final attempt started,
--                               so this includes queueing and retry backoff)
-- Local activities are markers, not activities, and are not counted.
-- A run moved by a shard rebalance is counted once across the shards: each event
-- on the shard that appended it (the events a copy brought are skipped, and so is
-- a staged copy), so the per-shard reports add up.
--
-- group_by: 'workflow_name' (default) or 'search_attr:<key>'; a run without the
-- key is grouped under '(unattributed)', never dropped. A window wider than the
-- ceiling is refused (HR001) naming it. The ceiling is the server's:
-- harvest.engine_settings.usage_max_window (default 90 days, owner-only); a
-- caller's p_max_window can narrow it, never widen it.
--
-- Cost: the runs considered are those alive during the window (created before
-- its end, not closed before its start); their events are read by the events
-- primary key. No index on events.created_at is needed or added.

CREATE OR REPLACE FUNCTION harvest.count_usage(
    p_from timestamptz,
    p_to timestamptz,
    p_group_by text DEFAULT 'workflow_name',
    p_max_window interval DEFAULT NULL
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
    activity_span_seconds double precision
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_attr text;
    -- The server's ceiling; reading it here (not trusting the argument) is the point.
    v_ceiling interval := coalesce(
        (SELECT s.usage_max_window FROM harvest.engine_settings AS s WHERE s.id), interval '90 days');
    v_max_window interval := least(coalesce(p_max_window, v_ceiling), v_ceiling);
BEGIN
    IF p_from IS NULL OR p_to IS NULL THEN
        RAISE EXCEPTION 'usage report: from and to are required' USING ERRCODE = 'HR001';
    END IF;
    IF p_to <= p_from THEN
        RAISE EXCEPTION 'usage report: to (%) must be after from (%)', p_to, p_from USING ERRCODE = 'HR001';
    END IF;
    IF p_to - p_from > v_max_window THEN
        RAISE EXCEPTION 'usage report: the window % .. % (%) is wider than the ceiling of %',
            p_from, p_to, justify_interval(p_to - p_from), v_max_window USING ERRCODE = 'HR001',
            HINT = 'ask for a narrower window (several reports can be added up); the server''s ceiling is '
                   || v_ceiling || ' (harvest.engine_settings.usage_max_window, set by the schema owner)';
    END IF;
    IF coalesce(p_group_by, 'workflow_name') = 'workflow_name' THEN
        v_attr := NULL;
    ELSIF p_group_by LIKE 'search_attr:_%' THEN
        v_attr := substr(p_group_by, length('search_attr:') + 1);
    ELSE
        RAISE EXCEPTION 'usage report: unknown group_by "%"', p_group_by USING ERRCODE = 'HR001',
            HINT = 'use workflow_name or search_attr:<key>';
    END IF;

    RETURN QUERY
    WITH runs AS (
        SELECT x.id,
               CASE WHEN v_attr IS NULL THEN x.workflow_name
                    ELSE coalesce(x.search_attributes ->> v_attr, '(unattributed)') END AS grp
        FROM harvest.executions AS x
        WHERE x.created_at < p_to AND (x.completed_at IS NULL OR x.completed_at >= p_from)
          AND x.status <> 'MIGRATING'
    ),
    ev AS (
        SELECT r.grp, e.execution_id, e.event_type, e.event_data, e.created_at
        FROM runs AS r
        JOIN harvest.events AS e ON e.execution_id = r.id
        -- A moved run's copied events are counted on the shard that appended them
        -- (functions/rebalance.sql): once across shards.
        LEFT JOIN harvest.shard_arrivals AS a ON a.execution_id = r.id
        WHERE e.created_at >= p_from AND e.created_at < p_to
          AND NOT coalesce(a.copied_events @> e.event_id, false)
          AND e.event_type IN ('WorkflowStarted', 'WorkflowCompleted', 'WorkflowFailed', 'WorkflowCancelled',
                               'WorkflowTimedOut', 'ActivityCompleted', 'ActivityFailed')
    ),
    spans AS (
        SELECT ev.grp, extract(EPOCH FROM ev.created_at - s.created_at)::double precision AS secs
        FROM ev
        JOIN LATERAL (
            SELECT sch.created_at FROM harvest.events AS sch
            WHERE sch.execution_id = ev.execution_id AND sch.event_type = 'ActivityScheduled'
              AND sch.event_data -> 'seq' = ev.event_data -> 'seq'
            ORDER BY sch.event_id DESC LIMIT 1
        ) AS s ON true
        WHERE ev.event_type IN ('ActivityCompleted', 'ActivityFailed')
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
               count(*) FILTER (WHERE ev.event_type = 'ActivityFailed') AS activity_executions_failed
        FROM ev
        GROUP BY ev.grp
    )
    SELECT c.grp, c.workflow_starts, c.completed, c.failed, c.cancelled, c.timed_out,
           c.activity_executions, c.activity_executions_failed,
           coalesce((SELECT sum(s.secs) FROM spans AS s WHERE s.grp = c.grp), 0)::double precision
    FROM counted AS c
    ORDER BY c.grp;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.count_usage IS
'What each workflow type or search-attribute group consumed over [p_from, p_to), from the durable events (starts,'
' outcomes, activity attempts and span); a window wider than the server''s ceiling raises HR001. For operators '
'(role harvest_reader).';
