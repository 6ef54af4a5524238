-- functions/owners.sql: harvest.partition_of, harvest.get_owner_mode, harvest.set_owner_mode,
-- harvest.list_partition_owners, harvest.heartbeat_partitions and the helpers
-- harvest._owner_mode_on, harvest._owner_serves, harvest._owner_candidates,
-- harvest._acquire_partitions, harvest._owner_epoch, harvest._check_owner,
-- harvest._release_partitions; and what owner mode does to claim_tasks,
-- complete_workflow_task(s) and stop_worker.
BEGIN;
SELECT plan(53);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- The partition function: sha256 of the UTF-8 text, first two bytes big-endian, mod 512.
SELECT is(harvest.partition_of('abc'), 120, 'partition_of(): sha256(''abc'') starts ba78, 0xba78 % 512 = 120');
SELECT is(harvest.partition_of('wf-é'), harvest.partition_of(convert_from(convert_to('wf-é', 'UTF8'), 'UTF8')),
          'partition_of(): the same text, the same partition');
SELECT is((SELECT count(DISTINCT harvest.partition_of('id-' || g)) FROM generate_series(1, 6000) AS g), 512::bigint,
          'partition_of(): 6000 ids cover all 512 partitions');
SELECT is((SELECT min(harvest.partition_of('id-' || g)) FROM generate_series(1, 6000) AS g), 0,
          'partition_of(): the lowest partition is 0');
SELECT is((SELECT max(harvest.partition_of('id-' || g)) FROM generate_series(1, 6000) AS g), 511,
          'partition_of(): the highest partition is 511');
SELECT is((SELECT count(*) FROM harvest.partition_owners WHERE worker_id IS NULL), 512::bigint,
          'every database has 512 free owner rows');

-- The switch: off by default, admin-only, audited.
SELECT is(harvest._owner_mode_on(), false, '_owner_mode_on(): off by default');
SELECT is(harvest.get_owner_mode() - 'updated_at',
          '{"enabled": false, "lease_secs": 30, "partitions": 512, "owned": 0}'::jsonb,
          'get_owner_mode(): off, a 30 s lease, nothing owned');
SELECT throws_ok($$SELECT harvest.set_owner_mode(NULL)$$, 'HR001', NULL, 'set_owner_mode(NULL): HR001');
SELECT throws_ok($$SELECT harvest.set_owner_mode(true, 0)$$, 'HR001', NULL,
                 'set_owner_mode(): a lease under 0.1 s is HR001');
SELECT throws_ok($$SELECT harvest.set_owner_mode(true, 4000)$$, 'HR001', NULL,
                 'set_owner_mode(): a lease over 3600 s is HR001');
SELECT is(harvest._owner_mode_on(), false, 'a refused switch changed nothing');

-- Two workers poll the queue; workflow ids a1, a2 share a partition, b1 is elsewhere.
SELECT harvest.register_worker('w1', ARRAY['oq'], 'h', 1);
SELECT harvest.register_worker('w2', ARRAY['oq'], 'h', 2);
SELECT harvest.register_worker('w3', ARRAY['other'], 'h', 3);
CREATE TEMP TABLE ids ON COMMIT DROP AS
SELECT 'a1'::text AS key, 'own-a1'::text AS workflow_id
UNION ALL
SELECT 'a2', (SELECT 'own-' || g FROM generate_series(1, 5000) AS g
              WHERE harvest.partition_of('own-' || g) = harvest.partition_of('own-a1') LIMIT 1)
UNION ALL
SELECT 'b1', (SELECT 'own-' || g FROM generate_series(1, 5000) AS g
              WHERE harvest.partition_of('own-' || g) <> harvest.partition_of('own-a1') LIMIT 1);
CREATE FUNCTION pg_temp.wid(p_key text) RETURNS text LANGUAGE sql AS $fn$
    SELECT workflow_id FROM ids WHERE key = p_key;
