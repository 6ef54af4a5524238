-- 0080: a client's start no longer takes the engine's own arguments. harvest.start_workflow
-- lost p_parent_id and p_flow_gates (an operator grafted a run onto another's history as its
-- child, jumped a start throttle, and with the worker role too passed for a continue-as-new
-- to terminate a live run); the engine's starts call harvest._start_workflow, which keeps
-- them (functions/start.sql). The new signature is installed with the functions, after the
-- migrations; the old one goes here.
DROP FUNCTION IF EXISTS harvest.start_workflow(
    text, jsonb, text, text, text, text, jsonb, integer, uuid, integer, double precision, double precision, boolean, text
);
