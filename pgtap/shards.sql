-- functions/shards.sql: get_shard_id, set_shard_id (and its id-range helpers
-- _shard_low_id, _shard_high_id), the start path's refusal of another shard's start,
-- and the health facts: count_stranded_tasks, get_shard_readiness, get_shard_health.
BEGIN;
SELECT plan(47);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

SELECT is(harvest.get_shard_id(), 0, 'get_shard_id(): a database is shard 0 until told otherwise');
SELECT is(harvest._shard_low_id(258), '01020000-0000-0000-0000-000000000000'::uuid,
          '_shard_low_id(): the shard''s two bytes, then zeros');
SELECT is(harvest._shard_high_id(258), '0102ffff-ffff-ffff-ffff-ffffffffffff'::uuid,
          '_shard_high_id(): the shard''s two bytes, then ones');
SELECT ok(harvest._new_execution_id(258) BETWEEN harvest._shard_low_id(258) AND harvest._shard_high_id(258),
          'a minted id of a shard lies in its range');

-- Argument checks.
SELECT throws_ok($$SELECT harvest.set_shard_id(70000)$$, 'HR001', NULL, 'set_shard_id(): out of 0..65535 is HR001');
SELECT throws_ok($$SELECT harvest.set_shard_id(-1)$$, 'HR001', NULL, 'set_shard_id(): a negative number is HR001');
SELECT throws_ok($$SELECT harvest.set_shard_id(NULL)$$, 'HR001', NULL, 'set_shard_id(): NULL is HR001');

-- An empty database takes any number; the same number again changes nothing.
SELECT is(harvest.set_shard_id(0), '{"shard_id": 0, "previous_shard_id": 0, "changed": false}'::jsonb,
          'set_shard_id(): the number it already has changes nothing');
SELECT is((SELECT count(*) FROM harvest.audit_log WHERE operation = 'shard.set_id'), 0::bigint,
          'set_shard_id(): no change, no audit row');
SELECT is(harvest.set_shard_id(3, 'ops-1'), '{"shard_id": 3, "previous_shard_id": 0, "changed": true}'::jsonb,
          'set_shard_id(): an empty database becomes shard 3');
SELECT is(harvest.get_shard_id(), 3, 'get_shard_id(): reads the new number');
SELECT results_eq($$SELECT target, operator_id, details - 'application_name' FROM harvest.audit_log
                    WHERE operation = 'shard.set_id'$$,
                  $$VALUES ('3'::text, 'ops-1'::text, '{"shard_id": 3, "previous_shard_id": 0}'::jsonb)$$,
                  'set_shard_id(): the change is audited with the operator and both numbers');

-- Starts mint this shard's ids; another shard's start is refused before anything is written.
SELECT is(harvest.shard_of((SELECT execution_id FROM harvest.start_workflow('sh_wf', p_workflow_id => 'a'))), 3,
          'start_workflow() without p_shard mints an id of this database''s shard');
SELECT is(harvest.shard_of((SELECT execution_id FROM harvest.start_workflow('sh_wf', p_shard => 3))), 3,
          'start_workflow(p_shard => this shard) is accepted');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('sh_wf', p_workflow_id => 'b', p_shard => 0)$$,
                 'HR011', 'start addressed to shard 0 reached shard 3',
                 'start_workflow(p_shard => another shard): HR011 naming both numbers');
SELECT is((SELECT count(*) FROM harvest.executions WHERE workflow_id = 'b'), 0::bigint,
          'the refused start wrote nothing');
SELECT throws_ok($$SELECT * FROM harvest.start_workflows('[{"workflow_name": "sh_wf"}, {"workflow_name": "sh_wf", "shard": 1}]')$$,
                 'HR011', 'start addressed to shard 1 reached shard 3',
                 'start_workflows(): an element addressed to another shard fails the batch with HR011');
SELECT is((SELECT harvest.shard_of(execution_id) FROM harvest.start_workflows('[{"workflow_name": "sh_wf", "shard": 3}]')),
          3, 'start_workflows(): an element addressed to this shard starts');
SELECT is(harvest._start_check_shard(NULL), 3, '_start_check_shard(): NULL means this database''s shard');
SELECT throws_ok($$SELECT harvest._start_check_shard(70000)$$, 'HR001', NULL,
                 '_start_check_shard(): a number out of 0..65535 is HR001');

-- A database that holds runs of its shard cannot change its number.
SELECT throws_ok($$SELECT harvest.set_shard_id(1)$$, 'HR011', NULL,
                 'set_shard_id(): refused while executions of another shard (3, now) are held');
SELECT is(harvest.get_shard_id(), 3, 'the refused change left the number');

-- Health facts. The three runs started above wait on queue default, which no worker polls.
SELECT results_eq($$SELECT queue, pending FROM harvest.count_stranded_tasks()$$,
                  $$VALUES ('default'::text, 3::bigint)$$,
                  'count_stranded_tasks(): claimable work on a queue no live worker polls, per queue');
