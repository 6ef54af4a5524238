-- functions/schedules.sql: create_schedule, update_schedule, delete_schedule,
-- pause_schedule, resume_schedule, trigger_schedule, backfill_schedule,
-- list_schedules, get_schedule, count_schedule_misses, declare_schedules,
-- list_due_schedules, fire_schedule (the tick: revision check, SKIP LOCKED,
-- catch-up window, overlap policies, the (schedule, slot) uniqueness) and
-- start_buffered_firings. The helpers run inside them: harvest._check_schedule_spec
-- (the bad fields), harvest._put_schedule and harvest._schedule_spec (create, update,
-- declare), harvest._schedule_audit (what their audit rows keep), harvest._supersede_spec (a declaration of a replaced spec), harvest._schedule_json, harvest._lock_schedule (HR002), harvest._fire_slot,
-- harvest._start_firing, harvest._firing_start, harvest._start_buffered, harvest._schedule_active_runs,
-- harvest._lock_schedule_dag (a DAG schedule's firing holds the DAG's row), harvest._firing_live,
-- harvest._firing_workflow_names,
-- harvest._firing_json and harvest._prune_schedule_history (every tick that fired),
-- harvest._check_schedule_target (a create's or an update's workflow or DAG not registered).
BEGIN;
SELECT plan(131);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- The revision of a schedule, and a tick of it (as the scheduler makes one).
CREATE FUNCTION pg_temp.rev(p_name text) RETURNS bigint LANGUAGE sql AS $fn$
    SELECT revision FROM harvest.schedules WHERE name = p_name;
$fn$;
CREATE FUNCTION pg_temp.tick(p_name text, p_slots timestamptz[], p_next timestamptz) RETURNS jsonb
LANGUAGE sql AS $fn$
    SELECT harvest.fire_schedule(s.id, s.revision, p_slots, p_next, p_next) FROM harvest.schedules AS s
    WHERE s.name = p_name;
$fn$;
CREATE FUNCTION pg_temp.firing_statuses(p_name text) RETURNS text LANGUAGE sql AS $fn$
    SELECT string_agg(to_char(f.slot_at, 'HH24:MI') || '=' || f.status || coalesce('/' || f.reason, ''), ' '
                      ORDER BY f.slot_at)
    FROM harvest.schedule_firings AS f JOIN harvest.schedules AS s ON s.id = f.schedule_id WHERE s.name = p_name;
$fn$;
-- End the live runs of a schedule (as a worker completing them would).
CREATE FUNCTION pg_temp.finish_runs(p_name text) RETURNS void LANGUAGE sql AS $fn$
    SELECT harvest.terminate_workflow(e.id, 'test') FROM harvest.executions AS e
    WHERE e.workflow_id LIKE 'sched:' || p_name || ':%' AND e.status = 'RUNNING';
$fn$;

-- ---------------------------------------------------------------- create_schedule
SELECT is(harvest.create_schedule('daily', 'report_wf', p_cron => '0 3 * * *', p_timezone => 'Europe/Paris',
                                  p_input => '[{"region": "eu"}]') ->> 'timezone',
          'Europe/Paris', 'create_schedule() stores a cron schedule in its zone');
SELECT results_eq(
    $$SELECT kind, overlap, max_active_runs, catchup, catchup_window_secs, paused, next_fire_at IS NULL, anchor_at
      FROM harvest.schedules WHERE name = 'daily'$$,
    $$VALUES ('workflow'::text, 'skip'::text, 1, false, 60::bigint, false, true,
              '2030-01-01 00:00:00+00'::timestamptz)$$,
    'the defaults: kind workflow, overlap skip, one active run, catch-up off (60 s grace), next slot to compute');
SELECT throws_ok($$SELECT harvest.create_schedule('daily', 'report_wf', p_cron => '* * * * *')$$, 'HR014',
                 'schedule daily already exists', 'a taken name is HR014');
SELECT throws_ok($$SELECT harvest.create_schedule('bad_tz', 'wf', p_cron => '* * * * *', p_timezone => 'Mars/Base')$$,
                 'HR001', 'schedule bad_tz: timezone ''Mars/Base'' is unknown', 'an unknown zone is HR001 naming it');
-- What Postgres reads but the scheduler (zoneinfo, datetime) cannot: HR001 naming the field.
SELECT throws_ok($$SELECT harvest.create_schedule('lower_tz', 'wf', p_cron => '* * * * *', p_timezone => 'europe/paris')$$,
                 'HR001', 'schedule lower_tz: timezone ''europe/paris'' is unknown',
                 'a zone name in another case (or an abbreviation, a POSIX rule) is HR001');
SELECT throws_ok($$SELECT harvest.create_schedule('nan', 'wf', p_interval_secs => 60, p_jitter_secs => 'NaN')$$,
                 'HR001', 'schedule nan: jitter_secs must be a number from 0 to 3155760000, got "NaN"',
                 'a jitter of NaN is HR001');
SELECT throws_ok($$SELECT harvest.create_schedule('w', 'wf', p_interval_secs => 60,
                                                  p_catchup_window_secs => 100000000000)$$,
                 'HR001', NULL, 'a catch-up window past 100 years is HR001');
SELECT throws_ok($$SELECT harvest.create_schedule('both', 'wf', p_cron => '* * * * *', p_interval_secs => 60)$$,
                 'HR001', 'schedule both: give exactly one of cron and interval_secs', 'cron and interval: HR001');
SELECT throws_ok($$SELECT harvest.create_schedule('ov', 'wf', p_interval_secs => 60, p_overlap => 'stack')$$,
                 'HR001', NULL, 'an unknown overlap policy is HR001');
SELECT throws_ok($$SELECT harvest.create_schedule('k', 'wf', p_interval_secs => 60, p_kind => 'cron')$$,
                 'HR001', NULL, 'a kind other than workflow or dag is HR001');
SELECT is((harvest.create_schedule('every', 'tick_wf', p_interval_secs => 900, p_catchup => true)
           ->> 'catchup_window_secs')::bigint, 31536000::bigint,
          'catch-up on without a window replays up to a year');
