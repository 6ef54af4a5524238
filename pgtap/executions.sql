-- functions/executions.sql: harvest.get_execution, get_execution_by_workflow_id, harvest.get_history,
-- harvest.terminate_workflow; then the list and the stack, waiting for a result,
-- the children (list_children), the runs per version (count_versions), a run row's
-- rules (the executions_checks trigger) and the dashboard's history page (get_history_page),
-- and acting on many runs by filter (cancel_workflows, terminate_workflows, signal_workflows: their
-- harvest._act_on_workflows; terminate_workflow's body harvest._terminate_execution),
-- each in a transaction of its own.
BEGIN;
SELECT plan(39);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

SELECT pg_temp.start_run('ex-1', 'ex_wf', 'ex_q', '[7]');

-- get_execution
SELECT results_eq(
    $$SELECT id, workflow_name, workflow_id, status, queue, input FROM harvest.get_execution(pg_temp.run('ex-1'))$$,
    $$SELECT pg_temp.run('ex-1'), 'ex_wf'::text, 'ex-1'::text, 'RUNNING'::text, 'ex_q'::text, '[7]'::jsonb$$,
    'get_execution() returns the execution row');
SELECT throws_ok($$SELECT * FROM harvest.get_execution('00000000-0000-4000-8000-00000000abcd')$$, 'HR002',
                 'execution 00000000-0000-4000-8000-00000000abcd does not exist',
                 'get_execution() of an unknown id: HR002');
SELECT throws_ok($$SELECT * FROM harvest.get_execution(NULL)$$, 'HR002', NULL, 'get_execution(NULL): HR002');

-- get_execution_by_workflow_id: the RUNNING run of a business key, else the newest.
SELECT is((SELECT id FROM harvest.get_execution_by_workflow_id('ex-1')), pg_temp.run('ex-1'),
          'get_execution_by_workflow_id() finds the run of a workflow_id');
SELECT is((SELECT id FROM harvest.get_execution_by_workflow_id('ex-1', 'ex_wf')), pg_temp.run('ex-1'),
          'get_execution_by_workflow_id() with the workflow name');
SELECT throws_ok($$SELECT * FROM harvest.get_execution_by_workflow_id('ex-1', 'other_wf')$$, 'HR002',
                 'no run has workflow_id ex-1 of workflow other_wf',
                 'get_execution_by_workflow_id() of another name: HR002');
SELECT throws_ok($$SELECT * FROM harvest.get_execution_by_workflow_id('')$$, 'HR001', 'workflow_id is empty',
                 'get_execution_by_workflow_id() of an empty id: HR001');
SELECT pg_temp.start_run('ex-shared', 'ex_other_wf', 'ex_q', '[]', 'ex-1');
SELECT throws_ok($$SELECT * FROM harvest.get_execution_by_workflow_id('ex-1')$$, 'HR001',
                 'workflow_id ex-1 is used by several workflows (ex_other_wf, ex_wf)',
                 'get_execution_by_workflow_id() of an id two workflows share, without a name: HR001');
SELECT is((SELECT id FROM harvest.get_execution_by_workflow_id('ex-1', 'ex_other_wf')), pg_temp.run('ex-shared'),
          'get_execution_by_workflow_id() names the workflow to choose');

-- get_history: in event order, after a given id.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:01+00';
SELECT is(harvest._append_event(pg_temp.run('ex-1'), 'MarkerRecorded', '{"seq": 1}'), 2::bigint, 'setup: event 2');
SELECT is(harvest._append_event(pg_temp.run('ex-1'), 'MarkerRecorded', '{"seq": 2}'), 3::bigint, 'setup: event 3');
SELECT results_eq($$SELECT event_id, event_type FROM harvest.get_history(pg_temp.run('ex-1'))$$,
                  $$VALUES (1::bigint, 'WorkflowStarted'::text), (2, 'MarkerRecorded'), (3, 'MarkerRecorded')$$,
                  'get_history(): the whole history in event order');
SELECT results_eq($$SELECT event_id, event_data, created_at FROM harvest.get_history(pg_temp.run('ex-1'), 1)$$,
                  $$VALUES (2::bigint, '{"seq": 1}'::jsonb, '2030-01-01 00:00:01+00'::timestamptz),
                           (3, '{"seq": 2}', '2030-01-01 00:00:01+00')$$,
                  'get_history(p_after_event_id => 1): the events after 1, with data and time');
SELECT is_empty($$SELECT * FROM harvest.get_history(pg_temp.run('ex-1'), 3)$$, 'get_history() after the last event: empty');
SELECT is((SELECT count(*) FROM harvest.get_history(pg_temp.run('ex-1'), NULL)), 3::bigint,
          'get_history(p_after_event_id => NULL) starts at the beginning');
SELECT throws_ok($$SELECT * FROM harvest.get_history('00000000-0000-4000-8000-00000000abcd')$$, 'HR002', NULL,
                 'get_history() of an unknown id from the start: HR002 (every run has its first event)');
SELECT results_eq($$SELECT event_id FROM harvest.get_history(pg_temp.run('ex-1'), 0, 2)$$,
                  $$VALUES (1::bigint), (2)$$, 'get_history(p_limit => 2): the first two events');
SELECT results_eq($$SELECT event_id FROM harvest.get_history(pg_temp.run('ex-1'), 1, 5, 1)$$,
                  $$VALUES (2::bigint)$$, 'get_history(p_max_bytes => 1): the page ends with the event that reaches it');
SELECT results_eq($$SELECT event_id FROM harvest.get_history(pg_temp.run('ex-1'), 1, 5, 2 * length('{"seq": 1}'))$$,
                  $$VALUES (2::bigint), (3)$$, '... and goes on while it has fewer bytes');
SELECT throws_ok($$SELECT * FROM harvest.get_history(pg_temp.run('ex-1'), 0, 5, 0)$$, 'HR001', 'max bytes 0 is not positive',
                 'get_history() of a bad p_max_bytes: HR001');
SELECT results_eq($$SELECT event_id FROM harvest.get_history(pg_temp.run('ex-1'), 2, 5)$$,
                  $$VALUES (3::bigint)$$, 'get_history(p_after_event_id => 2, p_limit => 5): the rest, one event');
SELECT is_empty($$SELECT * FROM harvest.get_history(pg_temp.run('ex-1'), 0, 0)$$, 'get_history(p_limit => 0): empty');
SELECT is((SELECT count(*) FROM harvest.get_history(pg_temp.run('ex-1'), 0, NULL)), 3::bigint,
          'get_history(p_limit => NULL): every event');
SELECT throws_ok($$SELECT * FROM harvest.get_history(pg_temp.run('ex-1'), 0, -1)$$, 'HR001',
                 'limit -1 is negative',
                 'get_history() with a negative limit: HR001 (PostgreSQL''s own 2201W said nothing of Harvest)');
CREATE FUNCTION pg_temp.hint_of(p_sql text) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    v_hint text;
BEGIN
    EXECUTE p_sql;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS v_hint = PG_EXCEPTION_HINT;
    RETURN v_hint;
END;
$fn$;
SELECT is(pg_temp.hint_of($$SELECT * FROM harvest.get_history(pg_temp.run('ex-1'), 0, -1)$$),
          'give 0 or more events, or NULL for the whole history',
          'get_history() with a negative limit: the hint says what to give');

-- terminate_workflow: ends the run at once, open tasks dropped.
SET LOCAL harvest.fake_now = '2030-01-01 00:00:02+00';
SELECT lives_ok($$SELECT harvest.terminate_workflow(pg_temp.run('ex-1'), 'operator said so')$$, 'terminate_workflow()');
SELECT results_eq(
    $$SELECT status, output, failure, completed_at FROM harvest.executions WHERE id = pg_temp.run('ex-1')$$,
    $$VALUES ('TERMINATED'::text, NULL::jsonb, '{"error_type": "Terminated", "message": "operator said so",
              "non_retryable": true, "details": null}'::jsonb, '2030-01-01 00:00:02+00'::timestamptz)$$,
    'the run is TERMINATED with a Terminated failure carrying the reason');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data FROM harvest.get_history(pg_temp.run('ex-1'), 3)$$,
    $$VALUES (4::bigint, 'WorkflowTerminated'::text, '{"reason": "operator said so"}'::jsonb)$$,
    'WorkflowTerminated{reason} is appended');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('ex-1')$$, 'its tasks are dropped');
SELECT throws_ok($$SELECT harvest.terminate_workflow(pg_temp.run('ex-1'))$$, 'HR005',
                 format('cannot terminate execution %s: it is already TERMINATED', pg_temp.run('ex-1')), 'terminating it again: HR005');
SELECT throws_ok($$SELECT harvest.terminate_workflow('00000000-0000-4000-8000-00000000abcd')$$, 'HR002', NULL,
                 'terminate_workflow() of an unknown id: HR002');
SELECT is((harvest.get_execution(pg_temp.run('ex-1'))).status, 'TERMINATED', 'get_execution() sees the end');

-- A terminate's reason is written into the run's history: bounded as the batch's is.
CREATE TEMP TABLE wordy ON COMMIT DROP AS SELECT * FROM harvest.start_workflow('ex_wf', '[]', 'ex-wordy');
UPDATE harvest.engine_settings SET max_payload_bytes = 64;
SELECT throws_ok($$SELECT harvest.terminate_workflow((SELECT execution_id FROM wordy), repeat('x', 100))$$,
                 'HR008', 'the reason of a terminate is 102 bytes, over the payload limit of 64 bytes',
                 'terminate_workflow() with a reason over the limit: HR008');
UPDATE harvest.engine_settings SET max_payload_bytes = DEFAULT;
SELECT is((harvest.get_execution((SELECT execution_id FROM wordy))).status, 'RUNNING', '... and the run goes on');

CREATE TEMP TABLE quiet ON COMMIT DROP AS SELECT * FROM harvest.start_workflow('ex_wf', '[]', 'ex-2');
SELECT lives_ok($$SELECT harvest.terminate_workflow((SELECT execution_id FROM quiet))$$,
                'terminate_workflow() without a reason');
SELECT results_eq(
    $$SELECT e.failure ->> 'message', h.event_data FROM harvest.executions AS e,
             harvest.get_history(e.id, 1) AS h WHERE e.id = (SELECT execution_id FROM quiet)$$,
    $$VALUES ('terminated'::text, '{"reason": null}'::jsonb)$$,
    'without a reason: the message says terminated, the event''s reason is null');
SELECT throws_ok($$SELECT harvest.terminate_workflow((SELECT execution_id FROM quiet))$$, 'HR005', NULL,
                 'a terminated run cannot be terminated: HR005');

-- terminate_workflow is audited: one workflow.terminate row, in the same transaction.
SET LOCAL application_name = 'harvest-cli';
CREATE TEMP TABLE audited_run ON COMMIT DROP AS
SELECT s.execution_id FROM harvest.start_workflow('audit_wf', '[]', 'audit-terminate') AS s;
SELECT lives_ok($$SELECT harvest.terminate_workflow((SELECT execution_id FROM audited_run), 'cleanup')$$,
                'setup: terminate a run from the CLI');
SELECT results_eq($$SELECT operation, target, actor = session_user, operator_id, source, details FROM harvest.audit_log
                    WHERE operation = 'workflow.terminate' AND target = (SELECT execution_id::text FROM audited_run)$$,
                  $$SELECT 'workflow.terminate'::text, execution_id::text, true, NULL::text, 'cli'::text,
                           '{"reason": "cleanup", "workflow_name": "audit_wf"}'::jsonb FROM audited_run$$,
                  'terminate_workflow() writes one audit row: operation, target, actor and source cli');
RESET application_name;

SELECT * FROM finish();
ROLLBACK;

-- harvest.list_executions, harvest.count_executions, harvest.get_execution_stack and their helpers.
BEGIN;
SELECT plan(109);
SET LOCAL TimeZone = 'UTC';

CREATE TEMP TABLE runs ON COMMIT DROP AS
SELECT n, (harvest.start_workflow('op_wf', '[]', 'op-' || n, 'op_q',
           p_search_attributes => jsonb_build_object('tenant', CASE WHEN n % 2 = 0 THEN 'acme' ELSE 'other' END,
                                                     'amount', n, 'vip', n = 3))).execution_id AS id
FROM generate_series(1, 5) AS n;

SELECT is((SELECT count(*) FROM harvest.list_executions(p_workflow_name => 'op_wf')), 5::bigint,
          'lists every run of a workflow');
SELECT is((SELECT count(*) FROM harvest.list_executions(p_workflow_name => 'op_wf',
           p_search_attributes => ARRAY['tenant=acme'])), 2::bigint, 'search attribute equality');
SELECT is((SELECT count(*) FROM harvest.list_executions(p_workflow_name => 'op_wf',
           p_search_attributes => ARRAY['tenant:acme', 'amount>=4'])), 1::bigint, 'key:value and a numeric comparison');
SELECT is((SELECT count(*) FROM harvest.list_executions(p_workflow_name => 'op_wf',
           p_search_attributes => ARRAY['vip=true'])), 1::bigint, 'boolean equality');
SELECT is((SELECT count(*) FROM harvest.list_executions(p_status => 'completed,running',
           p_workflow_name => 'op_wf')), 5::bigint, 'states are case-insensitive and comma-separated');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_status => 'DONE')$$, 'HR001',
                 'unknown state "DONE"', 'an unknown state is refused, not matched against nothing');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_search_attributes => ARRAY['tenant'])$$, 'HR001',
                 'search attribute filter "tenant" is malformed', 'a filter without an operator is refused');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_page_size => 1001)$$, 'HR001',
                 'page size 1001 is out of range 1..1000', 'page size is bounded');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_cursor => 'garbage')$$, 'HR001', NULL,
                 'a malformed cursor is refused');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_order => 'sideways')$$, 'HR001', NULL,
                 'order is asc or desc');
SELECT is((SELECT array_agg(r.workflow_id) FROM harvest.list_executions(p_workflow_id => 'op-2') AS r),
          ARRAY['op-2'], 'p_workflow_id lists the runs of that workflow id only');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_workflow_id => '')$$, 'HR001',
                 'workflow_id is empty', 'an empty workflow id is refused, not matched against nothing');

-- count_executions reads the same rows as the list, grouped.
SELECT is((SELECT array_agg(array[c.status, c.executions::text]) FROM harvest.count_executions(
           p_workflow_name => 'op_wf') AS c), ARRAY[ARRAY['RUNNING', '5']], 'counts per status');
SELECT is((SELECT c.executions FROM harvest.count_executions('workflow_name', p_workflow_name => 'op_wf',
           p_search_attributes => ARRAY['tenant=acme']) AS c WHERE c.status IS NULL AND c.workflow_name = 'op_wf'),
          2::bigint, 'counts per workflow name with the list''s search filter');
SELECT throws_ok($$SELECT * FROM harvest.count_executions('tenant')$$, 'HR001',
                 'cannot count executions by "tenant"', 'an unknown grouping is refused');
SELECT throws_ok($$SELECT * FROM harvest.count_executions(p_status => 'DONE')$$, 'HR001', NULL,
                 'an unknown state is refused by the count as by the list');

-- The filter expression: OR, AND, IN, parentheses; keys and values are bound parameters.
SELECT is((SELECT count(*) FROM harvest.list_executions(p_workflow_name => 'op_wf',
           p_filter => 'tenant = acme OR amount >= 5')), 3::bigint, 'filter: an OR of two attribute tests');
SELECT is((SELECT array_agg(r.search_attributes ->> 'amount' ORDER BY r.search_attributes ->> 'amount')
           FROM harvest.list_executions(p_filter => '(tenant = "acme" and amount > 2) or vip = true') AS r),
          ARRAY['3', '4'], 'filter: AND binds inside parentheses, OR between them, true is a boolean');
SELECT is((SELECT count(*) FROM harvest.list_executions(p_filter => 'tenant IN (acme, ''nobody'')')), 2::bigint,
          'filter: IN over quoted and bare values');
SELECT is((SELECT count(*) FROM harvest.list_executions(
           p_filter => 'workflow_name IN (op_wf, other_wf) AND amount != 1 AND status = running')), 4::bigint,
          'filter: workflow_name IN, a typed !=, a status test');
SELECT is((SELECT count(*) FROM harvest.list_executions(p_filter => 'amount = "3"')), 0::bigint,
          'filter: a quoted number is a string and matches no number');
