-- The audit log: every operator action writes one row in its own transaction
-- (harvest._audit), and harvest.list_audit_log reads it back, newest first.

-- Record an operator action, in the transaction of the action. login is the
-- database login (session_user: these functions run as their owner, so
-- current_user would name the owner), always. actor, source and route are what the
-- caller asserts in transaction-local settings (harvest._audit_context: the HTTP API
-- sets the token's name, api and the route); without them actor is the login and
-- source comes from the application_name (_audit_source). operator_id is whatever
-- the caller says it is (a person, a ticket, a bot). Every operator mutation writes
-- one row: cancel, terminate, reset, dead-letter replay and discard (one by one, and
-- in bulk), rate-limit overrides, worker drains, retention settings and runs, API
-- tokens created and revoked. Starts and signals are audited when the caller names an
-- actor (_audit_asserted: the HTTP API and the dashboard always do); from the client
-- library and the engine they are application traffic, recorded by the history alone.
-- Queries write nothing; updates are recorded in the history with their update_id.
CREATE OR REPLACE FUNCTION harvest._audit(p_operation text, p_target text, p_operator_id text, p_details jsonb)
RETURNS bigint
LANGUAGE sql
AS $$
    INSERT INTO harvest.audit_log (
        at, actor, operator_id, operation, target, details, source, login, route, acting_role
    )
    SELECT harvest.now(), coalesce(c.actor, session_user), p_operator_id, p_operation, p_target,
           -- An application name that is not a Harvest face is kept (psql, a script, or
           -- '' for a client that gave none).
           CASE WHEN s.application_name IN ('harvest-cli', 'harvest-api', 'harvest-ui')
               THEN coalesce(p_details, '{}'::jsonb)
               ELSE coalesce(p_details, '{}'::jsonb) || jsonb_build_object('application_name', s.application_name)
           END,
           coalesce(c.source, harvest._audit_source(s.application_name)), session_user, c.route,
           -- The role the action used (what it was allowed), beside who the caller is (its
           -- login): a session can SET ROLE only to a role PostgreSQL lets it.
           harvest._session_role()
    FROM (SELECT coalesce(current_setting('application_name', true), '') AS application_name) AS s
    CROSS JOIN harvest._audit_context() AS c
    RETURNING id;
$$;

-- What the caller asserts about the action it is making, from three settings it sets
-- for its own transaction (set_config(name, value, true); harvest.db.audit does it for
-- the HTTP API): harvest.audit_actor (who, e.g. a token's name), harvest.audit_source
-- (api, cli or ui; anything else is ignored) and harvest.audit_route (the route or
-- command). Caller-asserted text for the audit row only: it changes no permission and
-- nothing another session sees, and the row records the login beside it, so a login
-- can misname itself in its own rows but never hide which login it was. Blank is unset;
-- each value is cut to 200 characters.
CREATE OR REPLACE FUNCTION harvest._audit_context(OUT actor text, OUT source text, OUT route text)
LANGUAGE sql STABLE
AS $$
    SELECT nullif(left(btrim(coalesce(current_setting('harvest.audit_actor', true), '')), 200), ''),
           CASE WHEN current_setting('harvest.audit_source', true) IN ('api', 'cli', 'ui')
               THEN current_setting('harvest.audit_source', true) END,
           nullif(left(btrim(coalesce(current_setting('harvest.audit_route', true), '')), 200), '');
$$;

-- Audit an action only when the caller names an actor (harvest.audit_actor): the
-- HTTP API and the dashboard always do (harvest.db.connection.set_role), the client
-- library and the engine never do. Starts and signals call it: through a face they are
-- an operator's (or a service's) mutating call, written beside the action in its own
-- transaction; from application code and from the engine (children, continue-as-new)
-- they are the data plane, whose own record is the run's history, and an audit row per
-- start would double the hottest write. A session that names an actor only adds rows
-- of its own.
CREATE OR REPLACE FUNCTION harvest._audit_asserted(p_operation text, p_target text, p_details jsonb)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF (SELECT c.actor FROM harvest._audit_context() AS c) IS NOT NULL THEN
        PERFORM harvest._audit(p_operation, p_target, NULL, p_details);
    END IF;
END;
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

-- A pacing override's write (set or cleared on every shard) that did not reach every shard: a
-- second row of the call's operation on each shard that took the write, outcome failed,
-- naming the shards that did not (p_shard_errors: [{"shard_id", "error", ...}], as the HTTP
-- API answers them). Each shard's own row says what it did; this one says the call as a whole
-- failed, so an override live on some shards only is never silent in the audit log either
-- (the sharding guide, "TTL'd pacing overrides apply per shard"). The faces write it after
-- the fan-out (the CLI over SQL, the HTTP API); only the pacing operations take it.
CREATE OR REPLACE FUNCTION harvest.record_incomplete_write(
    p_operation text, p_target text, p_shard_errors jsonb, p_operator_id text DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_operation IS NULL OR p_operation NOT IN ('rate_limit.override', 'rate_limit.clear_override',
                                                  'start_throttle.override', 'start_throttle.clear_override') THEN
        RAISE EXCEPTION 'record_incomplete_write: % is not a write made on every shard', coalesce(p_operation, 'NULL')
            USING ERRCODE = 'HR001',
            HINT = 'one of rate_limit.override, rate_limit.clear_override, start_throttle.override, '
                   'start_throttle.clear_override';
    END IF;
    IF jsonb_typeof(p_shard_errors) IS DISTINCT FROM 'array' OR jsonb_array_length(p_shard_errors) = 0
       OR EXISTS (SELECT 1 FROM jsonb_array_elements(p_shard_errors) AS e(v)
                  WHERE jsonb_typeof(e.v -> 'shard_id') IS DISTINCT FROM 'number') THEN
        RAISE EXCEPTION 'record_incomplete_write: the shards not written are a non-empty array of {"shard_id", ...}'
            USING ERRCODE = 'HR001';
    END IF;
    RETURN harvest._audit(p_operation, p_target, p_operator_id, jsonb_build_object(
        'outcome', 'failed',
        'missed_shards', (SELECT jsonb_agg((e.v -> 'shard_id') ORDER BY (e.v ->> 'shard_id')::integer)
                          FROM jsonb_array_elements(p_shard_errors) AS e(v)),
        'shard_errors', p_shard_errors));
END;
$$;

-- The audit log, newest first (by at, then id; with each row's source: api, cli or ui).
CREATE OR REPLACE FUNCTION harvest.list_audit_log(
    p_limit integer DEFAULT 100,
    p_operation text DEFAULT NULL,
    p_before_at timestamptz DEFAULT NULL,
    p_before_id bigint DEFAULT NULL
)
RETURNS SETOF harvest.audit_log
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..1000', p_limit USING ERRCODE = 'HR001';
    END IF;
    IF (p_before_at IS NULL) <> (p_before_id IS NULL) THEN
        RAISE EXCEPTION 'a position in the audit log is a time and an id: give both or neither'
            USING ERRCODE = 'HR001', HINT = 'pass the at and id of the last row of the previous page';
    END IF;
    -- Newest first by time, then id: the order every shard's rows are merged in (the CLI, the
    -- API), so each shard's first p_limit rows hold its share of the merged first p_limit. An id
    -- is taken at the insert, `at` at the statement's start: they disagree across concurrent
    -- actions (and under the test clock).
    -- Keyset paging: the rows after the last one of the previous page, in the same order.
    RETURN QUERY SELECT * FROM harvest.audit_log AS a
    WHERE (p_operation IS NULL OR a.operation = p_operation)
      AND (p_before_at IS NULL OR (a.at, a.id) < (p_before_at, p_before_id))
    ORDER BY a.at DESC, a.id DESC LIMIT p_limit;
END;
$$;

-- Delete the audit rows older than p_older_than, oldest first, at most p_batch_size of them (one
-- transaction; call again until remaining is 0). Harvest deletes no audit row by itself unless
-- the janitor is given an age (retention.audit_max_age: it calls this), and the log grows with the load as well as with operators: the retention janitor writes a
-- row for each batch that deletes runs (retention.run) and each round that deletes flow keys or
-- worker rows. So an installation prunes it as its audit policy says, as harvest_admin (only
-- the table's owner may DELETE from it). A prune that deletes rows, or that names an operator,
-- is audited itself (audit.prune: the count, the cutoff and the age). remaining counts the rows
-- still older, up to 10,000, as run_retention's does, so a batch's cost does not grow with
-- the backlog.
CREATE OR REPLACE FUNCTION harvest.prune_audit_log(
    p_older_than interval,
    p_batch_size integer DEFAULT 10000,
    p_operator_id text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_cutoff timestamptz;
    v_deleted integer;
    v_remaining integer;
BEGIN
    IF p_older_than IS NULL THEN
        RAISE EXCEPTION 'give the age of the audit rows to delete, e.g. ''400 days''' USING ERRCODE = 'HR001';
    END IF;
    IF p_batch_size IS NULL OR p_batch_size NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'batch size % is out of range 1..100000', p_batch_size USING ERRCODE = 'HR001';
    END IF;
    v_cutoff := harvest._retention_cutoff(p_older_than, 'audit log max age');
    -- Oldest first down audit_log_at (read backwards); rows another prune holds are skipped.
    WITH gone AS (
        DELETE FROM harvest.audit_log AS a
        WHERE a.id IN (SELECT q.id FROM harvest.audit_log AS q WHERE q.at < v_cutoff
                       ORDER BY q.at, q.id LIMIT p_batch_size FOR UPDATE SKIP LOCKED)
        RETURNING 1
    )
    SELECT count(*) INTO v_deleted FROM gone;
    SELECT count(*) INTO v_remaining FROM (
        SELECT 1 FROM harvest.audit_log AS a WHERE a.at < v_cutoff LIMIT 10000
    ) AS r;
    IF v_deleted > 0 OR p_operator_id IS NOT NULL THEN
        PERFORM harvest._audit('audit.prune', NULL, p_operator_id, jsonb_build_object(
            'deleted', v_deleted, 'cutoff', v_cutoff, 'older_than', harvest._interval_text(p_older_than)));
    END IF;
    RETURN jsonb_build_object('deleted', v_deleted, 'remaining', v_remaining, 'cutoff', v_cutoff);
END;
$$;

-- How many audit rows prune_audit_log(p_older_than) would delete, all of them (not capped as
-- its remaining is: one index range of audit_log_at), and the cutoff: `harvest audit prune
-- --dry-run`. Writes nothing, audits nothing.
CREATE OR REPLACE FUNCTION harvest.count_audit_log(p_older_than interval)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_cutoff timestamptz;
BEGIN
    IF p_older_than IS NULL THEN
        RAISE EXCEPTION 'give the age of the audit rows to count, e.g. ''400 days''' USING ERRCODE = 'HR001';
    END IF;
    v_cutoff := harvest._retention_cutoff(p_older_than, 'audit log max age');
    RETURN jsonb_build_object(
        'older', (SELECT count(*) FROM harvest.audit_log AS a WHERE a.at < v_cutoff), 'cutoff', v_cutoff);
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.record_incomplete_write IS
'Record that a pacing override''s write on every shard missed some (p_shard_errors, each with its shard_id): one '
'audit row of p_operation, outcome failed, on a shard that took the write. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.list_audit_log IS
'The audit log of operator actions (terminate, cancel, reset, dead-letter replay and discard, worker drain, '
'retention, rate-limit overrides, API tokens; starts and signals made through the HTTP API or the dashboard) with each row''s actor, login, acting role, source and route, newest first, '
'optionally of one operation, after a position (keyset paging: p_before_at and p_before_id, the last row''s; one '
'without the other is HR001); p_limit 1..1000. For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.prune_audit_log IS
'Delete up to p_batch_size audit rows older than p_older_than, oldest first (call until remaining is 0; the '
'janitor calls it only when retention.audit_max_age is set); audited as audit.prune. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.count_audit_log IS
'How many audit rows prune_audit_log(p_older_than) would delete (older), and the cutoff; writes nothing. For '
'operators (role harvest_reader).';
