-- functions/flow_concurrency.sql: harvest._resolve_key, harvest._resolve_flow_keys, harvest._flow_task_columns,
-- harvest.declare_flow_policies, harvest._admit_candidates, harvest._in_flight,
-- harvest._after_gated_claim, harvest._flow_release, harvest._supersede, harvest._superseded_runs,
-- harvest._live_keyed_runs, harvest.list_concurrency_keys.
BEGIN;
SELECT plan(42);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- Key paths.
SELECT is(harvest._resolve_key('[{"tenant_id": "acme"}]', 'input.tenant_id'), 'acme', 'input.X is the first argument''s field X');
SELECT is(harvest._resolve_key('[{"a": {"b": 7}}]', 'input.a.b'), '7', 'nested fields; a number keys as its text');
SELECT is(harvest._resolve_key('["k"]', 'input'), 'k', 'input alone is the first argument');
SELECT is(harvest._resolve_key('[{}]', 'input.tenant_id'), NULL, 'a missing field: no key (no gate)');
SELECT throws_ok($$SELECT harvest._resolve_key('[]', 'args.x')$$, 'HR001', NULL, 'a path not under input: HR001');
SELECT results_eq($$SELECT * FROM harvest._resolve_flow_keys('[{"t": "acme", "d": 7}]',
                      '{"quota": {"key": "input.t"}, "concurrency": {"key": "input.d", "limit": 1}}')$$,
                  $$VALUES ('acme'::text, '7'::text)$$, '_resolve_flow_keys(): the quota and the concurrency key');
SELECT results_eq($$SELECT a.*, b.* FROM harvest._resolve_flow_keys('[{"t": "acme"}]', '{"quota": {"key": "input.x"}}') AS a,
                           harvest._resolve_flow_keys('[{"t": "acme"}]', NULL) AS b$$,
                  $$VALUES (NULL::text, NULL::text, NULL::text, NULL::text)$$,
                  '_resolve_flow_keys(): NULL without the policy or a value at its path');

