-- functions/metrics.sql: claim_sampler_lead, get_metric_samples (and _sample_queue_depths), the gauges the metrics sampler publishes, and
-- list_forced_closes, the runs closed outside a decision that it counts.
BEGIN;
SELECT plan(37);

-- claim_sampler_lead: the sampler's session lock, taken by the function as the owner.
SELECT is(harvest.claim_sampler_lead(), true, 'claim_sampler_lead(): a session with no other leader leads');
SELECT is(harvest.claim_sampler_lead(), true, '... and still does when it asks again');
SELECT is(pg_advisory_unlock(7521418705652511858) AND pg_advisory_unlock(7521418705652511858), true,
          '... holding the session lock of the sampler''s key (once per call), which it releases here');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

SELECT throws_ok($$SELECT harvest.get_metric_samples(-1)$$, 'HR001', NULL,
                 'get_metric_samples(): a negative key limit is HR001');
SELECT throws_ok($$SELECT harvest.get_metric_samples(NULL)$$, 'HR001', NULL,
                 'get_metric_samples(): a NULL key limit is HR001');

SELECT is(harvest.get_metric_samples() - ARRAY['observed_at', 'schema_version'],
          '{"shard_id": 0, "queues": [], "timers_pending": 0, "dead_letters": [], "workers": [],
            "concurrency": [], "other_keys": {"in_flight": 0, "pending": 0, "pending_estimated": false}, "stranded": [],
            "relays": {"local": 0, "remote": 0, "remote_oldest_secs": null,
                       "by_id_indeterminate_signal_oldest_secs": null, "by_id_indeterminate_cancel_oldest_secs": null},
            "cross_shard_children": {"in_flight": 0, "oldest_secs": null}, "owed_child_ends": [],
            "retention": {"configured": false, "lag_secs": null}}'::jsonb,
          'get_metric_samples(): an empty database samples zeros and empty lists');

-- Two runs waiting on queue mq (workflow tasks), one started 30 s earlier.
SELECT pg_temp.start_run('m1', 'm_wf', 'mq');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:30+00';
SELECT pg_temp.start_run('m2', 'm_wf', 'mq');
SELECT is(jsonb_path_query_first(harvest.get_metric_samples(), '$.queues[*] ? (@.queue == "mq")'),
          '{"queue": "mq", "kind": "workflow", "claimable": 2, "scheduled": 0, "running": 0,
            "oldest_claimable_secs": 30, "estimated": false}'::jsonb,
          'get_metric_samples(): claimable work per queue and kind, and the oldest one''s age');
SELECT is(harvest.get_metric_samples() -> 'stranded', '[{"queue": "mq", "pending": 2}]'::jsonb,
          'get_metric_samples(): work no live worker polls is stranded');

-- A worker on mq: counted by queue and health; a drained one is "draining".
SELECT harvest.register_worker('w-m1', ARRAY['mq', 'other'], 'host', 1, 10, '{}');
SELECT harvest.register_worker('w-m2', ARRAY['mq'], 'host', 2, 10, '{}');
SELECT harvest.begin_worker_drain('w-m2');
SELECT is(harvest.get_metric_samples() -> 'workers',
          '[{"queue": "mq", "health": "draining", "count": 1}, {"queue": "mq", "health": "healthy", "count": 1},
            {"queue": "other", "health": "healthy", "count": 1}]'::jsonb,
          'get_metric_samples(): workers per queue and health (draining apart)');
SELECT is(harvest.get_metric_samples() -> 'stranded', '[]'::jsonb,
          'get_metric_samples(): a live worker on the queue: nothing stranded');

-- A dead letter, counted by workflow and activity.
SELECT pg_temp.dead_letter('md', 'm_dl_wf', 'm_send');
SELECT is(harvest.get_metric_samples() -> 'dead_letters',
          '[{"workflow_name": "m_dl_wf", "activity_name": "m_send", "kind": "activity", "count": 1}]'::jsonb,
          'get_metric_samples(): dead letters per workflow and activity');

-- Concurrency keys: the busiest p_max_keys, the rest summed.
SELECT pg_temp.start_activity('mc1', 'm_c_wf', 'mcq', 'm_gated', 'mcaq', '[]',
                              '{"max_concurrent": 2, "concurrency_key": "k1"}');
SELECT pg_temp.start_activity('mc2', 'm_c_wf', 'mcq', 'm_gated', 'mcaq', '[]',
                              '{"max_concurrent": 2, "concurrency_key": "k2"}', p_claim => false);
