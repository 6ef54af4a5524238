-- 0010: a run that fails at a history hard cap is recorded in the dead letters
-- (kind 'workflow', with the typed reason), and a run's own timeout is kept so a
-- continue-as-new successor gets the same one.

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

-- _continue_as_new gained the decider's through (to hand unseen signals on).
DROP FUNCTION IF EXISTS harvest._continue_as_new(harvest.executions, jsonb);