SELECT is((SELECT count(*)::integer FROM harvest.audit_log WHERE operation = 'schedule.create'), 2,
          'create_schedule() is audited');
-- harvest._schedule_audit: a schedule's input is a payload (plain: it is stored as declared), so
-- its audit rows, which outlive the schedule, keep its size only.
SELECT is(harvest.create_schedule('pii', 'tick_wf', p_interval_secs => 60, p_input => '[{"ssn": "078-05-1120"}]')
          -> 'input', '[{"ssn": "078-05-1120"}]'::jsonb, 'create_schedule() stores the input as given');
SELECT is((SELECT details -> 'input' FROM harvest.audit_log WHERE operation = 'schedule.create' AND target = 'pii'),
          '{"redacted": true, "bytes": 24}'::jsonb, 'its schedule.create audit row keeps the input''s size only');
SELECT is(harvest.update_schedule('pii', '{"input": [{"ssn": "219-09-9999"}]}') -> 'input',
          '[{"ssn": "219-09-9999"}]'::jsonb, 'update_schedule() stores the new input');
SELECT is((SELECT details -> 'changes' FROM harvest.audit_log WHERE operation = 'schedule.update' AND target = 'pii'),
          '{"input": {"redacted": true, "bytes": 24}}'::jsonb, 'its schedule.update audit row keeps the size only');
SELECT is(harvest._schedule_audit('{"input": null, "cron": "* * * * *"}'),
          '{"input": null, "cron": "* * * * *"}'::jsonb, '_schedule_audit() leaves a null input and the rest as they are');
SELECT is((SELECT count(*)::integer FROM harvest.audit_log WHERE details::text LIKE '%-9999%' OR details::text LIKE '%-1120%'),
          0, 'no audit row holds the input');
DELETE FROM harvest.schedules WHERE name = 'pii';
DELETE FROM harvest.audit_log WHERE target = 'pii';
-- No queue given: the queue the workers registered the workflow on (start.sql, _start_queue), once.
SELECT is((SELECT queue FROM harvest.schedules WHERE name = 'daily'), 'default',
          'a workflow registered nowhere: its schedule fires on default');
SELECT harvest.register_workflows(ARRAY['sched_billing_q'], ARRAY['sched_billing_wf']);
SELECT is(harvest.create_schedule('sched_billing', 'sched_billing_wf', p_interval_secs => 3600) ->> 'queue',
          'sched_billing_q', 'create_schedule() without p_queue takes the one queue the workflow is registered on');
-- harvest._check_schedule_target: a workflow its queue's workers did not register, or a DAG no
-- worker registered, is refused (HR010) unless p_allow_unregistered; a queue with nothing
-- registered cannot be checked (as a start).
SELECT throws_ok($$SELECT harvest.create_schedule('sched_typo', 'sched_billng_wf', p_interval_secs => 60,
                                                  p_queue => 'sched_billing_q')$$, 'HR010',
                 'schedule sched_typo: workflow "sched_billng_wf" is not registered on queue "sched_billing_q" '
                 '(registered there: sched_billing_wf)',
                 'create_schedule() refuses a workflow its queue''s workers did not register (HR010), naming it');
SELECT is(harvest.create_schedule('sched_typo', 'sched_billng_wf', p_interval_secs => 60, p_queue => 'sched_billing_q',
                                  p_allow_unregistered => true) ->> 'workflow_name', 'sched_billng_wf',
          'create_schedule(p_allow_unregistered => true) keeps it');
SELECT throws_ok($$SELECT harvest.update_schedule('every', '{"queue": "sched_billing_q"}')$$, 'HR010', NULL,
                 'update_schedule() checks a new queue (or workflow, or kind) as a create does');
SELECT throws_ok($$SELECT harvest.create_schedule('sched_not_dag', 'sched_billing_wf', p_interval_secs => 60,
                                                  p_kind => 'dag')$$, 'HR010', NULL,
                 'a schedule of kind dag names a DAG a worker registered');
SELECT lives_ok($$SELECT harvest._check_schedule_target(s) FROM harvest.schedules AS s WHERE s.name = 'daily'$$,
                '_check_schedule_target() passes a workflow on a queue no worker registered anything on');
DELETE FROM harvest.schedules WHERE name IN ('sched_billing', 'sched_typo');
DELETE FROM harvest.audit_log WHERE operation = 'schedule.create' AND target IN ('sched_billing', 'sched_typo');

-- ---------------------------------------------------------------- list_due_schedules
SELECT results_eq($$SELECT name, next_fire_at, now FROM harvest.list_due_schedules(10) ORDER BY name$$,
                  $$VALUES ('daily'::text, NULL::timestamptz, '2030-01-01 00:00:00+00'::timestamptz),
                           ('every', NULL, '2030-01-01 00:00:00+00')$$,
                  'list_due_schedules() lists the schedules with no computed slot, with the engine clock');

-- ---------------------------------------------------------------- fire_schedule
SELECT is(pg_temp.tick('every', '{}', '2030-01-01 00:15:00+00') ->> 'outcome', 'fired',
          'fire_schedule() stores the first slot the scheduler computed');
SELECT is((SELECT count(*)::integer FROM harvest.list_due_schedules(10) WHERE name = 'every'), 0,
          'a schedule whose next slot is in the future is not due');
SELECT is(harvest.fire_schedule((SELECT id FROM harvest.schedules WHERE name = 'every'), 1, '{}',
                                '2030-01-01 00:15:00+00', '2030-01-01 00:15:00+00') ->> 'outcome', 'stale',
          'a tick computed from an older revision changes nothing (stale)');
SET LOCAL harvest.fake_now = '2030-01-01 00:15:02+00';
SELECT is((SELECT count(*)::integer FROM harvest.list_due_schedules(10) WHERE name = 'every'), 1,
          'the slot is due at its time');
SELECT is(pg_temp.tick('every', '{2030-01-01 00:15:00+00}', '2030-01-01 00:30:00+00') -> 'firings' -> 0 ->> 'status',
          'started', 'a due slot is started');
