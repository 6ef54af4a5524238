-- functions/retention.sql: set_retention, get_retention_status, run_retention, _retention_keeps,
-- list_expired_seals, list_moved_runs, delete_seals, _seal_cutoff (MIGRATED seals),
-- release_owed_child_ends, _owed_child_ends,
-- and the worker registry rule: _prunable_workers, set_worker_retention, prune_workers;
-- _interval_text, _ago, _retention_cutoff; prune_flow_keys (and its fold of quota_ended_bytes),
-- _flow_key_in_use; _execution_not_found (what HR002 says of an unknown execution id).
BEGIN;
SELECT plan(85);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

CREATE TEMP TABLE rt ON COMMIT DROP AS
SELECT n, (harvest.start_workflow('rt_wf', '[]', 'rt-' || n, 'rt_q')).execution_id AS id
FROM generate_series(1, 4) AS n;
SELECT harvest.terminate_workflow(id, 'old') FROM rt WHERE n <= 3;
UPDATE harvest.executions SET completed_at = '2029-01-01' WHERE id IN (SELECT id FROM rt WHERE n <= 3);
UPDATE harvest.executions SET created_at = '2028-01-01' WHERE id = (SELECT id FROM rt WHERE n = 4);
-- Relays whose target is one of the old runs: a child's end goes with it; an external signal
-- from the running run stays, so its sender still hears (not_found). A receipt of a relay
-- applied for another shard goes once it is older than the window.
INSERT INTO harvest.relays (target_execution_id, kind, payload, created_at, source_execution_id, source_seq)
SELECT id, 'child_closed', '{}'::jsonb, '2029-01-01'::timestamptz, NULL::uuid, NULL::integer FROM rt WHERE n = 1
UNION ALL
SELECT (SELECT id FROM rt WHERE n = 2), 'external_signal', '{"signal_name": "s"}', '2029-01-01', id, 1
FROM rt WHERE n = 4;
INSERT INTO harvest.relay_receipts (source_shard, relay_id, outcome, received_at)
VALUES (1, 10, 'delivered', '2029-01-01'), (1, 11, 'delivered', '2029-12-31');
-- Offloaded payloads: two no run owns (an old one, a recent one), an old one the running run owns.
INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data)
VALUES (gen_random_uuid(), NULL, '2029-01-01', 5, '"old"'), (gen_random_uuid(), NULL, '2029-12-31', 8, '"recent"'),
       (gen_random_uuid(), (SELECT id FROM rt WHERE n = 4), '2029-01-01', 7, '"owned"'),
       ('00000000-0000-0000-0000-0000000000e1', NULL, '2029-01-01', 6, '"held"');
-- Result waiters' marks: an old one on an ended run (its client died mid-mark), an old one on
-- the running run (a client that still waits), a recent one on an ended run.
INSERT INTO harvest.result_waiters (execution_id, waiter_id, since)
SELECT id, gen_random_uuid(), CASE WHEN n = 3 THEN '2029-12-31'::timestamptz ELSE '2029-01-01' END
FROM rt WHERE n IN (1, 3, 4);
-- A start a throttle holds back references the old run-less "held" row: it has no run yet.
INSERT INTO harvest.pending_starts (kind, workflow_name, gate_key, workflow_id, queue, input, created_at, updated_at)
VALUES ('throttle', 'rt_held', '', 'rt-held', 'rt_q',
        '[{"_harvest_ref": "00000000-0000-0000-0000-0000000000e1", "bytes": 6}]', '2029-01-01', '2029-01-01');

-- An execution id of p_shard minted at p_at (as _new_execution_id mints one), and what HR002 says of it.
CREATE FUNCTION pg_temp.minted_at(p_shard integer, p_at timestamptz) RETURNS uuid LANGUAGE sql AS $fn$
    SELECT encode(substring(int4send(p_shard) FROM 3 FOR 2)
                  || substring(int8send(harvest._id_clock_bits((extract(epoch FROM p_at) * 1000)::bigint)) FROM 3 FOR 6)
                  || '\x8102030405060708'::bytea, 'hex')::uuid;
$fn$;
CREATE FUNCTION pg_temp.not_found(p_id uuid) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    v_message text;
    v_hint text;
