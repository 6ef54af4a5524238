-- Relays: effects on another execution, delivered without waiting on its lock.
--
-- A child's end must reach its parent, and a parent's end its children. Locking
-- two executions in one transaction would invite deadlocks (child then parent
-- here, parent then child there), so the cause writes a relay row and tries to
-- deliver it at once with SKIP LOCKED; a busy target gets it from the next
-- scanner pass (deliver_relays). Delivery checks the target is still RUNNING, so
-- delivering twice or late is harmless.

CREATE OR REPLACE FUNCTION harvest._queue_relay(p_target uuid, p_kind text, p_payload jsonb)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_relay_id bigint;
BEGIN
    INSERT INTO harvest.relays (target_execution_id, kind, payload, created_at)
    VALUES (p_target, p_kind, p_payload, harvest.now())
    RETURNING id INTO v_relay_id;
    PERFORM harvest._deliver_relay(v_relay_id);
END;
$$;

-- Deliver one relay if its target can be locked without waiting; true when done.
CREATE OR REPLACE FUNCTION harvest._deliver_relay(p_relay_id bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_relay harvest.relays;
    v_target harvest.executions;
    v_status text;
BEGIN
    SELECT * INTO v_relay FROM harvest.relays WHERE id = p_relay_id FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT * INTO v_target FROM harvest.executions WHERE id = v_relay.target_execution_id
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- Locked elsewhere (retry later) or gone (drop the relay).
        IF EXISTS (SELECT 1 FROM harvest.executions WHERE id = v_relay.target_execution_id) THEN
            RETURN false;
        END IF;
        DELETE FROM harvest.relays WHERE id = p_relay_id;
        RETURN true;
    END IF;
    DELETE FROM harvest.relays WHERE id = p_relay_id;
    IF v_target.status <> 'RUNNING' THEN
        RETURN true;
    END IF;
    IF v_relay.kind = 'child_closed' THEN
        v_status := v_relay.payload ->> 'status';
        IF v_status = 'COMPLETED' THEN
            PERFORM harvest._append_event(v_target.id, 'ChildWorkflowCompleted', jsonb_build_object(
                'seq', v_relay.payload -> 'seq', 'child_execution_id', v_relay.payload -> 'child_execution_id',
                'result', v_relay.payload -> 'result'));
        ELSE
            PERFORM harvest._append_event(v_target.id, 'ChildWorkflowFailed', jsonb_build_object(
                'seq', v_relay.payload -> 'seq', 'child_execution_id', v_relay.payload -> 'child_execution_id',
                'status', v_status, 'failure', v_relay.payload -> 'failure'));
        END IF;
        PERFORM harvest._ensure_workflow_task(v_target.id);
    ELSIF v_relay.payload ->> 'policy' = 'terminate' THEN
        PERFORM harvest._append_event(v_target.id, 'WorkflowTerminated',
            jsonb_build_object('reason', 'parent ' || (v_relay.payload ->> 'parent_execution_id') || ' closed'));
        PERFORM harvest._close_execution(v_target.id, 'TERMINATED', NULL, jsonb_build_object(
            'error_type', 'Terminated', 'message', 'the parent workflow closed', 'non_retryable', true,
            'details', NULL));
    ELSIF v_relay.payload ->> 'policy' = 'request_cancel' AND NOT v_target.cancel_requested THEN
        UPDATE harvest.executions SET cancel_requested = true WHERE id = v_target.id;
        PERFORM harvest._append_event(v_target.id, 'WorkflowCancelRequested',
            jsonb_build_object('reason', 'the parent workflow closed'));
        PERFORM harvest._ensure_workflow_task(v_target.id);
    END IF;
    RETURN true;
END;
$$;

-- The scanner's pass over relays whose immediate delivery found the target busy.
CREATE OR REPLACE FUNCTION harvest.deliver_relays(p_limit integer DEFAULT 100)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_relay_id bigint;
    v_delivered integer := 0;
BEGIN
    FOR v_relay_id IN SELECT id FROM harvest.relays ORDER BY id LIMIT p_limit LOOP
        IF harvest._deliver_relay(v_relay_id) THEN
            v_delivered := v_delivered + 1;
        END IF;
    END LOOP;
    RETURN v_delivered;
END;
$$;

-- An execution's children (direct, or down to p_depth levels), newest first.
CREATE OR REPLACE FUNCTION harvest.list_children(
    p_execution_id uuid, p_status text DEFAULT NULL, p_depth integer DEFAULT 1
)
RETURNS TABLE (
    execution_id uuid, parent_id uuid, workflow_name text, workflow_id text, status text,
    created_at timestamptz, completed_at timestamptz, error_summary text, depth integer
)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_status IS NOT NULL AND upper(p_status) NOT IN (
        'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT', 'CONTINUED_AS_NEW',
        'MIGRATING', 'MIGRATED'
    ) THEN
        RAISE EXCEPTION 'unknown status "%": use RUNNING, COMPLETED, FAILED, CANCELLED, TERMINATED, '
                        'TIMED_OUT, CONTINUED_AS_NEW, MIGRATING or MIGRATED', p_status USING ERRCODE = 'HR001',
            HINT = 'use RUNNING, COMPLETED, FAILED, CANCELLED, TERMINATED, TIMED_OUT, CONTINUED_AS_NEW, MIGRATING '
                   'or MIGRATED';
    END IF;
    IF p_depth IS NULL OR p_depth < 1 OR p_depth > 100 THEN
        RAISE EXCEPTION 'depth % is out of range 1..100', p_depth USING ERRCODE = 'HR001';
    END IF;
    RETURN QUERY
    WITH RECURSIVE tree AS (
        SELECT e.id, e.parent_id, 1 AS depth FROM harvest.executions AS e WHERE e.parent_id = p_execution_id
        UNION ALL
        SELECT e.id, e.parent_id, t.depth + 1
        FROM harvest.executions AS e JOIN tree AS t ON e.parent_id = t.id
        WHERE t.depth < p_depth
    )
    SELECT e.id, e.parent_id, e.workflow_name, e.workflow_id, e.status, e.created_at, e.completed_at,
           (e.failure ->> 'error_type') || ': ' || (e.failure ->> 'message'), t.depth
    FROM tree AS t JOIN harvest.executions AS e ON e.id = t.id
    WHERE p_status IS NULL OR e.status = upper(p_status)
    ORDER BY e.created_at DESC, e.id;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.deliver_relays IS
'Deliver relays (a child''s end to its parent, a parent''s end to its children) whose immediate delivery found '
'the target busy; returns how many. Called by the scanner, harvest.scan (role harvest_worker).';
COMMENT ON FUNCTION harvest.list_children IS
'An execution''s children, direct or down to p_depth levels (1..100), newest first, optionally of one status '
'(else HR001). For operators (role harvest_reader).';
