-- functions/flow_throttle.sql: harvest._check_start_gates, harvest._throttle_take, harvest._start_gate,
-- harvest._start_gate_key, harvest._start_gate_lock, harvest._lock_start_gates, harvest._pending_start_args,
-- harvest._own_run_less_payloads, harvest._release_pending_start, harvest._try_release_pending_start,
-- harvest.release_pending_starts, harvest.list_pending_starts, the gates in start_workflow, and the pacing override:
-- harvest._throttle_override_spec, harvest.get_start_throttle, harvest.set_start_throttle_override,
-- harvest.clear_start_throttle_override, harvest.get_start_gate; discarding: harvest.discard_pending_start,
-- harvest.discard_pending_starts, harvest._discard_pending_start, harvest._pending_start_summary,
-- harvest._pending_start_payloads.
BEGIN;
SELECT plan(68);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT harvest.declare_flow_policies('{"workflows": {
    "wf_t": {"throttle": {"rps": 2, "burst": 2, "key": null}},
    "wf_d": {"debounce": {"key": "input.doc", "quiet_secs": 5, "max_wait_secs": 12}},
    "wf_b": {"batch": {"key": null, "max_size": 3, "window_secs": 10}},
    "wf_bk": {"batch": {"key": "input.tenant", "max_size": 3, "window_secs": 10}},
    "wf_o": {"throttle": {"rps": 1, "burst": 1}},
    "wf_k": {"throttle": {"rps": 1, "burst": 1, "key": "input.tenant"}}}}');

-- _check_start_gates
SELECT throws_ok($$SELECT harvest._check_start_gates('x', '{"throttle": {"rps": 1}, "debounce": {"quiet_secs": 1}}')$$,
                 'HR001', NULL, '_check_start_gates(): two gates at once are refused');
SELECT throws_ok($$SELECT harvest.declare_flow_policies('{"workflows": {"x": {"batch": {"max_size": 0, "window_secs": 1}}}}')$$,
                 'HR001', NULL, 'declare_flow_policies checks the gates (batch max_size >= 1)');
SELECT lives_ok($$SELECT harvest._check_start_gates('x', '{"quota": {"key": "input"}}')$$,
                '_check_start_gates(): a policy without a gate');

-- throttle: burst 2 starts at once, the third is deferred
CREATE TEMP TABLE t ON COMMIT DROP AS
SELECT n, s.* FROM generate_series(1, 4) AS n,
    LATERAL harvest.start_workflow('wf_t', jsonb_build_array(n), 't' || n, 'tq') AS s;
SELECT results_eq($$SELECT status, execution_id IS NULL FROM t ORDER BY n$$,
    $$VALUES ('RUNNING'::text, false), ('RUNNING', false), ('DEFERRED', true), ('DEFERRED', true)$$,
    'throttle: the burst starts, the rest are DEFERRED with no execution id');
SELECT is((SELECT workflow_id FROM t WHERE n = 3), 't3', 'a deferred start returns its workflow_id');
SELECT throws_ok($$SELECT harvest.start_workflow('wf_t', '[1]', 'tx', 'tq', 'allow_duplicate', 'use_existing')$$,
                 'HR001', NULL, 'a conflict policy with a throttle is refused');
-- update_with_start is never held back (its update's argument is never a pending start's):
-- refused on a gated workflow, by the same rule, before the gate takes a token or fills a batch.
SELECT throws_like($$SELECT * FROM harvest.update_with_start('wf_t', 't3', 'bump', '"x"', '[3]', 'tq')$$,
                   '%(which signal_with_start and update_with_start use)%',
                   'update_with_start on a throttled workflow (its key held back) is refused');
SELECT throws_like($$SELECT * FROM harvest.update_with_start('wf_b', 'bu', 'bump', '"x"', '["a"]', 'bq')$$,
                   '%(which signal_with_start and update_with_start use)%',
                   'update_with_start on a batched workflow is refused');
SELECT is(harvest.release_pending_starts(), 0, 'release_pending_starts(): no token yet');
SELECT set_config('harvest.fake_now', '2030-01-01 00:00:00.5+00', true);
SELECT is(harvest.release_pending_starts(), 1, 'half a second at 2 rps: one more start (FIFO)');
SELECT is((SELECT status FROM harvest.executions WHERE workflow_id = 't3'), 'RUNNING', 'the oldest deferred start ran first');
SELECT is((SELECT count(*)::integer FROM harvest.list_pending_starts('wf_t')), 1, 'list_pending_starts(): one left');
SELECT set_config('harvest.fake_now', '2030-01-01 00:00:10+00', true);
SELECT is(harvest._throttle_take('wf_t', '', '{"rps": 2, "burst": 2}', 1), 1, '_throttle_take(): a refilled bucket pays');
SELECT is(harvest.release_pending_starts(), 1, 'the last deferred start is released');

-- debounce: a burst per key collapses into one run with the latest input
SELECT set_config('harvest.fake_now', '2030-01-02 00:00:00+00', true);
SELECT harvest.start_workflow('wf_d', '[{"doc": "a", "v": 1}]', NULL, 'dq');
SELECT set_config('harvest.fake_now', '2030-01-02 00:00:03+00', true);
SELECT is((SELECT status FROM harvest.start_workflow('wf_d', '[{"doc": "a", "v": 2}]', NULL, 'dq')), 'DEFERRED',
          'debounce: DEFERRED');
SELECT harvest.start_workflow('wf_d', '[{"doc": "b", "v": 9}]', NULL, 'dq');
SELECT results_eq($$SELECT gate_key, starts, release_at FROM harvest.list_pending_starts('wf_d')$$,
    $$VALUES ('a'::text, 2, '2030-01-02 00:00:08+00'::timestamptz), ('b', 1, '2030-01-02 00:00:08+00')$$,
    'one row per key; each start pushes the release quiet_secs later');