BEGIN
    PERFORM harvest.get_execution(p_id);
    RETURN 'found';
EXCEPTION WHEN SQLSTATE 'HR002' THEN
    GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT, v_hint = PG_EXCEPTION_HINT;
    RETURN replace(v_message, p_id::text, '<id>') || ' | ' || v_hint;
END;
$fn$;
SELECT is(pg_temp.not_found(pg_temp.minted_at(0, '2029-01-01')),
          'execution <id> does not exist | the id may be a workflow id, not an execution id: '
          'harvest.get_execution_by_workflow_id() finds a run by it',
          '_execution_not_found(): retention never ran here: the id may be a workflow id, nothing of retention');
SELECT throws_ok($$SELECT harvest.run_retention()$$, 'HR001', NULL, 'not configured: refused');
SELECT throws_ok($$SELECT harvest.set_retention('-1 day')$$, 'HR001', NULL, 'a negative age is refused');
SELECT throws_ok($$SELECT harvest.set_retention('100000 years')$$, 'HR001',
                 'retention max age 100000 years is too long: its cutoff falls before the earliest time PostgreSQL stores',
                 'an age past the first storable time is refused, naming it');
SELECT is(harvest._retention_cutoff('1 day', 'x'), '2029-12-31 00:00:00+00'::timestamptz,
          '_retention_cutoff(): the age before now, in UTC');
-- An infinite interval exists from PostgreSQL 17; before, 'infinity' is no interval at all and
-- the input itself is refused (22007), never reaching the function.
SELECT CASE WHEN current_setting('server_version_num')::integer >= 170000
    THEN throws_ok($$SELECT harvest._retention_cutoff('infinity', 'retention max age')$$, 'HR001',
                   'retention max age infinity is not a length of time',
                   '_retention_cutoff(): an infinite age is refused')
    ELSE throws_ok($$SELECT harvest._retention_cutoff('infinity', 'retention max age')$$, '22007', NULL,
                   '_retention_cutoff(): an infinite age is refused (before PostgreSQL 17, as no interval)')
END;
SELECT throws_ok($$SELECT harvest.run_retention('100000 years')$$, 'HR001', NULL, 'run_retention: the same');
SELECT throws_ok($$SELECT harvest.set_worker_retention('100000 years')$$, 'HR001', NULL, 'set_worker_retention: the same');
SELECT throws_ok($$SELECT harvest.prune_workers('100000 years')$$, 'HR001', NULL, 'prune_workers: the same');
SELECT is((harvest.set_retention('30 days', 2) ->> 'eligible')::int, 3, 'status counts eligible runs');
CREATE TEMP TABLE first_run ON COMMIT DROP AS SELECT harvest.run_retention() AS r;
SELECT is((SELECT (r ->> 'deleted')::int FROM first_run), 2, 'one batch at most');
SELECT is(harvest.get_retention_status() -> 'last_run_remaining', '1',
          'status: last_run_remaining, what the last batch left (the sweep goes on)');
SELECT is((SELECT (r ->> 'runless_payloads_deleted')::int FROM first_run), 1,
          'run_retention(): an offloaded payload no run owns goes once older than the window');
SELECT is((SELECT array_agg(data::text ORDER BY data::text) FROM harvest.payloads WHERE data <> '"held"'),
          ARRAY['"owned"', '"recent"'], 'a recent run-less payload and a live run''s own stay');
SELECT is((SELECT count(*)::integer FROM harvest.payloads WHERE data = '"held"'), 1,
          'run_retention(): an old run-less payload a pending start''s input references stays');
SELECT is((harvest.run_retention() ->> 'remaining')::int, 0, 'the next batch takes the rest');
SELECT is(harvest.get_retention_status() -> 'last_run_deleted', '3',
          'status: last_run_deleted, the sweep''s batches added up (2 + 1), not its last batch''s 1');
SELECT is(harvest.run_retention() -> 'deleted', '0', 'setup: a later sweep finds nothing');
SELECT is(harvest.get_retention_status() -> 'last_run_deleted', '0',
          'a batch after one that left none remaining starts a new sweep: last_run_deleted 0');
