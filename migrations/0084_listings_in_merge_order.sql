-- 0084: each shard lists in the order the shards' rows are merged in (docs/sharding.md,
-- "Fan-out reads"). The audit log is read newest first by (at, id), not by id: this index
-- serves it. harvest.list_dead_letters orders by (failed_at, id) and pages after a position
-- (p_before_failed_at, p_before_id), and harvest.list_dag_runs filters by status before its
-- limit (p_status); the old signatures go here, the new ones are installed with the
-- functions, after the migrations.
CREATE INDEX IF NOT EXISTS audit_log_at
ON harvest.audit_log (at DESC, id DESC);
DROP FUNCTION IF EXISTS harvest.list_dead_letters(integer, text, text, bigint);
DROP FUNCTION IF EXISTS harvest.list_dag_runs(text, integer);
