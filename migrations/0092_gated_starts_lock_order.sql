-- 0092: a gated start (a workflow with a start throttle, debounce or batch) of a batch of starts
-- or of a terminate_other slot is admitted at its gate before the caller's id-ordered lock pass,
-- and a start that fills a batch hands its run back to start after that pass: harvest._start_gate
-- and harvest._start_defer return the filled batch's pending row instead of its started run, and
-- harvest._start_firing takes the admission. The old signatures go here, the new ones are
-- installed with the functions, after the migrations.
DROP FUNCTION IF EXISTS harvest._start_gate(
    text, jsonb, jsonb, text, text, text, jsonb, integer, double precision, double precision, text
);
DROP FUNCTION IF EXISTS harvest._start_defer(
    text, jsonb, jsonb, text, text, text, text, jsonb, integer, double precision, double precision, text
);
DROP FUNCTION IF EXISTS harvest._start_firing(harvest.schedules, bigint);
