-- Executions: one row per run of a workflow. Columns are in the order the
-- migrations added them (a catalog compares column order), so a fresh install
-- and an upgraded one hold the same table.

-- The closed lists of a run's status and parent close policy, as domains: a value outside
-- the list fails its cast with SQLSTATE 23514 naming the constraint. The casts and the
-- search attributes' rule are checked by the executions_checks trigger (sql/triggers.sql)
-- on every INSERT and on every UPDATE that sets one of the columns they read, not by table
-- CHECKs: PostgreSQL reads a table CHECK back from its stored text and compiles it on every
-- UPDATE statement, whichever columns it sets, and a run's row is updated on every event
-- append (docs/performance.md, "SQL path, eighth cut"). A domain's constraint is read once
-- per session. The columns stay text.
CREATE DOMAIN harvest.execution_status AS text
CONSTRAINT executions_status_check CHECK (value IN (
    'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT',
    'CONTINUED_AS_NEW', 'MIGRATING', 'MIGRATED', 'PAUSED'
));

CREATE DOMAIN harvest.parent_close_policy AS text
CONSTRAINT executions_parent_close_policy_check CHECK (
    value IN ('terminate', 'request_cancel', 'abandon')
);

-- A forwarding pointer (migrated_to_shard) only on a MIGRATING or MIGRATED row, and a
-- shard number in range: one cast per column.
CREATE DOMAIN harvest.migrated_status AS text
CONSTRAINT executions_migrated_to_shard_check CHECK (value IN ('MIGRATING', 'MIGRATED'));

CREATE DOMAIN harvest.shard_number AS integer
CONSTRAINT executions_migrated_to_shard_check CHECK (value BETWEEN 0 AND 65535);

CREATE TABLE harvest.executions (
    id uuid NOT NULL,
    workflow_name text NOT NULL,
    workflow_id text NOT NULL,
    status text NOT NULL DEFAULT 'RUNNING',
    queue text NOT NULL DEFAULT 'default',
    input jsonb NOT NULL DEFAULT '[]'::jsonb,
    output jsonb,
    failure jsonb,
    search_attributes jsonb NOT NULL DEFAULT '{}'::jsonb,
    parent_id uuid,
    last_event_id bigint NOT NULL DEFAULT 0,
    cancel_requested boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL,
    completed_at timestamptz,
    parent_seq integer,
    parent_close_policy text NOT NULL DEFAULT 'terminate',
    continued_from uuid,
    -- The whole chain's deadline (carried across continue-as-new) and this run's.
    execution_timeout_at timestamptz,
    timeout_at timestamptz,
    -- The resolved per-key workflow concurrency key and quota key of the run
    -- (docs/flow-control.md).
    concurrency_key text,
    quota_key text,
    -- History size for the hard caps: the running sum of the events' JSON text
    -- bytes (harvest._event_bytes, maintained by _append_event).
    history_bytes bigint NOT NULL DEFAULT 0,
    -- Who decided the run last and through which event its run has read (past the
    -- decision's own events when its worker takes them as read: _append_events): a
    -- claim by that same worker carries the newer events, so its sticky cache needs
    -- no history read.
    decided_by text,
    decided_through bigint,
    -- The run's own timeout, which a continue-as-new successor inherits.
    run_timeout_secs double precision,
    -- Shard rebalancing (functions/rebalance.sql): on a MIGRATED seal (or a
    -- MIGRATING staged copy that replaced one) the shard the run went to, the
    -- forwarding pointer every id routed here follows; on a live copy the shards
    -- it lived on before, oldest first (the residence chain erasure walks).
    migrated_to_shard integer,
    migrated_from_shards integer[] NOT NULL DEFAULT '{}'::integer[],
    -- The last decision's hold_wakeups: the run's results wake it only once its activity
    -- tasks drain (functions/activities.sql, _wake_after_results; migration 0065).
    wake_hold boolean NOT NULL DEFAULT false,
    -- A cross-shard child's run whose end its parent (on this shard number) has not taken yet
    -- (functions/cross_shard.sql; migration 0101): retention keeps the run while it is set, the
    -- pump clears it once the parent's history has the end, or the parent's close policy reached
    -- the child; a continue-as-new hands it to the successor.
    end_owed_to_shard integer,
    CONSTRAINT executions_pkey PRIMARY KEY (id)
    -- fillfactor: half of each page left for the updates of its rows (one per decision), so
    -- they stay HOT (migration 0063, docs/performance.md, "A closing decision's row, written once").
) WITH (fillfactor = 50);

-- One live run per business key; terminal runs keep their rows for history. A
-- PAUSED run is live (functions/lifecycle.sql). A
-- MIGRATED seal and a MIGRATING staged copy hold the key too: the key still hashes
-- to the seal's shard, so a later start there must find it and not start a second
-- live run beside the moved one (functions/rebalance.sql).
CREATE UNIQUE INDEX executions_active_workflow_id
ON harvest.executions (workflow_name, workflow_id)
WHERE status IN ('RUNNING', 'PAUSED', 'MIGRATING', 'MIGRATED');

-- A workflow id's runs, its workflow's name next, newest first: a start's prior and the relays'
-- lookups by (workflow_name, workflow_id) (both columns equal, the runs newest first), a lookup
-- by workflow id without its name (get_execution_by_workflow_id, GET /workflows/current) and the
-- list of one id's runs (list_executions' p_workflow_id). One index where there were two,
-- (workflow_name, workflow_id, created_at DESC) and (workflow_id): each run's insert and close
-- wrote an entry into both (migration 0136, docs/performance.md, "Index entries per run, counted").
-- The start's prior (planned generically) keeps to it: tests/integration/test_generic_plans.py.
CREATE INDEX executions_workflow_id_runs
ON harvest.executions (workflow_id, workflow_name, created_at DESC);

