-- 0110: a query or update request keeps the workers that claimed it without having its run's
-- workflow (harvest.decline_query_request, functions/messages.sql): in a rolling deploy an old
-- worker handed it back for a new one instead of answering NotFound, and its claims skip it.
ALTER TABLE harvest.query_requests ADD COLUMN IF NOT EXISTS unknown_to jsonb NOT NULL DEFAULT '[]'::jsonb;
