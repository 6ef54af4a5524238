-- 0128: a held-back start records the offloaded rows it may hand its run. A batch collects many
-- starters' arguments and recorded their logins (0126); its release handed every run-less row
-- its input referenced that one of those logins stored, so a forger whose argument joined a
-- batch the victim also added to named the victim's other held-back start's input, and the
-- batch's run took it (erasing that run erased it). Now each deferral records the run-less rows
-- its own caller's login stored that its argument references (a debounce: the latest caller's;
-- a batch: each argument's), and the release hands those only (functions/flow_throttle.sql).
-- NULL on a pending start made before: its release hands by logins, as before.
-- (Re-runnable: IF NOT EXISTS.)
ALTER TABLE harvest.pending_starts ADD COLUMN IF NOT EXISTS payload_ids uuid[];