SELECT is((SELECT count(*) FROM harvest.list_executions(p_filter => 'tenant = "x'') OR true --"')), 0::bigint,
          'filter: a value is a parameter, never SQL');
SELECT is((SELECT c.executions FROM harvest.count_executions(p_filter => 'tenant = acme OR amount >= 5') AS c),
          3::bigint, 'filter: count_executions reads the same rows as the list');
SELECT is((SELECT o_params FROM harvest._compile_filter('tenant = acme OR amount >= 5')),
          ARRAY['tenant', 'acme', 'amount', '5'], '_compile_filter: keys and values become parameters');
SELECT ok((SELECT o_sql !~ 'acme|tenant' FROM harvest._compile_filter('tenant = acme OR amount >= 5')),
          '_compile_filter: no key or value is spliced into the predicate');
SELECT is((SELECT kinds FROM harvest._filter_tokens('a IN ("x y", 2) <> b')),
          ARRAY['word', 'word', 'punct', 'value', 'punct', 'word', 'punct', 'punct', 'word'],
          '_filter_tokens: words, quoted values and punctuation');
SELECT is((SELECT o_anchored FROM harvest._filter_term(ARRAY['word', 'punct', 'word'], ARRAY['status', '=', 'running'],
           1, ARRAY[]::text[], 0)), false, '_filter_term: a status test alone finds no row by an index');
SELECT is((SELECT o_anchored FROM harvest._filter_and(ARRAY['word', 'punct', 'word', 'word', 'word', 'punct', 'word'],
           ARRAY['status', '=', 'running', 'and', 'k', '=', 'v'], 1, ARRAY[]::text[], 0)), true,
          '_filter_and: one indexed test anchors an AND');
SELECT is((SELECT o_sql FROM harvest._filter_or(ARRAY['word', 'punct', 'word', 'word', 'word', 'punct', 'word'],
           ARRAY['workflow_name', '=', 'a', 'OR', 'workflow_name', '=', 'b'], 1, ARRAY[]::text[], 0)),
          '(e.workflow_name = $1[1] OR e.workflow_name = $1[2])', '_filter_or: sides joined by OR over parameters');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_filter => 'status = RUNNING OR tenant = acme')$$, 'HR001',
                 'filter: each side of an OR must test a search attribute or workflow_name = / IN',
                 'filter: an OR side that no index finds is refused (it would scan every run)');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_filter => '(tenant = acme')$$, 'HR001',
                 'filter: "(" is not closed', 'filter: an unclosed parenthesis is refused');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_filter => 'tenant = ')$$, 'HR001',
                 'filter: "tenant =" has no value', 'filter: a test without a value is refused');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_filter => 'tenant ~ acme')$$, 'HR001',
                 'filter: unexpected "~" in "tenant ~ acme"', 'filter: an unknown character is refused');
SELECT throws_ok($$SELECT * FROM harvest.count_executions(p_filter => 'status = DONE')$$, 'HR001',
                 'filter: unknown state "DONE"', 'filter: an unknown state is refused');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_filter => 'vip > true')$$, 'HR001',
                 'filter: compare true or false with = or !=, not >', 'filter: booleans are not ordered');
-- A number numeric cannot hold is the filter's HR001, not the query's 22003 as it ran; more than
-- 100 search attribute filters are refused before any is compiled.
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_filter => 'amount > 1e999999')$$, 'HR001',
                 'filter: 1e999999 is a number out of range', 'filter: a number out of numeric''s range');
SELECT throws_ok($$SELECT * FROM harvest.count_executions(p_search_attributes => ARRAY['amount>1e999999'])$$,
                 'HR001', 'search attribute filter "amount>1e999999" compares with a number out of range',
                 'a search attribute filter''s number out of numeric''s range');
SELECT throws_ok($$SELECT * FROM harvest.cancel_workflows(p_search_attributes => array_fill('a=1'::text, ARRAY[101]),
                                                          p_dry_run => true)$$,
                 'HR001', 'search attribute filters: 101 given, over 100', 'at most 100 search attribute filters');
SELECT throws_ok($$SELECT harvest.cancel_workflows(p_workflow_name => 'op_wf', p_limit => 1,
                                                   p_reason => repeat('x', harvest._payload_limit()))$$,
                 'HR008', NULL, 'a batch''s reason over the payload limit is refused, nothing written');
SELECT is(ARRAY[harvest._number_out_of_range('1e999999'), harvest._number_out_of_range('-2.5e3'),
                harvest._number_out_of_range('acme')], ARRAY[true, false, false],
          '_number_out_of_range: only a number numeric cannot hold');

-- Each side of an OR goes through an index (BitmapOr over the GIN and the name index).
CREATE FUNCTION pg_temp.filter_plan(p_filter text) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    v_compiled record;
    v_line text;
    v_plan text := '';
BEGIN
    SELECT * INTO v_compiled FROM harvest._compile_filter(p_filter);
    FOR v_line IN EXECUTE 'EXPLAIN SELECT e.id FROM harvest.executions AS e WHERE ' || v_compiled.o_sql
        USING v_compiled.o_params LOOP
        v_plan := v_plan || v_line || E'\n';
    END LOOP;
    RETURN v_plan;
END;
$fn$;
SET LOCAL enable_seqscan = off;
SELECT matches(pg_temp.filter_plan('tenant = acme OR workflow_name IN (a, b) OR amount > 3'),
               'BitmapOr.*executions_search.*executions_name_created.*executions_search',
               'filter: an OR is a BitmapOr of index scans, never a full scan');
RESET enable_seqscan;

-- A range test on a number is written on harvest._search_attr_ordered's expression, so an
-- operator's index on it (partial on the key) answers both the filter and --search-attr
-- (the plans: tests/integration/test_search_attribute_ranges.py; an index made in this
-- transaction is not one its plans may use).
SELECT is(harvest._search_attr_ordered(quote_literal('amount'), 'number', 'search_attributes'),
          '(CASE WHEN jsonb_typeof(search_attributes -> ''amount'') = ''number'''
          ' THEN (search_attributes ->> ''amount'')::numeric END)',
          '_search_attr_ordered: a number, NULL for a value of another type');
SELECT is((SELECT array_agg((r.search_attributes ->> 'amount')::int ORDER BY r.search_attributes ->> 'amount')
           FROM harvest.list_executions(p_workflow_name => 'op_wf', p_filter => 'amount > 3') AS r),
          ARRAY[4, 5], 'filter: a range on a number');

SELECT is(harvest._execution_filters('running', 'w', NULL, NULL, NULL),
          ARRAY['true', 'e.status = ''RUNNING''', 'e.workflow_name = ''w'''],
          '_execution_filters: one condition per filter given, states upper-cased, one state an equality');
SELECT is(harvest._execution_filters('running,failed', NULL, NULL, NULL, NULL),
          ARRAY['true', 'e.status = ANY(''{RUNNING,FAILED}''::text[])'], '_execution_filters: several states an ANY');

-- A page of one state's runs after a cursor, newest first, reads down executions_status_listed in
-- the list's order (0114): (status, created_at DESC, id) matched neither direction of
-- (created_at DESC, id DESC), and the page read down executions_created through every state.
SET LOCAL enable_seqscan = off;
SET LOCAL enable_sort = off;
SELECT matches(pg_temp.plan_of(format(
    'SELECT e.id FROM harvest.executions AS e WHERE %s AND (e.created_at, e.id) < (now(), %L::uuid)'
    ' ORDER BY e.created_at DESC, e.id DESC LIMIT 51',
    array_to_string(harvest._execution_filters('RUNNING', NULL, NULL, NULL, NULL), ' AND '),
    '00000000-0000-0000-0000-000000000001')),
    'Scan Backward using executions_status_listed.*Index Cond: \(\(e\.status = ''RUNNING''::text\) AND \(ROW\(e\.created_at, e\.id\) <',
    'a page of one state after a cursor seeks executions_status_listed backward, in the list''s order');
RESET enable_sort;

-- Each --search-attr test goes through the GIN index executions_search (0114): an equality by
-- containment, any other test by the key's existence (the ->> test alone read every run).
SELECT matches(pg_temp.plan_of('SELECT e.id FROM harvest.executions AS e WHERE '
                               || harvest._search_predicate(harvest._parse_search_filter(f.filter))),
               'Bitmap Index Scan on executions_search', format('--search-attr %s goes through executions_search', f.filter))
FROM unnest(ARRAY['tenant=acme', 'amount=4', 'vip=true', 'amount>=4', 'tenant!=acme', 'vip!=false',
                  'at<2030-01-01', 'tenant>b', 'doc={"a": 1}']) AS f (filter);
RESET enable_seqscan;

-- A bounded count (the dashboard's status chips): at most p_limit runs a status, capped when
-- reached; status grouping only.
SELECT results_eq($$SELECT status, executions, capped FROM harvest.count_executions(p_workflow_name => 'op_wf',
                                                                                   p_limit => 3)$$,
                  $$VALUES ('RUNNING'::text, 3::bigint, true)$$, 'count_executions: p_limit caps a status''s count');
SELECT results_eq($$SELECT status, executions, capped FROM harvest.count_executions(p_workflow_name => 'op_wf',
                                                                                   p_limit => 5)$$,
                  $$VALUES ('RUNNING'::text, 5::bigint, true)$$, '... a count that reaches the limit is capped');
SELECT results_eq($$SELECT status, executions, capped FROM harvest.count_executions(p_workflow_name => 'op_wf',
                                                                                   p_limit => 6,
                                                                                   p_search_attributes => ARRAY['tenant=acme'])$$,
                  $$VALUES ('RUNNING'::text, 2::bigint, false)$$, '... under it, exact, with the list''s filters');
SELECT is_empty($$SELECT * FROM harvest.count_executions(p_workflow_name => 'op_wf', p_status => 'FAILED', p_limit => 6)$$,
                '... a state the filters exclude has no row');
SELECT results_eq($$SELECT status, executions, capped FROM harvest.count_executions(p_workflow_name => 'op_wf')$$,
                  $$VALUES ('RUNNING'::text, 5::bigint, false)$$, '... without it every run is counted, never capped');
SELECT throws_ok($$SELECT * FROM harvest.count_executions('workflow_name', p_limit => 10)$$, 'HR001', NULL,
                 '... a bounded count groups by status only');
SELECT throws_ok($$SELECT * FROM harvest.count_executions(p_limit => 0)$$, 'HR001', NULL, '... a limit below 1 is HR001');

-- Keyset pages of 2: the last row of a page carries the cursor; the last page carries none.
CREATE TEMP TABLE page1 ON COMMIT DROP AS
SELECT * FROM harvest.list_executions(p_workflow_name => 'op_wf', p_page_size => 2, p_order => 'asc');
CREATE TEMP TABLE page2 ON COMMIT DROP AS
SELECT * FROM harvest.list_executions(p_workflow_name => 'op_wf', p_page_size => 2, p_order => 'asc',
    p_cursor => (SELECT next_cursor FROM page1 WHERE next_cursor IS NOT NULL));
CREATE TEMP TABLE page3 ON COMMIT DROP AS
SELECT * FROM harvest.list_executions(p_workflow_name => 'op_wf', p_page_size => 2, p_order => 'asc',
    p_cursor => (SELECT next_cursor FROM page2 WHERE next_cursor IS NOT NULL));
SELECT is((SELECT array_agg(execution_id ORDER BY created_at, execution_id) FROM (
           SELECT execution_id, created_at FROM page1 UNION ALL SELECT execution_id, created_at FROM page2
           UNION ALL SELECT execution_id, created_at FROM page3) AS p),
          (SELECT array_agg(e.id ORDER BY e.created_at, e.id) FROM harvest.executions e WHERE e.workflow_name = 'op_wf'),
          'three pages hold every run once, in order');
SELECT is((SELECT count(*) FROM page3 WHERE next_cursor IS NOT NULL), 0::bigint, 'the last page has no cursor');

SELECT is((harvest.get_execution_stack((SELECT id FROM runs WHERE n = 1)) ->> 'status'), 'RUNNING',
          'stack reports the status');
SELECT throws_ok(format('SELECT harvest.get_execution_stack(%L)', gen_random_uuid()), 'HR002', NULL,
                 'stack of an unknown execution is not found');
SELECT pg_temp.start_claimed('stuck', 'stuck_wf', 'stuck_q');
SELECT harvest.fail_workflow_task(pg_temp.task('stuck'), pg_temp.token('stuck'),
                                  '{"error_type": "IllegalWorkflowOperation", "message": "never awaited"}', 5);
SELECT is(harvest.get_execution_stack(pg_temp.run('stuck')) #>> '{workflow_task,last_failure,message}',
          'never awaited', 'stack: a failing workflow task says why it fails (a result wait quotes it)');
-- A workflow task on a queue no live worker polls (a child sent to queue="email") says so.
SELECT is(harvest.get_execution_stack(pg_temp.run('stuck')) #>> '{workflow_task,queue}', 'stuck_q',
          'stack: the workflow task names its queue');
SELECT is(harvest.get_execution_stack(pg_temp.run('stuck')) #>> '{workflow_task,live_workers}', '0',
          'stack: and how many live workers poll it (none: it waits for one)');
-- The failing filter: the runs whose workflow task's last attempt failed, each marked with it.
SELECT results_eq(
    $$SELECT execution_id, task_error_type, task_attempt, task_failing_since <= harvest.now()
      FROM harvest.list_executions(p_failing => true)$$,
    $$SELECT pg_temp.run('stuck'), 'IllegalWorkflowOperation'::text, 1, true$$,
    'list_executions(p_failing => true): the run whose workflow task fails, its error type, attempt and since when');
SELECT is_empty($$SELECT 1 FROM harvest.list_executions(p_failing => false) WHERE execution_id = pg_temp.run('stuck')$$,
                'list_executions(p_failing => false): every run but those');
SELECT is((SELECT count(*) FROM harvest.list_executions(p_workflow_name => 'op_wf', p_failing => false)
           WHERE task_error_type IS NULL AND task_attempt IS NULL AND task_failing_since IS NULL), 5::bigint,
          'list_executions(p_failing => false): the others, unmarked');
SELECT is((SELECT task_error_type FROM harvest.list_executions(p_workflow_name => 'stuck_wf')), 'IllegalWorkflowOperation',
          'list_executions(): a failing run is marked without the filter too');
SELECT results_eq($$SELECT status, executions FROM harvest.count_executions(p_failing => true)$$,
                  $$VALUES ('RUNNING'::text, 1::bigint)$$, 'count_executions(p_failing => true)');
SELECT matches(pg_temp.plan_of($$SELECT * FROM harvest.executions AS e WHERE $$
                               || array_to_string(harvest._execution_filters(NULL, NULL, NULL, NULL, NULL, NULL, true), ' AND ')),
               'tasks_workflow_failing', '_execution_filters(p_failing): down tasks_workflow_failing');
SELECT is((SELECT d -> 'execution_ids' FROM harvest.terminate_workflows(p_failing => true, p_dry_run => true) AS d),
          jsonb_build_array(pg_temp.run('stuck')), 'terminate_workflows(p_failing => true): a batch selects them as the list does');
SELECT throws_ok($$SELECT harvest.cancel_workflows(p_failing => false, p_dry_run => true)$$, 'HR001', NULL,
                 'cancel_workflows(p_failing => false) alone: HR001 (it would select nearly every live run)');
-- A bounded stack (the dashboard's, the HTTP route's): at most p_limit entries a list, and
-- every list's total; without p_limit, every entry.
CREATE TEMP TABLE wide ON COMMIT DROP AS
SELECT (harvest.start_workflow('wide_wf', '[]', 'wide', 'wide_q')).execution_id AS id;
INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at, parent_id, parent_seq)
SELECT gen_random_uuid(), 'kid', 'wide-kid-' || g, 'RUNNING', now(), (SELECT id FROM wide), g
FROM generate_series(1, 3) AS g;
SELECT is(jsonb_path_query_array(harvest.get_execution_stack((SELECT id FROM wide), 2), '$.children[*].seq'),
          '[1, 2]'::jsonb, 'stack(p_limit => 2): the first two children, by seq');
SELECT is(harvest.get_execution_stack((SELECT id FROM wide), 2) -> 'totals',
          '{"children": 3, "pending_activities": 0, "timers": 0, "signals": 0, "mutexes": 0, "awaited_signals": 0}'::jsonb, 'stack: each list''s total');