-- Gate columns from activity options (the tasks_flow_columns trigger).
SELECT is((harvest._flow_task_columns(jsonb_populate_record(NULL::harvest.tasks,
          '{"kind": "activity", "activity_name": "act", "input": [{"t": "x"}],
            "options": {"max_concurrent": 2, "concurrency_key": "k", "rate_limit": {"rps": 1, "key": "input.t"}}}'))).rate_key,
          'dyn-rate:input.t:x', '_flow_task_columns(): a per-key rate limit gets one bucket per value');
SELECT is((harvest._flow_task_columns(jsonb_populate_record(NULL::harvest.tasks,
          '{"kind": "activity", "activity_name": "act", "input": [{}],
            "options": {"rate_limit": {"rps": 1, "key": "input.t"}}}'))).rate_key,
          NULL, '_flow_task_columns(): a per-key rate limit whose value is missing: no bucket, no gate');

-- Policies.
SELECT is(harvest.declare_flow_policies('{"workflows": {"wf_defer": {"concurrency": {"key": "input.t", "limit": 1}},
    "wf_latest": {"concurrency": {"key": "input.t", "limit": 1, "on_conflict": "cancel_running"}}},
    "activities": {"capped": {"max_concurrent": 1, "concurrency_key": "k1"}}}'), 3,
          'declare_flow_policies() writes each declared policy');
SELECT throws_ok($$SELECT harvest.declare_flow_policies('{"workflows": {"x": {"concurrency": {"key": "input", "limit": 0}}}}')$$,
                 'HR001', 'workflow x: concurrency.limit must be a whole number from 1 to 2147483647, got 0',
                 'a limit below 1: HR001, naming the field');
SELECT throws_ok($$SELECT harvest.declare_flow_policies('{"workflows": {"x": {"concurrency": {"key": "input"}}}}')$$,
                 'HR001', 'workflow x: concurrency needs a limit, a whole number of at least 1', '... and no limit');
SELECT throws_ok($$SELECT harvest.declare_flow_policies('{"workflows": {"x": {"concurrency": {"key": "input", "limit": 1, "on_conflict": "nope"}}}}')$$,
                 'HR001', NULL, 'an unknown on_conflict: HR001');

-- Defer: the second run of a key waits at the claim; the slot returns when the first ends.
CREATE TEMP TABLE d ON COMMIT DROP AS
SELECT n, (harvest.start_workflow('wf_defer', '[{"t": "a"}]', 'd' || n, 'dq')).execution_id FROM generate_series(1, 2) AS n;
SELECT is((SELECT count(*) FROM harvest.claim_tasks('w', ARRAY['dq'], 10)), 1::bigint, 'defer: one run of the key is admitted');
SELECT is(harvest._in_flight('workflow', 'a'), 1::bigint, '_in_flight(): the admitted run holds a workflow slot');
SELECT is((SELECT due_at FROM harvest.tasks WHERE execution_id = (SELECT execution_id FROM d WHERE n = 2)),
          '2030-01-01 00:00:00.2+00'::timestamptz, 'the refused first task steps back 200 ms');
SELECT results_eq($$SELECT key, task_type, max_concurrent, in_flight, pending FROM harvest.list_concurrency_keys('a')$$,
                  $$VALUES ('a'::text, 'workflow'::text, 1, 1::bigint, 1::bigint)$$, 'list_concurrency_keys(): a deferred run is pending');
-- A page of keys in key order: p_limit keys after p_after_key (a key's rows stay together).
SELECT harvest.start_workflow('wf_defer', jsonb_build_array(jsonb_build_object('t', k)), 'pg-' || k, 'pq')
FROM unnest(ARRAY['b', 'c', 'd']) AS k;
SELECT results_eq($$SELECT key FROM harvest.list_concurrency_keys(NULL, NULL, 2)$$,
                  $$VALUES ('a'::text), ('b')$$, 'list_concurrency_keys(): the first p_limit keys in key order');
SELECT results_eq($$SELECT key FROM harvest.list_concurrency_keys(NULL, 'b', 2)$$,
                  $$VALUES ('c'::text), ('d')$$, 'list_concurrency_keys(): the keys after p_after_key');
SELECT is_empty($$SELECT * FROM harvest.list_concurrency_keys('a', 'b', 2)$$,
                'list_concurrency_keys(): a key at or before p_after_key is not on the page');
SELECT throws_ok($$SELECT * FROM harvest.list_concurrency_keys(NULL, NULL, 0)$$, 'HR001', NULL,
                 'list_concurrency_keys(): a limit below 1: HR001');
SELECT results_eq($$SELECT key, in_flight, pending FROM harvest._count_concurrency_keys(ARRAY['d', 'a'], NULL, false)$$,
                  $$VALUES ('a'::text, 1::bigint, 1::bigint), ('d', 0, 1)$$,
                  '_count_concurrency_keys(): the counts of the keys asked for, in key order');
SELECT is_empty($$SELECT * FROM harvest._count_concurrency_keys('{}', NULL, false)$$,
                '_count_concurrency_keys(): no key asked for, none counted');
SELECT results_eq($$SELECT key, task_type, in_flight, pending FROM harvest._count_concurrency_keys(ARRAY['d', 'a'], NULL, true)$$,
                  $$VALUES ('a'::text, 'workflow'::text, 1::bigint, 1::bigint), ('d', 'workflow', 0, 1),
                           (NULL, 'workflow', 0, 2)$$,
                  '_count_concurrency_keys(p_other_runs): the other keys'' runs on one row with a NULL key, last');
SELECT results_eq($$SELECT key, task_type, in_flight, pending FROM harvest._count_concurrency_keys('{}', NULL, true)$$,
                  $$VALUES (NULL::text, 'workflow'::text, 1::bigint, 4::bigint)$$,
                  '_count_concurrency_keys(no key, p_other_runs): every run on the others'' row');
SELECT lives_ok($$SELECT harvest.terminate_workflow((SELECT execution_id FROM d WHERE n = 1), 'x')$$, 'setup: the first run ends');
SELECT is(harvest._in_flight('workflow', 'a'), 0::bigint, 'the slot returned with the run''s end (_flow_release)');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:01+00';
SELECT results_eq($$SELECT execution_id FROM harvest.claim_tasks('w', ARRAY['dq'], 10)$$,
                  $$SELECT execution_id FROM d WHERE n = 2$$, 'the waiting run is admitted next');

-- Activity caps through _admit_candidates and _after_gated_claim.
SELECT harvest.start_workflow('wf_act', '[]', 'acts', 'aq0');
SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1, (SELECT jsonb_agg(jsonb_build_object(
    'type', 'schedule_activity', 'seq', i, 'name', 'capped', 'input', '[]'::jsonb, 'queue', 'aq',
    'options', '{"max_concurrent": 2, "concurrency_key": "k2"}'::jsonb)) FROM generate_series(1, 3) AS i))
FROM harvest.claim_tasks('w', ARRAY['aq0']) AS c;
-- (The gates judge the columns the claim's windows read, handed in as harvest.gated_candidate.)
CREATE TEMP TABLE aq_gates AS
SELECT array_agg(id ORDER BY id) AS ids,
       array_agg(ROW(id, kind, execution_id, concurrency_key, concurrency_limit, rate_key, priority, due_at,
                     activity_name, NULL)::harvest.gated_candidate ORDER BY id) AS gates
FROM harvest.tasks WHERE queue = 'aq';
SELECT is((SELECT array_agg(a ORDER BY a) FROM unnest(harvest._admit_candidates((SELECT ids FROM aq_gates), (SELECT array_agg(
              ROW(g.id, g.kind, g.execution_id, g.concurrency_key, 1, g.rate_key, g.priority, g.due_at,
                  g.activity_name, g.options)::harvest.gated_candidate) FROM unnest((SELECT gates FROM aq_gates)) AS g),
              harvest.now())) AS a),
          (SELECT ids[1:1] FROM aq_gates),
          '_admit_candidates(): judges the columns it is given (a cap of 1 handed in admits one), not the rows');
UPDATE harvest.tasks AS t SET due_at = g.due_at  -- (the two refused stepped back: undone)
FROM unnest((SELECT gates FROM aq_gates)) AS g WHERE t.id = g.id;
SELECT is((SELECT array_agg(a ORDER BY a) FROM unnest(harvest._admit_candidates(
              (SELECT ids FROM aq_gates), (SELECT gates FROM aq_gates)[1:1], harvest.now())) AS a),
          (SELECT ids FROM aq_gates),
          '_admit_candidates(): a candidate with no gate columns is admitted (one capped of the three here)');
SELECT is((SELECT array_agg(a ORDER BY a) FROM unnest(harvest._admit_candidates(
              (SELECT ids[2:3] FROM aq_gates), (SELECT gates FROM aq_gates), harvest.now())) AS a),
          (SELECT ids[2:3] FROM aq_gates),
          '_admit_candidates(): the columns of ids not among the candidates are left out (two of a cap of 2)');
SELECT is(cardinality(harvest._admit_candidates((SELECT ids FROM aq_gates), (SELECT gates FROM aq_gates), harvest.now())),
          2, '_admit_candidates(): admits up to the cap');
SELECT lives_ok($$SELECT harvest._after_gated_claim(ARRAY[]::harvest.tasks[], harvest.now())$$, '_after_gated_claim() of nothing');
SELECT is((SELECT count(*) FROM harvest.claim_tasks('w', ARRAY['aq'], 10)), 2::bigint, 'claim_tasks(): two of three under a cap of 2');
SELECT is(harvest._in_flight('activity', 'k2'), 2::bigint, 'in flight = running rows of the key');

-- Latest wins.
SELECT harvest.start_workflow('wf_latest', '[{"t": "z"}]', 'l1', 'lq');
SELECT harvest.start_workflow('wf_latest', '[{"t": "z"}]', 'l2', 'lq');
SELECT is((SELECT status FROM harvest.executions WHERE workflow_id = 'l1'), 'CANCELLED', 'cancel_running: the older run is cancelled');
-- Which live keyed runs are in flight: the admitted (a slot) and cancel_running's; the rest wait.
SELECT results_eq($$SELECT concurrency_key, workflow_name, in_flight FROM harvest._live_keyed_runs(NULL) ORDER BY 1$$,
                  $$VALUES ('a'::text, 'wf_defer'::text, true), ('b', 'wf_defer', false), ('c', 'wf_defer', false),
                           ('d', 'wf_defer', false), ('z', 'wf_latest', true)$$,
                  '_live_keyed_runs(): in flight when admitted or under cancel_running, else pending');
SELECT results_eq($$SELECT concurrency_key, workflow_name, in_flight FROM harvest._live_keyed_runs(ARRAY['z', 'a', 'b']) ORDER BY 1$$,
                  $$VALUES ('a'::text, 'wf_defer'::text, true), ('b', 'wf_defer', false), ('z', 'wf_latest', true)$$,
                  '_live_keyed_runs(p_keys): the same rule for the runs of the keys asked for alone');
SELECT is(cardinality(harvest._supersede('wf_latest', 'z', 1, gen_random_uuid())), 1,
          '_supersede() sheds the runs beyond limit - 1');
-- The tasks_derived_columns trigger (sql/triggers.sql) fills the derived columns for any
-- writer, not only the functions: a plain INSERT of an activity with every gate and
-- claim-order option, then a workflow task on the queue it made fair, then a timer.
SELECT harvest.start_workflow('wf_trg', '[]', 'trg', 'trg_q0');
SELECT results_eq($$
    INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq, activity_name, input, options)
    SELECT e.id, 'activity', 'trg_q', harvest.now(), harvest.now(), 901, 'act', '[{"t": "x", "f": "acme"}]',
           '{"max_concurrent": 2, "concurrency_key": "k9", "rate_limit": {"rps": 1, "key": "input.t"},
             "fairness_key": "input.f", "priority_aging_secs": 5}'
    FROM harvest.executions AS e WHERE e.workflow_id = 'trg'
    RETURNING concurrency_key, concurrency_limit, rate_key, priority_aging_secs, fairness_key$$,
    $$VALUES ('k9', 2, 'dyn-rate:input.t:x', 5::double precision, 'acme')$$,
    'a plain INSERT of an activity gets its gate and claim-order columns (tasks_derived_columns)');
SELECT is((SELECT count(*) FROM harvest.fair_queues WHERE queue = 'trg_q'), 1::bigint,
          'its fairness key makes the queue fair');
DELETE FROM harvest.tasks WHERE kind = 'workflow' AND execution_id = (
    SELECT e.id FROM harvest.executions AS e WHERE e.workflow_id = 'trg');
SELECT results_eq($$
    INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq)
    SELECT e.id, k.kind, 'trg_q', harvest.now(), harvest.now(), k.seq
    FROM harvest.executions AS e, (VALUES (1, 'workflow', NULL::integer), (2, 'timer', 902)) AS k (n, kind, seq)
    WHERE e.workflow_id = 'trg' ORDER BY k.n
    RETURNING kind, fairness_key, rate_key$$,
    $$VALUES ('workflow', '', NULL::text), ('timer', NULL, NULL)$$,
    'on a fair queue a plain INSERT of a workflow task joins the unkeyed group, a timer gets no key');
SELECT * FROM finish();
ROLLBACK;

-- A task row's rules (sql/triggers.sql; table CHECKs before 0058), for any writer: the kind,
-- the concurrency limit and the ageing bound checked by tasks_derived_columns on every
-- insert, a timer's too (harvest._task_rules raises), and by tasks_checks on an UPDATE of
-- their columns; the status still a table CHECK. Each refused with SQLSTATE 23514 naming the
-- constraint the rule had, in the CHECKs' order (by name).
BEGIN;
SELECT plan(24);
SET LOCAL TimeZone = 'UTC';

INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at)
VALUES ('00000000-0000-4000-8000-0000000d0001', 'rules_wf', 'rules-1', now());
CREATE TEMP VIEW rules_run AS SELECT '00000000-0000-4000-8000-0000000d0001'::uuid AS id;

