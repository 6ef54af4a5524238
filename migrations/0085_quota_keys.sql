-- 0085: the quota keys' rows (sql/flow.sql). A quota'd start updates its key's row before
-- it counts the key's usage (functions/flow_quotas.sql): a start in a REPEATABLE READ or
-- SERIALIZABLE transaction counted with a snapshot that could predate another start of the
-- key, and exceeded the quota. The row lock replaces the advisory lock that serialised them.
CREATE TABLE harvest.quota_keys (
    quota_key text NOT NULL,
    admitted bigint NOT NULL DEFAULT 0,
    CONSTRAINT quota_keys_pkey PRIMARY KEY (quota_key)
);
