-- The task queue: workflow tasks, activity tasks and timers, claimed with SKIP LOCKED.
-- A PAUSED run's tasks that no worker holds wait in status 'paused' (functions/lifecycle.sql).
-- A finished task is deleted, so the claimable index stays as small as the backlog.

-- A task's kind and status lists, as domains: a table CHECK's expression is read back
-- from its stored text by every INSERT or UPDATE statement, a domain's once per session
-- (docs/performance.md, "where the SQL path's time goes"). The columns stay text; a value
-- outside the list fails with SQLSTATE 23514 naming the constraint. The status is a table
-- CHECK casting to its domain: a claim sets it on every row it takes, and one compile per
-- statement costs less than a trigger call per row. The kind, like the concurrency limit
-- and the ageing bound, is checked by triggers (sql/triggers.sql: on insert in
-- tasks_derived_columns, on an update of their columns in tasks_checks), which no write
-- path of Harvest's fires on update (docs/performance.md, "Task rows").
CREATE DOMAIN harvest.task_kind AS text
CONSTRAINT tasks_kind_check CHECK (value IN ('workflow', 'activity', 'timer'));

CREATE DOMAIN harvest.task_status AS text
CONSTRAINT tasks_status_check CHECK (value IN ('pending', 'running', 'paused'));

