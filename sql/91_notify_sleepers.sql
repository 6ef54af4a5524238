-- Workers mark themselves asleep before waiting for a notification, so producers
-- notify only when a wake-up is needed (see functions/core.sql _notify_queue).

ALTER TABLE harvest.workers
ADD COLUMN sleeping boolean NOT NULL DEFAULT false;
