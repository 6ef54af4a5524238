-- Activity rate limits: token buckets in harvest.rate_limit_buckets, consumed
-- inside claim_tasks, and the TTL'd pacing override an operator lays on top.
--
-- A bucket refills lazily: tokens = least(burst, tokens + elapsed * rps), read
-- and written only under the bucket's row lock. The claim locks the buckets of
-- its candidates with FOR UPDATE SKIP LOCKED (a bucket another claimer holds is
-- skipped this round, so the claim never waits), admits as many candidates per
-- bucket as whole tokens allow, and pays for the ones it claimed in the same
-- transaction. A candidate refused for want of tokens steps back exactly until
-- its token is due.
--
-- Bucket keys: rate:<activity> for a static limit; dyn-rate:<key path>:<value>
-- for a limit keyed by the input (one bucket per tenant). An override targets a
-- static bucket only: a per-key policy has no single bucket, so an override of
-- one is refused with HR007 (conflict), as the spec's 409 says.

-- Lazy refill, the one token-bucket formula (rate limits and the start throttle).
CREATE OR REPLACE FUNCTION harvest._refilled_tokens(
    p_tokens double precision, p_refilled_at timestamptz, p_now timestamptz,
    p_rps double precision, p_burst double precision
)
RETURNS double precision
LANGUAGE sql IMMUTABLE
AS $$
    SELECT least(p_burst, p_tokens + greatest(extract(EPOCH FROM p_now - p_refilled_at)::double precision, 0)
                                     * p_rps);
$$;

-- The bucket's effective rate and refilled tokens at p_now (no write).
CREATE OR REPLACE FUNCTION harvest._bucket_now(p_bucket_key text, p_now timestamptz)
RETURNS TABLE (tokens double precision, rps double precision, burst double precision)
LANGUAGE sql STABLE
AS $$
    SELECT harvest._refilled_tokens(b.tokens, b.refilled_at, p_now, x.rps, x.burst), x.rps, x.burst
    FROM harvest.rate_limit_buckets AS b
    CROSS JOIN LATERAL (
        SELECT CASE WHEN b.override_expires_at > p_now THEN b.override_rps ELSE b.rps END AS rps,
               CASE WHEN b.override_expires_at > p_now THEN b.override_burst ELSE b.burst END AS burst
    ) AS x
    WHERE b.bucket_key = p_bucket_key;
$$;