SELECT results_eq(
    $$SELECT e.workflow_name, e.workflow_id, e.status FROM harvest.executions AS e
      JOIN harvest.schedule_firings AS f ON f.execution_id = e.id$$,
    $$VALUES ('tick_wf'::text, 'sched:every:' || extract(EPOCH FROM '2030-01-01 00:15:00+00'::timestamptz)::bigint,
              'RUNNING'::text)$$,
    'the run''s workflow id is sched:{name}:{unix seconds of the slot}, in the same transaction as the firing');
SELECT results_eq($$SELECT next_fire_at, last_slot_at FROM harvest.schedules WHERE name = 'every'$$,
                  $$VALUES ('2030-01-01 00:30:00+00'::timestamptz, '2030-01-01 00:15:00+00'::timestamptz)$$,
                  'the tick stores the next slot and the last one');
SELECT throws_ok($$SELECT pg_temp.tick('every', '{2030-01-01 00:15:00+00}', '2030-01-01 00:45:00+00')$$, 'HR001',
                 NULL, 'a slot at or before the last one is refused (a doubled tick cannot fire it again)');
SELECT throws_ok($$SELECT pg_temp.tick('every', '{2030-01-01 00:30:00+00}', '2030-01-01 00:45:00+00')$$, 'HR001',
                 NULL, 'a slot in the future is refused');
SELECT is((SELECT harvest._fire_slot(s, '2030-01-01 00:15:00+00', 'schedule', 'allow_all') ->> 'duplicate'
           FROM harvest.schedules AS s WHERE s.name = 'every'), 'true',
          'the (schedule, slot) firing is unique: firing a recorded slot again starts nothing');
SELECT is((SELECT count(*)::integer FROM harvest.executions WHERE workflow_id LIKE 'sched:every:%'), 1,
          'one run for the slot');
-- The scheduler's fire span: kept on the firing, continued by its run (docs/observability.md).
CREATE TEMP TABLE traced_sched ON COMMIT DROP AS
SELECT (harvest.create_schedule('traced', 'tick_wf', p_interval_secs => 900) ->> 'name') AS name;
UPDATE harvest.schedules SET next_fire_at = '2030-01-01 00:15:00+00', next_due_at = '2030-01-01 00:15:00+00'
WHERE name = 'traced';
SELECT throws_ok($$SELECT harvest.fire_schedule(s.id, s.revision, '{2030-01-01 00:15:00+00}',
                       '2030-01-01 00:30:00+00', '2030-01-01 00:30:00+00', p_traceparent => 'nope')
                   FROM harvest.schedules AS s WHERE s.name = 'traced'$$,
                 'HR001', NULL, 'fire_schedule() refuses a malformed traceparent');