SELECT is((SELECT count(*) FROM harvest.executions WHERE workflow_name = 'rt_wf'), 1::bigint,
          'only the running one is left');
SELECT is((SELECT status FROM harvest.executions WHERE workflow_name = 'rt_wf'), 'RUNNING',
          'a running execution is never deleted, however old');
SELECT is((SELECT count(*) FROM harvest.events e JOIN rt ON rt.id = e.execution_id WHERE rt.n <= 3), 0::bigint,
          'events go with their execution');
SELECT is(pg_temp.not_found((SELECT id FROM rt WHERE n = 1)),
          'execution <id> does not exist: retention may have deleted it (retention max_age is 30 days: a run that '
          'ended longer ago is deleted, and this id was minted before the cutoff of its last sweep) | harvest '
          'retention status shows the setting; harvest retention set --max-age keeps runs longer, a legal hold '
          'keeps one run',
          '_execution_not_found(): a run retention deleted: it may have, after retention max_age, named');
SELECT throws_like(format('SELECT harvest.cancel_workflow(%L)', (SELECT id FROM rt WHERE n = 2)),
                   '%does not exist: retention may have deleted it (retention max_age is 30 days%',
                   '_execution_not_found(): the same for an act on the run (_lock_execution)');
SELECT is(pg_temp.not_found(pg_temp.minted_at(0, '2029-12-15')),
          'execution <id> does not exist | the id may be a workflow id, not an execution id '
          '(harvest.get_execution_by_workflow_id() finds a run by it), or the id of a run retention deleted '
          '(harvest retention status shows its max_age)',
          '_execution_not_found(): an id minted after the last sweep''s cutoff: both are possible, both are said');
SELECT throws_ok(format('SELECT harvest._execution_not_found(%L)', pg_temp.minted_at(0, '2029-12-15')), 'HR002',
                 format('execution %s does not exist', pg_temp.minted_at(0, '2029-12-15')),
                 '_execution_not_found(): HR002 (get_execution, _lock_execution and the other reads by id raise it)');
SELECT is(pg_temp.not_found(pg_temp.minted_at(3, '2029-01-01')), pg_temp.not_found(pg_temp.minted_at(0, '2029-12-15')),
          '_execution_not_found(): another shard''s id cannot be told: both');
SELECT harvest.set_retention(NULL);
SELECT is(pg_temp.not_found((SELECT id FROM rt WHERE n = 1)), pg_temp.not_found(pg_temp.minted_at(0, '2029-12-15')),
          '_execution_not_found(): with no max_age now the cutoff is not known: both');
SELECT harvest.set_retention('30 days', 2);
SELECT ok((harvest.get_retention_status() ->> 'last_run_at') IS NOT NULL, 'the last run is recorded');
SELECT is((SELECT array_agg(kind) FROM harvest.relays), ARRAY['external_signal'],
          'a relay to a deleted run goes, unless it is an external signal or cancel whose sender awaits it');
SELECT is((SELECT array_agg(relay_id) FROM harvest.relay_receipts), ARRAY[11::bigint],
          'relay receipts older than the window go');
SELECT is((SELECT array_agg(rt.n ORDER BY rt.n) FROM harvest.result_waiters AS w JOIN rt ON rt.id = w.execution_id),
          ARRAY[3, 4], 'a result waiter''s mark goes once older than the window and its run is not live');
DELETE FROM harvest.relays;
SELECT pass('setup: relays cleared');