-- On INSERT.
SELECT throws_ok($$INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq)
                   SELECT id, 'job', 'rq', now(), now(), 1 FROM rules_run$$, '23514',
                 'value for domain harvest.task_kind violates check constraint "tasks_kind_check"',
                 'an INSERT of an unknown kind is refused');
SELECT throws_ok($$INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq, status)
                   SELECT id, 'activity', 'rq', now(), now(), 1, 'done' FROM rules_run$$, '23514',
                 'value for domain harvest.task_status violates check constraint "tasks_status_check"',
                 'an INSERT of an unknown status is refused (the status stays a CHECK)');
SELECT throws_ok($$INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq, activity_name, options)
                   SELECT id, 'activity', 'rq', now(), now(), 1, 'a', '{"concurrency_key": "k", "max_concurrent": 0}'
                   FROM rules_run$$, 'HR001',
                 'options.max_concurrent must be a whole number from 1 to 2147483647, got 0',
                 'an activity whose options give a concurrency limit of 0 is refused, naming the option');
SELECT throws_ok($$INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq, activity_name, options)
                   SELECT id, 'activity', 'rq', now(), now(), 1, 'a', '{"priority_aging_secs": -1}' FROM rules_run$$, '23514',
                 'new row for relation "tasks" violates check constraint "tasks_priority_aging_secs_check"',
                 'an activity whose options give an ageing bound of -1 is refused');
