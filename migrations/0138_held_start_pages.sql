-- 0138: the held-back starts page by a keyset cursor (harvest.list_pending_starts: oldest first,
-- p_limit after p_after_created_at and p_after_id, with each start's input size): an index
-- answers the order, and one for a workflow's starts. The old signature goes here; the new one
-- is installed with the functions, after the migrations.
CREATE INDEX IF NOT EXISTS pending_starts_listed
ON harvest.pending_starts (created_at, id);
CREATE INDEX IF NOT EXISTS pending_starts_workflow_listed
ON harvest.pending_starts (workflow_name, created_at, id);
DROP FUNCTION IF EXISTS harvest.list_pending_starts(text);
