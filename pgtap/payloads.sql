-- functions/payloads.sql: put_payloads, get_payloads, _erase_payload_fields, _payload_refs, _copy_payloads,
-- erase_payloads, set_legal_hold, release_legal_hold, _refuse_hold_while_moving.
BEGIN;
SELECT plan(63);

-- The offload store.
CREATE TEMP TABLE pl_ids ON COMMIT DROP AS
SELECT harvest.put_payloads(NULL, ARRAY['{"big": "x"}'::jsonb, '[1, 2]'::jsonb]) AS ids;
SELECT is(cardinality((SELECT ids FROM pl_ids)), 2, 'put_payloads returns one id per payload');
SELECT is((SELECT data FROM harvest.get_payloads((SELECT ids FROM pl_ids)) WHERE id = (SELECT ids[2] FROM pl_ids)),
          '[1, 2]'::jsonb, 'get_payloads returns each payload by its id, in the order they were given');
SELECT is((SELECT count(*) FROM harvest.get_payloads(ARRAY[gen_random_uuid()])), 0::bigint,
          'an unknown id is absent');
SELECT is(harvest.put_payloads(NULL, '{}'), '{}'::uuid [], 'nothing to store: no ids');
SELECT throws_ok($$SELECT harvest.put_payloads(NULL, ARRAY['1'::jsonb, (repeat('[', 201) || repeat(']', 201))::jsonb])$$,
                 'HR001', 'offloaded payload 2: arrays and objects nest deeper than 200 levels',
                 'put_payloads(): an offloaded payload has no size limit but a depth one');
SELECT throws_ok($$SELECT harvest.put_payloads(NULL, ARRAY[NULL::jsonb])$$, 'HR001', NULL,
                 'a NULL payload is refused');

-- The helpers.
SELECT is(harvest._erase_payload_fields(
              '{"seq": 1, "result": {"a": 1}, "failure": {"error_type": "E", "message": "m", "details": 5}}'),
          '{"seq": 1, "result": {"_harvest_erased": true},
            "failure": {"error_type": "E", "message": "m", "details": {"_harvest_erased": true}}}'::jsonb,
          'payload fields and a failure''s details are erased; the rest stays');
SELECT is(harvest._erase_payload_fields(
              '{"failure": {"error_type": "E", "message": "m", "details": null, "traceback": "Traceback ..."}}'),
          '{"failure": {"error_type": "E", "message": "m", "details": null,
                        "traceback": {"_harvest_erased": true}}}'::jsonb,
          'a failure''s traceback is erased as its details are');
SELECT is(harvest._erase_payload_fields('{"seq": 2, "kind": "local_activity", "value": {"name": "a", "result": [7]}}'),
          '{"seq": 2, "kind": "local_activity", "value": {"name": "a", "result": {"_harvest_erased": true}}}'::jsonb,
          'a local activity''s result is erased; its name stays');
SELECT is(harvest._erase_payload_fields(
              '{"seq": 3, "kind": "local_activity",
                "value": {"name": "a", "failure": {"error_type": "E", "message": "m", "details": {"k": 1},
                                                    "traceback": "Traceback ..."}}}'),
          '{"seq": 3, "kind": "local_activity",
            "value": {"name": "a", "failure": {"error_type": "E", "message": "m", "details": {"_harvest_erased": true},
                                                "traceback": {"_harvest_erased": true}}}}'::jsonb,
          'a local activity''s failure details and traceback are erased; its name, type and message stay');
SELECT is(harvest._erase_payload_fields(
              '{"seq": 4, "kind": "dag_node",
                "value": {"task": "t", "state": "failed",
                          "failure": {"error_type": "E", "message": "m", "details": [1], "traceback": "T"}}}'),
          '{"seq": 4, "kind": "dag_node",
            "value": {"task": "t", "state": "failed",
                      "failure": {"error_type": "E", "message": "m", "details": {"_harvest_erased": true},
                                  "traceback": {"_harvest_erased": true}}}}'::jsonb,
          'a DAG task''s failure details and traceback are erased; its task, state, type and message stay');
SELECT is(harvest._erase_payload_fields('{"kind": "version", "value": 2}'),
          '{"kind": "version", "value": 2}'::jsonb, 'a version marker stays');
