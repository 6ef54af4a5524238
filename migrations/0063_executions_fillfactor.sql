-- 0063: harvest.executions gets fillfactor 50, was 70 (docs/performance.md, "A closing
-- decision's row, written once"). A run's row is updated on each decision's event append;
-- with 30% of a page free, a fifth of those updates found no room left on the row's page
-- (its neighbours' versions not yet pruned) and were not HOT, each writing an entry into
-- every index of the table; with 50% free, an eighth. Existing pages are not rewritten (no
-- table scan, no lock beyond SHARE UPDATE EXCLUSIVE); the rows written from now on take up
-- to twice their size in heap, against 1/0.7 at 70.
ALTER TABLE harvest.executions SET (fillfactor = 50);
