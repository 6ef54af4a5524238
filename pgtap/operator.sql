-- functions/operator.sql: harvest.list_executions, harvest.workflow_stack and their helpers.
BEGIN;
SELECT plan(21);
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
SELECT is((SELECT count(*) FROM harvest.list_executions(p_state => 'completed,running',
           p_workflow_name => 'op_wf')), 5::bigint, 'states are case-insensitive and comma-separated');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_state => 'DONE')$$, 'HR001',
                 'unknown state "DONE": use RUNNING, COMPLETED, FAILED, CANCELLED, TERMINATED, TIMED_OUT or '
                 'CONTINUED_AS_NEW (comma-separated for several)', 'an unknown state is refused, not matched against nothing');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_search_attributes => ARRAY['tenant'])$$, 'HR001',
                 'search attribute filter "tenant" is malformed', 'a filter without an operator is refused');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_page_size => 1001)$$, 'HR001',
                 'page size 1001 is out of range 1..1000', 'page size is bounded');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_cursor => 'garbage')$$, 'HR001', NULL,
                 'a malformed cursor is refused');
SELECT throws_ok($$SELECT * FROM harvest.list_executions(p_order => 'sideways')$$, 'HR001', NULL,
                 'order is asc or desc');

-- Keyset pages of 2: the last row of a page carries the cursor; the last page carries none.
CREATE TEMP TABLE page1 ON COMMIT DROP AS
SELECT * FROM harvest.list_executions(p_workflow_name => 'op_wf', p_page_size => 2, p_order => 'asc');
CREATE TEMP TABLE page2 ON COMMIT DROP AS
SELECT * FROM harvest.list_executions(p_workflow_name => 'op_wf', p_page_size => 2, p_order => 'asc',
    p_cursor => (SELECT next_cursor FROM page1 WHERE next_cursor IS NOT NULL));
CREATE TEMP TABLE page3 ON COMMIT DROP AS
SELECT * FROM harvest.list_executions(p_workflow_name => 'op_wf', p_page_size => 2, p_order => 'asc',
    p_cursor => (SELECT next_cursor FROM page2 WHERE next_cursor IS NOT NULL));
SELECT is((SELECT array_agg(id ORDER BY created_at, id) FROM (SELECT id, created_at FROM page1 UNION ALL
           SELECT id, created_at FROM page2 UNION ALL SELECT id, created_at FROM page3) AS p),
          (SELECT array_agg(e.id ORDER BY e.created_at, e.id) FROM harvest.executions e WHERE e.workflow_name = 'op_wf'),
          'three pages hold every run once, in order');
SELECT is((SELECT count(*) FROM page3 WHERE next_cursor IS NOT NULL), 0::bigint, 'the last page has no cursor');

SELECT is((harvest.workflow_stack((SELECT id FROM runs WHERE n = 1)) ->> 'status'), 'RUNNING',
          'stack reports the status');
SELECT throws_ok(format('SELECT harvest.workflow_stack(%L)', gen_random_uuid()), 'HR002', NULL,
                 'stack of an unknown execution is not found');

-- The helpers, directly.
SELECT is((SELECT id FROM harvest._decode_cursor(harvest._encode_cursor('2030-01-01 00:00:00+00',
           '00000000-0000-0000-0000-000000000001'))), '00000000-0000-0000-0000-000000000001'::uuid,
          'a cursor round-trips');
SELECT is(harvest._parse_search_filter('amount >= 10'), '{"key": "amount", "op": ">=", "value": "10"}'::jsonb,
          'a filter parses into key, operator and value');
SELECT ok(harvest._search_predicate('{"key": "a", "op": "=", "value": "x''y"}') LIKE '%''x''''y''%',
          'predicate literals are quoted');
SELECT is(harvest._try_timestamptz('not a time'), NULL, 'an unparseable time compares as NULL');
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
SELECT lives_ok($$SELECT * FROM harvest.list_executions(p_state => 'RUNNING',
                      p_search_attributes => ARRAY['flag=true', 'flag>1', 'flag!=false'])$$,
                'several typed filters of one mixed key compose without a cast error');

SELECT * FROM finish();
ROLLBACK;
