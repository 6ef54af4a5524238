"""SQLSTATEs the layers above the driver classify, by code (no psycopg: telemetry reads them too).

One classification, one place: "the session ended or its connection failed under the call" is
what the worker sends a report again for (harvest/db/resend.py) and what the transaction-retry
metric labels ``connection`` (harvest/telemetry/metrics.py).
"""

from __future__ import annotations

# The server ending the session under a call: 57P01 admin shutdown (pg_terminate_backend, a
# fast shutdown), 57P02 crash shutdown (another backend crashed), 57P03 cannot connect now (a
# server starting or stopping), 57P05 idle-session timeout (the server's idle_session_timeout
# ended a pooled connection while it sat idle: the call on it never ran), 25P03 idle in
# transaction timeout (the server ended a session left idle inside a transaction, such as a
# claim held open while its decision was made: the transaction rolled back, nothing of it was
# written). With class 08 (connection exception), see session_ended.
_SERVER_ENDED = frozenset({"57P01", "57P02", "57P03", "57P05", "25P03"})


def session_ended(sqlstate: str | None) -> bool:
    """Whether ``sqlstate`` says the session ended or its connection failed under the call
    (whether the statement ran is not known), rather than the database answering it: class 08
    (connection exception: 08000, 08003 no connection, 08006 connection failure, 08001 and
    08004 could not connect, 08007 transaction resolution unknown, 08P01 protocol violation)
    and the server ending the session (``_SERVER_ENDED``). A failure with no SQLSTATE at all is
    the client's own, and its callers decide what that is."""
    return sqlstate is not None and (sqlstate.startswith("08") or sqlstate in _SERVER_ENDED)
