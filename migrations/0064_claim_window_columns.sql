-- 0064: harvest._order_candidates no longer takes the head's ids: it reads the head itself,
-- with the ageing window and the fairness heads, each window carrying its rows' ordering
-- columns, instead of probing every candidate again by primary key (docs/performance.md,
-- "The claim's windows carry their columns"). The new signature is installed with the
-- functions, after the migrations; the old one goes here.
DROP FUNCTION IF EXISTS harvest._order_candidates(text[], bigint[], timestamptz, integer, integer);