SELECT is(jsonb_array_length(harvest.get_execution_stack((SELECT id FROM wide)) -> 'children'), 3,
          'stack without p_limit: every entry');
-- The run's own dead letter (kind 'workflow') is its stack's dead_letter, not a nameless
-- activity of pending_activities (where it sorted last, past a bounded page).
INSERT INTO harvest.dead_letters (execution_id, workflow_name, queue, attempts, failure, scheduled_at, failed_at, kind)
VALUES ((SELECT id FROM wide), 'wide_wf', 'wide_q', 1,
        '{"error_type": "HistoryLimitExceeded", "message": "history over its hard cap", "details": {"n": 1}}',
        now(), now(), 'workflow');
SELECT is((harvest.get_execution_stack((SELECT id FROM wide)) -> 'dead_letter') - 'failed_at',
          jsonb_build_object('id', (SELECT max(id) FROM harvest.dead_letters), 'error_type', 'HistoryLimitExceeded',
                             'message', 'history over its hard cap'),
          'stack: the run''s own dead letter, its id and its failure''s type and message');
SELECT is(harvest.get_execution_stack((SELECT id FROM wide)) -> 'pending_activities', '[]'::jsonb,
          'stack: a run''s own dead letter is no pending activity');
SELECT is(harvest.get_execution_stack((SELECT id FROM wide)) #> '{totals,pending_activities}', '0'::jsonb,
          'stack: nor counted as one');
-- An activity's progress: its last heartbeat's time and details (migration-free: the task row's
-- own columns); a dead letter's none; details over 4096 bytes clipped, saying so and their size.
INSERT INTO harvest.tasks (execution_id, kind, queue, status, due_at, scheduled_at, seq, activity_name, attempt,
                           started_at, heartbeat_at, heartbeat_details)
VALUES ((SELECT id FROM wide), 'activity', 'wide_q', 'running', now(), now(), 7, 'crawl', 1, now(),
        '2030-01-02 03:04:05+00', '{"page": 41}'),
       ((SELECT id FROM wide), 'activity', 'wide_q', 'running', now(), now(), 8, 'crawl', 1, now(),
        '2030-01-02 03:04:06+00', jsonb_build_object('blob', repeat('x', 5000))),
       ((SELECT id FROM wide), 'activity', 'wide_q', 'pending', now(), now(), 9, 'crawl', 0, NULL, NULL, NULL);
SELECT is((SELECT jsonb_build_object('at', a -> 'heartbeat_at', 'details', a -> 'heartbeat_details',
                                     'bytes', a -> 'heartbeat_details_bytes', 'clipped', a -> 'heartbeat_details_clipped')
           FROM jsonb_array_elements(harvest.get_execution_stack((SELECT id FROM wide)) -> 'pending_activities') AS a
           WHERE (a ->> 'seq')::integer = 7),
          jsonb_build_object('at', '2030-01-02T03:04:05+00:00'::timestamptz, 'details', '{"page": 41}'::jsonb,
                             'bytes', 12, 'clipped', false),
          'stack: a running activity''s last heartbeat, when and its details, with their size');
SELECT is((SELECT jsonb_build_object('details', a -> 'heartbeat_details', 'bytes', a -> 'heartbeat_details_bytes',
                                     'clipped', a -> 'heartbeat_details_clipped')
           FROM jsonb_array_elements(harvest.get_execution_stack((SELECT id FROM wide)) -> 'pending_activities') AS a
           WHERE (a ->> 'seq')::integer = 8),
          jsonb_build_object('details', to_jsonb('{"blob": "' || repeat('x', 190) || '... (5012 bytes)'),
                             'bytes', 5012, 'clipped', true),
          'stack: details over 4096 bytes clipped: their first 200 characters and their size');
SELECT is((SELECT a -> 'heartbeat_details' FROM jsonb_array_elements(
               harvest.get_execution_stack((SELECT id FROM wide)) -> 'pending_activities') AS a
           WHERE (a ->> 'seq')::integer = 9), 'null'::jsonb,
          'stack: an activity that has not heartbeat has no details');
UPDATE harvest.tasks SET heartbeat_details = '{"_harvest_ref": "00000000-0000-0000-0000-000000000001", "bytes": 900000}'
WHERE execution_id = (SELECT id FROM wide) AND seq = 9;
SELECT is((SELECT jsonb_build_object('bytes', a -> 'heartbeat_details_bytes', 'clipped', a -> 'heartbeat_details_clipped')
           FROM jsonb_array_elements(harvest.get_execution_stack((SELECT id FROM wide)) -> 'pending_activities') AS a
           WHERE (a ->> 'seq')::integer = 9),
          '{"bytes": 900000, "clipped": true}'::jsonb,
          'stack: offloaded details are as large as their reference says (clipped, not read back)');
DELETE FROM harvest.tasks WHERE execution_id = (SELECT id FROM wide) AND kind = 'activity';
-- The buffered signals (received since the workflow last ran): which, not only how many.
SELECT harvest.signal_workflow((SELECT id FROM wide), 'approve', '{"ok": true}');
SELECT harvest.signal_workflow((SELECT id FROM wide), 'note', '1');
SELECT is(jsonb_path_query_array(harvest.get_execution_stack((SELECT id FROM wide), 1), '$.signals[*].name'),
          '["approve"]'::jsonb, 'stack(p_limit => 1): the first buffered signal by event id, by name');