$fn$;
CREATE FUNCTION pg_temp.part(p_key text) RETURNS integer LANGUAGE sql AS $fn$
    SELECT harvest.partition_of(workflow_id) FROM ids WHERE key = p_key;
$fn$;
CREATE TEMP TABLE runs ON COMMIT DROP AS
SELECT i.key, (harvest.start_workflow('own_wf', '[]', i.workflow_id, 'oq')).execution_id FROM ids AS i;
CREATE TEMP TABLE claims (worker text, task_id bigint, token bigint, execution_id uuid, epoch bigint) ON COMMIT DROP;

-- Off: a claim hands out no epoch and takes no owner row.
INSERT INTO claims SELECT 'w1', c.task_id, c.fencing_token, c.execution_id, c.owner_epoch
FROM harvest.claim_tasks('w1', ARRAY['oq'], 1, 300) AS c;
SELECT is((SELECT epoch FROM claims), NULL, 'off: claim_tasks returns no owner_epoch');
SELECT is((SELECT count(*) FROM harvest.partition_owners WHERE worker_id IS NOT NULL), 0::bigint,
          'off: a claim takes no owner row');
SELECT harvest.release_worker_tasks('w1');
DELETE FROM claims;

SELECT is(harvest.set_owner_mode(true, 30, 'ops-1') - 'updated_at',
          '{"enabled": true, "lease_secs": 30, "partitions": 512, "owned": 0}'::jsonb,
          'set_owner_mode(true): on');
SELECT results_eq($$SELECT target, operator_id, details - 'application_name' FROM harvest.audit_log
                    WHERE operation = 'owner_mode.set'$$,
                  $$VALUES ('on'::text, 'ops-1'::text,
                            '{"enabled": true, "previous_enabled": false, "lease_secs": 30, "previous_lease_secs": 30}'::jsonb)$$,
                  'set_owner_mode(): audited with the operator and both states');
SELECT is(harvest._owner_mode_on(), true, '_owner_mode_on(): on');

-- On: w1 claims a1's workflow task and acquires its partition at epoch 1.
INSERT INTO claims SELECT 'w1', c.task_id, c.fencing_token, c.execution_id, c.owner_epoch
FROM harvest.claim_tasks('w1', ARRAY['oq'], 1, 300) AS c;
SELECT is((SELECT execution_id FROM claims), (SELECT execution_id FROM runs WHERE key = 'a1'),
          'w1 claimed a1 first');
SELECT is((SELECT epoch FROM claims), 1::bigint, 'claim_tasks(): the first acquisition of a partition is epoch 1');
SELECT is((SELECT worker_id || '@' || epoch FROM harvest.list_partition_owners() WHERE partition_id = pg_temp.part('a1')),
          'w1@1', 'list_partition_owners(): w1 holds a1''s partition at epoch 1');
SELECT is((SELECT count(*) FROM harvest.list_partition_owners('w1') WHERE live), 1::bigint,
          'list_partition_owners(w1): one live row');
SELECT is(harvest._owner_epoch(pg_temp.wid('a2'), 'w1'), 1::bigint,
          '_owner_epoch(): the epoch of the partition w1 holds, for any workflow id in it');
SELECT is(harvest._owner_epoch(pg_temp.wid('a2'), 'w2'), NULL, '_owner_epoch(): NULL for a worker that holds nothing');
SELECT is((harvest.get_owner_mode() ->> 'owned')::integer, 1, 'get_owner_mode(): one partition owned');

