-- 0130: the CHECK of search_attribute_indexes.name calls harvest._search_attr_key_ok, the one
-- place of the search attribute key rule, instead of spelling the rule again. The function moves
-- to sql/executions.sql (a CHECK needs it before its table) and is defined here too, as it is
-- there, for a database the migrations build from nothing. IMMUTABLE, as a CHECK requires. The
-- constraint is added back VALID: ADD CONSTRAINT checks every existing row (the rule is the one
-- the old CHECK held them to, so none fails). Re-runnable (CONTRIBUTING.md).
CREATE OR REPLACE FUNCTION harvest._search_attr_key_ok(p_key text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_key IS NOT NULL AND p_key ~ '^[A-Za-z0-9_.\-]+$';
$$;

ALTER TABLE harvest.search_attribute_indexes
DROP CONSTRAINT IF EXISTS search_attribute_indexes_name_check,
ADD CONSTRAINT search_attribute_indexes_name_check CHECK (harvest._search_attr_key_ok(name));