SELECT set_config('harvest.fake_now', '2030-01-02 00:00:07+00', true);
SELECT harvest.start_workflow('wf_d', '[{"doc": "a", "v": 3}]', NULL, 'dq');
SELECT is((SELECT release_at FROM harvest.list_pending_starts('wf_d') WHERE gate_key = 'a'),
          '2030-01-02 00:00:12+00'::timestamptz, 'max_wait_secs caps the push');
SELECT set_config('harvest.fake_now', '2030-01-02 00:00:08+00', true);
SELECT is(harvest.release_pending_starts(), 1, 'the quiet key b is released');
SELECT set_config('harvest.fake_now', '2030-01-02 00:00:12+00', true);
SELECT is(harvest.release_pending_starts(), 1, 'key a is released at its max wait');
SELECT is((SELECT input FROM harvest.executions WHERE workflow_name = 'wf_d' AND input -> 0 ->> 'doc' = 'a'),
          '[{"doc": "a", "v": 3}]'::jsonb, 'one run per burst, with the latest input');

-- batch: max_size starts make one run with the collected inputs
SELECT harvest.start_workflow('wf_b', '["x"]', NULL, 'bq');
SELECT harvest.start_workflow('wf_b', '["y"]', NULL, 'bq');
SELECT results_eq($$SELECT status, execution_id IS NOT NULL, started_fresh FROM harvest.start_workflow('wf_b', '["z"]', NULL, 'bq')$$,
    $$VALUES ('RUNNING'::text, true, true)$$, 'the start that fills the batch gets the run');
SELECT is((SELECT input FROM harvest.executions WHERE workflow_name = 'wf_b'), '[["x", "y", "z"]]'::jsonb,
          'the batched run receives the list of the arguments');
SELECT throws_ok($$SELECT harvest.start_workflow('wf_b', '[1, 2]', NULL, 'bq')$$, 'HR001', NULL,
                 'a batched start passes exactly one argument');
