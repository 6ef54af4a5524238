-- functions/core.sql: the clock, execution ids and shards, the event append,
-- workflow wake-ups, closing a run, locking an execution.
BEGIN;
SELECT plan(134);
SET LOCAL TimeZone = 'UTC';

-- harvest.now(): the real clock unless harvest.fake_now is set (and the test clock is on).
SELECT has_function('harvest', 'now', ARRAY[]::text[], 'harvest.now() exists');
SELECT is(harvest.now(), statement_timestamp(), 'now(): without harvest.fake_now it is the statement''s clock');
SELECT pg_sleep(0.002);
SELECT cmp_ok(harvest.now(), '>', now(),
              'now(): a later statement of the transaction reads a later clock (a claim that decides: its decision''s time)');
SET LOCAL harvest.fake_now = '';
SELECT is(harvest.now(), statement_timestamp(), 'now(): an empty harvest.fake_now is ignored');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT is(harvest.now(), '2030-01-01 00:00:00+00'::timestamptz, 'now(): harvest.fake_now moves the clock');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:42.5+00';
SELECT is(harvest.now(), '2030-01-01 00:00:42.5+00'::timestamptz,
          'now(): a later SET LOCAL moves it again, with sub-second precision');
-- fake_now 'shared': the statement's clock plus the owner-only engine_settings.test_clock_offset (0035).
SET LOCAL harvest.fake_now = 'shared';
UPDATE harvest.engine_settings SET test_clock_offset = interval '1 day 2 hours';
SELECT is(harvest.now(), statement_timestamp() + interval '1 day 2 hours',
          'now(): harvest.fake_now ''shared'' reads the shared clock, the statement''s plus test_clock_offset');
