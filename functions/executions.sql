-- Executions: reading one run and its history, ending a run from outside, the
-- operator's filtered, keyset-paginated list, the stack up (get_execution_stack)
-- and the children down (list_children), the runs per recorded version
-- (count_versions), and waiting for a run's result. Signal and cancel are
-- signals.sql; a child's and a parent's ends reaching each other are relays.sql.

CREATE OR REPLACE FUNCTION harvest.get_execution(p_execution_id uuid)
RETURNS harvest.executions
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_row harvest.executions;
BEGIN
    SELECT * INTO v_row FROM harvest.executions WHERE id = p_execution_id;
    IF NOT FOUND THEN
        PERFORM harvest._execution_not_found(p_execution_id);  -- HR002 (retention.sql)
    END IF;
    RETURN v_row;
END;
$$;

-- The current run of a business key: the RUNNING one, else the newest (a handle by
-- workflow_id, Client.get_handle(workflow_id=)). Without a name, a workflow_id two
-- workflows share is ambiguous (HR001); executions_workflow_id_runs serves it with a name and
-- without.
CREATE OR REPLACE FUNCTION harvest.get_execution_by_workflow_id(
    p_workflow_id text, p_workflow_name text DEFAULT NULL
)
RETURNS harvest.executions
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_row harvest.executions;
    v_names text[];
BEGIN
    IF p_workflow_id IS NULL OR p_workflow_id = '' THEN
        RAISE EXCEPTION 'workflow_id is empty' USING ERRCODE = 'HR001',
            HINT = 'pass the workflow_id the run was started with';
    END IF;
    IF p_workflow_name IS NULL THEN
        SELECT array_agg(DISTINCT e.workflow_name ORDER BY e.workflow_name) INTO v_names
        FROM harvest.executions AS e WHERE e.workflow_id = p_workflow_id;
        IF cardinality(v_names) > 1 THEN
            RAISE EXCEPTION 'workflow_id % is used by several workflows (%)', p_workflow_id,
                array_to_string(v_names, ', ') USING ERRCODE = 'HR001',
                HINT = 'name the workflow as well';
        END IF;
    END IF;
    SELECT e.* INTO v_row FROM harvest.executions AS e
    WHERE e.workflow_id = p_workflow_id AND (p_workflow_name IS NULL OR e.workflow_name = p_workflow_name)
    ORDER BY (e.status = 'RUNNING') DESC, e.created_at DESC, e.id DESC
    LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run has workflow_id %',
            p_workflow_id || coalesce(' of workflow ' || p_workflow_name, '') USING ERRCODE = 'HR002',
            HINT = 'check the workflow_id (and the workflow name) it was started with';
    END IF;
    RETURN v_row;
END;
$$;

-- The history after a given event id (0 = from the start), in order; at most p_limit events
-- (NULL: all). The limit is the function's own: it runs as its owner (security.sql), so it is
-- never inlined and a LIMIT around the call would still read the whole history (the HTTP
-- API's pages, a run of 100,000 events). A negative limit is HR001 with a hint (LIMIT's own
-- 2201W named no Harvest code and said nothing of what to give). With p_max_bytes (the event
-- stream's catch-up, docs/event-streams.md), the page also ends with the event whose data (as
-- JSON text) brings it to that many bytes: a page of large events is megabytes, not p_limit of
-- them. Without it (NULL, the workers' and clients' reads) the query is as it was.
CREATE OR REPLACE FUNCTION harvest.get_history(
    p_execution_id uuid,
    p_after_event_id bigint DEFAULT 0,
    p_limit integer DEFAULT NULL,
    p_max_bytes bigint DEFAULT NULL
)
RETURNS TABLE (event_id bigint, event_type text, event_data jsonb, created_at timestamptz)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_total bigint := 0;
BEGIN
    IF p_limit < 0 THEN
        RAISE EXCEPTION 'limit % is negative', p_limit USING ERRCODE = 'HR001',
            HINT = 'give 0 or more events, or NULL for the whole history';
    END IF;
    PERFORM harvest._check_page_bytes(p_max_bytes);
    IF p_max_bytes IS NULL THEN
        RETURN QUERY
        SELECT ev.event_id, ev.event_type, ev.event_data, ev.created_at
        FROM harvest.events AS ev
        WHERE ev.execution_id = p_execution_id AND ev.event_id > coalesce(p_after_event_id, 0)
        ORDER BY ev.event_id
        LIMIT p_limit;
    ELSE
        -- Sized in the loop, not the query: rows fetched ahead but never returned are not read whole.
        FOR event_id, event_type, event_data, created_at IN
            SELECT ev.event_id, ev.event_type, ev.event_data, ev.created_at
            FROM harvest.events AS ev
            WHERE ev.execution_id = p_execution_id AND ev.event_id > coalesce(p_after_event_id, 0)
            ORDER BY ev.event_id
            LIMIT p_limit
        LOOP
            RETURN NEXT;
            v_total := v_total + octet_length(event_data::text);
            EXIT WHEN v_total >= p_max_bytes;
        END LOOP;
    END IF;
    -- Every run has its WorkflowStarted: no event from the start is no run (an unknown id, or
    -- one retention deleted between a caller's read of the run and of its history, which then
    -- exported or showed the run with no history). Read with the events' snapshot (STABLE).
    IF NOT FOUND AND coalesce(p_after_event_id, 0) = 0
       AND NOT EXISTS (SELECT 1 FROM harvest.executions AS e WHERE e.id = p_execution_id) THEN
        RAISE EXCEPTION 'execution % not found', p_execution_id USING ERRCODE = 'HR002',
            HINT = 'retention may have deleted it (harvest retention status); on shards, read it where its id routes';
    END IF;
END;
$$;

-- The dashboard's run page: one page of the history and what the page shows beside it, in
-- rows of a few parts, never more than it shows however long the history (a run of 100,000
-- events was read whole, a stream, to draw 500). ``part``:
--   'event'  the page: p_limit events from p_from_event_id on, or the last p_limit before
--            p_before_event_id, or (neither) the last p_limit;
--   'signal' the last p_limit SignalReceived;
--   'update' each UpdateAccepted whose update has no UpdateCompleted (the page shows them all:
--            these rows grow with the updates in flight, not with the history);
--   'reset'  the last p_limit WorkflowTaskCompleted, without their data (the id is the point);
--   'count'  one row: event_id the last event's id, event_data {"events", "signals"}.
-- The counts read the run's rows, not their payloads; the page and the tails are index range
-- scans of events_pkey from an end.
CREATE OR REPLACE FUNCTION harvest.get_history_page(
    p_execution_id uuid,
    p_from_event_id bigint DEFAULT NULL,
    p_before_event_id bigint DEFAULT NULL,
    p_limit integer DEFAULT 500
)
RETURNS TABLE (part text, event_id bigint, event_type text, event_data jsonb, created_at timestamptz)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..10000', coalesce(p_limit::text, 'NULL')
            USING ERRCODE = 'HR001';
    END IF;
    IF p_from_event_id IS NOT NULL AND p_before_event_id IS NOT NULL THEN
        RAISE EXCEPTION 'a page starts at an event or ends before one, not both'
            USING ERRCODE = 'HR001', HINT = 'give p_from_event_id or p_before_event_id';
    END IF;
    IF p_from_event_id < 1 OR p_before_event_id < 1 THEN
        RAISE EXCEPTION 'event id % is out of range: event ids start at 1',
            least(p_from_event_id, p_before_event_id) USING ERRCODE = 'HR001';
    END IF;
    IF p_from_event_id IS NOT NULL THEN
        RETURN QUERY
        SELECT 'event', ev.event_id, ev.event_type, ev.event_data, ev.created_at
        FROM harvest.events AS ev
        WHERE ev.execution_id = p_execution_id AND ev.event_id >= p_from_event_id
        ORDER BY ev.event_id LIMIT p_limit;
    ELSE
        RETURN QUERY
        SELECT 'event', ev.event_id, ev.event_type, ev.event_data, ev.created_at
        FROM harvest.events AS ev
        WHERE ev.execution_id = p_execution_id
          AND (p_before_event_id IS NULL OR ev.event_id < p_before_event_id)
        ORDER BY ev.event_id DESC LIMIT p_limit;
    END IF;
    RETURN QUERY
    SELECT 'signal', ev.event_id, ev.event_type, ev.event_data, ev.created_at
    FROM harvest.events AS ev
    WHERE ev.execution_id = p_execution_id AND ev.event_type = 'SignalReceived'
    ORDER BY ev.event_id DESC LIMIT p_limit;
    RETURN QUERY
    SELECT 'update', ev.event_id, ev.event_type, ev.event_data, ev.created_at
    FROM harvest.events AS ev
    WHERE ev.execution_id = p_execution_id AND ev.event_type = 'UpdateAccepted'
      AND NOT EXISTS (
          SELECT 1 FROM harvest.events AS done
          WHERE done.event_data ->> 'update_id' = ev.event_data ->> 'update_id'
            AND done.execution_id = p_execution_id AND done.event_type = 'UpdateCompleted')
    ORDER BY ev.event_id;
    RETURN QUERY
    SELECT 'reset', ev.event_id, ev.event_type, '{}'::jsonb, ev.created_at
    FROM harvest.events AS ev
    WHERE ev.execution_id = p_execution_id AND ev.event_type = 'WorkflowTaskCompleted'
    ORDER BY ev.event_id DESC LIMIT p_limit;
    RETURN QUERY
    SELECT 'count', coalesce(max(ev.event_id), 0), NULL::text,
           jsonb_build_object('events', count(*),
                              'signals', count(*) FILTER (WHERE ev.event_type = 'SignalReceived')),
           NULL::timestamptz
    FROM harvest.events AS ev
    WHERE ev.execution_id = p_execution_id;
END;
$$;

