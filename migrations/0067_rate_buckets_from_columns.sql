-- 0067: harvest._lock_rate_buckets takes the rate-keyed candidates' columns, which
-- harvest._admit_candidates now reads once, instead of their ids, which it read again
-- by primary key in each of its three statements (docs/performance.md, "Fairness keys
-- visited"). The new signature is installed with the functions, after the migrations;
-- the old one goes here.
DROP FUNCTION IF EXISTS harvest._lock_rate_buckets(bigint[], timestamptz);