-- A batched argument is bounded a level tighter: its run receives [[argument, ...]]. One of 199
-- levels passes a start's check (its input, 200) but not the batch's run (201): it made every
-- release of its batch fail (retried, the others' arguments held) and every start that filled it.
SELECT throws_like($$SELECT harvest.start_workflow('wf_b', ('[' || repeat('[', 199) || repeat(']', 199) || ']')::jsonb, NULL, 'bq')$$,
                   'the argument of workflow wf_b, which batches its starts%nest deeper than 200 levels',
                   '_start_gate(): a batched argument whose batch''s input would nest past 200 levels is refused (HR001)');
SELECT is((SELECT count(*)::integer FROM harvest.pending_starts WHERE workflow_name = 'wf_b'), 0,
          '... and joins no batch');
SELECT results_eq($$SELECT status FROM harvest.start_workflow('wf_b', ('[' || repeat('[', 198) || repeat(']', 198) || ']')::jsonb, NULL, 'bq')$$,
    $$VALUES ('DEFERRED'::text)$$, '_start_gate(): a batched argument of 198 levels is held back (its run''s input is 200 deep)');
DELETE FROM harvest.pending_starts WHERE workflow_name = 'wf_b';
SELECT throws_ok($$SELECT harvest.start_workflow('wf_bk', '[{"x": 1}, 2]', NULL, 'bq')$$, 'HR001', NULL,
                 'a batched start passes exactly one argument, also when its key value is missing (it started a run)');
SELECT harvest.start_workflow('wf_b', '["w"]', NULL, 'bq');
-- A batch records each login whose argument it collects: its release hands their rows.
UPDATE harvest.pending_starts SET logins = ARRAY['someone_else'] WHERE kind = 'batch';
SELECT harvest.start_workflow('wf_b', '["v"]', NULL, 'bq');
SELECT is((SELECT logins FROM harvest.pending_starts WHERE kind = 'batch'), ARRAY['someone_else', session_user::text],
          '_start_gate(): a batch records the logins whose arguments it collected');
SELECT ok(harvest._try_release_pending_start((SELECT p FROM harvest.pending_starts AS p WHERE kind = 'batch')),
          '_try_release_pending_start(): a window-expired batch is started');
SELECT harvest.start_workflow('wf_d', '[{"doc": "c"}]', 'dc', 'dq');
SELECT is((SELECT s.status FROM harvest.pending_starts AS p,
           LATERAL harvest._release_pending_start(p) AS s WHERE p.kind = 'debounce'), 'RUNNING',
          '_release_pending_start() starts a pending start now (it skips the gates)');
-- Trace context: a deferred start keeps its caller's span and the released run continues it.
SELECT harvest.start_workflow('wf_d', '[{"doc": "t"}]', 'dt', 'dq', p_traceparent => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
UPDATE harvest.pending_starts SET logins = ARRAY['someone_else'] WHERE kind = 'debounce';
SELECT harvest.start_workflow('wf_d', '[{"doc": "t", "v": 2}]', 'dt', 'dq');
SELECT is((SELECT logins FROM harvest.pending_starts WHERE kind = 'debounce'), ARRAY[session_user::text],
          '_start_gate(): a debounce records its latest caller''s login, whose input it now holds');
SELECT is((SELECT traceparent FROM harvest.pending_starts WHERE kind = 'debounce'), '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
          '_start_gate(): a debounced burst keeps the latest caller''s span (a start with none keeps it)');
CREATE TEMP TABLE released_traced ON COMMIT DROP AS
SELECT s.execution_id FROM harvest.pending_starts AS p, LATERAL harvest._release_pending_start(p) AS s
WHERE p.kind = 'debounce';
SELECT is((SELECT ev.event_data ->> 'traceparent' FROM released_traced AS r
           JOIN harvest.events AS ev ON ev.execution_id = r.execution_id AND ev.event_type = 'WorkflowStarted'),
          '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', '_release_pending_start(): the released run continues the deferred caller''s span');
SELECT results_eq($$SELECT action, release IS NULL FROM harvest._start_gate('wf_b',
        '{"batch": {"max_size": 5, "window_secs": 1}}', '["q"]', 'wid', 'bq', 'allow_duplicate', '{}', 0, NULL, NULL)$$,
    $$VALUES ('deferred'::text, true)$$, '_start_gate(): a batch start is deferred');
SELECT results_eq($$SELECT action, workflow_id, (release).input, (release).starts FROM harvest._start_gate('wf_b',
        '{"batch": {"max_size": 2, "window_secs": 1}}', '["r"]', 'wid2', 'bq', 'allow_duplicate', '{}', 0, NULL, NULL)$$,
    $$VALUES ('release'::text, 'wid'::text, '["q", "r"]'::jsonb, 2)$$,
    '_start_gate(): the start that fills a batch hands back its pending row to start (release), under the first start''s id');
SELECT is_empty($$SELECT 1 FROM harvest.pending_starts WHERE kind = 'batch'$$,
    '_start_gate(): ... and takes that row off the queue (a later start of the key opens the next batch)');
SELECT is((SELECT count(*)::integer FROM harvest.executions WHERE parent_id IS NULL AND workflow_name = 'wf_b'), 2,
          'nothing else started');
SELECT is(ARRAY[harvest._start_gate_key('{"throttle": {"rps": 1}}', '[{"t": "a"}]'),
                harvest._start_gate_key('{"batch": {"key": "input.t"}}', '[{"t": "a"}]'),
                harvest._start_gate_key('{"debounce": {"key": "input.t"}}', '[{"v": 1}]'),
                harvest._start_gate_key('{"quota": {"key": "input.t"}}', '[{"t": "a"}]')],
          ARRAY['', 'a', NULL, NULL],
          '_start_gate_key(): empty for a gate without a key, the key''s value, NULL without a value or a gate');
SELECT is(harvest._pending_start_args(jsonb_populate_record(NULL::harvest.pending_starts,
              '{"kind": "batch", "workflow_name": "wf_b", "workflow_id": "w-1", "input": ["a", "b"],
                "reuse_policy": "terminate_if_running"}')),
          '{"workflow_name": "wf_b", "workflow_id": "w-1", "input": [["a", "b"]], "reuse_policy": "terminate_if_running"}',
          '_pending_start_args(): the start a released batch makes, its input the list of the arguments');
SELECT is(harvest._start_gate_lock('wf_t', 'a'), hashtext('harvest.start_gate:wf_t:a')::bigint,
          '_start_gate_lock(): the advisory lock of a (workflow, key) gate');
SELECT lives_ok($$SELECT harvest._lock_start_gates('[{"workflow_name": "wf_k", "input": [{"tenant": "b"}]},
        {"workflow_name": "wf_k", "input": [{"tenant": "a"}]}, {"workflow_name": "wf_k", "input": [{"v": 1}]},
        {"workflow_name": "wf_unknown"}, 7, {"workflow_name": "wf_t", "input": {}}]')$$,
    '_lock_start_gates(): elements without a gate or not well formed are passed');
SELECT is(ARRAY(SELECT l.objid::bigint FROM pg_locks AS l
                WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.objsubid = 1
                  AND l.objid::bigint IN (harvest._start_gate_lock('wf_k', 'a') & 4294967295,
                                          harvest._start_gate_lock('wf_k', 'b') & 4294967295,
                                          harvest._start_gate_lock('wf_k', '') & 4294967295)
                ORDER BY 1),
          ARRAY(SELECT v & 4294967295 FROM unnest(ARRAY[harvest._start_gate_lock('wf_k', 'a'),
                                                         harvest._start_gate_lock('wf_k', 'b')]) AS v ORDER BY 1),
          '_lock_start_gates(): the gates of the gated starts with a key value, held to the commit');
-- A declared key path whose value is missing: no key, so no gate (throttle, debounce, batch).
SELECT results_eq($$SELECT action, release IS NULL, workflow_id FROM harvest._start_gate('wf_d',
        '{"debounce": {"key": "input.doc", "quiet_secs": 5}}', '[{"v": 1}]', 'nodoc', 'dq', 'allow_duplicate', '{}', 0, NULL, NULL)$$,
    $$VALUES ('start'::text, true, 'nodoc'::text)$$, '_start_gate(): a debounce start without its key value goes ahead');
SELECT results_eq($$SELECT action FROM harvest._start_gate('wf_b',
        '{"batch": {"key": "input.t", "max_size": 5, "window_secs": 1}}', '[{"v": 1}]', NULL, 'bq', 'allow_duplicate', '{}', 0, NULL, NULL)$$,
    $$VALUES ('start'::text)$$, '_start_gate(): a batch start without its key value goes ahead');
SELECT results_eq($$SELECT status FROM harvest.start_workflow('wf_k', '[{"v": 1}]', 'k-none-1', 'kq')
                   UNION ALL SELECT status FROM harvest.start_workflow('wf_k', '[{"v": 2}]', 'k-none-2', 'kq')$$,
    $$VALUES ('RUNNING'::text), ('RUNNING')$$, 'throttle: starts without their key value are not paced (burst 1, both run)');
SELECT is_empty($$SELECT 1 FROM harvest.pending_starts WHERE gate_key = '' AND workflow_name IN ('wf_d', 'wf_k')$$,
    'nothing is queued under an empty key');
-- get_start_gate: what a sharded client reads to place a start by name
SELECT results_eq($$SELECT workflow_name, kind, key_path FROM harvest.get_start_gate('wf_d')$$,
    $$VALUES ('wf_d'::text, 'debounce'::text, 'input.doc'::text)$$, 'get_start_gate(): a debounce and its key path');
SELECT results_eq($$SELECT kind, key_path FROM harvest.get_start_gate('wf_b')$$,
    $$VALUES ('batch'::text, NULL::text)$$, 'get_start_gate(): a batch without a key (NULL key path)');
SELECT is_empty($$SELECT * FROM harvest.get_start_gate('wf_t')$$, 'get_start_gate(): nothing for a throttle (it defers where it lands)');
-- pacing override of a start throttle
SELECT set_config('harvest.fake_now', '2030-01-03 00:00:00+00', true);
SELECT results_eq($$SELECT workflow_name, rps, burst, override_rps FROM harvest.get_start_throttle('wf_o')$$,
    $$VALUES ('wf_o'::text, 1::double precision, 1::double precision, NULL::double precision)$$,
    'get_start_throttle(): the declared rate, no override');
SELECT is_empty($$SELECT * FROM harvest.get_start_throttle('wf_d')$$, 'get_start_throttle(): nothing for a workflow without one');
SELECT throws_ok($$SELECT * FROM harvest.set_start_throttle_override('wf_d', 5)$$, 'HR002', NULL,
                 'set_start_throttle_override(): HR002 for a workflow with no throttle');
SELECT throws_ok($$SELECT * FROM harvest.set_start_throttle_override('wf_k', 5)$$, 'HR007', NULL,
                 'set_start_throttle_override(): HR007 for a per-key throttle (no single bucket)');
SELECT throws_ok($$SELECT harvest._throttle_override_spec('wf_k')$$, 'HR007', NULL,
                 '_throttle_override_spec() refuses a per-key throttle');
SELECT throws_ok($$SELECT * FROM harvest.set_start_throttle_override('wf_o', 0)$$, 'HR001', NULL,
                 'set_start_throttle_override(): rps must be positive');
SELECT is((SELECT count(*)::integer FROM generate_series(1, 3) AS n,
           LATERAL harvest.start_workflow('wf_o', '[]', 'o' || n, 'oq') AS s WHERE s.status = 'DEFERRED'), 2,
          'at 1 rps, burst 1: one of three starts runs, two are deferred');
SELECT results_eq(
    $$SELECT override_rps, override_burst, override_expires_at
      FROM harvest.set_start_throttle_override('wf_o', 10, 5, 60, 'oncall-ann')$$,
    $$VALUES (10::double precision, 5::double precision, '2030-01-03 00:01:00+00'::timestamptz)$$,
    'set_start_throttle_override(): 10 rps, burst 5, for 60 s');
SELECT results_eq($$SELECT operation, target, operator_id FROM harvest.audit_log ORDER BY id DESC LIMIT 1$$,
    $$VALUES ('start_throttle.override'::text, 'wf_o'::text, 'oncall-ann'::text)$$, 'the override is audited');
SELECT set_config('harvest.fake_now', '2030-01-03 00:00:00.2+00', true);
SELECT harvest.release_pending_starts();
SELECT is((SELECT count(*)::integer FROM harvest.list_pending_starts('wf_o')), 0,
          'a fifth of a second at 10 rps releases both deferred starts');
SELECT set_config('harvest.fake_now', '2030-01-03 00:01:01+00', true);
SELECT is((SELECT override_rps FROM harvest.get_start_throttle('wf_o')), NULL, 'the override expires by itself');
SELECT is(harvest.clear_start_throttle_override('wf_o'), false, 'clear_start_throttle_override(): none was live');
SELECT * FROM harvest.set_start_throttle_override('wf_o', 3);
SELECT is(harvest.clear_start_throttle_override('wf_o', 'bob'), true, 'clear_start_throttle_override(): a live one');

-- _release_pending_start hands the run-less offloaded payloads its input references (a client
-- stored them with the start) to the run it starts: those its starter's login stored, not
-- another login's (a forged reference to another client's held-back input, f2).
INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data, login)
VALUES ('00000000-0000-0000-0000-0000000000f1', NULL, harvest.now(), 6, '"held"', session_user),
       ('00000000-0000-0000-0000-0000000000f2', NULL, harvest.now(), 8, '"theirs"', 'someone_else');
SELECT is((SELECT status FROM harvest.start_workflow('wf_k', '[{"tenant": "pay"}]', 'k-pay-1', 'kq')),
          'RUNNING', 'the first start of the key runs');
SELECT is((SELECT status FROM harvest.start_workflow('wf_k',
    '[{"tenant": "pay"}, {"_harvest_ref": "00000000-0000-0000-0000-0000000000f1", "bytes": 6},
      {"_harvest_ref": "00000000-0000-0000-0000-0000000000f2", "bytes": 8}]', 'k-pay-2', 'kq')),
    'DEFERRED', 'the second waits, its input referencing a run-less payload');
SELECT is((SELECT logins FROM harvest.pending_starts WHERE workflow_id = 'k-pay-2'), ARRAY[session_user::text],
          '_start_gate(): a pending start records the login that made it');
SELECT is((SELECT payload_ids FROM harvest.pending_starts WHERE workflow_id = 'k-pay-2'),
          ARRAY['00000000-0000-0000-0000-0000000000f1'::uuid],
          '_start_gate(): a pending start records the run-less rows of its login that its input references');
SELECT set_config('harvest.fake_now', '2030-01-03 00:02:00+00', true);
SELECT harvest.release_pending_starts();
SELECT is((SELECT p.execution_id FROM harvest.payloads AS p WHERE p.id = '00000000-0000-0000-0000-0000000000f1'),
          (SELECT e.id FROM harvest.executions AS e WHERE e.workflow_id = 'k-pay-2'),
          '_release_pending_start(): the payloads its input references go to the run it starts');
SELECT is((SELECT p.execution_id FROM harvest.payloads AS p WHERE p.id = '00000000-0000-0000-0000-0000000000f2'),
          NULL, '_release_pending_start(): another login''s run-less row its input references stays run-less');
SELECT * FROM finish();
ROLLBACK;

-- A start gate's numbers by the one rule for a JSON field (core.sql, _json_integer), when declared.
BEGIN;
SELECT plan(3);
SELECT throws_ok($$SELECT harvest.declare_flow_policies('{"workflows": {"x": {"batch": {"max_size": 2.5, "window_secs": 1}}}}')$$,
                 'HR001', 'workflow x: batch.max_size must be a whole number from 1 to 2147483647, got 2.5',
                 '_check_start_gates(): a batch of 2.5 starts is HR001 naming it (it was 22P02)');
SELECT throws_ok($$SELECT harvest.declare_flow_policies('{"workflows": {"x": {"throttle": {"rps": "5"}}}}')$$,
                 'HR001', 'workflow x: throttle.rps must be a number from 0 to Infinity, got "5"',
                 '... a rate in a string (a raw cast took it)');
SELECT is(harvest.declare_flow_policies('{"workflows": {"x": {"batch": {"max_size": 2.0, "window_secs": 1}}}}'), 1,
          '... a batch of 2.0 starts is declared');
SELECT * FROM finish();
ROLLBACK;

-- A batch hands each argument's own rows only (migration 0128): another starter's argument to
-- the same batch naming this login's other run-less row (another held-back start's input) does
-- not make it the batch's run's, though this login made the batch too. A row from before 0128
-- (payload_ids NULL) keeps its logins rule as arguments join it.
BEGIN;
SELECT plan(7);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT harvest.declare_flow_policies('{"workflows": {
    "wf_b": {"batch": {"key": "input.k", "max_size": 3, "window_secs": 10}}}}');
INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data, login)
VALUES ('00000000-0000-0000-0000-0000000000a1', NULL, harvest.now(), 5, '"arg"', session_user),
       ('00000000-0000-0000-0000-0000000000a2', NULL, harvest.now(), 6, '"held"', session_user),
       ('00000000-0000-0000-0000-0000000000a3', NULL, harvest.now(), 6, '"old1"', session_user),
       ('00000000-0000-0000-0000-0000000000a4', NULL, harvest.now(), 6, '"old2"', session_user);
SELECT harvest.start_workflow('wf_b', '[{"k": "x", "v": {"_harvest_ref": "00000000-0000-0000-0000-0000000000a1"}}]',
                              NULL, 'bq');
-- (Another login's argument, naming a2: its deferral records none of it.)
UPDATE harvest.payloads SET login = 'someone_else' WHERE id = '00000000-0000-0000-0000-0000000000a2';
SELECT harvest.start_workflow('wf_b', '[{"k": "x", "v": {"_harvest_ref": "00000000-0000-0000-0000-0000000000a2"}}]',
                              NULL, 'bq');
SELECT is(harvest._own_run_less_payloads('[{"_harvest_ref": "00000000-0000-0000-0000-0000000000a2"},
    {"x": {"_harvest_ref": "00000000-0000-0000-0000-0000000000a1"}}, {"_harvest_ref": "not-a-uuid"}]'),
          ARRAY['00000000-0000-0000-0000-0000000000a1'::uuid],
          '_own_run_less_payloads(): the run-less rows its input names that the caller''s login stored');
UPDATE harvest.payloads SET login = session_user WHERE id = '00000000-0000-0000-0000-0000000000a2';
SELECT is((SELECT payload_ids FROM harvest.pending_starts WHERE kind = 'batch' AND gate_key = 'x'),
          ARRAY['00000000-0000-0000-0000-0000000000a1'::uuid],
          '_start_gate(): a batch records each argument''s own starter''s rows');
SELECT is((SELECT status FROM harvest.start_workflow('wf_b', '[{"k": "x"}]', NULL, 'bq')), 'RUNNING',
          'the third argument fills the batch');
SELECT is((SELECT count(*)::integer FROM harvest.payloads AS p JOIN harvest.executions AS e ON e.id = p.execution_id
           WHERE e.workflow_name = 'wf_b' AND p.id = '00000000-0000-0000-0000-0000000000a1'), 1,
          '_release_pending_start(): an argument''s own row goes to the batch''s run');
SELECT is((SELECT execution_id FROM harvest.payloads WHERE id = '00000000-0000-0000-0000-0000000000a2'), NULL,
          '_release_pending_start(): a row another starter''s argument named stays run-less, though its login made the batch too');
-- A row from before 0128: payload_ids NULL, released by its logins.
SELECT harvest.start_workflow('wf_b', '[{"k": "y", "v": {"_harvest_ref": "00000000-0000-0000-0000-0000000000a3"}}]',
                              NULL, 'bq');
UPDATE harvest.pending_starts SET payload_ids = NULL WHERE kind = 'batch' AND gate_key = 'y';
SELECT harvest.start_workflow('wf_b', '[{"k": "y", "v": {"_harvest_ref": "00000000-0000-0000-0000-0000000000a4"}}]',
                              NULL, 'bq');
SELECT is((SELECT payload_ids FROM harvest.pending_starts WHERE kind = 'batch' AND gate_key = 'y'), NULL,
          '_start_gate(): a batch from before 0128 keeps no list as arguments join it');
SELECT harvest.start_workflow('wf_b', '[{"k": "y"}]', NULL, 'bq');
SELECT is((SELECT count(*)::integer FROM harvest.payloads
           WHERE id IN ('00000000-0000-0000-0000-0000000000a3', '00000000-0000-0000-0000-0000000000a4')
             AND execution_id IS NOT NULL), 2,
          '_release_pending_start(): a batch from before 0128 hands its logins'' rows');
SELECT * FROM finish();
ROLLBACK;

-- Discarding held-back starts (discard_pending_start, discard_pending_starts, their helpers
-- _discard_pending_start and _pending_start_summary): the row and the run-less rows it owns go,
-- a row another login stored or another pending start names stays, audited; by filter, oldest
-- first, a filter needed.
BEGIN;
SELECT plan(22);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT harvest.declare_flow_policies('{"workflows": {
    "wf_t": {"throttle": {"rps": 1, "burst": 1, "key": "input.k"}},
    "wf_d": {"debounce": {"key": "input.k", "quiet_secs": 5, "max_wait_secs": 12}}}}');
INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data, login)
VALUES ('00000000-0000-0000-0000-0000000000b1', NULL, harvest.now(), 5, '"mine"', session_user),
       ('00000000-0000-0000-0000-0000000000b2', NULL, harvest.now(), 6, '"other"', 'someone_else'),
       ('00000000-0000-0000-0000-0000000000b3', NULL, harvest.now(), 6, '"shared"', session_user);
SELECT harvest.start_workflow('wf_t', '[{"k": "a"}]', 'ta0', 'tq');  -- (takes the burst's token)
SELECT harvest.start_workflow('wf_t', '[{"k": "a", "v": {"_harvest_ref": "00000000-0000-0000-0000-0000000000b1"},
    "w": {"_harvest_ref": "00000000-0000-0000-0000-0000000000b2"},
    "s": {"_harvest_ref": "00000000-0000-0000-0000-0000000000b3"}}]', 'ta1', 'tq');
SELECT harvest.start_workflow('wf_t', '[{"k": "a", "s": {"_harvest_ref": "00000000-0000-0000-0000-0000000000b3"}}]',
                              'ta2', 'tq');
SELECT is((SELECT workflow_id FROM harvest.list_pending_starts('wf_t') ORDER BY id LIMIT 1), 'ta1',
          'list_pending_starts(): answers the id a discard takes');