SELECT is((SELECT jsonb_build_object('total', s #> '{totals,signals}', 'count', s -> 'signals_since_last_task',
                                     'keys', (SELECT jsonb_agg(k ORDER BY k) FROM jsonb_object_keys(s #> '{signals,1}') AS k))
           FROM harvest.get_execution_stack((SELECT id FROM wide)) AS s),
          '{"total": 2, "count": 2, "keys": ["event_id", "name", "received_at"]}'::jsonb,
          'stack: each buffered signal''s event id, name and time (no payload), and their total');
SELECT throws_ok(format('SELECT harvest.get_execution_stack(%L, 0)', (SELECT id FROM wide)), 'HR001',
                 'limit 0 is out of range 1..10000', 'stack: a limit below 1 is HR001');

-- The helpers, directly.
SELECT is((SELECT id FROM harvest._decode_cursor(harvest._encode_cursor('2030-01-01 00:00:00+00',
           '00000000-0000-0000-0000-000000000001'))), '00000000-0000-0000-0000-000000000001'::uuid,
          'a cursor round-trips');
SELECT is((SELECT row(created_at, id, as_of, scope)::text FROM harvest._decode_cursor(harvest._encode_cursor(
           '2030-01-01 00:00:00+00', '00000000-0000-0000-0000-000000000001', '2030-01-02 00:00:00+00', 'abc'))),
          row('2030-01-01 00:00:00+00'::timestamptz, '00000000-0000-0000-0000-000000000001'::uuid,
              '2030-01-02 00:00:00+00'::timestamptz, 'abc')::text,
          'a batch''s cursor round-trips its as_of and scope through the same reader');
SELECT is(harvest._parse_search_filter('amount >= 10'), '{"key": "amount", "op": ">=", "value": "10"}'::jsonb,
          'a filter parses into key, operator and value');
SELECT is(ARRAY[harvest._search_attr_key_ok('tenant_id.v-2'), harvest._search_attr_key_ok('a b'),
                harvest._search_attr_key_ok('a:b'), harvest._search_attr_key_ok(''),
                harvest._search_attr_key_ok('été'), harvest._search_attr_key_ok(NULL)],
          ARRAY[true, false, false, false, false, false],
          '_search_attr_key_ok: letters, digits, _, . and - only (false for NULL)');
SELECT throws_ok($$INSERT INTO harvest.search_attribute_indexes (name, type, index_name) VALUES ('a b', 'text', 'x_ab')$$,
                 '23514', NULL, 'search_attribute_indexes refuses a name that breaks the key rule');
SELECT lives_ok($$INSERT INTO harvest.search_attribute_indexes (name, type, index_name) VALUES ('t.v-2', 'text', 'x_t')$$,
                'and takes one that keeps it');
SELECT is((SELECT pg_get_constraintdef(c.oid) FROM pg_constraint AS c
           WHERE c.conname = 'search_attribute_indexes_name_check'),
          'CHECK (harvest._search_attr_key_ok(name))', 'its CHECK asks _search_attr_key_ok, the one rule');
SELECT is((SELECT provolatile FROM pg_proc WHERE oid = 'harvest._search_attr_key_ok(text)'::regprocedure),
          'i'::"char", '_search_attr_key_ok is IMMUTABLE, as a CHECK requires');
SELECT is(harvest._parse_search_filter(' a-b.c_1 != x y '), '{"key": "a-b.c_1", "op": "!=", "value": "x y "}'::jsonb,
          'a filter''s key ends at its operator, spaces around it');
SELECT throws_ok($$SELECT harvest._parse_search_filter('t#x=1')$$, 'HR001',
                 'search attribute filter "t#x=1" is malformed', 'a filter whose key breaks the key rule is malformed');
SELECT ok(harvest._search_predicate('{"key": "a", "op": "=", "value": "x''y"}') LIKE '%''x''''y''%',
          'predicate literals are quoted');
SELECT is(harvest._try_timestamptz('not a time'), NULL, 'an unparseable time compares as NULL');
SET LOCAL TimeZone = 'Pacific/Kiritimati';
SET LOCAL DateStyle = 'SQL, DMY';
SELECT is(ARRAY[harvest._try_timestamptz('2030-01-05T10:00:00'), harvest._try_timestamptz('2030-01-05 10:00'),
                harvest._try_timestamptz('2030-01-05T15:30:00.000+05:30'),
                harvest._try_timestamptz('2030-01-05T05:00-0500'), harvest._try_timestamptz('2030-01-05T10:00Z'),
                harvest._try_timestamptz('2030-01-05T12:00+02'), harvest._try_timestamptz('2030-01-05') + interval '10 hours'],
          array_fill('2030-01-05 10:00:00+00'::timestamptz, ARRAY[7]),
          'a search attribute time is ISO 8601, UTC unless it has an offset, whatever the session zone');
SELECT is(ARRAY[harvest._try_timestamptz('05/01/2030'), harvest._try_timestamptz('2030-01-05 10:00 IST'),
                harvest._try_timestamptz('2030-02-30'), harvest._try_timestamptz('2030-01-05T25:00'),
                harvest._try_timestamptz('infinity')],
          array_fill(NULL::timestamptz, ARRAY[5]),
          'text that is not an ISO 8601 time (or no such day) is not a time, whatever the DateStyle');
SET LOCAL TimeZone = 'UTC';
RESET DateStyle;
SELECT is((SELECT count(*) FROM harvest.list_executions(p_workflow_name => 'op_wf',
           p_search_attributes => ARRAY['tenant!=acme', 'amount<5'])), 2::bigint, 'typed != and <');

-- One key holding booleans, numbers and strings across runs: each typed filter
-- matches its own type and never casts another (whatever order the planner picks).
SELECT harvest.start_workflow('mix_wf', '[]', 'mix-' || n, 'mix_q',
                              p_search_attributes => jsonb_build_object('flag', v))
FROM (VALUES (1, 'true'::jsonb), (2, '5'), (3, '"yes"'), (4, 'false'), (5, '7.5'), (6, '"5"'), (7, 'null'))
    AS m (n, v);
CREATE TEMP TABLE mixed ON COMMIT DROP AS
SELECT f.filter, (SELECT array_agg(l.workflow_id ORDER BY l.workflow_id)
                  FROM harvest.list_executions(p_workflow_name => 'mix_wf',
                                               p_search_attributes => ARRAY[f.filter]) AS l) AS ids
FROM unnest(ARRAY['flag=true', 'flag!=false', 'flag>3', 'flag=5', 'flag!=5', 'flag<6', 'flag=yes',
                  'flag>=x']) AS f (filter);
SELECT results_eq($$SELECT filter, ids FROM mixed$$,
    $$VALUES ('flag=true'::text, ARRAY['mix-1']), ('flag!=false', ARRAY['mix-1']),
             ('flag>3', ARRAY['mix-2', 'mix-5']), ('flag=5', ARRAY['mix-2', 'mix-6']),
             ('flag!=5', ARRAY['mix-5']), ('flag<6', ARRAY['mix-2']), ('flag=yes', ARRAY['mix-3']),
             ('flag>=x', ARRAY['mix-3'])$$,
    'typed filters over a key of mixed JSON types: each matches its own type, none fails a cast');
SELECT lives_ok($$SELECT * FROM harvest.list_executions(p_status => 'RUNNING',
                      p_search_attributes => ARRAY['flag=true', 'flag>1', 'flag!=false'])$$,
                'several typed filters of one mixed key compose without a cast error');

-- _time_literal: dynamic SQL's literal of a time reads back as the same instant in a session
-- whose zone prints an abbreviation the abbreviation set reads as another zone's.
SET LOCAL DateStyle = 'Postgres, DMY';
SET LOCAL TimeZone = 'Asia/Kolkata';
SELECT is(harvest._time_literal('2030-01-02 03:04:05.5+00'),
          '''2030-01-02T03:04:05.500000Z AD''::timestamptz', '_time_literal: ISO in UTC with its era');
CREATE TEMP TABLE read_back (at timestamptz) ON COMMIT DROP;
DO $$ BEGIN
    EXECUTE 'INSERT INTO read_back SELECT ' || harvest._time_literal('2030-01-02 03:04:05.5+00');
    EXECUTE 'INSERT INTO read_back SELECT ' || harvest._time_literal('infinity');
END $$;
SELECT results_eq($$SELECT at FROM read_back$$,
                  $$VALUES ('2030-01-02 03:04:05.5+00'::timestamptz), ('infinity')$$,
                  '... and reads back as the same instant under DateStyle Postgres in Asia/Kolkata');
SET LOCAL TimeZone = 'UTC';
SET LOCAL DateStyle = 'ISO, MDY';

SELECT * FROM finish();
ROLLBACK;

-- harvest.wait_for_result, harvest.stop_waiting_for_result, and the
-- waiter marks _close_execution consumes (it notifies harvest_done only for them).
BEGIN;
SELECT plan(11);

SELECT pg_temp.start_run('a', 'res_wf', 'default', p_workflow_id => 'res-a');
SELECT pg_temp.start_run('b', 'res_wf', 'default', p_workflow_id => 'res-b');

SELECT is((harvest.wait_for_result(pg_temp.run('a'), '00000000-0000-0000-0000-0000000000a1')).status,
          'RUNNING', 'wait_for_result() returns the run as it is');
SELECT is((SELECT count(*) FROM harvest.result_waiters WHERE execution_id = pg_temp.run('a')), 1::bigint,
          'and marks the waiter');
SELECT lives_ok($$SELECT harvest.wait_for_result(pg_temp.run('a'), '00000000-0000-0000-0000-0000000000a1')$$,
                'waiting again is idempotent');
SELECT is((SELECT count(*) FROM harvest.result_waiters), 1::bigint, 'one mark per waiter and run');
SELECT throws_ok($$SELECT harvest.wait_for_result(gen_random_uuid(), gen_random_uuid())$$, 'HR002', NULL,
                 'an unknown run: HR002');

-- Closing the run consumes its marks (and notifies, which pgTAP cannot observe).
SELECT harvest.terminate_workflow(pg_temp.run('a'), 'done');
SELECT is((SELECT count(*) FROM harvest.result_waiters WHERE execution_id = pg_temp.run('a')), 0::bigint,
          'a closed run has no waiter marks left');
SELECT is((harvest.wait_for_result(pg_temp.run('a'), gen_random_uuid())).status, 'TERMINATED',
          'waiting on a finished run answers at once and marks nothing');
-- A mark that committed after the close's delete (the close found the waiters' lock taken, so
-- it notified without seeing it) goes when its waiter reads the ended run.
INSERT INTO harvest.result_waiters (execution_id, waiter_id, since)
VALUES (pg_temp.run('a'), '00000000-0000-0000-0000-0000000000a2', now());
SELECT is((harvest.wait_for_result(pg_temp.run('a'), '00000000-0000-0000-0000-0000000000a2')).status,
          'TERMINATED', 'the waiter reads the ended run');
SELECT is((SELECT count(*) FROM harvest.result_waiters), 0::bigint,
          'and its mark left on the ended run goes with that read');

SELECT harvest.wait_for_result(pg_temp.run('b'), '00000000-0000-0000-0000-0000000000b1');
SELECT is((SELECT login FROM harvest.result_waiters), session_user::text, 'a mark is its login''s');
-- Another login's mark of the same waiter id (a reader can read every waiter id) stays.
INSERT INTO harvest.result_waiters (execution_id, waiter_id, since, login)
VALUES (pg_temp.run('b'), '00000000-0000-0000-0000-0000000000b1', now(), 'someone_else');
SELECT harvest.stop_waiting_for_result('00000000-0000-0000-0000-0000000000b1');
SELECT is((SELECT array_agg(login) FROM harvest.result_waiters), ARRAY['someone_else'],
          'stop_waiting_for_result() drops the waiter''s marks of the caller''s login only');

SELECT * FROM finish();
ROLLBACK;

-- harvest.list_children: an execution's children, down to a depth, by status. A root
-- of rl_parent (key lc_root, queue rq_lc_root) starts children with pg_temp.child.
BEGIN;
SELECT plan(27);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:10:00+00';
SELECT isnt(pg_temp.start_run('lc_root', 'rl_parent', 'rq_lc_root'), NULL, 'setup: a root');
SELECT is(pg_temp.decide('lc_root', jsonb_build_array(pg_temp.child(1, 'lc_a'))), 'RUNNING', 'setup: child lc_a');
SET LOCAL harvest.fake_now = '2030-01-01 00:11:00+00';
SELECT lives_ok($$SELECT harvest.signal_workflow(pg_temp.run('lc_root'), 'more')$$, 'setup: wake the root');
SELECT is(pg_temp.decide('lc_root', jsonb_build_array(pg_temp.child(2, 'lc_b'))), 'RUNNING', 'setup: child lc_b');
SET LOCAL harvest.fake_now = '2030-01-01 00:12:00+00';
SELECT is(pg_temp.decide('lc_a', jsonb_build_array(pg_temp.child(1, 'lc_a1'))), 'RUNNING', 'setup: grandchild lc_a1');
SET LOCAL harvest.fake_now = '2030-01-01 00:13:00+00';
SELECT is(pg_temp.decide('lc_b', '[{"type": "fail_workflow", "failure": {"error_type": "ValueError", "message": "bad"}}]'),
          'FAILED', 'setup: lc_b fails');

SELECT results_eq(
    $$SELECT execution_id, parent_id, workflow_name, workflow_id, status, created_at, completed_at, error_summary, depth
      FROM harvest.list_children(pg_temp.run('lc_root'))$$,
    $$VALUES (pg_temp.run('lc_b'), pg_temp.run('lc_root'), 'rl_child'::text, 'lc_b'::text, 'FAILED'::text,
              '2030-01-01 00:11:00+00'::timestamptz, '2030-01-01 00:13:00+00'::timestamptz, 'ValueError: bad'::text, 1),
             (pg_temp.run('lc_a'), pg_temp.run('lc_root'), 'rl_child', 'lc_a', 'RUNNING',
              '2030-01-01 00:10:00+00', NULL, NULL, 1)$$,
    'list_children(): the direct children, newest first, with status, times, error summary and depth 1');
SELECT results_eq(
    $$SELECT workflow_id, parent_id, depth FROM harvest.list_children(pg_temp.run('lc_root'), p_depth => 2)$$,
    $$VALUES ('lc_a1'::text, pg_temp.run('lc_a'), 2), ('lc_b', pg_temp.run('lc_root'), 1),
             ('lc_a', pg_temp.run('lc_root'), 1)$$,
    'list_children(p_depth => 2) adds the grandchildren, each with its own parent and depth');
SELECT results_eq(
    $$SELECT workflow_id, depth FROM harvest.list_children(pg_temp.run('lc_root'), 'running', 2)$$,
    $$VALUES ('lc_a1'::text, 2), ('lc_a', 1)$$,
    'a status filter (case-insensitive) applies at every depth');
SELECT results_eq(
    $$SELECT workflow_id FROM harvest.list_children(pg_temp.run('lc_root'), 'FAILED')$$,
    $$VALUES ('lc_b'::text)$$, 'list_children(p_status => FAILED)');
SELECT results_eq(
    $$SELECT workflow_id FROM harvest.list_children(pg_temp.run('lc_root'), 'running', p_limit => 1)$$,
    $$VALUES ('lc_a'::text)$$, 'the first page of one status (case-insensitive), at most p_limit rows');
SELECT is_empty($$SELECT * FROM harvest.list_children(pg_temp.run('lc_root'), 'COMPLETED', 100)$$,
                'a status no child has: empty (depth 100 is allowed)');
SELECT is_empty($$SELECT * FROM harvest.list_children(pg_temp.run('lc_a1'))$$, 'a leaf has no children');
SELECT is_empty($$SELECT * FROM harvest.list_children('00000000-0000-4000-8000-00000000abcd')$$,
                'an unknown execution has no children');
SELECT throws_ok($$SELECT * FROM harvest.list_children(pg_temp.run('lc_root'), 'DONE')$$, 'HR001',
                 'unknown status "DONE"', 'an unknown status: HR001 naming it');
SELECT throws_ok($$SELECT * FROM harvest.list_children(pg_temp.run('lc_root'), NULL, 0)$$, 'HR001',
                 'depth 0 is out of range 1..100', 'depth 0: HR001');
SELECT throws_ok($$SELECT * FROM harvest.list_children(pg_temp.run('lc_root'), NULL, 101)$$, 'HR001',
                 'depth 101 is out of range 1..100', 'depth 101: HR001');
SELECT throws_ok($$SELECT * FROM harvest.list_children(pg_temp.run('lc_root'), NULL, NULL)$$, 'HR001',
                 'depth <NULL> is out of range 1..100', 'depth NULL: HR001');

-- Pages: after a position (the last row shown: created_at and id) and at most p_limit rows. Two
-- children started by one decision share their created_at: the id orders them.
SET LOCAL harvest.fake_now = '2030-01-01 00:14:00+00';
SELECT lives_ok($$SELECT harvest.signal_workflow(pg_temp.run('lc_root'), 'more')$$, 'setup: wake the root again');
SELECT is(pg_temp.decide('lc_root', jsonb_build_array(pg_temp.child(3, 'lc_c'), pg_temp.child(4, 'lc_d'))),
          'RUNNING', 'setup: children lc_c and lc_d at one instant');
CREATE TEMP TABLE lc_tied ON COMMIT DROP AS
SELECT row_number() OVER (ORDER BY id) AS n, id, created_at, workflow_id
FROM harvest.executions WHERE workflow_id IN ('lc_c', 'lc_d');
SELECT results_eq(
    $$SELECT workflow_id FROM harvest.list_children(pg_temp.run('lc_root'), p_limit => 3)$$,
    $$SELECT workflow_id FROM lc_tied UNION ALL VALUES ('lc_b')$$,
    'p_limit: the newest children, ties in created_at by id');
SELECT results_eq(
    $$SELECT l.workflow_id FROM lc_tied AS t,
      harvest.list_children(pg_temp.run('lc_root'), NULL, 1, t.created_at, t.id, 2) AS l WHERE t.n = 1$$,
    $$SELECT workflow_id FROM lc_tied WHERE n = 2 UNION ALL VALUES ('lc_b')$$,
    'a position inside an instant: the rest of that instant after its id, then the older children');
SELECT results_eq(
    $$SELECT l.workflow_id FROM harvest.executions AS b,
      harvest.list_children(pg_temp.run('lc_root'), NULL, 1, b.created_at, b.id) AS l WHERE b.workflow_id = 'lc_b'$$,
    $$VALUES ('lc_a'::text)$$, 'a position without a limit: every child after it');
SELECT is_empty(
    $$SELECT l.* FROM harvest.executions AS b,
      harvest.list_children(pg_temp.run('lc_root'), 'failed', 1, b.created_at, b.id, 5) AS l WHERE b.workflow_id = 'lc_b'$$,
    'a status filter after a position');
SELECT results_eq(
    $$SELECT l.workflow_id, l.depth FROM harvest.executions AS g,
      harvest.list_children(pg_temp.run('lc_root'), NULL, 2, g.created_at, g.id, 1) AS l WHERE g.workflow_id = 'lc_a1'$$,
    $$VALUES ('lc_b'::text, 1)$$, 'a deeper list pages in the same order');
SELECT throws_ok($$SELECT * FROM harvest.list_children(pg_temp.run('lc_root'), NULL, 1, now(), NULL)$$, 'HR001',
                 'a position in the children is a time and an id: give both or neither', 'half a position: HR001');
SELECT throws_ok($$SELECT * FROM harvest.list_children(pg_temp.run('lc_root'), p_limit => 0)$$, 'HR001',
                 'limit 0 is below 1 (NULL: every child)', 'a limit below 1: HR001');

SELECT * FROM finish();
ROLLBACK;

-- harvest.count_versions: which recorded versions of a ctx.version() gate runs still use.
-- Runs of ver_wf with workflow id <key> on queue vq_<key>.
BEGIN;
SELECT plan(43);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- Its reads of the markers go down events_version_markers (0139; the plans:
-- tests/integration/test_version_usage_plans.py).
SELECT ok(EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = 'harvest' AND indexname = 'events_version_markers'),
          'events_version_markers finds a change''s version markers by change id and run');

-- Change vc: v1a (running, 1), v2a and v2b (running, 2), v2done (completed, 2),
-- v1fail (failed, 1). v1a also records another change and a non-version marker.
CREATE FUNCTION pg_temp.version_marker(p_seq integer, p_change text, p_version integer) RETURNS jsonb LANGUAGE sql AS $fn$
    SELECT jsonb_build_object('type', 'record_marker', 'seq', p_seq, 'kind', 'version',
                              'value', jsonb_build_object('change_id', p_change, 'version', p_version));
$fn$;
CREATE FUNCTION pg_temp.samples(VARIADIC p_keys text[]) RETURNS uuid[] LANGUAGE sql AS $fn$
    SELECT array_agg(execution_id ORDER BY execution_id) FROM keyed WHERE key = ANY(p_keys);
$fn$;
SELECT isnt(pg_temp.start_run('v1a', 'ver_wf', 'vq_v1a'), NULL, 'setup: v1a');
SELECT is(pg_temp.decide('v1a', jsonb_build_array(pg_temp.version_marker(1, 'vc', 1), pg_temp.version_marker(2, 'other', 7),
          '{"type": "record_marker", "seq": 3, "kind": "side_effect", "value": {"change_id": "vc", "version": 9}}'::jsonb)),
          'RUNNING', 'setup: v1a records vc=1, other=7 and a side effect that looks like a version');
SELECT isnt(pg_temp.start_run('v2a', 'ver_wf', 'vq_v2a'), NULL, 'setup: v2a');
SELECT is(pg_temp.decide('v2a', jsonb_build_array(pg_temp.version_marker(1, 'vc', 2))), 'RUNNING', 'setup: v2a records vc=2');
SELECT isnt(pg_temp.start_run('v2b', 'ver_wf', 'vq_v2b'), NULL, 'setup: v2b');
SELECT is(pg_temp.decide('v2b', jsonb_build_array(pg_temp.version_marker(4, 'vc', 2))), 'RUNNING', 'setup: v2b records vc=2');
SELECT isnt(pg_temp.start_run('v2done', 'ver_wf', 'vq_v2done'), NULL, 'setup: v2done');
SELECT is(pg_temp.decide('v2done', jsonb_build_array(pg_temp.version_marker(1, 'vc', 2),
                                                     '{"type": "complete_workflow", "result": null}'::jsonb)),
          'COMPLETED', 'setup: v2done records vc=2 and completes');
SELECT isnt(pg_temp.start_run('v1fail', 'ver_wf', 'vq_v1fail'), NULL, 'setup: v1fail');
SELECT is(pg_temp.decide('v1fail', jsonb_build_array(pg_temp.version_marker(1, 'vc', 1),
          '{"type": "fail_workflow", "failure": {"error_type": "E", "message": "m", "non_retryable": true, "details": null}}'::jsonb)),
          'FAILED', 'setup: v1fail records vc=1 and fails');

SELECT results_eq(
    $$SELECT version, state_group, executions, sample_execution_ids FROM harvest.count_versions('vc')$$,
    $$VALUES (1, 'active'::text, 1::bigint, pg_temp.samples('v1a')), (2, 'active', 2, pg_temp.samples('v2a', 'v2b'))$$,
    'count_versions(): running runs per recorded version by default, with sample ids');
SELECT results_eq(
    $$SELECT version, state_group, executions, sample_execution_ids FROM harvest.count_versions('vc', NULL, 'terminal')$$,
    $$VALUES (1, 'terminal'::text, 1::bigint, pg_temp.samples('v1fail')), (2, 'terminal', 1, pg_temp.samples('v2done'))$$,
    'state_group terminal: ended runs only');
SELECT results_eq(
    $$SELECT version, state_group, executions, sample_execution_ids FROM harvest.count_versions('vc', NULL, 'all')$$,
    $$VALUES (1, 'active'::text, 1::bigint, pg_temp.samples('v1a')), (1, 'terminal', 1, pg_temp.samples('v1fail')),
             (2, 'active', 2, pg_temp.samples('v2a', 'v2b')), (2, 'terminal', 1, pg_temp.samples('v2done'))$$,
    'state_group all: both groups, ordered by version then group');
SELECT results_eq(
    $$SELECT version, state_group, executions FROM harvest.count_versions('vc', 2, 'all')$$,
    $$VALUES (2, 'active'::text, 2::bigint), (2, 'terminal', 1)$$,
    'a version filter keeps that version only');
SELECT is_empty($$SELECT * FROM harvest.count_versions('vc', 9, 'all')$$,
                'a version nobody recorded (a non-version marker does not count): no rows');
SELECT results_eq(
    $$SELECT version, state_group, executions, sample_execution_ids FROM harvest.count_versions('other')$$,
    $$VALUES (7, 'active'::text, 1::bigint, pg_temp.samples('v1a'))$$, 'each change id is counted on its own');
SELECT is_empty($$SELECT * FROM harvest.count_versions('never', NULL, 'all')$$, 'an unknown change id: no rows');
SELECT is_empty($$SELECT * FROM harvest.count_versions('vc', NULL, 'all', 'another_wf')$$,
                'a workflow_name filter: no run of another workflow recorded it');
SELECT results_eq($$SELECT version, executions FROM harvest.count_versions('vc', 1, 'active', 'ver_wf')$$,
                  $$VALUES (1, 1::bigint)$$, 'a workflow_name filter keeps that workflow''s runs');
SELECT lives_ok($$SELECT harvest.pause_workflow(pg_temp.run('v1a'))$$, 'setup: v1a paused');
SELECT results_eq($$SELECT version, state_group, executions FROM harvest.count_versions('vc', 1, 'all')$$,
                  $$VALUES (1, 'active'::text, 1::bigint), (1, 'terminal', 1)$$,
                  'a paused run counts as active');
SELECT lives_ok($$SELECT pg_temp.start_run('many' || n, 'ver_wf', 'vq_many' || n) FROM generate_series(1, 6) AS n$$, 'setup: six more runs');
SELECT lives_ok($$SELECT pg_temp.decide('many' || n, jsonb_build_array(pg_temp.version_marker(1, 'vc', 5)))
                  FROM generate_series(1, 6) AS n$$, 'setup: each records vc=5');
SELECT results_eq(
    $$SELECT executions, cardinality(sample_execution_ids),
             sample_execution_ids <@ pg_temp.samples('many1', 'many2', 'many3', 'many4', 'many5', 'many6')
      FROM harvest.count_versions('vc', 5)$$,
    $$VALUES (6::bigint, 5, true)$$, 'at most five sample ids, all of them runs of that version');

-- The default (active) count reads the live runs and their markers (0114), with the answer it had.
SELECT results_eq($$SELECT version, executions FROM harvest.count_versions('vc')$$,
                  $$VALUES (1, 1::bigint), (2, 2), (5, 6)$$, 'count_versions(): the live runs by version');

-- A marker another SDK wrote with its version as 2.0: the record check takes any whole number, and
-- count_versions reads it by the JSON number rule (a raw ::integer of '2.0' failed every call).
SELECT isnt(pg_temp.start_run('vf2', 'ver_wf', 'vq_vf2'), NULL, 'setup: vf2');
SELECT is(pg_temp.decide('vf2', '[{"type": "record_marker", "seq": 1, "kind": "version",
                                   "value": {"change_id": "vf", "version": 2.0}}]'::jsonb),
          'RUNNING', 'setup: vf2 records vf=2.0');
SELECT results_eq($$SELECT version, state_group, executions FROM harvest.count_versions('vf')$$,
                  $$VALUES (2, 'active'::text, 1::bigint)$$, 'count_versions(): a version written 2.0 is version 2');
SELECT results_eq($$SELECT version, state_group, executions FROM harvest.count_versions('vf', 2, 'all')$$,
                  $$VALUES (2, 'active'::text, 1::bigint)$$, 'and a version filter of 2 finds it, over every run');

-- p_history_before: the active runs with no marker of the change whose history began before a
-- time (a gate deployed then), as version -1 (DEFAULT_VERSION). Of vc: vf2 (it recorded vf only);
-- late, begun after the time, and the runs that recorded vc are not.
SET LOCAL harvest.fake_now = '2030-01-01 01:00:00+00';
SELECT isnt(pg_temp.start_run('late', 'ver_wf', 'vq_late'), NULL, 'setup: late, begun after the gate');
SELECT results_eq(
    $$SELECT version, state_group, executions, sample_execution_ids
      FROM harvest.count_versions('vc', -1, 'active', NULL, '2030-01-01 00:30:00+00')$$,
    $$VALUES (-1, 'active'::text, 1::bigint, pg_temp.samples('vf2'))$$,
    'count_versions(-1, p_history_before): active runs with no marker of the change begun before the time');
SELECT results_eq(
    $$SELECT version, executions FROM harvest.count_versions('vc', NULL, 'active', NULL, '2030-01-01 00:30:00+00')$$,
    $$VALUES (-1, 1::bigint), (1, 1), (2, 2), (5, 6)$$,
    'count_versions(p_history_before): the unmarked runs beside every recorded version');
SELECT results_eq(
    $$SELECT version, executions FROM harvest.count_versions('vc', -1, 'active', NULL, '2030-01-01 02:00:00+00')$$,
    $$VALUES (-1, 2::bigint)$$, 'a later time counts the run begun after the first too');
SELECT is_empty($$SELECT * FROM harvest.count_versions('vc', -1, 'active', NULL, '2029-12-31 00:00:00+00')$$,
                'no history began before an earlier time: no rows');
SELECT is_empty($$SELECT * FROM harvest.count_versions('vc', -1, 'active', 'another_wf', '2030-01-01 02:00:00+00')$$,
                'p_history_before with a workflow_name filter');
SELECT results_eq(
    $$SELECT version, executions FROM harvest.count_versions('vc', 2, 'active', NULL, '2030-01-01 02:00:00+00')$$,
    $$VALUES (2, 2::bigint)$$, 'a recorded version asked for: that version only');
SELECT throws_ok($$SELECT * FROM harvest.count_versions('vc', -1)$$, 'HR001', 'version -1 is not a recorded version',
                 'count_versions(-1) without a time: HR001');
SELECT throws_ok($$SELECT * FROM harvest.count_versions('vc', NULL, 'all', NULL, '2030-01-01 02:00:00+00')$$, 'HR001',
                 'history_before counts active runs only, not state_group all',
                 'count_versions(p_history_before) of ended runs: HR001');
SELECT throws_ok($$SELECT * FROM harvest.count_versions('')$$, 'HR001', 'change_id is empty',
                 'count_versions() with an empty change id: HR001');
SELECT throws_ok($$SELECT * FROM harvest.count_versions(NULL)$$, 'HR001', 'change_id is empty',
                 'count_versions() with a NULL change id: HR001');
SELECT throws_ok($$SELECT * FROM harvest.count_versions('vc', NULL, 'done')$$, 'HR001', 'unknown state_group "done"',
                 'count_versions() with an unknown state group: HR001');
SELECT throws_ok($$SELECT * FROM harvest.count_versions('vc', NULL, NULL)$$, 'HR001', 'unknown state_group "<NULL>"',
                 'count_versions() with a NULL state group: HR001');

SELECT * FROM finish();
ROLLBACK;

-- A run's row rules (the executions_checks and executions_checks_update triggers in
-- sql/triggers.sql; table CHECKs before 0057), for any writer: a plain INSERT or UPDATE by
-- the owner is refused as the CHECKs refused it (SQLSTATE 23514, the same constraint
-- names); an UPDATE that sets none of the four columns (an event append) fires neither,
-- and no BEFORE UPDATE row trigger makes it fetch and lock the row first (0062).
BEGIN;
SELECT plan(17);

INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at)
VALUES ('00000000-0000-4000-8000-0000000c0001', 'chk_wf', 'chk-1', now());

SELECT throws_ok($$INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at, status)
                   VALUES (gen_random_uuid(), 'chk_wf', 'chk-2', now(), 'DONE')$$, '23514',
                 'value for domain harvest.execution_status violates check constraint "executions_status_check"',
                 'an INSERT of an unknown status is refused');
SELECT throws_ok($$INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at, parent_close_policy)
                   VALUES (gen_random_uuid(), 'chk_wf', 'chk-2', now(), 'orphan')$$, '23514',
                 'value for domain harvest.parent_close_policy violates check constraint "executions_parent_close_policy_check"',
                 'an INSERT of an unknown parent close policy is refused');
SELECT throws_ok($$INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at, search_attributes)
                   VALUES (gen_random_uuid(), 'chk_wf', 'chk-2', now(), '[1]')$$, '23514',
                 'new row for relation "executions" violates check constraint "executions_search_attributes_object"',
                 'an INSERT of search attributes that are not an object is refused');
SELECT throws_ok($$INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at, migrated_to_shard)
                   VALUES (gen_random_uuid(), 'chk_wf', 'chk-2', now(), 3)$$, '23514',
                 'value for domain harvest.migrated_status violates check constraint "executions_migrated_to_shard_check"',
                 'an INSERT of a forwarding pointer on a RUNNING run is refused');
SELECT throws_ok($$INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at, status, migrated_to_shard)
                   VALUES (gen_random_uuid(), 'chk_wf', 'chk-2', now(), 'MIGRATED', 65536)$$, '23514',
                 'value for domain harvest.shard_number violates check constraint "executions_migrated_to_shard_check"',
                 'an INSERT of a shard number out of range is refused');
SELECT throws_ok($$INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at, status)
                   VALUES (gen_random_uuid(), 'chk_wf', 'chk-2', now(), NULL)$$, '23502', NULL,
                 'a NULL status is still refused by its NOT NULL');
SELECT lives_ok($$INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at, status, migrated_to_shard)
                  VALUES (gen_random_uuid(), 'chk_wf', 'chk-3', now(), 'MIGRATED', 65535)$$,
                'a MIGRATED row with a forwarding pointer in range is taken');

SELECT throws_ok($$UPDATE harvest.executions SET status = 'DONE' WHERE workflow_id = 'chk-1'$$, '23514',
                 'value for domain harvest.execution_status violates check constraint "executions_status_check"',
                 'an UPDATE to an unknown status is refused');
SELECT throws_ok($$UPDATE harvest.executions SET parent_close_policy = 'orphan' WHERE workflow_id = 'chk-1'$$, '23514',
                 'value for domain harvest.parent_close_policy violates check constraint "executions_parent_close_policy_check"',
                 'an UPDATE to an unknown parent close policy is refused');
SELECT throws_ok($$UPDATE harvest.executions SET search_attributes = '"x"' WHERE workflow_id = 'chk-1'$$, '23514',
                 'new row for relation "executions" violates check constraint "executions_search_attributes_object"',
                 'an UPDATE of search attributes to a non-object is refused');
SELECT throws_ok($$UPDATE harvest.executions SET migrated_to_shard = 3 WHERE workflow_id = 'chk-1'$$, '23514',
                 'value for domain harvest.migrated_status violates check constraint "executions_migrated_to_shard_check"',
                 'an UPDATE setting a forwarding pointer on a RUNNING run is refused');
SELECT throws_ok($$UPDATE harvest.executions SET status = 'COMPLETED' WHERE workflow_id = 'chk-3'$$, '23514',
                 'value for domain harvest.migrated_status violates check constraint "executions_migrated_to_shard_check"',
                 'an UPDATE of the status alone is checked against the pointer the row holds');
SELECT lives_ok($$UPDATE harvest.executions SET status = 'MIGRATED', migrated_to_shard = 3 WHERE workflow_id = 'chk-1'$$,
                'an UPDATE to MIGRATED with a pointer is taken');
-- On an UPDATE the rules run after the row is written (an AFTER trigger): the columns' NOT
-- NULL refuses a NULL first, where the BEFORE trigger of 0057 reported the rule.
SELECT throws_ok($$UPDATE harvest.executions SET status = NULL, search_attributes = '[1]' WHERE workflow_id = 'chk-3'$$,
                 '23502', NULL,
                 'an UPDATE breaking a NOT NULL and a rule is refused by the NOT NULL (the rules run after it)');
-- executions_checks fires BEFORE an INSERT only (tgtype 7: row, before, insert), and
-- executions_checks_update AFTER an UPDATE of exactly the four columns the rules read
-- (17: row, update; no before bit).
SELECT is(
    (SELECT t.tgtype::int || ' ' || coalesce(string_agg(a.attname, ',' ORDER BY a.attname), '')
     FROM pg_trigger AS t LEFT JOIN pg_attribute AS a ON a.attrelid = t.tgrelid AND a.attnum = ANY (t.tgattr)
     WHERE t.tgrelid = 'harvest.executions'::regclass AND t.tgname = 'executions_checks'
     GROUP BY t.tgtype),
    '7 ',
    'executions_checks fires before an INSERT, and on nothing else');
SELECT is(
    (SELECT t.tgtype::int || ' ' || string_agg(a.attname, ',' ORDER BY a.attname)
     FROM pg_trigger AS t JOIN pg_attribute AS a ON a.attrelid = t.tgrelid AND a.attnum = ANY (t.tgattr)
     WHERE t.tgrelid = 'harvest.executions'::regclass AND t.tgname = 'executions_checks_update'
     GROUP BY t.tgtype),
    '17 migrated_to_shard,parent_close_policy,search_attributes,status',
    'executions_checks_update fires after an UPDATE of status, parent_close_policy, search_attributes, migrated_to_shard');
-- Any BEFORE UPDATE row trigger (whatever its column list) makes every UPDATE of a run's
-- row fetch and lock it first, an event append's too.
SELECT is(
    (SELECT count(*) FROM pg_trigger AS t
     WHERE t.tgrelid = 'harvest.executions'::regclass AND t.tgtype & 19 = 19),
    0::bigint,
    'harvest.executions has no BEFORE UPDATE row trigger');

SELECT * FROM finish();
ROLLBACK;

-- wait_for_result reads the run itself, not through get_execution (a call whose row is built,
-- returned and taken apart again), and still answers HR002 for a run that does not exist. In a
-- transaction of its own: a PL/pgSQL expression counts its calls only if it was first run
-- while tracking was on.
BEGIN;
SELECT plan(3);
SET LOCAL track_functions = 'pl';
SELECT pg_temp.start_run('wfr_own_read', 'wfr_wf', 'wfr_q');
SELECT is((harvest.wait_for_result(pg_temp.run('wfr_own_read'), '00000000-0000-0000-0000-0000000000a1')).status,
          'RUNNING', 'wait_for_result() of a running run: the run as it is, the waiter marked');
SELECT is(coalesce((SELECT f.calls FROM pg_stat_xact_user_functions AS f
                    WHERE f.funcid = 'harvest.get_execution(uuid)'::regprocedure), 0),
          0::bigint, '... read without a call of get_execution');
SELECT throws_ok($$SELECT harvest.wait_for_result('00000000-0000-0000-0000-00000000dead',
                                                  '00000000-0000-0000-0000-0000000000a1')$$,
                 'HR002', 'execution 00000000-0000-0000-0000-00000000dead does not exist',
                 'wait_for_result() of an unknown run: HR002');
SELECT * FROM finish();
ROLLBACK;

-- get_history_page: the dashboard's page of a run's history and what it shows beside it, in
-- rows that do not grow with the history.
BEGIN;
SELECT plan(12);
SELECT pg_temp.start_run('ghp', 'ghp_wf', 'ghp_q');                     -- 1 WorkflowStarted
SELECT harvest._append_event(pg_temp.run('ghp'), 'WorkflowTaskCompleted', '{}');          -- 2
SELECT harvest._append_event(pg_temp.run('ghp'), 'SignalReceived', '{"name": "s1", "payload": 1}');  -- 3
SELECT harvest._append_event(pg_temp.run('ghp'), 'UpdateAccepted', '{"update_id": "u1", "name": "add"}');  -- 4
SELECT harvest._append_event(pg_temp.run('ghp'), 'UpdateAccepted', '{"update_id": "u2", "name": "add"}');  -- 5
SELECT harvest._append_event(pg_temp.run('ghp'), 'WorkflowTaskCompleted', '{}');          -- 6
SELECT harvest._append_event(pg_temp.run('ghp'), 'UpdateCompleted', '{"update_id": "u1", "seq": 1}');  -- 7
SELECT harvest._append_event(pg_temp.run('ghp'), 'SignalReceived', '{"name": "s2", "payload": 2}');  -- 8
SELECT harvest._append_event(pg_temp.run('ghp'), 'SignalReceived', '{"name": "s3", "payload": 3}');  -- 9

SELECT results_eq(
    $$SELECT event_id FROM harvest.get_history_page(pg_temp.run('ghp'), p_limit => 2) WHERE part = 'event'
      ORDER BY event_id$$,
    $$VALUES (8::bigint), (9::bigint)$$, 'get_history_page(): neither end given, the last p_limit events');
SELECT results_eq(
    $$SELECT event_id FROM harvest.get_history_page(pg_temp.run('ghp'), 3, NULL, 2) WHERE part = 'event'
      ORDER BY event_id$$,
    $$VALUES (3::bigint), (4::bigint)$$, '... p_from_event_id: the first p_limit from that event on');
SELECT results_eq(
    $$SELECT event_id FROM harvest.get_history_page(pg_temp.run('ghp'), NULL, 3, 5) WHERE part = 'event'
      ORDER BY event_id$$,
    $$VALUES (1::bigint), (2::bigint)$$, '... p_before_event_id: the last p_limit before that event');
SELECT results_eq(
    $$SELECT event_id, event_data ->> 'name' FROM harvest.get_history_page(pg_temp.run('ghp'), p_limit => 2)
      WHERE part = 'signal' ORDER BY event_id$$,
    $$VALUES (8::bigint, 's2'), (9::bigint, 's3')$$, '... the last p_limit signals, with their data');
SELECT results_eq(
    $$SELECT event_id, event_data ->> 'update_id' FROM harvest.get_history_page(pg_temp.run('ghp'))
      WHERE part = 'update'$$,
    $$VALUES (5::bigint, 'u2')$$, '... the updates accepted and not completed');
SELECT results_eq(
    $$SELECT event_id, event_data FROM harvest.get_history_page(pg_temp.run('ghp'), p_limit => 1)
      WHERE part = 'reset'$$,
    $$VALUES (6::bigint, '{}'::jsonb)$$, '... the last p_limit workflow tasks (reset points), without their data');
SELECT results_eq(
    $$SELECT event_id, event_data FROM harvest.get_history_page(pg_temp.run('ghp'), p_limit => 1)
      WHERE part = 'count'$$,
    $$VALUES (9::bigint, '{"events": 9, "signals": 3}'::jsonb)$$, '... one count row: the last event id, the counts');
SELECT is((SELECT count(*) FROM harvest.get_history_page(pg_temp.run('ghp'), p_limit => 1)), 5::bigint,
          '... p_limit bounds every part: 1 event, 1 signal, 1 pending update, 1 reset point, the counts');
SELECT results_eq(
    $$SELECT part, event_id FROM harvest.get_history_page('00000000-0000-4000-8000-00000000abcd')$$,
    $$VALUES ('count'::text, 0::bigint)$$, '... of no run: the counts, zero');
SELECT throws_ok($$SELECT * FROM harvest.get_history_page(pg_temp.run('ghp'), p_limit => 0)$$, 'HR001',
                 'limit 0 is out of range 1..10000', 'get_history_page(p_limit => 0): HR001');
