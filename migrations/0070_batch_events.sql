-- 0070 (prototype): a result batch's events in one statement.
DROP FUNCTION IF EXISTS harvest._append_events(uuid, text[], jsonb[], text, bigint, boolean, boolean);
DROP FUNCTION IF EXISTS harvest._append_closing_events(uuid, text[], jsonb[], text, bigint, text, jsonb, jsonb);
DROP FUNCTION IF EXISTS harvest._apply_decision(uuid, bigint, jsonb, text, bigint, bigint, integer, text[], jsonb[], bigint, harvest.executions, text[], integer, text);