SELECT is((SELECT harvest.fire_schedule(s.id, s.revision, '{2030-01-01 00:15:00+00}', '2030-01-01 00:30:00+00',
                  '2030-01-01 00:30:00+00', p_traceparent => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')
                  -> 'firings' -> 0 ->> 'status'
           FROM harvest.schedules AS s WHERE s.name = 'traced'), 'started', 'a traced tick fires the slot');
SELECT results_eq(
    $$SELECT f.traceparent, ev.event_data ->> 'traceparent' FROM harvest.schedule_firings AS f
      JOIN harvest.schedules AS s ON s.id = f.schedule_id AND s.name = 'traced'
      JOIN harvest.events AS ev ON ev.execution_id = f.execution_id AND ev.event_type = 'WorkflowStarted'$$,
    $$VALUES ('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'::text,
              '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'::text)$$,
    'the firing keeps the fire span and its run''s WorkflowStarted carries it');
SELECT pg_temp.finish_runs('traced');
DELETE FROM harvest.schedules WHERE name = 'traced';

-- A second session holding the row makes the tick answer busy (SKIP LOCKED); one
-- transaction cannot hold a lock against itself, so tests/integration/test_schedules.py
-- races real sessions; here the clause is checked.
SELECT ok(pg_get_functiondef('harvest.fire_schedule'::regproc) ~ 'FOR UPDATE SKIP LOCKED',
          'fire_schedule() locks the schedule with SKIP LOCKED (a concurrent tick answers busy)');

-- Catch-up off: 3 slots were missed while no scheduler ran; only the one inside the
-- 60 s grace fires, the older ones are recorded as missed with the reason.
SET LOCAL harvest.fake_now = '2030-01-01 03:00:30+00';
SELECT harvest.create_schedule('hourly', 'tick_wf', p_interval_secs => 3600);
UPDATE harvest.schedules SET next_fire_at = '2030-01-01 01:00:00+00', next_due_at = '2030-01-01 01:00:00+00'
WHERE name = 'hourly';
SELECT is(pg_temp.tick('hourly', '{2030-01-01 01:00:00+00, 2030-01-01 02:00:00+00, 2030-01-01 03:00:00+00}',
                       '2030-01-01 04:00:00+00') ->> 'missed', '2',
          'catch-up off: slots older than the grace are missed');
SELECT is(pg_temp.firing_statuses('hourly'), '03:00=started', 'only the slot inside the grace fired');
SELECT results_eq($$SELECT first_slot_at, last_slot_at, slots, reason FROM harvest.schedule_misses$$,
                  $$VALUES ('2030-01-01 01:00:00+00'::timestamptz, '2030-01-01 02:00:00+00'::timestamptz, 2,
                            'catchup_off'::text)$$,
                  'the missed slots are one miss row with their range, count and reason');
-- Catch-up on with a 2 h window: the older slots replay (buffered behind the live run).
SELECT harvest.update_schedule('hourly', '{"catchup": true, "catchup_window_secs": 7200, "overlap": "buffer_all"}');
SELECT pg_temp.finish_runs('hourly');
SET LOCAL harvest.fake_now = '2030-01-01 07:00:00+00';
SELECT is(pg_temp.tick('hourly', '{2030-01-01 04:00:00+00, 2030-01-01 05:00:00+00, 2030-01-01 06:00:00+00, 2030-01-01 07:00:00+00}',
                       '2030-01-01 08:00:00+00') ->> 'missed', '1',
          'catch-up on: a slot older than the window is missed');
SELECT is(pg_temp.firing_statuses('hourly'),
          '03:00=started 05:00=started 06:00=buffered 07:00=buffered',
          'the slots inside the window fire in order: one runs, the others wait (buffer_all)');
SELECT is((SELECT reason FROM harvest.schedule_misses ORDER BY id DESC LIMIT 1), 'outside_catchup_window',
          'the reason of a miss with catch-up on');

-- ---------------------------------------------------------------- start_buffered_firings
SELECT is(harvest.start_buffered_firings(10), 0, 'start_buffered_firings() waits while the run is live');
SELECT pg_temp.finish_runs('hourly');
SELECT is(harvest.start_buffered_firings(10), 1, 'a run ended: the oldest buffered firing starts');
SELECT is(pg_temp.firing_statuses('hourly'),
          '03:00=started 05:00=started 06:00=started 07:00=buffered', 'oldest first');

-- ---------------------------------------------------------------- overlap policies
SET LOCAL harvest.fake_now = '2030-01-02 00:00:00+00';
SELECT harvest.create_schedule('ov_' || p, 'ov_wf', p_interval_secs => 60, p_overlap => p,
                              p_catchup_window_secs => 600)
FROM unnest(ARRAY['skip', 'buffer_one', 'buffer_all', 'cancel_other', 'terminate_other', 'allow_all']) AS p;
UPDATE harvest.schedules SET next_fire_at = '2030-01-02 00:00:00+00', next_due_at = '2030-01-02 00:00:00+00'
WHERE name LIKE 'ov\_%';
SET LOCAL harvest.fake_now = '2030-01-02 00:02:00+00';
SELECT pg_temp.tick(name, '{2030-01-02 00:00:00+00, 2030-01-02 00:01:00+00, 2030-01-02 00:02:00+00}',
                    '2030-01-02 00:03:00+00')
FROM harvest.schedules WHERE name LIKE 'ov\_%';
SELECT is(pg_temp.firing_statuses('ov_skip'), '00:00=started 00:01=skipped/max_active_runs 00:02=skipped/max_active_runs',
          'skip: a slot is skipped while max_active_runs runs are live');
SELECT is(pg_temp.firing_statuses('ov_buffer_one'), '00:00=started 00:01=buffered 00:02=skipped/buffer_full',
          'buffer_one: one slot waits, later ones are skipped');
SELECT is(pg_temp.firing_statuses('ov_buffer_all'), '00:00=started 00:01=buffered 00:02=buffered',
          'buffer_all: every slot waits');
SELECT is(pg_temp.firing_statuses('ov_cancel_other'), '00:00=started 00:01=skipped/superseded 00:02=buffered',
          'cancel_other: the live run is asked to cancel, the newest slot waits for it');
SELECT is((SELECT bool_and(cancel_requested) FROM harvest.executions WHERE workflow_id LIKE 'sched:ov_cancel_other:%'),
          true, 'cancel_other: the live run has a cancel request');
SELECT is(pg_temp.firing_statuses('ov_terminate_other'), '00:00=started 00:01=started 00:02=started',
          'terminate_other: each slot terminates the live run and starts');
SELECT is((SELECT string_agg(status, ',' ORDER BY workflow_id) FROM harvest.executions
           WHERE workflow_id LIKE 'sched:ov_terminate_other:%'), 'TERMINATED,TERMINATED,RUNNING',
          'terminate_other: only the newest run is live');
SELECT is(pg_temp.firing_statuses('ov_allow_all'), '00:00=started 00:01=started 00:02=started',
          'allow_all: every slot starts');

-- A schedule pointed at another workflow: the runs it started under the old name still count
-- (harvest._firing_workflow_names), for max_active_runs, cancel_other and get_schedule.
SELECT harvest.create_schedule('rn_' || p, 'rn_old_wf', p_interval_secs => 60, p_overlap => p,
                              p_catchup_window_secs => 600)
FROM unnest(ARRAY['skip', 'cancel_other']) AS p;
UPDATE harvest.schedules SET next_fire_at = '2030-01-02 00:00:00+00', next_due_at = '2030-01-02 00:00:00+00'
WHERE name LIKE 'rn\_%';
SELECT pg_temp.tick(name, '{2030-01-02 00:00:00+00}', '2030-01-02 00:01:00+00')
FROM harvest.schedules WHERE name LIKE 'rn\_%';
SELECT harvest.update_schedule(name, '{"workflow_name": "rn_new_wf"}') FROM harvest.schedules WHERE name LIKE 'rn\_%';
SELECT is(harvest._firing_workflow_names(s, f), ARRAY['rn_new_wf', 'rn_old_wf'],
          '_firing_workflow_names(): the schedule''s workflow and the one its run was started under')
FROM harvest.schedules AS s JOIN harvest.schedule_firings AS f ON f.schedule_id = s.id WHERE s.name = 'rn_skip';
SELECT is((harvest.get_schedule('rn_skip') -> 'firings' -> 0 ->> 'run_status'), 'RUNNING',
          'get_schedule(): a firing''s run started under the old name shows its status');
SELECT pg_temp.tick(name, '{2030-01-02 00:01:00+00}', '2030-01-02 00:02:00+00')
FROM harvest.schedules WHERE name LIKE 'rn\_%';
SELECT is(pg_temp.firing_statuses('rn_skip'), '00:00=started 00:01=skipped/max_active_runs',
          'a run of the old workflow name still counts against max_active_runs');
SELECT is((harvest.get_schedule('rn_skip') ->> 'active_runs')::integer, 1, 'and in active_runs');
SELECT is((SELECT bool_and(cancel_requested) FROM harvest.executions WHERE workflow_id LIKE 'sched:rn_cancel_other:%'),
          true, 'cancel_other: a live run of the old workflow name is asked to cancel');

-- ---------------------------------------------------------------- trigger_schedule
SET LOCAL harvest.fake_now = '2030-01-02 00:02:30+00';
SELECT is(harvest.trigger_schedule('ov_allow_all') ->> 'origin', 'trigger', 'trigger_schedule() fires now');
SELECT is(harvest.trigger_schedule('ov_allow_all') ->> 'duplicate', 'true',
          'a second trigger in the same second answers the first firing');
SELECT is(harvest.trigger_schedule('ov_skip') ->> 'status', 'skipped',
          'a trigger follows the overlap policy');
SELECT is(harvest.trigger_schedule('ov_buffer_all', 'allow_all') ->> 'status', 'started',
          'p_overlap overrides it');
SELECT throws_ok($$SELECT harvest.trigger_schedule('nope')$$, 'HR002', NULL, 'an unknown schedule is HR002');

-- ---------------------------------------------------------------- backfill_schedule
SELECT is(harvest.backfill_schedule('ov_allow_all',
                                    '{2030-01-01 23:00:00+00, 2030-01-01 23:01:00+00, 2030-01-02 00:00:00+00}',
                                    'allow_all'),
          '{"failed": 0, "skipped": 0, "started": 2, "buffered": 0, "duplicate": 1}'::jsonb,
          'backfill_schedule() fires past slots; a slot already fired is not fired again');
SELECT harvest.create_schedule(p_name => 'bf_gone', p_workflow_name => 'bf_gone_wf', p_interval_secs => 3600,
                               p_queue => 'sched_billing_q', p_allow_unregistered => true);
SELECT is((SELECT jsonb_build_object(
               'failed', r -> 'failed',
               'slots', (SELECT jsonb_agg((f ->> 'slot_at')::timestamptz = t ORDER BY t)
                         FROM jsonb_array_elements(r -> 'failures') WITH ORDINALITY AS x (f, i)
                         JOIN unnest('{2030-01-01 00:00:00+00, 2030-01-01 01:00:00+00}'::timestamptz[])
                              WITH ORDINALITY AS y (t, j) ON i = j),
               'hr010', (SELECT bool_and(f ->> 'reason' LIKE 'HR010:%') FROM jsonb_array_elements(r -> 'failures') AS f))
           FROM harvest.backfill_schedule('bf_gone', '{2030-01-01 00:00:00+00, 2030-01-01 01:00:00+00}',
                                          'allow_all') AS r),
          '{"failed": 2, "slots": [true, true], "hr010": true}'::jsonb,
          'backfill_schedule() answers each failed slot with the reason its firing recorded');
SELECT throws_ok($$SELECT harvest.backfill_schedule('ov_allow_all', '{2031-01-01 00:00:00+00}')$$, 'HR001',
                 'backfill slot 2031-01-01T00:00:00+00:00 is in the future',
                 'a backfill slot in the future is HR001 naming it');

-- ---------------------------------------------------------------- pause / resume
SELECT is(harvest.pause_schedule('every', 'maintenance') ->> 'paused', 'true', 'pause_schedule() pauses');
SELECT is((SELECT count(*)::integer FROM harvest.list_due_schedules(100) WHERE name = 'every'), 0,
          'a paused schedule is never due');
SELECT is(harvest.declare_schedules('[{"name": "every", "workflow_name": "tick_wf", "interval_secs": 600}]'), 1,
          'declare_schedules() updates a changed declared schedule');
SELECT results_eq($$SELECT paused, interval_secs, declared, next_fire_at IS NULL FROM harvest.schedules
                    WHERE name = 'every'$$,
                  $$VALUES (true, 600::bigint, true, true)$$,
                  'a boot keeps the runtime pause; a new interval recomputes the next slot');
SELECT is(harvest.declare_schedules('[{"name": "every", "workflow_name": "tick_wf", "interval_secs": 600}]'), 0,
          'declaring it unchanged changes nothing');

-- A rolling deploy: the old App's spec, then the new one's, then an old worker restarting.
SELECT is(harvest.declare_schedules('[{"name": "deploy", "workflow_name": "tick_wf", "interval_secs": 60}]'), 1,
          'declare_schedules() creates the old deploy''s schedule');
SELECT is(harvest.declare_schedules('[{"name": "deploy", "workflow_name": "tick_wf", "interval_secs": 120,
                                       "input": [2]}]'), 1, 'the new deploy''s spec replaces it');
SELECT is(harvest.declare_schedules('[{"name": "deploy", "workflow_name": "tick_wf", "interval_secs": 60}]'), 0,
          'an old worker restarting: its superseded spec changes nothing');
SELECT results_eq($$SELECT interval_secs, input, jsonb_array_length(superseded_specs),
                           superseded_specs -> 0 ->> 'interval_secs' FROM harvest.schedules WHERE name = 'deploy'$$,
                  $$VALUES (120::bigint, '[2]'::jsonb, 1, '60'::text)$$,
                  'the new spec stays, the old one kept as superseded');
SELECT results_eq($$SELECT target, details -> 'spec' ->> 'interval_secs', details -> 'kept' ->> 'interval_secs'
                    FROM harvest.audit_log WHERE operation = 'schedule.declare_superseded'$$,
                  $$VALUES ('deploy'::text, '60'::text, '120'::text)$$,
                  'the refused declaration is audited with the spec kept');
SELECT is((SELECT details -> 'kept' -> 'input' FROM harvest.audit_log WHERE operation = 'schedule.declare_superseded'),
          '{"redacted": true, "bytes": 3}'::jsonb, 'the kept spec''s input is audited by its size only');
SELECT is(harvest.update_schedule('deploy', '{"interval_secs": 60, "input": []}') ->> 'interval_secs', '60',
          'an operator puts the old spec back (a rollback)');
SELECT results_eq($$SELECT superseded_specs -> 0 ->> 'interval_secs', jsonb_array_length(superseded_specs)
                    FROM harvest.schedules WHERE name = 'deploy'$$,
                  $$VALUES ('120'::text, 1)$$, 'then the new deploy''s spec is the superseded one');
SELECT is(harvest.declare_schedules('[{"name": "deploy", "workflow_name": "tick_wf", "interval_secs": 120,
                                       "input": [2]}]'), 0, 'and a new worker''s declaration changes nothing');
SELECT is(harvest.declare_app_schedules('[{"name": "deploy", "workflow_name": "tick_wf", "interval_secs": 120,
                                           "input": [2]},
                                          {"name": "every", "workflow_name": "tick_wf", "interval_secs": 600}]'),
          jsonb_build_object('changed', 0, 'kept', jsonb_build_array(jsonb_build_object(
              'name', 'deploy',
              'declared', (SELECT superseded_specs -> 0 FROM harvest.schedules WHERE name = 'deploy'),
              'current', (SELECT harvest._schedule_spec(s) FROM harvest.schedules AS s WHERE s.name = 'deploy')))),
          'declare_app_schedules() names each schedule whose declared spec it kept out, with both specs');