SELECT throws_ok($$SELECT * FROM harvest.get_history_page(pg_temp.run('ghp'), 1, 5)$$, 'HR001',
                 'a page starts at an event or ends before one, not both', '... both ends given: HR001');
SELECT throws_ok($$SELECT * FROM harvest.get_history_page(pg_temp.run('ghp'), 0)$$, 'HR001',
                 'event id 0 is out of range: event ids start at 1', '... an event id below 1: HR001');
SELECT * FROM finish();
ROLLBACK;

-- Acting on many runs by filter: cancel_workflows, terminate_workflows, signal_workflows.
BEGIN;
SELECT plan(36);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT pg_temp.start_run('bw-1', 'bw_wf', 'bw_q');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:01+00';
SELECT pg_temp.start_run('bw-2', 'bw_wf', 'bw_q');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:02+00';
SELECT pg_temp.start_run('bw-3', 'bw_wf', 'bw_q');
SELECT pg_temp.start_run('bw-other', 'bw_other', 'bw_q');
SELECT harvest.terminate_workflow(pg_temp.run('bw-3'), 'ended before the batch');
SELECT pg_temp.start_run('bw-4', 'bw_wf', 'bw_q');

SELECT throws_ok($$SELECT harvest.cancel_workflows()$$, 'HR001', NULL, 'cancel_workflows() without a filter: HR001');
SELECT throws_ok($$SELECT harvest.terminate_workflows(p_status => 'RUNNING')$$, 'HR001', NULL,
                 'terminate_workflows(): a state alone is no filter');
SELECT throws_ok($$SELECT harvest.cancel_workflows(p_workflow_name => 'bw_wf', p_status => 'COMPLETED')$$, 'HR001',
                 'cannot cancel runs in state "COMPLETED": only live runs can be', '... an ended state: HR001');
SELECT throws_ok($$SELECT harvest.cancel_workflows(p_workflow_name => 'bw_wf', p_limit => 0)$$, 'HR001',
                 'limit 0 is out of range 1..1000', '... a limit out of range: HR001');
SELECT throws_ok($$SELECT harvest.cancel_workflows(p_workflow_name => 'bw_wf', p_cursor => 'bm90IGpzb24=')$$,
                 'HR001', NULL, '... a cursor it did not make: HR001');
SELECT throws_ok($$SELECT harvest.signal_workflows('', p_workflow_name => 'bw_wf')$$, 'HR001', NULL,
                 'signal_workflows() of an empty name: HR001');

-- A dry run: how many and which, nothing written.
SELECT is(harvest.cancel_workflows(p_workflow_name => 'bw_wf', p_dry_run => true, p_limit => 2)
              - 'batch_id' - 'execution_ids' - 'shard_id',
          '{"action": "cancel", "dry_run": true, "matched": 3, "acted": 0, "already_ended": 0, "unchanged": 0,
            "moved": [], "failures": [], "next_cursor": null}'::jsonb,
          'a dry run counts every live match');
SELECT is(harvest.cancel_workflows(p_workflow_name => 'bw_wf', p_dry_run => true, p_limit => 2) -> 'execution_ids',
          jsonb_build_array(pg_temp.run('bw-1'), pg_temp.run('bw-2')), '... and names the first p_limit, oldest first');
SELECT is((SELECT count(*) FROM harvest.executions WHERE cancel_requested), 0::bigint, '... writing nothing');
SELECT is((SELECT count(*) FROM harvest.audit_log WHERE operation LIKE 'workflow.bulk_%'), 0::bigint,
          '... nor an audit row');

-- A step of two, then the rest with the cursor.
CREATE TEMP TABLE bw_step AS SELECT harvest.cancel_workflows(p_workflow_name => 'bw_wf', p_limit => 2,
                                                             p_reason => 'incident', p_operator_id => 'ops') AS r;
SELECT is((SELECT (r ->> 'acted')::int FROM bw_step), 2, 'cancel_workflows() acts on p_limit runs');
SELECT isnt((SELECT r ->> 'next_cursor' FROM bw_step), NULL, '... and says where to go on');
SELECT is((SELECT cancel_requested FROM harvest.executions WHERE id = pg_temp.run('bw-2')), true,
          '... each run asked to cancel');
SELECT is((SELECT event_type FROM pg_temp.last_event(pg_temp.run('bw-1'))), 'WorkflowCancelRequested',
          '... its request recorded');
SELECT is((SELECT details ->> 'acted' FROM harvest.audit_log WHERE operation = 'workflow.bulk_cancel'), '2',
          '... one audit row for the call, with its counts');
SELECT is((SELECT operator_id FROM harvest.audit_log WHERE operation = 'workflow.bulk_cancel'), 'ops',
          '... and the operator');
SELECT is(harvest.cancel_workflows(p_workflow_name => 'bw_wf', p_cursor => (SELECT r ->> 'next_cursor' FROM bw_step))
              -> 'execution_ids', jsonb_build_array(pg_temp.run('bw-4')),
          '... the cursor continues after the last run acted on (the ended one never listed)');
SELECT is((SELECT scope FROM harvest._decode_cursor((SELECT r ->> 'next_cursor' FROM bw_step))),
          md5(jsonb_build_array('cancel', ARRAY['RUNNING', 'PAUSED'], 'bw_wf', NULL::text[], NULL::numeric,
                                NULL::numeric, NULL::text, NULL::text, NULL::jsonb)::text),
          '... its scope without a workflow id is the one before p_workflow_id (a cursor made then goes on)');
SELECT throws_ok(format('SELECT harvest.cancel_workflows(p_workflow_name => %L, p_cursor => %L)', 'bw_other',
                         (SELECT r ->> 'next_cursor' FROM bw_step)),
                  'HR001', 'the cursor was made for another action or filter',
                  '... and only under the filter it was made with (HR001)');
SELECT throws_ok(format('SELECT harvest.terminate_workflows(p_workflow_name => %L, p_cursor => %L)', 'bw_wf',
                         (SELECT r ->> 'next_cursor' FROM bw_step)),
                  'HR001', 'the cursor was made for another action or filter',
                  '... and the action (HR001)');
SELECT throws_ok(format('SELECT harvest.cancel_workflows(p_workflow_name => %L, p_cursor => %L)', 'bw_wf',
                         harvest._encode_cursor('2030-01-01 00:00:00+00', pg_temp.run('bw-1'))),
                  'HR001', 'the cursor was made for another action or filter',
                  '... and a list''s cursor is no batch''s (HR001)');
-- A cursor made in one session's time zone goes on in another's (its filter's times compared as
-- instants, not as their text in the session's TimeZone).
CREATE TEMP TABLE bw_tz AS SELECT current_setting('TimeZone') AS tz,
    harvest.cancel_workflows(p_workflow_name => 'bw_wf', p_created_before => '2100-01-01 00:00:00+00',
                             p_limit => 1, p_reason => 'tz') AS r;
SELECT isnt((SELECT r ->> 'next_cursor' FROM bw_tz), NULL, 'a step of one, before the others');
SELECT set_config('TimeZone', 'Asia/Tokyo', true);
SELECT lives_ok(format('SELECT harvest.cancel_workflows(p_workflow_name => %L, p_created_before => %L, p_cursor => %L)',
                       'bw_wf', '2100-01-01 09:00:00+09', (SELECT r ->> 'next_cursor' FROM bw_tz)),
                '... goes on in a session of another time zone');
SELECT set_config('TimeZone', (SELECT tz FROM bw_tz), true);
CREATE TEMP TABLE bw_signal AS SELECT harvest.signal_workflows('go', '{"n": 1}', p_workflow_name => 'bw_wf',
                                                               p_limit => 1) AS r;
SELECT throws_ok(format('SELECT harvest.signal_workflows(%L, %L, p_workflow_name => %L, p_cursor => %L)', 'stop',
                         '{"n": 1}', 'bw_wf', (SELECT r ->> 'next_cursor' FROM bw_signal)),
                  'HR001', 'the cursor was made for another action or filter',
                  '... and a signal''s only with its name and payload (HR001: another signal, another batch)');
SELECT is((harvest.signal_workflows('go', '{"n": 1}', p_workflow_name => 'bw_wf',
                                    p_cursor => (SELECT r ->> 'next_cursor' FROM bw_signal)) ->> 'acted')::int, 2,
          '... and goes on with them');
SELECT is((harvest.cancel_workflows(p_workflow_name => 'bw_wf') ->> 'unchanged')::int, 3,
          'a cancel already requested is counted unchanged');
SELECT is(harvest.cancel_workflows(p_workflow_name => 'bw_none') - 'batch_id' - 'shard_id',
          '{"action": "cancel", "dry_run": false, "matched": 0, "acted": 0, "already_ended": 0, "unchanged": 0,
            "execution_ids": [], "moved": [], "failures": [], "next_cursor": null}'::jsonb,
          'a filter that selects no run: nothing done, no cursor');
-- A reason over the limit is named as a batch's, by filter or by ids (an id step was "by filter").
UPDATE harvest.engine_settings SET max_payload_bytes = 64;
SELECT throws_ok($$SELECT harvest.cancel_workflows(p_workflow_name => 'bw_wf', p_reason => repeat('x', 100))$$,
                 'HR008', 'the reason of a batch cancel is 102 bytes, over the payload limit of 64 bytes',
                 'cancel_workflows() by filter with a reason over the limit: HR008');
SELECT throws_ok($$SELECT harvest.pause_workflows(p_execution_ids => ARRAY[pg_temp.run('bw-1')],
                                                  p_reason => repeat('x', 100))$$,
                 'HR008', 'the reason of a batch pause is 102 bytes, over the payload limit of 64 bytes',
                 '... and pause_workflows() by ids');
UPDATE harvest.engine_settings SET max_payload_bytes = DEFAULT;

-- A run that ended since the scan, by explicit ids; terminate; signal once per batch.
SELECT is((harvest.terminate_workflows(p_execution_ids => ARRAY[pg_temp.run('bw-3'), pg_temp.run('bw-1')])
           ->> 'already_ended')::int, 1, 'terminate_workflows(): an ended run is counted already_ended');
SELECT is((SELECT status FROM harvest.executions WHERE id = pg_temp.run('bw-1')), 'TERMINATED',
          '... and the live one terminated');
SELECT is((harvest.signal_workflows('go', '1', p_workflow_name => 'bw_other', p_batch_id => 'b-1',
                                   p_reason => 'rollout') ->> 'acted')::int,
          1, 'signal_workflows() signals the runs');
SELECT is((SELECT details ->> 'reason' FROM harvest.audit_log
           WHERE operation = 'workflow.bulk_signal' AND details ->> 'batch_id' = 'b-1'), 'rollout',
          '... its audit row keeps the reason');
SELECT is((harvest.signal_workflows('go', '1', p_workflow_name => 'bw_other', p_batch_id => 'b-1') ->> 'unchanged')::int,
          1, '... once per batch id');
-- A run read again under its lock: one that left the filter since the scan is not acted on.
SELECT is(harvest._still_selected(ARRAY['e.workflow_name = ''bw_other''', 'e.status = $1[1]'], ARRAY['RUNNING'],
                                  pg_temp.run('bw-other')), true, '_still_selected(): a run the filter still selects');
SELECT is(harvest._still_selected(ARRAY['e.workflow_name = ''bw_other''', 'e.status = $1[1]'], ARRAY['PAUSED'],
                                  pg_temp.run('bw-other')), false, '... and one it no longer does');
SELECT * FROM finish();
ROLLBACK;

-- Pausing and resuming many runs by filter: pause_workflows, resume_workflows.
BEGIN;
SELECT plan(19);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT pg_temp.start_run('bp-1', 'bp_wf', 'bp_q');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:01+00';
SELECT pg_temp.start_run('bp-2', 'bp_wf', 'bp_q');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:02+00';
SELECT pg_temp.start_run('bp-3', 'bp_wf', 'bp_q');
SELECT pg_temp.start_run('bp-other', 'bp_other', 'bp_q');
SELECT harvest.pause_workflow(pg_temp.run('bp-3'), 'paused by hand');
-- (a cancel's step over the same filter and states as a pause's, whose cursor a pause must refuse)
CREATE TEMP TABLE bp_cancel AS SELECT harvest.cancel_workflows(p_workflow_name => 'bp_wf', p_status => 'RUNNING',
                                                               p_limit => 1) AS r;

SELECT throws_ok($$SELECT harvest.pause_workflows()$$, 'HR001', NULL, 'pause_workflows() without a filter: HR001');
SELECT throws_ok($$SELECT harvest.resume_workflows(p_status => 'PAUSED')$$, 'HR001', NULL,
                 'resume_workflows(): a state alone is no filter');
SELECT is((harvest.pause_workflows(p_workflow_name => 'bp_wf', p_dry_run => true) ->> 'matched')::int, 2,
          'a pause''s dry run counts the RUNNING runs only (the paused one is not its to pause)');
SELECT is((harvest.resume_workflows(p_workflow_name => 'bp_wf', p_dry_run => true) ->> 'matched')::int, 1,
          'a resume''s dry run counts the PAUSED runs only');
CREATE TEMP TABLE bp_step AS SELECT harvest.pause_workflows(p_workflow_name => 'bp_wf', p_limit => 1,
                                                             p_reason => 'bad deploy', p_operator_id => 'ops') AS r;
SELECT is((SELECT r -> 'execution_ids' FROM bp_step), jsonb_build_array(pg_temp.run('bp-1')),
          'pause_workflows() pauses p_limit runs, oldest first');
SELECT is((SELECT status FROM harvest.executions WHERE id = pg_temp.run('bp-1')), 'PAUSED', '... each run PAUSED');
SELECT results_eq($$SELECT event_type, event_data FROM pg_temp.last_event(pg_temp.run('bp-1'))$$,
    $$VALUES ('WorkflowPaused'::text, '{"reason": "bad deploy", "operator_id": "ops"}'::jsonb)$$,
    '... its WorkflowPaused event as pause_workflow records it');
SELECT is((SELECT count(*) FROM harvest.audit_log WHERE operation = 'workflow.pause'), 1::bigint,
          '... with no audit row a run (only the hand-paused one''s)');
SELECT results_eq($$SELECT operator_id, details ->> 'reason', details ->> 'acted' FROM harvest.audit_log
                    WHERE operation = 'workflow.bulk_pause'$$,
                  $$VALUES ('ops'::text, 'bad deploy'::text, '1'::text)$$,
                  '... but one audit row for the step (workflow.bulk_pause), its reason and counts');
SELECT throws_ok(format('SELECT harvest.pause_workflows(p_workflow_name => %L, p_cursor => %L)', 'bp_wf',
                         (SELECT r ->> 'next_cursor' FROM bp_cancel)),
                  'HR001', 'the cursor was made for another action or filter',
                  'a bulk cancel''s cursor is refused to a pause (HR001)');
SELECT throws_ok(format('SELECT harvest.resume_workflows(p_workflow_name => %L, p_cursor => %L)', 'bp_wf',
                         (SELECT r ->> 'next_cursor' FROM bp_step)),
                  'HR001', 'the cursor was made for another action or filter', '... and a pause''s to a resume');
SELECT is((harvest.pause_workflows(p_workflow_name => 'bp_wf', p_cursor => (SELECT r ->> 'next_cursor' FROM bp_step))
           -> 'execution_ids'), jsonb_build_array(pg_temp.run('bp-2')),
          'the pause''s cursor goes on with the pause (the hand-paused run not selected)');
SELECT is((harvest.pause_workflows(p_workflow_name => 'bp_wf', p_status => 'RUNNING,PAUSED') ->> 'unchanged')::int, 3,
          'a paused run a pause selects (p_status) is counted unchanged, not an error');
SELECT is((harvest.resume_workflows(p_execution_ids => ARRAY[pg_temp.run('bp-other')]) ->> 'unchanged')::int, 1,
          'a running run resumed by id: unchanged');
SELECT harvest.terminate_workflow(pg_temp.run('bp-2'), 'ended before the resume');
SELECT is((harvest.resume_workflows(p_execution_ids => ARRAY[pg_temp.run('bp-2')]) ->> 'already_ended')::int, 1,
          'a run that ended since the scan: already_ended');