SELECT throws_ok($$INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq, concurrency_limit)
                   SELECT id, 'timer', 'rq', now(), now(), 1, 0 FROM rules_run$$, '23514',
                 'new row for relation "tasks" violates check constraint "tasks_concurrency_limit_check"',
                 'a timer with a concurrency limit of 0 is refused (its insert is checked too)');
SELECT throws_ok($$INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq, priority_aging_secs)
                   SELECT id, 'timer', 'rq', now(), now(), 1, 0 FROM rules_run$$, '23514',
                 'new row for relation "tasks" violates check constraint "tasks_priority_aging_secs_check"',
                 'a timer with an ageing bound of 0 is refused');
SELECT throws_ok($$INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq, concurrency_limit)
                   SELECT id, 'workflow', 'rq', now(), now(), NULL, -3 FROM rules_run$$, '23514',
                 'new row for relation "tasks" violates check constraint "tasks_concurrency_limit_check"',
                 'a workflow task with a concurrency limit of -3 is refused');
SELECT throws_ok($$INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq, concurrency_limit, priority_aging_secs, status)
                   SELECT id, 'job', 'rq', now(), now(), 1, 0, 0, 'done' FROM rules_run$$, '23514',
                 'new row for relation "tasks" violates check constraint "tasks_concurrency_limit_check"',
                 'a row breaking every rule is refused by the first by name, as the CHECKs were');