SELECT is(harvest._supersede_spec(
              (SELECT jsonb_agg(jsonb_build_object('n', i)) FROM generate_series(1, 8) AS i),
              '{"n": 9}', '{"n": 1}'),
          (SELECT jsonb_agg(jsonb_build_object('n', i)) FROM generate_series(2, 9) AS i),
          '_supersede_spec(): the replaced spec added last, the new one dropped from the list');
SELECT is(harvest._supersede_spec(
              (SELECT jsonb_agg(jsonb_build_object('n', i)) FROM generate_series(1, 8) AS i),
              '{"n": 9}', '{"n": 0}') -> 0, '{"n": 2}'::jsonb, '_supersede_spec(): the latest 8 kept');
SELECT is(harvest.resume_schedule('every') ->> 'paused', 'false', 'resume_schedule() resumes');
SELECT results_eq($$SELECT paused, anchor_at, next_fire_at FROM harvest.schedules WHERE name = 'every'$$,
                  $$VALUES (false, '2030-01-02 00:02:30+00'::timestamptz, NULL::timestamptz)$$,
                  'resume_schedule() resumes from now: the next slot is computed after the resume');

-- ---------------------------------------------------------------- update / reads / delete
SELECT is(harvest.update_schedule('daily', '{"cron": "30 4 * * *", "max_active_runs": 2}') ->> 'cron',
          '30 4 * * *', 'update_schedule() changes fields');
