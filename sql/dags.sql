-- DAGs (functions/dags.sql, docs/dags.md): one row per DAG a worker's App declares,
-- upserted at worker start (harvest.register_dags) without touching its pause. A DAG
-- run is a workflow run of the DAG's name; its tasks' states are derived from the
-- run's history (harvest.get_dag_run), so this table holds only the declaration and
-- the operator's controls.
CREATE TABLE harvest.dags (
    dag_name text NOT NULL,
    -- The queue of the DAG's workflow runs.
    queue text NOT NULL,
    -- The tasks in a topological order: [{task, kind, target, upstream, trigger_rule, retry?}].
    tasks jsonb NOT NULL DEFAULT '[]'::jsonb,
    -- How many RUNNING runs a trigger or a retry may add to (NULL: no bound).
    max_active_runs integer,
    description text,
    -- The declared schedule as text, for views (the schedule itself lives in harvest.schedules).
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
