-- 0111: a schedule keeps the specs a later change replaced (harvest.schedules.superseded_specs,
-- functions/schedules.sql): in a rolling deploy an old worker restarting declared its App's spec
-- over the new one (cron, interval, arguments), and the next new worker's boot put it back. A
-- declaration of a superseded spec now changes nothing; an operator's update_schedule can put one back.
ALTER TABLE harvest.schedules ADD COLUMN IF NOT EXISTS superseded_specs jsonb NOT NULL DEFAULT '[]'::jsonb;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'schedules_superseded_specs_array'
                   AND conrelid = 'harvest.schedules'::regclass) THEN
        ALTER TABLE harvest.schedules ADD CONSTRAINT schedules_superseded_specs_array
        CHECK (jsonb_typeof(superseded_specs) = 'array');
    END IF;
END;
$$;