SELECT throws_ok($$INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq, priority_aging_secs, status)
                   SELECT id, 'job', 'rq', now(), now(), 1, 0, 'done' FROM rules_run$$, '23514',
                 'value for domain harvest.task_kind violates check constraint "tasks_kind_check"',
                 'then by the kind');
SELECT throws_ok($$INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq, priority_aging_secs, status)
                   SELECT id, 'timer', 'rq', now(), now(), 1, 0, 'done' FROM rules_run$$, '23514',
                 'new row for relation "tasks" violates check constraint "tasks_priority_aging_secs_check"',
                 'then by the ageing bound, the status last');
SELECT throws_ok($$INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq)
                   SELECT id, NULL, 'rq', now(), now(), 1 FROM rules_run$$, '23502', NULL,
                 'a NULL kind is still refused by its NOT NULL');
SELECT lives_ok($$INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq, concurrency_limit, priority_aging_secs)
                  SELECT id, 'timer', 'rq', now(), now(), 1, 1, 'NaN' FROM rules_run$$,
                'a limit of 1 and an ageing bound of NaN (above 0 for PostgreSQL) are taken, as the CHECKs took them');
SELECT lives_ok($$INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, seq, activity_name, options)
                  SELECT id, 'activity', 'rq', now(), now(), 2, 'a', '{"concurrency_key": "k", "max_concurrent": 1, "priority_aging_secs": 0.5}'
                  FROM rules_run$$,
                'an activity with a limit of 1 and an ageing bound of 0.5 is taken');

