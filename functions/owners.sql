-- Owner mode (docs/sharding.md "Owner mode"; tables in sql/owners.sql). Off by
-- default; an operator turns it on per database with set_owner_mode (admin).
--
-- The executions of a database fall into 512 decision partitions:
-- partition_of(workflow_id) = the first two bytes of sha256(workflow_id as UTF-8),
-- big-endian, mod 512 (harvest.core.ids.partition_of computes the same in Python).
-- With the switch on:
--
-- * claim_tasks acquires the partition of each workflow task it claims: a free row,
--   a row whose lease ran out, or a row whose owner no longer serves the task's queue
--   (not an active worker polling it) becomes the claimer's with the epoch moved on;
--   the claimer's own row is renewed, its epoch unchanged. A workflow task whose
--   partition another worker holds is left to that worker. The owner row is taken
--   with SKIP LOCKED: a claim never waits; a task whose partition it could not take
--   is put back as it was.
-- * every decision commit (complete_workflow_task(s), and a decision sent ahead with
--   an activity result in complete_activities) takes the partition's lock shared and
--   checks that its owner row names the committing worker at the epoch it was handed:
--   else the decision is refused (HR004 / outcome not_owner) and nothing of it is
--   written. An acquisition takes the same lock exclusive, without waiting (a claim
--   whose try fails puts the task back), so it never commits between a decision's
--   check and the decision's commit. The lock is a transaction advisory lock in the
--   two-key space (class 1331121746, 'OWNR'; the partition), disjoint from the
--   one-key space of the concurrency keys and mutexes: it writes nothing, where a
--   FOR SHARE row lock wrote the row (measured: about 0.1 ms a decision).
-- * the worker renews the leases of the partitions it holds runs of on its heartbeat
--   (heartbeat_partitions, SKIP LOCKED); stop_worker gives its rows up.
--
-- Foreign writers (activity results recorded alone, signals, timers, cancels,
-- terminations, relays) take no owner row and no partition lock. Commits only take
-- the partition lock shared; every exclusive lock (the advisory try-lock, the owner
-- row's FOR UPDATE SKIP LOCKED) is taken without waiting, so owner mode adds no
-- deadlock.

-- The decision partition (0..511) of a workflow id. (PL/pgSQL: one digest per call,
-- measured faster than the SQL forms, which hashed twice or went through hex text.)
CREATE OR REPLACE FUNCTION harvest.partition_of(p_workflow_id text)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    v_digest bytea := sha256(convert_to(p_workflow_id, 'UTF8'));
BEGIN
    RETURN (get_byte(v_digest, 0) * 256 + get_byte(v_digest, 1)) % 512;
END;
$$;

-- Whether owner mode is on: the one read a claim or a decision commit pays when it is off.
CREATE OR REPLACE FUNCTION harvest._owner_mode_on()
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT o.enabled FROM harvest.owner_mode AS o WHERE o.id;
$$;

CREATE OR REPLACE FUNCTION harvest.get_owner_mode()
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'enabled', o.enabled, 'lease_secs', o.lease_secs::numeric, 'updated_at', o.updated_at, 'partitions', 512,
        'owned', (SELECT count(*) FROM harvest.partition_owners AS p
                  WHERE p.worker_id IS NOT NULL AND p.lease_expires_at > harvest.now()))
    FROM harvest.owner_mode AS o WHERE o.id;
$$;

