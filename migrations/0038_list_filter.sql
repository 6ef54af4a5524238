-- 0038: the workflow list's filter expression (functions/executions.sql, docs/http-api.md): an OR
-- finds each side through the search attributes' GIN index or workflow_name.

CREATE INDEX executions_search
ON harvest.executions USING gin (search_attributes);

-- list_executions and count_executions take p_filter: drop the old signatures so
-- functions/executions.sql creates the new ones, not overloads.
DROP FUNCTION IF EXISTS harvest.list_executions(text, text, text[], timestamptz, timestamptz, integer, text, text);
DROP FUNCTION IF EXISTS harvest.count_executions(text, text, text, text[], timestamptz, timestamptz);
