-- functions/flow_rate_limits.sql: harvest._bucket_now, harvest._lock_rate_buckets,
-- harvest._debit_rate_buckets, harvest._override_bucket, harvest._override_burst, harvest.set_rate_limit_override,
-- harvest.clear_rate_limit_override, harvest.get_rate_limit, harvest._rate_wait_secs,
-- harvest._repace_rate_bucket, harvest._repace_rate_buckets.
BEGIN;
SELECT plan(50);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

SELECT harvest.declare_flow_policies('{"activities": {"paced": {"rate_limit": {"rps": 2, "burst": 2, "key": null}},
                                                       "keyed": {"rate_limit": {"rps": 2, "burst": 1, "key": "input.t"}}}}');
-- Before any claim made a bucket: the declared rate (a per-key one too); an undeclared name, no row.
SELECT results_eq($$SELECT * FROM harvest.get_rate_limit('paced')$$,
                  $$VALUES ('paced', 2::double precision, 2::double precision, NULL::double precision,
                            NULL::double precision, NULL::timestamptz)$$,
                  'get_rate_limit(): the declared rate before the first claim made its bucket');
SELECT results_eq($$SELECT activity_name, rps, burst FROM harvest.get_rate_limit('keyed')$$,
                  $$VALUES ('keyed', 2::double precision, 1::double precision)$$,
                  'get_rate_limit(): a per-key limit answers its declared rate (each key''s bucket has it)');
SELECT is_empty($$SELECT * FROM harvest.get_rate_limit('no_such_activity')$$,
                'get_rate_limit(): no row for an activity that declares no rate limit');
SELECT harvest.start_workflow('wf_rate', '[]', 'r', 'rq0');
SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1, (SELECT jsonb_agg(jsonb_build_object(
    'type', 'schedule_activity', 'seq', i, 'name', 'paced', 'input', '[]'::jsonb, 'queue', 'rq',
    'options', '{"rate_limit": {"rps": 2, "burst": 2, "key": null}}'::jsonb)) FROM generate_series(1, 5) AS i))
FROM harvest.claim_tasks('w', ARRAY['rq0']) AS c;

SELECT is((SELECT count(DISTINCT rate_key) FROM harvest.tasks WHERE queue = 'rq'), 1::bigint, 'static limit: one bucket');
SELECT is((SELECT harvest._lock_rate_buckets(array_agg(rate_key), array_agg(activity_name), array_agg(options),
                                             array_agg(id), harvest.now())
           FROM harvest.tasks WHERE queue = 'rq'),
          ARRAY['rate:paced'], '_lock_rate_buckets() creates and locks the bucket');
SELECT results_eq($$SELECT tokens, rps, burst FROM harvest._bucket_now('rate:paced', harvest.now())$$,
                  $$VALUES (2::double precision, 2::double precision, 2::double precision)$$, 'a new bucket is full');
SELECT is((SELECT count(*) FROM harvest.claim_tasks('w', ARRAY['rq'], 10)), 2::bigint, 'claim: the burst of 2 is admitted');
SELECT is((SELECT tokens FROM harvest._bucket_now('rate:paced', harvest.now())), 0::double precision,
          'the claim paid for both (_debit_rate_buckets)');