-- A chain that continues as new: its earlier runs stay past the window while a later run of it
-- is here (the chain is known by its first run's id), and go last to first once it has ended.
SET LOCAL harvest.fake_now = '2029-11-01 00:00:00+00';
SELECT pg_temp.start_decided('rt_chain', 'rt_chain_wf', 'rt_chain_q', '[{"type": "continue_as_new", "input": [2]}]');
CREATE TEMP TABLE rt_chain ON COMMIT DROP AS
SELECT pg_temp.run('rt_chain') AS head,
       (SELECT e.id FROM harvest.executions AS e WHERE e.continued_from = pg_temp.run('rt_chain')) AS tail;
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT is((SELECT harvest._retention_keeps(e.id, e.status, e.output, e.end_owed_to_shard) FROM harvest.executions AS e
           WHERE e.id = (SELECT head FROM rt_chain)), true,
          '_retention_keeps(): a run that continued as new, its successor here');
SELECT results_eq($$SELECT (r ->> 'deleted')::int, (r ->> 'remaining')::int FROM harvest.run_retention() AS r$$,
                  $$VALUES (0, 0)$$, 'run_retention(): a live chain''s first run stays past the window');
SELECT is((harvest.get_retention_status() ->> 'eligible')::int, 0, '... and is not counted eligible');
SELECT harvest.terminate_workflow(tail, 'done') FROM rt_chain;
UPDATE harvest.executions SET completed_at = '2029-11-02' WHERE id = (SELECT tail FROM rt_chain);
SELECT results_eq($$SELECT (r ->> 'deleted')::int, (r ->> 'remaining')::int FROM harvest.run_retention() AS r$$,
                  $$VALUES (2, 0)$$, 'run_retention(): an ended chain goes from its last run back, in one batch');
SELECT is_empty($$SELECT 1 FROM harvest.executions WHERE workflow_id = 'rt_chain'$$, '... and nothing of it is left');
-- A chain of five runs, ended: a batch of 2 takes its last two, the next two more; a legal hold
-- on a run stops the walk there (it and the runs before it stay until it is released).
CREATE TEMP TABLE rt_five ON COMMIT DROP AS
SELECT n, gen_random_uuid() AS id FROM generate_series(0, 4) AS n;
INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, output, continued_from, created_at, completed_at)
SELECT f.id, 'rt_five_wf', 'rt_five', CASE WHEN f.n < 4 THEN 'CONTINUED_AS_NEW' ELSE 'COMPLETED' END,
       CASE WHEN f.n < 4 THEN jsonb_build_object('continued_as_new', (SELECT g.id FROM rt_five AS g WHERE g.n = f.n + 1)) END,
       (SELECT g.id FROM rt_five AS g WHERE g.n = f.n - 1),
       '2029-10-01'::timestamptz + f.n * interval '1 day', '2029-10-02'::timestamptz + f.n * interval '1 day'
FROM rt_five AS f;
SELECT harvest.set_legal_hold((SELECT id FROM rt_five WHERE n = 1), 'case 43', 'legal');
SELECT results_eq($$SELECT (r ->> 'deleted')::int, (r ->> 'remaining')::int FROM harvest.run_retention() AS r$$,
                  $$VALUES (2, 1)$$, 'run_retention(): a batch of 2 takes a chain''s last run and the one before');
SELECT results_eq($$SELECT (r ->> 'deleted')::int, (r ->> 'remaining')::int FROM harvest.run_retention() AS r$$,
                  $$VALUES (1, 0)$$, '... the next batch walks up to the held run, which stays with the runs before it');
SELECT is((SELECT array_agg(f.n ORDER BY f.n) FROM rt_five AS f JOIN harvest.executions AS e ON e.id = f.id),
          ARRAY[0, 1], '... the first run, kept by its successor, and the held one');
SELECT harvest.release_legal_hold((SELECT id FROM rt_five WHERE n = 1), 'legal');
SELECT results_eq($$SELECT (r ->> 'deleted')::int, (r ->> 'remaining')::int FROM harvest.run_retention() AS r$$,
                  $$VALUES (2, 0)$$, '... released, it goes with the run before it');

-- A legal hold keeps its run past the window until it is released.
SELECT pg_temp.start_run('rt_held', 'rt_held_wf', 'rt_held_q');
SELECT harvest.terminate_workflow(pg_temp.run('rt_held'), 'done');
UPDATE harvest.executions SET completed_at = '2029-01-01' WHERE id = pg_temp.run('rt_held');
SELECT harvest.set_legal_hold(pg_temp.run('rt_held'), 'case 42', 'legal');
SELECT is((SELECT harvest._retention_keeps(e.id, e.status, e.output, e.end_owed_to_shard) FROM harvest.executions AS e
           WHERE e.id = pg_temp.run('rt_held')), true, '_retention_keeps(): a run under a legal hold');
SELECT results_eq($$SELECT (r ->> 'deleted')::int, (r ->> 'remaining')::int FROM harvest.run_retention() AS r$$,
                  $$VALUES (0, 0)$$, 'run_retention(): a held run stays past the window');