SELECT is(harvest.get_shard_health() -> 'stranded_pending', '3'::jsonb,
          'get_shard_health(): stranded_pending is the gauge''s total');
SELECT is(harvest.get_shard_health() -> 'shard_id', '3'::jsonb, 'get_shard_health(): this database''s shard');
SELECT is(harvest.get_shard_health() ->> 'schema_version', harvest.schema_version(),
          'get_shard_health(): the schema version');
SELECT is(harvest.get_shard_health() -> 'unpolled_queues', '[]'::jsonb,
          'get_shard_health(): no worker row and no p_queues: no declared queue to report');
SELECT is(harvest.get_shard_health(ARRAY['default', 'reports']) -> 'unpolled_queues', '["default", "reports"]'::jsonb,
          'get_shard_health(p_queues): each declared queue with no live worker');
SELECT harvest.register_worker('w-health', ARRAY['default'], 'host', 1, 10, '{}');
SELECT is((SELECT count(*) FROM harvest.count_stranded_tasks()), 0::bigint,
          'count_stranded_tasks(): a live worker on the queue drains it, nothing is stranded');
SELECT is(harvest.get_shard_health(ARRAY['default', 'reports']) - ARRAY['observed_at', 'schema_version', 'queues'],
          '{"shard_id": 3, "workers": {"live": 1, "stale": 0, "draining": 0, "stopped": 0},
            "unpolled_queues": ["reports"], "stranded": [], "stranded_pending": 0, "dead_letters": 0,
            "schedules": {"active": 0, "oldest_due_at": null},
            "cross_shard_children": [], "owed_child_ends": []}'::jsonb,
          'get_shard_health(): live workers, the queue they leave uncovered, nothing stranded, no cross-shard child');
SELECT is(harvest.get_shard_readiness(ARRAY['default', 'reports']) - 'observed_at',
          harvest.get_shard_health(ARRAY['default', 'reports'])
          - ARRAY['observed_at', 'queues', 'dead_letters', 'cross_shard_children', 'owed_child_ends'],
          'get_shard_readiness(): get_shard_health''s facts without the per-queue counts, dead letters and children');
-- The cross-shard children both ways, what the retire of a shard waits for: those this shard's
-- pump drives, by the shard each lives on, and the ends it owes, by the parent's shard.
INSERT INTO harvest.cross_shard_children (
    child_execution_id, parent_execution_id, parent_seq, target_shard, workflow_name, workflow_id, queue, input,
    parent_close_policy, status, created_at
)
SELECT harvest._new_execution_id(v.target), harvest._new_execution_id(3), v.n, v.target, 'sh_child', 'shc' || v.n,
       'default', '[]', 'abandon', v.status, harvest.now()
FROM (VALUES (1, 1, 'starting'), (2, 1, 'running'), (3, 5, 'delivered')) AS v (n, target, status);
UPDATE harvest.executions SET end_owed_to_shard = 7
WHERE id = (SELECT min(e.id::text)::uuid FROM harvest.executions AS e);
SELECT is(harvest.get_shard_health() -> 'cross_shard_children',
          '[{"target_shard": 1, "children": 2}, {"target_shard": 5, "children": 1}]'::jsonb,
          'get_shard_health(): the children this shard drives, by target shard (a delivered row not released yet counts)');
SELECT is(harvest.get_shard_health() -> 'owed_child_ends',
          (SELECT jsonb_build_array(jsonb_build_object(
                      'parent_shard', 7, 'ended', count(*) FILTER (WHERE e.completed_at IS NOT NULL),
                      'running', count(*) FILTER (WHERE e.completed_at IS NULL)))
           FROM harvest.executions AS e WHERE e.end_owed_to_shard = 7),
          'get_shard_health(): the child ends it owes, by parent shard (get_retention_status''s figures)');
SELECT is(harvest.get_shard_readiness() ? 'cross_shard_children', false,
          'get_shard_readiness(): the probe does not read the children');
DELETE FROM harvest.cross_shard_children;
UPDATE harvest.executions SET end_owed_to_shard = NULL WHERE end_owed_to_shard IS NOT NULL;
SELECT is(harvest.get_shard_readiness() -> 'unpolled_queues', '[]'::jsonb,
          'get_shard_readiness(): no p_queues: the registered queues, all polled');
SELECT is(jsonb_path_query_first(harvest.get_shard_health(), '$.queues[*] ? (@.queue == "default")'),
          jsonb_build_object('queue', 'default', 'live_workers', 1, 'pending', 3, 'claimable', 3, 'running', 0,
                             'oldest_claimable_at', (SELECT min(due_at) FROM harvest.tasks), 'estimated', false),
          'get_shard_health(): a queue''s live workers and work, counted exactly below the cap');
UPDATE harvest.workers SET last_heartbeat_at = harvest.now() - interval '1 hour' WHERE id = 'w-health';
SELECT results_eq($$SELECT queue, pending FROM harvest.count_stranded_tasks()$$,
                  $$VALUES ('default'::text, 3::bigint)$$,
                  'count_stranded_tasks(): a stale worker does not count: the work is stranded again');