-- Turn owner mode on or off (and set the lease). Turning it on or off frees every
-- held owner row and moves its epoch on, so no epoch handed out before the change
-- is honoured after it (a free row names nobody, so it honours none already). The ACCESS EXCLUSIVE lock waits for every claim and commit
-- that already read the switch and holds back new ones until this commits. Audited.
CREATE OR REPLACE FUNCTION harvest.set_owner_mode(
    p_enabled boolean, p_lease_secs double precision DEFAULT NULL, p_operator_id text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_previous harvest.owner_mode;
BEGIN
    IF p_enabled IS NULL THEN
        RAISE EXCEPTION 'owner mode needs true (on) or false (off), got NULL' USING ERRCODE = 'HR001';
    END IF;
    IF p_lease_secs IS NOT NULL AND NOT p_lease_secs BETWEEN 0.1 AND 3600 THEN
        RAISE EXCEPTION 'owner lease % s is out of range: allowed 0.1 to 3600 seconds',
            harvest._num_text(p_lease_secs)
            USING ERRCODE = 'HR001';
    END IF;
    LOCK TABLE harvest.owner_mode IN ACCESS EXCLUSIVE MODE;
    SELECT * INTO v_previous FROM harvest.owner_mode AS o WHERE o.id;
    UPDATE harvest.owner_mode
    SET enabled = p_enabled, lease_secs = coalesce(p_lease_secs, lease_secs), updated_at = harvest.now()
    WHERE id;
    IF v_previous.enabled IS DISTINCT FROM p_enabled THEN
        UPDATE harvest.partition_owners
        SET worker_id = NULL, lease_expires_at = NULL, epoch = epoch + 1
        WHERE worker_id IS NOT NULL;
    END IF;
    PERFORM harvest._audit('owner_mode.set', CASE WHEN p_enabled THEN 'on' ELSE 'off' END, p_operator_id,
        jsonb_build_object('enabled', p_enabled, 'previous_enabled', v_previous.enabled,
                           'lease_secs', coalesce(p_lease_secs, v_previous.lease_secs)::numeric,
                           'previous_lease_secs', v_previous.lease_secs::numeric));
    RETURN harvest.get_owner_mode();
END;
$$;

CREATE OR REPLACE FUNCTION harvest.list_partition_owners(p_worker_id text DEFAULT NULL)
RETURNS TABLE (
    partition_id integer, worker_id text, epoch bigint, lease_expires_at timestamptz,
    acquired_at timestamptz, live boolean
)
LANGUAGE sql STABLE
AS $$
    SELECT p.partition_id, p.worker_id, p.epoch, p.lease_expires_at, p.acquired_at,
           coalesce(p.worker_id IS NOT NULL AND p.lease_expires_at > harvest.now(), false)
    FROM harvest.partition_owners AS p
    WHERE p_worker_id IS NULL OR p.worker_id = p_worker_id
    ORDER BY p.partition_id;
$$;

-- Whether p_worker_id still serves every queue of p_queues: an active worker that polls them.
CREATE OR REPLACE FUNCTION harvest._owner_serves(p_worker_id text, p_queues text[])
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT coalesce((SELECT w.status = 'active' AND p_queues <@ w.queues
                     FROM harvest.workers AS w WHERE w.id = p_worker_id), false);
$$;

-- The candidates of a claim (p_ids, in claim order) less the workflow tasks whose
-- partition another worker holds: a live lease, and it serves the task's queue.
CREATE OR REPLACE FUNCTION harvest._owner_candidates(p_ids bigint[], p_worker_id text, p_now timestamptz)
RETURNS bigint[]
LANGUAGE sql STABLE
AS $$
    -- (Probes per id, LATERAL ... OFFSET 0: a cached generic plan of a join may scan a table.)
    SELECT coalesce(array_agg(c.id ORDER BY c.ord), ARRAY[]::bigint[])
    FROM unnest(p_ids) WITH ORDINALITY AS c (id, ord)
    CROSS JOIN LATERAL (SELECT t.kind, t.queue, t.execution_id FROM harvest.tasks AS t WHERE t.id = c.id OFFSET 0) AS t
    WHERE t.kind <> 'workflow' OR NOT EXISTS (
        SELECT 1
        FROM harvest.executions AS e
        JOIN harvest.partition_owners AS o ON o.partition_id = harvest.partition_of(e.workflow_id)
        WHERE e.id = t.execution_id AND o.worker_id <> p_worker_id AND o.lease_expires_at > p_now
          AND harvest._owner_serves(o.worker_id, ARRAY[t.queue])
    );
$$;

-- Acquire (or renew) the partitions of the workflow tasks among p_ids, which this
-- claim has just leased to p_worker_id, in partition order and without waiting
-- (SKIP LOCKED). A task whose partition it could not take (locked, or taken by a
-- live owner since the candidates were read) is put back as the claim found it.
-- Returns the ids the claim keeps.
CREATE OR REPLACE FUNCTION harvest._acquire_partitions(p_ids bigint[], p_worker_id text, p_now timestamptz)
RETURNS bigint[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_lease_secs double precision := (SELECT o.lease_secs FROM harvest.owner_mode AS o WHERE o.id);
    v_part record;
    v_owner harvest.partition_owners;
    v_put_back bigint[];
BEGIN
    FOR v_part IN
        SELECT harvest.partition_of(e.workflow_id) AS partition_id, array_agg(DISTINCT t.queue) AS queues,
               array_agg(t.id) AS ids
        FROM unnest(p_ids) AS k (id)
        CROSS JOIN LATERAL (SELECT x.* FROM harvest.tasks AS x WHERE x.id = k.id OFFSET 0) AS t
        CROSS JOIN LATERAL (
            SELECT x.workflow_id FROM harvest.executions AS x WHERE x.id = t.execution_id OFFSET 0
        ) AS e
        WHERE t.kind = 'workflow'
        GROUP BY 1
        ORDER BY 1
    LOOP
        SELECT * INTO v_owner FROM harvest.partition_owners AS o
        WHERE o.partition_id = v_part.partition_id
        FOR UPDATE SKIP LOCKED;
        IF v_owner.partition_id IS NULL THEN  -- locked by another claim or a renewal
            v_put_back := coalesce(v_put_back, ARRAY[]::bigint[]) || v_part.ids;
        ELSIF v_owner.worker_id = p_worker_id THEN  -- a renewal: the epoch stays
            UPDATE harvest.partition_owners
            SET lease_expires_at = p_now + make_interval(secs => v_lease_secs)
            WHERE partition_id = v_part.partition_id;
        ELSIF (v_owner.worker_id IS NULL OR v_owner.lease_expires_at <= p_now
               OR NOT harvest._owner_serves(v_owner.worker_id, v_part.queues))
              -- No decision of the partition may be between its check and its commit.
              AND pg_try_advisory_xact_lock(1331121746, v_part.partition_id) THEN
            UPDATE harvest.partition_owners
            SET worker_id = p_worker_id, epoch = epoch + 1, acquired_at = p_now,
                lease_expires_at = p_now + make_interval(secs => v_lease_secs)
            WHERE partition_id = v_part.partition_id;
        ELSE
            v_put_back := coalesce(v_put_back, ARRAY[]::bigint[]) || v_part.ids;
        END IF;
    END LOOP;
    IF v_put_back IS NULL THEN
        RETURN p_ids;
    END IF;
    UPDATE harvest.tasks AS t
    SET status = 'pending', attempt = greatest(t.attempt - 1, 0), started_at = NULL, lease_owner = NULL,
        lease_expires_at = NULL
    WHERE t.id = ANY(v_put_back);
    RETURN ARRAY(SELECT u.id FROM unnest(p_ids) WITH ORDINALITY AS u (id, ord)
                 WHERE NOT u.id = ANY(v_put_back) ORDER BY u.ord);
END;
$$;

-- The epoch of the partition of p_workflow_id when p_worker_id holds it, else NULL
-- (no lock: what a claimed or handed workflow task carries).
CREATE OR REPLACE FUNCTION harvest._owner_epoch(p_workflow_id text, p_worker_id text)
RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT o.epoch FROM harvest.partition_owners AS o
    WHERE o.partition_id = harvest.partition_of(p_workflow_id) AND o.worker_id = p_worker_id;
$$;

-- The epoch check of a decision commit: take the partition's lock shared (an
-- acquisition cannot commit until this commit has; this one waits for an
-- acquisition in flight and then reads it) and return NULL when the owner row
-- names p_worker_id at p_epoch, else why the decision is refused. The execution is
-- locked by the caller.
CREATE OR REPLACE FUNCTION harvest._check_owner(p_execution_id uuid, p_worker_id text, p_epoch bigint)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_partition integer;
    v_owner harvest.partition_owners;
BEGIN
    SELECT harvest.partition_of(e.workflow_id) INTO v_partition FROM harvest.executions AS e
    WHERE e.id = p_execution_id;
    PERFORM pg_advisory_xact_lock_shared(1331121746, v_partition);
    SELECT * INTO v_owner FROM harvest.partition_owners AS o WHERE o.partition_id = v_partition;
    IF v_owner.worker_id IS NOT DISTINCT FROM p_worker_id AND v_owner.epoch IS NOT DISTINCT FROM p_epoch
       AND p_worker_id IS NOT NULL THEN
        RETURN NULL;
    END IF;
    RETURN format('the decision for %s was made by %s at owner epoch %s, but decision partition %s is held by %s '
                  'at epoch %s: a stale owner cannot commit, so nothing of it was written',
                  p_execution_id, coalesce(p_worker_id, 'an unnamed caller'), coalesce(p_epoch::text, 'none'),
                  v_owner.partition_id, coalesce(v_owner.worker_id, 'nobody'), v_owner.epoch);
END;
$$;

-- Renew the leases of the partitions among p_partitions that p_worker_id holds
-- (rows locked elsewhere are left for the next call: this never waits), and return
-- every one of them it still holds, with its epoch. Nothing when owner mode is off.
CREATE OR REPLACE FUNCTION harvest.heartbeat_partitions(p_worker_id text, p_partitions integer[])
RETURNS TABLE (partition_id integer, epoch bigint, lease_expires_at timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := harvest.now();
    v_lease_secs double precision;
BEGIN
    SELECT o.lease_secs INTO v_lease_secs FROM harvest.owner_mode AS o WHERE o.id AND o.enabled;
    IF NOT FOUND OR p_worker_id IS NULL THEN
        RETURN;
    END IF;
    UPDATE harvest.partition_owners AS p
    SET lease_expires_at = v_now + make_interval(secs => v_lease_secs)
    WHERE p.partition_id IN (
        SELECT l.partition_id FROM harvest.partition_owners AS l
        WHERE l.partition_id = ANY(p_partitions) AND l.worker_id = p_worker_id
        ORDER BY l.partition_id
        FOR UPDATE SKIP LOCKED
    );
    RETURN QUERY
    SELECT p.partition_id, p.epoch, p.lease_expires_at FROM harvest.partition_owners AS p
    WHERE p.partition_id = ANY(p_partitions) AND p.worker_id = p_worker_id
    ORDER BY p.partition_id;
END;
$$;

-- A stopping worker gives its owner rows up (rows locked elsewhere keep their lease
-- until it runs out); the next acquisition moves each epoch on.
CREATE OR REPLACE FUNCTION harvest._release_partitions(p_worker_id text)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_count integer;
BEGIN
    UPDATE harvest.partition_owners AS p
    SET worker_id = NULL, lease_expires_at = NULL
    WHERE p.partition_id IN (
        SELECT l.partition_id FROM harvest.partition_owners AS l
        WHERE l.worker_id = p_worker_id
        ORDER BY l.partition_id
        FOR UPDATE SKIP LOCKED
    );
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.partition_of IS
'The decision partition (0..511) of a workflow id: the first two bytes of sha256 of its UTF-8 text, big-endian, '
'mod 512 (harvest.core.ids.partition_of is the same in Python). Roles harvest_reader, harvest_worker.';
COMMENT ON FUNCTION harvest.get_owner_mode IS
'Whether owner mode is on in this database, its lease and how many partitions have a live owner: '
'{enabled, lease_secs, updated_at, partitions, owned}. Roles harvest_reader, harvest_worker.';
COMMENT ON FUNCTION harvest.set_owner_mode IS
'Turn owner mode on or off in this database (and set the owner lease, 0.1..3600 s): only the owner of a decision '
'partition commits decisions for its runs. A change of the switch frees every owner row and moves its epoch on. '
'Audited (owner_mode.set). For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.list_partition_owners IS
'The 512 decision partitions'' owner rows (or those of p_worker_id): worker, epoch, lease end, whether the lease '
'is live. Role harvest_reader.';
COMMENT ON FUNCTION harvest.heartbeat_partitions IS
'Renew the owner leases of p_partitions that p_worker_id holds (never waits for a locked row) and return those '
'it still holds with their epochs; nothing when owner mode is off. Called by the Python worker on its heartbeat '
'(role harvest_worker).';