SELECT is(harvest._erase_payload_fields('{"input": [1]}') -> 'input',
          '[{"_harvest_erased": true}]'::jsonb, 'an input stays an array');
SELECT is(ARRAY(SELECT harvest._payload_refs(
              '{"a": [{"_harvest_ref": "6f1c2b7e-0d2a-4a55-9c0e-1a2b3c4d5e6f"}], "b": {"_harvest_ref": 7}}')),
          ARRAY['6f1c2b7e-0d2a-4a55-9c0e-1a2b3c4d5e6f'::uuid], 'references are found at any depth');
SELECT pg_temp.start_run('pl_taker', 'pl_wf', 'pl_taker_q');
CREATE TEMP TABLE pl_taken ON COMMIT DROP AS
SELECT (harvest.put_payloads(NULL, ARRAY['{"taken": "over"}'::jsonb]))[1] AS id;
SELECT lives_ok(format($$SELECT harvest._copy_payloads(jsonb_build_object(%L, %L), %L, '2030-01-02 00:00+00')$$,
                       (SELECT id FROM pl_taken), '00000000-0000-4000-8000-0000000000b1', pg_temp.run('pl_taker')),
                'setup: _copy_payloads of one payload to a run that takes it over');
SELECT results_eq($$SELECT execution_id, created_at, bytes, data FROM harvest.payloads
                    WHERE id = '00000000-0000-4000-8000-0000000000b1'$$,
                  format($$SELECT %L::uuid, '2030-01-02 00:00+00'::timestamptz, p.bytes, p.data
                           FROM harvest.payloads AS p WHERE p.id = %L$$,
                         pg_temp.run('pl_taker'), (SELECT id FROM pl_taken)),
                  '_copy_payloads(): the copy is the taker''s, under its new id, with the first one''s size and data');

-- A run that completed with an offloaded result and a plain input.
SELECT pg_temp.start_run('pl_a', 'pl_wf', 'pl_q', '["secret-input"]');
CREATE TEMP TABLE pl_result ON COMMIT DROP AS
SELECT (harvest.put_payloads(pg_temp.run('pl_a'), ARRAY['{"big": "x"}'::jsonb]))[1] AS id;
SELECT pg_temp.decide('pl_a', jsonb_build_array(jsonb_build_object('type', 'complete_workflow', 'result',
    jsonb_build_object('_harvest_ref', (SELECT id FROM pl_result), 'bytes', 14))));
SELECT pg_temp.start_run('pl_open', 'pl_wf', 'pl_q');

SELECT throws_ok(format('SELECT harvest.erase_payloads(%L)', pg_temp.run('pl_open')), 'HR031', NULL,
                 'an open run is refused');
SELECT pg_temp.start_run('pl_paused', 'pl_wf', 'pl_q', '["resumes-with-this"]');
SELECT harvest.pause_workflow(pg_temp.run('pl_paused'));
SELECT throws_ok(format('SELECT harvest.erase_payloads(%L)', pg_temp.run('pl_paused')), 'HR031', NULL,
                 'a paused run is live: refused');
SELECT throws_ok($$SELECT harvest.erase_payloads(gen_random_uuid())$$, 'HR002', NULL, 'an unknown run: HR002');
SELECT throws_ok(format('SELECT harvest.set_legal_hold(%L, %L)', pg_temp.run('pl_a'), ' '), 'HR001', NULL,
                 'a hold needs a reason');
SELECT throws_ok($$SELECT harvest.set_legal_hold(gen_random_uuid(), 'case')$$, 'HR002', NULL,
                 'a hold on an unknown run: HR002');
CREATE TEMP TABLE pl_row_before ON COMMIT DROP AS SELECT ctid AS at FROM harvest.executions WHERE id = pg_temp.run('pl_a');
SELECT is((harvest.set_legal_hold(pg_temp.run('pl_a'), 'case 1', 'legal') ->> 'legal_hold')::boolean, true,
          'set_legal_hold sets it');
SELECT isnt((SELECT ctid FROM harvest.executions WHERE id = pg_temp.run('pl_a')), (SELECT at FROM pl_row_before),
            'set_legal_hold writes the run''s row: an eraser or a janitor with an older snapshot cannot lock it');
SELECT throws_ok(format('SELECT harvest.erase_payloads(%L)', pg_temp.run('pl_a')), 'HR030', NULL,
                 'a held run is refused');
