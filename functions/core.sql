-- Core helpers shared by every other functions/ file: the clock, ids, the event
-- append, workflow wake-ups and notifications.
--
-- Lock order, everywhere: start locks of business keys (start.sql) before any
-- execution row, an execution row before its task rows (docs/internals.md, "Lock
-- order"). A function that starts from a task id reads the task's execution id
-- without a lock, locks the execution, then locks and re-checks the task. claim_tasks locks only task
-- rows (SKIP LOCKED) and never waits, so it cannot join a deadlock.

-- The engine's clock. Tests set `harvest.fake_now` to move time without sleeping,
-- but any session can set a custom setting, and every SECURITY DEFINER entry point
-- reads this clock: so fake_now is honoured only while the owner-only switch
-- harvest.engine_settings.test_clock_allowed is on (docs/security.md, "The
-- clock"). The common path (no fake_now) reads no table: this is on every hot path.
-- fake_now = 'shared' reads the shared test clock: now() plus the owner-only
-- engine_settings.test_clock_offset, so one UPDATE by the owner moves every session
-- of the database that opted in (the test kit's time skipping, docs/testing.md).
CREATE OR REPLACE FUNCTION harvest.now()
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_fake text := current_setting('harvest.fake_now', true);
    v_allowed boolean;
    v_offset interval;
BEGIN
    IF v_fake IS NULL OR v_fake = '' THEN
        RETURN statement_timestamp();
    END IF;
    -- Read inline, not through a _helper: a reader or worker calls now() directly,
    -- and may read engine_settings (_secure_functions) but execute no helper.
    SELECT s.test_clock_allowed, s.test_clock_offset INTO v_allowed, v_offset
    FROM harvest.engine_settings AS s WHERE s.id;
    IF NOT coalesce(v_allowed, false) THEN
        RETURN statement_timestamp();
    END IF;
    IF v_fake = 'shared' THEN
        -- (Days and months of the offset count in UTC: in the session's zone a day across a
        -- daylight-saving change is 23 or 25 hours, and sessions in two zones read two clocks.)
        RETURN (statement_timestamp() AT TIME ZONE 'UTC' + v_offset) AT TIME ZONE 'UTC';
    END IF;
    RETURN v_fake::timestamptz;
END;
$$;

-- The latest applied core migration; Python refuses a schema it does not match.
CREATE OR REPLACE FUNCTION harvest.schema_version()
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT max(version) FROM harvest.schema_migrations WHERE set_name = 'harvest';
$$;

-- The core migration these functions were written for: harvest.db.SCHEMA_VERSION, bumped with
-- it (tests/unit/test_schema_version.py). schema_version() answers the newest migration as
-- soon as it commits, before `harvest migrate run` applies the function files after it; until
-- it has, this answers the older release's version (or does not exist), and the client and
-- the worker refuse the database as one whose migration did not finish.
CREATE OR REPLACE FUNCTION harvest.functions_version()
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT '0141'::text;
$$;

-- The Harvest releases (package versions) that applied the database's function files, in text
-- order (harvest.function_files; rows from before migration 0085 recorded none and are left
-- out). A worker and a client compare them with their own release at boot and warn once when
-- they differ: a rollout half done, or functions a rollback put back (harvest.db.migrate).
CREATE OR REPLACE FUNCTION harvest.get_function_releases()
RETURNS text[]
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(array_agg(DISTINCT f.package_version ORDER BY f.package_version), '{}'::text [])
    FROM harvest.function_files AS f
    WHERE f.package_version IS NOT NULL;
$$;

-- What the function files applied to this database are, for a process to compare with the
-- release it runs (harvest.db.migrate.read_function_drift): the function ledger (each file's
-- checksum and the release that applied it, as `harvest migrate run` recorded them) and a
-- digest of the live bodies (pg_proc.prosrc) of the functions p_names names (those the
-- release's files define), so that a function replaced after the run (by hand, or from another
-- release's file) reads as changed although the ledger still says the file is applied. The
-- digest is sha-256 of "name:digest" per name in name order, a name's digest being sha-256 of
-- its bodies' sha-256s in order (an overload each; "" when none); when it is not p_expected,
-- each name's digest too, for the caller to name the functions that differ. One read of the
-- ledger and of the catalog's rows of the harvest schema: cheap enough for a polled health check.
CREATE OR REPLACE FUNCTION harvest.get_function_state(p_names text[], p_expected text DEFAULT NULL)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    WITH per_name AS (
        SELECT
            n.name,
            encode(sha256(convert_to(coalesce(string_agg(
                encode(sha256(convert_to(p.prosrc, 'UTF8')), 'hex'), ','
                ORDER BY encode(sha256(convert_to(p.prosrc, 'UTF8')), 'hex') COLLATE "C"
            ), ''), 'UTF8')), 'hex') AS digest
        FROM unnest(p_names) AS n (name)
        LEFT JOIN pg_catalog.pg_proc AS p
            ON p.proname = n.name::name AND p.pronamespace = 'harvest'::regnamespace
        GROUP BY n.name
    ),

    whole AS (
        SELECT encode(sha256(convert_to(coalesce(
            string_agg(pn.name || ':' || pn.digest, ',' ORDER BY pn.name COLLATE "C"), ''
        ), 'UTF8')), 'hex') AS digest
        FROM per_name AS pn
    )

    SELECT jsonb_build_object(
        'files', (
            SELECT coalesce(jsonb_object_agg(
                f.file_name, jsonb_build_object('checksum', f.checksum, 'release', f.package_version)
            ), '{}'::jsonb)
            FROM harvest.function_files AS f
        ),
        'definitions', w.digest,
        'functions', CASE WHEN w.digest IS DISTINCT FROM p_expected THEN (
            SELECT coalesce(jsonb_object_agg(pn.name, pn.digest), '{}'::jsonb) FROM per_name AS pn
        ) END
    )
    FROM whole AS w;
$$;

-- A UUID whose first two bytes carry the shard number, so any id routes to its shard
-- with no directory; then the clock in milliseconds (44 bits, around the version nibble,
-- which stays 4), then the last eight bytes of a random UUID (62 random bits and its
-- variant). Ids of one shard minted later sort after earlier ones (a clock that steps back
-- excepted), so a new run's entries go in at the right-hand end of the primary key and of
-- the indexes that lead with the run's id (events, tasks), beside the entries of the runs
-- started with it, not on a random page of each (docs/performance.md, "SQL path, tenth
-- cut"). A SQL expression that inlines into its caller (a batch's start mints one per run:
-- a PL/pgSQL call each was about 3 us; "SQL path, ninth cut"); a shard out of range goes
-- to _shard_out_of_range, which raises.
CREATE OR REPLACE FUNCTION harvest._new_execution_id(p_shard integer DEFAULT 0)
RETURNS uuid
LANGUAGE sql VOLATILE
AS $$
    SELECT CASE WHEN p_shard BETWEEN 0 AND 65535
        THEN encode(substring(int4send(p_shard) FROM 3 FOR 2)
                    || substring(int8send(harvest._id_clock_bits(
                           floor(date_part('epoch', transaction_timestamp()) * 1000)::bigint)) FROM 3 FOR 6)
                    || substring(uuid_send(gen_random_uuid()) FROM 9 FOR 8), 'hex')::uuid
        ELSE harvest._shard_out_of_range(p_shard) END;
$$;

-- An id's clock bytes (_new_execution_id): milliseconds since the epoch (44 bits, to the
-- year 2527) as 48 bits, the version nibble 4 between the high 32 and the low 12, so the
-- bytes sort as the clock does. A SQL expression that inlines.
CREATE OR REPLACE FUNCTION harvest._id_clock_bits(p_ms bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ((p_ms >> 12) << 16) | (4 << 12) | (p_ms & 4095);
$$;

-- A shard number out of range 0..65535 (NULL too): HR001, raised for _new_execution_id.
CREATE OR REPLACE FUNCTION harvest._shard_out_of_range(p_shard integer)
RETURNS uuid
LANGUAGE plpgsql VOLATILE  -- (never evaluated while a plan is made)
AS $$
BEGIN
    RAISE EXCEPTION 'shard % is out of range: a shard number is 0..65535', p_shard USING ERRCODE = 'HR001';
END;
$$;

-- The shard an execution id belongs to.
CREATE OR REPLACE FUNCTION harvest.shard_of(p_execution_id uuid)
RETURNS integer
LANGUAGE sql IMMUTABLE
AS $$
    SELECT (get_byte(uuid_send(p_execution_id), 0) << 8) | get_byte(uuid_send(p_execution_id), 1);
$$;

-- A time or a length of time in the functions' own texts (an error's message, a result's
-- message): the same in every session. A timestamptz's text (RAISE's %, format's %s, ::text)
-- follows the session's TimeZone and DateStyle, an interval's its IntervalStyle, so one
-- refusal read '2030-01-02 03:04:05+00' in UTC and '02/01/2030 17:04:05 +14' in
-- Pacific/Kiritimati with DateStyle 'SQL, DMY'. A time reads as the CLI and the API print one
-- (harvest.core.json_values: datetime.isoformat() in UTC, the microseconds only when there are
-- some), '-infinity' and 'infinity' as themselves, a time before 1 AD with ' BC'; a length of
-- time in seconds, as a number (JSON's seconds, the same 30-day month extract counts).
CREATE OR REPLACE FUNCTION harvest._iso_time(p_at timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_at = 'infinity' THEN 'infinity' WHEN p_at = '-infinity' THEN '-infinity'
        ELSE to_char(p_at AT TIME ZONE 'UTC',
                     CASE WHEN date_trunc('second', p_at AT TIME ZONE 'UTC') = p_at AT TIME ZONE 'UTC'
                          THEN 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"' ELSE 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"' END)
             || CASE WHEN p_at AT TIME ZONE 'UTC' < '0001-01-01' THEN ' BC' ELSE '' END END;
$$;

CREATE OR REPLACE FUNCTION harvest._secs_text(p_length interval)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    -- (numeric: PostgreSQL 13's extract is a double, whose text follows extra_float_digits.)
    SELECT trim_scale(extract(EPOCH FROM p_length)::numeric)::text;
$$;

-- A double precision number in the functions' own texts (a lease, a rate, a timeout a refusal
-- names), the same in every session: RAISE's % (and ::text) prints a double by the session's
-- extra_float_digits, so a lease of 3600.5 s read '4e+03' at -15 and 0.1 + 0.2 read '0.3' at 0
-- and '0.30000000000000004' at 1. Through numeric it reads with 15 significant digits, no
-- trailing zeros ('-3600.5', '0.3'); from 1e16 up and below 1e-4 in exponent form, as Python
-- prints them ('-1e+300', '1.5e-07': through numeric alone 1e300 read as 301 digits); NaN and
-- the infinities as PostgreSQL spells them (numeric has no infinity before PostgreSQL 14).
CREATE OR REPLACE FUNCTION harvest._num_text(p_value double precision)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN p_value = 'NaN' THEN 'NaN'
        WHEN p_value = 'Infinity' THEN 'Infinity'
        WHEN p_value = '-Infinity' THEN '-Infinity'
        WHEN p_value <> 0 AND (abs(p_value) >= 1e16 OR abs(p_value) < 1e-4)
            -- (to_char's '.' is no locale's; its mantissa's trailing zeros go)
            THEN ltrim(regexp_replace(to_char(p_value, '9.99999999999999EEEE'), '\.?0*e', 'e'))
        ELSE trim_scale(p_value::numeric)::text
    END;
$$;

-- Raise HR001 when a page's byte bound (a reader's p_max_bytes: list_events, get_history) is
-- not positive; NULL is no byte bound (pages bounded by their row limit only).
CREATE OR REPLACE FUNCTION harvest._check_page_bytes(p_max_bytes bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_max_bytes < 1 THEN
        RAISE EXCEPTION 'max bytes % is not positive', p_max_bytes USING ERRCODE = 'HR001',
            HINT = 'give a page size of 1 byte or more, or NULL for pages bounded by p_limit only';
    END IF;
END;
$$;

-- How many rows one call of a sweep may move or claim (p_what names the function): 1 to p_max,
-- HR001 otherwise. A negative one failed as the server's 'LIMIT must not be negative', naming
-- nothing, and NULL (no LIMIT) made one worker's scan sweep every expired task, run, relay and
-- held-back start in one transaction, holding their locks throughout.
CREATE OR REPLACE FUNCTION harvest._check_limit(p_what text, p_limit integer, p_max integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > p_max THEN
        RAISE EXCEPTION '% limit % is out of range 1..%', p_what, coalesce(p_limit::text, 'NULL'), p_max
            USING ERRCODE = 'HR001', HINT = format('pass how many rows one call may take, from 1 to %s', p_max);
    END IF;
END;
$$;

-- A lease a caller asks for (p_what: a workflow task's, a relay's, a cross-shard child's), in
-- seconds: more than 0 and at most a day, as a worker's workflow_lease (harvest/worker/options.py).
-- HR001 otherwise. Without the ceiling a worker login's claim held a run's workflow task (or a
-- relay, a cross-shard child) for centuries, out of expire_tasks' reach (a lease of 1e10 s ended
-- in the year 2343), and a lease past the interval range (1e300) failed as 22008, naming nothing.
CREATE OR REPLACE FUNCTION harvest._check_lease(p_what text, p_secs double precision)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_secs IS NULL OR p_secs <= 0 OR p_secs = 'NaN' THEN
        RAISE EXCEPTION '% % must be positive seconds', p_what, harvest._num_text(p_secs)
            USING ERRCODE = 'HR001', HINT = 'give more than 0 and at most 86400 seconds';
    END IF;
    IF p_secs > 86400 THEN
        RAISE EXCEPTION '% % s is over the ceiling of 86400 seconds (a day)', p_what, harvest._num_text(p_secs)
            USING ERRCODE = 'HR001', HINT = 'give more than 0 and at most 86400 seconds';
    END IF;
END;
$$;

-- A caller's value in an error message, cut when long: its first 40 characters and its length
-- ("abc... (5000 characters)"), so a refusal of an over-long value does not echo it whole.
CREATE OR REPLACE FUNCTION harvest._clipped(p_text text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN length(p_text) > 60 THEN left(p_text, 40) || '... (' || length(p_text) || ' characters)'
                ELSE p_text END;
$$;

-- Numbers and booleans read out of a caller's JSON (start options, a decision's commands,
-- retry policies, schedule specs, DAG specs, flow policies): the one rule for every such
-- field, so a value a check let through is never cast raw deeper in, where "2.0" failed as
-- 22P02 (invalid input syntax for type integer) at a later claim, failure or start and named
-- no field. JSON has no integer type and a float serialiser writes 2.0 (Python's json of a
-- float, a JavaScript client's arithmetic), so an integer field takes any number with no
-- fraction (2, 2.0, 1e3), a number field any number in its range, a boolean field true or
-- false; JSON null or no value at all is NULL (the caller's default). Anything else (a
-- string "3", true where a number goes, 2.5, an object, a number out of range, 1e400) is
-- HR001 naming p_field (its path, as "retry.max_attempts"; p_where, when given, says whose:
-- 'schedule nightly', 'start 2') and the value given, with the field in DETAIL ({"field", "given"}), which the Python client reads into
-- InvalidArgument.field and the management API answers as the 400's "field". SQL, so a
-- caller's expression inlines them (a claim or a decision reads a few per row); the refusal
-- is a call of its own (_refuse_json_value), made only when the value is wrong. STABLE, not
-- IMMUTABLE: a planner folding a constant argument would raise before the branch was chosen.
CREATE OR REPLACE FUNCTION harvest._refuse_json_value(p_value jsonb, p_field text, p_want text, p_where text)
RETURNS numeric
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    -- (1e400 is 401 digits as JSON prints it)
    v_given text := harvest._clipped(p_value::text);
BEGIN
    RAISE EXCEPTION '% must be %, got %', coalesce(p_where || ': ', '') || p_field, p_want, v_given
        USING ERRCODE = 'HR001',
        DETAIL = jsonb_build_object('field', p_field, 'given', v_given)::text,
        HINT = CASE WHEN jsonb_typeof(p_value) = 'string'
                    THEN format('send %s as a JSON value, not in a string (3, not "3")', p_want)
                    ELSE format('pass %s, or leave %s out for its default', p_want, p_field) END;
END;
$$;

-- An integer field (see above): a number with no fraction from p_min to p_max, NULL for none.
-- _json_bigint for a bigint column (seconds up to 100 years, a quota's bytes).
CREATE OR REPLACE FUNCTION harvest._json_bigint(
    p_value jsonb, p_field text, p_min bigint DEFAULT -9223372036854775808, p_max bigint DEFAULT 9223372036854775807,
    p_where text DEFAULT NULL
)
RETURNS bigint
LANGUAGE sql STABLE
AS $$
    -- (The usual value first, a number written without a fraction: each mention of p_value is its
    -- caller's extraction again, so the fewer tests before the answer the better.)
    SELECT CASE
        WHEN jsonb_typeof(p_value) = 'number' AND scale(p_value::numeric) = 0
             AND p_value::numeric BETWEEN p_min AND p_max THEN p_value::numeric::bigint
        WHEN p_value IS NULL OR jsonb_typeof(p_value) = 'null' THEN NULL
        WHEN jsonb_typeof(p_value) = 'number' AND p_value::numeric BETWEEN p_min AND p_max
             AND p_value::numeric = trunc(p_value::numeric) THEN p_value::numeric::bigint
        ELSE harvest._refuse_json_value(p_value, p_field, format('a whole number from %s to %s', p_min, p_max),
                                        p_where)::bigint
    END;
$$;

CREATE OR REPLACE FUNCTION harvest._json_integer(
    p_value jsonb, p_field text, p_min integer DEFAULT -2147483648, p_max integer DEFAULT 2147483647,
    p_where text DEFAULT NULL
)
RETURNS integer
LANGUAGE sql STABLE
AS $$
    SELECT harvest._json_bigint(p_value, p_field, p_min, p_max, p_where)::integer;
$$;

-- A number field (see above): a number from p_min to p_max (seconds, a rate), NULL for none.
CREATE OR REPLACE FUNCTION harvest._json_number(
    p_value jsonb, p_field text, p_min double precision DEFAULT 0, p_max double precision DEFAULT 3155760000,
    p_where text DEFAULT NULL
)
RETURNS double precision
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN p_value IS NULL OR jsonb_typeof(p_value) = 'null' THEN NULL
        -- (a double holds magnitudes from about 1e-307 to 1e308: 1e400 and 1e-400 are 22003)
        WHEN jsonb_typeof(p_value) = 'number' AND p_value::numeric BETWEEN p_min::numeric AND p_max::numeric
             AND (p_value::numeric = 0 OR abs(p_value::numeric) BETWEEN 1e-300 AND 1e300)
            THEN p_value::numeric::double precision
        ELSE harvest._refuse_json_value(p_value, p_field, format('a number from %s to %s', harvest._num_text(p_min),
                                                                 harvest._num_text(p_max)), p_where)::double precision
    END;
$$;

-- A boolean field (see above): true or false, NULL for none ("yes", 1 and "true" are refused:
-- a raw ::boolean cast took the strings and refused the number).
CREATE OR REPLACE FUNCTION harvest._json_boolean(p_value jsonb, p_field text, p_where text DEFAULT NULL)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN p_value IS NULL OR jsonb_typeof(p_value) = 'null' THEN NULL
        WHEN jsonb_typeof(p_value) = 'boolean' THEN p_value::boolean
        ELSE harvest._refuse_json_value(p_value, p_field, 'true or false', p_where) IS NULL
    END;
$$;

-- The size an event counts for in the history byte cap (decide.sql) and the
-- max_history_bytes quota (flow_quotas.sql), the one measure of both: the bytes of its
-- JSON text. The spec names pg_column_size(event_data); Harvest does not use it
-- because that measures the stored datum, which depends on TOAST compression
-- (pglz or lz4, compressed only past ~2 kB) and on the short-varlena header, so
-- the size of a value at append time and of the same stored row differ, and the
-- running total, a reset fork's recount and the quota would disagree. Cost: it
-- serialises each appended event (measured ~17 us for a 700-byte event, against
-- ~1 us for pg_column_size). docs/workflows.md, "The hard caps".
CREATE OR REPLACE FUNCTION harvest._event_bytes(p_event_data jsonb)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT octet_length(p_event_data::text)::bigint;
$$;

-- Payload size (issue 12, item 11). Every entry point that stores a user payload
-- (a workflow input, an activity result or failure, a workflow result, a signal
-- payload, an update or query argument or answer, a child's or successor's input,
-- a marker value) refuses one larger than harvest.engine_settings.max_payload_bytes
-- with HR008, before it writes anything. The measure is the size of the payload's
-- JSON text as the database prints it, octet_length(p::text): the Python client
-- computes the same number (harvest.jsonb.stored_text) and checks before sending.
-- An entry point reads the limit once (_payload_limit) and checks each payload
-- against it (_check_payload).
CREATE OR REPLACE FUNCTION harvest._payload_limit()
RETURNS integer
LANGUAGE sql STABLE
AS $$
    SELECT coalesce((SELECT s.max_payload_bytes FROM harvest.engine_settings AS s WHERE s.id), 2097152);
$$;

-- The limit, for clients and workers that check before they send (the server's
-- own check stays the authority).
CREATE OR REPLACE FUNCTION harvest.payload_limit()
RETURNS integer
LANGUAGE sql STABLE
AS $$
    SELECT harvest._payload_limit();
$$;

-- Whether arrays and objects nest deeper than 200 levels in p_payload: an array or an object
-- 200 levels below the top (a walk in C, about half the cost of the value's text; NULL: false).
-- Inlined into its callers' expressions.
CREATE OR REPLACE FUNCTION harvest._too_deep(p_payload jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(jsonb_path_exists(p_payload, 'strict $.**{200} ? (@.type() == "array" || @.type() == "object")'),
                    false)
$$;

-- Raise HR001 when arrays and objects nest deeper than 200 levels in p_payload (the management
-- API's bound for a body, harvest/web/guards.py MAX_JSON_DEPTH); p_what names it. Every reader of
-- a stored value walks it to its bottom, and a worker's JSON parser (Python's) gives up near
-- 1000 levels: a signal 1000 deep sent by an operator login stopped the worker that claimed its
-- run, with every other task of its claim, at every restart. p_bytes, the size of its JSON text
-- when the caller has it: a value of fewer than 402 bytes cannot nest 201 deep, and is not walked.
CREATE OR REPLACE FUNCTION harvest._check_depth(p_what text, p_payload jsonb, p_bytes bigint DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF coalesce(p_bytes >= 402, true) AND harvest._too_deep(p_payload) THEN
        RAISE EXCEPTION '%: arrays and objects nest deeper than 200 levels', p_what
            USING ERRCODE = 'HR001',
            HINT = 'flatten the value, or send a deep structure as a string: every reader walks a stored value '
                   'to its bottom';
    END IF;
END;
$$;

-- Raise HR008 when p_payload's JSON text is larger than p_limit bytes; p_what
-- names the payload in the message ("the input of workflow x", ...).
CREATE OR REPLACE FUNCTION harvest._check_payload(p_what text, p_payload jsonb, p_limit integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_bytes bigint;
BEGIN
    IF p_payload IS NULL THEN
        RETURN;
    END IF;
    v_bytes := octet_length(p_payload::text);
    IF v_bytes > p_limit THEN
        RAISE EXCEPTION '% is % bytes, over the payload limit of % bytes', p_what, v_bytes, p_limit
            USING ERRCODE = 'HR008',
            DETAIL = jsonb_build_object('what', p_what, 'bytes', v_bytes, 'limit', p_limit)::text,
            HINT = 'keep large data outside the engine (a table, object storage; Payloads(offload_bytes=...) does it '
                   'for what a worker or client writes, docs/payloads.md) and pass a reference; the limit is '
                   'harvest.engine_settings.max_payload_bytes';
    END IF;
END;
$$;

-- What a client sends (a start's input, a signal's payload, a query's or an update's argument,
-- a completion by task token, a schedule's input): within the payload limit (HR008) and 200
-- levels deep (HR001, _check_depth). What a worker writes is checked for size, and an activity's
-- result for depth too (complete_activity, complete_activities' too_deep); a decision's commands
-- are not walked: a refused decision would fail its workflow task at every attempt, and a worker
-- refuses a value past 200 levels before it sends it (harvest.core.payload.encode).
CREATE OR REPLACE FUNCTION harvest._check_sent(p_what text, p_payload jsonb, p_limit integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    PERFORM harvest._check_payload(p_what, p_payload, p_limit);
    PERFORM harvest._check_depth(p_what, p_payload);
END;
$$;

-- Raise HR008 when an operator's reason (a cancel's, a terminate's, a pause's, a resume's) is
-- over the payload limit: it is written into the run's history (and a batch's into each run's),
-- so it is bounded as a signal's payload is. p_what names the act ("a cancel").
CREATE OR REPLACE FUNCTION harvest._check_reason(p_what text, p_reason text)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    PERFORM harvest._check_payload(format('the reason of %s', p_what), to_jsonb(p_reason), harvest._payload_limit());
END;
$$;

-- Append events in order; the caller holds the execution row lock, which makes
-- event ids gapless and ordered. Returns the id of the last one, and the run's
-- history size and status as the append left them (a decision's history caps read
-- them: _apply_decision). One row update for them all (each update of the row costs
-- a new row version), and, when p_decided_through is given, the decision that the
-- first of them marks: decided_by/decided_through, and wake_hold, whether that decision
-- holds the run's wake-ups until its activities drain (see _apply_decision,
-- _wake_after_results). With p_own_events, every event after the marker is the
-- decision's own and of a kind its worker takes as read without reading it back
-- (WorkflowRun.recorded, _SELF_RECORDING): decided_through then covers them too, so
-- the next claim of the run by that worker carries only what came after them
-- (_events_since_decision; a worker whose run did not take them reads them itself).
-- With p_defer, the row is updated (the ids are taken) but the events are not inserted:
-- the caller inserts them with _insert_events (see there), by the ids this returns.
CREATE OR REPLACE FUNCTION harvest._append_events(
    p_execution_id uuid, p_event_types text[], p_event_datas jsonb[],
    p_decided_by text DEFAULT NULL, p_decided_through bigint DEFAULT NULL,
    p_wake_hold boolean DEFAULT false, p_own_events boolean DEFAULT false,
    p_defer boolean DEFAULT false,
    OUT last_event_id bigint, OUT history_bytes bigint, OUT execution_status text
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_count integer := cardinality(p_event_types);
    v_now timestamptz;
BEGIN
    UPDATE harvest.executions AS x
    SET last_event_id = x.last_event_id + v_count,
        history_bytes = x.history_bytes + (
            SELECT sum(harvest._event_bytes(coalesce(d.data, '{}'::jsonb)))
            FROM unnest(p_event_datas) AS d (data)),
        decided_by = CASE WHEN p_decided_through IS NULL THEN x.decided_by ELSE p_decided_by END,
        decided_through = CASE WHEN p_decided_through IS NULL THEN x.decided_through
                               WHEN p_own_events THEN x.last_event_id + v_count
                               ELSE p_decided_through END,
        wake_hold = CASE WHEN p_decided_through IS NULL THEN x.wake_hold ELSE coalesce(p_wake_hold, false) END
    WHERE x.id = p_execution_id
    RETURNING x.last_event_id, x.history_bytes, x.status INTO last_event_id, history_bytes, execution_status;
    IF p_defer THEN
        RETURN;  -- (the caller's _insert_events, with its notification)
    END IF;
    v_now := harvest.now();  -- (once, not per row: see _insert_events)
    INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)
    SELECT p_execution_id, last_event_id - v_count + e.n, e.event_type, coalesce(e.event_data, '{}'::jsonb),
           v_now
    FROM unnest(p_event_types, p_event_datas) WITH ORDINALITY AS e (event_type, event_data, n);
    PERFORM harvest._notify_events(p_execution_id);  -- only while a process streams (event_streams.sql)
END;
$$;

-- Insert events whose ids _append_events or _append_closing_events took with p_defer:
-- a batch's (complete_activities, complete_workflow_tasks) decisions' last appends in one
-- statement, not one per decision (executor start-up, plan check, constraints and the
-- trigger's WHEN are paid per statement; docs/performance.md, "One statement per batch
-- for a result batch's appends"). The i-th event is of run p_execution_ids[i] and
-- has id p_id_offsets[i] + i: a caller adds a decision's n deferred events with the
-- offset (its last id - the buffer's length after them) n times. Inserted in buffer
-- order: each run's ids ascending, as their appends took them. A caller inserts the
-- buffer before anything of a run it holds events of reads that run's history (its
-- next item), and before it returns. Then the stream's notification (_notify_events'
-- probe and message), once per run: identical messages of a transaction are one.
CREATE OR REPLACE FUNCTION harvest._insert_events(
    p_execution_ids uuid[], p_id_offsets bigint[], p_event_types text[], p_event_datas jsonb[]
)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    -- The clock once, not per row: harvest.now() in the row list is a PL/pgSQL call per
    -- event (about 0.3 us each, a dozen a canonical workflow here), and its value is the
    -- same for every row of the statement (docs/performance.md, "SQL path, ninth cut").
    v_now timestamptz := harvest.now();
BEGIN
    -- (unnest, not subscripts: an element of a flat array of variable-width elements is
    -- found by walking the ones before it, so a buffer of a fan-out's decisions, hundreds
    -- of events, cost its square.)
    INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)
    SELECT e.execution_id, e.id_offset + e.i, e.event_type, coalesce(e.event_data, '{}'::jsonb), v_now
    FROM unnest(p_execution_ids, p_id_offsets, p_event_types, p_event_datas) WITH ORDINALITY
        AS e (execution_id, id_offset, event_type, event_data, i);
    PERFORM pg_notify('harvest_events', u.execution_id::text)
    FROM unnest(p_execution_ids) AS u (execution_id)
    WHERE EXISTS (SELECT 1 FROM harvest._live_event_listeners());  -- (event_streams.sql)
END;
$$;

-- The row updates of appends a batch's caller held back (_apply_decision's p_defer_events:
-- a decision's one append), one statement for the batch where each was its own: each row of
-- p_rows (harvest.held_run_row) gives its run n more events, its last last_event_id, bytes
-- more history bytes, decided_by p_decided_by, decided_through and wake_hold, as
-- _append_events sets them; or, where its status is not NULL (a decision that ended its
-- run), the close as _append_closing_events writes it (status, output, failure,
-- completed_at; wake_hold kept) in a second statement for the batch's closes, then the
-- closed runs' _after_closes, in p_rows' order. The caller holds each run's lock
-- and writes the held rows before anything else reads or appends to one of those runs (its
-- next item, a decision that may act on another run, a history cap's close) and before it
-- returns; each run once. The counters were computed from the row as read under that lock:
-- a row whose last_event_id moved since is a bug of the caller's, refused here (XX000)
-- rather than written with ids that collide.
--
-- Planned with sequential scans off (the statements it runs for the first time in a session,
-- _after_closes' and the close triggers' included): a batch's rows are found by key. Left to
-- the costs, a batch of a few dozen closes on a young, never-analysed database was planned as
-- a hash join over a scan of every run (and _after_closes' delete as a scan of every task),
-- the plan cache kept that plan for the session, and each close batch of a drain read both
-- tables whole as they grew (tests/integration/test_generic_plans.py; docs/performance.md,
-- "Canonical drain, eleventh cut"). Every table these statements read has an index on the
-- columns they probe, so nothing is left to a full index walk instead.
CREATE OR REPLACE FUNCTION harvest._update_held_rows(p_rows harvest.held_run_row[], p_decided_by text)
RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    v_rows integer := 0;
    v_n integer;
    v_closing integer := (SELECT count(*) FROM unnest(p_rows) AS u WHERE u.status IS NOT NULL);
    v_closed record;
    v_now timestamptz;
BEGIN
    IF v_closing < cardinality(p_rows) THEN
        UPDATE harvest.executions AS x
        SET last_event_id = u.last_event_id, history_bytes = x.history_bytes + u.bytes, decided_by = p_decided_by,
            decided_through = u.decided_through, wake_hold = u.wake_hold
        FROM unnest(p_rows) AS u
        WHERE x.id = u.id AND x.last_event_id = u.last_event_id - u.n AND u.status IS NULL;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
    END IF;
    IF v_closing > 0 THEN
        -- (One statement for the closes: the status triggers fire per row at its end, as they
        -- did at the end of each close's own; then _after_closes, what each run's _after_close
        -- did after its own, in one pass. The clock once, not per closed row: see _insert_events.)
        v_now := harvest.now();
        WITH closed AS (
            UPDATE harvest.executions AS x
            SET last_event_id = u.last_event_id, history_bytes = x.history_bytes + u.bytes,
                decided_by = p_decided_by, decided_through = coalesce(u.decided_through, x.decided_through),
                status = u.status, output = u.output, failure = u.failure, completed_at = v_now
            FROM unnest(p_rows) WITH ORDINALITY
                AS u (id, last_event_id, n, bytes, decided_through, wake_hold, status, output, failure, i)
            WHERE x.id = u.id AND x.last_event_id = u.last_event_id - u.n AND u.status IS NOT NULL
            RETURNING u.i, x.id, x.status, x.output, x.failure, x.parent_id, x.parent_seq
        )
        SELECT array_agg(c.id ORDER BY c.i) AS ids, array_agg(c.status ORDER BY c.i) AS statuses,
               array_agg(c.output ORDER BY c.i) AS outputs, array_agg(c.failure ORDER BY c.i) AS failures,
               array_agg(c.parent_id ORDER BY c.i) AS parents, array_agg(c.parent_seq ORDER BY c.i) AS seqs
        INTO v_closed FROM closed AS c;
        v_n := coalesce(cardinality(v_closed.ids), 0);
        v_rows := v_rows + v_n;
        IF v_n > 0 THEN
            PERFORM harvest._after_closes(v_closed.ids, v_closed.statuses, v_closed.outputs, v_closed.failures,
                                          v_closed.parents, v_closed.seqs);
        END IF;
    END IF;
    IF v_rows <> cardinality(p_rows) THEN
        RAISE EXCEPTION 'internal: % of % held run rows were where their appends left them', v_rows,
            cardinality(p_rows) USING ERRCODE = 'XX000';
    END IF;
END;
$$;

-- Append one event (see _append_events); returns its id.
CREATE OR REPLACE FUNCTION harvest._append_event(
    p_execution_id uuid, p_event_type text, p_event_data jsonb
)
RETURNS bigint
LANGUAGE sql
AS $$
    SELECT (harvest._append_events(p_execution_id, ARRAY[p_event_type], ARRAY[p_event_data])).last_event_id;
$$;

-- Tell workers of a queue that claimable work exists, if any of them is asleep.
-- NOTIFY takes one cluster-wide lock at commit, held through the WAL flush, so
-- notifying commits go one at a time; busy workers claim again on their own, so
-- only a worker that marked itself asleep (set_worker_sleeping) needs the message.
-- Postgres folds identical notifications within a transaction: one per queue.
--
-- The check and a worker's mark race: a producer that checks before the mark is
-- committed and commits after the worker's last look for work would leave its task
-- unannounced until the worker's poll interval. So the check is made holding the
-- queue's wake lock shared until commit (keyed by the name's hash in 1,024 buckets:
-- a transaction that makes work on many queues holds at most 1,024), and a worker
-- that has just marked itself asleep looks once more when it can take that lock
-- exclusively (set_worker_sleeping): every producer that checked without seeing its
-- mark has committed by then. Neither side waits: a producer that finds the lock
-- taken (a worker's mark in that instant, or any other session's hold) notifies
-- without checking. So does a producer whose transaction reads one snapshot
-- (REPEATABLE READ, SERIALIZABLE: a start inside a caller's own transaction): that
-- snapshot may predate a mark committed before the lock was taken.
CREATE OR REPLACE FUNCTION harvest._notify_queue(p_queue text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    -- (The isolation first: a snapshot transaction notifies without taking the lock, which
    -- would make idle workers ask again until it commits.)
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM pg_notify('harvest_tasks', p_queue);
        RETURN;
    END IF;
    IF NOT pg_try_advisory_xact_lock_shared(1463897925, hashtext(p_queue) & 1023) THEN  -- class 'WAKE'
        PERFORM pg_notify('harvest_tasks', p_queue);
        RETURN;
    END IF;
    -- (A statement of its own after the lock: its snapshot sees a mark committed before.)
    -- A crashed worker's stale mark stops counting after three missed heartbeats.
    IF EXISTS (
        SELECT 1 FROM harvest.workers AS w
        WHERE w.sleeping AND w.status = 'active' AND p_queue = ANY(w.queues)
          AND w.last_heartbeat_at > harvest.now() - make_interval(secs => 3 * w.heartbeat_interval_secs)
    ) THEN
        PERFORM pg_notify('harvest_tasks', p_queue);
    END IF;
END;
$$;

-- A note on "(e.status = 'RUNNING') IS TRUE" beside "e.id = ...": the plain
-- equality implies the predicate of the partial index executions_active_workflow_id,
-- and a generic plan cached on a never-analysed table (PL/pgSQL caches one per
-- session) scans all of that index filtering on id. Written this way no partial
-- index applies and the primary key is the only path, whatever the statistics
-- (tests/integration/test_generic_plans.py).

-- Make sure the execution has a workflow task; at most one exists per execution.
-- A PAUSED run's task is created 'paused': no claim sees it until the run is
-- resumed (lifecycle.sql), so the wake-up waits and is not lost.
-- The run's task is read first, without a lock: an INSERT meeting the row of a claim in
-- flight (an idle worker's open claim holds it until its decision, which then waits for
-- this run's row) waited for that claim, holding the run's row and whatever else the
-- caller's transaction holds, until the claim's lock_timeout rolled it back. Every
-- caller holds the run's row (locked FOR UPDATE, or updated by an append first), so no
-- other transaction inserts or deletes the task meanwhile (claim.sql,
-- _hand_workflow_task, reads it the same way).
CREATE OR REPLACE FUNCTION harvest._ensure_workflow_task(p_execution_id uuid)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_queue text;
    v_status text;
    v_now timestamptz := harvest.now();
BEGIN
    PERFORM 1 FROM harvest.tasks AS t WHERE t.execution_id = p_execution_id AND t.kind = 'workflow';
    IF FOUND THEN
        RETURN;
    END IF;
    INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, status, fairness_key)
    SELECT e.id, 'workflow', e.queue, v_now, v_now, CASE WHEN e.status = 'PAUSED' THEN 'paused' ELSE 'pending' END,
           -- ('' on a fair queue, else the marker for none: sql/triggers.sql asks no query of its own)
           coalesce((SELECT '' FROM harvest.fair_queues AS f WHERE f.queue = e.queue), E'\x01')
    FROM harvest.executions AS e
    WHERE e.id = p_execution_id AND (e.status IN ('RUNNING', 'PAUSED')) IS TRUE  -- (see the note above)
    ON CONFLICT (execution_id) WHERE kind = 'workflow' DO NOTHING
    RETURNING queue, status INTO v_queue, v_status;
    IF v_status = 'pending' THEN
        PERFORM harvest._notify_queue(v_queue);
    END IF;
END;
$$;

-- Move a locked, running execution to a terminal state and drop its open tasks.
-- Its parent hears of it, and its children get their parent-close policy, through
-- relays (see relays.sql). A run continued-as-new leaves the parent link to its
-- successor, but its own children get their close policy like any other close.
CREATE OR REPLACE FUNCTION harvest._close_execution(
    p_execution_id uuid, p_status text, p_output jsonb, p_failure jsonb
)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_parent_id uuid;
    v_parent_seq integer;
BEGIN
    -- (The two columns read below, not *: a RETURNING list's tuple descriptor is built
    -- on every execution, one of every column of executions for RETURNING *.)
    UPDATE harvest.executions
    SET status = p_status, output = p_output, failure = p_failure, completed_at = harvest.now()
    WHERE id = p_execution_id
    RETURNING parent_id, parent_seq INTO v_parent_id, v_parent_seq;
    PERFORM harvest._after_close(p_execution_id, p_status, p_output, p_failure, v_parent_id, v_parent_seq);
END;
$$;

-- A closing decision's last events and the close in one row update
-- (_apply_decision): the append's update and the close's would be two versions of
-- the run's row, and the close's, changing the status, is never HOT: it writes an
-- entry into each index the closed row is in (docs/performance.md, "A closing
-- decision's row, written once"). The row is closed before these events are inserted: a mutex
-- marker is not among them (_decide_record_marker appends and applies it on its own, before),
-- so it takes its key before the close gives the run's keys back.
-- Returns the id of the last event. (Its own statement, not _append_events' with
-- optional close columns: an UPDATE that names status fires the AFTER UPDATE OF
-- status triggers, so every append would pay them.) With p_defer, the events are not
-- inserted (as _append_events' p_defer): nothing _after_close does reads the closed
-- run's history.
CREATE OR REPLACE FUNCTION harvest._append_closing_events(
    p_execution_id uuid, p_event_types text[], p_event_datas jsonb[],
    p_decided_by text, p_decided_through bigint,
    p_status text, p_output jsonb, p_failure jsonb, p_defer boolean DEFAULT false
)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_count integer := cardinality(p_event_types);
    v_last_event_id bigint;
    v_parent_id uuid;
    v_parent_seq integer;
    v_now timestamptz;
BEGIN
    UPDATE harvest.executions AS x
    SET last_event_id = x.last_event_id + v_count,
        history_bytes = x.history_bytes + (
            SELECT sum(harvest._event_bytes(coalesce(d.data, '{}'::jsonb)))
            FROM unnest(p_event_datas) AS d (data)),
        decided_by = CASE WHEN p_decided_through IS NULL THEN x.decided_by ELSE p_decided_by END,
        decided_through = coalesce(p_decided_through, x.decided_through),
        status = p_status, output = p_output, failure = p_failure, completed_at = harvest.now()
    WHERE x.id = p_execution_id
    RETURNING x.last_event_id, x.parent_id, x.parent_seq INTO v_last_event_id, v_parent_id, v_parent_seq;
    IF NOT p_defer THEN
        v_now := harvest.now();  -- (once, not per row: see _insert_events)
        INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)
        SELECT p_execution_id, v_last_event_id - v_count + e.n, e.event_type, coalesce(e.event_data, '{}'::jsonb),
               v_now
        FROM unnest(p_event_types, p_event_datas) WITH ORDINALITY AS e (event_type, event_data, n);
        PERFORM harvest._notify_events(p_execution_id);  -- only while a process streams (event_streams.sql)
    END IF;
    PERFORM harvest._after_close(p_execution_id, p_status, p_output, p_failure, v_parent_id, v_parent_seq);
    RETURN v_last_event_id;
END;
$$;

-- Whether a closed run has relays to make (_relay_close's three cases): a parent to tell (not
-- after a continue-as-new: its successor keeps the link), a live child with a close policy,
-- or a child on another shard. One row, read as (SELECT r FROM harvest._close_relays(...) AS r):
-- a SQL set-returning function the planner inlines into that query (as _may_hand_off), so
-- _after_close and _after_closes probe by the same rule at no call's cost. Scalar subqueries,
-- not EXISTS: in a generic plan a correlated EXISTS under an OR became a hashed subplan that
-- read every live run through executions_status_created.
CREATE OR REPLACE FUNCTION harvest._close_relays(p_execution_id uuid, p_status text, p_parent_id uuid)
RETURNS SETOF boolean
LANGUAGE sql STABLE
ROWS 1
AS $$
    SELECT (p_parent_id IS NOT NULL AND p_status <> 'CONTINUED_AS_NEW')
        OR (SELECT 1 FROM harvest.executions AS e
            WHERE e.parent_id = p_execution_id AND e.status IN ('RUNNING', 'PAUSED')
              AND e.parent_close_policy <> 'abandon'
            LIMIT 1) IS NOT NULL
        OR (SELECT 1 FROM harvest.cross_shard_children AS c WHERE c.parent_execution_id = p_execution_id LIMIT 1)
        IS NOT NULL;
$$;

-- What follows a run's row update to a terminal state (_close_execution,
-- _append_closing_events): its tasks dropped, its result waiters told, its parent
-- and children relayed to (_relay_close). _after_closes does the same for a batch's closes
-- in one pass; the two give the same rows (pgtap/core.sql).
CREATE OR REPLACE FUNCTION harvest._after_close(
    p_execution_id uuid, p_status text, p_output jsonb, p_failure jsonb,
    p_parent_id uuid, p_parent_seq integer
)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM harvest.tasks WHERE execution_id = p_execution_id;
    -- Notify only when a client waits for this result (see harvest.wait_for_result in
    -- executions.sql): the waiters lock ('WAIT', the run) orders their marks with this delete;
    -- taken without waiting, and when a waiter is marking right now, notify whatever we see.
    IF pg_try_advisory_xact_lock(1463896404, hashtext(p_execution_id::text)) THEN
        DELETE FROM harvest.result_waiters WHERE execution_id = p_execution_id;
        IF FOUND THEN
            PERFORM pg_notify('harvest_done', p_execution_id::text);
        END IF;
    ELSE
        DELETE FROM harvest.result_waiters WHERE execution_id = p_execution_id;
        PERFORM pg_notify('harvest_done', p_execution_id::text);
    END IF;
    -- A probe first: most runs have no parent, no live child and no child on another shard.
    IF (SELECT r FROM harvest._close_relays(p_execution_id, p_status, p_parent_id) AS r) THEN
        PERFORM harvest._relay_close(p_execution_id, p_status, p_output, p_failure, p_parent_id, p_parent_seq);
    END IF;
END;
$$;

-- A closed run's relays (_after_close, _after_closes): its parent hears of the close
-- (unless it continued as new: its successor keeps the link), its live children get their
-- parent-close policy (relays.sql), and its children on other shards (cross_shard.sql) get
-- the close through their rows.
CREATE OR REPLACE FUNCTION harvest._relay_close(
    p_execution_id uuid, p_status text, p_output jsonb, p_failure jsonb,
    p_parent_id uuid, p_parent_seq integer
)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_parent_id IS NOT NULL AND p_status <> 'CONTINUED_AS_NEW' THEN
        PERFORM harvest._queue_relay(p_parent_id, 'child_closed', jsonb_build_object(
            'seq', p_parent_seq, 'child_execution_id', p_execution_id, 'status', p_status,
            'result', p_output, 'failure', p_failure));
    END IF;
    -- (One statement, not a FOR loop over the children: a query loop opens a cursor.)
    PERFORM harvest._queue_relay(e.id, 'parent_closed', jsonb_build_object(
        'policy', e.parent_close_policy, 'parent_execution_id', p_execution_id))
    FROM harvest.executions AS e
    WHERE e.parent_id = p_execution_id AND e.status IN ('RUNNING', 'PAUSED') AND e.parent_close_policy <> 'abandon';
    IF EXISTS (SELECT 1 FROM harvest.cross_shard_children AS c WHERE c.parent_execution_id = p_execution_id) THEN
        PERFORM harvest._close_cross_shard_children(p_execution_id);
    END IF;
END;
$$;

-- _after_close of a batch's closes (_update_held_rows) in one pass: the i-th run p_ids[i],
-- closed to p_statuses[i] with p_outputs[i] and p_failures[i], a child of p_parents[i] (or
-- NULL) at p_seqs[i]. The tasks' delete, the waiters' lock, delete and notification, and
-- the relays' probe are one statement each for all the runs, where each run's _after_close
-- ran four (docs/performance.md, "A batch's closes in one pass"); the few runs the probe
-- finds get their _relay_close one by one, in p_ids' order, as after their own closes.
-- Nothing a run's relays do gives another of these runs a task, a waiter or a relay to make
-- (their rows are closed already), so doing each step for all of them first leaves the rows
-- each run's _after_close in turn did. The caller holds each run's lock; each run once.
CREATE OR REPLACE FUNCTION harvest._after_closes(
    p_ids uuid[], p_statuses text[], p_outputs jsonb[], p_failures jsonb[], p_parents uuid[], p_seqs integer[]
)
RETURNS void
LANGUAGE plpgsql
-- Planned once per session: the custom plans made for the arrays' values (a few rows, where
-- the generic plans guess a hundred) never let the plan cache settle, and planning each call
-- cost more than its closes (tests/integration/test_generic_plans.py pins the plans' paths);
-- and with sequential scans off, as its caller _update_held_rows: the closed runs' tasks by key.
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_locked boolean[];
    v_told bigint;
    v_relaying integer[];
    v_i integer;
BEGIN
    -- The tasks go, and each run's waiters lock is tried (as _after_close's), in one
    -- statement: the waiters' delete reads the marks in a later one, with a later snapshot.
    WITH dropped AS (
        DELETE FROM harvest.tasks AS t WHERE t.execution_id = ANY (p_ids)
    )
    SELECT array_agg(pg_try_advisory_xact_lock(1463896404, hashtext(u.id::text)) ORDER BY u.i) INTO v_locked
    FROM unnest(p_ids) WITH ORDINALITY AS u (id, i);
    -- A run's notification where its waiters were found, or where a waiter held its lock.
    WITH told AS (
        DELETE FROM harvest.result_waiters AS w WHERE w.execution_id = ANY (p_ids)
        RETURNING w.execution_id
    )
    SELECT count(*) INTO v_told
    FROM (
        SELECT pg_notify('harvest_done', u.id::text)  -- (in p_ids' order: evaluated after the sort)
        FROM unnest(p_ids, v_locked) WITH ORDINALITY AS u (id, locked, i)
        WHERE NOT u.locked OR u.id IN (SELECT t.execution_id FROM told AS t)
        ORDER BY u.i
    ) AS n;
    SELECT array_agg(u.i ORDER BY u.i) INTO v_relaying
    FROM unnest(p_ids, p_statuses, p_parents) WITH ORDINALITY AS u (id, status, parent_id, i)
    WHERE (SELECT r FROM harvest._close_relays(u.id, u.status, u.parent_id) AS r);
    IF v_relaying IS NOT NULL THEN
        FOREACH v_i IN ARRAY v_relaying LOOP
            PERFORM harvest._relay_close(p_ids[v_i], p_statuses[v_i], p_outputs[v_i], p_failures[v_i],
                                         p_parents[v_i], p_seqs[v_i]);
        END LOOP;
    END IF;
END;
$$;

-- Lock an execution row or raise not-found.
CREATE OR REPLACE FUNCTION harvest._lock_execution(p_execution_id uuid)
RETURNS harvest.executions
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
BEGIN
    SELECT * INTO v_execution FROM harvest.executions WHERE id = p_execution_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM harvest._execution_not_found(p_execution_id);  -- HR002 (retention.sql)
    END IF;
    RETURN v_execution;
END;
$$;

-- Refuse p_action on an execution a shard rebalance moved away (a MIGRATED seal) or
-- is moving here (a MIGRATING staged copy), with HR013: the caller follows the
-- pointer (DETAIL.shard_id), or retries while a staged copy awaits activation
-- (functions/rebalance.sql). Acting on the seal would act on a stale copy.
CREATE OR REPLACE FUNCTION harvest._refuse_moved(p_execution harvest.executions, p_action text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_execution.status IN ('MIGRATED', 'MIGRATING') THEN
        RAISE EXCEPTION 'cannot % execution % on shard %: it %', p_action, p_execution.id, harvest.get_shard_id(),
            CASE WHEN p_execution.migrated_to_shard IS NOT NULL
                THEN format('moved to shard %s', p_execution.migrated_to_shard)
                ELSE 'is being moved here and is not active yet' END
            USING ERRCODE = 'HR013',
            DETAIL = jsonb_build_object('reason', 'migrated', 'execution_id', p_execution.id,
                                        'shard_id', p_execution.migrated_to_shard, 'blockers', '[]'::jsonb)::text,
            HINT = 'route the call by the execution id (the router follows the forwarding pointer), or retry';
    END IF;
END;
$$;

-- Lock an execution that must still be live (RUNNING, or PAUSED: lifecycle.sql)
-- for p_action (signal, cancel, terminate, ...), or raise not-found / moved
-- (HR013) / not-running naming the state it is in.
CREATE OR REPLACE FUNCTION harvest._lock_running_execution(p_execution_id uuid, p_action text)
RETURNS harvest.executions
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions := harvest._lock_execution(p_execution_id);
BEGIN
    PERFORM harvest._refuse_moved(v_execution, p_action);
    IF v_execution.status NOT IN ('RUNNING', 'PAUSED') THEN
        RAISE EXCEPTION 'cannot % execution %: it is already %', p_action, p_execution_id, v_execution.status
            USING ERRCODE = 'HR005';
    END IF;
    RETURN v_execution;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.now IS
'The engine''s clock: the time the calling statement began (statement_timestamp(): in a call that is its '
'own transaction, the transaction''s time; a worker''s claim that decides commits two statements as one, '
'and its decision is stamped when it was sent), or harvest.fake_now while the owner-only test clock '
'(engine_settings.test_clock_allowed) is on (fake_now ''shared'': the statement''s time plus the owner-only '
'engine_settings.test_clock_offset). Read by every entry point (roles harvest_reader, harvest_worker).';
COMMENT ON FUNCTION harvest.schema_version IS
'The latest applied core migration; the Python client and worker refuse a schema they do not match. Roles '
'harvest_reader, harvest_worker.';
COMMENT ON FUNCTION harvest.functions_version IS
'The core migration these functions were written for; equal to schema_version() once `harvest migrate run` '
'has finished. Roles harvest_reader, harvest_worker.';
COMMENT ON FUNCTION harvest.get_function_releases IS
'The Harvest releases that applied the function files (harvest.function_files), for the worker''s and the '
'client''s boot check. Roles harvest_reader, harvest_worker.';
COMMENT ON FUNCTION harvest.get_function_state IS
'The function ledger and a digest of the live bodies of the functions named, for the shard health check, '
'preflight and the boot warning of a process whose release''s functions are not the database''s. Roles '
'harvest_reader, harvest_worker.';
COMMENT ON FUNCTION harvest.shard_of IS
'The shard an execution id belongs to. Roles harvest_reader, harvest_worker.';
COMMENT ON FUNCTION harvest.payload_limit IS
'The largest payload the engine accepts, in bytes, for clients and workers that check before they send (the '
'server''s own check, HR008, stays the authority). Roles harvest_reader, harvest_worker.';
