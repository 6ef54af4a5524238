-- 0072: the claim's gates read the columns the claim's windows read, not the candidates
-- again by primary key (docs/performance.md, "The gates read the windows' columns").
-- harvest.gated_candidate is what a window hands the gates of a candidate that carries a
-- gate (a concurrency or rate key): the columns harvest._admit_candidates and
-- harvest._lock_rate_buckets judge it by (options only for a rate-keyed one).
CREATE TYPE harvest.gated_candidate AS (
    id bigint,
    kind text,
    execution_id uuid,
    concurrency_key text,
    concurrency_limit integer,
    rate_key text,
    priority integer,
    due_at timestamptz,
    activity_name text,
    options jsonb
);
-- harvest._order_candidates and harvest._claim_head return the gated candidates' columns
-- as well, and harvest._claim_candidates and harvest._admit_candidates take them. The new
-- signatures are installed with the functions, after the migrations; the old ones go here.
DROP FUNCTION IF EXISTS harvest._order_candidates(text[], timestamptz, integer, integer);
DROP FUNCTION IF EXISTS harvest._claim_head(text[], timestamptz, integer);
DROP FUNCTION IF EXISTS harvest._claim_candidates(bigint[], boolean, text, integer, double precision, timestamptz);
DROP FUNCTION IF EXISTS harvest._admit_candidates(bigint[], timestamptz);