CREATE TABLE harvest.tasks (
    id bigint GENERATED ALWAYS AS IDENTITY,
    execution_id uuid NOT NULL,
    kind text NOT NULL,
    queue text NOT NULL,
    status text NOT NULL DEFAULT 'pending',
    priority integer NOT NULL DEFAULT 0,
    due_at timestamptz NOT NULL,
    seq integer,
    activity_name text,
    input jsonb,
    options jsonb NOT NULL DEFAULT '{}'::jsonb,
    attempt integer NOT NULL DEFAULT 0,
    scheduled_at timestamptz NOT NULL,
    -- schedule_to_close: the invocation fails for good after this, retries or not.
    deadline_at timestamptz,
    started_at timestamptz,
    lease_owner text,
    lease_expires_at timestamptz,
    fencing_token bigint NOT NULL DEFAULT 0,
    heartbeat_at timestamptz,
    heartbeat_details jsonb,
    last_failure jsonb,
    -- Flow-control gates as columns, so the claim's gate predicates read plain
    -- columns and the partial indexes below cover exactly the gated rows:
    -- concurrency_key names a cap, concurrency_limit is its N, rate_key names the
    -- token bucket of a rate-limited activity (docs/flow-control.md).
    concurrency_key text,
    concurrency_limit integer,
    rate_key text,
    -- Priority ageing and the fairness key (functions/claim.sql), filled from the
    -- options at insert (sql/triggers.sql) so the claim's extra candidate windows
    -- read plain columns over small partial indexes.
    priority_aging_secs double precision,
    fairness_key text,
    -- A queued activity's run's workflow name and id, copied from the run when the task is
    -- queued (fixed for the run's life): a claim answers such an activity from its own row and
    -- reads the run for a workflow task, a handed activity (none: its worker had the run) or
    -- an activity queued before migration 0099 (functions/claim.sql, _claim_candidates).
    run_workflow_name text,
    run_workflow_id text,
    -- The due_at a rate-limit refusal gave the task (functions/flow_concurrency.sql,
    -- _admit_candidates): the task waits for its bucket's token while due_at still equals it.
    -- Any other write of due_at (a cap's step-back, a resume) leaves it behind, so it needs no
    -- clearing (a retry's backoff clears it in the same write, to be plain): an override
    -- re-paces only the tasks their limit holds (functions/flow_rate_limits.sql,
    -- _repace_rate_bucket).
    rate_due_at timestamptz,
    CONSTRAINT tasks_pkey PRIMARY KEY (id),
    CONSTRAINT tasks_status_check CHECK ((status::harvest.task_status) IS NOT NULL),
    CONSTRAINT tasks_execution_fkey FOREIGN KEY (execution_id)
    REFERENCES harvest.executions (id) ON DELETE CASCADE
);

-- The claim path: the head of each queue, by priority then due time.
CREATE INDEX tasks_claimable
ON harvest.tasks (queue, priority DESC, due_at, id)
WHERE status = 'pending' AND kind <> 'timer';

-- Timers fire by due time; a paused run's timers (status 'paused') wait for its resume.
CREATE INDEX tasks_timers_due
ON harvest.tasks (due_at)
WHERE kind = 'timer' AND status = 'pending';

-- The timeout scanner: running tasks by lease expiry.
CREATE INDEX tasks_running_lease
ON harvest.tasks (lease_expires_at)
WHERE status = 'running';

-- At most one workflow task per execution: a wake-up finding one adds nothing.
CREATE UNIQUE INDEX tasks_one_workflow_task
ON harvest.tasks (execution_id)
WHERE kind = 'workflow';

-- The runs whose workflow task is failing (fail_workflow_task kept the failure of its last
-- attempt; a decision deletes the row): the workflow list's failing filter reads their few
-- ids here, not every open run's workflow task (migration 0135).
CREATE INDEX tasks_workflow_failing
ON harvest.tasks (execution_id)
WHERE kind = 'workflow' AND last_failure IS NOT NULL;

-- An activity invocation (execution, seq) is one row for all its attempts, and a run's
-- tasks are found by its prefix (a lookup, a cancel, a close's delete, the foreign key's
-- cascade). A workflow task's seq is NULL, so the index asks nothing of it (NULLs are
-- distinct); one index where an unkeyed one by execution and a partial unique one by
-- (execution, seq) were two: each task insert and each claim (a non-HOT update) wrote both
-- (docs/performance.md, "Fan-out row, seventh cut").
CREATE UNIQUE INDEX tasks_execution_seq
ON harvest.tasks (execution_id, seq);

CREATE INDEX tasks_deadline
ON harvest.tasks (deadline_at)
WHERE deadline_at IS NOT NULL;

-- In-flight per key: running task rows with a key. Tasks without a key are not
-- in this index, so uncapped work pays nothing for it.
CREATE INDEX tasks_concurrency_running
ON harvest.tasks (concurrency_key)
WHERE status = 'running' AND concurrency_key IS NOT NULL;

-- Activity tasks by concurrency key, whatever their status: a page of GET /admin/concurrency
-- reads its keys in key order from here and counts only theirs (migration 0100).
CREATE INDEX tasks_activity_concurrency_key
ON harvest.tasks (concurrency_key)
WHERE kind = 'activity' AND concurrency_key IS NOT NULL;

-- The ageing window: the oldest claimable tasks of a queue that age. Tasks
-- without priority_aging_secs are not in it, so a queue without ageing pays
-- one probe of an empty index.
CREATE INDEX tasks_claimable_aging
ON harvest.tasks (queue, due_at, id)
WHERE status = 'pending' AND kind <> 'timer' AND priority_aging_secs IS NOT NULL;

-- The fairness window: a skip-scan over the distinct keys of a queue, and the
-- head of each key by priority then due time. Tasks without a key are not in it.
CREATE INDEX tasks_claimable_fair
ON harvest.tasks (queue, fairness_key, priority DESC, due_at, id)
WHERE status = 'pending' AND kind <> 'timer' AND fairness_key IS NOT NULL;

-- The tasks a rate limit holds back, per bucket in line order: what an override or its clear
-- re-paces (functions/flow_rate_limits.sql, _repace_rate_bucket). Only a rate-limit refusal
-- writes an entry (the marker matches due_at only then); an insert, a claim, a retry or a cap's
-- step-back writes none (migration 0132).
CREATE INDEX tasks_rate_held
ON harvest.tasks (rate_key, due_at, id)
WHERE status = 'pending' AND rate_due_at = due_at;

-- Fencing tokens come from one sequence so a token is never reused.
CREATE SEQUENCE harvest.fencing_tokens;