SELECT lives_ok($$SELECT harvest._debit_rate_buckets(ARRAY[]::harvest.tasks[], harvest.now())$$, '_debit_rate_buckets() of nothing');
-- A stale window: a claim whose window still holds the two another claim just took (its
-- window was read before that claim committed, its bucket lock after) steps the three left
-- back by their places among the tasks still waiting (0.5, 1 and 1.5 s at 2/s), not by
-- ranks the taken ones inflate (1.5, 2 and 2.5 s: a whole burst's time lost).
SELECT is((SELECT harvest._admit_candidates(array_agg(id ORDER BY id), array_agg(harvest._gate_of(t) ORDER BY id),
                                            harvest.now())
           FROM harvest.tasks AS t WHERE queue = 'rq'),
          ARRAY[]::bigint[], '_admit_candidates(): a stale window (two of five taken) admits none without tokens');
SELECT is((SELECT array_agg(extract(EPOCH FROM due_at - harvest.now())::numeric ORDER BY id)
           FROM harvest.tasks WHERE queue = 'rq' AND status = 'pending'),
          ARRAY[0.5, 1.0, 1.5]::numeric[],
          '_admit_candidates(): the ones taken since the window was read hold no place in the line');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00.5+00';
SELECT is((SELECT count(*) FROM harvest.claim_tasks('w', ARRAY['rq'], 10)), 1::bigint, 'half a second at 2/s: one more');

-- Overrides.
SELECT is(harvest._override_bucket('paced'), 'rate:paced', '_override_bucket(): the static bucket');
SELECT is(ARRAY[harvest._override_burst(5, 3, 10), harvest._override_burst(5, NULL, 10),
                harvest._override_burst(0.5, NULL, 10)], ARRAY[3, 5, 1]::double precision[],
          '_override_burst(): the burst given, else max(rps, 1): both overrides'' one rule');
SELECT throws_ok($$SELECT harvest._override_burst(1, 0.5, 10)$$, 'HR001',
                 'override needs rps > 0, burst >= 1 and a positive ttl, got rps=1 burst=0.5 ttl=10',
                 '_override_burst(): a burst below 1 is HR001, and so is a bad rps or ttl');
SELECT throws_ok($$SELECT harvest._override_burst('NaN', NULL, 10)$$, 'HR001',
                 'override needs a finite rps and burst and a ttl of at most 1e9 seconds, got rps=NaN burst=<NULL> ttl=10',
                 '_override_burst(): an rps of NaN is HR001 (it compares above every number: it let every claim through)');
SELECT throws_ok($$SELECT harvest._override_burst(1, 'Infinity', 10)$$, 'HR001', NULL,
                 '_override_burst(): a burst of Infinity is HR001');
SELECT throws_ok($$SELECT harvest._override_burst(1, NULL, 1e300)$$, 'HR001', NULL,
                 '_override_burst(): a ttl past 1e9 s is HR001, not 22008 from the expiry''s timestamp');
SELECT results_eq($$SELECT override_rps, override_expires_at FROM harvest.set_rate_limit_override('paced', 20, 5, 10)$$,
                  $$VALUES (20::double precision, '2030-01-01 00:00:10.5+00'::timestamptz)$$, 'set_rate_limit_override()');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:11+00';
SELECT is((SELECT override_rps FROM harvest.get_rate_limit('paced')), NULL, 'get_rate_limit(): the override expired by itself');
SELECT is(harvest.clear_rate_limit_override('paced'), false, 'clear_rate_limit_override() of an expired one: false');
SELECT throws_ok($$SELECT * FROM harvest.set_rate_limit_override('keyed', 5)$$, 'HR007', NULL,
                 'an override of a per-key policy is a conflict');
-- _refilled_tokens: the shared lazy refill, capped at the burst.
SELECT is(harvest._refilled_tokens(1, '2030-01-01 00:00:00+00', '2030-01-01 00:00:02+00', 0.5, 10), 2::double precision,
          '_refilled_tokens() adds elapsed seconds times rps');
SELECT is(harvest._refilled_tokens(1, '2030-01-01 00:00:00+00', '2030-01-01 01:00:00+00', 0.5, 10), 10::double precision,
          '_refilled_tokens() never exceeds the burst');

-- An override (and its clear) re-paces the tasks the limit already holds back (0132): six
-- activities at 2/s (burst 1), one claimed and five stepped back at 0.5 s apart, one of those
-- claimed and failed into a retry's backoff.
SET LOCAL harvest.fake_now = '2030-01-02 00:00:00+00';
SELECT harvest.declare_flow_policies('{"activities": {"swift": {"rate_limit": {"rps": 2, "burst": 1}}}}');
-- A run of workflow_id p_id (its workflow task on p_queue) that queues p_n activities swift on
-- queue sq, each with p_options.
CREATE FUNCTION pg_temp.swift_run(p_id text, p_queue text, p_n integer, p_options jsonb)
RETURNS void
LANGUAGE sql
AS $$
    SELECT harvest.start_workflow('wf_swift', '[]', p_id, p_queue);
    SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1, (SELECT jsonb_agg(jsonb_build_object(
        'type', 'schedule_activity', 'seq', i, 'name', 'swift', 'input', '[]'::jsonb, 'queue', 'sq',
        'options', p_options))
        FROM generate_series(1, p_n) AS i))
    FROM harvest.claim_tasks('w', ARRAY[p_queue]) AS c;
$$;
SELECT pg_temp.swift_run('s', 'sq0', 6, '{"rate_limit": {"rps": 2, "burst": 1}, "retry": {"initial_interval": 30}}');
CREATE TEMP TABLE swift_claimed ON COMMIT DROP AS
SELECT c.task_id, c.fencing_token FROM harvest.claim_tasks('w', ARRAY['sq'], 10) AS c;
SELECT is((SELECT array_agg(extract(EPOCH FROM due_at - harvest.now())::numeric ORDER BY due_at, id)
           FROM harvest.tasks WHERE queue = 'sq' AND status = 'pending' AND rate_due_at = due_at),
          ARRAY[0.5, 1.0, 1.5, 2.0, 2.5]::numeric[],
          '_admit_candidates(): a rate-limit refusal marks the task it steps back (rate_due_at = due_at)');
