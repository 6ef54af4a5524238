-- 0058: three of a task's four row rules move from table CHECKs into its triggers
-- (docs/performance.md, "Task rows"). PostgreSQL reads each table CHECK back from its
-- stored text and compiles it on every INSERT or UPDATE statement, and a trigger's WHEN
-- clause on every INSERT; a task insert is one statement in most paths. The kind, the
-- concurrency limit and the ageing bound are checked by tasks_derived_columns (now for
-- every row, a timer's too: its WHEN goes) on insert and by tasks_checks on an UPDATE of
-- their columns, with the same SQLSTATE and constraint names; tasks_status_check stays a
-- CHECK (a claim sets the status of every row it takes). Existing rows passed the CHECKs.
-- Dropping a CHECK and creating a trigger scan nothing: the DROP TRIGGER and the ALTER
-- TABLE take harvest.tasks' ACCESS EXCLUSIVE lock, which waits for the transactions using
-- the table and is held to the migration's commit, a moment on any size of queue.
CREATE OR REPLACE FUNCTION harvest._tasks_derived_columns()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW.kind <> 'timer' THEN
        IF NEW.kind = 'activity' AND NEW.options ?| ARRAY['concurrency_key', 'rate_limit'] THEN
            NEW := harvest._flow_task_columns(NEW);
        END IF;
        IF NEW.kind = 'activity' AND NEW.options ?| ARRAY['fairness_key', 'priority_aging_secs'] THEN
            IF NEW.options ->> 'priority_aging_secs' IS NOT NULL THEN
                NEW.priority_aging_secs := (NEW.options ->> 'priority_aging_secs')::double precision;
            END IF;
            IF NEW.options ->> 'fairness_key' IS NOT NULL THEN
                NEW.fairness_key := harvest._resolve_key(NEW.input, NEW.options ->> 'fairness_key');
            END IF;
        END IF;
        IF NEW.fairness_key IS NOT NULL THEN
            IF NOT EXISTS (SELECT 1 FROM harvest.fair_queues AS f WHERE f.queue = NEW.queue) THEN
                INSERT INTO harvest.fair_queues (queue) VALUES (NEW.queue) ON CONFLICT (queue) DO NOTHING;
            END IF;
        ELSIF EXISTS (SELECT 1 FROM harvest.fair_queues AS f WHERE f.queue = NEW.queue) THEN
            NEW.fairness_key := '';
        END IF;
    END IF;
    IF (NEW.concurrency_limit IS NULL OR NEW.concurrency_limit >= 1)
       AND (NEW.kind::harvest.task_kind) IS NOT NULL
       AND (NEW.priority_aging_secs IS NULL OR NEW.priority_aging_secs > 0) THEN
        RETURN NEW;
    END IF;
    PERFORM harvest._task_rules(NEW.kind, NEW.concurrency_limit, NEW.priority_aging_secs);
    RETURN NEW;
END;
$$;

DROP TRIGGER tasks_derived_columns ON harvest.tasks;

CREATE TRIGGER tasks_derived_columns
BEFORE INSERT ON harvest.tasks
FOR EACH ROW
EXECUTE FUNCTION harvest._tasks_derived_columns();

-- The rules tasks_derived_columns checks, raising the first one broken in the order the
-- CHECKs ran (by name): tasks_concurrency_limit_check, tasks_kind_check,
-- tasks_priority_aging_secs_check, with the message PostgreSQL gave. A NULL passes, as
-- it passed the CHECKs (kind's NOT NULL refuses it after the BEFORE triggers).
CREATE FUNCTION harvest._task_rules(p_kind text, p_concurrency_limit integer, p_priority_aging_secs double precision)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT p_concurrency_limit >= 1 THEN
        RAISE EXCEPTION 'new row for relation "tasks" violates check constraint "tasks_concurrency_limit_check"'
        USING ERRCODE = 'check_violation', CONSTRAINT = 'tasks_concurrency_limit_check',
              SCHEMA = 'harvest', TABLE = 'tasks',
              HINT = 'a task''s concurrency_limit is at least 1';
    END IF;
    PERFORM p_kind::harvest.task_kind;
    IF NOT p_priority_aging_secs > 0 THEN
        RAISE EXCEPTION 'new row for relation "tasks" violates check constraint "tasks_priority_aging_secs_check"'
        USING ERRCODE = 'check_violation', CONSTRAINT = 'tasks_priority_aging_secs_check',
              SCHEMA = 'harvest', TABLE = 'tasks',
              HINT = 'a task''s priority_aging_secs is above 0';
    END IF;
END;
$$;

-- The same rules on an UPDATE that sets one of their columns, which no function of
-- Harvest's does (a claim sets the status, whose CHECK stays). An AFTER trigger: a BEFORE
-- UPDATE row trigger makes PostgreSQL lock each updated row before the update, whichever
-- columns the statement sets; an AFTER trigger with a column list is skipped by a bitmap
-- test. A refusal fails the statement as the CHECK's did.
CREATE FUNCTION harvest._tasks_checks()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._task_rules(NEW.kind, NEW.concurrency_limit, NEW.priority_aging_secs);
    RETURN NULL;
END;
$$;

CREATE TRIGGER tasks_checks
AFTER UPDATE OF kind, concurrency_limit, priority_aging_secs ON harvest.tasks
FOR EACH ROW
EXECUTE FUNCTION harvest._tasks_checks();

ALTER TABLE harvest.tasks
DROP CONSTRAINT tasks_concurrency_limit_check,
DROP CONSTRAINT tasks_kind_check,
DROP CONSTRAINT tasks_priority_aging_secs_check;
