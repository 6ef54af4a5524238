-- Security: every harvest entry point runs with a pinned search_path as its owner
-- (SECURITY DEFINER), EXECUTE is revoked from PUBLIC and granted per role. The
-- _helpers (and the pure now/shard_of/partition_of) run as invoker with no SET clause: they are
-- only reachable through an entry point, or are harmless.
--
--   harvest_reader    read only: list, get, history, stack, registries, status
--   harvest_operator  reader + start, signal, cancel, replay dead letters
--   harvest_admin     operator + terminate, discard dead letters, retention, drain,
--                     and a start whose policy can terminate a live run (start.sql)
--   harvest_worker    claim and complete only (what harvest.Worker calls)
--
-- CREATE OR REPLACE (how functions/ files are applied) resets a function's
-- SET and SECURITY options, so this is applied centrally, after everything
-- else: every installer calls harvest._secure_functions() once all of functions/
-- is in (the migrator at the end of every run that applied anything, the fresh
-- install of the equivalence test and scripts/build_extension.py after the last
-- file), so no file has to sort last. It also creates the four roles (their one
-- creation block). A function it does not know (a new one) is granted to
-- harvest_admin only; helpers (_name) to no role.

-- Who the caller is (docs/security.md, "Who the caller is"): its login, session_user, which no
-- session can change (only a superuser's SET SESSION AUTHORIZATION does): the rows a caller owns
-- (result-wait marks, stream listeners, run-less payloads, a token's created_by) and the audit's
-- login are its login's. What it may do is the role it acts as, _session_role(): the one it set
-- with SET ROLE, else the login. Ownership by that role instead would merge every login that sets
-- one shared role (two admin logins under SET ROLE harvest_operator would own each other's rows),
-- and SET ROLE can only lower rights, never change who the caller is.
CREATE OR REPLACE FUNCTION harvest._session_role()
RETURNS name
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN current_setting('role') = 'none' THEN session_user
                ELSE current_setting('role')::name END;
$$;

-- The caller as a refusal names it: the role it acts as, and the login that set it when they
-- differ (a refusal under SET ROLE harvest_operator named only the login, an admin: "login x
-- does not have" harvest_admin, which x had).
CREATE OR REPLACE FUNCTION harvest._session_caller()
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN harvest._session_role() = session_user THEN 'login ' || session_user
                ELSE 'role ' || harvest._session_role() || ' (set by login ' || session_user || ')' END;
$$;

-- Whether the caller holds p_role, for the checks an entry point makes beyond its
-- EXECUTE grant (a start that can terminate a live run needs harvest_admin). Entry
-- points run as their owner, so current_user names the owner; the caller is the role the
-- session acts as: the one it set with SET ROLE (inside a SECURITY DEFINER function
-- current_setting('role') still names it; 'none' when there is none), else the login
-- (session_user). The web process logs in as a member of every harvest role and runs each
-- request under SET ROLE <the token's role>; PostgreSQL lets a session SET ROLE only to a
-- role it may, so this only ever lowers. The caller holds p_role when it may use its rights
-- as it stands, as the EXECUTE grants do (pg_has_role 'USAGE'): a membership PostgreSQL
-- does not let it use without SET ROLE (NOINHERIT, or on 16+ a grant WITH INHERIT FALSE,
-- possibly SET FALSE too) is not held until it does. ('MEMBER' counted any membership.)
-- A superuser or the schema owner holds every role; a missing role is held by nobody.
CREATE OR REPLACE FUNCTION harvest._session_has_role(p_role text)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (
            SELECT 1 FROM pg_catalog.pg_namespace AS n
            WHERE n.nspname = 'harvest' AND pg_catalog.pg_has_role(who.rolname, n.nspowner, 'USAGE'))
        OR EXISTS (
            SELECT 1 FROM pg_catalog.pg_roles AS r
            WHERE r.rolname = p_role AND pg_catalog.pg_has_role(who.rolname, r.oid, 'USAGE'))
    FROM (SELECT harvest._session_role() AS rolname) AS who;
$$;

CREATE OR REPLACE FUNCTION harvest._function_role(p_name text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN p_name LIKE E'\\_%' THEN NULL
        WHEN p_name IN ('claim_tasks', 'claim_named_tasks', 'complete_workflow_task', 'complete_workflow_tasks',
                        'fail_workflow_task', 'release_workflow_task', 'complete_activity',
                        'complete_activities', 'complete_activities_with_claim',
                        'fail_activity', 'heartbeat_activity', 'register_worker', 'heartbeat_worker',
                        'release_worker_tasks', 'release_task', 'set_worker_sleeping', 'stop_worker', 'begin_worker_drain',
                        'register_workflows', 'register_dags',
                        'expire_tasks', 'expire_lost_workers', 'expire_workflows', 'scan', 'heartbeat_workflow_task',
                        'deliver_relays', 'next_due_at', 'claim_query_requests', 'answer_query', 'accept_update',
                        'release_query_request', 'wait_for_first_workflow_task',
                        'expire_query_requests', 'declare_flow_policies', 'grant_mutexes',
                        'get_worker_drain_deadline', 'release_pending_starts',
                        'claim_remote_relays', 'deliver_external_relay', 'complete_relay', 'release_relay',
                        'heartbeat_partitions',
                        'claim_cross_shard_children', 'set_cross_shard_child_running', 'complete_cross_shard_child',
                        'release_cross_shard_child', 'start_cross_shard_child', 'get_cross_shard_child',
                        'cancel_cross_shard_child', 'clear_owed_child_end', 'detach_activity', 'record_llm_call')
            THEN 'harvest_worker'
        WHEN p_name IN ('declare_schedules', 'declare_app_schedules', 'delete_moved_schedules', 'list_due_schedules', 'fire_schedule',
                        'start_buffered_firings')
            THEN 'harvest_worker'
        WHEN p_name IN ('list_schedules', 'get_schedule', 'count_schedule_misses') THEN 'harvest_reader'
        WHEN p_name IN ('create_schedule', 'update_schedule', 'delete_schedule', 'pause_schedule', 'resume_schedule',
                        'trigger_schedule', 'backfill_schedule') THEN 'harvest_operator'
        WHEN p_name IN ('complete_activity_by_token', 'fail_activity_by_token', 'heartbeat_activity_by_token')
            THEN 'harvest_operator,harvest_worker'
        WHEN p_name = 'list_claimable_tasks' THEN 'harvest_operator,harvest_worker'
        -- Who leads the sampler decides whether anyone samples: not a reader's to take.
        WHEN p_name = 'claim_sampler_lead' THEN 'harvest_admin,harvest_worker'
        WHEN p_name = 'payload_limit' THEN 'harvest_reader,harvest_worker'
        WHEN p_name IN ('put_payloads', 'set_payloads_execution') THEN 'harvest_operator,harvest_worker'
        WHEN p_name = 'get_payloads' THEN 'harvest_reader,harvest_worker'
        WHEN p_name = 'get_residence' THEN 'harvest_reader,harvest_worker'
        WHEN p_name IN ('activate_migration', 'complete_migration', 'claim_stalled_migrations',
                        'set_migration_error', 'set_migration_forward') THEN 'harvest_admin,harvest_worker'
        WHEN p_name IN ('get_copy_schema', 'history_digest', 'list_migrations') THEN 'harvest_reader'
        WHEN p_name IN ('now', 'schema_version', 'functions_version', 'get_function_releases', 'get_function_state',
                        'shard_of', 'get_shard_id', 'get_deployment_shards', 'get_history',
                        'wait_for_result', 'stop_waiting_for_result', 'count_stranded_tasks', 'partition_of', 'get_owner_mode',
                        'get_metric_samples', 'list_forced_closes')
            THEN 'harvest_reader,harvest_worker'
        WHEN p_name IN ('get_execution', 'get_execution_by_workflow_id', 'list_executions', 'count_executions', 'get_execution_stack', 'list_awaited_signals', 'list_children',
                        'list_dead_letters', 'get_dead_letter', 'count_dead_letters', 'list_workers',
                        'get_worker', 'get_worker_health', 'preview_drain', 'get_retention_status',
                        'list_audit_log', 'count_audit_log', 'list_concurrency_keys', 'get_rate_limit', 'get_start_throttle', 'get_start_gate', 'count_versions',
                        'quota_usage', 'list_mutexes', 'list_pending_starts', 'count_usage', 'get_shard_health',
                        'get_shard_readiness',
                        'list_partition_owners', 'list_dags', 'list_dag_runs', 'get_dag_run', 'list_search_attribute_indexes',
                        'authenticate_api_token', 'list_events', 'get_event_horizon', 'heartbeat_event_stream',
                        'stop_event_stream', 'list_update_requests', 'get_history_page')
            THEN 'harvest_reader'
        WHEN p_name IN ('start_workflow', 'start_workflows', 'signal_with_start', 'signal_workflow',
                        'signal_workflow_eager', 'cancel_workflow', 'cancel_workflows', 'signal_workflows',
                        'replay_dead_letter', 'replay_dead_letters', 'request_query', 'request_update',
                        'update_with_start', 'get_query_request', 'pause_workflow', 'resume_workflow',
                        'pause_workflows', 'resume_workflows',
                        'trigger_dag', 'retry_dag_run', 'pause_dag', 'unpause_dag') THEN 'harvest_operator'
        ELSE 'harvest_admin'
    END;
$$;

CREATE OR REPLACE FUNCTION harvest._secure_functions()
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, harvest, pg_temp
AS $$
DECLARE
    v_role text;
    v_fn record;
    v_roles text;
    v_count integer := 0;
    v_existing text[];
BEGIN
    -- Roles are cluster-wide; a migrator without CREATEROLE leaves them to a superuser.
    FOREACH v_role IN ARRAY ARRAY['harvest_reader', 'harvest_operator', 'harvest_admin', 'harvest_worker'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = v_role) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
            EXCEPTION
                WHEN duplicate_object OR unique_violation THEN NULL;
                WHEN insufficient_privilege THEN
                    RAISE WARNING 'cannot create role %: ask a superuser to CREATE ROLE % NOLOGIN', v_role, v_role;
            END;
        END IF;
    END LOOP;
    SELECT array_agg(rolname::text) INTO v_existing FROM pg_catalog.pg_roles
    WHERE rolname IN ('harvest_reader', 'harvest_operator', 'harvest_admin', 'harvest_worker');
    v_existing := coalesce(v_existing, ARRAY[]::text[]);
    BEGIN
        IF ARRAY['harvest_reader', 'harvest_operator'] <@ v_existing
           AND NOT pg_catalog.pg_has_role('harvest_operator', 'harvest_reader', 'MEMBER') THEN
            GRANT harvest_reader TO harvest_operator;
        END IF;
        IF ARRAY['harvest_operator', 'harvest_admin'] <@ v_existing
           AND NOT pg_catalog.pg_has_role('harvest_admin', 'harvest_operator', 'MEMBER') THEN
            GRANT harvest_operator TO harvest_admin;
        END IF;
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE WARNING 'cannot grant the harvest role hierarchy: ask a superuser to GRANT harvest_reader TO '
                      'harvest_operator and harvest_operator TO harvest_admin';
    END;
    FOREACH v_role IN ARRAY v_existing LOOP
        EXECUTE format('GRANT USAGE ON SCHEMA harvest TO %I', v_role);
    END LOOP;
    IF 'harvest_reader' = ANY(v_existing) THEN
        GRANT SELECT ON ALL TABLES IN SCHEMA harvest TO harvest_reader;
        -- Token hashes are read through authenticate_api_token and list_api_tokens only.
        REVOKE ALL ON harvest.api_tokens FROM harvest_reader;
    END IF;
    -- engine_settings holds the test-clock switch (harvest.now()): readable by every
    -- harvest role (a worker calling harvest.now() reads it), writable by none, so
    -- only the owner or a superuser can let harvest.fake_now move the clock.
    REVOKE ALL ON harvest.engine_settings FROM PUBLIC;
    FOREACH v_role IN ARRAY v_existing LOOP
        EXECUTE format('REVOKE ALL ON harvest.engine_settings FROM %I', v_role);
        EXECUTE format('GRANT SELECT ON harvest.engine_settings TO %I', v_role);
    END LOOP;
    FOR v_fn IN
        SELECT p.oid::regprocedure AS sig, p.proname::text AS name
        FROM pg_catalog.pg_proc AS p
        WHERE p.pronamespace = 'harvest'::regnamespace AND p.prokind = 'f'
        ORDER BY 1
    LOOP
        IF v_fn.name = '_secure_functions' THEN
            NULL;
        ELSIF v_fn.name LIKE E'\\_%' OR v_fn.name IN ('now', 'shard_of', 'partition_of') THEN
            -- Helpers only run inside an entry point, which already runs as the owner
            -- with the pinned path; a SET clause would cost a GUC save/restore per call
            -- on the hot path (and stop SQL functions from being inlined).
            EXECUTE format('ALTER FUNCTION %s SECURITY INVOKER RESET search_path', v_fn.sig);
        ELSE
            EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, harvest, pg_temp',
                           v_fn.sig);
        END IF;
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', v_fn.sig);
        FOREACH v_role IN ARRAY v_existing LOOP
            EXECUTE format('REVOKE ALL ON FUNCTION %s FROM %I', v_fn.sig, v_role);
        END LOOP;
        v_roles := harvest._function_role(v_fn.name);
        FOREACH v_role IN ARRAY string_to_array(coalesce(v_roles, ''), ',') LOOP
            IF v_role = ANY(v_existing) THEN
                EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', v_fn.sig, v_role);
            END IF;
        END LOOP;
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END;
$$;