SELECT harvest.release_legal_hold(pg_temp.run('rt_held'), 'legal');
SELECT is((harvest.get_retention_status() ->> 'eligible')::int, 1, 'released, it is eligible');
SELECT is((harvest.run_retention() ->> 'deleted')::int, 1, '... and goes');

-- A cross-shard child whose end its parent (on shard 3) has not taken is kept past the window;
-- an operator lets the ends owed to a shard gone for good go.
SELECT pg_temp.start_run('rt_owed', 'rt_owed_wf', 'rt_owed_q');
SELECT harvest.terminate_workflow(pg_temp.run('rt_owed'), 'done');
UPDATE harvest.executions SET completed_at = '2029-01-01', end_owed_to_shard = 3 WHERE id = pg_temp.run('rt_owed');
SELECT is((SELECT harvest._retention_keeps(e.id, e.status, e.output, e.end_owed_to_shard) FROM harvest.executions AS e
           WHERE e.id = pg_temp.run('rt_owed')), true, '_retention_keeps(): a child whose end is owed to its parent');
SELECT results_eq($$SELECT (r ->> 'deleted')::int, (r ->> 'remaining')::int FROM harvest.run_retention() AS r$$,
                  $$VALUES (0, 0)$$, 'run_retention(): an owed end stays past the window');
SELECT results_eq($$SELECT (s ->> 'eligible')::int, (s ->> 'owed_child_ends')::int FROM harvest.get_retention_status() AS s$$,
                  $$VALUES (0, 1)$$, 'get_retention_status(): not eligible, counted as an owed child end');
SELECT results_eq($$SELECT parent_shard, ended, running, oldest_completed_at FROM harvest._owed_child_ends()$$,
                  $$VALUES (3, 1::bigint, 0::bigint, '2029-01-01'::timestamptz)$$,
                  '_owed_child_ends(): per parent shard, the ends owed, ended and running, and the oldest');
SELECT is(harvest.get_retention_status() -> 'owed_child_ends_by_shard',
          jsonb_build_array(jsonb_build_object('parent_shard', 3, 'ended', 1, 'running', 0,
                                               'oldest_completed_at', '2029-01-01'::timestamptz)),
          'get_retention_status(): the owed ends per parent shard');
SELECT is(harvest.release_owed_child_ends(2), 0, 'release_owed_child_ends(): another shard''s ends are not released');
SELECT throws_ok($$SELECT harvest.release_owed_child_ends(NULL)$$, 'HR001', NULL,
                 'release_owed_child_ends(): a shard number is needed');
SELECT throws_ok($$SELECT harvest.release_owed_child_ends(3, 0)$$, 'HR001', NULL,
                 'release_owed_child_ends(): a batch size out of 1..10000 is refused');
SELECT is(harvest.release_owed_child_ends(3, p_operator_id => 'ops'), 1,
          'release_owed_child_ends(): the end owed to shard 3 is let go');
SELECT is((SELECT details ->> 'parent_shard' FROM harvest.audit_log
           WHERE operation = 'retention.release_owed_child_ends' AND operator_id = 'ops'), '3', '... audited');
SELECT is((SELECT details -> 'force' FROM harvest.audit_log
           WHERE operation = 'retention.release_owed_child_ends' AND operator_id = 'ops'), 'false'::jsonb,
          '... not forced by default');
SELECT is(harvest.release_owed_child_ends(3, p_operator_id => 'ops-forced', p_force => true), 0,
          'release_owed_child_ends(p_force): nothing left to release');
SELECT is((SELECT details -> 'force' FROM harvest.audit_log
           WHERE operation = 'retention.release_owed_child_ends' AND operator_id = 'ops-forced'), 'true'::jsonb,
          '... p_force is recorded in the audit row');
SELECT is((harvest.run_retention() ->> 'deleted')::int, 1, '... and the child goes with its window');
SELECT is_empty($$SELECT 1 FROM harvest._owed_child_ends()$$, '_owed_child_ends(): none owed once released');