-- An offset in days moves every session's clock by the same instant: days count in UTC, not in
-- the session's zone (a day across a daylight-saving change is 23 or 25 hours there).
-- (The offset: the fewest days from now past New York's next change of offset, so it always crosses one.)
UPDATE harvest.engine_settings SET test_clock_offset = (
    SELECT make_interval(days => min(d.n))
    FROM generate_series(1, 366) AS d (n)
    CROSS JOIN LATERAL (SELECT statement_timestamp() + make_interval(hours => 24 * d.n) AS t) AS l
    WHERE (l.t AT TIME ZONE 'America/New_York') - (l.t AT TIME ZONE 'UTC')
          <> (statement_timestamp() AT TIME ZONE 'America/New_York') - (statement_timestamp() AT TIME ZONE 'UTC'));
SET LOCAL TimeZone = 'America/New_York';
SELECT is(harvest.now() - statement_timestamp(), (SELECT s.test_clock_offset FROM harvest.engine_settings AS s),
          'now(): the shared clock''s days count in UTC whatever the session''s zone');
SET LOCAL TimeZone = 'UTC';
UPDATE harvest.engine_settings SET test_clock_offset = DEFAULT;
SELECT is(harvest.now(), statement_timestamp(), 'now(): the shared clock with no offset is the statement''s clock');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- schema_version(): the latest applied core migration.
SELECT is(harvest.schema_version(),
          (SELECT max(version) FROM harvest.schema_migrations WHERE set_name = 'harvest'),
          'schema_version() is the highest applied harvest migration');
SELECT matches(harvest.schema_version(), '^[0-9]{4}$', 'schema_version() is a four-digit version');
-- functions_version(): the migration the function files were written for, the same once migrated.
SELECT is(harvest.functions_version(), harvest.schema_version(),
          'functions_version() is schema_version() on a migrated database');
SELECT has_function('harvest', 'functions_version', ARRAY[]::text[], 'harvest.functions_version() exists');
-- get_function_releases(): each release that applied a function file once, rows without one left out.
UPDATE harvest.function_files SET package_version = CASE WHEN file_name = 'core.sql' THEN '1.4.1' ELSE '1.4.2' END;
SELECT is(harvest.get_function_releases(), ARRAY['1.4.1', '1.4.2'],
          'get_function_releases(): each release that applied a file, once');
UPDATE harvest.function_files SET package_version = NULL WHERE file_name <> 'core.sql';
SELECT is(harvest.get_function_releases(), ARRAY['1.4.1'],
          'get_function_releases(): a row from before 0085 (no release) is left out');
-- get_function_state(): the ledger, and a digest of the live bodies of the functions named that
-- a CREATE OR REPLACE changes (and, when it is not the expected one, each name's digest).
SELECT is(harvest.get_function_state(ARRAY['payload_limit'], NULL) -> 'files' -> 'core.sql' ->> 'release', '1.4.1',
          'get_function_state(): each ledger row with the release that applied it');
CREATE TEMP TABLE fs_before AS
SELECT harvest.get_function_state(ARRAY['payload_limit', 'no_such_function'], NULL) AS state;
SELECT is((SELECT state -> 'functions' ->> 'payload_limit' FROM fs_before),
          encode(sha256(convert_to(encode(sha256(convert_to(
              (SELECT prosrc FROM pg_proc WHERE oid = 'harvest.payload_limit()'::regprocedure), 'UTF8')), 'hex'),
              'UTF8')), 'hex'),
          'get_function_state(): a name''s digest is sha-256 of its bodies'' sha-256s');
SELECT is(harvest.get_function_state(ARRAY['payload_limit', 'no_such_function'],
                                     (SELECT state ->> 'definitions' FROM fs_before)) ->> 'functions', NULL,
          'get_function_state(): no per-name digests when the digest is the expected one');
SAVEPOINT hand_edit;
CREATE OR REPLACE FUNCTION harvest.payload_limit() RETURNS integer LANGUAGE sql STABLE AS $$ SELECT 1 $$;
SELECT isnt(harvest.get_function_state(ARRAY['payload_limit', 'no_such_function'], NULL) ->> 'definitions',
            (SELECT state ->> 'definitions' FROM fs_before),
            'get_function_state(): a function replaced by hand changes the digest');
ROLLBACK TO SAVEPOINT hand_edit;

-- _new_execution_id / shard_of: the first two bytes carry the shard.
SELECT is(harvest.shard_of(harvest._new_execution_id()), 0, '_new_execution_id(): shard 0 by default');
SELECT is(harvest.shard_of(harvest._new_execution_id(1)), 1, '_new_execution_id(1) routes to shard 1');
SELECT is(harvest.shard_of(harvest._new_execution_id(65535)), 65535,
          '_new_execution_id(65535): the highest shard');
SELECT is(left(harvest._new_execution_id(258)::text, 4), '0102',
          '_new_execution_id(258): shard bytes 0x01 0x02 lead the uuid');
SELECT is(substr(harvest._new_execution_id(7)::text, 15, 1), '4',
          '_new_execution_id() keeps the random uuid''s version nibble');
SELECT matches(substr(harvest._new_execution_id(7)::text, 20, 1), '^[89ab]$',
               '_new_execution_id() keeps the random uuid''s variant bits');
SELECT is(substring(uuid_send(harvest._new_execution_id(9)) FROM 3 FOR 6),
          substring(int8send(harvest._id_clock_bits(floor(date_part('epoch', transaction_timestamp()) * 1000)::bigint))
                    FROM 3 FOR 6),
          '_new_execution_id(): bytes 3-8 are the transaction''s clock in milliseconds');
SELECT is(harvest._id_clock_bits(0), 16384::bigint, '_id_clock_bits(0): the version nibble alone');
SELECT is(harvest._id_clock_bits(17592186044415), 281474976665599::bigint,  -- 0xffffffff4fff
          '_id_clock_bits(): 44 bits of clock around the version nibble');
SELECT ok(harvest._id_clock_bits(4095) < harvest._id_clock_bits(4096)
          AND harvest._id_clock_bits(4096) < harvest._id_clock_bits(4097),
          '_id_clock_bits(): later milliseconds sort after earlier ones, across the nibble');
SELECT ok((SELECT bool_and(a.id < b.id) FROM
             (SELECT encode('\x0003'::bytea || substring(int8send(harvest._id_clock_bits(1764770000000)) FROM 3 FOR 6)
                            || substring(uuid_send(gen_random_uuid()) FROM 9 FOR 8), 'hex')::uuid AS id
              FROM generate_series(1, 20)) AS a,
             (SELECT encode('\x0003'::bytea || substring(int8send(harvest._id_clock_bits(1764770000001)) FROM 3 FOR 6)
                            || substring(uuid_send(gen_random_uuid()) FROM 9 FOR 8), 'hex')::uuid AS id
              FROM generate_series(1, 20)) AS b),
          'ids of one shard a millisecond later sort after every id of the millisecond before');
SELECT isnt(harvest._new_execution_id(3), harvest._new_execution_id(3),
            '_new_execution_id(): two ids of one shard differ');
SELECT throws_ok($$SELECT harvest._new_execution_id(-1)$$, 'HR001',
                 'shard -1 is out of range: a shard number is 0..65535', '_new_execution_id(-1): HR001');
SELECT throws_ok($$SELECT harvest._new_execution_id(65536)$$, 'HR001',
                 'shard 65536 is out of range: a shard number is 0..65535', '_new_execution_id(65536): HR001');
SELECT throws_ok($$SELECT harvest._new_execution_id(NULL)$$, 'HR001', NULL, '_new_execution_id(NULL): HR001');
SELECT throws_ok($$SELECT harvest._shard_out_of_range(70000)$$, 'HR001',
                 'shard 70000 is out of range: a shard number is 0..65535', '_shard_out_of_range(): HR001, always');
SELECT unalike(pg_temp.plan_of('SELECT harvest._new_execution_id(s) FROM generate_series(0, 3) AS s'),
               '%_new_execution_id(%', '_new_execution_id() inlines into its caller''s query (no call per id)');
SELECT is((SELECT bool_and(harvest.shard_of(harvest._new_execution_id(s)) = s) FROM generate_series(0, 65535, 257) AS s),
          true, '_new_execution_id(s) of shards across the range routes each to s');
SELECT is(harvest.shard_of('abcd0000-0000-4000-8000-000000000000'), 43981,
          'shard_of() reads the first two bytes big-endian');
SELECT is(harvest.shard_of('0000ffff-0000-4000-8000-000000000000'), 0,
          'shard_of() ignores the bytes after the second');

-- _append_event: gapless ids from 1, stamped with harvest.now().
CREATE TEMP TABLE run ON COMMIT DROP AS
SELECT * FROM harvest.start_workflow('core_wf', '[1]', 'core-1', 'core_q');
SELECT is((SELECT last_event_id FROM harvest.executions WHERE id = (SELECT execution_id FROM run)), 1::bigint,
          'a started run holds one event');
SELECT is(harvest._append_event((SELECT execution_id FROM run), 'MarkerRecorded', '{"seq": 1}'), 2::bigint,
          '_append_event() returns the next event id');
SELECT is(harvest._append_event((SELECT execution_id FROM run), 'MarkerRecorded', NULL), 3::bigint,
          '_append_event() counts on without gaps');
SELECT is((SELECT last_event_id FROM harvest.executions WHERE id = (SELECT execution_id FROM run)), 3::bigint,
          '_append_event() advances executions.last_event_id');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data, created_at FROM harvest.events
      WHERE execution_id = (SELECT execution_id FROM run) AND event_id > 1 ORDER BY event_id$$,
    $$VALUES (2::bigint, 'MarkerRecorded'::text, '{"seq": 1}'::jsonb, '2030-01-01 00:00:00+00'::timestamptz),
             (3::bigint, 'MarkerRecorded'::text, '{}'::jsonb, '2030-01-01 00:00:00+00'::timestamptz)$$,
    '_append_event() stores type and data (NULL data as {}), stamped with harvest.now()');

-- _append_events: several events in order, in one row update; a decision's marker.
SELECT is((harvest._append_events((SELECT execution_id FROM run), ARRAY['TimerStarted', 'MarkerRecorded'],
                                  ARRAY['{"seq": 2}', NULL]::jsonb[])).last_event_id, 5::bigint,
          '_append_events() returns the id of the last event');
SELECT results_eq(
    $$SELECT e.last_event_id, e.decided_by, e.decided_through, e.history_bytes,
             (SELECT array_agg(ev.event_type || ' ' || ev.event_data::text ORDER BY ev.event_id)
              FROM harvest.events AS ev WHERE ev.execution_id = e.id AND ev.event_id > 3)
      FROM harvest.executions AS e WHERE e.id = (SELECT execution_id FROM run)$$,
    $$SELECT 5::bigint, NULL::text, NULL::bigint,
             (SELECT sum(octet_length(event_data::text))::bigint FROM harvest.events
              WHERE execution_id = (SELECT execution_id FROM run)),
             ARRAY['TimerStarted {"seq": 2}', 'MarkerRecorded {}']$$,
    '_append_events(): ids 4 and 5 in order, the bytes counted, no decision recorded');
CREATE TEMP TABLE appended AS
SELECT * FROM harvest._append_events((SELECT execution_id FROM run), ARRAY['WorkflowTaskCompleted'],
                                     ARRAY['{"through": 5, "worker_id": "w-core"}']::jsonb[], 'w-core', 5);
SELECT results_eq(
    $$SELECT last_event_id, history_bytes, execution_status FROM appended$$,
    $$SELECT 6::bigint, (SELECT sum(octet_length(event_data::text))::bigint FROM harvest.events
                         WHERE execution_id = (SELECT execution_id FROM run)), 'RUNNING'::text$$,
    '_append_events() with a decision marker returns the last id, the history bytes of every event and the status');
SELECT results_eq(
    $$SELECT decided_by, decided_through FROM harvest.executions WHERE id = (SELECT execution_id FROM run)$$,
    $$VALUES ('w-core'::text, 5::bigint)$$,
    '_append_events(p_decided_by, p_decided_through) records who decided, and through what');
SELECT is((harvest._append_events((SELECT execution_id FROM run), ARRAY['WorkflowTaskCompleted', 'TimerStarted'],
                                  ARRAY['{"through": 6, "worker_id": "w-core"}', '{"seq": 3}']::jsonb[], 'w-core', 6,
                                  false, true)).last_event_id, 8::bigint,
          '_append_events() with p_own_events: a marker and its command''s event');
SELECT results_eq(
    $$SELECT decided_by, decided_through FROM harvest.executions WHERE id = (SELECT execution_id FROM run)$$,
    $$VALUES ('w-core'::text, 8::bigint)$$,
    '_append_events(p_own_events): decided_through covers the decision''s own events');
-- _append_events(p_defer): the ids taken and the bytes counted, the events left to the
-- caller's _insert_events, which puts them in at those ids (offset + position).
SELECT is((harvest._append_events((SELECT execution_id FROM run), ARRAY['TimerStarted', 'MarkerRecorded'],
                                  ARRAY['{"seq": 7}', '{"seq": 8, "kind": "k"}']::jsonb[],
                                  p_defer => true)).last_event_id, 10::bigint,
          '_append_events(p_defer) returns the last id it took');
SELECT is((SELECT max(event_id) FROM harvest.events WHERE execution_id = (SELECT execution_id FROM run)), 8::bigint,
          '_append_events(p_defer) inserts no event');
SELECT harvest._insert_events(ARRAY[(SELECT execution_id FROM run), (SELECT execution_id FROM run)], ARRAY[8, 8]::bigint[],
                              ARRAY['TimerStarted', 'MarkerRecorded'], ARRAY['{"seq": 7}', NULL]::jsonb[]);
SELECT results_eq(
    $$SELECT ev.event_id, ev.event_type, ev.event_data FROM harvest.events AS ev
      WHERE ev.execution_id = (SELECT execution_id FROM run) AND ev.event_id > 8 ORDER BY ev.event_id$$,
    $$VALUES (9::bigint, 'TimerStarted'::text, '{"seq": 7}'::jsonb), (10, 'MarkerRecorded', '{}')$$,
    '_insert_events() puts the events in at offset + position, in order (NULL data as {})');
-- _update_held_rows: the row updates a batch held, one statement; each run's counters as its
-- append would have left them. A row whose last_event_id is not where the held append
-- took its ids from is refused (XX000), nothing written.
CREATE TEMP TABLE bytes_before AS SELECT history_bytes FROM harvest.executions WHERE id = (SELECT execution_id FROM run);
SELECT harvest._update_held_rows(
    ARRAY[ROW((SELECT execution_id FROM run), 12, 2, 30, 11, true, NULL, NULL, NULL)::harvest.held_run_row], 'w-held');
SELECT results_eq(
    $$SELECT e.last_event_id, e.decided_by, e.decided_through, e.wake_hold,
             e.history_bytes - (SELECT b.history_bytes FROM bytes_before AS b)
      FROM harvest.executions AS e WHERE e.id = (SELECT execution_id FROM run)$$,
    $$VALUES (12::bigint, 'w-held'::text, 11::bigint, true, 30::bigint)$$,
    '_update_held_rows(): last_event_id, the bytes added, decided_by, decided_through and wake_hold set');
SELECT throws_ok($$SELECT harvest._update_held_rows(
                      ARRAY[ROW((SELECT execution_id FROM run), 20, 2, 1, 20, false, NULL, NULL, NULL)::harvest.held_run_row],
                      'w-held')$$,
                 'XX000', 'internal: 0 of 1 held run rows were where their appends left them',
                 '_update_held_rows(): a row its append did not take the ids from is refused');
UPDATE harvest.executions SET last_event_id = 10, wake_hold = false, decided_by = 'w-core', decided_through = 8,
    history_bytes = history_bytes - 30
WHERE id = (SELECT execution_id FROM run);

-- _notify_queue
SELECT lives_ok($$SELECT harvest._notify_queue('core_q')$$, '_notify_queue() sends a notification');

-- _ensure_workflow_task: at most one workflow task per execution.
SELECT harvest._ensure_workflow_task((SELECT execution_id FROM run));
SELECT is((SELECT count(*) FROM harvest.tasks
           WHERE execution_id = (SELECT execution_id FROM run) AND kind = 'workflow'), 1::bigint,
          '_ensure_workflow_task(): a wake-up finding a workflow task adds nothing');
DELETE FROM harvest.tasks WHERE execution_id = (SELECT execution_id FROM run);
SET LOCAL harvest.fake_now = '2030-01-01 00:01:00+00';
SELECT harvest._ensure_workflow_task((SELECT execution_id FROM run));
SELECT results_eq(
    $$SELECT kind, queue, status, due_at, scheduled_at FROM harvest.tasks
      WHERE execution_id = (SELECT execution_id FROM run)$$,
    $$VALUES ('workflow'::text, 'core_q'::text, 'pending'::text,
              '2030-01-01 00:01:00+00'::timestamptz, '2030-01-01 00:01:00+00'::timestamptz)$$,
    '_ensure_workflow_task() enqueues a pending workflow task on the run''s queue, due now');

-- _close_execution: terminal state, result, failure, timestamps, tasks dropped.
SELECT harvest._close_execution((SELECT execution_id FROM run), 'FAILED', '"out"',
                                '{"error_type": "E", "message": "m", "non_retryable": true, "details": null}');
SELECT results_eq(
    $$SELECT status, output, failure ->> 'error_type', completed_at FROM harvest.executions
      WHERE id = (SELECT execution_id FROM run)$$,
    $$VALUES ('FAILED'::text, '"out"'::jsonb, 'E'::text, '2030-01-01 00:01:00+00'::timestamptz)$$,
    '_close_execution() sets status, output, failure and completed_at');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = (SELECT execution_id FROM run)$$,
                '_close_execution() deletes the run''s open tasks');
