"""The size of a step of a batch by filter (cancel, terminate or signal the runs a filter selects:
docs/operations.md, "Acting on many runs"), one value for the SQL API, the clients, the CLI and the
routes. No import beyond the standard library: the CLI's options read it at ``--help``."""

# Runs a step acts on, in one transaction of one shard (the SQL allows 1..1000). 50 by default:
# each run is a subtransaction, and past 64 of them a transaction overflows its backend's
# subtransaction cache, so while it runs every other session's snapshot checks read pg_subtrans
# (functions/executions.sql's p_limit default is the same).
BATCH_STEP = 50
BATCH_STEP_MAX = 1000
