-- functions/worker_drain.sql: harvest.worker_drain_deadline.
BEGIN;
SELECT plan(4);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

SELECT harvest.register_worker('wd', ARRAY['q'], 'h', 1, 5);
SELECT results_eq($$SELECT drain_deadline, remaining_secs FROM harvest.worker_drain_deadline('wd')$$,
                  $$VALUES (NULL::timestamptz, NULL::double precision)$$,
                  'worker_drain_deadline(): no deadline, NULLs');
SELECT harvest.drain_worker('wd', '2030-01-01 00:00:30+00', 'test');
SELECT results_eq($$SELECT drain_deadline, remaining_secs FROM harvest.worker_drain_deadline('wd')$$,
                  $$VALUES ('2030-01-01 00:00:30+00'::timestamptz, 30::double precision)$$,
                  'the deadline and the seconds left by the database clock');
SET LOCAL harvest.fake_now = '2030-01-01 00:01:00+00';
SELECT is((SELECT remaining_secs FROM harvest.worker_drain_deadline('wd')), -30::double precision,
          'negative once the deadline has passed');
SELECT is_empty($$SELECT * FROM harvest.worker_drain_deadline('nobody')$$, 'an unknown worker: no row');

SELECT * FROM finish();
ROLLBACK;