-- On UPDATE: the three rules by tasks_checks (after the row is written: the statement fails),
-- the status by its CHECK.
SELECT throws_ok($$UPDATE harvest.tasks SET kind = 'job' WHERE seq = 2$$, '23514',
                 'value for domain harvest.task_kind violates check constraint "tasks_kind_check"',
                 'an UPDATE to an unknown kind is refused');
SELECT throws_ok($$UPDATE harvest.tasks SET concurrency_limit = 0 WHERE seq = 2$$, '23514',
                 'new row for relation "tasks" violates check constraint "tasks_concurrency_limit_check"',
                 'an UPDATE of the concurrency limit to 0 is refused');
SELECT throws_ok($$UPDATE harvest.tasks SET priority_aging_secs = -0.5 WHERE seq = 2$$, '23514',
                 'new row for relation "tasks" violates check constraint "tasks_priority_aging_secs_check"',
                 'an UPDATE of the ageing bound to -0.5 is refused');
SELECT throws_ok($$UPDATE harvest.tasks SET status = 'done' WHERE seq = 2$$, '23514',
                 'value for domain harvest.task_status violates check constraint "tasks_status_check"',
                 'an UPDATE to an unknown status is refused');
SELECT throws_ok($$UPDATE harvest.tasks SET concurrency_limit = 0, kind = 'job' WHERE seq IN (1, 2)$$, '23514',
                 'new row for relation "tasks" violates check constraint "tasks_concurrency_limit_check"',
                 'an UPDATE of two rows breaking two rules is refused by the first by name');
SELECT lives_ok($$UPDATE harvest.tasks SET status = 'running', kind = 'activity', concurrency_limit = 2 WHERE seq = 2$$,
                'an UPDATE keeping to the rules is taken');
SELECT is((SELECT status || ' ' || kind || ' ' || concurrency_limit FROM harvest.tasks WHERE seq = 2), 'running activity 2',
          'and wrote its row');

-- Where the rules live: the status alone is a table CHECK; tasks_derived_columns fires on
-- every INSERT (no WHEN clause: timers are checked too); tasks_checks after an UPDATE of
-- exactly the three columns.
SELECT is((SELECT string_agg(conname, ',') FROM pg_constraint
           WHERE conrelid = 'harvest.tasks'::regclass AND contype = 'c'),
          'tasks_status_check', 'the status is the tasks'' only table CHECK');
SELECT is((SELECT (t.tgtype::integer) || ' ' || (t.tgqual IS NULL)::text FROM pg_trigger AS t
           WHERE t.tgrelid = 'harvest.tasks'::regclass AND t.tgname = 'tasks_derived_columns'),
          '7 true', 'tasks_derived_columns fires before every INSERT, for each row, without a WHEN clause');
