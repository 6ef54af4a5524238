-- 0090: harvest.get_history takes a limit (p_limit, NULL: all), so the HTTP API reads a page
-- of a history, not the whole of it (GET /workflows/{id}/history, GET /workflows/{id}). The
-- old signature goes here, the new one is installed with the functions, after the
-- migrations; a call with two arguments reads as before.
DROP FUNCTION IF EXISTS harvest.get_history(uuid, bigint);