SELECT is(harvest.get_shard_readiness() - ARRAY['observed_at', 'schema_version', 'schedules'],
          '{"shard_id": 3, "workers": {"live": 0, "stale": 1, "draining": 0, "stopped": 0},
            "unpolled_queues": ["default"], "stranded": [{"queue": "default", "pending": 3}],
            "stranded_pending": 3}'::jsonb,
          'get_shard_readiness(): a stale worker: its queue unpolled, its work stranded');
-- Several queues: only those no live worker polls are counted (the polled ones are not read),
-- and only their claimable work (a task due later or a timer strands nothing yet).
SELECT harvest.register_worker('w-beta', ARRAY['beta'], 'host', 1, 10, '{}');
INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq, activity_name)
SELECT (SELECT min(e.id::text)::uuid FROM harvest.executions AS e), v.kind, v.queue, harvest.now() + v.due, harvest.now(),
       1000 + v.n, CASE WHEN v.kind = 'activity' THEN 'sh_act' END
FROM (VALUES (1, 'activity', 'alpha', interval '-2 minutes'), (2, 'activity', 'alpha', interval '-1 minute'),
             (3, 'activity', 'beta', interval '-5 minutes'), (4, 'activity', 'gamma', interval '1 hour'),
             (5, 'timer', 'delta', interval '-1 minute')) AS v (n, kind, queue, due);
SELECT results_eq($$SELECT queue, pending, oldest_due_at FROM harvest.count_stranded_tasks()$$,
                  $$VALUES ('alpha'::text, 2::bigint, harvest.now() - interval '2 minutes'),
                           ('default'::text, 3::bigint, (SELECT min(due_at) FROM harvest.tasks WHERE queue = 'default'))$$,
                  'count_stranded_tasks(): each unpolled queue''s claimable work and oldest due time; a polled '
                  'queue, a task due later and a timer are not stranded');
SET LOCAL harvest.fake_now = '2030-01-01 02:00:00+00';
SELECT harvest.heartbeat_worker('w-beta');
SELECT results_eq($$SELECT queue, pending FROM harvest.count_stranded_tasks()$$,
                  $$VALUES ('alpha'::text, 2::bigint), ('default'::text, 3::bigint), ('gamma'::text, 1::bigint)$$,
                  'count_stranded_tasks(): a task due later is stranded once due');

-- Scheduler freshness: the unpaused schedules and the oldest due time among them (a schedule no
-- scheduler computed yet counts from its last change), which a ticking scheduler keeps moving.
SELECT harvest.create_schedule('sh_sched', 'sh_wf', NULL, 60);
SELECT is(harvest.get_shard_health() -> 'schedules',
          jsonb_build_object('active', 1, 'oldest_due_at',
                             (SELECT coalesce(next_due_at, updated_at) FROM harvest.schedules WHERE name = 'sh_sched')),
          'get_shard_health(): an unpolled schedule''s due time (its last change until a scheduler computes one)');
UPDATE harvest.schedules SET next_due_at = harvest.now() - interval '1 hour' WHERE name = 'sh_sched';
SELECT is(harvest.get_shard_health() #>> '{schedules,oldest_due_at}',
          to_jsonb(harvest.now() - interval '1 hour') #>> '{}',
          'get_shard_health(): the oldest due time of the unpaused schedules');
SELECT harvest.pause_schedule('sh_sched');
SELECT is(harvest.get_shard_health() -> 'schedules', '{"active": 0, "oldest_due_at": null}'::jsonb,
          'get_shard_health(): a paused schedule is not waiting on a scheduler');

-- The deployment's shards as this database knows them: its own, and every shard a registered
-- worker's metadata names (shard_assignments, readable_shards); malformed entries are ignored.
SELECT is(harvest.get_deployment_shards(), ARRAY[3],
          'get_deployment_shards(): its own shard alone while no sharded worker registered here');
SELECT harvest.register_worker('w-sharded', ARRAY['default'], 'host', 2, 10,
                               '{"shard_assignments": [3, 1], "readable_shards": [0, 1, 3, 5]}');
SELECT is(harvest.get_deployment_shards(), ARRAY[0, 1, 3, 5],
          'get_deployment_shards(): a sharded worker''s polled and readable shards, with its own');
SELECT harvest.stop_worker('w-sharded');
SELECT is(harvest.get_deployment_shards(), ARRAY[0, 1, 3, 5],
          'get_deployment_shards(): a stopped worker''s row still says it (until retention prunes it)');
SELECT harvest.register_worker('w-odd', ARRAY['default'], 'host', 3, 10,
                               '{"shard_assignments": "auto", "readable_shards": ["x", -1, 70000, 2.5]}');
SELECT is(harvest.get_deployment_shards(), ARRAY[0, 1, 3, 5],
          'get_deployment_shards(): a metadata value that is not a shard number is ignored');

SELECT * FROM finish();
ROLLBACK;