-- Create the missing buckets of these candidates (full), follow a changed
-- declaration, and lock the ones no other claimer holds; returns their keys. Only a bucket
-- this claim does not see is inserted: ON CONFLICT waits for a transaction that updated the
-- existing row, and an override (or its clear) holds it while it re-paces the held tasks
-- (_repace_rate_bucket, up to 10,000 rows), so each claim of the limit's tasks stalled on it. The
-- candidates come as columns (the rate-keyed ones' key, activity, options and id),
-- read once by _admit_candidates: reading them here again by id cost a primary-key
-- probe per candidate and statement (docs/performance.md, "Fairness keys visited").
CREATE OR REPLACE FUNCTION harvest._lock_rate_buckets(
    p_rate_keys text[], p_activity_names text[], p_options jsonb[], p_ids bigint[], p_now timestamptz
)
RETURNS text[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_locked text[];
BEGIN
    INSERT INTO harvest.rate_limit_buckets (bucket_key, activity_name, rps, burst, tokens, refilled_at, dynamic)
    SELECT n.bucket_key, n.activity_name, n.rps, n.burst, n.burst, p_now, n.dynamic
    FROM (
        SELECT DISTINCT ON (r.rate_key) r.rate_key, r.activity_name,
               (r.options #>> '{rate_limit,rps}')::double precision,
               coalesce((r.options #>> '{rate_limit,burst}')::double precision,
                        greatest((r.options #>> '{rate_limit,rps}')::double precision, 1)),
               r.options #>> '{rate_limit,key}' IS NOT NULL
        FROM unnest(p_rate_keys, p_activity_names, p_options, p_ids) AS r (rate_key, activity_name, options, id)
        WHERE r.rate_key IS NOT NULL
        ORDER BY r.rate_key, r.id DESC
    ) AS n (bucket_key, activity_name, rps, burst, dynamic)
    -- (one probe a key, where ON CONFLICT made its own)
    WHERE NOT EXISTS (SELECT 1 FROM harvest.rate_limit_buckets AS e WHERE e.bucket_key = n.bucket_key)
    ON CONFLICT (bucket_key) DO NOTHING;

    SELECT array_agg(b.bucket_key) INTO v_locked FROM (
        SELECT r.bucket_key FROM harvest.rate_limit_buckets AS r
        WHERE r.bucket_key IN (SELECT k.key FROM unnest(p_rate_keys) AS k (key))
        ORDER BY r.bucket_key
        FOR UPDATE SKIP LOCKED
    ) AS b;

    -- A redeployed declaration (new rps or burst) takes effect on the next claim.
    UPDATE harvest.rate_limit_buckets AS b
    SET rps = d.rps, burst = d.burst, tokens = least(b.tokens, d.burst)
    FROM (
        SELECT DISTINCT ON (r.rate_key) r.rate_key,
               (r.options #>> '{rate_limit,rps}')::double precision AS rps,
               coalesce((r.options #>> '{rate_limit,burst}')::double precision,
                        greatest((r.options #>> '{rate_limit,rps}')::double precision, 1)) AS burst
        FROM unnest(p_rate_keys, p_options, p_ids) AS r (rate_key, options, id)
        WHERE r.rate_key = ANY(v_locked)
        ORDER BY r.rate_key, r.id DESC
    ) AS d
    WHERE b.bucket_key = d.rate_key AND (b.rps <> d.rps OR b.burst <> d.burst);
    RETURN coalesce(v_locked, ARRAY[]::text[]);
END;
$$;

-- Pay for the rate-limited activities of a claim (their buckets are locked).
CREATE OR REPLACE FUNCTION harvest._debit_rate_buckets(p_claimed harvest.tasks[], p_now timestamptz)
RETURNS void
LANGUAGE sql
AS $$
    UPDATE harvest.rate_limit_buckets AS b
    SET tokens = n.tokens - used.n, refilled_at = p_now
    FROM (
        SELECT t.rate_key, count(*) AS n FROM unnest(p_claimed) AS t
        WHERE t.rate_key IS NOT NULL
        GROUP BY t.rate_key
    ) AS used
    CROSS JOIN LATERAL harvest._bucket_now(used.rate_key, p_now) AS n
    WHERE b.bucket_key = used.rate_key;
$$;

-- The static bucket an override targets, or HR002 / HR007.
CREATE OR REPLACE FUNCTION harvest._override_bucket(p_activity_name text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_policy jsonb;
BEGIN
    SELECT p.policy -> 'rate_limit' INTO v_policy FROM harvest.flow_policies AS p
    WHERE p.kind = 'activity' AND p.name = p_activity_name;
    IF v_policy ->> 'key' IS NOT NULL OR (v_policy IS NULL AND EXISTS (
        SELECT 1 FROM harvest.rate_limit_buckets AS b
        WHERE b.activity_name = p_activity_name AND b.dynamic)) THEN
        RAISE EXCEPTION 'activity % declares a per-key rate limit (key %): there is no single bucket '
            'to override', p_activity_name, coalesce(v_policy ->> 'key', '?')
            USING ERRCODE = 'HR007',
            HINT = 'pacing overrides apply to rate limits declared without a key';
    END IF;
    IF v_policy IS NULL AND NOT EXISTS (
        SELECT 1 FROM harvest.rate_limit_buckets AS b WHERE b.bucket_key = 'rate:' || p_activity_name) THEN
        RAISE EXCEPTION 'activity % declares no rate limit', p_activity_name USING ERRCODE = 'HR002',
            HINT = 'declare @activity(rate_limit=RateLimit(rps=...)) and start a worker for it';
    END IF;
    IF v_policy IS NOT NULL THEN
        INSERT INTO harvest.rate_limit_buckets (bucket_key, activity_name, rps, burst, tokens, refilled_at)
        VALUES ('rate:' || p_activity_name, p_activity_name, (v_policy ->> 'rps')::double precision,
                coalesce((v_policy ->> 'burst')::double precision, greatest((v_policy ->> 'rps')::double precision, 1)),
                coalesce((v_policy ->> 'burst')::double precision, greatest((v_policy ->> 'rps')::double precision, 1)),
                harvest.now())
        ON CONFLICT (bucket_key) DO NOTHING;
    END IF;
    RETURN 'rate:' || p_activity_name;
END;
$$;

-- A pacing override's burst, once its values are checked (HR001 before anything is written):
-- p_burst, or max(p_rps, 1) when none is given. The one rule of both overrides:
-- set_rate_limit_override and set_start_throttle_override (flow_throttle.sql) ask it first.
-- NaN and Infinity are refused (NaN compares above every number: an rps of NaN let every claim
-- through, and slotted no held task), and so is a ttl past 1e9 s (about 31 years), which the
-- expiry's timestamp could not hold (it failed as 22008, 'interval out of range').
CREATE OR REPLACE FUNCTION harvest._override_burst(
    p_rps double precision, p_burst double precision, p_ttl_secs double precision
)
RETURNS double precision
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_rps IS NULL OR p_rps <= 0 OR p_burst < 1 OR p_ttl_secs IS NULL OR p_ttl_secs <= 0 THEN
        RAISE EXCEPTION 'override needs rps > 0, burst >= 1 and a positive ttl, got rps=% burst=% ttl=%',
            harvest._num_text(p_rps), harvest._num_text(p_burst), harvest._num_text(p_ttl_secs)
            USING ERRCODE = 'HR001';
    END IF;
    IF p_rps >= 'Infinity' OR p_burst >= 'Infinity' OR p_ttl_secs > 1e9 THEN
        RAISE EXCEPTION 'override needs a finite rps and burst and a ttl of at most 1e9 seconds, got rps=% burst=% ttl=%',
            harvest._num_text(p_rps), harvest._num_text(p_burst), harvest._num_text(p_ttl_secs)
            USING ERRCODE = 'HR001', HINT = 'give numbers (not NaN or Infinity); an override is temporary';
    END IF;
    RETURN coalesce(p_burst, greatest(p_rps, 1));
END;
$$;

-- Seconds until the p_short-th token beyond the bucket's tokens is due, at p_rps, which holds
-- for p_secs_left seconds and then gives way to p_rps_after (a live override's TTL ending: NULL,
-- p_rps holds on). The one rule an override's re-pace (_repace_rate_bucket) spaces a line by, so
-- a lowered rate's line does not lag its own expiry.
CREATE OR REPLACE FUNCTION harvest._rate_wait_secs(
    p_short double precision, p_rps double precision, p_rps_after double precision, p_secs_left double precision
)
RETURNS double precision
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_rps_after IS NULL OR p_short <= p_rps * p_secs_left THEN p_short / p_rps
                ELSE p_secs_left + (p_short - p_rps * p_secs_left) / p_rps_after END;
$$;

-- Re-pace the tasks a rate limit holds back at the rate now in force (set_rate_limit_override
-- and clear_rate_limit_override call it, holding the bucket's row): each refused task waited
-- until its token was due at the rate of its refusal, and no claim looks at it before then, so
-- an override raising the rate sped up only the tasks refused after it (and a clear of one that
-- had lowered it, the same). Returns how many tasks moved.
--
-- Which tasks: those the refusal marked (rate_due_at = due_at, the partial index
-- tasks_rate_held, read in line order), due later than now. A retry's backoff, a cap's
-- step-back, a resume or a start write due_at alone, so their task is not in the index and never
-- moves; a timer has no rate key. Each is given the slot its place in the line gives at the new
-- rate (the k-th: (k - tokens) / rps from now, _rate_wait_secs): earlier when the rate went up,
-- later when it went down (so the tasks the old rate had scheduled wait for the new one instead
-- of being refused again when they come due). A place counts only the held tasks ahead, never a
-- task due already that the next claim serves first, so a slot is never later than the bucket
-- allows: at worst a task comes due early, and the claim refuses it and steps it back as before.
--
-- Bounded: it writes the first p_batch tasks of the line whose time changes (the ones due
-- soonest), locked with SKIP LOCKED (a task a cancel or a pause holds is passed and keeps its
-- time), so an override over 100,000 held tasks is one short transaction that reads the line's
-- index entries and writes 10,000 rows (p_batch). The tasks past the batch keep their old time: the claim
-- still paces them at the rate in force (never faster), they only start no sooner than that
-- time until the scanner's next pass moves the next 10,000 (_repace_rate_buckets). A full batch
-- leaves the bucket a budget (repace_left): the line's length less the batch when the override
-- (or its clear, which empty it first) called, less a batch a scanner pass after. So the passes
-- end after the line's length in batches: while claims lag the line (its tasks come due and are
-- not taken, the bucket's tokens pile up), the slots of the first batch move at each pass, and a
-- pass always found a full batch whose time changed, so a flag kept every scan pass rewriting
-- 10,000 tasks until the line drained.
CREATE OR REPLACE FUNCTION harvest._repace_rate_bucket(
    p_bucket_key text, p_now timestamptz, p_batch integer DEFAULT 10000
)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_tokens double precision;
    v_rps double precision;
    v_rps_after double precision;
    v_secs_left double precision;
    v_picked integer;
    v_moved integer;
    v_line integer;
    v_left integer;  -- the budget before this call: NULL when an override (or a clear) calls
BEGIN
    SELECT n.tokens, n.rps INTO v_tokens, v_rps FROM harvest._bucket_now(p_bucket_key, p_now) AS n;
    -- A live override ends at its expiry: the line past it is spaced at the declared rate.
    SELECT CASE WHEN b.override_expires_at > p_now THEN b.rps END,
           CASE WHEN b.override_expires_at > p_now
                THEN extract(EPOCH FROM b.override_expires_at - p_now)::double precision END,
           b.repace_left
    INTO v_rps_after, v_secs_left, v_left
    FROM harvest.rate_limit_buckets AS b
    WHERE b.bucket_key = p_bucket_key;
    IF NOT v_rps > 0 THEN
        RETURN 0;  -- no bucket yet (no claim made it): no task was refused
    END IF;
    -- The whole line is ranked (its index entries, in order); only the first p_batch tasks
    -- whose time changes are written, so a second call goes on where this one stopped (the
    -- slots the first wrote are still theirs: the tasks served since left the line and paid
    -- their tokens, which cancel out).
    WITH line AS MATERIALIZED (
        SELECT h.id, h.place, h.due_at AS old_due_at,
               p_now + make_interval(secs => greatest(
                   harvest._rate_wait_secs(h.place - v_tokens, v_rps, v_rps_after, v_secs_left), 0)) AS due_at
        FROM (
            SELECT x.id, x.due_at, row_number() OVER (ORDER BY x.due_at, x.id) AS place
            FROM harvest.tasks AS x
            WHERE x.rate_key = p_bucket_key AND x.status = 'pending' AND x.rate_due_at = x.due_at
              AND x.due_at > p_now
        ) AS h
    ),
    pick AS MATERIALIZED (
        SELECT l.id, l.due_at FROM line AS l
        WHERE abs(extract(EPOCH FROM l.due_at - l.old_due_at)) > 0.001
        ORDER BY l.place
        LIMIT p_batch
    ),
    locked AS MATERIALIZED (
        SELECT t.id FROM harvest.tasks AS t
        JOIN pick AS p ON p.id = t.id
        WHERE t.status = 'pending' AND t.rate_due_at = t.due_at
        FOR UPDATE OF t SKIP LOCKED
    ),
    moved AS (
        UPDATE harvest.tasks AS t
        SET due_at = p.due_at, rate_due_at = p.due_at
        FROM pick AS p
        JOIN locked AS k ON k.id = p.id
        WHERE t.id = p.id
        RETURNING t.id
    )
    SELECT (SELECT count(*) FROM pick), (SELECT count(*) FROM moved), (SELECT count(*) FROM line)
    INTO v_picked, v_moved, v_line;
    -- A full batch may leave more: the scanner goes on with the next (_repace_rate_buckets), for
    -- what is left of the line's length as the override found it, a batch a pass.
    v_left := CASE WHEN v_picked >= p_batch THEN coalesce(v_left, v_line) - p_batch END;
    v_left := CASE WHEN v_left > 0 THEN v_left END;
    UPDATE harvest.rate_limit_buckets AS b SET repace_left = v_left
    WHERE b.bucket_key = p_bucket_key AND b.repace_left IS DISTINCT FROM v_left;
    RETURN v_moved;
END;
$$;

-- The scanner's part of a re-pace: one bucket an override (or its clear) left a budget
-- (repace_left), the next batch of its held tasks (_repace_rate_bucket, which takes the batch off
-- the budget and drops it once a batch is not full or the budget is spent). One
-- bucket a pass, its row locked with SKIP LOCKED (a claim holding it is let be: the next pass
-- takes it), so a pass adds at most one batch's transaction time; returns how many tasks moved.
CREATE OR REPLACE FUNCTION harvest._repace_rate_buckets()
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_bucket text;
BEGIN
    SELECT b.bucket_key INTO v_bucket FROM harvest.rate_limit_buckets AS b
    WHERE b.repace_left IS NOT NULL
    ORDER BY b.bucket_key
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF v_bucket IS NULL THEN
        RETURN 0;
    END IF;
    RETURN harvest._repace_rate_bucket(v_bucket, harvest.now());
END;
$$;

-- Lay a temporary pacing override on an activity's rate limit; it reverts by
-- itself after p_ttl_secs (each claim compares override_expires_at with now).
-- p_operator_id: who, for the audit row (as set_start_throttle_override's).
CREATE OR REPLACE FUNCTION harvest.set_rate_limit_override(
    p_activity_name text, p_rps double precision, p_burst double precision DEFAULT NULL,
    p_ttl_secs double precision DEFAULT 3600, p_operator_id text DEFAULT NULL
)
RETURNS TABLE (
    activity_name text, rps double precision, burst double precision,
    override_rps double precision, override_burst double precision, override_expires_at timestamptz
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_burst double precision := harvest._override_burst(p_rps, p_burst, p_ttl_secs);
    v_bucket text := harvest._override_bucket(p_activity_name);
BEGIN
    UPDATE harvest.rate_limit_buckets AS b
    SET override_rps = p_rps, override_burst = v_burst,
        override_expires_at = harvest.now() + make_interval(secs => p_ttl_secs),
        repace_left = NULL  -- (the re-pace below starts the line again, with a fresh budget)
    WHERE b.bucket_key = v_bucket;
    -- The tasks already waiting take the new rate now, not when their old time comes.
    PERFORM harvest._repace_rate_bucket(v_bucket, harvest.now());
    -- Doubles go into JSON as numeric: a double's text follows the session's
    -- extra_float_digits (-15 wrote 1.25 as 1), numeric's does not.
    PERFORM harvest._audit('rate_limit.override', p_activity_name, p_operator_id, jsonb_build_object(
        'rps', p_rps::numeric, 'burst', v_burst::numeric,
        'ttl_secs', p_ttl_secs::numeric));
    RETURN QUERY SELECT * FROM harvest.get_rate_limit(p_activity_name);
END;
$$;

-- Drop an override now; answers whether one was live.
CREATE OR REPLACE FUNCTION harvest.clear_rate_limit_override(
    p_activity_name text, p_operator_id text DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_bucket text := harvest._override_bucket(p_activity_name);
    v_live boolean;
BEGIN
    SELECT b.override_expires_at > harvest.now() INTO v_live
    FROM harvest.rate_limit_buckets AS b WHERE b.bucket_key = v_bucket FOR UPDATE;
    UPDATE harvest.rate_limit_buckets AS b
    SET override_rps = NULL, override_burst = NULL, override_expires_at = NULL, repace_left = NULL
    WHERE b.bucket_key = v_bucket;
    PERFORM harvest._repace_rate_bucket(v_bucket, harvest.now());  -- back to the declared rate
    PERFORM harvest._audit('rate_limit.clear_override', p_activity_name, p_operator_id,
                           jsonb_build_object('was_live', coalesce(v_live, false)));
    RETURN coalesce(v_live, false);
END;
$$;

-- An activity's declared limit and its live override (an expired one reads NULL). The rate
-- is the workers' declaration (harvest.flow_policies), else the static bucket's: the bucket is
-- made by the first claim, so before it (a fresh deploy) and for a per-key limit (one bucket
-- per key, none of them this name's) the bucket alone read as no limit at all.
CREATE OR REPLACE FUNCTION harvest.get_rate_limit(p_activity_name text)
RETURNS TABLE (
    activity_name text, rps double precision, burst double precision,
    override_rps double precision, override_burst double precision, override_expires_at timestamptz
)
LANGUAGE sql STABLE
AS $$
    SELECT p_activity_name, coalesce(d.rps, b.rps), coalesce(d.burst, b.burst),
           CASE WHEN b.override_expires_at > harvest.now() THEN b.override_rps END,
           CASE WHEN b.override_expires_at > harvest.now() THEN b.override_burst END,
           CASE WHEN b.override_expires_at > harvest.now() THEN b.override_expires_at END
    FROM (
        SELECT (p.policy #>> '{rate_limit,rps}')::double precision AS rps,
               coalesce((p.policy #>> '{rate_limit,burst}')::double precision,
                        greatest((p.policy #>> '{rate_limit,rps}')::double precision, 1)) AS burst
        FROM harvest.flow_policies AS p
        WHERE p.kind = 'activity' AND p.name = p_activity_name AND p.policy #>> '{rate_limit,rps}' IS NOT NULL
    ) AS d
    FULL JOIN (
        SELECT r.rps, r.burst, r.override_rps, r.override_burst, r.override_expires_at
        FROM harvest.rate_limit_buckets AS r
        WHERE r.bucket_key = 'rate:' || p_activity_name
    ) AS b ON true;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.set_rate_limit_override IS
'Lay a temporary rate (rps, burst) over an activity''s declared limit, reverting by itself after p_ttl_secs; '
'audited (p_operator_id: who), returns the limit as get_rate_limit. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.clear_rate_limit_override IS
'Drop an activity''s rate-limit override now, audited (p_operator_id: who); returns whether one was live. For admins (role '
'harvest_admin).';
COMMENT ON FUNCTION harvest.get_rate_limit IS
'An activity''s declared rate limit and its live override (an expired one reads NULL). For operators (role '
'harvest_reader).';