-- w2 may not take a2 (w1's partition, live, served), but takes b1 (elsewhere).
SELECT is(harvest._owner_serves('w1', ARRAY['oq']), true, '_owner_serves(): an active worker polling the queue');
SELECT is(harvest._owner_serves('w3', ARRAY['oq']), false, '_owner_serves(): a worker not polling the queue');
SELECT is(harvest._owner_serves('nobody', ARRAY['oq']), false, '_owner_serves(): an unknown worker');
SELECT is(cardinality(harvest._owner_candidates(
              ARRAY(SELECT t.id FROM harvest.tasks AS t JOIN runs AS r USING (execution_id) WHERE r.key = 'a2'),
              'w2', harvest.now())), 0,
          '_owner_candidates(): another live owner''s workflow task is left out');
SELECT is(cardinality(harvest._owner_candidates(
              ARRAY(SELECT t.id FROM harvest.tasks AS t JOIN runs AS r USING (execution_id) WHERE r.key = 'a2'),
              'w1', harvest.now())), 1,
          '_owner_candidates(): the owner keeps its own partition''s task');
INSERT INTO claims SELECT 'w2', c.task_id, c.fencing_token, c.execution_id, c.owner_epoch
FROM harvest.claim_tasks('w2', ARRAY['oq'], 10, 300) AS c;
SELECT is((SELECT array_agg(r.key) FROM claims AS c JOIN runs AS r USING (execution_id) WHERE c.worker = 'w2'),
          ARRAY['b1'], 'claim_tasks(): w2 claims b1 and leaves a2 to its partition''s owner');

-- The owner commits; its marker records the epoch.
SELECT is((SELECT d.execution_status FROM claims AS c
           CROSS JOIN LATERAL harvest.complete_workflow_task(c.task_id, c.token, 1, '[]', 'w1',
                                                            p_owner_epoch => c.epoch) AS d
           WHERE c.worker = 'w1'), 'RUNNING', 'complete_workflow_task(): the owner commits');
SELECT is((SELECT event_data FROM harvest.events AS e JOIN runs AS r USING (execution_id)
           WHERE r.key = 'a1' AND e.event_type = 'WorkflowTaskCompleted'),
          '{"through": 1, "worker_id": "w1", "owner_epoch": 1}'::jsonb,
          'the decision''s marker records the owner epoch');

-- w1 claims a2 (its own partition), then its lease runs out and w2 takes the partition
-- by claiming a run in it: a1, woken again.
DELETE FROM claims;
INSERT INTO claims SELECT 'w1', c.task_id, c.fencing_token, c.execution_id, c.owner_epoch
FROM harvest.claim_tasks('w1', ARRAY['oq'], 1, 300) AS c;
SELECT is((SELECT r.key || '@' || c.epoch FROM claims AS c JOIN runs AS r USING (execution_id)), 'a2@1',
          'w1 claims a2 in its partition: the renewal keeps epoch 1');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:31+00';
SELECT harvest.signal_workflow((SELECT execution_id FROM runs WHERE key = 'a1'), 'poke', '1');
INSERT INTO claims SELECT 'w2', c.task_id, c.fencing_token, c.execution_id, c.owner_epoch
FROM harvest.claim_tasks('w2', ARRAY['oq'], 10, 300) AS c;
SELECT is((SELECT r.key || '@' || c.epoch FROM claims AS c JOIN runs AS r USING (execution_id) WHERE c.worker = 'w2'),
          'a1@2', 'after w1''s lease ran out, w2 claims a1 and acquires the partition at epoch 2');

-- The stale owner w1 is refused at commit, though its task lease is live.
SELECT is(harvest._check_owner((SELECT execution_id FROM runs WHERE key = 'a2'), 'w2', 2), NULL,
          '_check_owner(): the owner at its epoch passes');
SELECT matches(harvest._check_owner((SELECT execution_id FROM runs WHERE key = 'a2'), 'w1', 1),
               'made by w1 at owner epoch 1, but decision partition \d+ is held by w2 at epoch 2',
               '_check_owner(): a stale owner is told who holds the partition now');
SELECT matches(harvest._check_owner((SELECT execution_id FROM runs WHERE key = 'a2'), 'w2', 1),
               'held by w2 at epoch 2', '_check_owner(): the right worker at an old epoch is stale too');
SELECT throws_ok(format($$SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, '[{"type": "complete_workflow", "result": 1}]', 'w1', p_owner_epoch => 1)$$,
                        c.task_id, c.token), 'HR004', NULL,
                 'complete_workflow_task(): a stale owner''s decision is HR004')
