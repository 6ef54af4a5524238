-- Operating Harvest: the audit log, retention settings, operator indexes and
-- the four database roles (harvest_reader, harvest_operator, harvest_admin,
-- harvest_worker). Grants are applied by harvest._secure_functions()
-- (functions/zz_security.sql), which the migrator runs after every change.

-- Who did what to the engine from outside it (cancels, terminations, resets,
-- dead-letter replays and discards, rate-limit overrides, worker drains,
-- retention settings and runs): one row per request. source is the face it came
-- through (api, cli or ui; NULL on rows written before migration 0019).
CREATE TABLE harvest.audit_log (
    id bigint GENERATED ALWAYS AS IDENTITY,
    at timestamptz NOT NULL,
    actor text NOT NULL,
    operator_id text,
    operation text NOT NULL,
    target text,
    details jsonb NOT NULL DEFAULT '{}'::jsonb,
    source text,
    CONSTRAINT audit_log_pkey PRIMARY KEY (id),
    CONSTRAINT audit_log_source_known CHECK (source IN ('api', 'cli', 'ui'))
);

CREATE INDEX audit_log_operation_at
ON harvest.audit_log (operation, at DESC);

-- Retention: one settings row. max_age NULL means "keep everything".
CREATE TABLE harvest.retention_config (
    id boolean NOT NULL DEFAULT true,
    max_age interval,
    batch_size integer NOT NULL DEFAULT 500,
    updated_at timestamptz,
    last_run_at timestamptz,
    last_run_deleted bigint,
    -- Stopped and stale worker rows whose last heartbeat is older are deleted (0017);
    -- NULL keeps every row.
    worker_max_age interval DEFAULT interval '7 days',
    CONSTRAINT retention_config_pkey PRIMARY KEY (id),
    CONSTRAINT retention_config_single_row CHECK (id),
    CONSTRAINT retention_config_batch_size_check CHECK (batch_size BETWEEN 1 AND 10000),
    CONSTRAINT retention_config_max_age_check CHECK (max_age IS NULL OR max_age > interval '0'),
    CONSTRAINT retention_config_worker_max_age_check CHECK (worker_max_age IS NULL OR worker_max_age > interval '0')
);

INSERT INTO harvest.retention_config (id) VALUES (true) ON CONFLICT DO NOTHING;

-- The workflow list pages by (created_at, id) in both directions.
CREATE INDEX executions_created
ON harvest.executions (created_at, id);

CREATE INDEX executions_name_created
ON harvest.executions (workflow_name, created_at, id);

-- The janitor: terminal runs by completion time.
CREATE INDEX executions_completed
ON harvest.executions (completed_at)
WHERE status <> 'RUNNING';

CREATE INDEX dead_letters_workflow
ON harvest.dead_letters (workflow_name, failed_at DESC);

-- Roles are cluster-wide: create them once, whoever migrates first.
DO $roles$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['harvest_reader', 'harvest_operator', 'harvest_admin', 'harvest_worker'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = v_role) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
            EXCEPTION
                WHEN duplicate_object OR unique_violation THEN NULL;  -- a concurrent migrator won
                WHEN insufficient_privilege THEN
                    RAISE WARNING 'cannot create role %: ask a superuser to CREATE ROLE % NOLOGIN', v_role, v_role;
            END;
        END IF;
    END LOOP;
END
$roles$;
