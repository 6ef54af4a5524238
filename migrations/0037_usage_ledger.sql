-- 0037: the usage report as the sharding guide specifies it (functions/flow_usage.sql,
-- docs/flow-control.md "Usage"): the agent cost ledger (harvest.llm_calls) that its llm_* fields
-- sum, and count_usage's new shape (activity_compute_seconds, the llm_* fields, and no
-- caller's window parameter: the ceiling is the server's alone), which CREATE OR REPLACE cannot
-- make of the old one. And the index retention uses to delete offloaded payloads no run owns
-- (functions/retention.sql).

DROP FUNCTION IF EXISTS harvest.count_usage(timestamptz, timestamptz, text, interval);

-- The agent cost ledger: one row per model call an activity reported.
CREATE TABLE harvest.llm_calls (
    id bigint GENERATED ALWAYS AS IDENTITY,
    execution_id uuid NOT NULL,
    seq integer,
    attempt integer,
    model text NOT NULL,
    input_tokens bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    cost_usd_micros bigint,
    latency_ms bigint,
    recorded_at timestamptz NOT NULL,
    CONSTRAINT llm_calls_pkey PRIMARY KEY (id),
    CONSTRAINT llm_calls_counts_check CHECK (
        input_tokens >= 0 AND output_tokens >= 0
        AND (cost_usd_micros IS NULL OR cost_usd_micros >= 0)
        AND (latency_ms IS NULL OR latency_ms >= 0)
    ),
    CONSTRAINT llm_calls_execution_fkey FOREIGN KEY (execution_id)
    REFERENCES harvest.executions (id) ON DELETE CASCADE
);

CREATE INDEX llm_calls_execution
ON harvest.llm_calls (execution_id, recorded_at);

-- Run-less offloaded payloads, oldest first, for retention.
CREATE INDEX payloads_runless
ON harvest.payloads (created_at)
WHERE execution_id IS NULL;
