"""The database layer: connections, the SQL API wrapper, migrations, the dev server.

The only layer that imports psycopg; it imports nothing of harvest but ``harvest.core``.
"""

# The schema version this package requires: the version of the newest file in migrations/.
# A Client, a Worker and `harvest preflight` compare the database's harvest.schema_version()
# with it, without reading the migration files. A new migration must bump it (the unit test
# tests/unit/test_schema_version.py fails until it does).
SCHEMA_VERSION = "0141"

# How long one try of a migration waits for a lock it needs (seconds; 0: without limit), and
# for how long in all it tries (docs/operations.md, "Migrations and locks"). The first bounds
# how long the fleet's queries on a table may queue behind the migration's waiting DDL.
# (harvest.db.migrate's; here, with no import, for `harvest migrate run --help`'s option texts.)
DEFAULT_LOCK_TIMEOUT = 2.0
DEFAULT_LOCK_WAIT = 60.0