-- A status's runs in the workflow list's order, (created_at, id) one way or the other
-- (list_executions with one state; migration 0114): both columns ascending, so a backward scan
-- is the list's newest first. (status, created_at DESC, id) matched neither direction of the
-- list's (created_at DESC, id DESC), and a page of RUNNING runs read down executions_created
-- through every other status's runs after the cursor: 1.2 s for a page half way down 2M runs.
CREATE INDEX executions_status_listed
ON harvest.executions (status, created_at, id);

-- A run's children: by parent_id (the closes' cascade, the stack, the janitor), and a page of
-- them in the children list's order, newest first, then id (list_children; migration 0094).
CREATE INDEX executions_parent_created
ON harvest.executions (parent_id, created_at DESC, id)
WHERE parent_id IS NOT NULL;

-- A page of a run's children of one status, in the same order (list_children with a status;
-- migration 0095): the list's filter otherwise read through the children of other statuses to
-- fill a page. A child's status changes only at its close, which writes a new entry in every
-- index of the row anyway (executions_status_listed holds the status), so this one costs a
-- child's start and close an entry each, and a run without a parent nothing.
CREATE INDEX executions_parent_status_created
ON harvest.executions (parent_id, status, created_at DESC, id)
WHERE parent_id IS NOT NULL;

CREATE INDEX executions_timeout
ON harvest.executions (timeout_at)
WHERE status = 'RUNNING' AND timeout_at IS NOT NULL;

-- The workflow list pages by (created_at, id) in both directions.
CREATE INDEX executions_created
ON harvest.executions (created_at, id);

CREATE INDEX executions_name_created
ON harvest.executions (workflow_name, created_at, id);

-- The workflow list's search attribute tests (@> containment, ? key existence): each side of
-- a filter's OR is found through it or executions_name_created (functions/executions.sql).
CREATE INDEX executions_search
ON harvest.executions USING gin (search_attributes);

