-- functions/event_streams.sql: harvest._notify_events, harvest._live_event_listeners, heartbeat_event_stream,
-- stop_event_stream, list_events, get_event_horizon.
BEGIN;
SELECT plan(23);

SELECT lives_ok($$SELECT harvest.heartbeat_event_stream('host:1:a')$$, 'heartbeat_event_stream() registers a listener');
SELECT lives_ok($$SELECT harvest.heartbeat_event_stream('host:1:a')$$, '... and again refreshes it');
SELECT is((SELECT count(*) FROM harvest.event_stream_listeners), 1::bigint, 'one row per listener');
SELECT throws_ok($$SELECT harvest.heartbeat_event_stream(' ')$$, 'HR001', NULL,
                 'heartbeat_event_stream() of a blank id: HR001');
SELECT lives_ok($$SELECT harvest._notify_events(gen_random_uuid())$$,
                '_notify_events() notifies while a listener is fresh (tests/web/test_streams.py hears it)');
-- _live_event_listeners: the listeners whose heartbeat is under 30 s old, inlined where it is read.
INSERT INTO harvest.event_stream_listeners (listener_id, heartbeat_at) VALUES ('host:2:stale', now() - interval '31 seconds');
SELECT results_eq($$SELECT listener_id FROM harvest._live_event_listeners() ORDER BY listener_id$$,
                  $$VALUES ('host:1:a'::text)$$, '_live_event_listeners(): the listeners heard from within 30 s');
DELETE FROM harvest.event_stream_listeners WHERE listener_id = 'host:2:stale';
SELECT unalike(pg_temp.plan_of('SELECT EXISTS (SELECT 1 FROM harvest._live_event_listeners())'),
               '%_live_event_listeners%', '_live_event_listeners() is inlined into the query that reads it');
SELECT alike(pg_temp.plan_of('SELECT EXISTS (SELECT 1 FROM harvest._live_event_listeners())'),
             '%event_stream_listeners%', '... which reads the listeners'' table itself');
-- A listener belongs to its login: another login's row of the same id is neither refreshed nor removed.
INSERT INTO harvest.event_stream_listeners (listener_id, heartbeat_at, login)
VALUES ('host:1:a', now() - interval '20 seconds', 'someone_else');
SELECT harvest.heartbeat_event_stream('host:1:a');
SELECT is(harvest.stop_event_stream('host:1:a'), true, 'stop_event_stream() removes the listener');
SELECT is(harvest.stop_event_stream('host:1:a'), false, '... once');
SELECT is((SELECT login || ' ' || (heartbeat_at < now()) FROM harvest.event_stream_listeners), 'someone_else true',
          '... its own login''s row only: another login''s row of the same id stays, not refreshed');
DELETE FROM harvest.event_stream_listeners;

SELECT pg_temp.start_run('es1', 'es_wf', 'es_q');
SELECT pg_temp.start_run('es2', 'es_wf', 'es_q');
SELECT results_eq($$SELECT event_type, workflow_id FROM harvest.list_events(0, 10, pg_temp.run('es2'))$$,
                  $$VALUES ('WorkflowStarted'::text, 'es2'::text)$$,
                  'list_events() of one execution, with its workflow id');
SELECT results_eq($$SELECT workflow_id FROM harvest.list_events(
                        (SELECT ev.global_id FROM harvest.events AS ev WHERE ev.execution_id = pg_temp.run('es1')), 10)$$,
                  $$VALUES ('es2'::text)$$, 'list_events() after a global id: the events after it, in order');
SELECT ok((SELECT max(ev.global_id) FILTER (WHERE ev.execution_id = pg_temp.run('es1'))
                  < min(ev.global_id) FILTER (WHERE ev.execution_id = pg_temp.run('es2')) FROM harvest.events AS ev),
          'global ids follow the order of appends');
SELECT results_eq($$SELECT bytes FROM harvest.list_events(0, 10, pg_temp.run('es2'), 1000000)$$,
                  $$SELECT octet_length(ev.event_data::text) FROM harvest.events AS ev WHERE ev.execution_id = pg_temp.run('es2')$$,
                  'list_events() of p_max_bytes: each event''s size, the bytes of its data as JSON text');
SELECT results_eq($$SELECT bytes FROM harvest.list_events(0, 10, pg_temp.run('es2'))$$, $$VALUES (NULL::integer)$$,
                  'list_events() without p_max_bytes sizes no event (bytes NULL)');
SELECT results_eq($$SELECT global_id, event_data FROM harvest.list_events(0, 10)$$,
                  $$SELECT global_id, event_data FROM harvest.list_events(0, 10, NULL, 1000000)$$,
                  'with or without a bound that is not reached, the same page');
SELECT is((SELECT count(*) FROM harvest.list_events(0, 10, NULL, 1)), 1::bigint,
          'list_events() of p_max_bytes: the page ends with the event that reaches it (the first, always)');
SELECT throws_ok($$SELECT * FROM harvest.list_events(0, 10, NULL, 0)$$, 'HR001', 'max bytes 0 is not positive',
                 'list_events() of a bad p_max_bytes: HR001');
SELECT throws_ok($$SELECT * FROM harvest.list_events(0, 0)$$, 'HR001', 'limit 0 is out of range 1..10000',
                 'list_events() of a bad limit: HR001');
SELECT ok((SELECT last_global_id >= (SELECT max(global_id) FROM harvest.events) FROM harvest.get_event_horizon()),
          'get_event_horizon(): the last global id handed out');
SELECT ok((SELECT xmin <= xmax AND xmin <= pg_current_xact_id()::text::bigint FROM harvest.get_event_horizon()),
          'get_event_horizon(): the snapshot''s xmin, at most this transaction, and xmax');
SELECT ok((SELECT xmax > pg_current_xact_id()::text::bigint FROM harvest.get_event_horizon()),
          'get_event_horizon(): xmax is above every running transaction, this one (the newest) included');

SELECT * FROM finish();
ROLLBACK;