SELECT harvest._ensure_workflow_task((SELECT execution_id FROM run));
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = (SELECT execution_id FROM run)$$,
                '_ensure_workflow_task() does nothing for a run that is not RUNNING');

-- _append_closing_events: a closing decision's last events and the close in one row
-- update; _after_close: the close's tail (tasks, waiters, the parent's relay).
CREATE TEMP TABLE closing ON COMMIT DROP AS
SELECT (harvest.start_workflow('core_wf', '[]', 'core-parent', 'core_q')).execution_id AS parent_id,
       (harvest.start_workflow('core_wf', '[]', 'core-child', 'core_q')).execution_id AS child_id;
UPDATE harvest.executions SET parent_id = (SELECT parent_id FROM closing), parent_seq = 7
WHERE id = (SELECT child_id FROM closing);
CREATE TEMP TABLE closing_updates ON COMMIT DROP AS
SELECT pg_stat_get_xact_tuples_updated('harvest.executions'::regclass) AS n;
SELECT is(harvest._append_closing_events((SELECT child_id FROM closing),
              ARRAY['WorkflowTaskCompleted', 'WorkflowCompleted'],
              ARRAY['{"through": 1, "worker_id": "w-close"}', '{"result": 5}']::jsonb[], 'w-close', 1,
              'COMPLETED', '5', NULL),
          3::bigint, '_append_closing_events() returns the id of the last event');
SELECT is(pg_stat_get_xact_tuples_updated('harvest.executions'::regclass) - (SELECT n FROM closing_updates), 2::bigint,
          '_append_closing_events() updates the run''s row once (and the parent''s once, for its ChildWorkflowCompleted)');
SELECT results_eq(
    $$SELECT status, output, failure, completed_at, last_event_id, decided_by, decided_through,
             history_bytes = (SELECT sum(octet_length(ev.event_data::text)) FROM harvest.events AS ev
                              WHERE ev.execution_id = e.id)
      FROM harvest.executions AS e WHERE id = (SELECT child_id FROM closing)$$,
    $$VALUES ('COMPLETED'::text, '5'::jsonb, NULL::jsonb, '2030-01-01 00:01:00+00'::timestamptz, 3::bigint,
              'w-close'::text, 1::bigint, true)$$,
    '_append_closing_events() sets the counters, the decision and the close in the row');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data FROM harvest.events
      WHERE execution_id = (SELECT child_id FROM closing) AND event_id > 1 ORDER BY event_id$$,
    $$VALUES (2::bigint, 'WorkflowTaskCompleted'::text, '{"through": 1, "worker_id": "w-close"}'::jsonb),
             (3::bigint, 'WorkflowCompleted'::text, '{"result": 5}'::jsonb)$$,
    '_append_closing_events() appends the events in order');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = (SELECT child_id FROM closing)$$,
                '_append_closing_events() deletes the run''s open tasks (_after_close)');