FROM claims AS c WHERE c.worker = 'w1';
SELECT results_eq(format($$SELECT outcome FROM harvest.complete_workflow_tasks('w1', ARRAY[%s]::bigint[],
                            ARRAY[%s]::bigint[], ARRAY[1]::bigint[], ARRAY['[{"type": "complete_workflow", "result": 1}]']::jsonb[],
                            ARRAY[0], p_owner_epochs => ARRAY[1]::bigint[])$$, c.task_id, c.token),
                  $$VALUES ('not_owner'::text)$$,
                  'complete_workflow_tasks(): a stale owner''s item is refused, outcome not_owner')
FROM claims AS c WHERE c.worker = 'w1';
SELECT is((SELECT count(*) FROM harvest.events AS e JOIN runs AS r USING (execution_id)
           WHERE r.key = 'a2' AND e.event_type <> 'WorkflowStarted'), 0::bigint,
          'nothing the stale owner decided landed');
SELECT is((SELECT status || ':' || coalesce(lease_owner, '-') FROM harvest.tasks AS t JOIN runs AS r USING (execution_id)
           WHERE r.key = 'a2' AND t.kind = 'workflow'), 'pending:-',
          'the refused task went back to the queue at once');
SELECT throws_ok($$SELECT * FROM harvest.complete_workflow_tasks('w1', ARRAY[1]::bigint[], ARRAY[1]::bigint[],
                     ARRAY[1]::bigint[], ARRAY['[]']::jsonb[], ARRAY[0], p_owner_epochs => ARRAY[1, 2]::bigint[])$$,
                 'HR001', NULL, 'complete_workflow_tasks(): owner epochs of another length are HR001');

-- The put-back: a task claimed while another live owner holds its partition.
UPDATE harvest.tasks AS t SET status = 'running', lease_owner = 'w3', attempt = 1
FROM runs AS r WHERE r.execution_id = t.execution_id AND r.key = 'a2' AND t.kind = 'workflow';
SELECT is(cardinality(harvest._acquire_partitions(
              ARRAY(SELECT t.id FROM harvest.tasks AS t JOIN runs AS r USING (execution_id)
                    WHERE r.key = 'a2' AND t.kind = 'workflow'), 'w3', harvest.now())), 0,
          '_acquire_partitions(): a task whose partition a live owner serving its queue holds is not kept');
SELECT is((SELECT status || ':' || attempt FROM harvest.tasks AS t JOIN runs AS r USING (execution_id)
           WHERE r.key = 'a2' AND t.kind = 'workflow'), 'pending:0', '... and it is put back as the claim found it');

-- Renewals: the holder's rows, never another's.
SELECT results_eq(format('SELECT partition_id, epoch FROM harvest.heartbeat_partitions(''w2'', ARRAY[%s, %s])',
                         pg_temp.part('a1'), pg_temp.part('b1')),
                  format('SELECT v.p, v.e FROM (VALUES (%s, 2::bigint), (%s, 1::bigint)) AS v (p, e) ORDER BY v.p',
                         pg_temp.part('a1'), pg_temp.part('b1')),
                  'heartbeat_partitions(): the partitions w2 holds, with their epochs');
SELECT is((SELECT count(*) FROM harvest.heartbeat_partitions('w1', ARRAY[pg_temp.part('a1')])), 0::bigint,
          'heartbeat_partitions(): nothing for a worker that lost the partition');
SELECT is((SELECT lease_expires_at FROM harvest.partition_owners WHERE partition_id = pg_temp.part('a1')),
          '2030-01-01 00:01:01+00'::timestamptz, 'heartbeat_partitions(): the lease runs from now');

