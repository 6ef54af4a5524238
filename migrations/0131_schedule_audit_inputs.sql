-- 0131: the audit rows of schedules keep an input's size, not the input (functions/schedules.sql,
-- harvest._schedule_audit, written from this release on). The rows written before kept the
-- schedule's input itself, stored as declared (never encoded: a customer's data in a fintech's
-- schedule), in a log that outlives the schedule, erasure and retention; each is rewritten to
-- the same `{"redacted": true, "bytes": n}` (n the length of the input's JSON text). A spec's
-- input is always a JSON array (create_schedule, declare_schedules), and an update's changes
-- name it as one: the marker is an object, so a row already rewritten is left as it is.
-- Re-runnable (CONTRIBUTING.md).
UPDATE harvest.audit_log
SET
    details = details || jsonb_build_object('input', jsonb_build_object(
        'redacted', true, 'bytes', octet_length((details -> 'input')::text)
    ))
WHERE operation = 'schedule.create' AND jsonb_typeof(details -> 'input') = 'array';

UPDATE harvest.audit_log
SET
    details = jsonb_set(details, '{changes,input}', jsonb_build_object(
        'redacted', true, 'bytes', octet_length((details #> '{changes,input}')::text)
    ))
WHERE operation = 'schedule.update' AND jsonb_typeof(details #> '{changes,input}') = 'array';

UPDATE harvest.audit_log
SET
    details = jsonb_set(details, '{spec,input}', jsonb_build_object(
        'redacted', true, 'bytes', octet_length((details #> '{spec,input}')::text)
    ))
WHERE operation = 'schedule.declare_superseded' AND jsonb_typeof(details #> '{spec,input}') = 'array';

UPDATE harvest.audit_log
SET
    details = jsonb_set(details, '{kept,input}', jsonb_build_object(
        'redacted', true, 'bytes', octet_length((details #> '{kept,input}')::text)
    ))
WHERE operation = 'schedule.declare_superseded' AND jsonb_typeof(details #> '{kept,input}') = 'array';
