-- The agent cost ledger (docs/flow-control.md, "Usage"): one row per model call an activity
-- reported (ctx.record_llm_call, harvest.record_llm_call), what the usage report sums into
-- llm_calls, llm_input_tokens, llm_output_tokens, llm_cost_usd_micros, llm_unpriced_calls and
-- llm_latency_ms by recorded_at. cost_usd_micros is millionths of a US dollar, NULL for a call
-- with no price (counted as unpriced). The rows go with their run when retention deletes it.
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
