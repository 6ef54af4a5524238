"""Reading what the kernel has for a connection's socket: the keepalives and TCP user timeout
that harvest.db.connection gives every connection (and the Redis dispatch's)."""

from __future__ import annotations

import os
import socket

from harvest.db.connection import (
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE_SECS,
    KEEPALIVE_INTERVAL_SECS,
    SILENT_PEER_SECS,
)

# SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT, TCP_USER_TIMEOUT (ms).
EXPECTED = (1, KEEPALIVE_IDLE_SECS, KEEPALIVE_INTERVAL_SECS, KEEPALIVE_COUNT, SILENT_PEER_SECS * 1000)


def socket_settings(fd: int) -> tuple[int, ...]:
    """The five settings of ``EXPECTED`` for the socket ``fd`` (read on a duplicate of it)."""
    with socket.socket(fileno=os.dup(fd)) as sock:
        return (
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        )