SELECT results_eq(
    $$SELECT event_type, event_data FROM harvest.events WHERE execution_id = (SELECT parent_id FROM closing)
      ORDER BY event_id DESC LIMIT 1$$,
    $$SELECT 'ChildWorkflowCompleted'::text,
             jsonb_build_object('seq', 7, 'child_execution_id', (SELECT child_id FROM closing), 'result', 5)$$,
    '_append_closing_events() relays the close to the parent (_after_close)');

-- _lock_execution
SELECT is((harvest._lock_execution((SELECT execution_id FROM run))).id, (SELECT execution_id FROM run),
          '_lock_execution() returns the execution row');
SELECT is((harvest._lock_execution((SELECT execution_id FROM run))).status, 'FAILED',
          '_lock_execution() returns the current status');
SELECT throws_ok($$SELECT harvest._lock_execution('00000000-0000-4000-8000-000000000001')$$, 'HR002',
                 'execution 00000000-0000-4000-8000-000000000001 does not exist',
                 '_lock_execution() of an unknown id: HR002');

-- Every documented function exists.
SELECT has_function('harvest', 'schema_version', ARRAY[]::text[], 'harvest.schema_version() exists');
SELECT has_function('harvest', 'shard_of', ARRAY['uuid'], 'harvest.shard_of(uuid) exists');
SELECT has_function('harvest', '_append_event', ARRAY['uuid', 'text', 'jsonb'],
                    'harvest._append_event(uuid, text, jsonb) exists');
SELECT has_function('harvest', '_close_execution', ARRAY['uuid', 'text', 'jsonb', 'jsonb'],
                    'harvest._close_execution(uuid, text, jsonb, jsonb) exists');
SELECT has_function('harvest', '_after_close', ARRAY['uuid', 'text', 'jsonb', 'jsonb', 'uuid', 'integer'],
                    'harvest._after_close(uuid, text, jsonb, jsonb, uuid, integer) exists');
SELECT has_function('harvest', '_append_closing_events',
                    ARRAY['uuid', 'text[]', 'jsonb[]', 'text', 'bigint', 'text', 'jsonb', 'jsonb', 'boolean'],
                    'harvest._append_closing_events(uuid, text[], jsonb[], text, bigint, text, jsonb, jsonb, boolean) exists');
SELECT function_returns('harvest', 'shard_of', ARRAY['uuid'], 'integer', 'shard_of() returns integer');
SELECT volatility_is('harvest', 'shard_of', ARRAY['uuid'], 'immutable', 'shard_of() is IMMUTABLE');

-- _iso_time, _secs_text: a time and a length of time in the functions' own texts, the same in
-- every session (a zone far from UTC, another DateStyle and IntervalStyle change nothing).
SET LOCAL TimeZone = 'Pacific/Kiritimati';
SET LOCAL DateStyle = 'SQL, DMY';
SET LOCAL IntervalStyle = 'sql_standard';
SELECT is(harvest._iso_time('2030-01-02 03:04:05+00'), '2030-01-02T03:04:05+00:00',
          '_iso_time(): ISO 8601 in UTC, whatever the session''s zone and DateStyle');
SELECT is(harvest._iso_time('2030-01-02 03:04:05.25+00'), '2030-01-02T03:04:05.250000+00:00',
          '_iso_time(): the microseconds when there are some, as Python''s isoformat() prints them');
SELECT is(ARRAY[harvest._iso_time('infinity'), harvest._iso_time('-infinity'), harvest._iso_time(NULL)],
          ARRAY['infinity', '-infinity', NULL], '_iso_time(): infinity as itself, NULL as NULL');
SELECT is(harvest._iso_time('0044-03-15 12:00:00+00 BC'), '0044-03-15T12:00:00+00:00 BC',
          '_iso_time(): a time before 1 AD says BC');
SELECT is(harvest._secs_text(interval '90 days'), '7776000', '_secs_text(): a length of time in seconds');
SELECT is(harvest._secs_text(interval '-1 minute -0.5 seconds'), '-60.5',
          '_secs_text(): a fraction and a sign, no trailing zeros');
SET LOCAL extra_float_digits = -15;
SELECT is(harvest._secs_text(interval '1 mon 00:00:01.25'), '2592001.25',
          '_secs_text(): a month as 30 days; extra_float_digits changes nothing');
SELECT is(ARRAY[harvest._num_text(-3600.5), harvest._num_text(0.1::float8 + 0.2::float8), harvest._num_text(NULL)],
          ARRAY['-3600.5', '0.3', NULL], '_num_text(): a double as numeric prints it; extra_float_digits changes nothing');
-- _too_deep, _check_depth: arrays and objects nested past 200 levels are refused (a worker's
-- JSON parser gives up near 1000); a scalar at level 200 is not a level.
SELECT is(ARRAY[harvest._too_deep((repeat('[', 200) || '1' || repeat(']', 200))::jsonb),
                harvest._too_deep((repeat('[', 201) || repeat(']', 201))::jsonb),
                harvest._too_deep(('[1, ' || repeat('{"a": ', 200) || '0' || repeat('}', 200) || ']')::jsonb),
                harvest._too_deep(NULL)],
          ARRAY[false, true, true, false], '_too_deep(): 201 levels of arrays and objects, and no fewer');
SELECT throws_ok($$SELECT harvest._check_depth('the payload of signal s', (repeat('[', 201) || repeat(']', 201))::jsonb)$$,
                 'HR001', 'the payload of signal s: arrays and objects nest deeper than 200 levels',
                 '_check_depth(): HR001 names the payload');
SELECT lives_ok($$SELECT harvest._check_depth('x', (repeat('[', 201) || repeat(']', 201))::jsonb, 401)$$,
                '_check_depth(): fewer than 402 bytes of text cannot nest 201 deep, and are not walked');
SELECT throws_ok($$SELECT harvest._check_sent('the input', (repeat('[', 201) || repeat(']', 201))::jsonb, 100000)$$,
                 'HR001', 'the input: arrays and objects nest deeper than 200 levels',
                 '_check_sent(): what a client sends within the limit is refused past 200 levels');
SELECT lives_ok($$SELECT harvest._check_payload('the input', (repeat('[', 201) || repeat(']', 201))::jsonb, 100000)$$,
                '_check_payload(): what a worker writes is checked for size only');
SELECT throws_ok($$SELECT harvest._check_sent('the input', '[1, 2, 3]', 5)$$, 'HR008', NULL,
                 '_check_sent(): and for size');
SELECT throws_ok($$SELECT harvest.start_workflow('wf', ('[' || repeat('[', 200) || repeat(']', 200) || ']')::jsonb)$$,
                 'HR001', 'the input of workflow wf: arrays and objects nest deeper than 200 levels',
                 'start_workflow(): an input past 200 levels is refused');

-- _check_limit: a sweep moves 1 to p_max rows a call; NULL (no LIMIT) is not "all".
SELECT throws_ok($$SELECT harvest._check_limit('scan', NULL, 10000)$$, 'HR001', 'scan limit NULL is out of range 1..10000',
                 '_check_limit(): NULL is refused, not read as no limit');
