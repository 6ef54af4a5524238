"""The database layer: connections, the SQL API wrapper, migrations, the dev server."""
