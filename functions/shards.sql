-- Shard identity: which shard this database is (harvest.shard_identity, one row).
-- start_workflow mints ids for this shard and refuses one addressed to another
-- (HR011, start.sql _start_check_shard); a pool checks at boot that the database
-- it reaches is the shard it was configured for (harvest.shard.pools).

-- This database's shard number (0 until set_shard_id says otherwise).
CREATE OR REPLACE FUNCTION harvest.get_shard_id()
RETURNS integer
LANGUAGE sql STABLE
AS $$
    SELECT s.shard_id FROM harvest.shard_identity AS s WHERE s.id;
$$;

-- Make this database shard p_shard_id. Refused (HR011) while it holds an execution
-- whose id was minted for another shard: those ids would route elsewhere. The
-- ACCESS EXCLUSIVE lock waits for every start that already read the identity to
-- commit, and holds back new ones until this commits, so no start can mint an id
-- of the old shard after the check. Audited when the number changes; setting the
-- number the database already has changes nothing (idempotent).
CREATE OR REPLACE FUNCTION harvest.set_shard_id(p_shard_id integer, p_operator_id text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_previous integer;
    v_foreign uuid;
BEGIN
    IF p_shard_id IS NULL OR p_shard_id < 0 OR p_shard_id > 65535 THEN
        RAISE EXCEPTION 'shard % is out of range: a shard number is 0..65535', coalesce(p_shard_id::text, 'NULL')
            USING ERRCODE = 'HR001';
    END IF;
    LOCK TABLE harvest.shard_identity IN ACCESS EXCLUSIVE MODE;
    SELECT s.shard_id INTO v_previous FROM harvest.shard_identity AS s WHERE s.id;
    IF v_previous = p_shard_id THEN
        RETURN jsonb_build_object('shard_id', p_shard_id, 'previous_shard_id', v_previous, 'changed', false);
    END IF;
    -- The ids of one shard are one range of uuids (its two leading bytes): anything
    -- outside it, found by two probes of the primary key, was minted for another.
    SELECT e.id INTO v_foreign FROM harvest.executions AS e
    WHERE e.id < harvest._shard_low_id(p_shard_id) OR e.id > harvest._shard_high_id(p_shard_id)
    LIMIT 1;
    IF v_foreign IS NOT NULL THEN
        RAISE EXCEPTION 'this database is shard % and holds executions of shard % (e.g. %); it cannot become shard %',
            v_previous, harvest.shard_of(v_foreign), v_foreign, p_shard_id
            USING ERRCODE = 'HR011',
            DETAIL = jsonb_build_object('shard_id', v_previous, 'requested_shard_id', p_shard_id,
                                        'execution_shard_id', harvest.shard_of(v_foreign))::text,
            HINT = 'give a new shard an empty database, or keep this one''s number';
    END IF;
    UPDATE harvest.shard_identity SET shard_id = p_shard_id, updated_at = harvest.now() WHERE id;
    PERFORM harvest._audit('shard.set_id', p_shard_id::text, p_operator_id,
                           jsonb_build_object('shard_id', p_shard_id, 'previous_shard_id', v_previous));
    RETURN jsonb_build_object('shard_id', p_shard_id, 'previous_shard_id', v_previous, 'changed', true);
END;
$$;

-- The lowest and highest execution id a shard can mint (its two leading bytes, then
-- all zeros or all ones).
CREATE OR REPLACE FUNCTION harvest._shard_low_id(p_shard integer)
RETURNS uuid
LANGUAGE sql IMMUTABLE
AS $$
    SELECT (lpad(to_hex(p_shard), 4, '0') || '0000-0000-0000-0000-000000000000')::uuid;
$$;

CREATE OR REPLACE FUNCTION harvest._shard_high_id(p_shard integer)
RETURNS uuid
LANGUAGE sql IMMUTABLE
AS $$
    SELECT (lpad(to_hex(p_shard), 4, '0') || 'ffff-ffff-ffff-ffff-ffffffffffff')::uuid;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.get_shard_id IS
'This database''s shard number (0..65535; 0 until set_shard_id). Read at boot by clients and workers to check '
'that a pool reaches the shard it was configured for. Roles harvest_reader, harvest_worker.';
COMMENT ON FUNCTION harvest.set_shard_id IS
'Make this database shard p_shard_id (harvest migrate run --shard-id N); HR011 while it holds executions minted '
'for another shard, HR001 out of 0..65535; idempotent, audited when the number changes. Returns {shard_id, '
'previous_shard_id, changed}. For admins (role harvest_admin).';
