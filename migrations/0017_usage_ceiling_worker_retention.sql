-- 0017: the usage report's window ceiling moves to the owner-only engine settings
-- (a caller may ask for a narrower window, never a wider one), and retention gains
-- a rule for the worker registry: stopped and long-stale worker rows are deleted
-- once their last heartbeat is older than worker_max_age (NULL keeps them all).

ALTER TABLE harvest.engine_settings
ADD COLUMN usage_max_window interval NOT NULL DEFAULT interval '90 days',
ADD CONSTRAINT engine_settings_usage_max_window_positive CHECK (usage_max_window > interval '0');

ALTER TABLE harvest.retention_config
ADD COLUMN worker_max_age interval DEFAULT interval '7 days',
ADD CONSTRAINT retention_config_worker_max_age_check
CHECK (worker_max_age IS NULL OR worker_max_age > interval '0');
