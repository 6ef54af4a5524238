-- Dead letters: activity invocations that exhausted their retries, kept for
-- inspection and replay, and (kind 'workflow') runs that failed at a history
-- hard cap, kept with their typed reason (inspected and discarded, never replayed).

CREATE TABLE harvest.dead_letters (
    id bigint GENERATED ALWAYS AS IDENTITY,
    execution_id uuid NOT NULL,
    workflow_name text NOT NULL,
    seq integer,
    activity_name text,
    queue text NOT NULL,
    input jsonb,
    options jsonb NOT NULL DEFAULT '{}'::jsonb,
    priority integer NOT NULL DEFAULT 0,
    attempts integer NOT NULL,
    failure jsonb NOT NULL,
    scheduled_at timestamptz NOT NULL,
    failed_at timestamptz NOT NULL,
    kind text NOT NULL DEFAULT 'activity',
    -- Its run's quota key (executions.quota_key), set by a trigger as the row is written
    -- (sql/triggers.sql, dead_letters_quota_key): what the max_dead_letters quota counts
    -- (functions/flow_quotas.sql, quota_usage; migration 0106).
    quota_key text,
    CONSTRAINT dead_letters_pkey PRIMARY KEY (id),
    CONSTRAINT dead_letters_kind_check CHECK (kind IN ('activity', 'workflow')),
    CONSTRAINT dead_letters_activity_fields CHECK (
        kind = 'workflow' OR (seq IS NOT NULL AND activity_name IS NOT NULL)
    ),
    CONSTRAINT dead_letters_execution_fkey FOREIGN KEY (execution_id)
    REFERENCES harvest.executions (id) ON DELETE CASCADE
);

-- The listing's order, newest first (functions/dead_letters.sql, list_dead_letters), of all
-- or of one activity or workflow; read backwards, the bulk actions' oldest first.
CREATE INDEX dead_letters_newest
ON harvest.dead_letters (failed_at DESC, id DESC);

CREATE INDEX dead_letters_activity_newest
ON harvest.dead_letters (activity_name, failed_at DESC, id DESC);

CREATE INDEX dead_letters_execution
ON harvest.dead_letters (execution_id);

CREATE INDEX dead_letters_workflow_newest
ON harvest.dead_letters (workflow_name, failed_at DESC, id DESC);

-- The max_dead_letters quota's count of a key's dead letters (functions/flow_quotas.sql,
-- quota_usage): no entry for a run without a key.
CREATE INDEX dead_letters_quota_key
ON harvest.dead_letters (quota_key) WHERE quota_key IS NOT NULL;
