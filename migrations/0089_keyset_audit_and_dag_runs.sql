-- 0089: the audit log and a DAG's runs page by keyset, as the dead letters and the workflow
-- list do (a cursor over HTTP and in the CLI): harvest.list_audit_log takes a position
-- (p_before_at, p_before_id) and harvest.list_dag_runs one (p_before_created_at,
-- p_before_id). The old signatures go here, the new ones are installed with the functions,
-- after the migrations. The orders they page in are served already: audit_log_at (0084),
-- and executions_name_created.
DROP FUNCTION IF EXISTS harvest.list_audit_log(integer, text);
DROP FUNCTION IF EXISTS harvest.list_dag_runs(text, integer, text);
