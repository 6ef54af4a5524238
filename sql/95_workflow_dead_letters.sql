-- Dead letters of kind 'workflow': a run that failed at a history hard cap, kept
-- with its typed reason (it cannot be replayed, only inspected and discarded).
-- And each run's own timeout, which a continue-as-new successor inherits.

ALTER TABLE harvest.dead_letters
ALTER COLUMN seq DROP NOT NULL,
ALTER COLUMN activity_name DROP NOT NULL,
ADD COLUMN kind text NOT NULL DEFAULT 'activity',
ADD CONSTRAINT dead_letters_kind_check CHECK (kind IN ('activity', 'workflow')),
ADD CONSTRAINT dead_letters_activity_fields CHECK (
    kind = 'workflow' OR (seq IS NOT NULL AND activity_name IS NOT NULL)
);

ALTER TABLE harvest.executions
ADD COLUMN run_timeout_secs double precision;
