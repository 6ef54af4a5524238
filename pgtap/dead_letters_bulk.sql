-- functions/dead_letters.sql (bulk): count_dead_letters, replay_dead_letters,
-- discard_dead_letters, harvest._select_dead_letters, harvest._bulk_dead_letters.
BEGIN;
SELECT plan(12);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

SELECT pg_temp.dead_letter('b' || n, 'bk_wf', 'send') FROM generate_series(1, 3) AS n;
SELECT pg_temp.dead_letter('c1', 'bk_wf', 'charge');
SELECT harvest.terminate_workflow(e.id) FROM harvest.executions e WHERE e.workflow_id = 'b1';

SELECT is((SELECT dead_letters FROM harvest.count_dead_letters('activity') WHERE activity_name = 'send'),
          3::bigint, 'aggregate by activity');
SELECT throws_ok($$SELECT harvest.count_dead_letters('colour')$$, 'HR001', NULL, 'unknown grouping refused');
SELECT throws_ok($$SELECT harvest.replay_dead_letters()$$, 'HR001', NULL, 'a bulk action needs a filter');
SELECT throws_ok($$SELECT harvest.discard_dead_letters('send', p_limit => 1001)$$, 'HR001', NULL,
                 'limit at most 1000');
SELECT is(harvest.replay_dead_letters('send', p_dry_run => true) - 'ids' - 'failures',
          '{"dry_run": true, "matched": 3, "acted_on": 0}'::jsonb, 'dry run reports matched, acts on nothing');
SELECT is((SELECT count(*) FROM harvest.dead_letters), 4::bigint, 'dry run wrote nothing');
SELECT is(harvest.replay_dead_letters('send', p_limit => 2) - 'ids' - 'failures',
          '{"dry_run": false, "matched": 3, "acted_on": 1}'::jsonb, 'limit clips; the ended run fails per row');
SELECT is(jsonb_array_length(harvest.replay_dead_letters('send') -> 'failures'), 1,
          'the ended run''s row is a per-row failure, not an abort');
SELECT is((harvest.discard_dead_letters(p_activity_name => 'charge') ->> 'acted_on')::int, 1, 'bulk discard');
SELECT is((SELECT count(*) FROM harvest.audit_log WHERE operation LIKE 'dead_letters.bulk_%'), 3::bigint,
          'real bulk actions are audited');
SELECT is((SELECT count(*) FROM harvest.audit_log WHERE operation LIKE 'dead_letter.%'), 0::bigint,
          'a bulk action writes its one row, none per dead letter');

-- The default batch is 100 rows (docs/operations.md): 101 matching, a call without a limit takes 100.
SELECT pg_temp.dead_letter('m' || n, 'bk_wf', 'many') FROM generate_series(1, 101) AS n;
SELECT is((SELECT jsonb_build_object('matched', r -> 'matched', 'ids', jsonb_array_length(r -> 'ids'))
           FROM harvest.replay_dead_letters('many', p_dry_run => true) AS r),
          '{"matched": 101, "ids": 100}'::jsonb, 'the default batch is 100 rows of the 101 matched');

SELECT * FROM finish();
ROLLBACK;