SELECT is((SELECT d ->> 'workflow_id' FROM harvest.discard_pending_start(
              (SELECT id FROM harvest.pending_starts WHERE workflow_id = 'ta1'), 'op-7', 'sent by mistake') AS d),
          'ta1', 'discard_pending_start(): answers what it discarded');
SELECT is((SELECT array_agg(workflow_id) FROM harvest.pending_starts), ARRAY['ta2'],
          'discard_pending_start(): the row is gone, the others wait');
SELECT is((SELECT array_agg(id ORDER BY id) FROM harvest.payloads WHERE id::text LIKE '%b_'),
          ARRAY['00000000-0000-0000-0000-0000000000b2'::uuid, '00000000-0000-0000-0000-0000000000b3'::uuid],
          '_discard_pending_start(): its own row is erased; another login''s, and one another pending start names, stay');
SELECT results_eq($$SELECT operation, operator_id, target, details ->> 'workflow_id', details ->> 'reason',
                           (details ->> 'payloads_erased')::integer
                    FROM harvest.audit_log WHERE operation LIKE 'pending_start.%'$$,
                  $$VALUES ('pending_start.discard'::text, 'op-7'::text, 'wf_t'::text, 'ta1'::text,
                            'sent by mistake'::text, 1)$$,
                  'discard_pending_start(): audited with the operator id, never the input');
SELECT throws_ok($$SELECT harvest.discard_pending_start(-1)$$, 'HR002', 'no pending start has id -1',
                 'discard_pending_start(): an id no start has (released, discarded) is HR002');
SELECT throws_ok($$SELECT harvest.discard_pending_start(NULL)$$, 'HR001', NULL,
                 'discard_pending_start(): a NULL id is HR001');
-- A release finds it gone: nothing starts.
SELECT set_config('harvest.fake_now', '2030-01-01 01:00:00+00', true);
SELECT harvest.start_workflow('wf_d', '[{"k": "x"}]', 'dx', 'dq');
SELECT harvest.discard_pending_start((SELECT id FROM harvest.pending_starts WHERE workflow_id = 'dx'));
SELECT set_config('harvest.fake_now', '2030-01-01 02:00:00+00', true);
SELECT is(harvest.release_pending_starts(), 1, 'release_pending_starts(): a discarded debounce never starts (ta2 does)');
SELECT is((SELECT count(*)::integer FROM harvest.executions WHERE workflow_id = 'dx'), 0,
          'the discarded start has no run');
-- By filter.
SELECT harvest.start_workflow('wf_d', jsonb_build_array(jsonb_build_object('k', k)), 'd' || k, 'dq')
FROM unnest(ARRAY['p', 'q', 'r']) AS k;
SELECT throws_ok($$SELECT harvest.discard_pending_starts(p_kind => 'debounce')$$, 'HR001', NULL,
                 'discard_pending_starts(): a kind alone selects everything: HR001');
SELECT throws_ok($$SELECT harvest.discard_pending_starts('wf_d', p_kind => 'nope')$$, 'HR001', NULL,
                 'discard_pending_starts(): an unknown kind is HR001');
SELECT throws_ok($$SELECT harvest.discard_pending_starts('wf_d', p_limit => 0)$$, 'HR001', NULL,
                 'discard_pending_starts(): a limit out of 1..1000 is HR001');
SELECT is((SELECT d -> 'matched' FROM harvest.discard_pending_starts('wf_d', p_limit => 2, p_dry_run => true) AS d),
          '3'::jsonb, 'discard_pending_starts(): a dry run counts');
SELECT is((SELECT count(*)::integer FROM harvest.pending_starts WHERE kind = 'debounce'), 3,
          'discard_pending_starts(): a dry run discards nothing');
SELECT is((SELECT d - 'shard_id' FROM harvest.discard_pending_starts('wf_d', p_limit => 1, p_dry_run => true) AS d),
          jsonb_build_object('dry_run', true, 'matched', 3, 'discarded', 0, 'payloads_erased', 0,
                             'ids', jsonb_build_array((SELECT id FROM harvest.pending_starts WHERE workflow_id = 'dp'))),
          'discard_pending_starts(): a dry run names the oldest p_limit ids and counts every match');
SELECT is((SELECT d - 'shard_id' FROM harvest.discard_pending_starts('nothing_held', p_dry_run => true) AS d),
          '{"dry_run": true, "matched": 0, "discarded": 0, "payloads_erased": 0, "ids": []}'::jsonb,
          'discard_pending_starts(): a filter that matches nothing: no ids, none matched');
-- The select takes p_limit ids (ORDER BY ... LIMIT), never every match's id into an array first.
SELECT ok(pg_get_functiondef('harvest.discard_pending_starts'::regproc) ~ 'LIMIT p_limit'
          AND pg_get_functiondef('harvest.discard_pending_starts'::regproc) !~ '\[1:p_limit\]',
          'discard_pending_starts(): gathers only the first p_limit ids');
SELECT is((SELECT d -> 'ids' = to_jsonb(ARRAY(SELECT id FROM harvest.pending_starts WHERE workflow_id IN ('dp', 'dq')
                                             ORDER BY id))
           FROM harvest.discard_pending_starts('wf_d', p_limit => 2, p_operator_id => 'op-8') AS d), true,
          'discard_pending_starts(): the oldest p_limit go');