-- A stopping worker gives its rows up; the next acquisition moves the epoch on.
SELECT is(harvest._release_partitions('nobody'), 0, '_release_partitions(): nothing for a worker holding nothing');
SELECT harvest.stop_worker('w2');
SELECT is((SELECT count(*) FROM harvest.partition_owners WHERE worker_id = 'w2'), 0::bigint,
          'stop_worker(): releases the worker''s owner rows');

SELECT is((SELECT c.owner_epoch FROM harvest.claim_tasks('w1', ARRAY['oq'], 1, 300) AS c), 3::bigint,
          'a released row is acquired again with its epoch moved on (2 -> 3)');

-- Off again: every held row is freed with its epoch moved on; renewals return nothing.
SELECT is(harvest.set_owner_mode(false) ->> 'enabled', 'false', 'set_owner_mode(false): off');
SELECT is((SELECT coalesce(worker_id, 'nobody') || '@' || epoch FROM harvest.partition_owners
           WHERE partition_id = pg_temp.part('a2')),
          'nobody@4', 'turning the switch frees every held row and moves its epoch on (3 -> 4)');
SELECT is((SELECT count(*) FROM harvest.heartbeat_partitions('w1', ARRAY[pg_temp.part('a1')])), 0::bigint,
          'heartbeat_partitions(): nothing while owner mode is off');

SELECT * FROM finish();
ROLLBACK;

-- A decision sent ahead with an activity result (complete_activities) in owner mode:
-- applied for the owner at its epoch; after another worker acquired the partition,
-- refused (the result is recorded alone, the woken workflow task queued, not handed).
BEGIN;
SELECT plan(10);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT harvest.set_owner_mode(true);
SELECT harvest.register_worker('w1', ARRAY['aq'], 'h', 1);
SELECT harvest.register_worker('w2', ARRAY['aq'], 'h', 2);
CREATE TEMP TABLE ahead (key text, workflow_id text, execution_id uuid, task_id bigint, token bigint, epoch bigint)
ON COMMIT DROP;
INSERT INTO ahead (key, workflow_id)
VALUES ('c1', 'ahead-c1'),
       ('c2', (SELECT 'ahead-' || g FROM generate_series(1, 5000) AS g
               WHERE harvest.partition_of('ahead-' || g) = harvest.partition_of('ahead-c1') LIMIT 1));
UPDATE ahead SET execution_id = (SELECT s.execution_id FROM harvest.start_workflow('ahead_wf', '[]', workflow_id, 'aq') AS s);
-- w1 claims both workflow tasks (one partition, epoch 1) and schedules one activity each,
-- handed straight back to it.
UPDATE ahead AS a SET task_id = c.task_id, token = c.fencing_token, epoch = c.owner_epoch
FROM harvest.claim_tasks('w1', ARRAY['aq'], 10, 300) AS c WHERE c.execution_id = a.execution_id;
CREATE TEMP TABLE handed ON COMMIT DROP AS
SELECT a.key, h.value AS task
FROM ahead AS a
CROSS JOIN LATERAL harvest.complete_workflow_task(a.task_id, a.token, 1,
    '[{"type": "schedule_activity", "seq": 1, "name": "act", "input": [], "queue": "aq", "options": {}}]',
    'w1', p_hand_off_slots => 1, p_owner_epoch => a.epoch) AS d
CROSS JOIN LATERAL jsonb_array_elements(d.handed) AS h (value);
SELECT is((SELECT count(*) FROM handed), 2::bigint, 'the owner''s decisions handed it both activities');

SELECT is((SELECT d.decided ->> 'execution_status' FROM handed AS h
           CROSS JOIN LATERAL harvest.complete_activities('w1', ARRAY[(h.task ->> 'task_id')::bigint],
               ARRAY[(h.task ->> 'fencing_token')::bigint], ARRAY['1'::jsonb], true, 300,
               ARRAY[jsonb_build_object('after', 3, 'result_text', '1', 'owner_epoch', 1,
                     'commands', '[{"type": "complete_workflow", "result": 1}]'::jsonb)]) AS d
           WHERE h.key = 'c1'),
          'COMPLETED', 'complete_activities(): the owner''s decision ahead at its epoch is applied');
