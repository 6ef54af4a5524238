-- 0057: a run's row rules move from four table CHECKs into one trigger
-- (docs/performance.md, "SQL path, eighth cut"). PostgreSQL reads each table CHECK back
-- from its stored text and compiles it on every UPDATE statement, whichever columns it
-- sets; a run's row is updated on every event append, which sets none of the columns the
-- CHECKs read. executions_checks (as sql/triggers.sql defines it) checks the same rules,
-- with the same domains, SQLSTATE and constraint names, on every INSERT and on every UPDATE
-- that sets status, parent_close_policy, search_attributes or migrated_to_shard. Existing
-- rows passed the CHECKs. Dropping a CHECK and creating a trigger scan nothing.
-- A run's row rules, for every writer: its status and parent close policy in their closed
-- lists, a forwarding pointer (migrated_to_shard) only on a MIGRATING or MIGRATED row with a
-- shard number in range, and search attributes that are a JSON object. They were table
-- CHECKs; PostgreSQL reads every table CHECK back from its stored text and compiles it on
-- every UPDATE statement whichever columns it sets, and a run's row is updated on every
-- event append, which sets none of these columns. This trigger fires on every INSERT and on
-- an UPDATE that sets one of them (docs/performance.md, "SQL path, eighth cut"). A value
-- outside a list fails its domain cast (SQLSTATE 23514, naming the constraint that held the
-- rule); the rules run in the order the CHECKs did (by name), each only after the ones
-- before it passed. A NULL passes here, as it passed the CHECKs: the columns' NOT NULL
-- refuses it after the BEFORE triggers (a row that breaks a NOT NULL and a rule here is
-- refused by this rule first). No other BEFORE trigger may change these columns.
CREATE FUNCTION harvest._executions_checks()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF ((NEW.migrated_to_shard::harvest.shard_number) IS NULL
        OR (NEW.status::harvest.migrated_status) IS NOT NULL)
       AND (NEW.parent_close_policy::harvest.parent_close_policy) IS NOT NULL
       AND jsonb_typeof(NEW.search_attributes) = 'object'
       AND (NEW.status::harvest.execution_status) IS NOT NULL THEN
        RETURN NEW;
    END IF;
    IF jsonb_typeof(NEW.search_attributes) <> 'object' THEN
        RAISE EXCEPTION 'new row for relation "executions" violates check constraint "executions_search_attributes_object"'
        USING ERRCODE = 'check_violation', CONSTRAINT = 'executions_search_attributes_object',
              SCHEMA = 'harvest', TABLE = 'executions',
              HINT = 'a run''s search_attributes must be a JSON object';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER executions_checks
BEFORE INSERT OR UPDATE OF status, parent_close_policy, search_attributes, migrated_to_shard
ON harvest.executions
FOR EACH ROW
EXECUTE FUNCTION harvest._executions_checks();

ALTER TABLE harvest.executions
DROP CONSTRAINT executions_migrated_to_shard_check,
DROP CONSTRAINT executions_parent_close_policy_check,
DROP CONSTRAINT executions_search_attributes_object,
DROP CONSTRAINT executions_status_check;