SELECT is((SELECT input FROM harvest.executions WHERE id = pg_temp.run('pl_a')), '["secret-input"]'::jsonb,
          'a refusal changes nothing');
SELECT is((harvest.release_legal_hold(pg_temp.run('pl_a'), 'legal') ->> 'released')::boolean, true,
          'release_legal_hold releases it');
SELECT is((harvest.release_legal_hold(pg_temp.run('pl_a')) ->> 'released')::boolean, false,
          'releasing again says there was none');
SELECT throws_ok(format('SELECT harvest.release_legal_hold(%L)', gen_random_uuid()), 'HR002', NULL,
                 'releasing the hold of an unknown execution is refused');
INSERT INTO harvest.legal_holds (execution_id, reason, set_at, set_by)
VALUES ('00000000-0000-0000-0000-0000000000b1', 'case', harvest.now(), 'ops');
SELECT is((harvest.release_legal_hold('00000000-0000-0000-0000-0000000000b1') ->> 'released')::boolean, true,
          'a hold that outlived its run is released');

INSERT INTO harvest.relays (target_execution_id, kind, payload, created_at)
VALUES (pg_temp.run('pl_a'), 'child_closed', '{"result": "secret-result"}', harvest.now());
-- A query's large answer: the worker stores it as the queried run's row.
INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data)
VALUES ('00000000-0000-0000-0000-0000000000a1', pg_temp.run('pl_a'), harvest.now(), 8, '"answer"');
INSERT INTO harvest.query_requests (execution_id, kind, name, queue, status, answer, created_at, expires_at)
VALUES (pg_temp.run('pl_a'), 'query', 'q', 'pl_q', 'completed',
        '{"_harvest_ref": "00000000-0000-0000-0000-0000000000a1", "bytes": 8}', harvest.now(), harvest.now());
CREATE TEMP TABLE pl_erased ON COMMIT DROP AS
SELECT harvest.erase_payloads(pg_temp.run('pl_a'), 'ops') AS summary;
SELECT is((SELECT (summary ->> 'offloaded')::int FROM pl_erased), 2,
          'the offloaded rows it owns are erased (the result, a query''s answer)');
SELECT is((SELECT (summary ->> 'queries')::int FROM pl_erased), 1,
          'the summary counts its query and update requests, whose arguments and answers are erased');
SELECT is((SELECT (summary ->> 'dead_letters')::int FROM pl_erased), 0, 'and its dead letters (none here)');
SELECT is((SELECT data FROM harvest.payloads WHERE id = '00000000-0000-0000-0000-0000000000a1'),
          '{"_harvest_erased": true}'::jsonb, 'a query''s offloaded answer is erased');
SELECT is((SELECT input FROM harvest.executions WHERE id = pg_temp.run('pl_a')),
          '[{"_harvest_erased": true}]'::jsonb, 'the execution''s input is erased');
SELECT is((SELECT count(*) FROM harvest.events WHERE execution_id = pg_temp.run('pl_a')
           AND event_data::text LIKE '%secret-input%'), 0::bigint, 'no event holds the input');
SELECT is((SELECT data FROM harvest.get_payloads(ARRAY[(SELECT id FROM pl_result)])),
          '{"_harvest_erased": true}'::jsonb, 'the offloaded payload reads as erased');
SELECT is((SELECT count(*) FROM harvest.audit_log WHERE target = pg_temp.run('pl_a')::text
           AND operation IN ('workflow.erase_payloads', 'workflow.legal_hold.set', 'workflow.legal_hold.release')),
          4::bigint, 'each hold, release and erasure is audited');
SELECT is((SELECT payload FROM harvest.relays WHERE target_execution_id = pg_temp.run('pl_a')),
          '{"result": {"_harvest_erased": true}}'::jsonb, 'a relay to it is erased');
CREATE TEMP TABLE pl_late ON COMMIT DROP AS
SELECT (harvest.put_payloads(pg_temp.run('pl_a'), ARRAY['"late secret"'::jsonb]))[1] AS id;
SELECT is((SELECT p.data FROM harvest.payloads AS p WHERE p.id = (SELECT id FROM pl_late)),
          '{"_harvest_erased": true}'::jsonb, 'put_payloads: a row written for an erased run is stored erased');
