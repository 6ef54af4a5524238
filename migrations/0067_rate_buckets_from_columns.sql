-- 0067: the claim's gates read their candidates and claimed rows once.
-- harvest._lock_rate_buckets takes the rate-keyed candidates' columns, which
-- harvest._admit_candidates now reads once, instead of their ids, which it read again
-- by primary key in each of its three statements (docs/performance.md, "Fairness keys
-- visited"). The new signature is installed with the functions, after the migrations;
-- the old one goes here.
DROP FUNCTION IF EXISTS harvest._lock_rate_buckets(bigint[], timestamptz);
-- harvest._after_gated_claim and harvest._debit_rate_buckets take the claimed rows as the
-- lease returned them, not their ids, which each read again by primary key.
DROP FUNCTION IF EXISTS harvest._after_gated_claim(bigint[], timestamptz);
DROP FUNCTION IF EXISTS harvest._debit_rate_buckets(bigint[], timestamptz);
