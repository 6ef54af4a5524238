-- 0081: a continue-as-new successor is not refused by its key's quota. The engine's start,
-- harvest._start_workflow, takes p_continues (the same run going on: its quota key resolved,
-- not checked again); the new signature is installed with the functions, after the
-- migrations, and the one without it goes here.
DROP FUNCTION IF EXISTS harvest._start_workflow(
    text, jsonb, text, text, text, text, jsonb, integer, uuid, integer, double precision, double precision, boolean, text
);
