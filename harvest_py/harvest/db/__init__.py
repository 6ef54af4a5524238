"""The database layer: connections, the SQL API wrapper, migrations, the dev server.

The only layer that imports psycopg; it imports nothing of harvest but ``harvest.core``.
"""

# The schema version this package requires: the version of the newest file in migrations/.
# A Client, a Worker and `harvest preflight` compare the database's harvest.schema_version()
# with it, without reading the migration files. A new migration must bump it (the unit test
# tests/unit/test_schema_version.py fails until it does).
SCHEMA_VERSION = "0109"