-- End a run at once: no cleanup code runs, open activities and timers are dropped.
CREATE OR REPLACE FUNCTION harvest.terminate_workflow(p_execution_id uuid, p_reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
BEGIN
    PERFORM harvest._check_reason('a terminate', p_reason);
    v_execution := harvest._lock_running_execution(p_execution_id, 'terminate');
    PERFORM harvest._audit('workflow.terminate', p_execution_id::text, NULL, jsonb_build_object(
        'reason', p_reason, 'workflow_name', v_execution.workflow_name));
    PERFORM harvest._terminate_execution(p_execution_id, p_reason);
END;
$$;

-- The one body of a terminate, for terminate_workflow and the batch by filter
-- (_act_on_workflows), on a run its caller locked and found live.
CREATE OR REPLACE FUNCTION harvest._terminate_execution(p_execution_id uuid, p_reason text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._append_event(p_execution_id, 'WorkflowTerminated',
        jsonb_build_object('reason', p_reason));
    PERFORM harvest._close_execution(p_execution_id, 'TERMINATED', NULL,
        jsonb_build_object('error_type', 'Terminated', 'message', coalesce(p_reason, 'terminated'),
                           'non_retryable', true, 'details', NULL));
END;
$$;

-- The operator's view of workflows: a filtered, keyset-paginated list and the
-- stack (what a run is waiting on).

-- The page cursor: base64 of "<created_at>|<id>", opaque to callers: the workflow list's
-- position, and with "|<as_of>|<scope>" a batch by filter's (_act_on_workflows: the time its
-- first step saw, and the action and filter it was made under). _decode_cursor reads both.
CREATE OR REPLACE FUNCTION harvest._encode_cursor(
    p_created_at timestamptz, p_id uuid, p_as_of timestamptz DEFAULT NULL, p_scope text DEFAULT NULL
)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT translate(encode(convert_to(
        to_char(p_created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '|' || p_id::text
        || CASE WHEN p_as_of IS NULL THEN ''
                ELSE '|' || to_char(p_as_of AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '|'
                     || coalesce(p_scope, '') END,
        'UTF8'), 'base64'), E'\n', '');
$$;

-- A time as a literal of dynamic SQL that reads back as the same instant in any session:
-- ISO in UTC with its era. (format's %L of a timestamptz prints it in the session's
-- DateStyle and zone, and the session reads it back with its timezone_abbreviations:
-- Asia/Kolkata in the Postgres style prints IST, which the Default set reads as Israel's
-- +02, so a filter from 03:00 UTC matched from 06:30 on PostgreSQL 15.)
CREATE OR REPLACE FUNCTION harvest._time_literal(p_at timestamptz)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT format('%L::timestamptz',
                  CASE WHEN isfinite(p_at) THEN to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z" BC')
                       ELSE p_at::text END);
$$;

-- The one reader of _encode_cursor's cursors: the position, and a batch's as_of and scope (NULL
-- in a list's cursor). Anything else, HR001.
CREATE OR REPLACE FUNCTION harvest._decode_cursor(
    p_cursor text, OUT created_at timestamptz, OUT id uuid, OUT as_of timestamptz, OUT scope text
)
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_parts text[];
BEGIN
    v_parts := string_to_array(convert_from(decode(p_cursor, 'base64'), 'UTF8'), '|');
    IF cardinality(v_parts) NOT IN (2, 4) THEN
        RAISE EXCEPTION 'parts';
    END IF;
    created_at := v_parts[1]::timestamptz;
    id := v_parts[2]::uuid;
    as_of := v_parts[3]::timestamptz;
    scope := nullif(v_parts[4], '');
    IF created_at IS NULL OR id IS NULL OR (cardinality(v_parts) = 4 AND as_of IS NULL) THEN
        RAISE EXCEPTION 'empty';
    END IF;
EXCEPTION
    WHEN OTHERS THEN
        RAISE EXCEPTION 'cursor "%" is malformed', left(p_cursor, 100) USING ERRCODE = 'HR001',
            HINT = 'pass the next_cursor you were given unchanged, or no cursor to start from the beginning';
END;
$$;

-- Whether p_value, text a filter compares as a number, is one PostgreSQL's numeric cannot
-- hold (1e999999): it failed as the query ran, "value overflows numeric format", a 400 that
-- named no field.
CREATE OR REPLACE FUNCTION harvest._number_out_of_range(p_value text)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_value !~ E'^-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?$' THEN
        RETURN false;
    END IF;
    PERFORM p_value::numeric;
    RETURN false;
EXCEPTION WHEN numeric_value_out_of_range THEN
    RETURN true;
END;
$$;

-- (harvest._search_attr_key_ok, the search attribute key rule, is in sql/executions.sql: the
-- CHECK of search_attribute_indexes.name calls it, so it exists before that table.)

-- Parse one search-attribute filter "key<op>value" into {key, op, value}.
-- Operators: = (or :), !=, >, >=, <, <=. Comparisons are typed by the value:
-- a number compares numerically, true/false as a boolean, an ISO timestamp as a
-- time, anything else as text.
CREATE OR REPLACE FUNCTION harvest._parse_search_filter(p_filter text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_match text[];
BEGIN
    -- The key: up to the operator (no space, =, !, <, >, :), then held to the key rule.
    v_match := regexp_match(coalesce(p_filter, ''), E'^\\s*([^\\s=!<>:]+)\\s*(>=|<=|!=|=|:|>|<)\\s*(.*)$');
    IF v_match IS NULL OR NOT harvest._search_attr_key_ok(v_match[1]) OR v_match[3] = '' THEN
        RAISE EXCEPTION 'search attribute filter "%" is malformed', left(p_filter, 200) USING ERRCODE = 'HR001',
            HINT = 'write key=value (or key:value), or key>value, key>=value, key<value, key<=value, key!=value';
    END IF;
    IF harvest._number_out_of_range(v_match[3]) THEN
        RAISE EXCEPTION 'search attribute filter "%" compares with a number out of range', left(p_filter, 200)
            USING ERRCODE = 'HR001', HINT = 'give a smaller number: numeric holds exponents up to about 131000';
    END IF;
    RETURN jsonb_build_object('key', v_match[1],
                              'op', CASE v_match[2] WHEN ':' THEN '=' ELSE v_match[2] END,
                              'value', v_match[3]);
END;
$$;

-- One search attribute's value as an operator's typed index orders it (docs/performance.md,
-- "Range tests on a search attribute"), over p_column (the list's alias e by default; the
-- index's own column for its CREATE INDEX); p_key is SQL (a quoted literal or a parameter),
-- p_type number or text. A number is NULL for a value of another JSON type (CASE fixes the
-- order: the cast only ever reads a number); text is the value's text. A range test on the key
-- is "<this> op value" beside the key's existence (?): with an index on this expression, partial
-- on the key's existence, the planner reads the runs in the range from it; without one, the
-- key's GIN entries find the runs and this is a filter on them.
CREATE OR REPLACE FUNCTION harvest._search_attr_ordered(
    p_key text, p_type text, p_column text DEFAULT 'e.search_attributes'
)
RETURNS text
LANGUAGE sql IMMUTABLE
RETURN CASE p_type
    WHEN 'number'
        THEN format(
            '(CASE WHEN jsonb_typeof(%1$s -> %2$s) = ''number'''
            ' THEN (%1$s ->> %2$s)::numeric END)', p_column, p_key
        )
    ELSE format('(%s ->> %s)', p_column, p_key)
END;

-- Whether one search attribute's value fits an index on its ordered value (the same SQL
-- conventions as _search_attr_ordered): its text at most 2000 bytes. A btree entry holds at most
-- 2704 bytes, so past that bound an index on the key refused every start carrying a longer value
-- (54000) and its CREATE INDEX over a run that carried one; the index is partial on this and a
-- range test is written with it, so a longer value is in no range, indexed or not.
CREATE OR REPLACE FUNCTION harvest._search_attr_fits(p_key text, p_column text DEFAULT 'e.search_attributes')
RETURNS text
LANGUAGE sql IMMUTABLE
RETURN format('octet_length(%s ->> %s) <= 2000', p_column, p_key);

-- The name of the owner's index on a search attribute's ordered value, and of its statistics
-- (`harvest search-attr index`): executions_attr_<key> for a key of lower-case letters, digits
-- and _ that fits (the name the docs gave before there was a command), else
-- executions_attr_<the key's first 30 characters folded to those>_<12 hex of its md5>, so a
-- key of any case, length or punctuation has a name of its own under 63 bytes. A plain name
-- never ends as a hashed one does, so no two keys share one.
CREATE OR REPLACE FUNCTION harvest._search_attr_index_name(p_key text)
RETURNS text
LANGUAGE sql IMMUTABLE
RETURN CASE
    WHEN p_key ~ '^[a-z0-9_]{1,47}$' AND p_key !~ '_[0-9a-f]{12}$' THEN 'executions_attr_' || p_key
    ELSE
        'executions_attr_' || left(regexp_replace(lower(p_key), '[^a-z0-9_]', '_', 'g'), 30)
        || '_' || left(md5(p_key), 12)
END;

-- The statements that index a search attribute for range tests, and drop that index, as the
-- schema owner runs them (harvest/db/search_indexes.py: `harvest search-attr index|unindex` and
-- `harvest migrate run`, each CONCURRENTLY outside a transaction): the index on
-- _search_attr_ordered's expression (the one the filters' range tests are written on), partial
-- on the key's existence, and statistics on the expression (the planner keeps none of a partial
-- index's own). Every name and the key are quoted here (%I, %L): nothing of p_key is spliced.
-- A key a filter cannot name (the rule of _parse_search_filter and _filter_term), or a type
-- other than number or text: HR001.
CREATE OR REPLACE FUNCTION harvest._search_attr_index_sql(
    p_key text, p_type text,
    OUT index_name text, OUT create_index text, OUT create_statistics text,
    OUT drop_index text, OUT drop_statistics text
)
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_expression text;
BEGIN
    IF NOT harvest._search_attr_key_ok(p_key) THEN
        RAISE EXCEPTION 'search attribute "%" cannot be indexed: a filter cannot name it', left(p_key, 100)
            USING ERRCODE = 'HR001',
            HINT = 'a search attribute key a filter names is letters, digits, _, . and - only';
    END IF;
    IF p_type IS NULL OR p_type NOT IN ('number', 'text') THEN
        RAISE EXCEPTION 'search attribute index type "%" is not number or text', p_type USING ERRCODE = 'HR001',
            HINT = 'number for a key whose range tests compare numbers, text for strings';
    END IF;
    v_expression := harvest._search_attr_ordered(quote_literal(p_key), p_type, 'search_attributes');
    index_name := harvest._search_attr_index_name(p_key);
    create_index := format('CREATE INDEX CONCURRENTLY %I ON harvest.executions (%s) WHERE search_attributes ? %L AND %s',
                           index_name, v_expression, p_key,
                           harvest._search_attr_fits(quote_literal(p_key), 'search_attributes'));
    create_statistics := format('CREATE STATISTICS IF NOT EXISTS harvest.%I ON (%s) FROM harvest.executions',
                                index_name, v_expression);
    drop_index := format('DROP INDEX CONCURRENTLY IF EXISTS harvest.%I', index_name);
    drop_statistics := format('DROP STATISTICS IF EXISTS harvest.%I', index_name);
END;
$$;

-- Whether p_index is the index _search_attr_index_sql makes for (p_key, p_type): on
-- harvest.executions, a plain btree on the same one expression with the same predicate, as this
-- server deparses them (compared with that index made on a scratch temporary table, dropped
-- again). An index of that name that is not (made by hand on another expression) is not taken
-- for the key's: `harvest search-attr index` refuses it, naming it.
CREATE OR REPLACE FUNCTION harvest._search_attr_index_matches(p_index regclass, p_key text, p_type text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_probe regclass;
    v_same boolean;
BEGIN
    CREATE TEMPORARY TABLE search_attr_index_probe (search_attributes jsonb);
    EXECUTE format('CREATE INDEX search_attr_index_probe_index ON pg_temp.search_attr_index_probe (%s)'
                   ' WHERE search_attributes ? %L AND %s',
                   harvest._search_attr_ordered(quote_literal(p_key), p_type, 'search_attributes'), p_key,
                   harvest._search_attr_fits(quote_literal(p_key), 'search_attributes'));
    v_probe := 'pg_temp.search_attr_index_probe_index'::regclass;
    SELECT coalesce(
               i.indrelid = 'harvest.executions'::regclass
               AND NOT i.indisunique AND i.indnatts = 1 AND c.relam = pc.relam
               AND pg_catalog.pg_get_expr(i.indexprs, i.indrelid) = pg_catalog.pg_get_expr(p.indexprs, p.indrelid)
               AND pg_catalog.pg_get_expr(i.indpred, i.indrelid) = pg_catalog.pg_get_expr(p.indpred, p.indrelid),
               false)
    INTO v_same
    FROM pg_catalog.pg_index AS i
    JOIN pg_catalog.pg_class AS c ON c.oid = i.indexrelid
    CROSS JOIN pg_catalog.pg_index AS p
    JOIN pg_catalog.pg_class AS pc ON pc.oid = p.indexrelid
    WHERE i.indexrelid = p_index AND p.indexrelid = v_probe;
    DROP TABLE pg_temp.search_attr_index_probe;
    RETURN coalesce(v_same, false);
END;
$$;

-- The search attributes indexed for range tests on this database (harvest.search_attribute_indexes)
-- with the state of each one's index: valid (the filters' plans may use it), invalid (a build
-- that was interrupted: `harvest search-attr index` or `harvest migrate run` drops and builds
-- it again) or missing; and its size in bytes.
CREATE OR REPLACE FUNCTION harvest.list_search_attribute_indexes()
RETURNS TABLE (
    name text, type text, index_name text, state text, size_bytes bigint, created_at timestamptz
)
LANGUAGE sql STABLE
AS $$
    SELECT d.name, d.type, d.index_name,
           CASE WHEN i.indexrelid IS NULL THEN 'missing'
                WHEN i.indisvalid THEN 'valid'
                ELSE 'invalid' END,
           pg_catalog.pg_relation_size(i.indexrelid),
           d.created_at
    FROM harvest.search_attribute_indexes AS d
    LEFT JOIN pg_catalog.pg_class AS c
        ON c.relname = d.index_name AND c.relnamespace = 'harvest'::regnamespace AND c.relkind = 'i'
    LEFT JOIN pg_catalog.pg_index AS i
        ON i.indexrelid = c.oid AND i.indrelid = 'harvest.executions'::regclass
    ORDER BY d.name;
$$;

-- The SQL predicate for one parsed filter (literals quoted with format %L).
-- A key may hold values of different JSON types across runs, so a typed cast is
-- only ever reached inside CASE WHEN jsonb_typeof(...) = <its type>: the planner
-- reorders AND-ed conditions by cost, and "typeof = 'boolean' AND (v)::boolean"
-- cast a number (invalid input syntax for type boolean: "5"). CASE fixes the order.
-- Each predicate is ANDed with a test the GIN index executions_search answers, which the
-- predicate implies: containment (@>) for =, the key's existence (?) otherwise, as the filter
-- expressions' terms are (_filter_term). Without it `--search-attr tenant=acme` read the list
-- down executions_created through every run until a page matched: 2.3 s for a tenant with no
-- runs among 2M (migration 0114).
CREATE OR REPLACE FUNCTION harvest._search_predicate(p_filter jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_key text := p_filter ->> 'key';
    v_op text := p_filter ->> 'op';
    v_value text := p_filter ->> 'value';
    v_attr text := format('(e.search_attributes -> %L)', v_key);
    v_text text := harvest._search_attr_ordered(quote_literal(v_key), 'text');
    v_has text := format('e.search_attributes ? %L', v_key);
    v_at timestamptz;
BEGIN
    IF v_value ~ E'^-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?$' AND v_op IN ('>', '>=', '<', '<=') THEN
        -- A range on a number: the typed value, NULL for a value of another type (a test only
        -- ever ANDed and ORed into a WHERE, where NULL keeps a run out as false does).
        RETURN format('(%s AND %s AND %s %s %L::numeric)', v_has, harvest._search_attr_fits(quote_literal(v_key)),
                      harvest._search_attr_ordered(quote_literal(v_key), 'number'), v_op, v_value);
    END IF;
    IF v_value ~ E'^-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?$' THEN
        -- A number compares numerically; "=" also matches the same text in a string.
        RETURN format('(%s AND CASE jsonb_typeof(%s) WHEN ''number'' THEN (%s)::numeric %s %L::numeric%s ELSE false END)',
                      CASE WHEN v_op = '=' THEN format('(e.search_attributes @> %L::jsonb OR e.search_attributes @> %L::jsonb)',
                                                       jsonb_build_object(v_key, v_value::numeric),
                                                       jsonb_build_object(v_key, v_value))
                           ELSE v_has END,
                      v_attr, v_text, CASE v_op WHEN '!=' THEN '<>' ELSE v_op END, v_value,
                      CASE WHEN v_op = '=' THEN format(' WHEN ''string'' THEN %s = %L', v_text, v_value) ELSE '' END);
    END IF;
    IF lower(v_value) IN ('true', 'false') AND v_op IN ('=', '!=') THEN
        RETURN format('(%s AND CASE WHEN jsonb_typeof(%s) = ''boolean'' THEN (%s)::boolean %s %L::boolean ELSE false END)',
                      CASE WHEN v_op = '=' THEN format('e.search_attributes @> %L::jsonb',
                                                       jsonb_build_object(v_key, lower(v_value)::boolean))
                           ELSE v_has END,
                      v_attr, v_text, CASE v_op WHEN '=' THEN '=' ELSE '<>' END, lower(v_value));
    END IF;
    IF v_op NOT IN ('=', '!=') THEN
        v_at := harvest._try_timestamptz(v_value);
    END IF;
    IF v_at IS NOT NULL THEN
        RETURN format('(%s AND jsonb_typeof(%s) = ''string'' AND harvest._try_timestamptz(%s) %s %s)',
                      v_has, v_attr, v_text, v_op, harvest._time_literal(v_at));
    END IF;
    IF v_op = '=' THEN
        -- (->> of an object or an array is its JSON text, which no containment of a string finds.)
        RETURN format('(%s AND %s = %L)',
                      CASE WHEN left(v_value, 1) IN ('{', '[') THEN v_has
                           ELSE format('e.search_attributes @> %L::jsonb', jsonb_build_object(v_key, v_value)) END,
                      v_text, v_value);
    END IF;
    RETURN format('(%s AND jsonb_typeof(%s) = ''string''%s AND %s %s %L)', v_has, v_attr,
                  CASE WHEN v_op <> '!=' THEN ' AND ' || harvest._search_attr_fits(quote_literal(v_key)) ELSE '' END,
                  v_text, CASE v_op WHEN '!=' THEN '<>' ELSE v_op END, v_value);
END;
$$;

-- A search attribute's text (stored, or a filter's value) as the time it names, the same in
-- every session: ISO 8601, a date or a date and time (T or a space, minutes, optional seconds
-- and fraction), UTC unless it ends in Z or a numeric offset (+02, +0200, +02:00); NULL for
-- any other text, which compares as text. (p_value::timestamptz read a time without an offset
-- in the session's zone, an abbreviation by its timezone_abbreviations and 05/01/2030 by its
-- DateStyle: one filter matched other runs in Pacific/Kiritimati than in UTC.)
CREATE OR REPLACE FUNCTION harvest._try_timestamptz(p_value text)
RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_match text[] := regexp_match(p_value, E'^(\\d{4}-\\d{2}-\\d{2})(?:[T ](\\d{2}:\\d{2}(?::\\d{2}(?:\\.\\d+)?)?)'
                                            || E'(Z|z|[+-]\\d{2}(?::?\\d{2})?)?)?$');
    v_offset interval := interval '0';
BEGIN
    IF v_match IS NULL THEN
        RETURN NULL;
    END IF;
    IF v_match[3] IS NOT NULL AND upper(v_match[3]) <> 'Z' THEN
        v_offset := make_interval(hours => substr(v_match[3], 2, 2)::integer,
                                  mins => coalesce(nullif(right(replace(v_match[3], ':', ''), -3), ''), '0')::integer);
        IF left(v_match[3], 1) = '-' THEN
            v_offset := -v_offset;
        END IF;
    END IF;
    -- (A timestamp without a zone from year-first digits reads the same in every DateStyle.)
    RETURN ((v_match[1] || ' ' || coalesce(v_match[2], '00:00'))::timestamp - v_offset) AT TIME ZONE 'UTC';
EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR invalid_parameter_value
               OR numeric_value_out_of_range THEN
    RETURN NULL;
END;
$$;

-- A filter expression (the workflow list's `filter`, docs/http-api.md "Filter expressions"):
--   expr := term { AND term } { OR term { AND term } }     (AND binds tighter; parentheses group)
--   term := '(' expr ')' | field op value | field IN '(' value { ',' value } ')'
-- field: workflow_name, status (or state), or a search attribute key; op: = != <> > >= < <=.
-- A quoted value ("..." or '...') is a string; a bare one a number, true/false, or a string.
-- It compiles to one parenthesised predicate over alias e in which every key and value is a
-- bound parameter ($1[i] of a text[] passed with EXECUTE ... USING), never spliced text. An OR
-- must find each of its sides through a search attribute (the GIN index executions_search) or
-- workflow_name = / IN (executions_name_created), so an OR never forces a full scan.
CREATE OR REPLACE FUNCTION harvest._filter_tokens(p_filter text, OUT kinds text[], OUT texts text[])
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_match text[];
BEGIN
    kinds := ARRAY[]::text[];
    texts := ARRAY[]::text[];
    FOR v_match IN
        SELECT regexp_matches(p_filter,
            E'\\s*(?:"((?:[^"\\\\]|\\\\.)*)"|''((?:[^''\\\\]|\\\\.)*)''|(>=|<=|!=|<>|=|>|<|\\(|\\)|,)|([A-Za-z0-9_.:+\\-]+)|(\\S))',
            'g')
    LOOP
        IF v_match[1] IS NOT NULL OR v_match[2] IS NOT NULL THEN
            kinds := array_append(kinds, 'value');
            texts := array_append(texts, regexp_replace(coalesce(v_match[1], v_match[2]), E'\\\\(.)', E'\\1', 'g'));
        ELSIF v_match[3] IS NOT NULL THEN
            kinds := array_append(kinds, 'punct');
            texts := array_append(texts, CASE v_match[3] WHEN '<>' THEN '!=' ELSE v_match[3] END);
        ELSIF v_match[4] IS NOT NULL THEN
            kinds := array_append(kinds, 'word');
            texts := array_append(texts, v_match[4]);
        ELSE
            RAISE EXCEPTION 'filter: unexpected "%" in "%"', v_match[5], p_filter USING ERRCODE = 'HR001',
                HINT = 'write key = value joined by AND / OR, with parentheses; quote a value that has spaces '
                       'or punctuation ("..." or ''...''), and close every quote';
        END IF;
    END LOOP;
END;
$$;

-- One side of an OR: terms joined by AND. Anchored when any term is.
CREATE OR REPLACE FUNCTION harvest._filter_and(
    p_kinds text[], p_texts text[], INOUT p_pos integer, INOUT p_params text[], p_depth integer,
    OUT o_sql text, OUT o_anchored boolean
)
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_term record;
    v_parts text[] := ARRAY[]::text[];
BEGIN
    o_anchored := false;
    LOOP
        SELECT * INTO v_term FROM harvest._filter_term(p_kinds, p_texts, p_pos, p_params, p_depth);
        p_pos := v_term.p_pos;
        p_params := v_term.p_params;
        v_parts := array_append(v_parts, v_term.o_sql);
        o_anchored := o_anchored OR v_term.o_anchored;
        EXIT WHEN p_kinds[p_pos] IS DISTINCT FROM 'word' OR upper(p_texts[p_pos]) <> 'AND';
        p_pos := p_pos + 1;
    END LOOP;
    o_sql := CASE WHEN cardinality(v_parts) = 1 THEN v_parts[1]
                  ELSE '(' || array_to_string(v_parts, ' AND ') || ')' END;
END;
$$;

-- Sides joined by OR; each side of an OR must be anchored (HR001 otherwise).
CREATE OR REPLACE FUNCTION harvest._filter_or(
    p_kinds text[], p_texts text[], INOUT p_pos integer, INOUT p_params text[], p_depth integer,
    OUT o_sql text, OUT o_anchored boolean
)
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_side record;
    v_parts text[] := ARRAY[]::text[];
    v_loose boolean := false;
BEGIN
    IF p_depth > 16 THEN
        RAISE EXCEPTION 'filter: parentheses nest deeper than 16' USING ERRCODE = 'HR001',
            HINT = 'flatten the expression';
    END IF;
    o_anchored := true;
    LOOP
        SELECT * INTO v_side FROM harvest._filter_and(p_kinds, p_texts, p_pos, p_params, p_depth);
        p_pos := v_side.p_pos;
        p_params := v_side.p_params;
        v_parts := array_append(v_parts, v_side.o_sql);
        v_loose := v_loose OR NOT v_side.o_anchored;
        o_anchored := o_anchored AND v_side.o_anchored;
        EXIT WHEN p_kinds[p_pos] IS DISTINCT FROM 'word' OR upper(p_texts[p_pos]) <> 'OR';
        p_pos := p_pos + 1;
    END LOOP;
    IF cardinality(v_parts) = 1 THEN
        o_sql := v_parts[1];
        RETURN;
    END IF;
    IF v_loose THEN
        RAISE EXCEPTION 'filter: each side of an OR must test a search attribute or workflow_name = / IN'
            USING ERRCODE = 'HR001',
            HINT = 'a side that tests only status or workflow_name != would scan every run: add a search '
                   'attribute or workflow_name test to it, or move the status test out of the OR (status = X AND (a OR b))';
    END IF;
    o_sql := '(' || array_to_string(v_parts, ' OR ') || ')';
END;
$$;

-- A parenthesised expression or one test.
CREATE OR REPLACE FUNCTION harvest._filter_term(
    p_kinds text[], p_texts text[], INOUT p_pos integer, INOUT p_params text[], p_depth integer,
    OUT o_sql text, OUT o_anchored boolean
)
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_inner record;
    v_field text;
    v_key text;
    v_op text;
    v_values text[] := ARRAY[]::text[];
    v_bare boolean[] := ARRAY[]::boolean[];
    v_parts text[] := ARRAY[]::text[];
    v_first integer;
    v_i integer;
    v_k integer;
    v_typed text;
    v_type text;
    v_attr text;
    v_hint constant text := 'write key = value, key IN (a, b), workflow_name = x, status = RUNNING, joined by AND / OR';
BEGIN
    IF p_kinds[p_pos] IS NULL THEN
        RAISE EXCEPTION 'filter: ends where a test was expected' USING ERRCODE = 'HR001', HINT = v_hint;
    END IF;
    IF p_kinds[p_pos] = 'punct' AND p_texts[p_pos] = '(' THEN
        SELECT * INTO v_inner FROM harvest._filter_or(p_kinds, p_texts, p_pos + 1, p_params, p_depth + 1);
        p_pos := v_inner.p_pos;
        p_params := v_inner.p_params;
        IF p_kinds[p_pos] IS DISTINCT FROM 'punct' OR p_texts[p_pos] <> ')' THEN
            RAISE EXCEPTION 'filter: "(" is not closed' USING ERRCODE = 'HR001', HINT = v_hint;
        END IF;
        p_pos := p_pos + 1;
        o_sql := v_inner.o_sql;
        o_anchored := v_inner.o_anchored;
        RETURN;
    END IF;
    v_field := p_texts[p_pos];
    IF p_kinds[p_pos] <> 'word' OR upper(v_field) IN ('AND', 'OR', 'IN')
       OR NOT harvest._search_attr_key_ok(v_field) THEN
        RAISE EXCEPTION 'filter: "%" is not a search attribute key, workflow_name or status', v_field
            USING ERRCODE = 'HR001', HINT = v_hint;
    END IF;
    p_pos := p_pos + 1;
    IF p_kinds[p_pos] = 'punct' AND p_texts[p_pos] IN ('=', '!=', '>', '>=', '<', '<=') THEN
        v_op := p_texts[p_pos];
        p_pos := p_pos + 1;
        IF p_kinds[p_pos] IS NULL OR p_kinds[p_pos] = 'punct'
           OR (p_kinds[p_pos] = 'word' AND upper(p_texts[p_pos]) IN ('AND', 'OR', 'IN')) THEN
            RAISE EXCEPTION 'filter: "% %" has no value', v_field, v_op USING ERRCODE = 'HR001', HINT = v_hint;
        END IF;
        v_values := ARRAY[p_texts[p_pos]];
        v_bare := ARRAY[p_kinds[p_pos] = 'word'];
        p_pos := p_pos + 1;
    ELSIF p_kinds[p_pos] = 'word' AND upper(p_texts[p_pos]) = 'IN' THEN
        v_op := 'IN';
        p_pos := p_pos + 1;
        IF p_kinds[p_pos] IS DISTINCT FROM 'punct' OR p_texts[p_pos] <> '(' THEN
            RAISE EXCEPTION 'filter: "% IN" needs a list: % IN (a, b)', v_field, v_field
                USING ERRCODE = 'HR001', HINT = v_hint;
        END IF;
        LOOP
            p_pos := p_pos + 1;
            IF p_kinds[p_pos] IS NULL OR p_kinds[p_pos] = 'punct' THEN
                RAISE EXCEPTION 'filter: the list of "% IN" has a missing value', v_field
                    USING ERRCODE = 'HR001', HINT = v_hint;
            END IF;
            v_values := array_append(v_values, p_texts[p_pos]);
            v_bare := array_append(v_bare, p_kinds[p_pos] = 'word');
            p_pos := p_pos + 1;
            EXIT WHEN p_kinds[p_pos] IS DISTINCT FROM 'punct' OR p_texts[p_pos] <> ',';
        END LOOP;
        IF p_kinds[p_pos] IS DISTINCT FROM 'punct' OR p_texts[p_pos] <> ')' THEN
            RAISE EXCEPTION 'filter: the list of "% IN" is not closed with ")"', v_field
                USING ERRCODE = 'HR001', HINT = v_hint;
        END IF;
        p_pos := p_pos + 1;
        IF cardinality(v_values) > 100 THEN
            RAISE EXCEPTION 'filter: "% IN" lists % values, over 100', v_field, cardinality(v_values)
                USING ERRCODE = 'HR001', HINT = 'split the list, or filter on a coarser attribute';
        END IF;
    ELSE
        RAISE EXCEPTION 'filter: "%" is not followed by an operator (=, !=, >, >=, <, <=, IN)', v_field
            USING ERRCODE = 'HR001', HINT = v_hint;
    END IF;
    IF cardinality(p_params) + cardinality(v_values) > 200 THEN
        RAISE EXCEPTION 'filter: more than 200 keys and values' USING ERRCODE = 'HR001',
            HINT = 'make the expression smaller';
    END IF;

    IF lower(v_field) IN ('workflow_name', 'status', 'state') THEN
        IF v_op NOT IN ('=', '!=', 'IN') THEN
            RAISE EXCEPTION 'filter: % takes =, != or IN, not %', lower(v_field), v_op
                USING ERRCODE = 'HR001', HINT = v_hint;
        END IF;
        IF lower(v_field) <> 'workflow_name' THEN
            v_field := 'status';
            FOR v_i IN 1 .. cardinality(v_values) LOOP
                v_values[v_i] := upper(v_values[v_i]);
                IF v_values[v_i] NOT IN ('RUNNING', 'PAUSED', 'COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED',
                                          'TIMED_OUT', 'CONTINUED_AS_NEW', 'MIGRATING', 'MIGRATED') THEN
                    RAISE EXCEPTION 'filter: unknown state "%"', v_values[v_i] USING ERRCODE = 'HR001',
                        HINT = 'use RUNNING, PAUSED, COMPLETED, FAILED, CANCELLED, TERMINATED, TIMED_OUT, '
                               'CONTINUED_AS_NEW, MIGRATING or MIGRATED';
                END IF;
            END LOOP;
        ELSE
            v_field := 'workflow_name';
        END IF;
        v_first := cardinality(p_params) + 1;
        p_params := p_params || v_values;
        o_sql := CASE v_op
            WHEN '=' THEN format('e.%I = $1[%s]', v_field, v_first)
            WHEN '!=' THEN format('e.%I <> $1[%s]', v_field, v_first)
            ELSE format('e.%I = ANY ($1[%s:%s])', v_field, v_first, cardinality(p_params)) END;
        o_anchored := v_field = 'workflow_name' AND v_op <> '!=';
        RETURN;
    END IF;

    -- A search attribute: the key and each value are parameters; each test goes through the
    -- GIN index (@> containment, ? key existence) before any typed comparison.
    p_params := array_append(p_params, v_field);
    v_k := cardinality(p_params);
    v_attr := format('(e.search_attributes -> $1[%s])', v_k);
    FOR v_i IN 1 .. cardinality(v_values) LOOP
        p_params := array_append(p_params, v_values[v_i]);
        v_type := 'string';
        v_typed := format('$1[%s]', cardinality(p_params));
        IF v_bare[v_i] AND v_values[v_i] ~ E'^-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?$' THEN
            IF harvest._number_out_of_range(v_values[v_i]) THEN
                RAISE EXCEPTION 'filter: % is a number out of range', left(v_values[v_i], 40)
                    USING ERRCODE = 'HR001', HINT = 'give a smaller number (numeric holds exponents up to about 131000), or quote it to compare text';
            END IF;
            v_type := 'number';
            v_typed := v_typed || '::numeric';
        ELSIF v_bare[v_i] AND lower(v_values[v_i]) IN ('true', 'false') THEN
            v_type := 'boolean';
            p_params[cardinality(p_params)] := lower(v_values[v_i]);
            v_typed := v_typed || '::boolean';
        END IF;
        IF v_op IN ('=', 'IN') THEN
            v_parts := array_append(v_parts, format('e.search_attributes @> jsonb_build_object($1[%s], %s)',
                                                    v_k, v_typed));
        ELSIF v_op = '!=' THEN
            v_parts := array_append(v_parts, format(
                '(e.search_attributes ? $1[%s] AND jsonb_typeof(%s) = %L'
                ' AND NOT e.search_attributes @> jsonb_build_object($1[%s], %s))',
                v_k, v_attr, v_type, v_k, v_typed));
        ELSIF v_type = 'boolean' THEN
            RAISE EXCEPTION 'filter: compare true or false with = or !=, not %', v_op USING ERRCODE = 'HR001',
                HINT = v_hint;
        ELSE
            -- The typed value (harvest._search_attr_ordered: a number NULL for a value of another
            -- type, so the cast runs only on a number), which an operator's index on the key
            -- answers; a test only ever ANDed and ORed into a WHERE, where NULL is as false.
            v_parts := array_append(v_parts, format(
                '(e.search_attributes ? $1[%s]%s AND %s AND %s %s %s)',
                v_k, CASE v_type WHEN 'string' THEN format(' AND jsonb_typeof(%s) = ''string''', v_attr) ELSE '' END,
                harvest._search_attr_fits(format('$1[%s]', v_k)),
                harvest._search_attr_ordered(format('$1[%s]', v_k), CASE v_type WHEN 'number' THEN 'number'
                                                                                  ELSE 'text' END),
                v_op, v_typed));
        END IF;
    END LOOP;
    o_sql := CASE WHEN cardinality(v_parts) = 1 THEN v_parts[1]
                  ELSE '(' || array_to_string(v_parts, ' OR ') || ')' END;
    o_anchored := true;
END;
$$;

-- The predicate and parameters of a filter expression (NULL or blank: none).
CREATE OR REPLACE FUNCTION harvest._compile_filter(p_filter text, OUT o_sql text, OUT o_params text[])
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_tokens record;
    v_tree record;
BEGIN
    o_params := ARRAY[]::text[];
    IF p_filter IS NULL OR btrim(p_filter) = '' THEN
        o_sql := 'true';
        RETURN;
    END IF;
    IF length(p_filter) > 4096 THEN
        RAISE EXCEPTION 'filter: % characters, over 4096', length(p_filter) USING ERRCODE = 'HR001',
            HINT = 'make the expression smaller';
    END IF;
    SELECT * INTO v_tokens FROM harvest._filter_tokens(p_filter);
    SELECT * INTO v_tree FROM harvest._filter_or(v_tokens.kinds, v_tokens.texts, 1, ARRAY[]::text[], 0);
    IF v_tree.p_pos <= cardinality(v_tokens.kinds) THEN
        RAISE EXCEPTION 'filter: unexpected "%" in "%"', v_tokens.texts[v_tree.p_pos], p_filter
            USING ERRCODE = 'HR001',
            HINT = 'join tests with AND or OR, and close every parenthesis';
    END IF;
    o_sql := v_tree.o_sql;
    o_params := v_tree.p_params;
END;
$$;

-- The WHERE conditions (over alias e) of the workflow list's filters, shared by
-- list_executions and count_executions so both read the same rows. An unknown
-- state or a malformed search filter raises HR001.
-- p_failing: true, only the runs whose workflow task is failing (its row holds the failure of
-- its last attempt: fail_workflow_task writes last_failure, a decision deletes the row), read
-- from tasks_workflow_failing (a few rows: the runs stuck so); false, only the others; NULL, all.
CREATE OR REPLACE FUNCTION harvest._execution_filters(
    p_status text, p_workflow_name text, p_search_attributes text[], p_created_after timestamptz,
    p_created_before timestamptz, p_workflow_id text DEFAULT NULL, p_failing boolean DEFAULT NULL
)
RETURNS text[]
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_states text[];
    v_state text;
    v_where text[] := ARRAY['true'];
    v_filter text;
BEGIN
    IF p_status IS NOT NULL THEN
        v_states := string_to_array(upper(replace(p_status, ' ', '')), ',');
        FOREACH v_state IN ARRAY v_states LOOP
            IF v_state NOT IN ('RUNNING', 'PAUSED', 'COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT',
                               'CONTINUED_AS_NEW', 'MIGRATING', 'MIGRATED') THEN
                -- The advice is the HINT alone: callers print the message and the hint joined.
                RAISE EXCEPTION 'unknown state "%"', p_status
                    USING ERRCODE = 'HR001',
                    HINT = 'use RUNNING, PAUSED, COMPLETED, FAILED, CANCELLED, TERMINATED, TIMED_OUT, CONTINUED_AS_NEW, '
                           'MIGRATING or MIGRATED (comma-separated for several)';
            END IF;
        END LOOP;
        -- One state as an equality: its runs come down executions_status_listed in the list's
        -- order (an = ANY of one element did not), so a page reads a page.
        v_where := v_where || CASE WHEN cardinality(v_states) = 1 THEN format('e.status = %L', v_states[1])
                                   ELSE format('e.status = ANY(%L::text[])', v_states) END;
    END IF;
    IF p_workflow_name IS NOT NULL THEN
        v_where := v_where || format('e.workflow_name = %L', p_workflow_name);
    END IF;
    -- The runs of one workflow id (a continue-as-new chain, a reset's forks, earlier runs that
    -- reused it): down executions_workflow_id_runs (a workflow id's runs are few). Empty: HR001, as
    -- an empty value would otherwise select every run.
    IF p_workflow_id = '' THEN
        RAISE EXCEPTION 'workflow_id is empty' USING ERRCODE = 'HR001',
            HINT = 'pass the workflow_id the runs were started with, or none for every run';
    END IF;
    IF p_workflow_id IS NOT NULL THEN
        v_where := v_where || format('e.workflow_id = %L', p_workflow_id);
    END IF;
    IF p_created_after IS NOT NULL THEN
        v_where := v_where || ('e.created_at >= ' || harvest._time_literal(p_created_after));
    END IF;
    IF p_created_before IS NOT NULL THEN
        v_where := v_where || ('e.created_at < ' || harvest._time_literal(p_created_before));
    END IF;
    -- Bounded as a filter expression is (its 200 keys and values): each filter is a test of the
    -- query, and 20,000 of them in one batch step's body were 8 s of a backend's CPU.
    IF cardinality(p_search_attributes) > 100 THEN
        RAISE EXCEPTION 'search attribute filters: % given, over 100', cardinality(p_search_attributes)
            USING ERRCODE = 'HR001', HINT = 'filter on fewer keys, or on a coarser attribute';
    END IF;
    FOREACH v_filter IN ARRAY coalesce(p_search_attributes, ARRAY[]::text[]) LOOP
        v_where := v_where || harvest._search_predicate(harvest._parse_search_filter(v_filter));
    END LOOP;
    IF p_failing IS NOT NULL THEN
        v_where := v_where || (CASE WHEN p_failing THEN '' ELSE 'NOT ' END
            || 'e.id IN (SELECT t.execution_id FROM harvest.tasks AS t'
            || ' WHERE t.kind = ''workflow'' AND t.last_failure IS NOT NULL)');
    END IF;
    RETURN v_where;
END;
$$;

-- The workflow list. Every filter is optional and they compose with AND; an
-- unknown state, a malformed search filter, a bad order or page size, an empty
-- workflow id or a malformed cursor raises HR001 (it never silently matches nothing).
-- Pages are keyset-paginated on (created_at, id): the last row of a page that
-- has more carries next_cursor; pass it back as p_cursor for the next page.
CREATE OR REPLACE FUNCTION harvest.list_executions(
    p_status text DEFAULT NULL,
    p_workflow_name text DEFAULT NULL,
    p_search_attributes text[] DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL,
    p_created_before timestamptz DEFAULT NULL,
    p_page_size integer DEFAULT 50,
    p_cursor text DEFAULT NULL,
    p_order text DEFAULT 'desc',
    p_filter text DEFAULT NULL,
    p_workflow_id text DEFAULT NULL,
    p_failing boolean DEFAULT NULL
)
RETURNS TABLE (
    execution_id uuid, workflow_name text, workflow_id text, status text, queue text,
    search_attributes jsonb, parent_id uuid, created_at timestamptz, completed_at timestamptz,
    error_summary text, task_error_type text, task_attempt integer, task_failing_since timestamptz,
    next_cursor text
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_order text := lower(coalesce(p_order, 'desc'));
    v_where text[];
    v_cursor record;
    v_sql text;
    v_count integer := 0;
    v_row record;
    v_filter record;
BEGIN
    IF v_order NOT IN ('asc', 'desc') THEN
        RAISE EXCEPTION 'order "%" is not asc or desc', p_order USING ERRCODE = 'HR001';
    END IF;
    IF p_page_size IS NULL OR p_page_size < 1 OR p_page_size > 1000 THEN
        RAISE EXCEPTION 'page size % is out of range 1..1000', p_page_size USING ERRCODE = 'HR001';
    END IF;
    v_where := harvest._execution_filters(p_status, p_workflow_name, p_search_attributes, p_created_after,
                                          p_created_before, p_workflow_id, p_failing);
    SELECT * INTO v_filter FROM harvest._compile_filter(p_filter);
    v_where := v_where || v_filter.o_sql;
    IF p_cursor IS NOT NULL AND p_cursor <> '' THEN
        SELECT * INTO v_cursor FROM harvest._decode_cursor(p_cursor);
        v_where := v_where || format('(e.created_at, e.id) %s (%s, %L::uuid)',
                                     CASE v_order WHEN 'asc' THEN '>' ELSE '<' END,
                                     harvest._time_literal(v_cursor.created_at), v_cursor.id);
    END IF;
    -- The page's runs first, then each one's failing workflow task (if any) down
    -- tasks_one_workflow_task: a probe per row of the page, never per run matched.
    v_sql := format(
        'SELECT p.*, t.last_failure ->> ''error_type'' AS task_error_type, t.attempt AS task_attempt,'
        ' (t.last_failure ->> ''failing_since'')::timestamptz AS task_failing_since'
        ' FROM (SELECT e.id, e.workflow_name, e.workflow_id, e.status, e.queue, e.search_attributes,'
        ' e.parent_id, e.created_at, e.completed_at,'
        ' (e.failure ->> ''error_type'') || '': '' || (e.failure ->> ''message'') AS error_summary'
        ' FROM harvest.executions AS e WHERE %s ORDER BY e.created_at %s, e.id %s LIMIT %s) AS p'
        ' LEFT JOIN harvest.tasks AS t ON t.execution_id = p.id AND t.kind = ''workflow'''
        ' AND t.last_failure IS NOT NULL'
        ' ORDER BY p.created_at %s, p.id %s',
        array_to_string(v_where, ' AND '), v_order, v_order, p_page_size + 1, v_order, v_order);
    -- Fetch one row past the page; each row is emitted one step late so the page's
    -- last row can carry next_cursor exactly when another row follows it.
    FOR v_row IN EXECUTE v_sql USING v_filter.o_params LOOP
        v_count := v_count + 1;
        IF v_count > 1 THEN
            IF v_count > p_page_size THEN
                next_cursor := harvest._encode_cursor(created_at, execution_id);
                RETURN NEXT;
                RETURN;
            END IF;
            RETURN NEXT;
        END IF;
        execution_id := v_row.id;
        workflow_name := v_row.workflow_name;
        workflow_id := v_row.workflow_id;
        status := v_row.status;
        queue := v_row.queue;
        search_attributes := v_row.search_attributes;
        parent_id := v_row.parent_id;
        created_at := v_row.created_at;
        completed_at := v_row.completed_at;
        error_summary := v_row.error_summary;
        task_error_type := v_row.task_error_type;
        task_attempt := v_row.task_attempt;
        task_failing_since := v_row.task_failing_since;
        next_cursor := NULL;
    END LOOP;
    IF v_count > 0 THEN
        RETURN NEXT;
    END IF;
END;
$$;

-- How many executions match the workflow list's filters, per status (default),
-- per workflow name, or per both ('all'); the column not grouped on is NULL.
-- p_limit: count at most that many runs of each status (grouped by status only, else HR001),
-- each status's runs read down executions_status_listed and the count stopped there; a group
-- that reached it says capped (at least that many). The dashboard's status chips count so
-- (migration 0114): an exact count reads every matching run, 0.8 s for 2M runs on each view.
-- NULL: every run counted, capped false.
CREATE OR REPLACE FUNCTION harvest.count_executions(
    p_group_by text DEFAULT 'status',
    p_status text DEFAULT NULL,
    p_workflow_name text DEFAULT NULL,
    p_search_attributes text[] DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL,
    p_created_before timestamptz DEFAULT NULL,
    p_filter text DEFAULT NULL,
    p_limit integer DEFAULT NULL,
    p_workflow_id text DEFAULT NULL,
    p_failing boolean DEFAULT NULL
)
RETURNS TABLE (status text, workflow_name text, executions bigint, capped boolean)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_by text := lower(coalesce(p_group_by, 'status'));
    v_filter record;
    v_where text;
    v_state text;
    v_count bigint;
    v_states text[] := ARRAY[]::text[];
    v_counts bigint[] := ARRAY[]::bigint[];
BEGIN
    IF v_by NOT IN ('status', 'workflow_name', 'all') THEN
        RAISE EXCEPTION 'cannot count executions by "%"', p_group_by USING ERRCODE = 'HR001',
            HINT = 'group by status, workflow_name or all';
    END IF;
    IF p_limit IS NOT NULL AND (p_limit < 1 OR v_by <> 'status') THEN
        RAISE EXCEPTION 'a count of at most % runs a group: %', p_limit,
            CASE WHEN p_limit < 1 THEN 'the limit is below 1' ELSE 'it groups by status only' END
            USING ERRCODE = 'HR001', HINT = 'pass a limit of 1 or more with group by status, or no limit';
    END IF;
    SELECT * INTO v_filter FROM harvest._compile_filter(p_filter);
    v_where := array_to_string(harvest._execution_filters(p_status, p_workflow_name, p_search_attributes,
                                                          p_created_after, p_created_before, p_workflow_id,
                                                          p_failing)
                               || v_filter.o_sql, ' AND ');
    IF p_limit IS NULL THEN
        RETURN QUERY EXECUTE format(
            'SELECT %s, %s, count(*), false FROM harvest.executions AS e WHERE %s GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2',
            CASE WHEN v_by IN ('status', 'all') THEN 'e.status' ELSE 'NULL::text' END,
            CASE WHEN v_by IN ('workflow_name', 'all') THEN 'e.workflow_name' ELSE 'NULL::text' END,
            v_where)
        USING v_filter.o_params;
        RETURN;
    END IF;
    -- One bounded count a state (the filters' own state test narrows them further).
    FOR v_state IN
        SELECT s.state FROM unnest(ARRAY['RUNNING', 'PAUSED', 'COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED',
                                         'TIMED_OUT', 'CONTINUED_AS_NEW', 'MIGRATING', 'MIGRATED']) AS s (state)
        ORDER BY 1
    LOOP
        EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM harvest.executions AS e WHERE e.status = %L AND %s LIMIT %s) AS c',
                       v_state, v_where, p_limit)
        INTO v_count USING v_filter.o_params;
        IF v_count > 0 THEN
            v_states := v_states || v_state;
            v_counts := v_counts || v_count;
        END IF;
    END LOOP;
    RETURN QUERY
    SELECT c.state, NULL::text, c.n, c.n >= p_limit
    FROM unnest(v_states, v_counts) AS c (state, n)
    ORDER BY c.n DESC, c.state;
END;
$$;

-- Whether the run p_execution_id, locked by the caller, still matches p_where (the batch's
-- compiled filter, _act_on_workflows; p_params its $1): read again under the lock, since the
-- scan that chose it read it unlocked and another session may have changed it since.
CREATE OR REPLACE FUNCTION harvest._still_selected(p_where text[], p_params text[], p_execution_id uuid)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_found boolean;
BEGIN
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM harvest.executions AS e WHERE e.id = $2 AND %s)',
                   array_to_string(p_where, ' AND '))
    INTO v_found USING p_params, p_execution_id;
    RETURN v_found;
END;
$$;

-- Cancel, terminate, signal, pause or resume the live runs a filter selects, a bounded step at a
-- time (docs/operations.md, "Acting on many runs"). The filters are the workflow list's; at
-- least one of p_workflow_name, p_search_attributes, p_created_after, p_created_before
-- or p_filter must be given (a state alone, or nothing, would select every live run:
-- HR001), and p_status may name only RUNNING and PAUSED (by default both; a pause's RUNNING
-- alone, a resume's PAUSED alone). One call scans this shard's
-- live runs oldest first (created_at, id) after p_cursor, at most p_limit (1..1000) of
-- them, and acts on each in a subtransaction of its own: a run that ended since the scan
-- counts in already_ended, a cancel already requested (or a signal of this batch already
-- received, a run paused or resumed already) in unchanged, and so does a run that no longer matches the filter once locked (a
-- PAUSED run resumed since the scan, its search attributes changed: the scan read it unlocked),
-- and any other refusal in failures, never aborting the rest. A deadlock (40P01) on a run rolls
-- back that run's subtransaction alone and is tried again in place after a pause, three attempts
-- in all, before it counts in failures (with its attempts); a serialization failure (40001: a
-- REPEATABLE READ or SERIALIZABLE caller's) counts at once, as a retry in the same snapshot meets
-- it again.
-- A run sealed by a rebalance since the scan, or a copy still being moved here, is named
-- in moved, untouched: the caller acts on it where it lives (harvest.client.batch).
-- next_cursor continues the scan (NULL: this shard is done); the first call fixes the
-- batch's as_of (runs created later are never selected) and both ride in the cursor.
-- p_execution_ids instead of a scan: act on those runs alone (the caller following a
-- moved run to its residence), a seal raising HR013 as the per-id calls do. p_batch_id
-- (NULL: a new one) links the calls of one batch: each call writes one audit row naming
-- it, and a signal's signal_id is the batch id, so a run is signalled once per batch
-- however often it is found. p_dry_run writes nothing: matched counts every live run the
-- filter selects after the cursor, execution_ids is the first p_limit of them. shard_id
-- names the shard that answered.
CREATE OR REPLACE FUNCTION harvest._act_on_workflows(
    p_action text, p_status text, p_workflow_name text, p_search_attributes text[],
    p_created_after timestamptz, p_created_before timestamptz, p_filter text, p_reason text,
    p_signal_name text, p_payload jsonb, p_cursor text, p_limit integer, p_dry_run boolean,
    p_operator_id text, p_batch_id text, p_execution_ids uuid[], p_workflow_id text DEFAULT NULL,
    p_failing boolean DEFAULT NULL, p_reset_to text DEFAULT NULL, p_signal_reapply text DEFAULT NULL,
    p_before timestamptz DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_dry boolean := coalesce(p_dry_run, false);
    v_plan record;  -- (a reset: _reset_plan of the run)
    v_statuses text[] := ARRAY['RUNNING', 'PAUSED'];
    v_where text[];
    v_filter record;
    v_cursor record;
    v_as_of timestamptz;
    v_scope text;
    v_batch text := coalesce(nullif(btrim(p_batch_id), ''), gen_random_uuid()::text);
    v_row record;
    v_execution harvest.executions;
    v_rows integer := 0;
    v_matched bigint;
    v_last_created timestamptz;
    v_last_id uuid;
    v_more boolean := false;
    v_acted uuid[] := ARRAY[]::uuid[];
    v_moved uuid[] := ARRAY[]::uuid[];
    v_ended integer := 0;
    v_unchanged integer := 0;
    v_failures jsonb := '[]'::jsonb;
    v_sql text;
    v_params text[] := ARRAY[]::text[];
    v_holding boolean := false;  -- an earlier run's subtransaction committed: its row locks stay
    v_changed boolean;
    v_forks integer := 0;  -- (a reset: forks left at their own fork boundary, counted in unchanged too)
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..1000', p_limit USING ERRCODE = 'HR001',
            HINT = 'act on at most 1000 runs a call; continue with next_cursor';
    END IF;
    IF p_action = 'signal' AND NOT v_dry THEN  -- (a dry run counts the runs: it sends nothing)
        IF p_signal_name IS NULL OR btrim(p_signal_name) = '' THEN
            RAISE EXCEPTION 'signal name is empty' USING ERRCODE = 'HR001',
                HINT = 'name the signal the runs wait for';
        END IF;
        PERFORM harvest._check_sent(format('the payload of signal %s', p_signal_name), p_payload,
                                       harvest._payload_limit());
    END IF;
    IF p_action = 'reset' THEN
        IF p_reset_to IS NULL OR p_reset_to NOT IN ('before_time', 'first_workflow_task') THEN
            RAISE EXCEPTION 'unknown reset point "%"', p_reset_to USING ERRCODE = 'HR001',
                HINT = 'use before_time (the last completed workflow task written before p_before: the bad '
                       'deploy''s time) or first_workflow_task (the run from its start)';
        END IF;
        IF p_reset_to = 'before_time' AND p_before IS NULL AND NOT v_dry THEN  -- (a dry run only counts)
            RAISE EXCEPTION 'the reset point before_time needs a time (p_before)' USING ERRCODE = 'HR001',
                HINT = 'give the bad deploy''s time, e.g. --before 2026-05-03T14:00:00Z, or use first_workflow_task';
        END IF;
        IF p_before > harvest.now() THEN
            RAISE EXCEPTION 'the time % is in the future: a bad deploy''s time has passed', harvest._iso_time(p_before)
                USING ERRCODE = 'HR001',
                HINT = 'give the deploy''s time with its offset (a time without one is UTC), e.g. --before '
                       '2026-05-03T14:00:00Z';
        END IF;
        IF p_reset_to = 'first_workflow_task' AND p_before IS NOT NULL THEN
            RAISE EXCEPTION 'a time (p_before) is only for the reset point before_time' USING ERRCODE = 'HR001',
                HINT = 'leave the time out, or use before_time';
        END IF;
        PERFORM harvest._check_signal_reapply(p_signal_reapply);
        IF NOT v_dry AND (p_reason IS NULL OR btrim(p_reason) = '') THEN
            RAISE EXCEPTION 'a reset needs a reason' USING ERRCODE = 'HR001',
                HINT = 'say why, e.g. --reason "recover from bad deploy 2026-05-03"';
        END IF;
    END IF;
    -- The reason is written into each run's history: bounded, or one step wrote up to 1000
    -- copies of whatever came (an API body's 64 MiB each). (A batch by filter or by ids.)
    IF NOT v_dry THEN
        PERFORM harvest._check_reason(format('a batch %s', p_action), p_reason);
    END IF;
    IF p_execution_ids IS NULL THEN
        -- (failing true names the runs whose workflow task fails, a few; false, nearly every run.)
        IF p_workflow_name IS NULL AND p_workflow_id IS NULL AND coalesce(cardinality(p_search_attributes), 0) = 0
           AND p_created_after IS NULL AND p_created_before IS NULL AND nullif(btrim(p_filter), '') IS NULL
           AND p_failing IS NOT TRUE THEN
            RAISE EXCEPTION 'a % by filter needs a filter: none of workflow name, workflow id, search attributes, '
                            'created after, created before, failing or a filter expression was given', p_action
                USING ERRCODE = 'HR001',
                HINT = 'name the runs (e.g. a workflow name and created before a time); a state alone would '
                       'select every live run';
        END IF;
        -- (A pause selects the RUNNING runs and a resume the PAUSED ones unless p_status says otherwise:
        -- the others would only count unchanged.)
        -- (A reset selects the RUNNING runs, the only ones a reset takes (reset.sql: a paused run is
        -- resumed first, a terminal one refused).)
        IF p_action = 'pause' THEN
            v_statuses := ARRAY['RUNNING'];
        ELSIF p_action = 'resume' THEN
            v_statuses := ARRAY['PAUSED'];
        ELSIF p_action = 'reset' THEN
            v_statuses := ARRAY['RUNNING'];
        END IF;
        IF p_status IS NOT NULL THEN
            v_statuses := string_to_array(upper(replace(p_status, ' ', '')), ',');
            IF p_action = 'reset' AND (NOT v_statuses <@ ARRAY['RUNNING'] OR cardinality(v_statuses) = 0) THEN
                RAISE EXCEPTION 'cannot reset runs in state "%": only running runs can be', p_status
                    USING ERRCODE = 'HR001', HINT = 'give RUNNING (the default); resume paused runs first';
            ELSIF p_action <> 'reset' AND (NOT v_statuses <@ ARRAY['RUNNING', 'PAUSED'] OR cardinality(v_statuses) = 0) THEN
                RAISE EXCEPTION 'cannot % runs in state "%": only live runs can be', p_action, p_status
                    USING ERRCODE = 'HR001', HINT = 'give RUNNING, PAUSED or both (the default)';
            END IF;
        END IF;
        -- A cursor goes on with the action and the filter it was made under: another's would take
        -- its position into a set it never scanned (a list's cursor, with no scope, is refused so too);
        -- a signal's with its name and payload too (another signal under the batch's id would be
        -- sent to the runs after the cursor only, and counted unchanged on a run the first reached).
        -- (The times as epochs: a timestamptz's JSON text carries the session's TimeZone, and a
        -- cursor goes on from another session.)
        v_scope := md5(jsonb_build_array(p_action, v_statuses, p_workflow_name, p_search_attributes,
                                         extract(EPOCH FROM p_created_after), extract(EPOCH FROM p_created_before),
                                         p_filter, p_signal_name, p_payload)::text
                     -- (Appended only when given, nothing otherwise: a cursor made before p_workflow_id
                     -- or p_failing goes on. A '[]' appended, as it was, changed every scope.)
                     || CASE WHEN p_workflow_id IS NOT NULL THEN jsonb_build_array(p_workflow_id)::text ELSE '' END
                     || CASE WHEN p_failing IS NOT NULL
                             THEN jsonb_build_array(jsonb_build_object('failing', p_failing))::text ELSE '' END
                     || CASE WHEN p_action = 'reset'
                             THEN jsonb_build_array(p_reset_to, p_signal_reapply, extract(EPOCH FROM p_before))::text
                             ELSE '' END);
        IF p_cursor IS NOT NULL AND p_cursor <> '' THEN
            SELECT * INTO v_cursor FROM harvest._decode_cursor(p_cursor);  -- (HR001: not a cursor)
            IF v_cursor.scope IS DISTINCT FROM v_scope THEN
                RAISE EXCEPTION 'the cursor was made for another action or filter' USING ERRCODE = 'HR001',
                    HINT = 'pass the next_cursor with the action and the filter (a signal''s name and payload) of '
                           'the call that gave it, or no cursor to start a new batch';
            END IF;
            v_as_of := v_cursor.as_of;
        ELSE
            v_as_of := harvest.now();
        END IF;
        v_where := harvest._execution_filters(NULL, p_workflow_name, p_search_attributes, p_created_after,
                                              p_created_before, p_workflow_id, p_failing)
                   || ('e.created_at <= ' || harvest._time_literal(v_as_of));
        SELECT * INTO v_filter FROM harvest._compile_filter(p_filter);
        v_where := v_where || v_filter.o_sql;
        v_params := v_filter.o_params;
        IF p_cursor IS NOT NULL AND p_cursor <> '' THEN
            v_where := v_where || format('(e.created_at, e.id) > (%s, %L::uuid)',
                                         harvest._time_literal(v_cursor.created_at), v_cursor.id);
        END IF;
        -- A copy a rebalance is moving (MIGRATING) is listed too when RUNNING runs are asked
        -- for, as moved: only RUNNING runs are moved, and where it is live is the caller's to find.
        v_where := v_where || format('e.status = ANY(%L::text[])', CASE WHEN 'RUNNING' = ANY(v_statuses)
            THEN v_statuses || 'MIGRATING'::text ELSE v_statuses END);
        IF v_dry THEN
            EXECUTE format('SELECT count(*) FROM harvest.executions AS e WHERE %s', array_to_string(v_where, ' AND '))
            INTO v_matched USING v_params;
            EXECUTE format('SELECT coalesce(array_agg(s.id ORDER BY s.created_at, s.id), ARRAY[]::uuid[]) FROM ('
                           'SELECT e.id, e.created_at FROM harvest.executions AS e WHERE %s '
                           'ORDER BY e.created_at, e.id LIMIT %s) AS s',
                           array_to_string(v_where, ' AND '), p_limit)
            INTO v_acted USING v_params;
            RETURN jsonb_build_object('action', p_action, 'dry_run', true, 'batch_id', v_batch,
                'shard_id', harvest.get_shard_id(),
                'matched', v_matched, 'acted', 0, 'already_ended', 0, 'unchanged', 0,
                'execution_ids', to_jsonb(v_acted), 'moved', '[]'::jsonb, 'failures', '[]'::jsonb,
                'next_cursor', NULL)
                -- (a reset's: each selected run's point, or why it has none: reset.sql's _reset_points)
                || CASE WHEN p_action = 'reset'
                        THEN jsonb_build_object('points', harvest._reset_points(v_acted, p_reset_to, p_before, v_batch))
                        ELSE '{}'::jsonb END;
        END IF;
        v_sql := format('SELECT e.id, e.created_at, e.status FROM harvest.executions AS e WHERE %s '
                        'ORDER BY e.created_at, e.id LIMIT %s', array_to_string(v_where, ' AND '), p_limit + 1);
    ELSE
        IF cardinality(p_execution_ids) > p_limit THEN
            RAISE EXCEPTION '% execution ids given, more than the limit %', cardinality(p_execution_ids), p_limit
                USING ERRCODE = 'HR001', HINT = 'pass at most limit ids a call';
        END IF;
        v_sql := 'SELECT u.id, NULL::timestamptz AS created_at, NULL::text AS status FROM unnest($2) AS u (id)';
    END IF;
    FOR v_row IN EXECUTE v_sql USING v_params, p_execution_ids LOOP
        v_rows := v_rows + 1;
        IF v_rows > p_limit THEN
            v_more := true;
            EXIT;
        END IF;
        v_last_created := v_row.created_at;
        v_last_id := v_row.id;
        IF v_row.status = 'MIGRATING' THEN
            v_moved := v_moved || v_row.id;
            CONTINUE;
        END IF;
        IF v_dry THEN  -- (explicit ids: a dry run names them, and writes nothing)
            v_acted := v_acted || v_row.id;
            CONTINUE;
        END IF;
        -- Each run in a subtransaction of its own; a deadlock on it (its
        -- locks met another session's in a cycle: a worker closing the run, an operator's own
        -- call) rolls back this run's work alone, which frees what it held, and while the step
        -- holds no earlier run's locks it is tried again after a short pause (50 ms, then 100),
        -- three attempts in all, before it counts as failed. Holding an earlier run's row, a retry
        -- would meet the same cycle with the other session waiting the longer, whose own deadlock
        -- check then aborts that session's transaction (a worker's, a caller's): the run counts
        -- as failed at once instead, and the batch run again takes it.
        FOR v_attempt IN 1..3 LOOP
            BEGIN
                IF p_action = 'reset' THEN  -- (the key's start lock before the run's row, as reset_workflow)
                    PERFORM harvest._lock_start_key(e.workflow_name, e.workflow_id)
                    FROM harvest.executions AS e WHERE e.id = v_row.id;
                END IF;
                v_execution := harvest._lock_execution(v_row.id);
                IF p_execution_ids IS NULL AND v_execution.status IN ('MIGRATED', 'MIGRATING') THEN
                    v_moved := v_moved || v_row.id;  -- sealed since the scan
                ELSIF v_execution.status NOT IN ('RUNNING', 'PAUSED', 'MIGRATED', 'MIGRATING') THEN
                    v_ended := v_ended + 1;  -- it ended since the scan: counted, not an error
                ELSIF p_execution_ids IS NULL AND NOT harvest._still_selected(v_where, v_params, v_row.id) THEN
                    v_unchanged := v_unchanged + 1;  -- it left the filter since the scan (resumed, paused, retagged)
                ELSE
                    v_execution := harvest._lock_running_execution(v_row.id, p_action);  -- (HR013 on a seal)
                    IF p_action = 'cancel' THEN
                        IF harvest._request_cancel(v_execution, p_reason) THEN
                            v_acted := v_acted || v_row.id;
                        ELSE
                            v_unchanged := v_unchanged + 1;
                        END IF;
                    ELSIF p_action = 'terminate' THEN
                        PERFORM harvest._terminate_execution(v_row.id, p_reason);
                        v_acted := v_acted || v_row.id;
                    ELSIF p_action = 'reset' THEN
                        -- (reset.sql, _reset_plan: the dry run's points read the same rule)
                        v_plan := harvest._reset_plan(v_execution, p_reset_to, p_before, v_batch);
                        IF v_plan.p_outcome = 'no_point' THEN
                            RAISE EXCEPTION 'run % has %', v_row.id, v_plan.p_why
                                || ': reset it with first_workflow_task, or alone with harvest workflow '
                                   'reset --to-event (its --dry-run says which points are valid)'
                                USING ERRCODE = 'HR001',
                                HINT = 'harvest workflow stack shows what the run waits on';
                        ELSIF v_plan.p_outcome = 'reset' THEN
                            PERFORM harvest._reset_execution(v_row.id, v_plan.p_point, p_reason, p_operator_id,
                                                             p_signal_reapply, false, v_batch);
                            v_acted := v_acted || v_row.id;
                        ELSE  -- own_batch, fork_boundary (no_time never: a step without a time is refused)
                            v_unchanged := v_unchanged + 1;
                            v_forks := v_forks + (v_plan.p_outcome = 'fork_boundary')::integer;
                        END IF;
                    ELSIF p_action IN ('pause', 'resume') THEN  -- (lifecycle.sql: false when so already)
                        v_changed := CASE p_action WHEN 'pause' THEN harvest._pause_execution(v_execution, p_reason, p_operator_id)
                                     ELSE harvest._resume_execution(v_execution, p_reason, p_operator_id) END;
                        IF v_changed THEN
                            v_acted := v_acted || v_row.id;
                        ELSE
                            v_unchanged := v_unchanged + 1;
                        END IF;
                    ELSIF EXISTS (SELECT 1 FROM harvest.events AS ev
                                  WHERE ev.execution_id = v_row.id AND ev.event_type = 'SignalReceived'
                                    AND ev.event_data ->> 'signal_id' = v_batch) THEN
                        v_unchanged := v_unchanged + 1;  -- this batch's signal is there already
                    ELSE
                        PERFORM harvest._signal_workflow(v_row.id, p_signal_name, p_payload, v_batch, NULL,
                                                         NULL, NULL, NULL);
                        v_acted := v_acted || v_row.id;
                    END IF;
                END IF;
                v_holding := true;  -- (this subtransaction commits: the rows it locked stay locked)
            EXCEPTION
                WHEN SQLSTATE '40P01' THEN
                    -- (Not a 40001: a READ COMMITTED step never meets one, and a REPEATABLE READ or
                    -- SERIALIZABLE caller's would meet it again in its transaction's snapshot.)
                    IF v_attempt < 3 AND NOT v_holding THEN
                        -- Rolled back, and tried again after a pause that lets the other session
                        -- take what this run's work had held (retried at once, this session can
                        -- take the run's row first and meet the same cycle again).
                        PERFORM pg_sleep(0.05 * v_attempt);
                        CONTINUE;
                    END IF;
                    v_failures := v_failures || jsonb_build_object('execution_id', v_row.id, 'sqlstate', SQLSTATE,
                                                                   'error', SQLERRM, 'attempts', v_attempt);
                WHEN SQLSTATE 'HR013' THEN
                    IF p_execution_ids IS NOT NULL THEN
                        RAISE;  -- the caller follows the seal to the run's residence
                    END IF;
                    v_moved := v_moved || v_row.id;
                WHEN SQLSTATE 'HR002' THEN
                    v_failures := v_failures || jsonb_build_object('execution_id', v_row.id, 'sqlstate', 'HR002',
                                                                   'error', SQLERRM);
                WHEN OTHERS THEN
                    v_failures := v_failures || jsonb_build_object('execution_id', v_row.id, 'sqlstate', SQLSTATE,
                                                                   'error', SQLERRM);
            END;
            EXIT;  -- (acted on, counted or failed: only a deadlock goes round again)
        END LOOP;
    END LOOP;
    IF NOT v_dry AND v_rows > 0 THEN
        PERFORM harvest._audit('workflow.bulk_' || p_action, NULL, p_operator_id, jsonb_strip_nulls(jsonb_build_object(
            'batch_id', v_batch, 'status', p_status, 'workflow_name', p_workflow_name, 'workflow_id', p_workflow_id,
            'search_attributes', to_jsonb(p_search_attributes), 'created_after', p_created_after,
            'created_before', p_created_before, 'filter', p_filter, 'failing', p_failing, 'reason', p_reason,
            'signal_name', p_signal_name, 'reset_to', p_reset_to, 'signal_reapply', p_signal_reapply,
            'before', p_before,
            'as_of', v_as_of, 'limit', p_limit,
            'scanned', least(v_rows, p_limit), 'acted', cardinality(v_acted), 'already_ended', v_ended,
            'unchanged', v_unchanged, 'moved', cardinality(v_moved), 'failed', jsonb_array_length(v_failures),
            'forks_kept', CASE WHEN p_action = 'reset' THEN v_forks END,
            'execution_ids', to_jsonb(v_acted))));
    END IF;
    RETURN jsonb_build_object('action', p_action, 'dry_run', v_dry, 'batch_id', v_batch,
        'shard_id', harvest.get_shard_id(),
        'matched', least(v_rows, p_limit), 'acted', CASE WHEN v_dry THEN 0 ELSE cardinality(v_acted) END,
        'already_ended', v_ended, 'unchanged', v_unchanged, 'execution_ids', to_jsonb(v_acted),
        'moved', to_jsonb(v_moved), 'failures', v_failures,
        'next_cursor', CASE WHEN v_more THEN harvest._encode_cursor(v_last_created, v_last_id, v_as_of, v_scope) END)
        -- (a reset's: of unchanged, the reset's forks its point did not take back past their fork boundary)
        || CASE WHEN p_action = 'reset' AND NOT v_dry THEN jsonb_build_object('forks_kept', v_forks) ELSE '{}'::jsonb END
        || CASE WHEN p_action = 'reset' AND v_dry  -- (by ids: each named run's point, as by filter above)
                THEN jsonb_build_object('points', harvest._reset_points(v_acted, p_reset_to, p_before, v_batch))
                ELSE '{}'::jsonb END;
END;
$$;

CREATE OR REPLACE FUNCTION harvest.cancel_workflows(
    p_status text DEFAULT NULL, p_workflow_name text DEFAULT NULL, p_search_attributes text[] DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL, p_created_before timestamptz DEFAULT NULL,
    p_filter text DEFAULT NULL, p_reason text DEFAULT NULL, p_cursor text DEFAULT NULL,
    p_limit integer DEFAULT 50, p_dry_run boolean DEFAULT false, p_operator_id text DEFAULT NULL,
    p_batch_id text DEFAULT NULL, p_execution_ids uuid[] DEFAULT NULL, p_workflow_id text DEFAULT NULL,
    p_failing boolean DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN harvest._act_on_workflows('cancel', p_status, p_workflow_name, p_search_attributes, p_created_after,
        p_created_before, p_filter, p_reason, NULL, NULL, p_cursor, p_limit, p_dry_run, p_operator_id,
        p_batch_id, p_execution_ids, p_workflow_id, p_failing);
END;
$$;

CREATE OR REPLACE FUNCTION harvest.terminate_workflows(
    p_status text DEFAULT NULL, p_workflow_name text DEFAULT NULL, p_search_attributes text[] DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL, p_created_before timestamptz DEFAULT NULL,
    p_filter text DEFAULT NULL, p_reason text DEFAULT NULL, p_cursor text DEFAULT NULL,
    p_limit integer DEFAULT 50, p_dry_run boolean DEFAULT false, p_operator_id text DEFAULT NULL,
    p_batch_id text DEFAULT NULL, p_execution_ids uuid[] DEFAULT NULL, p_workflow_id text DEFAULT NULL,
    p_failing boolean DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN harvest._act_on_workflows('terminate', p_status, p_workflow_name, p_search_attributes, p_created_after,
        p_created_before, p_filter, p_reason, NULL, NULL, p_cursor, p_limit, p_dry_run, p_operator_id,
        p_batch_id, p_execution_ids, p_workflow_id, p_failing);
END;
$$;

CREATE OR REPLACE FUNCTION harvest.signal_workflows(
    p_signal_name text, p_payload jsonb DEFAULT 'null'::jsonb,
    p_status text DEFAULT NULL, p_workflow_name text DEFAULT NULL, p_search_attributes text[] DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL, p_created_before timestamptz DEFAULT NULL,
    p_filter text DEFAULT NULL, p_cursor text DEFAULT NULL,
    p_limit integer DEFAULT 50, p_dry_run boolean DEFAULT false, p_operator_id text DEFAULT NULL,
    p_batch_id text DEFAULT NULL, p_execution_ids uuid[] DEFAULT NULL, p_reason text DEFAULT NULL,
    p_workflow_id text DEFAULT NULL, p_failing boolean DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN harvest._act_on_workflows('signal', p_status, p_workflow_name, p_search_attributes, p_created_after,
        p_created_before, p_filter, p_reason, p_signal_name, p_payload, p_cursor, p_limit, p_dry_run, p_operator_id,
        p_batch_id, p_execution_ids, p_workflow_id, p_failing);
END;
$$;

-- Pause or resume the live runs a filter selects (docs/lifecycle.md, "Pausing many runs"): each
-- run as pause_workflow and resume_workflow do it (lifecycle.sql), a run in the other state
-- counted unchanged; the audit row is the step's (workflow.bulk_pause, workflow.bulk_resume).
CREATE OR REPLACE FUNCTION harvest.pause_workflows(
    p_status text DEFAULT NULL, p_workflow_name text DEFAULT NULL, p_search_attributes text[] DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL, p_created_before timestamptz DEFAULT NULL,
    p_filter text DEFAULT NULL, p_reason text DEFAULT NULL, p_cursor text DEFAULT NULL,
    p_limit integer DEFAULT 50, p_dry_run boolean DEFAULT false, p_operator_id text DEFAULT NULL,
    p_batch_id text DEFAULT NULL, p_execution_ids uuid[] DEFAULT NULL, p_workflow_id text DEFAULT NULL,
    p_failing boolean DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN harvest._act_on_workflows('pause', p_status, p_workflow_name, p_search_attributes, p_created_after,
        p_created_before, p_filter, p_reason, NULL, NULL, p_cursor, p_limit, p_dry_run, p_operator_id,
        p_batch_id, p_execution_ids, p_workflow_id, p_failing);
END;
$$;

CREATE OR REPLACE FUNCTION harvest.resume_workflows(
    p_status text DEFAULT NULL, p_workflow_name text DEFAULT NULL, p_search_attributes text[] DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL, p_created_before timestamptz DEFAULT NULL,
    p_filter text DEFAULT NULL, p_reason text DEFAULT NULL, p_cursor text DEFAULT NULL,
    p_limit integer DEFAULT 50, p_dry_run boolean DEFAULT false, p_operator_id text DEFAULT NULL,
    p_batch_id text DEFAULT NULL, p_execution_ids uuid[] DEFAULT NULL, p_workflow_id text DEFAULT NULL,
    p_failing boolean DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN harvest._act_on_workflows('resume', p_status, p_workflow_name, p_search_attributes, p_created_after,
        p_created_before, p_filter, p_reason, NULL, NULL, p_cursor, p_limit, p_dry_run, p_operator_id,
        p_batch_id, p_execution_ids, p_workflow_id, p_failing);
END;
$$;

-- Reset the runs a filter selects (docs/operations.md, "Resetting many runs"): the RUNNING runs
-- (the only ones a reset takes: reset.sql), each to the point p_reset_to names in its own history
-- (reset.sql, _reset_point: before_time, the last valid boundary written before p_before, the bad
-- deploy's time; first_workflow_task) as reset_workflow does it, signals after the point dropped
-- or carried (p_signal_reapply). A run is reset once per batch: a fork this batch made counts
-- unchanged; so does a reset's fork (any batch's, a single reset's) whose point is the boundary
-- it was forked at (forks_kept: a batch run again without its id keeps the forks' progress; a time
-- in the future is refused); a run with no valid point, a child, a continue-as-new successor counts in
-- failures.
-- Audited per step (workflow.bulk_reset) and per run (workflow.reset, with the batch id).
CREATE OR REPLACE FUNCTION harvest.reset_workflows(
    p_reset_to text DEFAULT 'before_time', p_before timestamptz DEFAULT NULL, p_signal_reapply text DEFAULT 'drop',
    p_status text DEFAULT NULL, p_workflow_name text DEFAULT NULL, p_search_attributes text[] DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL, p_created_before timestamptz DEFAULT NULL,
    p_filter text DEFAULT NULL, p_reason text DEFAULT NULL, p_cursor text DEFAULT NULL,
    p_limit integer DEFAULT 50, p_dry_run boolean DEFAULT false, p_operator_id text DEFAULT NULL,
    p_batch_id text DEFAULT NULL, p_execution_ids uuid[] DEFAULT NULL, p_workflow_id text DEFAULT NULL,
    p_failing boolean DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN harvest._act_on_workflows('reset', p_status, p_workflow_name, p_search_attributes, p_created_after,
        p_created_before, p_filter, p_reason, NULL, NULL, p_cursor, p_limit, p_dry_run, p_operator_id,
        p_batch_id, p_execution_ids, p_workflow_id, p_failing, p_reset_to, p_signal_reapply, p_before);
END;
$$;

-- What a run is waiting on now: open activities (pending, running or parked as
-- dead letters) with their attempt, timers with their fire time, the signals its
-- ctx.wait_for_signal calls wait for (awaited_signals: list_awaited_signals), signals
-- received since the workflow last ran (the ones it may not have read yet: how many, and
-- each one's event id, name and time),
-- running children, the workflow task (with why its last attempt failed, if it did),
-- and the last event id (a change cursor). p_limit: at most that many entries in each list
-- (the first by seq, by fire time), with each list's total in totals; NULL, every entry (a
-- fan-out of 20,000 activities is 20,000 entries: the dashboard and the HTTP route bound it,
-- migration 0097).
-- An activity's progress: when it last heartbeat (heartbeat_at) and the details it sent then
-- (ctx.heartbeat(details): what its next attempt resumes from, kept as stored: encoded,
-- offloaded), with their size (heartbeat_details_bytes: of the JSON text, or of an offloaded
-- payload as its reference records it). Details over STACK_HEARTBEAT_BYTES (4096) are not
-- shown whole: their first 200 characters and their size, as a string, and
-- heartbeat_details_clipped true; 20,000 activities of 1 MB each were not to be one answer.
-- The details are a payload: the HTTP API and the dashboard redact them for who sees none.
CREATE OR REPLACE FUNCTION harvest.get_execution_stack(p_execution_id uuid, p_limit integer DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_execution harvest.executions;
    v_last_task_event bigint;
    v_awaited jsonb;
    v_awaited_total bigint;
BEGIN
    IF p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..10000', p_limit USING ERRCODE = 'HR001',
            HINT = 'pass NULL for every entry';
    END IF;
    SELECT * INTO v_execution FROM harvest.executions WHERE id = p_execution_id;
    IF NOT FOUND THEN
        PERFORM harvest._execution_not_found(p_execution_id);  -- HR002 (retention.sql)
    END IF;
    SELECT max(ev.event_id) INTO v_last_task_event FROM harvest.events AS ev
    WHERE ev.execution_id = p_execution_id AND ev.event_type = 'WorkflowTaskCompleted';
    -- The signals it waits for (ctx.wait_for_signal: list_awaited_signals), oldest wait first,
    -- and their total, from one read of the run's last decision.
    SELECT coalesce(jsonb_agg(jsonb_build_object('name', a.name, 'since', a.since, 'timeout_at', a.timeout_at,
                                                 'timer_seq', a.timer_seq) ORDER BY a.n)
                        FILTER (WHERE p_limit IS NULL OR a.n <= p_limit), '[]'::jsonb),
           count(*)
    INTO v_awaited, v_awaited_total
    FROM harvest.list_awaited_signals(p_execution_id) WITH ORDINALITY AS a (name, since, timeout_at, timer_seq, n);
    RETURN jsonb_build_object(
        'execution_id', v_execution.id,
        'workflow_name', v_execution.workflow_name,
        'workflow_id', v_execution.workflow_id,
        'status', v_execution.status,
        'cancel_requested', v_execution.cancel_requested,
        'last_event_id', v_execution.last_event_id,
        -- A PAUSED run: since when, why and by whom (its last WorkflowPaused); NULL otherwise.
        'paused', CASE WHEN v_execution.status = 'PAUSED' THEN (
            SELECT jsonb_build_object('since', ev.created_at, 'reason', ev.event_data -> 'reason',
                                      'operator_id', ev.event_data -> 'operator_id')
            FROM harvest.events AS ev
            WHERE ev.execution_id = p_execution_id AND ev.event_type = 'WorkflowPaused'
            ORDER BY ev.event_id DESC LIMIT 1) END,
        'pending_activities', coalesce((
            -- (the details measured and clipped after the page is cut: a fan-out's 20,000
            -- activities are sorted with their details unread. Measured in the sort, a page of
            -- 100 of 20,000 activities with 13 KB details each took 1.0 to 1.6 s; after it, 14
            -- to 30 ms, as the stack took without them: 6 A/B pairs, load 4, two shared cores)
            SELECT jsonb_agg(to_jsonb(a) || jsonb_build_object(
                       'heartbeat_details',
                       CASE WHEN hb.bytes > 4096  -- STACK_HEARTBEAT_BYTES (above)
                            THEN to_jsonb(left(a.heartbeat_details::text, 200) || '... (' || hb.bytes || ' bytes)')
                            ELSE a.heartbeat_details END,
                       'heartbeat_details_bytes', hb.bytes,
                       'heartbeat_details_clipped', hb.bytes > 4096) ORDER BY a.seq)
            FROM (
                (SELECT t.seq, t.activity_name AS name, t.queue, t.status, t.attempt, t.due_at, t.started_at,
                        t.lease_owner, t.lease_expires_at, t.last_failure, t.id AS task_id,
                        NULL::bigint AS dead_letter_id, t.heartbeat_at, t.heartbeat_details
                 FROM harvest.tasks AS t WHERE t.execution_id = p_execution_id AND t.kind = 'activity'
                 UNION ALL
                 SELECT d.seq, d.activity_name, d.queue, 'dead_lettered', d.attempts, NULL, NULL, NULL, NULL,
                        d.failure, NULL, d.id, NULL, NULL
                 FROM harvest.dead_letters AS d WHERE d.execution_id = p_execution_id AND d.kind = 'activity')
                ORDER BY 1 LIMIT p_limit
            ) AS a
            CROSS JOIN LATERAL (
                SELECT CASE WHEN jsonb_typeof(a.heartbeat_details -> 'bytes') = 'number'
                                 AND a.heartbeat_details ? '_harvest_ref'
                            THEN least((a.heartbeat_details ->> 'bytes')::numeric, 9e18)::bigint
                            ELSE octet_length(a.heartbeat_details::text) END AS bytes
            ) AS hb), '[]'::jsonb),
        -- The run's own dead letter (kind 'workflow': its workflow task was dead-lettered), its
        -- id and its failure's type and message; NULL when it has none. (An activity's is in
        -- pending_activities, which a workflow-kind one, with no seq, joined nameless and last.)
        'dead_letter', (
            SELECT jsonb_build_object('id', d.id, 'failed_at', d.failed_at,
                                      'error_type', d.failure ->> 'error_type', 'message', d.failure ->> 'message')
            FROM harvest.dead_letters AS d WHERE d.execution_id = p_execution_id AND d.kind = 'workflow'
            ORDER BY d.id DESC LIMIT 1),
        'timers', coalesce((
            SELECT jsonb_agg(jsonb_build_object('seq', t.seq, 'fire_at', t.due_at, 'status', t.status)
                             ORDER BY t.due_at, t.seq)
            FROM (SELECT t.seq, t.due_at, t.status FROM harvest.tasks AS t
                  WHERE t.execution_id = p_execution_id AND t.kind = 'timer'
                  ORDER BY t.due_at, t.seq LIMIT p_limit) AS t), '[]'::jsonb),
        -- (a run blocked on a signal named nothing else, or only its timeout's timer)
        'awaited_signals', v_awaited,
        'signals_since_last_task', (
            SELECT count(*) FROM harvest.events AS ev
            WHERE ev.execution_id = p_execution_id AND ev.event_type = 'SignalReceived'
              AND ev.event_id > coalesce(v_last_task_event, 0)),
        -- Those signals (the run's buffered ones): which, by event id, without their payloads.
        'signals', coalesce((
            SELECT jsonb_agg(jsonb_build_object('event_id', ev.event_id, 'name', ev.event_data ->> 'name',
                                                'received_at', ev.created_at) ORDER BY ev.event_id)
            FROM (SELECT ev.event_id, ev.event_data, ev.created_at FROM harvest.events AS ev
                  WHERE ev.execution_id = p_execution_id AND ev.event_type = 'SignalReceived'
                    AND ev.event_id > coalesce(v_last_task_event, 0)
                  ORDER BY ev.event_id LIMIT p_limit) AS ev), '[]'::jsonb),
        'children', coalesce((
            SELECT jsonb_agg(jsonb_build_object('execution_id', c.id, 'workflow_name', c.workflow_name,
                                                'workflow_id', c.workflow_id, 'seq', c.parent_seq,
                                                'status', c.status, 'created_at', c.created_at)
                             ORDER BY c.parent_seq, c.created_at)
            FROM (SELECT * FROM harvest.executions AS c
                  WHERE c.parent_id = p_execution_id AND c.status IN ('RUNNING', 'PAUSED')
                  ORDER BY c.parent_seq, c.created_at LIMIT p_limit) AS c), '[]'::jsonb),
        -- The durable mutex keys it holds or waits for (ctx.mutex), a waiter's with the key's holder:
        -- a run queued for a key has nothing else open, and "waiting on nothing" misled.
        'mutexes', coalesce((
            SELECT jsonb_agg(jsonb_build_object('key', x.lock_key, 'status', x.status, 'since', x.since,
                                                'holder_execution_id', x.holder) ORDER BY x.lock_key)
            FROM (
                (SELECT l.lock_key, 'held' AS status, l.acquired_at AS since, NULL::uuid AS holder
                 FROM harvest.mutex_locks AS l WHERE l.holder_execution_id = p_execution_id
                 UNION ALL
                 SELECT w.lock_key, 'waiting', w.enqueued_at,
                        (SELECT h.holder_execution_id FROM harvest.mutex_locks AS h WHERE h.lock_key = w.lock_key)
                 FROM harvest.mutex_waiters AS w WHERE w.execution_id = p_execution_id)
                ORDER BY 1 LIMIT p_limit
            ) AS x), '[]'::jsonb),
        -- Each list's length without p_limit, so a bounded answer says how much it left out.
        'totals', jsonb_build_object(
            'pending_activities',
            (SELECT count(*) FROM harvest.tasks AS t WHERE t.execution_id = p_execution_id AND t.kind = 'activity')
            + (SELECT count(*) FROM harvest.dead_letters AS d
               WHERE d.execution_id = p_execution_id AND d.kind = 'activity'),
            'timers',
            (SELECT count(*) FROM harvest.tasks AS t WHERE t.execution_id = p_execution_id AND t.kind = 'timer'),
            'children',
            (SELECT count(*) FROM harvest.executions AS c
             WHERE c.parent_id = p_execution_id AND c.status IN ('RUNNING', 'PAUSED')),
            'signals',
            (SELECT count(*) FROM harvest.events AS ev
             WHERE ev.execution_id = p_execution_id AND ev.event_type = 'SignalReceived'
               AND ev.event_id > coalesce(v_last_task_event, 0)),
            'awaited_signals', v_awaited_total,
            'mutexes',
            (SELECT count(*) FROM harvest.mutex_locks AS l WHERE l.holder_execution_id = p_execution_id)
            + (SELECT count(*) FROM harvest.mutex_waiters AS w WHERE w.execution_id = p_execution_id)),
        'workflow_task', (
            SELECT jsonb_build_object('task_id', t.id, 'status', t.status, 'due_at', t.due_at,
                                      'lease_owner', t.lease_owner, 'attempt', t.attempt,
                                      'last_failure', t.last_failure, 'queue', t.queue,
                                      -- none: it waits for a worker of its queue (a child sent to
                                      -- a queue no App of the fleet uses waited with no word)
                                      'live_workers', (
                                          SELECT count(*) FROM harvest.workers AS w
                                          WHERE w.status = 'active' AND t.queue = ANY(w.queues)
                                            AND harvest._worker_health(w) = 'healthy'))
            FROM harvest.tasks AS t WHERE t.execution_id = p_execution_id AND t.kind = 'workflow'),
        'last_workflow_task_event_id', v_last_task_event
    );
END;
$$;

-- The signals a live run waits for (docs/messages.md, "Which signals a run waits for"): the
-- ctx.wait_for_signal calls its last decision reported (the await_signals directive, kept in its
-- WorkflowTaskCompleted marker: functions/decide.sql), oldest first, each with since when
-- (the time of the marker of the step that began it) and its timeout's deadline (its timer's
-- fire time; NULL: no timeout). A wait whose timer has fired since, or of a name a signal has
-- come for since, is left out: it is over, whatever the run's next decision says. With
-- p_before_event_id, as the run stood before that event: a signal's sender asks with its own
-- signal's id (was the name awaited when it came?). None for a run that has ended, has not
-- decided yet, or waits on no signal; HR002 when it does not exist. It looks back over the run's
-- last 1,000 events only (AWAITED_LOOKBACK): every client signal asks, and a search back to a
-- decision of long ago (signals flooding a run whose worker is gone) cost each signal a walk of
-- the whole history (1.9 ms at 40,000 events), so a flood of n cost n squared; a run whose last
-- decision is further back answers none, as one that has not decided yet.
-- VOLATILE (the default), not STABLE: called after signal_workflow in one statement
-- (harvest/db/sqlapi.py, SIGNAL_WORKFLOW), it reads what was committed before the signal took
-- the run's lock, which no decision can move until the signal commits.
CREATE OR REPLACE FUNCTION harvest.list_awaited_signals(p_execution_id uuid, p_before_event_id bigint DEFAULT NULL)
RETURNS TABLE (name text, since timestamptz, timeout_at timestamptz, timer_seq integer)
LANGUAGE plpgsql
AS $$
DECLARE
    v_status text;
    v_last bigint;
    v_marker bigint;
    v_awaiting jsonb;
BEGIN
    SELECT e.status, e.last_event_id INTO v_status, v_last FROM harvest.executions AS e WHERE e.id = p_execution_id;
    IF NOT FOUND THEN
        PERFORM harvest._execution_not_found(p_execution_id);  -- HR002 (retention.sql)
    END IF;
    IF v_status NOT IN ('RUNNING', 'PAUSED') THEN
        RETURN;
    END IF;
    SELECT ev.event_id, ev.event_data -> 'awaiting' INTO v_marker, v_awaiting
    FROM harvest.events AS ev
    WHERE ev.execution_id = p_execution_id AND ev.event_type = 'WorkflowTaskCompleted'
      AND ev.event_id > v_last - 1000  -- AWAITED_LOOKBACK (above)
    ORDER BY ev.event_id DESC LIMIT 1;
    IF jsonb_typeof(v_awaiting) IS DISTINCT FROM 'array' THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT w.wait ->> 'name', s.created_at, t.due_at, (w.wait ->> 'timer_seq')::integer
    FROM jsonb_array_elements(v_awaiting) WITH ORDINALITY AS w (wait, n)
    LEFT JOIN harvest.events AS s
        ON s.execution_id = p_execution_id AND s.event_id = (w.wait ->> 'since')::bigint
    LEFT JOIN harvest.tasks AS t
        ON t.execution_id = p_execution_id AND t.seq = (w.wait ->> 'timer_seq')::integer AND t.kind = 'timer'
    WHERE (w.wait ->> 'timer_seq' IS NULL OR t.id IS NOT NULL)
      AND NOT EXISTS (
          SELECT 1 FROM harvest.events AS r
          WHERE r.execution_id = p_execution_id AND r.event_id > v_marker
            AND (p_before_event_id IS NULL OR r.event_id < p_before_event_id)
            AND r.event_type = 'SignalReceived' AND r.event_data ->> 'name' = w.wait ->> 'name')
    ORDER BY w.n;
END;
$$;

-- An execution's children (direct, or down to p_depth levels), newest first (created_at DESC,
-- then id), from after a position (p_after_created_at, p_after_id: the last row a page showed;
-- NULL: from the newest), at most p_limit rows (NULL: all).
-- The direct children's page is read as a page: down executions_parent_created (parent_id,
-- created_at DESC, id) from the position, in two seeks, each a range of the index (the rest of
-- the position's instant, after its id; then the older instants), so a page of a run with
-- 100,000 children reads a page of them, not every child and a sort (GET
-- /workflows/{id}/children, docs/performance.md); a page of one status the same, down
-- executions_parent_status_created (0095). The order mixes directions, so the position
-- is not one row comparison; and an OR of the two would be a filter, not a seek. A deeper list
-- walks the tree and keeps the page.
CREATE OR REPLACE FUNCTION harvest.list_children(
    p_execution_id uuid, p_status text DEFAULT NULL, p_depth integer DEFAULT 1,
    p_after_created_at timestamptz DEFAULT NULL, p_after_id uuid DEFAULT NULL, p_limit integer DEFAULT NULL
)
RETURNS TABLE (
    execution_id uuid, parent_id uuid, workflow_name text, workflow_id text, status text,
    created_at timestamptz, completed_at timestamptz, error_summary text, depth integer
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_status text := upper(p_status);
BEGIN
    IF p_status IS NOT NULL AND v_status NOT IN (
        'RUNNING', 'PAUSED', 'COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT', 'CONTINUED_AS_NEW',
        'MIGRATING', 'MIGRATED'
    ) THEN
        RAISE EXCEPTION 'unknown status "%"', p_status USING ERRCODE = 'HR001',
            HINT = 'use RUNNING, PAUSED, COMPLETED, FAILED, CANCELLED, TERMINATED, TIMED_OUT, CONTINUED_AS_NEW, '
                   'MIGRATING or MIGRATED';
    END IF;
    IF p_depth IS NULL OR p_depth < 1 OR p_depth > 100 THEN
        RAISE EXCEPTION 'depth % is out of range 1..100', p_depth USING ERRCODE = 'HR001';
    END IF;
    IF (p_after_created_at IS NULL) <> (p_after_id IS NULL) THEN
        RAISE EXCEPTION 'a position in the children is a time and an id: give both or neither'
            USING ERRCODE = 'HR001', HINT = 'pass the created_at and execution_id of the last row of the previous page';
    END IF;
    IF p_limit < 1 THEN
        RAISE EXCEPTION 'limit % is below 1 (NULL: every child)', p_limit USING ERRCODE = 'HR001';
    END IF;
    IF p_depth = 1 AND p_after_created_at IS NULL AND v_status IS NULL THEN
        RETURN QUERY
        SELECT e.id, e.parent_id, e.workflow_name, e.workflow_id, e.status, e.created_at, e.completed_at,
               (e.failure ->> 'error_type') || ': ' || (e.failure ->> 'message'), 1
        FROM harvest.executions AS e
        WHERE e.parent_id = p_execution_id
        ORDER BY e.created_at DESC, e.id
        LIMIT p_limit;
        RETURN;
    END IF;
    -- The first page of one status is its own statement: a generic plan of `v_status IS NULL OR
    -- e.status = v_status` cannot seek executions_parent_status_created by the status.
    IF p_depth = 1 AND p_after_created_at IS NULL THEN
        RETURN QUERY
        SELECT e.id, e.parent_id, e.workflow_name, e.workflow_id, e.status, e.created_at, e.completed_at,
               (e.failure ->> 'error_type') || ': ' || (e.failure ->> 'message'), 1
        FROM harvest.executions AS e
        WHERE e.parent_id = p_execution_id AND e.status = v_status
        ORDER BY e.created_at DESC, e.id
        LIMIT p_limit;
        RETURN;
    END IF;
    IF p_depth = 1 THEN
        -- Planned with the values at each call (EXECUTE), never from a cached generic plan: for
        -- the position's instant, the generic estimate of `created_at = $` is a row or so, and
        -- such a plan reads that instant's runs of every parent through executions_created and
        -- drops the others' (a transaction that started the children of many runs: all of them,
        -- for each page inside it).
        RETURN QUERY EXECUTE $q$
        SELECT e.id, e.parent_id, e.workflow_name, e.workflow_id, e.status, e.created_at, e.completed_at,
               (e.failure ->> 'error_type') || ': ' || (e.failure ->> 'message'), 1
        FROM (
            (SELECT s.* FROM harvest.executions AS s
             WHERE s.parent_id = $1 AND s.created_at = $3 AND s.id > $4 AND ($2 IS NULL OR s.status = $2)
             ORDER BY s.id
             LIMIT $5)
            UNION ALL
            (SELECT o.* FROM harvest.executions AS o
             WHERE o.parent_id = $1 AND o.created_at < $3 AND ($2 IS NULL OR o.status = $2)
             ORDER BY o.created_at DESC, o.id
             LIMIT $5)
        ) AS e
        ORDER BY e.created_at DESC, e.id
        LIMIT $5
        $q$ USING p_execution_id, v_status, p_after_created_at, p_after_id, p_limit;
        RETURN;
    END IF;
    RETURN QUERY
    WITH RECURSIVE tree AS (
        SELECT e.id, e.parent_id, 1 AS depth FROM harvest.executions AS e WHERE e.parent_id = p_execution_id
        UNION ALL
        SELECT e.id, e.parent_id, t.depth + 1
        FROM harvest.executions AS e JOIN tree AS t ON e.parent_id = t.id
        WHERE t.depth < p_depth
    )
    SELECT e.id, e.parent_id, e.workflow_name, e.workflow_id, e.status, e.created_at, e.completed_at,
           (e.failure ->> 'error_type') || ': ' || (e.failure ->> 'message'), t.depth
    FROM tree AS t JOIN harvest.executions AS e ON e.id = t.id
    WHERE (v_status IS NULL OR e.status = v_status)
      AND (p_after_created_at IS NULL OR e.created_at < p_after_created_at
           OR (e.created_at = p_after_created_at AND e.id > p_after_id))
    ORDER BY e.created_at DESC, e.id
    LIMIT p_limit;
END;
$$;

-- Waiting for results. handle.result() LISTENs on harvest_done, marks itself as a
-- waiter for the run, then reads the run; _close_execution notifies only runs
-- somebody waits for, so the notify lock stays off the hot path of unattended
-- runs. A close that races the mark is caught by the waiter's periodic re-read.

-- Mark p_waiter_id as waiting for p_execution_id and return the run as it is now.
CREATE OR REPLACE FUNCTION harvest.wait_for_result(p_execution_id uuid, p_waiter_id uuid)
RETURNS harvest.executions
LANGUAGE plpgsql
AS $$
DECLARE
    v_execution harvest.executions;
BEGIN
    -- A run that has ended is read and returned without a lock (the read a waiter makes when
    -- its notification comes). This waiter's own mark, if any, goes: the close deletes the
    -- marks it sees, and this one it may not have seen (below), so the waiter need not call
    -- stop_waiting_for_result after an answer.
    -- (The run read here, not by a call of get_execution: that call, its row built and
    -- returned as a value and taken apart again, cost more than the read, twice per mark;
    -- docs/performance.md, "One-item calls".)
    SELECT * INTO v_execution FROM harvest.executions AS e WHERE e.id = p_execution_id;
    IF NOT FOUND THEN
        PERFORM harvest._execution_not_found(p_execution_id);  -- HR002 (retention.sql)
    END IF;
    IF v_execution.status NOT IN ('RUNNING', 'PAUSED') THEN
        DELETE FROM harvest.result_waiters
        WHERE execution_id = p_execution_id AND waiter_id = p_waiter_id AND login = session_user;
        RETURN v_execution;
    END IF;
    -- Order the mark with a close in flight: a closing transaction deletes the waiters it can
    -- see and notifies only if it found one, so a waiter marked while the close is uncommitted
    -- (and read the run as still running) would never be woken. The close takes this run's
    -- lock in the two-key advisory space (class 1463896404, 'WAIT') exclusive without waiting
    -- (_close_execution): either it holds it, and this waits for its commit and reads the run
    -- closed, or this mark commits first and the close sees it, or the close finds the lock
    -- taken and notifies whatever it sees. A row lock here (FOR SHARE) made the run's next
    -- decision or result wait for this mark's commit and wrote the row.
    PERFORM pg_advisory_xact_lock_shared(1463896404, hashtext(p_execution_id::text));
    SELECT * INTO v_execution FROM harvest.executions AS e WHERE e.id = p_execution_id;
    IF NOT FOUND THEN
        PERFORM harvest._execution_not_found(p_execution_id);  -- HR002 (retention.sql)
    END IF;
    IF v_execution.status IN ('RUNNING', 'PAUSED') THEN
        INSERT INTO harvest.result_waiters (execution_id, waiter_id, since)
        VALUES (p_execution_id, p_waiter_id, harvest.now())
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN v_execution;
END;
$$;

-- Drop a waiter's marks (it got its answer, timed out or gave up): the caller's login's
-- own only (a mark's login is the session_user that made it, sql/result_waiters.sql). A
-- reader can read every waiter id; deleting another client's mark would leave it unnotified.
CREATE OR REPLACE FUNCTION harvest.stop_waiting_for_result(p_waiter_id uuid)
RETURNS void
LANGUAGE sql
AS $$
    DELETE FROM harvest.result_waiters WHERE waiter_id = p_waiter_id AND login = session_user;
$$;

-- Which recorded versions of a ctx.version() gate are still in use, so an old
-- branch is deleted only when no run can replay through it. Read-only. A marker's version is
-- read by the JSON number rule (_json_integer): _decide_record_marker takes any whole number
-- in 32 bits, 2.0 as well as 2 (another SDK's), and a raw ::integer of its text ('2.0') failed
-- every call for that change_id (22P02).
-- p_history_before: also a row of version -1 (DEFAULT_VERSION) counting the active runs that
-- recorded no marker of the change and whose history began before that time (their first event's,
-- which a reset's fork copies from its source): the runs that may replay the DEFAULT_VERSION branch
-- of a gate deployed then (those that passed its position before, and those that have not reached
-- it yet, which record the new version when they do). Active runs only; p_version NULL or -1.
-- Every read of the markers goes down events_version_markers (change id, run; migration 0139):
-- the terminal and all counts read every event kept, and the runs with no marker were found by
-- a scan of every event (6 s and 4.4 s over 20M events, docs/performance.md).
CREATE OR REPLACE FUNCTION harvest.count_versions(
    p_change_id text, p_version integer DEFAULT NULL, p_state_group text DEFAULT 'active',
    p_workflow_name text DEFAULT NULL, p_history_before timestamptz DEFAULT NULL
)
RETURNS TABLE (version integer, state_group text, executions bigint, sample_execution_ids uuid[])
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_change_id IS NULL OR p_change_id = '' THEN
        RAISE EXCEPTION 'change_id is empty' USING ERRCODE = 'HR001';
    END IF;
    IF p_state_group IS NULL OR p_state_group NOT IN ('active', 'terminal', 'all') THEN
        RAISE EXCEPTION 'unknown state_group "%"', p_state_group USING ERRCODE = 'HR001',
            HINT = 'use active, terminal or all';
    END IF;
    IF p_version < 0 AND (p_version <> -1 OR p_history_before IS NULL) THEN
        RAISE EXCEPTION 'version % is not a recorded version', p_version USING ERRCODE = 'HR001',
            HINT = 'a recorded version is 0 or more; -1 (DEFAULT_VERSION: no marker) needs a history_before time';
    END IF;
    IF p_history_before IS NOT NULL AND p_state_group <> 'active' THEN
        RAISE EXCEPTION 'history_before counts active runs only, not state_group %', p_state_group
            USING ERRCODE = 'HR001', HINT = 'use state_group active with history_before';
    END IF;
    IF p_history_before IS NOT NULL AND (p_version IS NULL OR p_version = -1) THEN
        -- The live runs by their status, each one's first event by the events primary key and
        -- its markers of the change down events_version_markers (as the active count below reads
        -- them).
        RETURN QUERY
        SELECT -1, 'active'::text, count(*), (array_agg(e.id ORDER BY e.id))[1:5]
        FROM harvest.executions AS e
        JOIN harvest.events AS first ON first.execution_id = e.id AND first.event_id = 1
        WHERE e.status IN ('RUNNING', 'PAUSED')
          AND (p_workflow_name IS NULL OR e.workflow_name = p_workflow_name)
          AND first.created_at < p_history_before
          AND NOT EXISTS (
              SELECT 1 FROM harvest.events AS m
              WHERE m.execution_id = e.id AND m.event_type = 'MarkerRecorded'
                AND m.event_data ->> 'kind' = 'version' AND m.event_data #>> '{value,change_id}' = p_change_id)
        HAVING count(*) > 0;
        IF p_version = -1 THEN
            RETURN;
        END IF;
    END IF;
    IF p_state_group = 'active' THEN
        -- The default (harvest workflow versions): the live runs, found by their status, and
        -- each one's markers of the change down events_version_markers. Read from the events, it
        -- scanned every event of every run ever kept (1.9 s over 8M events, 0114). (OFFSET 0
        -- keeps the lateral read a run's own: joined, the planner read the events first, as few
        -- markers are among them.)
        RETURN QUERY
        SELECT harvest._json_integer(ev.event_data #> '{value,version}', 'value.version', p_where => 'a version marker')
                   AS recorded, 'active'::text,
               count(DISTINCT e.id), (array_agg(DISTINCT e.id))[1:5]
        FROM harvest.executions AS e
        CROSS JOIN LATERAL (
            SELECT m.event_data FROM harvest.events AS m
            WHERE m.execution_id = e.id AND m.event_type = 'MarkerRecorded'
              AND m.event_data ->> 'kind' = 'version' AND m.event_data #>> '{value,change_id}' = p_change_id
            OFFSET 0
        ) AS ev
        WHERE e.status IN ('RUNNING', 'PAUSED')
          AND (p_version IS NULL OR harvest._json_integer(ev.event_data #> '{value,version}', 'value.version',
                                                          p_where => 'a version marker') = p_version)
          AND (p_workflow_name IS NULL OR e.workflow_name = p_workflow_name)
        GROUP BY 1, 2
        ORDER BY 1, 2;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT harvest._json_integer(ev.event_data #> '{value,version}', 'value.version', p_where => 'a version marker')
               AS recorded,
           CASE WHEN e.status IN ('RUNNING', 'PAUSED') THEN 'active' ELSE 'terminal' END AS grp,
           count(DISTINCT e.id),
           (array_agg(DISTINCT e.id))[1:5]
    FROM harvest.events AS ev
    JOIN harvest.executions AS e ON e.id = ev.execution_id
    WHERE ev.event_type = 'MarkerRecorded' AND ev.event_data ->> 'kind' = 'version'
      AND ev.event_data #>> '{value,change_id}' = p_change_id
      AND (p_version IS NULL OR harvest._json_integer(ev.event_data #> '{value,version}', 'value.version',
                                                      p_where => 'a version marker') = p_version)
      AND (p_state_group = 'all' OR (p_state_group = 'active') = (e.status IN ('RUNNING', 'PAUSED')))
      AND (p_workflow_name IS NULL OR e.workflow_name = p_workflow_name)
    GROUP BY 1, 2
    ORDER BY 1, 2;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.get_execution IS
'One execution row; HR002 when it does not exist. For operators and clients (role harvest_reader).';
COMMENT ON FUNCTION harvest.get_history IS
'A run''s history after event p_after_event_id (0 = from the start), in order, at most p_limit events (NULL: all; '
'a page of the HTTP API; a negative limit is HR001), ending with the event that brings it to p_max_bytes of data '
'when given (the event stream''s pages; below 1 is HR001); HR002 when it finds no event from the start and no run. Called by clients, workers and operators (roles harvest_reader, '
'harvest_worker).';
COMMENT ON FUNCTION harvest.get_history_page IS
'One page of a run''s history for the dashboard (part event: p_limit events from p_from_event_id on, or the last '
'p_limit before p_before_event_id, or the last p_limit) with its last p_limit signals and reset points, its pending '
'updates (one row each) and its counts (part count): but for those updates, in rows that do not grow with the '
'history; HR001 for a limit out of 1..10000, '
'an event id below 1 or both ends given. For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.terminate_workflow IS
'End a RUNNING run at once as TERMINATED, audited: no cleanup code runs, open activities and timers are dropped; '
'HR005 when it has already ended. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.cancel_workflows IS
'Ask the live runs a filter selects to cancel, at most p_limit (1..1000) a call in subtransactions, oldest first, '
'continued by next_cursor; counts runs that ended meanwhile (already_ended) and names moved ones (moved) for the caller '
'to follow; a filter that names no runs is HR001; p_dry_run writes nothing; one audit row a call. For operators (role '
'harvest_operator).';
COMMENT ON FUNCTION harvest.terminate_workflows IS
'Terminate the live runs a filter selects, as cancel_workflows takes and answers them (a bounded step a call, '
'next_cursor, already_ended, moved, HR001 for an empty filter, p_dry_run, one audit row a call). For admins (role '
'harvest_admin).';
COMMENT ON FUNCTION harvest.signal_workflows IS
'Signal the live runs a filter selects, as cancel_workflows takes and answers them; each run gets the batch id as its '
'signal_id and is signalled once per batch however often it is found (unchanged); p_reason goes to the audit row '
'only. For operators (role harvest_operator).';
COMMENT ON FUNCTION harvest.pause_workflows IS
'Pause the RUNNING runs a filter selects (p_status may widen it to PAUSED ones, counted unchanged), each as '
'pause_workflow does, as cancel_workflows takes and answers them (a bounded step a call, next_cursor, already_ended, '
'moved, HR001 for an empty filter, p_dry_run, one audit row a call). For operators (role harvest_operator).';
COMMENT ON FUNCTION harvest.reset_workflows IS
'Reset the RUNNING runs a filter selects, each to the point p_reset_to names in its own history (before_time: the '
'last valid boundary written before p_before, the bad deploy''s time; first_workflow_task), a bounded step a call, '
'continued by next_cursor; a run is reset once per batch, and a reset''s fork never to the boundary it was forked '
'at (unchanged, forks_kept); audited, p_dry_run counts. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.resume_workflows IS
'Resume the PAUSED runs a filter selects (a RUNNING one counted unchanged), each as resume_workflow does, as '
'cancel_workflows takes and answers them. For operators (role harvest_operator).';
COMMENT ON FUNCTION harvest.get_execution_by_workflow_id IS
'The current run of a workflow_id (optionally of one workflow name): the RUNNING one, else the newest; HR002 when '
'there is none, HR001 when the id is empty or, with no name, several workflows use it. For clients (role '
'harvest_reader).';
COMMENT ON FUNCTION harvest.list_executions IS
'The workflow list: optional filters composed with AND (p_workflow_id: the runs of one workflow id; p_failing: the '
'runs whose workflow task is failing, each row marked with its error type, attempt and since when; p_filter: an '
'expression with AND, OR, IN and parentheses whose keys and values are bound parameters), keyset pages on '
'(created_at, id) with next_cursor; an unknown state, bad filter, order, page size or cursor, or an empty '
'workflow id raises HR001. For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.list_search_attribute_indexes IS
'The search attributes the schema owner indexed for range tests (`harvest search-attr index`), each with its '
'type, its index''s name, state (valid, invalid, missing) and size in bytes. For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.count_executions IS
'How many executions match the workflow list''s filters (p_filter included), per status, workflow_name or both (p_group_by status, '
'workflow_name, all); p_limit counts at most that many runs a status (capped: at least that many; status grouping '
'only); a bad filter, group or limit raises HR001. For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.get_execution_stack IS
'What a run is waiting on now: open activities (each with its last heartbeat''s time and details, over 4096 bytes '
'clipped), timers, the signals it waits for, unread signals, running children, '
'the mutex keys it holds or waits for (at most p_limit of each, '
'1..10000, with each list''s total in totals; NULL: every entry), the workflow task, the '
'last event id and, while PAUSED, since when and why; HR002 when it does not exist. For operators (role '
'harvest_reader).';
COMMENT ON FUNCTION harvest.list_awaited_signals IS
'The signals a live run''s ctx.wait_for_signal calls wait for, as its last decision reported them: name, since when, '
'the timeout''s deadline (NULL: none) and its timer; a wait whose timer fired or whose signal came since is left '
'out (with p_before_event_id, one that came before that event); none for an ended run; HR002 when it does not '
'exist. For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.list_children IS
'An execution''s children, direct or down to p_depth levels (1..100), newest first (created_at DESC, then id), '
'optionally of one status (else HR001), after a position (p_after_created_at with p_after_id: the last row shown) '
'and at most p_limit rows (NULL: all; below 1, or half a position, HR001): a page of direct children reads a page. '
'For operators (role harvest_reader).';
COMMENT ON FUNCTION harvest.wait_for_result IS
'While the run is RUNNING or PAUSED, mark p_waiter_id (of the caller''s login) as waiting for its end; returns the '
'run as it is now, after any close in flight (HR002 when it does not exist); a run that has ended drops the '
'waiter''s mark on it. Called by clients waiting for a result (roles harvest_reader, harvest_worker).';
COMMENT ON FUNCTION harvest.stop_waiting_for_result IS
'Drop a waiter''s marks made by the caller''s login (it got its answer, timed out or gave up); another login''s '
'marks of the same waiter id stay. Called by clients (roles harvest_reader, harvest_worker).';
COMMENT ON FUNCTION harvest.count_versions IS
'Which recorded versions of a ctx.version() gate runs still use, so an old branch is deleted only when no run can'
' replay through it; p_history_before adds version -1 (DEFAULT_VERSION): the active runs with no marker of the gate'
' whose history began before that time. Read-only, for operators (role harvest_reader).';