SELECT is(harvest.fail_activity(task_id, fencing_token, '{"message": "boom"}'), 'retry_scheduled',
          'setup: the claimed one fails into a 30 s backoff')
FROM swift_claimed;
SELECT is((SELECT rate_due_at FROM harvest.tasks AS t JOIN swift_claimed AS c ON c.task_id = t.id), NULL,
          'fail_activity(): a retry''s backoff carries no rate-limit mark');
SELECT is(harvest._rate_wait_secs(4, 2, NULL, NULL), 2::double precision,
          '_rate_wait_secs(): the 4th token at 2/s, 2 s');
SELECT is(harvest._rate_wait_secs(4, 2, 0.5, 1), 5::double precision,
          '_rate_wait_secs(): 2/s for 1 s (2 tokens), then 0.5/s for the 2 left: 5 s');
-- Raised to 20/s: the five are due 0.05 s apart (the bucket is empty); the backoff stays.
SELECT lives_ok($$SELECT * FROM harvest.set_rate_limit_override('swift', 20, 1, 600)$$, 'override to 20/s');
SELECT is((SELECT array_agg(extract(EPOCH FROM due_at - harvest.now())::numeric ORDER BY due_at, id)
           FROM harvest.tasks WHERE queue = 'sq' AND status = 'pending' AND rate_due_at = due_at),
          ARRAY[0.05, 0.1, 0.15, 0.2, 0.25]::numeric[],
          'set_rate_limit_override(): the held tasks take the new rate now (_repace_rate_bucket)');
SELECT is((SELECT extract(EPOCH FROM due_at - harvest.now())::numeric
           FROM harvest.tasks AS t JOIN swift_claimed AS c ON c.task_id = t.id), 30::numeric,
          'set_rate_limit_override(): a retry''s backoff is never moved');
-- Lowered to 1/s for 2 s: two tokens at 1/s, the other three at the declared 2/s after.
SELECT lives_ok($$SELECT * FROM harvest.set_rate_limit_override('swift', 1, 1, 2)$$, 'override to 1/s for 2 s');
SELECT is((SELECT array_agg(extract(EPOCH FROM due_at - harvest.now())::numeric ORDER BY due_at, id)
           FROM harvest.tasks WHERE queue = 'sq' AND status = 'pending' AND rate_due_at = due_at),
          ARRAY[1, 2, 2.5, 3, 3.5]::numeric[],
          'set_rate_limit_override(): a lowered rate holds them back, up to its expiry');
-- Cleared: the declared 2/s at once.
SELECT is(harvest.clear_rate_limit_override('swift'), true, 'clear the override');
SELECT is((SELECT array_agg(extract(EPOCH FROM due_at - harvest.now())::numeric ORDER BY due_at, id)
           FROM harvest.tasks WHERE queue = 'sq' AND status = 'pending' AND rate_due_at = due_at),
          ARRAY[0.5, 1.0, 1.5, 2.0, 2.5]::numeric[],
          'clear_rate_limit_override(): the held tasks are back at the declared rate');
-- Bounded: a batch of 2 moves the first two whose time changes, the next call the next ones.
UPDATE harvest.rate_limit_buckets SET rps = 4 WHERE bucket_key = 'rate:swift';
SELECT is(ARRAY[harvest._repace_rate_bucket('rate:swift', harvest.now(), 2),
                harvest._repace_rate_bucket('rate:swift', harvest.now(), 2),
                harvest._repace_rate_bucket('rate:swift', harvest.now(), 2),
                harvest._repace_rate_bucket('rate:swift', harvest.now(), 2)], ARRAY[2, 2, 1, 0],
          '_repace_rate_bucket(): a batch writes the first tasks whose time changes, the next goes on');
SELECT is((SELECT array_agg(extract(EPOCH FROM due_at - harvest.now())::numeric ORDER BY due_at, id)
           FROM harvest.tasks WHERE queue = 'sq' AND status = 'pending' AND rate_due_at = due_at),
          ARRAY[0.25, 0.5, 0.75, 1.0, 1.25]::numeric[], '_repace_rate_bucket(): the whole line, in three batches');
-- A full batch leaves the bucket a budget; the scanner's sweep goes on, and drops it once done.
UPDATE harvest.rate_limit_buckets SET rps = 2 WHERE bucket_key = 'rate:swift';
SELECT is(harvest._repace_rate_bucket('rate:swift', harvest.now(), 2), 2, 'setup: a batch of 2 of 5');
SELECT is((SELECT repace_left FROM harvest.rate_limit_buckets WHERE bucket_key = 'rate:swift'), 3,
          '_repace_rate_bucket(): a full batch leaves the scanner the rest of the line (repace_left)');