-- The worker registry rule: stopped or long-stale rows go, live and recent ones stay.
SET LOCAL harvest.fake_now = '2029-12-01 00:00:00+00';
SELECT harvest.register_worker(w, ARRAY['prune_q'], 'h', 1, 5)
FROM unnest(ARRAY['w-old-stale', 'w-old-stopped', 'w-old-leasing']) AS w;
SELECT harvest.stop_worker('w-old-stopped');
SELECT harvest.start_workflow('prune_wf', '[]', 'prune-1', 'prune_q');
SELECT count(*) FROM harvest.claim_tasks('w-old-leasing', ARRAY['prune_q'], 1);
SET LOCAL harvest.fake_now = '2029-12-30 00:00:00+00';
SELECT harvest.register_worker('w-recent-stale', ARRAY['prune_q'], 'h', 2, 5);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT harvest.register_worker('w-live', ARRAY['prune_q'], 'h', 3, 5);
SELECT results_eq($$SELECT harvest.get_retention_status() ->> 'worker_max_age',
                           (harvest.get_retention_status() ->> 'workers_eligible')::int$$,
                  $$VALUES ('7 days'::text, 2)$$,
                  'get_retention_status(): the worker rule (7 days by default) and the rows it would delete');
SELECT is((SELECT array_agg(w ORDER BY w) FROM harvest._prunable_workers('7 days') AS w),
          ARRAY['w-old-stale', 'w-old-stopped'], '_prunable_workers(): what the rule lets go');
SELECT is(harvest.prune_workers() ->> 'deleted', '2',
          'prune_workers(): the stopped and the crashed worker last seen 31 days ago are deleted');
SELECT results_eq($$SELECT id FROM harvest.workers ORDER BY id$$,
                  $$VALUES ('w-live'::text), ('w-old-leasing'), ('w-recent-stale')$$,
                  'a live worker, a recently stale one and one still holding a lease are kept');
SELECT is((SELECT details ->> 'workers' FROM harvest.audit_log WHERE operation = 'retention.prune_workers'),
          '["w-old-stale", "w-old-stopped"]', 'the deletion is audited with the worker ids');
SELECT is(harvest.prune_workers('1 day') ->> 'deleted', '1', 'p_max_age overrides the rule for one call');
SELECT throws_ok($$SELECT harvest.set_worker_retention('0 days')$$, 'HR001', NULL,
                 'set_worker_retention(): a zero age is refused');
SELECT is(harvest.set_worker_retention(NULL, 'ops') ->> 'worker_max_age', NULL,
          'set_worker_retention(NULL): keep every worker row');
SET LOCAL harvest.fake_now = '2031-01-01 00:00:00+00';
SELECT is(harvest.prune_workers() ->> 'deleted', '0', 'with no rule, nothing is deleted, however old');

-- An interval reads in the postgres style whatever the session's IntervalStyle.
SET LOCAL IntervalStyle = 'iso_8601';
SELECT is(harvest._interval_text('30 days 12:30:00.5'), '30 days 12:30:00.5',
          '_interval_text: the postgres style under IntervalStyle iso_8601');
SELECT lives_ok($$SELECT harvest.set_worker_retention('1 day 02:03:04')$$, 'set_worker_retention under iso_8601');
SELECT is(harvest.get_retention_status() ->> 'worker_max_age', '1 day 02:03:04',
          'get_retention_status: worker_max_age in the postgres style under IntervalStyle iso_8601');
RESET IntervalStyle;

-- An age counts its days in UTC, whatever the session's zone (New York's clocks moved on
-- 10 March 2030: its 30 days before 1 April 12:00 UTC ended at 13:00 UTC on 2 March).
SET LOCAL TimeZone = 'America/New_York';
SELECT is(harvest._ago('2030-04-01 12:00+00', '30 days'), '2030-03-02 12:00+00'::timestamptz,
          '_ago: 30 days before, counted in UTC under America/New_York');
SELECT is(harvest._ago('2030-03-31 00:30+00', '1 mon'), '2030-02-28 00:30+00'::timestamptz,
          '_ago: a month before, counted in UTC under America/New_York');
RESET TimeZone;

