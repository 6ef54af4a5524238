-- 0124: create_schedule and update_schedule refuse a workflow (or DAG) no worker registered
-- where the database can tell (HR010, as a start's check) and take p_allow_unregistered to
-- keep such a schedule anyway; _refuse_unregistered, the one HR010 of a start and a schedule,
-- takes what refuses and the hint. The old signatures go here; the new ones are installed with
-- the functions, after the migrations.
DROP FUNCTION IF EXISTS harvest.create_schedule(
    text, text, text, bigint, text, jsonb, text, integer, text, boolean, bigint, double precision, text,
    boolean, text
);
DROP FUNCTION IF EXISTS harvest.update_schedule(text, jsonb, text);
DROP FUNCTION IF EXISTS harvest._refuse_unregistered(text, text);
