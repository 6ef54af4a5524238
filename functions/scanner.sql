-- The scanner: the pass every worker runs on a timer (worker/scanner.py), one
-- round trip over the bounded sweeps of the domains it serves: timeouts
-- (expire_tasks, expire_lost_workers, expire_workflows), relays (deliver_relays), flow control
-- (grant_mutexes), gated starts (release_pending_starts) and the held tasks of a rate limit
-- an override re-paces past its first batch (_repace_rate_buckets). Each sweep lives in
-- its own domain's file; this file only runs them together.

-- One scanner pass in one round trip: what every worker runs each scan_interval.
-- Each step is bounded by p_limit and skips rows locked elsewhere; the answer says
-- what moved so the worker knows whether to claim at once. p_scanned_secs: how long the
-- caller's scans have answered without a break (NULL: no bound): expire_lost_workers leaves the
-- workers whose lost_after is longer (at the caller's start, and after an outage of the
-- database, when every worker's heartbeats stopped with its own scans: the first passes back
-- must not take the work of a fleet that is only reconnecting; worker.py _scan).
CREATE OR REPLACE FUNCTION harvest.scan(p_limit integer DEFAULT 100, p_scanned_secs double precision DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_expired jsonb;
BEGIN
    PERFORM harvest._check_limit('scan', p_limit, 10000);
    SELECT coalesce(jsonb_agg(to_jsonb(x)), '[]'::jsonb) INTO v_expired FROM (
        SELECT * FROM harvest.expire_tasks(p_limit)
        UNION ALL
        SELECT * FROM harvest.expire_lost_workers(p_limit, p_scanned_secs)
    ) AS x;
    RETURN jsonb_build_object(
        'expired_tasks', v_expired,
        'timed_out_workflows', harvest.expire_workflows(p_limit),
        'relays_delivered', harvest.deliver_relays(p_limit),
        'mutex_grants', harvest.grant_mutexes(p_limit),
        'starts_released', harvest.release_pending_starts(p_limit),
        'tasks_repaced', harvest._repace_rate_buckets());
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.scan IS
'One scanner pass in one round trip (expire_tasks, expire_lost_workers, expire_workflows, deliver_relays, grant_mutexes, '
'release_pending_starts, a rate limit''s held tasks re-paced), each bounded; the answer says what moved. p_scanned_secs '
'(how long the caller''s scans have answered without a break) bounds the lost_after of the workers expire_lost_workers '
'takes. Called by every worker each '
'scan_interval (role harvest_worker).';
