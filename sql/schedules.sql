-- Schedules (functions/schedules.sql, docs/schedules.md): a workflow (or a DAG,
-- kind 'dag') started on a cron or interval. Cron cannot be computed in PL/pgSQL,
-- so the scheduler (harvest/worker/scheduler.py) computes the slots in Python and
-- the SQL tick (harvest.fire_schedule) claims them: one transaction records the
-- firing, starts the run and stores the next slot, compared and set on revision.

-- One row per schedule. A slot is a UTC instant the spec names; the next one is
-- next_fire_at (NULL: not computed yet, the first slot after anchor_at), due at
-- next_due_at (the slot plus its jitter). revision moves on every change, so a
-- tick computed from an older row changes nothing.
CREATE TABLE harvest.schedules (
    id bigint GENERATED ALWAYS AS IDENTITY,
    name text NOT NULL,
    kind text NOT NULL DEFAULT 'workflow',
    workflow_name text NOT NULL,
    queue text NOT NULL DEFAULT 'default',
    input jsonb NOT NULL DEFAULT '[]'::jsonb,
    cron text,
    interval_secs bigint,
    timezone text NOT NULL DEFAULT 'UTC',
    max_active_runs integer NOT NULL DEFAULT 1,
    overlap text NOT NULL DEFAULT 'skip',
    catchup boolean NOT NULL DEFAULT false,
    catchup_window_secs bigint NOT NULL DEFAULT 60,
    jitter_secs double precision NOT NULL DEFAULT 0,
    paused boolean NOT NULL DEFAULT false,
    paused_note text,
    declared boolean NOT NULL DEFAULT false,
    anchor_at timestamptz NOT NULL,
    next_fire_at timestamptz,
    next_due_at timestamptz,
    last_slot_at timestamptz,
    missed_slots bigint NOT NULL DEFAULT 0,
    revision bigint NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    -- The specs a later change replaced (the latest 8, as _schedule_spec has them): a worker's
    -- declaration of one of them is an older deploy's and changes nothing (declare_schedules).
    superseded_specs jsonb NOT NULL DEFAULT '[]'::jsonb,
    CONSTRAINT schedules_pkey PRIMARY KEY (id),
    CONSTRAINT schedules_name_key UNIQUE (name),
    CONSTRAINT schedules_kind_check CHECK (kind IN ('workflow', 'dag')),
    CONSTRAINT schedules_spec_check CHECK ((cron IS NULL) <> (interval_secs IS NULL)),
    CONSTRAINT schedules_interval_secs_check CHECK (interval_secs IS NULL OR interval_secs >= 1),
    CONSTRAINT schedules_max_active_runs_check CHECK (max_active_runs >= 1),
    CONSTRAINT schedules_overlap_check CHECK (overlap IN (
        'skip', 'buffer_one', 'buffer_all', 'cancel_other', 'terminate_other', 'allow_all'
    )),
    CONSTRAINT schedules_catchup_window_secs_check CHECK (catchup_window_secs >= 1),
    CONSTRAINT schedules_jitter_secs_check CHECK (jitter_secs >= 0),
    CONSTRAINT schedules_input_array CHECK (jsonb_typeof(input) = 'array'),
    CONSTRAINT schedules_superseded_specs_array CHECK (jsonb_typeof(superseded_specs) = 'array')
);

-- The scheduler's read: unpaused schedules by due time (NULL first: to compute).
CREATE INDEX schedules_due ON harvest.schedules (next_due_at NULLS FIRST) WHERE NOT paused;

-- One row per slot a schedule fired, skipped or buffered: (schedule, slot) is
-- unique, so a slot starts at most one run, whoever ticks and however often.
-- origin says what produced it (the schedule's tick, a manual trigger, a
-- backfill); status is started, skipped (the overlap policy, with the reason),
-- buffered (waiting for a free run), or failed (the start raised: the reason).
CREATE TABLE harvest.schedule_firings (
    id bigint GENERATED ALWAYS AS IDENTITY,
    schedule_id bigint NOT NULL,
    slot_at timestamptz NOT NULL,
    origin text NOT NULL DEFAULT 'schedule',
    status text NOT NULL,
    reason text,
    workflow_id text NOT NULL,
    execution_id uuid,
    recorded_at timestamptz NOT NULL,
    started_at timestamptz,
    -- The W3C traceparent of the scheduler's harvest.schedule.fire span that recorded the
    -- firing (tracing on): its run, started now or later from the buffer, continues it.
    traceparent text,
    CONSTRAINT schedule_firings_pkey PRIMARY KEY (id),
    CONSTRAINT schedule_firings_slot_key UNIQUE (schedule_id, slot_at),
    CONSTRAINT schedule_firings_schedule_fkey FOREIGN KEY (schedule_id)
    REFERENCES harvest.schedules (id) ON DELETE CASCADE,
    CONSTRAINT schedule_firings_origin_check CHECK (origin IN ('schedule', 'trigger', 'backfill')),
    CONSTRAINT schedule_firings_status_check CHECK (status IN ('started', 'skipped', 'buffered', 'failed'))
);

-- The buffered firings waiting for a free run, oldest slot first.
CREATE INDEX schedule_firings_buffered ON harvest.schedule_firings (schedule_id, slot_at)
WHERE status = 'buffered';

-- The started firings by their run's workflow id: a rebalance asks it of each run it may move
-- (functions/rebalance.sql, the schedule_run blocker; migration 0105).
CREATE INDEX schedule_firings_started ON harvest.schedule_firings (workflow_id)
WHERE status = 'started';

-- Slots no run was started for because the scheduler was not there in time: one
-- row per run of consecutive missed slots found by one tick (first and last slot,
-- how many), with the reason (catchup_off, outside_catchup_window).
CREATE TABLE harvest.schedule_misses (
    id bigint GENERATED ALWAYS AS IDENTITY,
    schedule_id bigint NOT NULL,
    first_slot_at timestamptz NOT NULL,
    last_slot_at timestamptz NOT NULL,
    slots integer NOT NULL,
    reason text NOT NULL,
    recorded_at timestamptz NOT NULL,
    CONSTRAINT schedule_misses_pkey PRIMARY KEY (id),
    CONSTRAINT schedule_misses_schedule_fkey FOREIGN KEY (schedule_id)
    REFERENCES harvest.schedules (id) ON DELETE CASCADE,
    CONSTRAINT schedule_misses_slots_check CHECK (slots >= 1),
    CONSTRAINT schedule_misses_reason_check CHECK (reason IN ('catchup_off', 'outside_catchup_window'))
);

CREATE INDEX schedule_misses_schedule ON harvest.schedule_misses (schedule_id, recorded_at);
