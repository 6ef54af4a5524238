-- 0035: the shared test clock. A session whose harvest.fake_now is 'shared' reads
-- now() plus engine_settings.test_clock_offset (while the owner-only switch
-- test_clock_allowed is on), so the test kit's time skipping moves the clock of
-- every session of a test database with one owner-only UPDATE (docs/testing.md,
-- docs/security.md "The clock"). Like the rest of engine_settings, no harvest role
-- may write it.

ALTER TABLE harvest.engine_settings
ADD COLUMN test_clock_offset interval NOT NULL DEFAULT interval '0';