SELECT throws_ok($$SELECT harvest._check_limit('scan', -1, 10000)$$, 'HR001', 'scan limit -1 is out of range 1..10000',
                 '_check_limit(): a negative limit names the function');
SELECT lives_ok($$SELECT harvest._check_limit('scan', 10000, 10000)$$, '_check_limit(): p_max passes');
SELECT throws_ok($$SELECT harvest.scan(NULL)$$, 'HR001', 'scan limit NULL is out of range 1..10000',
                 'scan(): NULL is refused before anything is swept');

-- _check_page_bytes: a reader's byte bound is positive, or NULL for none.
SELECT throws_ok($$SELECT harvest._check_page_bytes(0)$$, 'HR001', 'max bytes 0 is not positive',
                 '_check_page_bytes(): 0 bytes is refused');
SELECT lives_ok($$SELECT harvest._check_page_bytes(NULL)$$, '_check_page_bytes(): NULL is no byte bound');

-- _check_lease: more than 0 and at most a day; a worker's claim cannot hold a task for centuries.
SELECT throws_ok($$SELECT harvest._check_lease('workflow task lease', 1e10)$$, 'HR001',
                 'workflow task lease 10000000000 s is over the ceiling of 86400 seconds (a day)',
                 '_check_lease(): a lease over a day is refused');
SELECT throws_ok($$SELECT harvest._check_lease('lease', 'NaN')$$, 'HR001', 'lease NaN must be positive seconds',
                 '_check_lease(): NaN is refused');
SELECT lives_ok($$SELECT harvest._check_lease('lease', 86400), harvest._check_lease('lease', 0.01)$$,
                '_check_lease(): up to a day passes');
SELECT throws_ok($$SELECT * FROM harvest.claim_tasks('w', ARRAY['q'], 1, 1e300)$$, 'HR001',
                 'workflow task lease 1e+300 s is over the ceiling of 86400 seconds (a day)',
                 'claim_tasks(): a lease past the ceiling is refused before anything is claimed');
SELECT is(ARRAY[harvest._num_text('Infinity'), harvest._num_text('-Infinity'), harvest._num_text('NaN')],
          ARRAY['Infinity', '-Infinity', 'NaN'], '_num_text(): the infinities and NaN as PostgreSQL spells them');
SELECT is(ARRAY[harvest._num_text(-1e300), harvest._num_text(1.5e-7), harvest._num_text(4.9e-324),
                harvest._num_text(123456789012345678), harvest._num_text(1e15), harvest._num_text(0.0001)],
          ARRAY['-1e+300', '1.5e-07', '4.94065645841247e-324', '1.23456789012346e+17', '1000000000000000', '0.0001'],
          '_num_text(): from 1e16 up and below 1e-4 in exponent form, as Python prints them (not 301 digits)');
SET LOCAL TimeZone = 'UTC';
RESET DateStyle;
RESET IntervalStyle;
RESET extra_float_digits;

-- _event_bytes: what an event counts for in the history caps (its JSON text bytes).
SELECT is(harvest._event_bytes('{"a": 1}'::jsonb), 8::bigint, '_event_bytes() counts the JSON text bytes');
SELECT is(harvest._event_bytes(jsonb_build_object('v', repeat('x', 5000))), 5009::bigint,
          '_event_bytes() does not depend on compression');

-- _lock_running_execution: the one not-running refusal signal, cancel and terminate share.
SELECT throws_ok($$SELECT harvest._lock_running_execution(gen_random_uuid(), 'poke')$$, 'HR002', NULL,
                 '_lock_running_execution() of an unknown id: HR002');
-- _refuse_moved: a MIGRATED seal (or a MIGRATING staged copy) is refused with HR013 naming its shard.
SELECT lives_ok($$SELECT harvest._refuse_moved(jsonb_populate_record(NULL::harvest.executions,
                    '{"id": "00000000-0000-4000-8000-000000000001", "status": "RUNNING"}'), 'poke')$$,
                '_refuse_moved(): a RUNNING row passes');
SELECT throws_ok($$SELECT harvest._refuse_moved(e, 'poke') FROM (SELECT (jsonb_populate_record(NULL::harvest.executions,
                    '{"id": "00000000-0000-4000-8000-000000000001", "status": "MIGRATED", "migrated_to_shard": 3}'))
                    .*) AS e$$, 'HR013',
                 'cannot poke execution 00000000-0000-4000-8000-000000000001 on shard 0: it moved to shard 3',
                 '_refuse_moved(): a MIGRATED seal is HR013 naming where the run went');

-- Payload size: the limit (harvest.engine_settings) and the check every entry point runs.
SELECT is(harvest.payload_limit(), 2097152, 'payload_limit() is engine_settings.max_payload_bytes, 2 MiB by default');
UPDATE harvest.engine_settings SET max_payload_bytes = 16;
SELECT is(harvest._payload_limit(), 16, '_payload_limit() reads the one settings row');
SELECT lives_ok($$SELECT harvest._check_payload('x', '"0123456789abcd"'::jsonb, 16)$$,
                '_check_payload() accepts a payload of exactly the limit (16 bytes of JSON text)');
SELECT throws_ok($$SELECT harvest._check_payload('the input of workflow w', '"0123456789abcde"'::jsonb, 16)$$,
                 'HR008', 'the input of workflow w is 17 bytes, over the payload limit of 16 bytes',
                 '_check_payload() one byte over: HR008 naming the payload, its size and the limit');
SELECT throws_ok($$SELECT harvest._check_payload('v', to_jsonb(repeat('é', 8)), 16)$$,
                 'HR008', 'v is 18 bytes, over the payload limit of 16 bytes',
                 '_check_payload() counts the bytes of the JSON text, not its characters');
SELECT throws_ok($$SELECT harvest._check_payload('v', '{"a":1}'::jsonb, 7)$$,
                 'HR008', 'v is 8 bytes, over the payload limit of 7 bytes',
                 '_check_payload() measures the text jsonb prints ({"a": 1}), not the text that was sent');
SELECT lives_ok($$SELECT harvest._check_payload('x', NULL, 1)$$, '_check_payload() of no payload (NULL) passes');
-- An operator's reason (a cancel's, a terminate's, a pause's, a resume's) under the same limit.
SELECT lives_ok($$SELECT harvest._check_reason('a cancel', repeat('x', 14)), harvest._check_reason('a cancel', NULL)$$,
                '_check_reason() accepts a reason of the limit as JSON text, and none');
SELECT throws_ok($$SELECT harvest._check_reason('a cancel', repeat('x', 15))$$, 'HR008',
                 'the reason of a cancel is 17 bytes, over the payload limit of 16 bytes',
                 '_check_reason() over the payload limit: HR008 naming the act');