SELECT throws_ok($$SELECT harvest.update_schedule('daily', '{"color": "red"}')$$, 'HR001', NULL,
                 'an unknown field is HR001');
SELECT is((SELECT string_agg(name || ':' || kind, ',' ORDER BY name) FROM harvest.list_schedules()
           WHERE name IN ('daily', 'every')), 'daily:workflow,every:workflow',
          'list_schedules() lists every kind');
SELECT is((SELECT count(*)::integer FROM harvest.list_schedules('dag')), 0, 'list_schedules(kind) filters');
SELECT is((SELECT string_agg(name, ',' ORDER BY name) FROM harvest.list_schedules(NULL, 'daily', 1)),
          (SELECT min(name) FROM harvest.schedules WHERE name > 'daily'),
          'list_schedules(): at most p_limit after p_after_name, by name');
SELECT is((SELECT bool_and(paused) FROM harvest.list_schedules(NULL, NULL, NULL, true)), NULL::boolean,
          'list_schedules(p_paused): no paused schedule here, none listed');
SELECT is((SELECT count(*)::integer FROM harvest.list_schedules(NULL, NULL, NULL, false)),
          (SELECT count(*)::integer FROM harvest.schedules WHERE NOT paused), 'list_schedules(p_paused) filters');
SELECT is((SELECT count(*)::integer FROM harvest.list_schedules() AS l JOIN harvest.schedules AS s USING (name)
           WHERE l.anchor_at = s.anchor_at AND l.next_due_at IS NOT DISTINCT FROM s.next_due_at
             AND l.now = harvest.now()),
          (SELECT count(*)::integer FROM harvest.schedules),
          'list_schedules() answers each schedule''s anchor_at (its next slot is computed from it while none is stored), '
          'its next_due_at and the engine''s now (a stored slot due before it is overdue)');
SELECT throws_ok($$SELECT * FROM harvest.list_schedules(NULL, NULL, 0)$$, 'HR001', NULL,
                 'list_schedules(): a limit below 1: HR001');
SELECT is((SELECT jsonb_array_length(j -> 'firings') || ',' || jsonb_array_length(j -> 'misses') || ','
                  || (j -> 'firings' -> 1 ->> 'run_status')
           FROM harvest.get_schedule('hourly') AS j), '4,2,RUNNING',
          'get_schedule() shows the firings with their run status, and the misses');
SELECT results_eq($$SELECT schedule_name, missed_slots FROM harvest.count_schedule_misses() WHERE missed_slots > 0$$,
                  $$VALUES ('hourly'::text, 3::bigint)$$,
                  'count_schedule_misses() counts the missed slots per schedule');
-- A schedule of kind dag skips its slots while its DAG is paused (docs/dags.md).
INSERT INTO harvest.dags (dag_name, queue, paused, first_registered_at, last_registered_at)
VALUES ('nightly_dag', 'default', true, harvest.now(), harvest.now());
SELECT harvest.create_schedule('nightly_dag', 'nightly_dag', p_interval_secs => 3600, p_kind => 'dag');
SELECT is((SELECT f ->> 'status' || ':' || (f ->> 'reason') FROM harvest.trigger_schedule('nightly_dag') AS f),
          'skipped:dag_paused', 'a slot of a paused DAG is skipped with the reason dag_paused');
UPDATE harvest.dags SET paused = false WHERE dag_name = 'nightly_dag';
SET LOCAL harvest.fake_now = '2031-01-01 00:00:00+00';
SELECT is((SELECT f ->> 'status' || ':' || coalesce(f ->> 'reason', '-') FROM harvest.trigger_schedule('nightly_dag') AS f),
          'started:-', 'once the DAG is unpaused its slot starts a run');
