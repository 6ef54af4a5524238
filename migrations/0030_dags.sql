-- 0030: DAGs (sql/dags.sql, functions/dags.sql): the declared DAGs and their pause, upserted
-- by the workers; a DAG run is a workflow run, its tasks' states read from its history.

CREATE TABLE harvest.dags (
    dag_name text NOT NULL,
    queue text NOT NULL,
    tasks jsonb NOT NULL DEFAULT '[]'::jsonb,
    max_active_runs integer,
    description text,
    schedule text,
    paused boolean NOT NULL DEFAULT false,
    paused_at timestamptz,
    paused_by text,
    first_registered_at timestamptz NOT NULL,
    last_registered_at timestamptz NOT NULL,
    CONSTRAINT dags_pkey PRIMARY KEY (dag_name),
    CONSTRAINT dags_max_active_runs_check CHECK (max_active_runs IS NULL OR max_active_runs >= 1),
    CONSTRAINT dags_tasks_array CHECK (jsonb_typeof(tasks) = 'array')
);
