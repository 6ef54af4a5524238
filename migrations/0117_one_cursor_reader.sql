-- 0117: one reader of the engine's cursors. A batch by filter's cursor (_act_on_workflows) was
-- base64 JSON it decoded itself beside the workflow list's _decode_cursor; it is now the list's
-- "<created_at>|<id>" with the batch's "|<as_of>|<scope>", written by _encode_cursor and read by
-- _decode_cursor, whose arguments and columns grow for it (functions/executions.sql makes them
-- again). A batch cursor of the release before is refused (HR001): start the batch again.
DROP FUNCTION IF EXISTS harvest._encode_cursor(timestamptz, uuid);
DROP FUNCTION IF EXISTS harvest._decode_cursor(text);