SELECT is((harvest.erase_payloads(pg_temp.run('pl_a')) ->> 'offloaded')::int, 0, 'erasing again is harmless');

-- A reference is text a starter writes into an input: one naming another run's row (here an open
-- run's) is its own run's to erase only when nobody owns the row.
CREATE TEMP TABLE pl_theirs ON COMMIT DROP AS
SELECT (harvest.put_payloads(pg_temp.run('pl_open'), ARRAY['"their secret"'::jsonb]))[1] AS id;
SELECT pg_temp.start_run('pl_forger', 'pl_wf', 'pl_forger_q',
    jsonb_build_array(jsonb_build_object('_harvest_ref', (SELECT id FROM pl_theirs), 'bytes', 14)));
SELECT pg_temp.decide('pl_forger', '[{"type": "complete_workflow", "result": null}]');
SELECT is((harvest.erase_payloads(pg_temp.run('pl_forger')) ->> 'offloaded')::int, 0,
          'erase_payloads(): a row another run owns is not erased through a reference to it');
SELECT is((SELECT data FROM harvest.payloads WHERE id = (SELECT id FROM pl_theirs)), '"their secret"'::jsonb,
          'erase_payloads(): the other run''s row is as it was');
-- Nor a run-less row: another client's start held back by a throttle (its input's id readable
-- to every reader through list_pending_starts) keeps its input until its release hands it over.
CREATE TEMP TABLE pl_held ON COMMIT DROP AS
SELECT (harvest.put_payloads(NULL, ARRAY['"held secret"'::jsonb]))[1] AS id;
SELECT pg_temp.start_run('pl_forger2', 'pl_wf', 'pl_forger2_q',
    jsonb_build_array(jsonb_build_object('_harvest_ref', (SELECT id FROM pl_held), 'bytes', 13)));
SELECT pg_temp.decide('pl_forger2', '[{"type": "complete_workflow", "result": null}]');
SELECT is((harvest.erase_payloads(pg_temp.run('pl_forger2')) ->> 'offloaded')::int, 0,
          'erase_payloads(): a run-less row is not erased through a reference to it');
SELECT results_eq(format('SELECT data, execution_id FROM harvest.payloads WHERE id = %L', (SELECT id FROM pl_held)),
                  $$VALUES ('"held secret"'::jsonb, NULL::uuid)$$,
                  'erase_payloads(): the run-less row is as it was, still no run''s');

-- Residences: a seal refuses a plain call (the caller follows the pointer); a prior-residence
-- scrub erases it without gates; a residence retention collected is no error.
SELECT pg_temp.start_run('pl_seal', 'pl_wf', 'pl_q', '["seal-input"]');
UPDATE harvest.executions SET status = 'MIGRATED', migrated_to_shard = 1 WHERE id = pg_temp.run('pl_seal');
SELECT throws_ok(format('SELECT harvest.erase_payloads(%L)', pg_temp.run('pl_seal')), 'HR013', NULL,
                 'a seal refuses a plain erasure: the live run decides');
SELECT throws_ok(format('SELECT harvest.set_legal_hold(%L, %L)', pg_temp.run('pl_seal'), 'case'), 'HR013', NULL,
                 'a hold is set on the live run, never on a seal');
SELECT throws_ok(format('SELECT harvest.release_legal_hold(%L)', pg_temp.run('pl_seal')), 'HR013', NULL,
                 'nor released on one');
SELECT throws_ok(format('SELECT harvest.erase_payloads(%L, NULL, true)', pg_temp.run('pl_open')), 'HR001', NULL,
                 'a live run is not a prior residence');
SELECT is(harvest.erase_payloads(pg_temp.run('pl_seal'), 'ops', true) ->> 'status', 'MIGRATED',
          'a prior residence is scrubbed without gates');
SELECT is((SELECT input FROM harvest.executions WHERE id = pg_temp.run('pl_seal')),
          '[{"_harvest_erased": true}]'::jsonb, 'the seal holds no payload afterwards');
SELECT is((harvest.erase_payloads(gen_random_uuid(), 'ops', true) ->> 'absent')::boolean, true,
          'a collected prior residence is no error');

SELECT throws_ok($$SELECT harvest.put_payloads(gen_random_uuid(), ARRAY['1'::jsonb])$$, 'HR002', NULL,
                 'payloads of an unknown run are refused');