SELECT is((SELECT (t.tgtype::integer) || ' ' || string_agg(a.attname, ',' ORDER BY a.attname)
           FROM pg_trigger AS t JOIN pg_attribute AS a ON a.attrelid = t.tgrelid AND a.attnum = ANY (t.tgattr)
           WHERE t.tgrelid = 'harvest.tasks'::regclass AND t.tgname = 'tasks_checks' AND t.tgqual IS NULL
           GROUP BY t.tgtype),
          '17 concurrency_limit,kind,priority_aging_secs',
          'tasks_checks fires after an UPDATE of kind, concurrency_limit or priority_aging_secs, for each row');
SELECT lives_ok($$SELECT harvest._task_rules('activity', NULL, NULL)$$, 'harvest._task_rules: NULLs pass');

SELECT * FROM finish();
ROLLBACK;

-- _superseded_runs: the live runs latest-wins starts may supersede, per workflow and key with n
-- starts those past the newest limit - n (each start's own victims, with every start before it).
BEGIN;
SELECT plan(5);
SELECT harvest.declare_flow_policies('{"workflows": {
    "sr_c": {"concurrency": {"key": "input.d", "limit": 2, "on_conflict": "cancel_running"}},
    "sr_d": {"concurrency": {"key": "input.d", "limit": 1}}}}');
INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at, concurrency_key, status)
SELECT ('00000000-0000-4000-8000-0000000e000' || n)::uuid, 'sr_c', 'sr-' || n,
       timestamptz '2030-01-01 00:00:00+00' + make_interval(secs => n),
       CASE WHEN n = 6 THEN 'other' ELSE 'k' END, CASE WHEN n = 5 THEN 'COMPLETED' ELSE 'RUNNING' END
FROM generate_series(1, 6) AS n;
UPDATE harvest.executions SET status = 'PAUSED' WHERE id = '00000000-0000-4000-8000-0000000e0001';
CREATE FUNCTION pg_temp.sr(p_starts text) RETURNS text[] LANGUAGE sql AS $fn$
    SELECT array_agg(right(id::text, 1) ORDER BY id) FROM unnest(harvest._superseded_runs(p_starts::jsonb)) AS id;
$fn$;
SELECT is(pg_temp.sr('[{"workflow_name": "sr_c", "input": [{"d": "k"}]}]'), ARRAY['1', '2', '3'],
          '_superseded_runs(): one start, limit 2: the live runs (a paused one too) past the newest, not a closed one');
SELECT is(pg_temp.sr('[{"workflow_name": "sr_c", "input": [{"d": "k"}]}, {"workflow_name": "sr_c", "input": [{"d": "k"}]},
                      {"workflow_name": "sr_c", "input": [{"d": "other"}]}]'),
          ARRAY['1', '2', '3', '4'], '_superseded_runs(): two starts of a key: past limit - 2 (every live run); none of a key within its limit');
SELECT is(pg_temp.sr('[{"workflow_name": "sr_d", "input": [{"d": "k"}]}, {"workflow_name": "sr_c", "input": [{}]},
                      {"workflow_name": "nope", "input": [{"d": "k"}]}]'), NULL,
          '_superseded_runs(): none for a defer key, a start without a key or a workflow without a policy');
SELECT is(pg_temp.sr('[7, {"workflow_name": 1}, {"input": [{"d": "k"}]}]'), NULL,
          '_superseded_runs(): none for elements that are not starts');
SELECT is(harvest._superseded_runs('{"not": "an array"}'), ARRAY[]::uuid[],
          '_superseded_runs() of anything but an array: an empty array');
SELECT * FROM finish();
ROLLBACK;

-- _supersede's bounds (the sharding guide, "Latest-wins supersede is shard-local too"): scoped to
-- (workflow_name, key), a paused run is superseded, at most 32 runs shed per admission and the
-- rest by the next admission of the key.
BEGIN;
SELECT plan(5);
SELECT harvest.declare_flow_policies('{"workflows": {
    "sb_c": {"concurrency": {"key": "input.d", "limit": 1, "on_conflict": "cancel_running"}},
    "sb_d": {"concurrency": {"key": "input.d", "limit": 1}}}}');
INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at, concurrency_key, status)
SELECT ('00000000-0000-4000-8000-' || lpad(n::text, 12, '0'))::uuid, 'sb_c', 'sb-' || n,
       timestamptz '2030-01-01 00:00:00+00' + make_interval(secs => n), 'k',
       CASE WHEN n = 1 THEN 'PAUSED' ELSE 'RUNNING' END
FROM generate_series(1, 40) AS n;
-- A workflow that never opted in to latest-wins, whose key resolved to the same string.
INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at, concurrency_key, status)
VALUES ('00000000-0000-4000-8000-0000000d0001', 'sb_d', 'sb-defer', timestamptz '2030-01-01', 'k', 'RUNNING');
CREATE TEMP TABLE sb_first ON COMMIT DROP AS
SELECT harvest._supersede('sb_c', 'k', 1, '00000000-0000-4000-8000-0000000f0001') AS ids;
SELECT is((SELECT cardinality(ids) FROM sb_first), 32, '_supersede(): at most 32 runs shed by one admission');
SELECT is((SELECT status FROM harvest.executions WHERE workflow_id = 'sb-defer'), 'RUNNING',
          '_supersede(): a run of another workflow with the same key string is never cancelled');
SELECT is((SELECT count(*) FROM harvest.executions WHERE workflow_name = 'sb_c' AND status IN ('RUNNING', 'PAUSED')),
          8::bigint, '_supersede(): the excess stays live after one admission');
SELECT is(cardinality(harvest._supersede('sb_c', 'k', 1, '00000000-0000-4000-8000-0000000f0002')), 8,
          '_supersede(): the next admission of the key sheds the excess');
SELECT is((SELECT status FROM harvest.executions WHERE workflow_id = 'sb-1'), 'CANCELLED',
          '_supersede(): a paused run is superseded too (non-terminal, not in a slot)');
SELECT * FROM finish();
ROLLBACK;

-- A flow policy's numbers by the one rule for a JSON field (core.sql, _json_integer), when it is
-- declared: a limit of 2.0 is 2 at every start and listing (a raw ::integer cast failed each
-- with 22P02), a fraction or a string is refused naming the field.
BEGIN;
SELECT plan(6);
SELECT is(harvest.declare_flow_policies('{"workflows": {"jn": {"concurrency": {"key": "input", "limit": 1.0,
                                                                            "on_conflict": "cancel_running"}}}}'), 1,
          'declare_flow_policies(): a concurrency limit of 1.0 is declared');
SELECT harvest.start_workflow('jn', '["k"]', 'jn-1', 'jq');
SELECT harvest.start_workflow('jn', '["k"]', 'jn-2', 'jq');
SELECT is((SELECT array_agg(e.status ORDER BY e.workflow_id) FROM harvest.executions AS e WHERE e.workflow_name = 'jn'),
          ARRAY['CANCELLED', 'RUNNING'], '... a start under it supersedes as limit 1 (it was 22P02)');
SELECT is((SELECT c.max_concurrent FROM harvest.list_concurrency_keys('k') AS c), 1, '... and lists it as 1');
SELECT throws_ok($$SELECT harvest.declare_flow_policies('{"workflows": {"x": {"concurrency": {"key": "input", "limit": "2"}}}}')$$,
                 'HR001', 'workflow x: concurrency.limit must be a whole number from 1 to 2147483647, got "2"',
                 '... a limit in a string is HR001 naming it');
SELECT throws_ok($$SELECT harvest.declare_flow_policies('{"activities": {"a": {"max_concurrent": 1.5, "concurrency_key": "k"}}}')$$,
                 'HR001', 'activity a: max_concurrent must be a whole number from 1 to 2147483647, got 1.5',
                 '... an activity''s max_concurrent of 1.5 too');
SELECT throws_ok($$SELECT harvest.declare_flow_policies('{"activities": {"a": {"rate_limit": {"rps": "5"}}}}')$$,
                 'HR001', NULL, '... and a rate in a string');
SELECT * FROM finish();
ROLLBACK;