UPDATE harvest.engine_settings SET max_payload_bytes = DEFAULT;
-- The test clock is gated by the owner-only switch engine_settings.test_clock_allowed:
-- with it off, a production role that sets harvest.fake_now sees real time, in
-- now() and in every SECURITY DEFINER entry point; no harvest role can turn it on.
-- (The test harness turns it on for the clones it tests; this block turns it off.)
UPDATE harvest.engine_settings SET test_clock_allowed = false;
SET LOCAL harvest.fake_now = '2100-01-01 00:00:00+00';
SELECT is(harvest.now(), statement_timestamp(), 'now(): with the test clock switched off, harvest.fake_now is ignored');
UPDATE harvest.engine_settings SET test_clock_offset = interval '3 days';
SET LOCAL harvest.fake_now = 'shared';
SELECT is(harvest.now(), statement_timestamp(), 'now(): with the test clock switched off, the shared clock is ignored too');
UPDATE harvest.engine_settings SET test_clock_offset = DEFAULT;
SET LOCAL harvest.fake_now = '2100-01-01 00:00:00+00';
SET LOCAL ROLE harvest_operator;
SELECT is(harvest.now(), statement_timestamp(), 'now(): a harvest_operator setting harvest.fake_now sees real time');
CREATE TEMP TABLE clock_run ON COMMIT DROP AS
SELECT * FROM harvest.start_workflow('clock_wf', '[]', 'clock-1', 'clock_q');
SELECT ok(
    (SELECT e.created_at BETWEEN now() AND statement_timestamp() AND t.due_at = e.created_at
     FROM harvest.executions AS e JOIN harvest.tasks AS t ON t.execution_id = e.id
     WHERE e.id = (SELECT execution_id FROM clock_run)),
    'start_workflow() as harvest_operator with harvest.fake_now: the run and its task are stamped with real time');
SELECT throws_ok($$UPDATE harvest.engine_settings SET test_clock_allowed = true$$, '42501', NULL,
                 'a harvest_operator cannot turn the test clock on');
RESET ROLE;
SET LOCAL ROLE harvest_admin;
SELECT throws_ok($$UPDATE harvest.engine_settings SET test_clock_allowed = true$$, '42501', NULL,
                 'a harvest_admin cannot turn the test clock on');
SELECT throws_ok($$UPDATE harvest.engine_settings SET test_clock_offset = interval '1 year'$$, '42501', NULL,
                 'a harvest_admin cannot move the shared test clock');
SELECT throws_ok($$INSERT INTO harvest.engine_settings (id) VALUES (false)$$, '42501', NULL,
                 'a harvest_admin cannot add a settings row');
RESET ROLE;
SET LOCAL ROLE harvest_worker;
SELECT is(harvest.now(), statement_timestamp(), 'now(): a harvest_worker setting harvest.fake_now sees real time');
SELECT is((SELECT c.lease_expires_at FROM harvest.claim_tasks('w-clock', ARRAY['clock_q'], 1, 30) AS c),
          statement_timestamp() + interval '30 seconds',
          'claim_tasks() as harvest_worker with harvest.fake_now: the lease runs on real time');
SELECT throws_ok($$UPDATE harvest.engine_settings SET test_clock_allowed = true$$, '42501', NULL,
                 'a harvest_worker cannot turn the test clock on');
SELECT throws_ok($$DELETE FROM harvest.engine_settings$$, '42501', NULL,
                 'a harvest_worker cannot delete the settings row');
RESET ROLE;
SELECT is_empty(
    $$SELECT r.rolname, p.privilege_type FROM pg_roles AS r
      CROSS JOIN unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS p (privilege_type)
      WHERE r.rolname LIKE 'harvest\_%' AND has_table_privilege(r.oid, 'harvest.engine_settings', p.privilege_type)
        AND NOT r.rolsuper$$,
    'no harvest role holds a write privilege on harvest.engine_settings');
-- Switched on (by the owner), the clock moves, for a worker too (it reads the switch).
UPDATE harvest.engine_settings SET test_clock_allowed = true;
SELECT is(harvest.now(), '2100-01-01 00:00:00+00'::timestamptz, 'now(): with the test clock on, fake_now moves it');
SET LOCAL ROLE harvest_worker;
SELECT is(harvest.now(), '2100-01-01 00:00:00+00'::timestamptz,
          'now(): with the test clock on, a harvest_worker session sees the moved clock too');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;

