-- The audit log: every operator action writes one row in its own transaction
-- (harvest._audit), and harvest.list_audit_log reads it back, newest first.

-- Record an operator action, in the transaction of the action. actor is the
-- database login (session_user: these functions run as their owner, so
-- current_user would name the owner); operator_id is whatever the caller says it
-- is (a person, a ticket, a bot); source is the face the call came through
-- (_audit_source). Every operator mutation writes one row: cancel, terminate,
-- reset, dead-letter replay and discard (one by one, and in bulk), rate-limit
-- overrides, worker drains, retention settings and runs. Starts, signals,
-- queries and updates are application traffic, not audited.
CREATE OR REPLACE FUNCTION harvest._audit(p_operation text, p_target text, p_operator_id text, p_details jsonb)
RETURNS bigint
LANGUAGE sql
AS $$
    INSERT INTO harvest.audit_log (at, actor, operator_id, operation, target, details, source)
    SELECT harvest.now(), session_user, p_operator_id, p_operation, p_target,
           -- An application name that is not a Harvest face is kept (psql, a script, or
           -- '' for a client that gave none).
           CASE WHEN s.application_name IN ('harvest-cli', 'harvest-api', 'harvest-ui')
               THEN coalesce(p_details, '{}'::jsonb)
               ELSE coalesce(p_details, '{}'::jsonb) || jsonb_build_object('application_name', s.application_name)
           END,
           harvest._audit_source(s.application_name)
    FROM (SELECT coalesce(current_setting('application_name', true), '') AS application_name) AS s
    RETURNING id;
$$;

-- The audit source of a session, from the application_name Harvest's own faces
-- set (the CLI 'harvest-cli', the HTTP API 'harvest-api', the dashboard
-- 'harvest-ui'). The spec's audit log knows only api, cli and ui, so any other
-- client (psql, a script) is recorded as cli, the nearest, with its application
-- name kept in the details. A provenance label, not a permission: a session
-- chooses its own application_name.
CREATE OR REPLACE FUNCTION harvest._audit_source(p_application_name text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE p_application_name WHEN 'harvest-api' THEN 'api' WHEN 'harvest-ui' THEN 'ui' ELSE 'cli' END;
$$;

-- The audit log, newest first (with each row's source: api, cli or ui).
CREATE OR REPLACE FUNCTION harvest.list_audit_log(p_limit integer DEFAULT 100, p_operation text DEFAULT NULL)
RETURNS SETOF harvest.audit_log
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..1000', p_limit USING ERRCODE = 'HR001';
    END IF;
    RETURN QUERY SELECT * FROM harvest.audit_log AS a
    WHERE p_operation IS NULL OR a.operation = p_operation
    ORDER BY a.id DESC LIMIT p_limit;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.list_audit_log IS
'The audit log of operator actions (terminate, cancel, reset, dead-letter replay and discard, worker drain, '
'retention, rate-limit overrides) with each row''s source, newest first, optionally of one operation; p_limit '
'1..1000. For operators (role harvest_reader).';