CREATE TEMP TABLE bp_resume AS SELECT harvest.resume_workflows(p_workflow_name => 'bp_wf', p_reason => 'fixed',
                                                                p_operator_id => 'ops') AS r;
SELECT is((SELECT (r ->> 'acted')::int FROM bp_resume), 2, 'resume_workflows() resumes the paused runs');
SELECT is((SELECT array_agg(status ORDER BY created_at) FROM harvest.executions WHERE workflow_name = 'bp_wf'),
          ARRAY['RUNNING', 'TERMINATED', 'RUNNING'], '... each RUNNING again');
SELECT is((SELECT event_data ->> 'reason' FROM pg_temp.last_event(pg_temp.run('bp-3'))), 'fixed',
          '... its WorkflowResumed with the reason');
SELECT is((SELECT details ->> 'acted' FROM harvest.audit_log WHERE operation = 'workflow.bulk_resume'
           AND details ->> 'reason' = 'fixed'), '2',
          '... one workflow.bulk_resume audit row');
SELECT * FROM finish();
ROLLBACK;

-- A search attribute's index for range tests (`harvest search-attr index`, harvest/db/search_indexes.py):
-- its name, its statements (the key quoted by the server, a key no filter names refused), whether an
-- index is the one they make, and the list of the recorded ones with each index's state. The
-- CONCURRENTLY statements themselves run outside a transaction: tests/integration/test_search_attr_indexes.py.
BEGIN;
SELECT plan(13);
SELECT is(harvest._search_attr_index_name('amount'), 'executions_attr_amount',
          '_search_attr_index_name: a plain key keeps its name');
SELECT matches(harvest._search_attr_index_name('Order.Total-2'), '^executions_attr_order_total_2_[0-9a-f]{12}$',
               '... an odd one is folded and hashed');
SELECT isnt(harvest._search_attr_index_name('abc_' || left(md5('ABC'), 12)), harvest._search_attr_index_name('ABC'),
            '... and no plain key takes a hashed key''s name');
SELECT ok(length(harvest._search_attr_index_name(repeat('k', 500))) <= 63, '... a long key''s name fits in 63 bytes');
SELECT is((harvest._search_attr_index_sql('amount', 'number')).create_index,
          'CREATE INDEX CONCURRENTLY executions_attr_amount ON harvest.executions ('
          || harvest._search_attr_ordered(quote_literal('amount'), 'number', 'search_attributes')
          || ') WHERE search_attributes ? ''amount'' AND octet_length(search_attributes ->> ''amount'') <= 2000',
          '_search_attr_index_sql: the index on the range tests'' expression, partial on the key and on a value a btree entry holds');
SELECT is((harvest._search_attr_index_sql('Order.Total-2', 'text')).drop_statistics,
          format('DROP STATISTICS IF EXISTS harvest.%I', harvest._search_attr_index_name('Order.Total-2')),
          '... and the statements that drop it');
SELECT throws_ok($$SELECT harvest._search_attr_index_sql('a''); DROP TABLE harvest.executions; --', 'number')$$,
                 'HR001', NULL, '... a key no filter names: HR001');
SELECT throws_ok($$SELECT harvest._search_attr_index_sql('amount', 'date')$$,
                 'HR001', NULL, '... a type other than number or text: HR001');
-- The same index made in this transaction (without CONCURRENTLY), and one of the name on another expression.
DO $$
BEGIN
    EXECUTE replace((harvest._search_attr_index_sql('amount', 'number')).create_index, ' CONCURRENTLY', '');
END;
$$;
CREATE INDEX executions_attr_tenant ON harvest.executions ((search_attributes ->> 'tenant'));
SELECT ok(harvest._search_attr_index_matches('harvest.executions_attr_amount', 'amount', 'number'),
          '_search_attr_index_matches: the index the statements make');
SELECT ok(NOT harvest._search_attr_index_matches('harvest.executions_attr_amount', 'amount', 'text')
          AND NOT harvest._search_attr_index_matches('harvest.executions_attr_tenant', 'tenant', 'text'),
          '... not another type''s, nor one without the partial predicate');
CREATE INDEX executions_attr_region ON harvest.executions
    ((search_attributes ->> 'region')) WHERE search_attributes ? 'region';
SELECT ok(NOT harvest._search_attr_index_matches('harvest.executions_attr_region', 'region', 'text'),
          '... nor an earlier release''s, partial on the key alone (search-attr index builds it again)');
SELECT is(harvest._search_attr_fits(quote_literal('amount'), 'search_attributes'),
          'octet_length(search_attributes ->> ''amount'') <= 2000',
          '_search_attr_fits: a value whose text a btree entry holds');
DROP INDEX harvest.executions_attr_region;
INSERT INTO harvest.search_attribute_indexes (name, type, index_name)
VALUES ('amount', 'number', 'executions_attr_amount'), ('region', 'text', 'executions_attr_region');
SELECT results_eq($$SELECT name, type, state, size_bytes > 0 FROM harvest.list_search_attribute_indexes()$$,
                  $$VALUES ('amount', 'number', 'valid', true), ('region', 'text', 'missing', NULL)$$,
                  'list_search_attribute_indexes: each recorded key, its index''s state and size');
SELECT * FROM finish();
ROLLBACK;

-- The signals a run waits for (list_awaited_signals, the stack's awaited_signals): what its last
-- decision's await_signals directive reported, kept in its marker (functions/decide.sql).
BEGIN;
SELECT plan(12);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT pg_temp.start_decided('aw', 'aw_wf', 'aw_q', '[{"type": "await_signals", "signals": [
    {"name": "approve", "timer_seq": 1}, {"name": "reject", "timer_seq": null}]},
    {"type": "start_timer", "seq": 1, "duration": 3600}]');
SELECT is(harvest.get_execution_stack(pg_temp.run('aw')) -> 'awaited_signals',
          '[{"name": "approve", "since": "2030-01-01T00:00:00+00:00", "timeout_at": "2030-01-01T01:00:00+00:00", "timer_seq": 1},
            {"name": "reject", "since": "2030-01-01T00:00:00+00:00", "timeout_at": null, "timer_seq": null}]'::jsonb,
          'stack: the signals the run waits for, since when, and the timeout''s deadline (none: null)');
SELECT is(harvest.get_execution_stack(pg_temp.run('aw'), 1) #> '{totals,awaited_signals}', '2'::jsonb,
          'stack: their total (a bounded stack lists the first)');
SELECT results_eq(format('SELECT name, timer_seq FROM harvest.list_awaited_signals(%L)', pg_temp.run('aw')),
                  $$VALUES ('approve', 1), ('reject', NULL::integer)$$,
                  'list_awaited_signals: the waits, oldest first, with their timers');
-- A misspelt name is accepted and buffered; the waits are unchanged, and the statement the
-- client sends (signal, then the awaited names) says so.
SELECT is((SELECT ARRAY(SELECT DISTINCT a.name FROM harvest.list_awaited_signals(pg_temp.run('aw'), s.event_id) AS a ORDER BY 1)
           FROM (SELECT harvest.signal_workflow(pg_temp.run('aw'), 'aprove', '1') AS event_id OFFSET 0) AS s),
          ARRAY['approve', 'reject'], 'a signal no wait asks for: the run still waits for the others');
SELECT is((SELECT count(*) FROM harvest.events WHERE execution_id = pg_temp.run('aw') AND event_type = 'SignalReceived'),
          1::bigint, '... and the signal is delivered (buffered) all the same');
SELECT is(jsonb_path_query_array(harvest.signal_workflow_eager(pg_temp.run('aw'), 'approve', '1', NULL, NULL, 'nobody', 30),
                                 '$.awaited_signals[*]'),
          '["approve", "reject"]'::jsonb, 'signal_workflow_eager: the names the run waited for as the signal came');
SELECT is(ARRAY(SELECT name FROM harvest.list_awaited_signals(pg_temp.run('aw'))), ARRAY['reject'],
          'a wait whose signal came since the decision is over, before the run decides again');
SELECT pg_temp.decide('aw', '[]');
SELECT is(harvest.get_execution_stack(pg_temp.run('aw')) -> 'awaited_signals', '[]'::jsonb,
          'a decision without await_signals: the run waits for no signal');
SELECT harvest.terminate_workflow(pg_temp.run('aw'), 'done');
SELECT is((SELECT count(*) FROM harvest.list_awaited_signals(pg_temp.run('aw'))), 0::bigint,
          'an ended run waits for nothing');
SELECT throws_ok(format('SELECT * FROM harvest.list_awaited_signals(%L)', gen_random_uuid()), 'HR002', NULL,
                 'list_awaited_signals of an unknown run: HR002');
-- It looks back over the last 1,000 events only: a flood of signals to a run no worker decides
-- would otherwise make each signal search the whole history.
SELECT pg_temp.start_decided('aw_flood', 'aw_wf', 'aw_q', '[{"type": "await_signals", "signals": [{"name": "go"}]}]');
SELECT count(harvest.signal_workflow(pg_temp.run('aw_flood'), 'other', '1')) FROM generate_series(1, 999);
SELECT is(ARRAY(SELECT name FROM harvest.list_awaited_signals(pg_temp.run('aw_flood'))), ARRAY['go'],
          'list_awaited_signals: a decision 1,000 events back is read');
SELECT harvest.signal_workflow(pg_temp.run('aw_flood'), 'other', '1');
SELECT is((SELECT count(*) FROM harvest.list_awaited_signals(pg_temp.run('aw_flood'))), 0::bigint,
          'list_awaited_signals: one further back is not looked for (none, as before a first decision)');
SELECT * FROM finish();
ROLLBACK;

-- The count and the batch actions by filter take a workflow id (count_executions,
-- cancel/terminate/signal/pause/resume_workflows' p_workflow_id, through _execution_filters and
-- _act_on_workflows), down executions_workflow_id_runs; an empty one is HR001.
BEGIN;
SELECT plan(13);
SELECT pg_temp.start_run('w1', 'wid_wf', 'default', p_workflow_id => 'wid-1');
SELECT pg_temp.start_run('w2', 'wid_wf', 'default', p_workflow_id => 'wid-2');
SELECT pg_temp.start_run('w3', 'wid_other', 'default', p_workflow_id => 'wid-1');
SELECT results_eq($$SELECT status, executions FROM harvest.count_executions(p_workflow_id => 'wid-1')$$,
                  $$VALUES ('RUNNING'::text, 2::bigint)$$, 'count_executions(p_workflow_id): that id''s runs only');
SELECT results_eq($$SELECT executions FROM harvest.count_executions(p_workflow_name => 'wid_wf', p_workflow_id => 'wid-1')$$,
                  $$VALUES (1::bigint)$$, 'count_executions(p_workflow_id): with the other filters (AND)');
SELECT throws_ok($$SELECT * FROM harvest.count_executions(p_workflow_id => '')$$, 'HR001', 'workflow_id is empty',
                 'count_executions(p_workflow_id => ''''): HR001, not every run');
SELECT throws_ok($$SELECT harvest.cancel_workflows(p_workflow_id => '')$$, 'HR001', 'workflow_id is empty',
                 'cancel_workflows(p_workflow_id => ''''): HR001');
SELECT matches(pg_temp.plan_of($$SELECT * FROM harvest.executions AS e WHERE $$
                               || array_to_string(harvest._execution_filters(NULL, NULL, NULL, NULL, NULL, 'wid-1'), ' AND ')),
               'executions_workflow_id_runs', '_execution_filters(p_workflow_id): down executions_workflow_id_runs');
SELECT is((SELECT d -> 'matched' FROM harvest.cancel_workflows(p_workflow_id => 'wid-1', p_dry_run => true) AS d),
          '2'::jsonb, 'cancel_workflows(p_workflow_id): a workflow id alone is a filter');
SELECT is((SELECT (d -> 'acted')::integer FROM harvest.pause_workflows(p_workflow_id => 'wid-2', p_operator_id => 'op') AS d),
          1, 'pause_workflows(p_workflow_id)');
SELECT is((SELECT (d -> 'acted')::integer FROM harvest.resume_workflows(p_workflow_id => 'wid-2') AS d),
          1, 'resume_workflows(p_workflow_id)');
SELECT is((SELECT (d -> 'acted')::integer FROM harvest.signal_workflows('go', '1', p_workflow_id => 'wid-2') AS d),
          1, 'signal_workflows(p_workflow_id)');
SELECT is((SELECT (d -> 'acted')::integer
           FROM harvest.cancel_workflows(p_workflow_name => 'wid_wf', p_workflow_id => 'wid-1', p_operator_id => 'op') AS d),
          1, 'cancel_workflows(p_workflow_id): with the workflow name, one run');
SELECT is((SELECT details ->> 'workflow_id' FROM harvest.audit_log WHERE operation = 'workflow.bulk_cancel'),
          'wid-1', 'the batch''s audit row names the workflow id');
SELECT throws_ok(format('SELECT harvest.signal_workflows(%L, %L, p_created_before => %L, p_cursor => %L)', 'noop', '1',
                        '2999-01-01', harvest.signal_workflows('noop', '1', p_created_before => '2999-01-01',
                                                               p_workflow_id => 'wid-1', p_limit => 1) ->> 'next_cursor'),
                 'HR001', 'the cursor was made for another action or filter',
                 'a batch cursor made under a workflow id goes on only under it');
SELECT is((SELECT (d -> 'acted')::integer FROM harvest.terminate_workflows(p_workflow_id => 'wid-1') AS d),
          2, 'terminate_workflows(p_workflow_id): both runs of the id');
SELECT * FROM finish();
ROLLBACK;

-- Reset by filter (reset_workflows, through _act_on_workflows and reset.sql's _reset_point): the
-- RUNNING runs only (a FAILED one is terminal: refused, as reset_workflow refuses it), each to the
-- last valid boundary written before the bad deploy's time (before_time, p_before) or its first
-- (first_workflow_task); the source ends TERMINATED, its fork carries what the good code wrote
-- and none of what the bad code did; a run is reset once per batch; the point, its time, the
-- signal reapply, the reason and the states are checked first.
BEGIN;
SELECT plan(42);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
-- A run of rb_wf (its own queues: a claim takes any task of a queue) the good code ran until
-- the deploy at 00:30 and the bad code after it:
-- 1 WorkflowStarted, 2 WorkflowTaskCompleted, 3 ActivityScheduled(1), 4 ActivityCompleted(1) (00:00);
-- 5 WorkflowTaskCompleted, 6 ActivityScheduled(2, a step the bad code added) (01:00).
CREATE FUNCTION pg_temp.good_part(p_key text) RETURNS uuid LANGUAGE plpgsql AS $fn$
DECLARE
    v_task record;
BEGIN
    PERFORM pg_temp.start_decided(p_key, 'rb_wf', 'rb_q_' || p_key, jsonb_build_array(jsonb_build_object(
        'type', 'schedule_activity', 'seq', 1, 'name', 'charge', 'queue', 'rb_aq_' || p_key)));
    SELECT * INTO v_task FROM harvest.claim_tasks('acts', ARRAY['rb_aq_' || p_key], 1);
    PERFORM harvest.complete_activity(v_task.task_id, v_task.fencing_token, '"charged"');
    RETURN pg_temp.run(p_key);
END;
$fn$;
SELECT pg_temp.good_part('rb1');
SELECT pg_temp.good_part('rb2');
SELECT pg_temp.start_decided('rb_f', 'rb_wf', 'rb_q_f', '[{"type": "fail_workflow", "failure": {"error_type": "Bug",
    "message": "bad deploy"}}]');
SELECT set_config('harvest.fake_now', '2030-01-01 01:00:00+00', true);
SELECT pg_temp.decide('rb1', '[{"type": "schedule_activity", "seq": 2, "name": "ship_v2", "queue": "rb_aq"}]');
SELECT pg_temp.decide('rb2', '[{"type": "schedule_activity", "seq": 2, "name": "ship_v2", "queue": "rb_aq"}]');
SELECT is((SELECT array_agg(status ORDER BY status) FROM harvest.executions WHERE workflow_name = 'rb_wf'),
          ARRAY['FAILED', 'RUNNING', 'RUNNING'], 'setup: two runs the bad code wrote to, a failed run');
SELECT is(harvest._reset_point((SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('rb1')), 'before_time',
                               '2030-01-01 00:30:00+00'),
          4::bigint, '_reset_point(before_time): the last valid boundary written before the deploy');
