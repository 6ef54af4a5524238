-- Harvest's SQL path on its own (bench/sql_path.py): a client advances p_n runs of
-- the canonical workflow, p_batch at a time, through the calls the client and the
-- worker make on the fast path, one transaction each, with no Python between them.
-- Installed in a bench schema of a throwaway database, never in harvest.
CREATE SCHEMA IF NOT EXISTS bench;
CREATE OR REPLACE PROCEDURE bench.sql_path(p_n integer, p_batch integer, p_tag text, p_options jsonb)
LANGUAGE plpgsql
AS $$
DECLARE
    v_worker text := 'sql-path-' || p_tag;
    v_queue text := 'sql-path-' || p_tag;
    v_done integer := 0;
    v_size integer;
    v_ids bigint[];
    v_tokens bigint[];
    v_throughs bigint[];
    v_commands jsonb[];
    v_afters bigint[];
    v_next_ids bigint[];
    v_next_tokens bigint[];
    v_results jsonb[];
    v_row record;
    v_applied integer;
BEGIN
    PERFORM harvest.register_worker(v_worker, ARRAY[v_queue], 'bench', pg_backend_pid(), 10, '{}');
    COMMIT;
    WHILE v_done < p_n LOOP
        v_size := least(p_batch, p_n - v_done);
        PERFORM harvest.start_workflows((
            SELECT jsonb_agg(jsonb_build_object('workflow_name', 'three_steps',
                                                'input', '[0]'::jsonb,
                                                'queue', v_queue))
            FROM generate_series(1, v_size) AS k));
        COMMIT;
        -- Claim the batch's workflow tasks and decide step 1 of each.
        v_ids := '{}'; v_tokens := '{}'; v_throughs := '{}'; v_commands := '{}';
        FOR v_row IN SELECT * FROM harvest.claim_tasks(v_worker, ARRAY[v_queue], v_size, 30) LOOP
            v_ids := v_ids || v_row.task_id;
            v_tokens := v_tokens || v_row.fencing_token;
            v_throughs := v_throughs || (v_row.new_events_after + jsonb_array_length(v_row.new_events));
            v_commands := v_commands || jsonb_build_array(jsonb_build_object(
                'type', 'schedule_activity', 'seq', 1, 'name', 'noop', 'input', jsonb_build_array(1),
                'queue', v_queue, 'options', p_options));
        END LOOP;
        COMMIT;
        IF cardinality(v_ids) <> v_size THEN
            RAISE EXCEPTION 'claimed % workflow tasks of %', cardinality(v_ids), v_size;
        END IF;
        -- The handed activity of each run, with the event its decision follows.
        SELECT array_agg((c.handed -> 0 ->> 'task_id')::bigint),
               array_agg((c.handed -> 0 ->> 'fencing_token')::bigint), array_agg(c.last_event_id)
        INTO v_ids, v_tokens, v_afters
        FROM harvest.complete_workflow_tasks(v_worker, v_ids, v_tokens, v_throughs, v_commands,
                                             array_fill(1, ARRAY[v_size])) AS c;
        COMMIT;
        FOR step IN 2 .. 4 LOOP
            v_commands := '{}'; v_results := '{}';
            FOR k IN 1 .. v_size LOOP
                v_results := v_results || to_jsonb(step - 1);
                v_commands := v_commands || jsonb_build_object(
                    'after', v_afters[k], 'result_text', (step - 1)::text, 'hand_off_slots', 1,
                    'commands', CASE WHEN step <= 3 THEN jsonb_build_array(jsonb_build_object(
                        'type', 'schedule_activity', 'seq', step, 'name', 'noop',
                        'input', jsonb_build_array(step), 'queue', v_queue, 'options', p_options))
                    ELSE jsonb_build_array(jsonb_build_object('type', 'complete_workflow',
                                                              'result', 6)) END);
            END LOOP;
            SELECT array_agg((c.decided -> 'handed' -> 0 ->> 'task_id')::bigint),
                   array_agg((c.decided -> 'handed' -> 0 ->> 'fencing_token')::bigint),
                   array_agg((c.decided ->> 'last_event_id')::bigint), count(c.decided)
            INTO v_next_ids, v_next_tokens, v_afters, v_applied
            FROM harvest.complete_activities(v_worker, v_ids, v_tokens, v_results, true, 30,
                                             v_commands) AS c;
            COMMIT;
            IF v_applied <> v_size THEN
                RAISE EXCEPTION 'step %: % of % decisions applied', step, v_applied, v_size;
            END IF;
            v_ids := v_next_ids;
            v_tokens := v_next_tokens;
        END LOOP;
        v_done := v_done + v_size;
    END LOOP;
END;
$$;