SELECT is((SELECT event_data ->> 'owner_epoch' FROM harvest.events AS e JOIN ahead AS a USING (execution_id)
           WHERE a.key = 'c1' AND e.event_type = 'WorkflowTaskCompleted' ORDER BY e.event_id DESC LIMIT 1),
          '1', 'the decision ahead''s marker records the epoch');

-- w1's lease runs out; w2 acquires the partition by claiming a signalled run in it.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:31+00';
SELECT harvest.signal_workflow((SELECT execution_id FROM ahead WHERE key = 'c2'), 'x', '1');
SELECT is((SELECT c.owner_epoch FROM harvest.claim_tasks('w2', ARRAY['aq'], 1, 300) AS c), 2::bigint,
          'w2 acquires the partition at epoch 2');
-- (w2 holds c2's workflow task now; give it back so the result's wake-up has to queue one.)
SELECT harvest.release_worker_tasks('w2');

SELECT is((SELECT d.outcome || ':' || coalesce(d.decided::text, 'not decided') || ':' || coalesce(d.handed::text, 'not handed')
           FROM handed AS h
           CROSS JOIN LATERAL harvest.complete_activities('w1', ARRAY[(h.task ->> 'task_id')::bigint],
               ARRAY[(h.task ->> 'fencing_token')::bigint], ARRAY['2'::jsonb], true, 300,
               ARRAY[jsonb_build_object('after', 4, 'result_text', '2', 'owner_epoch', 1,
                     'commands', '[{"type": "complete_workflow", "result": 2}]'::jsonb)]) AS d
           WHERE h.key = 'c2'),
          'completed:not decided:not handed',
          'complete_activities(): a stale owner''s decision ahead is refused and the result recorded alone');
SELECT is((SELECT status FROM harvest.executions AS e JOIN ahead AS a ON a.execution_id = e.id WHERE a.key = 'c2'),
          'RUNNING', 'nothing of the refused decision landed');
SELECT is((SELECT array_agg(e.event_type ORDER BY e.event_id) FROM harvest.events AS e
           JOIN ahead AS a USING (execution_id) WHERE a.key = 'c2' AND e.event_id > 3),
          ARRAY['SignalReceived', 'ActivityCompleted'], 'the result is in the history, alone');
SELECT is((SELECT status || ':' || coalesce(lease_owner, '-') FROM harvest.tasks AS t JOIN ahead AS a USING (execution_id)
           WHERE a.key = 'c2' AND t.kind = 'workflow'), 'pending:-', 'the woken workflow task is queued for the owner');

-- Owner mode with the gates: a keyed run admitted under its key's limit takes its slot
-- from the leased row (_after_gated_claim), the second waits.
SELECT harvest.declare_flow_policies('{"workflows": {"own_keyed": {"concurrency": {"key": "input.t", "limit": 1}}}}');
SELECT harvest.register_worker('w-gate', ARRAY['gq'], 'h', 9);
CREATE TEMP TABLE gated_runs ON COMMIT DROP AS
SELECT n, (harvest.start_workflow('own_keyed', '[{"t": "g"}]', 'own-keyed-' || n, 'gq')).execution_id
FROM generate_series(1, 2) AS n;
SELECT is((SELECT count(*) || ':' || bool_and(c.owner_epoch IS NOT NULL)
           FROM harvest.claim_tasks('w-gate', ARRAY['gq'], 10, 300) AS c), '1:true',
          'owner mode, gated: one run of the key is claimed, with its epoch');
SELECT is(harvest._in_flight('workflow', 'g'), 1::bigint, 'owner mode, gated: the admitted run holds its workflow slot');

SELECT * FROM finish();
ROLLBACK;