SELECT harvest.put_payloads(pg_temp.run('pl_open'), ARRAY['"owned"'::jsonb]);
DELETE FROM harvest.executions WHERE id = pg_temp.run('pl_open');
SELECT is((SELECT count(*) FROM harvest.payloads WHERE data = '"owned"'), 0::bigint,
          'a run''s offloaded payloads go with it when retention deletes it');

-- A move copies the run's offloaded payloads (functions/rebalance.sql): a reference blocks nothing.
SELECT pg_temp.start_run('pl_ref', 'pl_wf', 'pl_q', jsonb_build_array(jsonb_build_object(
    '_harvest_ref', (SELECT ids[2] FROM pl_ids), 'bytes', 6)));
SELECT ok(NOT 'offloaded_payloads' = ANY(harvest._migration_blockers(
              (SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('pl_ref')))),
          'a run with offloaded payloads can be rebalanced (its payloads move with it)');

UPDATE harvest.executions SET status = 'MIGRATED', migrated_to_shard = 3 WHERE id = pg_temp.run('pl_ref');
SELECT throws_ok(format($$SELECT harvest.put_payloads(%L, ARRAY['1'::jsonb])$$, pg_temp.run('pl_ref')), 'HR013', NULL,
                 'put_payloads(): a moved run''s seal refuses them (HR013: follow the pointer)');
UPDATE harvest.executions SET status = 'RUNNING', migrated_to_shard = NULL WHERE id = pg_temp.run('pl_ref');

-- While a move of a run is open its hold is neither set nor released: the copy carries the hold
-- the run has at the cutover (_refuse_hold_while_moving).
INSERT INTO harvest.shard_migrations (execution_id, workflow_name, workflow_id, source_shard, target_shard,
                                      created_at, updated_at)
VALUES (pg_temp.run('pl_ref'), 'pl_wf', 'pl_ref', 0, 1, now(), now());
SELECT throws_ok(format($$SELECT harvest._refuse_hold_while_moving(%L, 'set')$$, pg_temp.run('pl_ref')), 'HR013',
                 format('execution %s is being moved to another shard: its legal hold cannot be set now',
                        pg_temp.run('pl_ref')),
                 '_refuse_hold_while_moving(): HR013 while a move is open');
SELECT throws_ok(format($$SELECT harvest.set_legal_hold(%L, 'case')$$, pg_temp.run('pl_ref')), 'HR013', NULL,
                 'set_legal_hold(): refused while a move of the run is open');
UPDATE harvest.shard_migrations SET phase = 'failed' WHERE execution_id = pg_temp.run('pl_ref');
SELECT lives_ok(format($$SELECT harvest.set_legal_hold(%L, 'case')$$, pg_temp.run('pl_ref')),
                'set_legal_hold(): once the move has ended');

-- A client's start input, stored before the run existed, is handed to the run that references it.
SELECT is(harvest.set_payloads_execution((SELECT ids FROM pl_ids), pg_temp.run('pl_ref')), 2,
          'set_payloads_execution(): run-less rows are handed to the run');
SELECT is(harvest.set_payloads_execution((SELECT ids FROM pl_ids), pg_temp.run('pl_a')), 0,
          'set_payloads_execution(): rows another run owns are left alone');
SELECT throws_ok(format($$SELECT harvest.set_payloads_execution(%L, gen_random_uuid())$$, (SELECT ids FROM pl_ids)),
                 'HR002', NULL, 'set_payloads_execution(): an unknown run is HR002');
SELECT is((SELECT array_agg(DISTINCT login) FROM harvest.payloads WHERE id = ANY((SELECT ids FROM pl_ids)::uuid[])),
          ARRAY[session_user::text], 'put_payloads(): a run-less row keeps the login that stored it');
-- Another login's run-less row (a reader can read every run-less id) is not the caller's to hand over.
INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data, login)
VALUES ('00000000-0000-4000-8000-0000000000c1', NULL, now(), 1, '1', 'someone_else');
SELECT is(harvest.set_payloads_execution(ARRAY['00000000-0000-4000-8000-0000000000c1'::uuid], pg_temp.run('pl_ref')),
          0, 'set_payloads_execution(): another login''s run-less rows are left alone');

SELECT * FROM finish();
ROLLBACK;
