-- History size tracking for the hard caps: the running sum of the events' JSON
-- text bytes (harvest._event_bytes, maintained by _append_event).

ALTER TABLE harvest.executions
ADD COLUMN history_bytes bigint NOT NULL DEFAULT 0;