-- A DAG's schedule counts the DAG's live runs, a triggered one too (harvest._lock_schedule_dag
-- holds the DAG's row, harvest._schedule_active_runs counts them), as its max_active_runs does.
SELECT harvest.update_schedule('nightly_dag', '{"overlap": "skip"}');
SELECT * FROM harvest.trigger_dag('nightly_dag');
SET LOCAL harvest.fake_now = '2031-01-01 00:00:10+00';
SELECT is((SELECT f ->> 'status' || ':' || (f ->> 'reason') FROM harvest.trigger_schedule('nightly_dag') AS f),
          'skipped:max_active_runs', 'a DAG schedule''s slot counts the DAG''s triggered runs');
-- A started firing whose start a throttle deferred is a live run to come (harvest._firing_live):
-- the next slot is skipped, not deferred beside it.
SELECT harvest.declare_flow_policies('{"workflows": {"paced_wf": {"throttle": {"rps": 0.0001, "burst": 1}}}}');
SELECT harvest.create_schedule('paced', 'paced_wf', p_interval_secs => 60);
SELECT harvest.trigger_schedule('paced');
SELECT pg_temp.finish_runs('paced');
SET LOCAL harvest.fake_now = '2031-01-01 00:01:00+00';
SELECT is((SELECT f ->> 'status' || ':' || (f ->> 'reason') FROM harvest.trigger_schedule('paced') AS f),
          'started:deferred', 'a throttled start is deferred');
SET LOCAL harvest.fake_now = '2031-01-01 00:02:00+00';
SELECT is((SELECT f ->> 'status' || ':' || (f ->> 'reason') FROM harvest.trigger_schedule('paced') AS f),
          'skipped:max_active_runs', 'a deferred start counts as the schedule''s live run');
-- A terminate_other slot of a gated workflow admits its start at its gate before it ends the
-- live runs (harvest._firing_start is what it admits, _start_firing starts it as admitted).
SELECT is(harvest._firing_start(s, f) - 'workflow_id',
          jsonb_build_object('workflow_name', 'paced_wf', 'input', s.input, 'queue', s.queue, 'traceparent', NULL),
          '_firing_start(): the firing''s start, as start_workflows'' elements spell one')
FROM harvest.schedules AS s JOIN harvest.schedule_firings AS f ON f.schedule_id = s.id
WHERE s.name = 'paced' ORDER BY f.slot_at LIMIT 1;
SET LOCAL harvest.fake_now = '2031-01-01 00:02:30+00';
SELECT is((SELECT f ->> 'status' || ':' || (f ->> 'reason') FROM harvest.trigger_schedule('paced', 'terminate_other') AS f),
          'started:deferred', 'a terminate_other slot whose gate defers its start: deferred ...');
SELECT is((SELECT count(*)::integer FROM harvest.pending_starts AS p WHERE p.workflow_name = 'paced_wf'), 2,
          '... once (admitted at its gate before the runs end, not again at its start)');
SELECT harvest.declare_flow_policies('{"workflows": {"paced_wf": {"throttle": {"rps": 0.0001, "burst": 1}},
    "batched_wf": {"batch": {"max_size": 2, "window_secs": 60}}}}');
SELECT harvest.create_schedule('batched', 'batched_wf', p_interval_secs => 60, p_input => '[1, 2]',
                               p_overlap => 'terminate_other');
SELECT is((SELECT f ->> 'status' || ':' || left(f ->> 'reason', 5) FROM harvest.trigger_schedule('batched') AS f),
          'failed:HR001', 'a terminate_other slot whose start its gate refuses (a batch start of two arguments) fails');
-- buffer_all keeps at most harvest._max_buffered_firings() slots waiting; the next is skipped.
SELECT is(harvest._max_buffered_firings(), 10000, 'a schedule keeps at most 10000 slots waiting');
SELECT harvest.create_schedule('stacked', 'stacked_wf', p_interval_secs => 60, p_overlap => 'buffer_all');
SELECT harvest.trigger_schedule('stacked');  -- its run stays live
INSERT INTO harvest.schedule_firings (schedule_id, slot_at, origin, status, workflow_id, recorded_at)
SELECT s.id, timestamptz '2020-01-01 00:00:00+00' + make_interval(mins => i), 'schedule', 'buffered',
       'sched:stacked:' || i, harvest.now()
FROM harvest.schedules AS s, generate_series(1, 9999) AS i WHERE s.name = 'stacked';
SELECT is(harvest._buffered_firings((SELECT id FROM harvest.schedules WHERE name = 'stacked')), 9999,
          '_buffered_firings() counts the waiting slots');
SET LOCAL harvest.fake_now = '2031-01-01 00:03:00+00';
SELECT is((SELECT f ->> 'status' FROM harvest.trigger_schedule('stacked') AS f), 'buffered',
          'the 10000th slot waits');
SET LOCAL harvest.fake_now = '2031-01-01 00:04:00+00';
SELECT is((SELECT f ->> 'status' || ':' || (f ->> 'reason') FROM harvest.trigger_schedule('stacked') AS f),
          'skipped:buffer_full', 'past the limit a slot is skipped, buffer_full');
INSERT INTO harvest.schedule_firings (schedule_id, slot_at, origin, status, workflow_id, recorded_at)
SELECT s.id, timestamptz '2019-01-01 00:00:00+00', 'schedule', 'buffered', 'sched:stacked:0', harvest.now()
FROM harvest.schedules AS s WHERE s.name = 'stacked';
SELECT is(harvest._buffered_firings((SELECT id FROM harvest.schedules WHERE name = 'stacked')), 10000,
          'counting stops at the limit (10001 waiting)');
SELECT throws_ok($$SELECT harvest.backfill_schedule('stacked', ARRAY[timestamptz '2030-06-01 00:00:00+00'])$$,
                 'HR001', 'backfill of 1 new slot(s) of schedule stacked would leave 10002 waiting, over the limit of 10000',
                 'a backfill past the limit is refused');
-- delete_moved_schedules: a declared copy whose home is another shard goes; an operator's stays.
SELECT harvest.declare_schedules('[{"name": "moved", "workflow_name": "moved_wf", "interval_secs": 60}]');
SELECT harvest.create_schedule('handmade', 'moved_wf', p_interval_secs => 60);
SELECT is(harvest.delete_moved_schedules('{"moved": 2, "handmade": 2, "absent": 1}'), 1,
          'delete_moved_schedules() deletes the declared schedules named and counts them');
SELECT is((SELECT array_agg(name ORDER BY name) FROM harvest.schedules WHERE name IN ('moved', 'handmade')),
          ARRAY['handmade'], 'an operator-created schedule of a named name is kept');
