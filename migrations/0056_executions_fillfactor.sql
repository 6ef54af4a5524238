-- 0056: room on each page of harvest.executions for its row updates (fillfactor 70).
ALTER TABLE harvest.executions SET (fillfactor = 70);