-- _after_closes: a batch's closes' tails in one pass (_update_held_rows) leave the rows each
-- run's _after_close leaves. Two groups of the same runs, each closed by one row update
-- (as _update_held_rows closes a batch's): a parent (par) of three closing children, cl_a
-- (COMPLETED, with two result waiters and an open timer), cl_b (FAILED) and cl_c (continued
-- as new: no relay), and of one that goes on (kid); a closing parent cl_d of a live child
-- (min, terminated by its policy) and of an abandoned one (aba, left running); a plain
-- closing run cl_e with a waiter. Group g1's tails by one _after_closes, group g2's by
-- _after_close run by run in the same order; then the rows of each group, its ids written as
-- keys, are the same. (A run is closed once: _update_held_rows holds each run once, and a
-- batch's next item of a closed run is refused gone, pgtap/activities.sql.)
BEGIN;
SELECT plan(15);
CREATE TEMP TABLE ac_runs (g text, k text, n integer, status text, output jsonb, failure jsonb, parent text,
                           seq integer, policy text) ON COMMIT DROP;
INSERT INTO ac_runs
SELECT g, v.*
FROM unnest(ARRAY['g1', 'g2']) AS g
CROSS JOIN (VALUES ('par', NULL::integer, NULL::text, NULL::jsonb, NULL::jsonb, NULL::text, NULL::integer, NULL::text),
                   ('cl_a', 1, 'COMPLETED', '5', NULL, 'par', 3, NULL),
                   ('cl_b', 2, 'FAILED', NULL, '{"message": "no"}', 'par', 4, NULL),
                   ('cl_c', 3, 'CONTINUED_AS_NEW', NULL, NULL, 'par', 5, NULL),
                   ('kid', NULL, NULL, NULL, NULL, 'par', 6, NULL),
                   ('cl_d', 4, 'COMPLETED', '"d"', NULL, NULL, NULL, NULL),
                   ('min', NULL, NULL, NULL, NULL, 'cl_d', 1, 'terminate'),
                   ('aba', NULL, NULL, NULL, NULL, 'cl_d', 2, 'abandon'),
                   ('cl_e', 5, 'TERMINATED', NULL, '{"reason": "stop"}', NULL, NULL, NULL))
    AS v (k, n, status, output, failure, parent, seq, policy);
SELECT pg_temp.start_run(r.g || '_' || r.k, 'core_wf', 'acq_' || r.g || '_' || r.k) FROM ac_runs AS r;
UPDATE harvest.executions AS e
SET parent_id = pg_temp.run(r.g || '_' || r.parent), parent_seq = r.seq,
    parent_close_policy = coalesce(r.policy, e.parent_close_policy)
FROM ac_runs AS r WHERE e.id = pg_temp.run(r.g || '_' || r.k) AND r.parent IS NOT NULL;
INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq, status)
SELECT pg_temp.run(r.g || '_cl_a'), 'timer', 'acq_' || r.g || '_cl_a', now() + interval '1 hour', now(), 1, 'pending'
FROM (SELECT DISTINCT g FROM ac_runs) AS r;
INSERT INTO harvest.result_waiters (execution_id, waiter_id, since)
SELECT pg_temp.run(r.g || '_' || w.k), w.waiter, now()
FROM (SELECT DISTINCT g FROM ac_runs) AS r
CROSS JOIN (VALUES ('cl_a', '00000000-0000-4000-8000-00000000000a'::uuid), ('cl_a', '00000000-0000-4000-8000-00000000000b'),
                   ('cl_e', '00000000-0000-4000-8000-00000000000a')) AS w (k, waiter);
UPDATE harvest.executions AS e SET status = r.status, output = r.output, failure = r.failure, completed_at = now()
FROM ac_runs AS r WHERE e.id = pg_temp.run(r.g || '_' || r.k) AND r.n IS NOT NULL;
SELECT lives_ok(
    $$SELECT harvest._after_closes(array_agg(e.id ORDER BY r.n), array_agg(e.status ORDER BY r.n),
                                   array_agg(e.output ORDER BY r.n), array_agg(e.failure ORDER BY r.n),
                                   array_agg(e.parent_id ORDER BY r.n), array_agg(e.parent_seq ORDER BY r.n))
      FROM ac_runs AS r JOIN harvest.executions AS e ON e.id = pg_temp.run(r.g || '_' || r.k)
      WHERE r.g = 'g1' AND r.n IS NOT NULL$$,
    '_after_closes(): group g1''s five closes in one call');
DO $$
DECLARE
    v record;
BEGIN
    FOR v IN SELECT e.* FROM ac_runs AS r JOIN harvest.executions AS e ON e.id = pg_temp.run(r.g || '_' || r.k)
             WHERE r.g = 'g2' AND r.n IS NOT NULL ORDER BY r.n LOOP
        PERFORM harvest._after_close(v.id, v.status, v.output, v.failure, v.parent_id, v.parent_seq);
    END LOOP;
END;
$$;
-- A group's rows, its runs' ids written as their keys.
CREATE FUNCTION pg_temp.ac_keyed(p_g text, p_text text) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    v record;
BEGIN
    FOR v IN SELECT r.k, pg_temp.run(p_g || '_' || r.k) AS id FROM ac_runs AS r WHERE r.g = p_g LOOP
        p_text := replace(p_text, v.id::text, v.k);
    END LOOP;
    RETURN replace(p_text, p_g || '_', '');  -- (workflow ids and queues)
END;
$fn$;
CREATE FUNCTION pg_temp.ac_rows(p_g text) RETURNS TABLE (what text, k text, detail text) LANGUAGE sql AS $fn$
    SELECT 'run', r.k, pg_temp.ac_keyed(p_g, concat_ws(' ', e.status, e.output, e.failure, e.last_event_id))
    FROM ac_runs AS r JOIN harvest.executions AS e ON e.id = pg_temp.run(p_g || '_' || r.k) WHERE r.g = p_g
    UNION ALL
    SELECT 'event', r.k, pg_temp.ac_keyed(p_g, concat_ws(' ', ev.event_id, ev.event_type, ev.event_data))
    FROM ac_runs AS r JOIN harvest.events AS ev ON ev.execution_id = pg_temp.run(p_g || '_' || r.k) WHERE r.g = p_g
    UNION ALL
    SELECT 'task', r.k, concat_ws(' ', t.kind, t.status, t.seq)
    FROM ac_runs AS r JOIN harvest.tasks AS t ON t.execution_id = pg_temp.run(p_g || '_' || r.k) WHERE r.g = p_g
    UNION ALL
    SELECT 'waiter', r.k, w.waiter_id::text
    FROM ac_runs AS r JOIN harvest.result_waiters AS w ON w.execution_id = pg_temp.run(p_g || '_' || r.k)
    WHERE r.g = p_g
    UNION ALL
    SELECT 'relay', r.k, pg_temp.ac_keyed(p_g, concat_ws(' ', l.kind, l.payload))
    FROM ac_runs AS r JOIN harvest.relays AS l ON l.target_execution_id = pg_temp.run(p_g || '_' || r.k)
    WHERE r.g = p_g
    UNION ALL
    -- The waiters' lock of each closed run ('WAIT', the run), taken.
    SELECT 'wait_lock', r.k, count(l.*)::text
    FROM ac_runs AS r
    LEFT JOIN pg_locks AS l
        ON l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.granted AND l.mode = 'ExclusiveLock'
       AND l.classid = 1463896404
       AND l.objid::bigint = (hashtext(pg_temp.run(p_g || '_' || r.k)::text)::bigint + 4294967296) % 4294967296
    WHERE r.g = p_g AND r.n IS NOT NULL
    GROUP BY r.k;
$fn$;
SELECT set_eq($$SELECT * FROM pg_temp.ac_rows('g1')$$, $$SELECT * FROM pg_temp.ac_rows('g2')$$,
              '_after_closes() leaves the rows _after_close of each run in turn leaves');
SELECT results_eq(
    $$SELECT k, detail FROM pg_temp.ac_rows('g1') WHERE what = 'event' AND k = 'par' AND detail NOT LIKE '1 %'
      ORDER BY detail$$,
    $$VALUES ('par', '2 ChildWorkflowCompleted {"seq": 3, "result": 5, "child_execution_id": "cl_a"}'),
             ('par', '3 ChildWorkflowFailed {"seq": 4, "status": "FAILED", "failure": {"message": "no"}, "child_execution_id": "cl_b"}')$$,
    '... the parent hears of its closed children in order, not of the one continued as new');
SELECT results_eq(
    $$SELECT k, detail FROM pg_temp.ac_rows('g1') WHERE what = 'run' AND k IN ('min', 'aba', 'kid') ORDER BY k$$,
    $$VALUES ('aba', 'RUNNING 1'), ('kid', 'RUNNING 1'),
             ('min', 'TERMINATED {"details": null, "message": "the parent workflow closed", "error_type": "Terminated", "non_retryable": true} 2')$$,
    '... a closed parent''s live child is terminated by its policy, an abandoned one and an open sibling go on');
SELECT is((SELECT array_agg(k ORDER BY k) FROM pg_temp.ac_rows('g1') WHERE what = 'task'),
          ARRAY['aba', 'kid', 'par'],
          '... every closed run''s tasks go (a timer too), the terminated child''s with them');
SELECT is_empty($$SELECT * FROM pg_temp.ac_rows('g1') WHERE what IN ('waiter', 'relay')$$,
                '... their result waiters go, and no relay is left');
SELECT is((SELECT array_agg(k || '=' || detail ORDER BY k) FROM pg_temp.ac_rows('g1') WHERE what = 'wait_lock'),
          ARRAY['cl_a=1', 'cl_b=1', 'cl_c=1', 'cl_d=1', 'cl_e=1'],
          '... each closed run''s waiters lock taken');
-- _close_relays: the one rule both probe by (a parent to tell, a live child, a child on another
-- shard); one row, inlined into the query that reads it.
SELECT is((SELECT r FROM harvest._close_relays(gen_random_uuid(), 'COMPLETED', NULL) AS r), false,
          '_close_relays(): no parent, no child: nothing to relay');
SELECT is((SELECT r FROM harvest._close_relays(gen_random_uuid(), 'FAILED', gen_random_uuid()) AS r), true,
          '... a parent to tell');
SELECT is((SELECT r FROM harvest._close_relays(gen_random_uuid(), 'CONTINUED_AS_NEW', gen_random_uuid()) AS r),
          false, '... but not after a continue-as-new (its successor keeps the link)');
SELECT is((SELECT r FROM harvest._close_relays(pg_temp.run('g1_par'), 'COMPLETED', NULL) AS r), true,
          '... a live child with a close policy (par''s kid)');
SELECT is((SELECT r FROM harvest._close_relays(pg_temp.run('g1_cl_d'), 'COMPLETED', NULL) AS r), false,
          '... but not a live child it abandons (cl_d''s aba; min was terminated above)');
SELECT unalike(pg_temp.plan_of('SELECT (SELECT r FROM harvest._close_relays(e.id, e.status, e.parent_id) AS r)
                                FROM harvest.executions AS e'),
               '%_close_relays(%', '... inlined into its caller''s query');
SELECT has_function('harvest', '_after_closes', ARRAY['uuid[]', 'text[]', 'jsonb[]', 'jsonb[]', 'uuid[]', 'integer[]'],
                    'harvest._after_closes(uuid[], text[], jsonb[], jsonb[], uuid[], integer[]) exists');
SELECT has_function('harvest', '_relay_close', ARRAY['uuid', 'text', 'jsonb', 'jsonb', 'uuid', 'integer'],
                    'harvest._relay_close(uuid, text, jsonb, jsonb, uuid, integer) exists');
SELECT * FROM finish();
ROLLBACK;

-- Numbers and booleans read out of a caller's JSON: _json_integer, _json_bigint, _json_number,
-- _json_boolean, and their one refusal, _refuse_json_value (HR001 naming the field), which
-- cuts a long value (_clipped).
BEGIN;
SELECT plan(33);
SELECT is(harvest._clipped(repeat('x', 61)), repeat('x', 40) || '... (61 characters)',
          '_clipped(): a long value: its first 40 characters and its length');
SELECT is(harvest._clipped(repeat('x', 60)), repeat('x', 60), '_clipped(): a short one whole');
CREATE FUNCTION pg_temp.json_refusal(p_sql text) RETURNS jsonb LANGUAGE plpgsql AS $fn$
DECLARE
    v_state text;
    v_message text;
    v_detail text;
    v_hint text;
BEGIN
    EXECUTE p_sql;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL,
                            v_hint = PG_EXCEPTION_HINT;
    RETURN jsonb_build_object('state', v_state, 'message', v_message, 'detail', v_detail::jsonb, 'hint', v_hint);
END;
$fn$;
SELECT is(harvest._json_integer('2', 'priority'), 2, '_json_integer(): a whole number');
SELECT is(harvest._json_integer('2.0', 'priority'), 2,
          '... 2.0 too (JSON has no integer type: a float serialiser writes it so)');
SELECT is(harvest._json_integer('1e3', 'priority'), 1000, '... and 1e3');
SELECT is(harvest._json_integer('-1', 'priority'), -1, '... negative within the range');
SELECT is(harvest._json_integer('null', 'priority'), NULL, '... JSON null is none (the caller''s default)');
SELECT is(harvest._json_integer(NULL, 'priority'), NULL, '... and so is no value at all');
SELECT is(harvest._json_integer('2147483647', 'priority'), 2147483647, '... up to the 32-bit maximum');
SELECT throws_ok($$SELECT harvest._json_integer('2.5', 'retry.max_attempts', 1)$$, 'HR001',
                 'retry.max_attempts must be a whole number from 1 to 2147483647, got 2.5',
                 '... a fraction is refused (HR001), naming the field and the value, not cast raw (22P02)');
SELECT throws_ok($$SELECT harvest._json_integer('"3"', 'priority')$$, 'HR001', NULL, '... a string "3" too');
SELECT throws_ok($$SELECT harvest._json_integer('true', 'priority')$$, 'HR001', NULL, '... a boolean');
SELECT throws_ok($$SELECT harvest._json_integer('[1]', 'priority')$$, 'HR001', NULL, '... an array');
SELECT throws_ok($$SELECT harvest._json_integer('{"n": 1}', 'priority')$$, 'HR001', NULL, '... an object');
SELECT throws_ok($$SELECT harvest._json_integer('2147483648', 'priority')$$, 'HR001', NULL,
                 '... a number past the 32-bit range (not 22003)');
SELECT throws_ok($$SELECT harvest._json_integer('0', 'retry.max_attempts', 1)$$, 'HR001', NULL,
                 '... a number under the caller''s minimum');
SELECT throws_ok($$SELECT harvest._json_integer('1e400', 'priority')$$, 'HR001', NULL, '... and 1e400');
SELECT is(pg_temp.json_refusal($$SELECT harvest._json_integer('1e400', 'priority')$$) ->> 'message',
          'priority must be a whole number from -2147483648 to 2147483647, got 1000000000000000000000000000000000000000... (401 characters)',
          '... whose 401 digits the message shortens');
SELECT is(pg_temp.json_refusal($$SELECT harvest._json_integer('2.5', 'max_active_runs', 1, p_where => 'schedule s')$$)
          - 'hint',
          '{"state": "HR001", "message": "schedule s: max_active_runs must be a whole number from 1 to 2147483647, got 2.5",
            "detail": {"field": "max_active_runs", "given": "2.5"}}'::jsonb,
          '_refuse_json_value(): p_where says whose field; DETAIL names the field and the value given');
SELECT is(pg_temp.json_refusal($$SELECT harvest._json_integer('"3"', 'priority')$$) ->> 'hint',
          'send a whole number from -2147483648 to 2147483647 as a JSON value, not in a string (3, not "3")',
          '... a string''s HINT says to send the number itself');
SELECT throws_ok($$SELECT harvest._refuse_json_value('2.5', 'f', 'a whole number', NULL)$$, 'HR001',
                 'f must be a whole number, got 2.5', 'harvest._refuse_json_value(): the one refusal, HR001');
SELECT is(harvest._json_bigint('3155760000', 'interval_secs', 1, 3155760000), 3155760000::bigint,
          '_json_bigint(): past the 32-bit range, for a bigint column');
SELECT throws_ok($$SELECT harvest._json_bigint('3155760000.5', 'interval_secs', 1, 3155760000)$$, 'HR001', NULL,
                 '... by the same rule');
SELECT is(harvest._json_number('2.5', 'jitter_secs'), 2.5::double precision, '_json_number(): a number');
SELECT is(harvest._json_number('null', 'jitter_secs'), NULL, '... JSON null is none');
SELECT throws_ok($$SELECT harvest._json_number('"2.5"', 'jitter_secs')$$, 'HR001', NULL,
                 '... a string is refused (a raw ::double precision cast took it)');
SELECT throws_ok($$SELECT harvest._json_number('1e400', 'jitter_secs', 0, 'Infinity')$$, 'HR001', NULL,
                 '... and a number no double holds');
SELECT throws_ok($$SELECT harvest._json_number('-1', 'jitter_secs')$$, 'HR001',
                 'jitter_secs must be a number from 0 to 3155760000, got -1', '... or one out of range');
SELECT is(harvest._json_boolean('false', 'catchup'), false, '_json_boolean(): true or false');
SELECT is(harvest._json_boolean('null', 'catchup'), NULL, '... JSON null is none');
SELECT throws_ok($$SELECT harvest._json_boolean('"yes"', 'catchup')$$, 'HR001', NULL,
                 '... a string is refused (a raw ::boolean cast took "yes")');
SELECT throws_ok($$SELECT harvest._json_boolean('1', 'catchup')$$, 'HR001',
                 'catchup must be true or false, got 1', '... and a number');
SELECT unalike(pg_temp.plan_of('SELECT harvest._json_integer(t.options -> ''priority'', ''priority'') FROM harvest.tasks AS t'),
               '%_json_integer(%', '_json_integer(): inlined into its caller''s query (a refusal is the only call)');
SELECT * FROM finish();
ROLLBACK;