SELECT is((SELECT array_agg(gate_key) FROM harvest.pending_starts WHERE kind = 'debounce'), ARRAY['r'],
          'discard_pending_starts(): the rest wait');
SELECT is((SELECT d -> 'discarded' FROM harvest.discard_pending_starts(p_gate_key => 'r', p_operator_id => 'op-8') AS d),
          '1'::jsonb, 'discard_pending_starts(): by gate key alone');
-- An admin's, as a dead letter's discard and erase_payloads: it loses for good what the starters sent.
SELECT is(ARRAY[harvest._function_role('discard_pending_start'), harvest._function_role('discard_pending_starts')],
          ARRAY['harvest_admin', 'harvest_admin'], 'discarding held-back starts is harvest_admin''s');
SELECT ok(NOT has_function_privilege('harvest_operator', 'harvest.discard_pending_start(bigint, text, text)', 'EXECUTE'),
          'discard_pending_start(): an operator cannot discard what starters sent');
SELECT * FROM finish();
ROLLBACK;

-- One rule for the rows a held-back start owns (_pending_start_payloads), for its release and its
-- discard: its payload_ids; before 0128 its logins' rows; before 0126 (no logins either) every
-- referenced run-less row to hand its run, none to erase.
BEGIN;
SELECT plan(7);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT harvest.declare_flow_policies('{"workflows": {
    "wf_o": {"debounce": {"key": "input.k", "quiet_secs": 5, "max_wait_secs": 12}}}}');
INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data, login)
VALUES ('00000000-0000-0000-0000-0000000000c1', NULL, harvest.now(), 5, '"c1"', 'someone_else'),
       ('00000000-0000-0000-0000-0000000000c2', NULL, harvest.now(), 5, '"c2"', session_user),
       ('00000000-0000-0000-0000-0000000000c3', NULL, harvest.now(), 5, '"c3"', 'someone_else'),
       ('00000000-0000-0000-0000-0000000000c4', NULL, harvest.now(), 5, '"c4"', 'someone_else');
SELECT harvest.start_workflow('wf_o', '[{"k": "old", "v": {"_harvest_ref": "00000000-0000-0000-0000-0000000000c1"}}]',
                              'o_old', 'oq');
SELECT harvest.start_workflow('wf_o', '[{"k": "mid", "v": {"_harvest_ref": "00000000-0000-0000-0000-0000000000c2"},
    "w": {"_harvest_ref": "00000000-0000-0000-0000-0000000000c3"}}]', 'o_mid', 'oq');
SELECT harvest.start_workflow('wf_o', '[{"k": "rel", "v": {"_harvest_ref": "00000000-0000-0000-0000-0000000000c4"}}]',
                              'o_rel', 'oq');
UPDATE harvest.pending_starts SET payload_ids = NULL, logins = NULL WHERE workflow_id IN ('o_old', 'o_rel');
UPDATE harvest.pending_starts SET payload_ids = NULL, logins = ARRAY[session_user::text] WHERE workflow_id = 'o_mid';
SELECT is(ARRAY(SELECT harvest._pending_start_payloads(s, false) FROM harvest.pending_starts AS s
                WHERE s.workflow_id = 'o_old'), ARRAY['00000000-0000-0000-0000-0000000000c1'::uuid],
          '_pending_start_payloads(): a start from before 0126 hands its run every run-less row it references');
SELECT is(ARRAY(SELECT harvest._pending_start_payloads(s, true) FROM harvest.pending_starts AS s
                WHERE s.workflow_id = 'o_old'), '{}'::uuid[],
          '_pending_start_payloads(): a start from before 0126 erases none (no owner can be told)');
SELECT is(ARRAY(SELECT harvest._pending_start_payloads(s, e) FROM harvest.pending_starts AS s,
                       unnest(ARRAY[false, true]) AS e WHERE s.workflow_id = 'o_mid'),
          ARRAY['00000000-0000-0000-0000-0000000000c2'::uuid, '00000000-0000-0000-0000-0000000000c2'::uuid],
          '_pending_start_payloads(): a start from before 0128 owns its logins'' rows, to hand or to erase');
SELECT is((SELECT d -> 'payloads_erased' FROM harvest.discard_pending_start(
              (SELECT id FROM harvest.pending_starts WHERE workflow_id = 'o_old')) AS d), '0'::jsonb,
          '_discard_pending_start(): a start from before 0126 erases no row');
SELECT is((SELECT d -> 'payloads_erased' FROM harvest.discard_pending_start(
              (SELECT id FROM harvest.pending_starts WHERE workflow_id = 'o_mid')) AS d), '1'::jsonb,
          '_discard_pending_start(): a start from before 0128 erases its logins'' row');
SELECT is((SELECT array_agg(id ORDER BY id) FROM harvest.payloads WHERE id::text LIKE '%c_'),
          ARRAY['00000000-0000-0000-0000-0000000000c1'::uuid, '00000000-0000-0000-0000-0000000000c3'::uuid,
                '00000000-0000-0000-0000-0000000000c4'::uuid],
          'the discards kept the rows no discarded start could be told to own');
SELECT set_config('harvest.fake_now', '2030-01-01 01:00:00+00', true);
SELECT harvest.release_pending_starts();
SELECT is((SELECT e.workflow_id FROM harvest.payloads AS p JOIN harvest.executions AS e ON e.id = p.execution_id
           WHERE p.id = '00000000-0000-0000-0000-0000000000c4'), 'o_rel',
          '_release_pending_start(): a start from before 0126 hands its run the row it references');
SELECT * FROM finish();
ROLLBACK;

-- The operators' list a page at a time (list_pending_starts): oldest first (created_at, then id),
-- at most p_limit after a position (both halves or neither), filtered, each row with its input's
-- size; and the lock an admission takes on the rows it owns (_own_run_less_payloads).
BEGIN;
SELECT plan(17);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT harvest.declare_flow_policies('{"workflows": {
    "wf_t": {"throttle": {"rps": 0.001, "burst": 1, "key": "input.k"}},
    "wf_d": {"debounce": {"key": "input.k", "quiet_secs": 5, "max_wait_secs": 12}}}}');
INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data, login)
VALUES ('00000000-0000-0000-0000-0000000000c1', NULL, harvest.now(), 1234, '"big"', session_user);
SELECT harvest.start_workflow('wf_t', '[{"k": "a"}]', 'p0', 'tq');  -- (takes the burst's token)
SELECT set_config('harvest.fake_now', '2030-01-01 00:00:03+00', true);
SELECT harvest.start_workflow('wf_t', '[{"k": "a", "n": 1}]', 'p1', 'tq');
SELECT set_config('harvest.fake_now', '2030-01-01 00:00:01+00', true);  -- (an earlier clock: older, a later id)
SELECT harvest.start_workflow('wf_t', '[{"k": "a", "v": {"_harvest_ref": "00000000-0000-0000-0000-0000000000c1"}}]',
                              'p2', 'tq');
SELECT harvest.start_workflow('wf_d', '[{"k": "x"}]', 'p3', 'dq');  -- (the same time as p2: by id)
SELECT set_config('harvest.fake_now', '2030-01-01 00:00:05+00', true);
SELECT harvest.start_workflow('wf_t', '[{"k": "a", "w": {"_harvest_ref": "00000000-0000-0000-0000-00000000dead"}}]',
                              'p4', 'tq');
SELECT is((SELECT array_agg(workflow_id) FROM harvest.list_pending_starts()), ARRAY['p2', 'p3', 'p1', 'p4'],
          'list_pending_starts(): oldest first, by created_at and then id');
SELECT is((SELECT array_agg(workflow_id) FROM harvest.list_pending_starts(p_limit => 2)), ARRAY['p2', 'p3'],
          'list_pending_starts(): at most p_limit');
SELECT is((SELECT array_agg(x.workflow_id)
           FROM harvest.list_pending_starts(p_limit => 2) AS l,
                harvest.list_pending_starts(p_limit => 2, p_after_created_at => l.created_at, p_after_id => l.id) AS x
           WHERE l.workflow_id = 'p3'),
          ARRAY['p1', 'p4'], 'list_pending_starts(): the next page after the last row''s position');
SELECT is((SELECT count(x.id)::integer
           FROM harvest.list_pending_starts() AS l
               LEFT JOIN harvest.list_pending_starts(p_after_created_at => l.created_at, p_after_id => l.id) AS x ON true
           WHERE l.workflow_id = 'p4'),
          0, 'list_pending_starts(): nothing after the last row');
-- A row gone meanwhile (released, discarded) keeps its place: its position is values, not a row.
SELECT is((SELECT array_agg(workflow_id) FROM harvest.list_pending_starts(
              p_after_created_at => '2030-01-01 00:00:01+00', p_after_id => (SELECT max(id) FROM harvest.pending_starts) + 1)),
          ARRAY['p1', 'p4'], 'list_pending_starts(): a position past a row that is gone');
SELECT is((SELECT array_agg(workflow_id) FROM harvest.list_pending_starts('wf_t')), ARRAY['p2', 'p1', 'p4'],
          'list_pending_starts(): one workflow''s');
SELECT is((SELECT array_agg(workflow_id) FROM harvest.list_pending_starts(p_kind => 'DEBOUNCE')), ARRAY['p3'],
          'list_pending_starts(): one kind''s (either case)');
SELECT is((SELECT array_agg(workflow_id) FROM harvest.list_pending_starts(
              p_id => (SELECT id FROM harvest.pending_starts WHERE workflow_id = 'p1'))), ARRAY['p1'],
          'list_pending_starts(): one start by id');
SELECT is((SELECT array_agg(workflow_id) FROM harvest.list_pending_starts('wf_t', p_workflow_id => 'p4')), ARRAY['p4'],
          'list_pending_starts(): one workflow id''s');
SELECT results_eq($$SELECT workflow_id, input_bytes, offloaded_bytes FROM harvest.list_pending_starts('wf_t')$$,
    $$SELECT s.workflow_id, octet_length(s.input::text),
             CASE s.workflow_id WHEN 'p2' THEN 1234::bigint ELSE 0 END
      FROM harvest.pending_starts AS s WHERE s.workflow_name = 'wf_t' ORDER BY s.created_at, s.id$$,
    'list_pending_starts(): the input''s size inline and offloaded (a reference to no row counts none)');
SELECT throws_ok($$SELECT * FROM harvest.list_pending_starts(p_limit => 0)$$, 'HR001', NULL,
                 'list_pending_starts(): a limit below 1 is HR001');
SELECT throws_ok($$SELECT * FROM harvest.list_pending_starts(p_limit => 10001)$$, 'HR001', NULL,
                 'list_pending_starts(): a limit above 10000 is HR001');
SELECT throws_ok($$SELECT * FROM harvest.list_pending_starts(p_kind => 'nope')$$, 'HR001', NULL,
                 'list_pending_starts(): an unknown kind is HR001');
SELECT throws_ok($$SELECT * FROM harvest.list_pending_starts(p_after_id => 5)$$, 'HR001', NULL,
                 'list_pending_starts(): half a position is HR001');
SELECT has_index('harvest', 'pending_starts', 'pending_starts_listed', ARRAY['created_at', 'id'],
                 'pending_starts_listed answers the list''s order');
SELECT has_index('harvest', 'pending_starts', 'pending_starts_workflow_listed',
                 ARRAY['workflow_name', 'created_at', 'id'], 'pending_starts_workflow_listed answers one workflow''s');
-- FOR KEY SHARE needs a volatile function (a stable one refuses a locking clause).
SELECT is((SELECT provolatile FROM pg_proc WHERE oid = 'harvest._own_run_less_payloads'::regproc), 'v'::"char",
          '_own_run_less_payloads(): volatile, as its lock needs');
SELECT * FROM finish();
ROLLBACK;