SELECT is(harvest.get_metric_samples(1) -> 'concurrency',
          '[{"key": "k1", "task_type": "activity", "in_flight": 1, "pending": 0}]'::jsonb,
          'get_metric_samples(1): the busiest key');
SELECT is(harvest.get_metric_samples(1) -> 'other_keys', '{"in_flight": 0, "pending": 1, "pending_estimated": false}'::jsonb,
          'get_metric_samples(1): the keys past the limit, summed');
SELECT is(harvest.get_metric_samples(0) -> 'other_keys', '{"in_flight": 1, "pending": 1, "pending_estimated": false}'::jsonb,
          'get_metric_samples(0): no key exported, every key summed');
SELECT is((harvest._busiest_concurrency_keys(ARRAY['k2'], 5)).busiest,
          '[{"key": "k2", "task_type": "activity", "in_flight": 0, "pending": 1}]'::jsonb,
          '_busiest_concurrency_keys(): only the keys asked for');
SELECT is((harvest._busiest_concurrency_keys(NULL, 1)).busiest,
          '[{"key": "k1", "task_type": "activity", "in_flight": 1, "pending": 0}]'::jsonb,
          '_busiest_concurrency_keys(NULL, 1): of every key, the busiest');
SELECT is((SELECT (b.runs_in_flight, b.runs_pending)::text FROM harvest._busiest_concurrency_keys(NULL, 1) AS b), '(0,0)',
          '_busiest_concurrency_keys(): the keyed runs'' sums (the keyed activities'' come with the queue depths)');
SELECT is(jsonb_path_query_first(harvest.get_metric_samples(), '$.queues[*] ? (@.queue == "mcaq")') ->> 'running',
          '1', 'get_metric_samples(): running tasks per queue');

-- Retention lag: how long the oldest terminal run past max_age has waited.
SELECT harvest.set_retention(interval '1 day');
UPDATE harvest.executions SET status = 'COMPLETED', completed_at = harvest.now() - interval '1 day 1 hour'
WHERE id = pg_temp.run('m1');
SELECT is(harvest.get_metric_samples() -> 'retention', '{"configured": true, "lag_secs": 3600}'::jsonb,
          'get_metric_samples(): retention lag is the oldest eligible run''s wait past max_age');
SELECT harvest.set_legal_hold(pg_temp.run('m1'), 'case 5', 'legal');
SELECT is(harvest.get_metric_samples() -> 'retention', '{"configured": true, "lag_secs": 0}'::jsonb,
          'get_metric_samples(): a run retention keeps (a legal hold) is no lag: the janitor is not behind on it');

-- _sample_queue_depths: exact up to the cap, a flagged estimate past it, never below what the
-- queue's head counted (here a cap of 2 and a sample of no block: the estimate is that floor);
-- the oldest claimable stays exact. A table of at most p_sample_pages pages is counted whole.
SELECT pg_temp.start_run('cap1', 'cap_wf', 'capq');
SET LOCAL harvest.fake_now = '2030-01-01 00:01:00+00';
SELECT pg_temp.start_run('cap2', 'cap_wf', 'capq');
SELECT is(jsonb_path_query_first((harvest._sample_queue_depths(harvest.now(), 2, 0, 0)).queues,
                                 '$[*] ? (@.queue == "capq")'),
          '{"queue": "capq", "kind": "workflow", "claimable": 2, "scheduled": 0, "running": 0,
            "oldest_claimable_secs": 30, "estimated": false}'::jsonb,
          '_sample_queue_depths(): at the cap, exact');
SELECT pg_temp.start_run('cap3', 'cap_wf', 'capq');
SELECT is(jsonb_path_query_first((harvest._sample_queue_depths(harvest.now(), 2, 0, 0)).queues,
                                 '$[*] ? (@.queue == "capq" && @.kind == "workflow")'),
          '{"queue": "capq", "kind": "workflow", "claimable": 3, "scheduled": 0, "running": 0,
            "oldest_claimable_secs": 30, "estimated": true}'::jsonb,
          '_sample_queue_depths(): past the cap, estimated (at least the head counted), the oldest exact');
SELECT is(jsonb_path_query_first((harvest._sample_queue_depths(harvest.now(), 2, 1000000, 0)).queues,
                                 '$[*] ? (@.queue == "capq")') ->> 'estimated',
          'false', '_sample_queue_depths(): a table of fewer pages than the sample''s is counted whole, exactly');
SELECT is((SELECT (d.keyed_pending, d.keyed_pending_estimated)::text
           FROM harvest._sample_queue_depths(harvest.now(), 0, 0, 0) AS d),
          '(1,t)', '_sample_queue_depths(): the keyed pending activities past the cap, estimated');
