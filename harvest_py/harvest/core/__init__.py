"""The pure core: errors (SQLSTATE -> exception -> exit code), SQLSTATE classes, payloads and
codecs, the server-identical JSON text, durations, idempotency keys. Imports no other layer and
no psycopg."""
