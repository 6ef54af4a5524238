-- 0082: the flow keys' rows (sql/flow.sql). A quota'd or cancel_running start updates its
-- key's row first (functions/flow_quotas.sql, flow_concurrency.sql): a start in a REPEATABLE
-- READ or SERIALIZABLE transaction counted the key's runs with a snapshot that could predate
-- another start of the key, and exceeded the quota or the concurrency limit. For quotas the
-- row lock replaces the advisory lock that serialised them.
CREATE TABLE IF NOT EXISTS harvest.flow_keys (
    kind text NOT NULL,
    key text NOT NULL,
    admitted bigint NOT NULL DEFAULT 0,
    CONSTRAINT flow_keys_pkey PRIMARY KEY (kind, key),
    CONSTRAINT flow_keys_kind_check CHECK (kind IN ('quota', 'concurrency'))
);
