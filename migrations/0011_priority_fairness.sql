-- 0011: priority ageing and fairness keys on the claim (functions/claim.sql,
-- docs/flow-control.md "Priority, ageing and fairness").

-- An activity task carries its ageing rate and its resolved fairness key as
-- columns, filled from its options at insert (trigger below), so the claim's
-- extra candidate windows read plain columns over small partial indexes.
ALTER TABLE harvest.tasks
ADD COLUMN priority_aging_secs double precision,
ADD COLUMN fairness_key text,
ADD CONSTRAINT tasks_priority_aging_secs_check CHECK (priority_aging_secs IS NULL OR priority_aging_secs > 0);

-- The ageing window: the oldest claimable tasks of a queue that age. Tasks
-- without priority_aging_secs are not in it, so a queue without ageing pays
-- one probe of an empty index.
CREATE INDEX tasks_claimable_aging
ON harvest.tasks (queue, due_at, id)
WHERE status = 'pending' AND kind <> 'timer' AND priority_aging_secs IS NOT NULL;

-- The fairness window: a skip-scan over the distinct keys of a queue, and the
-- head of each key by priority then due time. Tasks without a key are not in it.
CREATE INDEX tasks_claimable_fair
ON harvest.tasks (queue, fairness_key, priority DESC, due_at, id)
WHERE status = 'pending' AND kind <> 'timer' AND fairness_key IS NOT NULL;

-- The queues that hold (or held) fairness-keyed work, and where the fairness
-- skip-scan of each starts next when it holds more keys than one claim visits
-- (the claim advances cursor_key, never waiting). On such a queue an unkeyed
-- task gets the key '' (the unkeyed group), so the skip-scan finds it too.
CREATE TABLE harvest.fair_queues (
    queue text NOT NULL,
    cursor_key text,
    CONSTRAINT fair_queues_pkey PRIMARY KEY (queue)
);

-- Task rows take priority_aging_secs and fairness_key from their options at
-- insert (decide.sql and the dead-letter replay write options only); on a fair
-- queue an unkeyed task joins the unkeyed group ''.
CREATE FUNCTION harvest._tasks_claim_order_columns()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN harvest._claim_order_columns(NEW);
END;
$$;

CREATE TRIGGER tasks_claim_order_columns
BEFORE INSERT ON harvest.tasks
FOR EACH ROW
WHEN (new.kind <> 'timer')
EXECUTE FUNCTION harvest._tasks_claim_order_columns();
