-- History size tracking for the hard caps: the running sum of
-- pg_column_size(event_data) over a run's events (maintained by _append_event).

ALTER TABLE harvest.executions
ADD COLUMN history_bytes bigint NOT NULL DEFAULT 0;