-- prune_flow_keys: a key's row goes once no live run has the key (the rows this transaction
-- wrote count as written before every other session's snapshot: none is open here).
SELECT harvest.declare_flow_policies('{"workflows": {"wf_fk": {"quota": {"key": "input.t", "max_active_executions": 9}}}}');
SELECT harvest.start_workflow('wf_fk', '[{"t": "live"}]', 'fk-live', 'fkq');
INSERT INTO harvest.flow_keys (kind, key) VALUES ('quota', 'gone'), ('concurrency', 'gone');
SELECT is(harvest.prune_flow_keys() ->> 'deleted', '2', 'prune_flow_keys(): the rows of keys without a live run go');
SELECT results_eq($$SELECT details ->> 'deleted' FROM harvest.audit_log WHERE operation = 'retention.prune_flow_keys'$$,
                  $$VALUES ('2')$$, 'prune_flow_keys(): a round that deletes is audited');
SELECT is((SELECT count(*) FROM harvest.audit_log WHERE operation = 'retention.prune_flow_keys'
           AND (SELECT harvest.prune_flow_keys() ->> 'deleted') = '0'), 1::bigint,
          'prune_flow_keys(): a round that deletes nothing writes no audit row');
SELECT results_eq($$SELECT kind, key FROM harvest.flow_keys WHERE key IN ('live', 'gone')$$,
                  $$VALUES ('quota'::text, 'live'::text)$$, 'prune_flow_keys(): a key with a live run keeps its row');
SELECT ok(harvest._flow_key_in_use('quota', 'live'), '_flow_key_in_use(): a running run''s quota key is in use');
SELECT ok(NOT harvest._flow_key_in_use('concurrency', 'live'),
          '_flow_key_in_use(): the same text as a concurrency key is not');
-- A batch takes only the rows it may delete: the live key's row (written first, so first in the
-- table) took a batch of one every round, and the rows after it were never reached.
INSERT INTO harvest.flow_keys (kind, key) VALUES ('quota', 'after');
SELECT is(harvest.prune_flow_keys(1) ->> 'deleted', '1', 'prune_flow_keys(1): a key in use takes no room in the batch');
SELECT throws_ok($$SELECT harvest.prune_flow_keys(10001)$$, 'HR001', NULL,
                 'prune_flow_keys(): a batch size out of 1..10000 is refused');
-- A round also folds the max_history_bytes quota's ended-bytes rows of up to p_batch_size keys
-- with more than one (a key whose starts all run at REPEATABLE READ never folds them itself):
-- each key's total kept, a key summing to 0 gone.
INSERT INTO harvest.quota_ended_bytes (quota_key, bytes)
VALUES ('fold-a', 5), ('fold-a', 7), ('fold-a', -2), ('fold-b', 3), ('fold-c', 4), ('fold-c', -4);
SELECT harvest.prune_flow_keys();
SELECT results_eq($$SELECT quota_key, sum(bytes)::bigint, count(*) FROM harvest.quota_ended_bytes
                    WHERE quota_key LIKE 'fold-%' GROUP BY quota_key ORDER BY quota_key$$,
                  $$VALUES ('fold-a'::text, 10::bigint, 1::bigint), ('fold-b', 3, 1)$$,
                  'prune_flow_keys(): each key''s ended-bytes rows folded into one, their sum kept');
INSERT INTO harvest.quota_ended_bytes (quota_key, bytes) VALUES ('fold-d', 1), ('fold-d', 1), ('fold-e', 1), ('fold-e', 1);
SELECT harvest.prune_flow_keys(1);
SELECT is((SELECT count(*) FROM harvest.quota_ended_bytes WHERE quota_key IN ('fold-d', 'fold-e')), 3::bigint,
          'prune_flow_keys(1): one key folded a round');

SELECT * FROM finish();
ROLLBACK;

