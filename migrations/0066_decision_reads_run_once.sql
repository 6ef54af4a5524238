-- 0066: a decision made ahead on an activity's result reads its run's row once
-- (docs/performance.md, "A decision ahead reads its run once"). harvest._apply_decision
-- takes what its caller read already (the run's row, the worker's queues, the payload
-- limit, a queue open to a hand-off), and harvest._may_decide_on_result takes the run's
-- row instead of the task's. The new signatures are installed with the functions, after
-- the migrations; the old ones go here.
DROP FUNCTION IF EXISTS harvest._apply_decision(uuid, bigint, jsonb, text, bigint, bigint, integer, text[], jsonb[], bigint);
DROP FUNCTION IF EXISTS harvest._may_decide_on_result(harvest.tasks, jsonb, bigint, text, text, text[]);