SELECT is(harvest._reset_point((SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('rb1')), 'before_time',
                               '2029-12-31 00:00:00+00'),
          NULL, '_reset_point(before_time): none before the run started');
SELECT is(harvest._reset_point((SELECT e FROM harvest.executions AS e WHERE e.id = pg_temp.run('rb1')),
                               'first_workflow_task', NULL), 1::bigint, '_reset_point(first_workflow_task): the first one');
SELECT throws_ok($$SELECT harvest.reset_workflows('before_failure', p_workflow_name => 'rb_wf', p_reason => 'x')$$,
                 'HR001', 'unknown reset point "before_failure"', 'reset_workflows: an unknown point is HR001');
SELECT throws_ok($$SELECT harvest.reset_workflows(p_workflow_name => 'rb_wf', p_reason => 'x')$$,
                 'HR001', 'the reset point before_time needs a time (p_before)',
                 'reset_workflows: before_time (the default) without a time is HR001');
SELECT is((SELECT d -> 'matched' FROM harvest.reset_workflows('before_time', p_workflow_name => 'rb_wf',
                                                               p_dry_run => true) AS d),
          '2'::jsonb, 'a dry run (a count) needs no time');
SELECT throws_ok($$SELECT harvest.reset_workflows('first_workflow_task', now(), p_workflow_name => 'rb_wf', p_reason => 'x')$$,
                 'HR001', 'a time (p_before) is only for the reset point before_time',
                 'reset_workflows: first_workflow_task with a time is HR001');
SELECT throws_ok($$SELECT harvest.reset_workflows(p_before => now(), p_signal_reapply => 'keep', p_workflow_name => 'rb_wf',
                                                  p_reason => 'x')$$,
                 'HR001', 'unknown signal_reapply "keep"', 'reset_workflows: an unknown signal reapply is HR001');
SELECT throws_ok($$SELECT harvest.reset_workflows(p_before => now(), p_workflow_name => 'rb_wf')$$,
                 'HR001', 'a reset needs a reason', 'reset_workflows: no reason is HR001');
SELECT throws_ok($$SELECT harvest.reset_workflows(p_before => now(), p_status => 'FAILED', p_workflow_name => 'rb_wf',
                                                  p_reason => 'x')$$,
                 'HR001', 'cannot reset runs in state "FAILED": only running runs can be',
                 'reset_workflows: FAILED runs are not selected (terminal: HR001)');
SELECT throws_ok($$SELECT harvest.reset_workflows(p_before => now(), p_status => 'PAUSED', p_workflow_name => 'rb_wf',
                                                  p_reason => 'x')$$,
                 'HR001', 'cannot reset runs in state "PAUSED": only running runs can be',
                 'reset_workflows: PAUSED runs neither (reset_workflow refuses them)');
SELECT throws_ok($$SELECT harvest.reset_workflows(p_before => now(), p_status => 'RUNNING', p_reason => 'x')$$,
                 'HR001', NULL, 'reset_workflows: a state alone is no filter (HR001)');
SELECT is((SELECT d -> 'matched' FROM harvest.reset_workflows(p_before => '2030-01-01 00:30:00+00',
                                                               p_workflow_name => 'rb_wf', p_dry_run => true) AS d),
          '2'::jsonb, 'a dry run counts the RUNNING runs (not the FAILED one), writes nothing');
SELECT is((SELECT count(*) FROM harvest.executions WHERE workflow_name = 'rb_wf'), 3::bigint, 'no fork after a dry run');
SELECT is((SELECT jsonb_agg(p - 'execution_id') FROM harvest.reset_workflows(p_before => '2030-01-01 00:30:00+00',
              p_workflow_name => 'rb_wf', p_dry_run => true) AS d, jsonb_array_elements(d -> 'points') AS p),
          '[{"event_id": 4, "at": "2030-01-01T00:00:00+00:00", "why": null},
            {"event_id": 4, "at": "2030-01-01T00:00:00+00:00", "why": null}]'::jsonb,
          'a dry run of a reset says each selected run''s point and its time');
SELECT is((SELECT d -> 'points' -> 0 ->> 'why' FROM harvest.reset_workflows(p_before => '2029-12-31 23:00:00+00',
              p_workflow_name => 'rb_wf', p_dry_run => true, p_limit => 1) AS d),
          'no valid reset point before_time before 2029-12-31T23:00:00+00:00 (none written before that time, or none among '
          'the 1000 events nearest it)', 'or why it has none (up to the step''s limit)');
SELECT is((SELECT d - 'next_cursor' - 'execution_ids' - 'shard_id'
           FROM harvest.reset_workflows(p_before => '2030-01-01 00:30:00+00', p_workflow_name => 'rb_wf',
                                        p_workflow_id => 'rb1', p_reason => 'bad deploy', p_operator_id => 'oncall',
                                        p_batch_id => 'b-1', p_limit => 1) AS d),
          '{"action": "reset", "dry_run": false, "batch_id": "b-1", "matched": 1, "acted": 1, "already_ended": 0,
            "unchanged": 0, "forks_kept": 0, "moved": [], "failures": []}'::jsonb, 'a step resets the RUNNING run it selects');
SELECT is((SELECT status FROM harvest.executions WHERE id = pg_temp.run('rb1')), 'TERMINATED',
          'the source ends TERMINATED');
SELECT is((SELECT array_agg(ev.event_type ORDER BY ev.event_id) FROM harvest.events AS ev
           JOIN harvest.executions AS f ON f.id = ev.execution_id
           WHERE f.workflow_id = 'rb1' AND f.id <> pg_temp.run('rb1')),
          ARRAY['WorkflowStarted', 'WorkflowTaskCompleted', 'ActivityScheduled', 'ActivityCompleted', 'WorkflowResetFork'],
          'the fork carries what the good code wrote, none of what the bad code did');
SELECT is((SELECT ev.event_data ->> 'batch_id' FROM harvest.events AS ev JOIN harvest.executions AS f ON f.id = ev.execution_id
           WHERE f.workflow_id = 'rb1' AND ev.event_type = 'WorkflowResetFork'), 'b-1', 'WorkflowResetFork names the batch');
SELECT is((SELECT count(*) FROM harvest.tasks AS t JOIN harvest.executions AS f ON f.id = t.execution_id
           WHERE f.workflow_id = 'rb1' AND f.status = 'RUNNING' AND t.kind = 'workflow'), 1::bigint,
          'the fork has its workflow task');
-- The batch run again from its start (its id, no cursor): rb1's fork is not reset, rb2 is.
SELECT is((SELECT jsonb_build_array(d -> 'acted', d -> 'unchanged')
           FROM harvest.reset_workflows(p_before => '2030-01-01 00:30:00+00', p_workflow_name => 'rb_wf',
                                        p_reason => 'bad deploy', p_batch_id => 'b-1') AS d),
          '[1, 1]'::jsonb, 'run again, the batch resets the other run and counts its own fork unchanged');
SELECT is((SELECT count(*) FROM harvest.executions WHERE workflow_name = 'rb_wf'), 5::bigint, 'one fork a running run');
-- A reset's fork is reset again only to a point before the boundary it was forked at: the same
-- command run again without its batch id (a new batch) finds that boundary again and leaves the
-- fork (unchanged, forks_kept); an earlier time still resets it. rb3: the good code's events 1-4
-- at 00:00, 5 WorkflowTaskCompleted, 6 ActivityScheduled(2), 7 ActivityCompleted(2) at 00:20, the
-- bad code's 8, 9 at 01:00.
SELECT set_config('harvest.fake_now', '2030-01-01 00:00:00+00', true);
SELECT pg_temp.good_part('rb3');
SELECT set_config('harvest.fake_now', '2030-01-01 00:20:00+00', true);
SELECT pg_temp.decide('rb3', '[{"type": "schedule_activity", "seq": 2, "name": "pack", "queue": "rb_aq_rb3"}]');
SELECT harvest.complete_activity(t.task_id, t.fencing_token, '"packed"')
FROM harvest.claim_tasks('acts', ARRAY['rb_aq_rb3'], 1) AS t;
SELECT set_config('harvest.fake_now', '2030-01-01 01:00:00+00', true);
SELECT pg_temp.decide('rb3', '[{"type": "schedule_activity", "seq": 3, "name": "ship_v2", "queue": "rb_aq"}]');
SELECT is((SELECT (d -> 'acted')::integer
           FROM harvest.reset_workflows(p_before => '2030-01-01 00:30:00+00', p_workflow_id => 'rb3',
                                        p_reason => 'bad deploy', p_batch_id => 'b-3') AS d),
          1, 'rb3 is reset to before the deploy (event 7)');
CREATE TEMP TABLE rb3_fork AS SELECT id FROM harvest.executions WHERE workflow_id = 'rb3' AND status = 'RUNNING';
SELECT is((SELECT max(event_id) FROM harvest.events WHERE execution_id = (SELECT id FROM rb3_fork)), 8::bigint,
          'setup: the fork carries events 1-7 and its WorkflowResetFork');
SELECT is((SELECT d - 'next_cursor' - 'execution_ids' - 'shard_id' - 'batch_id'
           FROM harvest.reset_workflows(p_before => '2030-01-01 00:30:00+00', p_workflow_id => 'rb3',
                                        p_reason => 'bad deploy') AS d),
          '{"action": "reset", "dry_run": false, "matched": 1, "acted": 0, "already_ended": 0, "unchanged": 1,
            "forks_kept": 1, "moved": [], "failures": []}'::jsonb,
          'the same command again without its batch id (a new batch) leaves the fork: its point is its fork boundary');
SELECT is((SELECT status FROM harvest.executions WHERE id = (SELECT id FROM rb3_fork)), 'RUNNING',
          'the fork goes on, its progress kept');
SELECT is((SELECT (d -> 'points' -> 0) - 'execution_id'
           FROM harvest.reset_workflows(p_before => '2030-01-01 00:30:00+00', p_workflow_id => 'rb3',
                                        p_dry_run => true) AS d),
          '{"event_id": 7, "at": "2030-01-01T00:20:00+00:00", "why": "its own fork boundary: left as it is (forks_kept)"}'::jsonb,
          'a dry run says a fork would be left at its fork boundary');
SELECT is((SELECT (details ->> 'forks_kept')::integer FROM harvest.audit_log
           WHERE operation = 'workflow.bulk_reset' ORDER BY id DESC LIMIT 1), 1, 'the step''s audit row counts it');
SELECT is((SELECT jsonb_build_array(d -> 'acted', d -> 'forks_kept')
           FROM harvest.reset_workflows(p_before => '2030-01-01 00:10:00+00', p_workflow_id => 'rb3',
                                        p_reason => 'the deploy was earlier') AS d),
          '[1, 0]'::jsonb, 'a corrected, earlier time resets the fork (to event 4, before its boundary 7)');
SELECT is((SELECT (ev.event_data ->> 'to_event')::bigint FROM harvest.events AS ev
           JOIN harvest.executions AS f ON f.id = ev.execution_id
           WHERE f.workflow_id = 'rb3' AND f.status = 'RUNNING' AND ev.event_type = 'WorkflowResetFork'
           ORDER BY ev.event_id DESC LIMIT 1),
          4::bigint, 'the new fork is forked at event 4');
SELECT is((SELECT jsonb_build_array(d -> 'acted', d -> 'forks_kept')
           FROM harvest.reset_workflows('first_workflow_task', p_workflow_id => 'rb3', p_reason => 'redo') AS d),
          '[1, 0]'::jsonb, 'first_workflow_task resets a fork forked later (event 1 is before its boundary)');
SELECT is((SELECT jsonb_build_array(d -> 'acted', d -> 'forks_kept')
           FROM harvest.reset_workflows('first_workflow_task', p_workflow_id => 'rb3', p_reason => 'redo') AS d),
          '[0, 1]'::jsonb, 'and run again leaves the fork it made (forked at its first workflow task)');
-- A later bad deploy that reaches the fork: its point is a boundary the fork wrote itself, after
-- the one it was forked at, so it is reset (only the very fork boundary is kept).
SELECT set_config('harvest.fake_now', '2030-01-01 02:00:00+00', true);
SELECT pg_temp.decide('rb3', '[{"type": "schedule_activity", "seq": 1, "name": "charge", "queue": "rb_aq_rb3"}]');
SELECT harvest.complete_activity(t.task_id, t.fencing_token, '"charged"')
FROM harvest.claim_tasks('acts', ARRAY['rb_aq_rb3'], 1) AS t;
SELECT pg_temp.decide('rb3', '[]');
SELECT set_config('harvest.fake_now', '2030-01-01 04:00:00+00', true);
SELECT is((SELECT jsonb_build_array(d -> 'acted', d -> 'forks_kept')
           FROM harvest.reset_workflows(p_before => '2030-01-01 03:00:00+00', p_workflow_id => 'rb3',
                                        p_reason => 'a second bad deploy') AS d),
          '[1, 0]'::jsonb, 'a later deploy''s time resets the fork to a boundary it wrote after its fork boundary');
SELECT throws_ok($$SELECT harvest.reset_workflows(p_before => '2030-01-01 05:00:00+00', p_workflow_id => 'rb3',
                                                  p_reason => 'future')$$,
                 'HR001', NULL, 'a time in the future is refused: it would find a fork''s latest boundary');
SELECT is((SELECT array_agg(status) FROM harvest.executions WHERE workflow_id = 'rb_f'), ARRAY['FAILED'],
          'the FAILED run is left alone: no fork');
SELECT is((SELECT (d -> 'acted')::integer
           FROM harvest.reset_workflows('first_workflow_task', p_workflow_id => 'rb2', p_reason => 'again',
                                        p_batch_id => 'b-2') AS d),
          1, 'another batch resets a fork like any running run (first_workflow_task)');
SELECT is((SELECT jsonb_build_array(details ->> 'batch_id', details ->> 'reset_to', details ->> 'acted',
                                    (details ->> 'before')::timestamptz = '2030-01-01 00:30:00+00')
           FROM harvest.audit_log WHERE operation = 'workflow.bulk_reset' ORDER BY id LIMIT 1),
          '["b-1", "before_time", "1", true]'::jsonb, 'each step writes a workflow.bulk_reset audit row with the time');
SELECT is((SELECT details ->> 'batch_id' FROM harvest.audit_log
           WHERE operation = 'workflow.reset' AND target = pg_temp.run('rb1')::text),
          'b-1', 'each run''s workflow.reset row names the batch');
SELECT is((SELECT d -> 'failures' -> 0 ->> 'error'
           FROM harvest.reset_workflows(p_before => '2029-12-31 00:00:00+00', p_workflow_id => 'rb1',
                                        p_reason => 'too early', p_batch_id => 'b-none') AS d),
          'run ' || (SELECT id FROM harvest.executions WHERE workflow_id = 'rb1' AND status = 'RUNNING')
          || ' has no valid reset point before_time before 2029-12-31T00:00:00+00:00 (none written before that time, '
          || 'or none among the 1000 events nearest it): reset it with first_workflow_task, or alone with '
          || 'harvest workflow reset --to-event (its --dry-run says which points are valid)',
          'a run with no valid point counts in failures, saying what to do');
-- A batch's cursor goes on from a session of another TimeZone (the scope holds the time as an
-- instant, not as its text in the session's TimeZone).
SET LOCAL TimeZone = 'UTC';
CREATE TEMP TABLE rb_tz AS SELECT d ->> 'next_cursor' AS cursor
FROM harvest.reset_workflows(p_before => '2030-01-01 00:30:00+00', p_workflow_name => 'rb_wf', p_reason => 'tz',
                             p_batch_id => 'b-tz', p_limit => 1) AS d;
SET LOCAL TimeZone = 'Asia/Kolkata';
-- (acted, or unchanged: the step may meet the first step's fork, made at the fake clock's as_of)
SELECT is((SELECT (d -> 'acted')::integer + (d -> 'unchanged')::integer + jsonb_array_length(d -> 'failures')
           FROM harvest.reset_workflows(p_before => '2030-01-01 00:30:00+00', p_workflow_name => 'rb_wf',
                                        p_reason => 'tz', p_batch_id => 'b-tz', p_limit => 1,
                                        p_cursor => (SELECT cursor FROM rb_tz)) AS d),
          1, 'a batch reset''s cursor goes on from a session of another TimeZone');
SET LOCAL TimeZone = 'UTC';
SELECT * FROM finish();
ROLLBACK;