SELECT is((SELECT (d.keyed_running, d.keyed_pending, d.keyed_pending_estimated, d.timers)::text
           FROM harvest._sample_queue_depths(harvest.now(), 10, 0, 0) AS d),
          '(1,1,f,0)', '_sample_queue_depths(): the keyed running and pending activities, exact below the cap');
-- Past the cap, a kind of the queue with nothing pending (here its activity, running) has no
-- oldest claimable task: its series says 0 claimable and no wait, not the other kind's wait.
SELECT pg_temp.start_activity('capk1', 'capk_wf', 'capkq', 'capk_act', 'capkq', '[]', '{}');
SET LOCAL harvest.fake_now = '2030-01-01 00:02:00+00';
SELECT pg_temp.start_run('capk2', 'capk_wf', 'capkq');
SELECT pg_temp.start_run('capk3', 'capk_wf', 'capkq');
SELECT pg_temp.start_run('capk4', 'capk_wf', 'capkq');
SET LOCAL harvest.fake_now = '2030-01-01 00:03:00+00';
SELECT is(jsonb_path_query_first((harvest._sample_queue_depths(harvest.now(), 2, 0, 0)).queues,
                                 '$[*] ? (@.queue == "capkq" && @.kind == "activity")'),
          '{"queue": "capkq", "kind": "activity", "claimable": 0, "scheduled": 0, "running": 1,
            "oldest_claimable_secs": null, "estimated": true}'::jsonb,
          '_sample_queue_depths(): past the cap, a kind with no claimable task has no oldest wait');
SELECT is(jsonb_path_query_first((harvest._sample_queue_depths(harvest.now(), 2, 0, 0)).queues,
                                 '$[*] ? (@.queue == "capkq" && @.kind == "workflow")') -> 'oldest_claimable_secs',
          '60'::jsonb, '_sample_queue_depths(): past the cap, a kind with claimable tasks has the queue''s oldest wait');
-- Past the cap, a kind neither the head (here three workflow tasks, before it in claim order)
-- nor the sample (no block) met keeps its row, estimated at 0: a rare kind's series stays.
SELECT pg_temp.start_run('capr' || n, 'capr_wf', 'caprq') FROM generate_series(1, 3) AS n;
SET LOCAL harvest.fake_now = '2030-01-01 00:04:00+00';
SELECT pg_temp.start_activity('capr_act', 'capr_wf', 'caprw', 'capr_act', 'caprq', p_claim => false);
SELECT is(jsonb_path_query_first((harvest._sample_queue_depths(harvest.now(), 2, 0, 0)).queues,
                                 '$[*] ? (@.queue == "caprq" && @.kind == "activity")'),
          '{"queue": "caprq", "kind": "activity", "claimable": 0, "scheduled": 0, "running": 0,
            "oldest_claimable_secs": null, "estimated": true}'::jsonb,
          '_sample_queue_depths(): past the cap, a kind neither the head nor the sample met keeps its row');

-- The readers and the worker may call it.
SELECT ok(has_function_privilege('harvest_worker', 'harvest.get_metric_samples(integer)', 'EXECUTE')
          AND has_function_privilege('harvest_reader', 'harvest.get_metric_samples(integer)', 'EXECUTE'),
          'get_metric_samples(): granted to harvest_reader and harvest_worker');

-- list_forced_closes: terminated, timed out and superseded runs after the cursor, not the
-- closes a decision made (a worker counts those), not before the cursor, not after p_until.
SELECT pg_temp.start_run('fc_term', 'fc_wf', 'fc_q');
SELECT pg_temp.start_run('fc_timeout', 'fc_wf', 'fc_q');
SELECT pg_temp.start_run('fc_super', 'fc_wf', 'fc_q');
SELECT pg_temp.start_run('fc_done', 'fc_wf', 'fc_q');
SELECT pg_temp.start_run('fc_old', 'fc_wf', 'fc_q');
SELECT pg_temp.start_run('fc_late', 'fc_wf', 'fc_q');
SELECT harvest.terminate_workflow(pg_temp.run('fc_term'), 'test');
-- (its end owed to a parent on another shard: it is read through executions_end_owed, not
-- executions_retention, and counts all the same)
UPDATE harvest.executions SET status = 'TIMED_OUT', completed_at = harvest.now(), end_owed_to_shard = 5
WHERE id = pg_temp.run('fc_timeout');
UPDATE harvest.executions SET status = 'CANCELLED', completed_at = harvest.now(),
    failure = '{"error_type": "Superseded", "message": "m", "non_retryable": true, "details": null}'
