-- 0019: the audit log records the face an operator action came through (api, cli
-- or ui, from the session's application_name; see harvest._audit_source). Rows
-- written before this migration have no source (NULL).

ALTER TABLE harvest.audit_log
ADD COLUMN source text,
ADD CONSTRAINT audit_log_source_known CHECK (source IN ('api', 'cli', 'ui'));