SELECT is((SELECT details ->> 'home_shard' FROM harvest.audit_log
           WHERE operation = 'schedule.delete_moved' AND target = 'moved'), '2',
          'each deletion is audited with the home shard');
SET LOCAL ROLE harvest_operator;
SELECT throws_ok($$SELECT harvest.delete_moved_schedules('{"x": 1}')$$, '42501', NULL,
                 'delete_moved_schedules(): refused to an operator (a worker''s call)');
RESET ROLE;
SET LOCAL ROLE harvest_reader;
SELECT throws_ok($$SELECT harvest.delete_moved_schedules('{"x": 1}')$$, '42501', NULL,
                 'delete_moved_schedules(): refused to a reader');
RESET ROLE;
SELECT throws_ok($$SELECT harvest.delete_moved_schedules('["moved"]')$$, 'HR001',
                 'homes must be a JSON object of schedule name -> home shard',
                 'delete_moved_schedules() refuses anything but an object');
SELECT is(harvest.delete_schedule('daily'), true, 'delete_schedule() deletes');
SELECT is(harvest.delete_schedule('daily'), false, 'and answers false the second time');

-- _schedule_check_admin: overlap terminate_other terminates runs, which needs harvest_admin.
SELECT lives_ok($$SELECT harvest._schedule_check_admin('terminate_other', 's')$$,
                '_schedule_check_admin(): the superuser may make a schedule that terminates');
SELECT lives_ok($$SELECT harvest._schedule_check_admin('cancel_other', 's')$$,
                '_schedule_check_admin(): any other overlap needs no admin');
SELECT harvest.create_schedule('ta_sched', 'ta_wf', p_interval_secs => 60, p_overlap => 'terminate_other');
SET LOCAL ROLE harvest_operator;
SELECT throws_ok($$SELECT harvest.create_schedule('ta_op', 'ta_wf', p_interval_secs => 60,
                                                  p_overlap => 'terminate_other')$$, '42501',
                 'schedule ta_op: overlap "terminate_other" can terminate running executions, which needs the '
                 'harvest_admin role; role harvest_operator (set by login ' || session_user || ') does not have it',
                 'create_schedule(): an operator cannot make a schedule that terminates (42501), naming the role in use');
SELECT throws_ok($$SELECT harvest.trigger_schedule('ta_sched')$$, '42501', NULL,
                 'trigger_schedule(): nor fire one');
SELECT throws_ok($$SELECT harvest.update_schedule('ta_sched', '{"interval_secs": 30}')$$, '42501', NULL,
                 'update_schedule(): nor change one');
SELECT lives_ok($$SELECT harvest.update_schedule('ta_sched', '{"overlap": "cancel_other"}')$$,
                'update_schedule(): but may lower its overlap');
RESET ROLE;
SELECT is((SELECT overlap FROM harvest.schedules WHERE name = 'ta_sched'), 'cancel_other', '... which is stored');

SELECT * FROM finish();
ROLLBACK;

-- A schedule spec's numbers and booleans by the one rule for a JSON field (core.sql,
-- _json_integer): 60.0 is 60; a fraction, a string or a number is HR001 naming the field (a raw
-- cast took "60" and "yes", and refused 2.5 with a message that named no field).
BEGIN;
SELECT plan(6);
SELECT harvest.declare_schedules('[{"name": "jn", "workflow_name": "wf", "interval_secs": 60.0,
                                   "max_active_runs": 2.0, "catchup_window_secs": 1e2}]');
SELECT is((SELECT (s.interval_secs, s.max_active_runs, s.catchup_window_secs)::text FROM harvest.schedules AS s
           WHERE s.name = 'jn'),
          '(60,2,100)', 'declare_schedules(): interval_secs 60.0, max_active_runs 2.0 and 1e2 are 60, 2 and 100');
SELECT throws_ok($$SELECT harvest.declare_schedules('[{"name": "jn2", "workflow_name": "wf", "interval_secs": 2.5}]')$$,
                 'HR001', 'schedule jn2: interval_secs must be a whole number from 1 to 3155760000, got 2.5',
                 '... a fraction of a second is HR001 naming the field');
SELECT throws_ok($$SELECT harvest.declare_schedules('[{"name": "jn2", "workflow_name": "wf", "interval_secs": "60"}]')$$,
                 'HR001', NULL, '... a number in a string too');
SELECT throws_ok($$SELECT harvest.declare_schedules('[{"name": "jn2", "workflow_name": "wf", "interval_secs": 60,
                                                       "catchup": "yes"}]')$$,
                 'HR001', 'schedule jn2: catchup must be true or false, got "yes"', '... catchup "yes" (a raw cast took it)');
SELECT throws_ok($$SELECT harvest._check_schedule_spec('{"name": "jn2", "workflow_name": "wf", "interval_secs": 60,
                                                          "paused": 1}')$$,
                 'HR001', NULL, '_check_schedule_spec(): paused 1');
SELECT throws_ok($$SELECT harvest.update_schedule('jn', '{"max_active_runs": 1.5}')$$,
                 'HR001', 'schedule jn: max_active_runs must be a whole number from 1 to 2147483647, got 1.5',
                 'update_schedule(): the same rule');
SELECT * FROM finish();
ROLLBACK;

-- An over-long schedule name is refused by its first characters and its length, never echoed
-- whole (harvest._clipped); an empty one as ''.
BEGIN;
SELECT plan(2);
SELECT throws_ok($$SELECT harvest.create_schedule(repeat('n', 5000), 'wf', p_interval_secs => 60)$$, 'HR001',
                 'schedule name must be 1 to 200 characters, got ' || repeat('n', 40) || '... (5000 characters)',
                 '_check_schedule_spec(): an over-long name is named by its length, not echoed');
SELECT throws_ok($$SELECT harvest.create_schedule('', 'wf', p_interval_secs => 60)$$, 'HR001',
                 'schedule name must be 1 to 200 characters, got ''''',
                 '_check_schedule_spec(): an empty name');
SELECT * FROM finish();
ROLLBACK;