WHERE id = pg_temp.run('fc_super');
UPDATE harvest.executions SET status = 'COMPLETED', completed_at = harvest.now() WHERE id = pg_temp.run('fc_done');
UPDATE harvest.executions SET status = 'TERMINATED', completed_at = harvest.now() - interval '1 hour'
WHERE id = pg_temp.run('fc_old');
UPDATE harvest.executions SET status = 'TERMINATED', completed_at = harvest.now() + interval '1 hour'
WHERE id = pg_temp.run('fc_late');
SELECT is((SELECT array_agg(f.status || ':' || f.superseded ORDER BY f.status)
           FROM harvest.list_forced_closes(harvest.now() - interval '1 minute', NULL, harvest.now()) AS f),
          ARRAY['CANCELLED:true', 'TERMINATED:false', 'TIMED_OUT:false'],
          'list_forced_closes(): terminated, timed out and superseded runs in the window, not a decision''s close');
SELECT is((SELECT f.history_size FROM harvest.list_forced_closes(harvest.now() - interval '1 minute', NULL,
                                                                  harvest.now()) AS f
           WHERE f.execution_id = pg_temp.run('fc_term')),
          pg_temp.last_event_id(pg_temp.run('fc_term')),
          'list_forced_closes(): history_size is the run''s event count');
SELECT is((SELECT count(*) FROM harvest.list_forced_closes(harvest.now() - interval '1 minute', NULL,
                                                            harvest.now(), 1)),
          1::bigint, 'list_forced_closes(): at most p_limit rows');
SELECT is((SELECT count(*)
           FROM harvest.list_forced_closes(harvest.now() - interval '1 minute', NULL, harvest.now(), 1) AS f
           CROSS JOIN LATERAL harvest.list_forced_closes(f.completed_at, f.execution_id, harvest.now()) AS r),
          2::bigint, 'list_forced_closes(): a cursor resumes after its last row');
SELECT throws_ok($$SELECT * FROM harvest.list_forced_closes(NULL, NULL, harvest.now())$$, 'HR001', NULL,
                 'list_forced_closes(): no cursor time is HR001');
SELECT throws_ok($$SELECT * FROM harvest.list_forced_closes(harvest.now(), NULL, harvest.now(), 0)$$, 'HR001',
                 NULL, 'list_forced_closes(): a limit of 0 is HR001');
UPDATE harvest.executions SET end_owed_to_shard = NULL WHERE id = pg_temp.run('fc_timeout');  -- (owed ends below)

-- An external signal by execution id to another shard whose delivery was released with an error
-- 90 s ago (its shard could not be inspected), a pending cancel not tried yet, and a signal by
-- business key left pending 500 s ago (a fan-out that missed shard 2): the oldest is the latter.
INSERT INTO harvest.relays (target_execution_id, kind, created_at, source_execution_id, source_seq,
                            target_shard, remote, attempts, last_error)
VALUES (gen_random_uuid(), 'external_signal', harvest.now() - interval '90 seconds', gen_random_uuid(), 1, 1,
        true, 2, 'shard 1: shard 1 is unavailable'),
       (gen_random_uuid(), 'external_cancel', harvest.now() - interval '200 seconds', gen_random_uuid(), 2, 1,
        true, 0, NULL);
INSERT INTO harvest.relays (kind, created_at, source_execution_id, source_seq, target_workflow_id,
                            target_workflow_name, remote, attempts, last_error)
VALUES ('external_signal', harvest.now() - interval '500 seconds', gen_random_uuid(), 3, 'k', 'wf', true, 1,
        'shard 2 unavailable');
SELECT is((harvest.get_metric_samples() -> 'relays') - ARRAY['local', 'remote', 'remote_oldest_secs'],
          '{"by_id_indeterminate_signal_oldest_secs": 500, "by_id_indeterminate_cancel_oldest_secs": null}'::jsonb,
          'get_metric_samples(): the oldest signal and cancel (by id or by business key) a delivery attempt left pending');

-- Ends of cross-shard children kept here for a parent on another shard, per parent shard.
INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at, completed_at, end_owed_to_shard)
VALUES (gen_random_uuid(), 'kid', 'k1', 'COMPLETED', harvest.now(), harvest.now() - interval '300 seconds', 4),
       (gen_random_uuid(), 'kid', 'k2', 'RUNNING', harvest.now(), NULL, 4);
SELECT is(harvest.get_metric_samples() -> 'owed_child_ends',
          '[{"parent_shard": 4, "ended": 1, "running": 1, "oldest_secs": 300}]'::jsonb,
          'get_metric_samples(): the ends owed per parent shard, and the oldest ended one''s age');

SELECT * FROM finish();
ROLLBACK;