-- MIGRATED seals (list_expired_seals, list_moved_runs, delete_seals): run_retention never takes
-- one; the janitor lists them here, judges them where they point, and drops the collectable ones.
BEGIN;
SELECT plan(12);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
CREATE TEMP TABLE sl ON COMMIT DROP AS
SELECT n, (harvest.start_workflow('sl_wf', '[]', 'sl-' || n, 'sl_q')).execution_id AS id
FROM generate_series(1, 6) AS n;
-- 1 and 2: seals of moves long ago (1 first); 3: a seal of a recent move; 4: an ended run past
-- the window; 5: running; 6: an ended run past the window under a legal hold.
SELECT harvest.terminate_workflow(id, 'ended') FROM sl WHERE n IN (4, 6);
UPDATE harvest.executions AS e SET status = 'MIGRATED', migrated_to_shard = 7, completed_at = v.at
FROM (VALUES (1, '2029-01-01'::timestamptz), (2, '2029-02-01'), (3, '2029-12-31')) AS v (n, at), sl
WHERE sl.n = v.n AND e.id = sl.id;
UPDATE harvest.executions SET completed_at = '2029-01-01' WHERE id IN (SELECT id FROM sl WHERE n IN (4, 6));
SELECT harvest.set_legal_hold((SELECT id FROM sl WHERE n = 6), 'case 9', 'legal');
CREATE FUNCTION pg_temp.sl_n(p_id uuid) RETURNS integer LANGUAGE sql AS $$ SELECT n FROM sl WHERE id = p_id $$;

SELECT results_eq($$SELECT pg_temp.sl_n(execution_id), migrated_to_shard FROM harvest.list_expired_seals('30 days')$$,
                  $$VALUES (1, 7), (2, 7)$$, 'list_expired_seals(): the seals moved before the cutoff, oldest first');
SELECT results_eq($$SELECT pg_temp.sl_n(s.execution_id) FROM harvest.list_expired_seals('30 days',
                        (SELECT f.moved_at FROM harvest.list_expired_seals('30 days', NULL, NULL, 1) AS f),
                        (SELECT f.execution_id FROM harvest.list_expired_seals('30 days', NULL, NULL, 1) AS f)) AS s$$,
                  $$VALUES (2)$$, 'list_expired_seals(): a page after the keyset of the last');
SELECT is((SELECT count(*) FROM harvest.list_expired_seals()), 0::bigint,
          'list_expired_seals(): no max age given or set: none (retention keeps everything)');
SELECT throws_ok($$SELECT harvest._seal_cutoff('-1 day')$$, 'HR001', NULL,
                 '_seal_cutoff(): a max age that is not positive is refused, as run_retention refuses it');
SELECT throws_ok($$SELECT * FROM harvest.list_expired_seals('30 days', NULL, NULL, 0)$$, 'HR001', NULL,
                 'list_expired_seals(): a page size out of 1..10000 is refused');
SELECT is((harvest.run_retention('30 days') ->> 'deleted')::integer, 1, 'run_retention(): the ended run goes');
SELECT is((SELECT count(*) FROM harvest.executions WHERE status = 'MIGRATED'), 3::bigint,
          'run_retention(): no seal goes, however old its move');
SELECT results_eq(
    $$SELECT coalesce(pg_temp.sl_n(j.execution_id), 0), j.collectable, j.forwarded_to
      FROM harvest.list_moved_runs(ARRAY(SELECT id FROM sl ORDER BY n) || gen_random_uuid(), '30 days') AS j$$,
    $$VALUES (1, false, 7), (2, false, 7), (3, false, 7), (4, true, NULL::integer), (5, false, NULL),
             (6, false, NULL), (0, true, NULL)$$,
    'list_moved_runs(): a run gone is collectable, a seal is followed, a live or held run is not');
SELECT results_eq(
    $$SELECT j.collectable FROM harvest.list_moved_runs(ARRAY[(SELECT id FROM sl WHERE n = 5), gen_random_uuid()]) AS j$$,
    $$VALUES (false), (true)$$, 'list_moved_runs(): with no max age only a run that is gone is collectable');
SELECT is(harvest.delete_seals(ARRAY(SELECT id FROM sl WHERE n IN (1, 4, 5)), 'ops'), 1,
          'delete_seals(): only a row that is still a seal goes');
SELECT results_eq($$SELECT pg_temp.sl_n(id) FROM harvest.executions WHERE id IN (SELECT id FROM sl) ORDER BY 1$$,
                  $$VALUES (2), (3), (5), (6)$$, 'delete_seals(): the running run stays');
SELECT is((SELECT details ->> 'deleted' FROM harvest.audit_log WHERE operation = 'retention.seals'), '1',
          'delete_seals(): audited');

SELECT * FROM finish();
ROLLBACK;