-- (A lowered rate's first batch moved its tasks back past some of the rest: the line's order
-- changes, and the pass may move one of the two again. Every place keeps its slot.)
SELECT is(ARRAY[harvest._repace_rate_buckets() >= 3, harvest._repace_rate_buckets() = 0], ARRAY[true, true],
          '_repace_rate_buckets(): the scanner moves the rest of the line, then finds nothing');
SELECT is((SELECT array_agg(extract(EPOCH FROM due_at - harvest.now())::numeric ORDER BY due_at, id)
           FROM harvest.tasks WHERE queue = 'sq' AND status = 'pending' AND rate_due_at = due_at),
          ARRAY[0.5, 1.0, 1.5, 2.0, 2.5]::numeric[], '_repace_rate_buckets(): the whole line at the new rate');
SELECT is((SELECT repace_left FROM harvest.rate_limit_buckets WHERE bucket_key = 'rate:swift'), NULL,
          '_repace_rate_buckets(): a batch that is not full drops the budget');
-- Claims lag the line (no claim here): the tasks come due untaken and the bucket's tokens pile
-- up, so at each pass the first batch's slots move again. The passes end with the budget (the
-- line's length in batches), not with a batch that is not full, which never comes.
SELECT pg_temp.swift_run('s2', 'sq2', 30, '{"rate_limit": {"rps": 2, "burst": 1}}');
SELECT is((SELECT count(*) FROM harvest.claim_tasks('w', ARRAY['sq'], 100) AS c WHERE c.kind = 'activity'), 0::bigint,
          'setup: the bucket refuses them all');
SELECT is(harvest._repace_rate_bucket('rate:swift', harvest.now(), 10), 10, 'setup: an override''s batch of 10');
SET LOCAL harvest.fake_now = '2030-01-02 00:00:05+00';
SELECT harvest._repace_rate_bucket('rate:swift', harvest.now(), 10);
SET LOCAL harvest.fake_now = '2030-01-02 00:00:06+00';
SELECT harvest._repace_rate_bucket('rate:swift', harvest.now(), 10);
SET LOCAL harvest.fake_now = '2030-01-02 00:00:07+00';
SELECT harvest._repace_rate_bucket('rate:swift', harvest.now(), 10);
SET LOCAL harvest.fake_now = '2030-01-02 00:00:08+00';
SELECT is(harvest._repace_rate_buckets(), 0,
          '_repace_rate_buckets(): the scanner''s passes end with the line''s length in batches, while '
          'claims lag the line too (a flag kept every pass rewriting a batch)');
SELECT is(harvest._repace_rate_bucket('rate:no_such_activity', harvest.now()), 0,
          '_repace_rate_bucket() of a bucket no claim made moves nothing');

-- Rate-limit overrides are audited, set and clear (source ui from the dashboard's sessions).
SET LOCAL application_name = 'harvest-ui';
CREATE TEMP TABLE audit_mark ON COMMIT DROP AS SELECT coalesce(max(id), 0) AS id FROM harvest.audit_log;
SELECT lives_ok($$SELECT * FROM harvest.set_rate_limit_override('paced', 5, 10, 60)$$,
                'setup: set then clear an override from the dashboard');
SELECT harvest.clear_rate_limit_override('paced');
SELECT results_eq($$SELECT operation, target, actor = session_user, source, details FROM harvest.audit_log
                    WHERE id > (SELECT id FROM audit_mark) ORDER BY id$$,
                  $$VALUES ('rate_limit.override'::text, 'paced'::text, true, 'ui'::text,
                            '{"rps": 5, "burst": 10, "ttl_secs": 60}'::jsonb),
                           ('rate_limit.clear_override', 'paced', true, 'ui', '{"was_live": true}')$$,
                  'set_rate_limit_override() and clear_rate_limit_override() each write one audit row');
RESET application_name;
-- Who made them, named by p_operator_id as the start throttle's overrides are (0115).
TRUNCATE audit_mark;
INSERT INTO audit_mark SELECT coalesce(max(id), 0) FROM harvest.audit_log;
SELECT harvest.set_rate_limit_override('paced', 5, p_operator_id => 'alice');
SELECT harvest.clear_rate_limit_override('paced', p_operator_id => 'bob');
SELECT results_eq($$SELECT operation, operator_id FROM harvest.audit_log WHERE id > (SELECT id FROM audit_mark) ORDER BY id$$,
                  $$VALUES ('rate_limit.override'::text, 'alice'::text), ('rate_limit.clear_override', 'bob')$$,
                  'set_rate_limit_override() and clear_rate_limit_override() write p_operator_id to their audit rows');

SELECT * FROM finish();
ROLLBACK;
