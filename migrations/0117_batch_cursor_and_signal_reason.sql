-- 0117 (1 of 2): one reader of the engine's cursors. A batch by filter's cursor (_act_on_workflows) was
-- base64 JSON it decoded itself beside the workflow list's _decode_cursor; it is now the list's
-- "<created_at>|<id>" with the batch's "|<as_of>|<scope>", written by _encode_cursor and read by
-- _decode_cursor, whose arguments and columns grow for it (functions/executions.sql makes them
-- again). A batch cursor made before it is refused (HR001): start the batch again (its batch id kept).
DROP FUNCTION IF EXISTS harvest._encode_cursor(timestamptz, uuid);
DROP FUNCTION IF EXISTS harvest._decode_cursor(text);
-- 0117 (2 of 2): signal_workflows takes p_reason (last, so a call by position is unchanged), which its audit row
-- keeps as cancel_workflows' and terminate_workflows' do: the dashboard's signal by filter asks for one.
DROP FUNCTION IF EXISTS harvest.signal_workflows(
    text, jsonb, text, text, text[], timestamptz, timestamptz, text, text, integer, boolean, text, text, uuid[]
);