-- Whether p_key is a search attribute key a filter can name: letters, digits, _, . and - (false
-- for NULL). The one rule of the SQL: search_attribute_indexes_name_check below, and
-- _parse_search_filter, _filter_term and _search_attr_index_sql (functions/executions.sql) ask
-- it (the Python's: harvest.core.search_attrs.SEARCH_ATTR_KEY). Here, before the table, as a
-- CHECK needs it (migration 0130); IMMUTABLE, as a CHECK requires, and a SQL expression the
-- planner inlines.
CREATE FUNCTION harvest._search_attr_key_ok(p_key text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_key IS NOT NULL AND p_key ~ '^[A-Za-z0-9_.\-]+$';
$$;

-- The search attributes the schema owner indexed for range tests (`harvest search-attr index`,
-- migration 0120): one row per key, the key's value typed as harvest._search_attr_ordered orders
-- it (number or text), and the name of its index and statistics. Only the owner writes it;
-- `harvest migrate run` builds every one missing or INVALID on the database it migrates (so a
-- shard migrated later gets them: docs/operations.md, "Indexing a search attribute for range
-- tests"). The indexes themselves are not in sql/: each is the owner's choice.
CREATE TABLE harvest.search_attribute_indexes (
    name text NOT NULL,
    type text NOT NULL,
    index_name text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT search_attribute_indexes_pkey PRIMARY KEY (name),
    CONSTRAINT search_attribute_indexes_index_name_key UNIQUE (index_name),
    CONSTRAINT search_attribute_indexes_name_check CHECK (harvest._search_attr_key_ok(name)),
    CONSTRAINT search_attribute_indexes_type_check CHECK (type IN ('number', 'text'))
);

-- The ended runs by completion time, but for those that owe a parent their end (migration
-- 0102; they are in executions_end_owed): the janitor's batches, its remaining count, the
-- retention lag and the sampler's forced closes (functions/retention.sql, metrics.sql). The runs
-- kept for a parent's shard that is away, the oldest then, are not read by every batch; nor
-- are MIGRATED seals (migration 0108), which the janitor judges where their run lives: a seal
-- of a run still live there would be walked past by every batch, however old.
CREATE INDEX executions_retention
ON harvest.executions (completed_at)
WHERE status NOT IN ('RUNNING', 'MIGRATED') AND end_owed_to_shard IS NULL;

-- The MIGRATED seals by the time of their move: the janitor's page of seals moved before the
-- retention window (functions/retention.sql, list_expired_seals).
CREATE INDEX executions_seals
ON harvest.executions (completed_at, id)
WHERE status = 'MIGRATED';

-- The runs whose end a parent on another shard has not taken yet (migration 0101): few, and
-- only while a parent's pump is behind; an operator's release of the ends owed to a retired
-- shard, and retention status, count them here.
CREATE INDEX executions_end_owed
ON harvest.executions (end_owed_to_shard, completed_at)
WHERE end_owed_to_shard IS NOT NULL;

-- Non-terminal runs (paused ones too) by concurrency key: the supersede scan (one workflow type
-- and key, oldest first), and the janitor's probe of a key (any workflow: the key leads).
CREATE INDEX executions_live_concurrency_key
ON harvest.executions (concurrency_key, workflow_name, created_at)
WHERE status IN ('RUNNING', 'PAUSED') AND concurrency_key IS NOT NULL;

-- Live runs (paused ones too) by quota key: a quota'd start's count of its key's live runs and
-- the janitor's probe of a key, without reading the key's kept finished runs (migration 0088).
-- The status set is the one both read: a query's predicate must imply the index's.
CREATE INDEX executions_live_quota_key
ON harvest.executions (quota_key)
WHERE status IN ('RUNNING', 'PAUSED') AND quota_key IS NOT NULL;

-- A run's row update that a batch call (complete_activities, complete_workflow_tasks) held
-- back from one decision's append, to write with its batch's (harvest._update_held_rows,
-- functions/core.sql): the run, its last event id after the append, how many events it
-- added and their bytes, the decision's decided_through and wake_hold, and for a decision
-- that closed the run its status, output and failure (NULL status: the run goes on).
CREATE TYPE harvest.held_run_row AS (
    id uuid,
    last_event_id bigint,
    n integer,
    bytes bigint,
    decided_through bigint,
    wake_hold boolean,
    status text,
    output jsonb,
    failure jsonb
);

-- An activity task as the worker receives it (functions/claim.sql, harvest._worker_activity:
-- the activity keys of harvest._worker_task), as a row: a decision's handed activities are
-- carried as these until the call's answer, where each becomes JSON once, inside the
-- answer's own (docs/internals.md, "The worker's task row").
CREATE TYPE harvest.worker_activity_task AS (
    task_id bigint,
    kind text,
    execution_id uuid,
    workflow_name text,
    workflow_id text,
    queue text,
    seq integer,
    activity_name text,
    input jsonb,
    options jsonb,
    attempt integer,
    fencing_token bigint,
    heartbeat_details jsonb
);

-- What harvest._apply_decision (functions/decide.sql) answers: the decision's last event id,
-- the run's status after it and its handed activities (tasks in the worker's form, as rows); what it left to its batch caller (the deferred_ fields: its last append's events,
-- their last id and bytes, decided_through and wake_hold, its one handed activity's seq and
-- command, a close's status, output and failure; caps_pending, the history caps to check);
-- and the worker's queues when it read them (_hand_off_queues), for the batch's next
-- decisions. A named type, not OUT parameters: a call of a function with OUT parameters builds
-- its result's descriptor anew (docs/performance.md, "SQL path, ninth cut").
CREATE TYPE harvest.applied_decision AS (
    last_event_id bigint,
    execution_status text,
    handed harvest.worker_activity_task ARRAY,
    deferred_types text ARRAY,
    deferred_datas jsonb ARRAY,
    deferred_last bigint,
    deferred_hand_seq integer,
    deferred_hand jsonb,
    deferred_bytes bigint,
    deferred_through bigint,
    deferred_hold boolean,
    caps_pending boolean,
    deferred_status text,
    deferred_output jsonb,
    deferred_failure jsonb,
    worker_queues text ARRAY
);
