-- harvest:no-transaction
-- 0098: the retention janitor finds the relay receipts past its window through an index
-- (re-runnable: this file runs outside a transaction, so the index is built without blocking the
-- receipts a relay applies meanwhile).
--
-- run_retention deleted every receipt older than the window in one statement, reading the whole
-- table to find them (no index on received_at), on every batch: a janitor's first run over months
-- of receipts was one unbounded transaction, and each batch after it scanned every receipt kept.
-- It now deletes at most a batch of them, found down relay_receipts_received. A failed CREATE
-- INDEX CONCURRENTLY leaves an INVALID index that IF NOT EXISTS would keep: it is dropped first.
DROP INDEX CONCURRENTLY IF EXISTS harvest.relay_receipts_received;
CREATE INDEX CONCURRENTLY IF NOT EXISTS relay_receipts_received
ON harvest.relay_receipts (received_at);
