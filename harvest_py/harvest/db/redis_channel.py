"""The Redis Streams channel of the optional Redis dispatch (docs/redis-dispatch.md).

Postgres keeps every row, every claim gate and the whole history; Redis carries only a
reference (task id, queue, due time) to a row that became claimable, so a worker can claim
that row by its key instead of searching a queue for one. A reference is a hint: the claim
in Postgres (``harvest.claim_named_tasks``) applies the whole claim predicate, and the
Postgres claim path (LISTEN/NOTIFY and polling) keeps running beside it, so a reference
that is lost, late, duplicated or stale loses nothing and runs nothing twice.

Key layout: one stream per queue, ``harvest:tasks:<queue>``, trimmed to about
``STREAM_MAXLEN`` entries, read through one consumer group (``GROUP``) by every worker;
each entry has the fields ``task_id``, ``queue`` and ``due_at`` (ISO 8601). v1 targets one
Redis instance (Redis Cluster is refused at connect) and a single-shard Harvest.

This module is the only importer of ``redis`` (the ``redis`` extra); it sits in the
database layer beside psycopg so that the client and the worker can both publish.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from harvest.core.errors import ConfigError, RedisUnavailable
from harvest.core.ids import ROW_ID_MAX
from harvest.db.connection import SOCKET_KEEPALIVE_OPTIONS

log = logging.getLogger("harvest.redis")

STREAM_PREFIX = "harvest:tasks:"
GROUP = "harvest"
# Entries kept per queue's stream (approximate trimming): a bound on Redis memory. A
# reference trimmed before any worker read it is found by the Postgres claim instead.
STREAM_MAXLEN = 100_000
SCHEMES = ("redis", "rediss")
# The TLS options a URL's query may set: the client's own certificate (mutual TLS). Every other
# ``ssl_*`` option (the redis client passes each query key on to its connection) would turn off,
# loosen or replace the server's verification: ssl_cert_reqs, ssl_check_hostname, ssl_ca_certs,
# ssl_ca_path, ssl_ca_data, ssl_include_verify_flags, ssl_exclude_verify_flags, ssl_min_version,
# ssl_ciphers, and any a later client adds. Refused (docs/redis-dispatch.md).
CLIENT_TLS_OPTIONS = frozenset({"ssl_certfile", "ssl_keyfile", "ssl_password"})
# Every option a URL's query may set. The redis client hands each query key to its connection as
# a keyword: an unknown one (``?bogus=1``, a misspelt option) failed the boot with a raw TypeError,
# and one it knows (``socket_timeout``, ``health_check_interval``, ``socket_keepalive``,
# ``retry_on_timeout``, ``password``, ...) replaced what Harvest sets below, silently. Refused.
URL_OPTIONS = CLIENT_TLS_OPTIONS | {"client_name"}
# An option's name is shown in an error only when it reads as a name (the query is the user's text).
OPTION_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
CONNECT_TIMEOUT_SECS = 5.0
# How long one command may go unanswered before the channel is given up (the worker falls back
# to the Postgres claim and reconnects). Longer than a consumer's blocking read
# (redis_dispatch.BLOCK_MS). Set here, not left to the client: redis 5 waits forever by default
# (a Redis that stopped answering held the consumer, the publisher and the stop for good), and
# with no retries, so that a silent Redis costs one timeout, not the client's three more.
COMMAND_TIMEOUT_SECS = 5.0
# A Harvest entry is about 100 bytes (task id, queue, due time). One whose field names and values
# add up to more is no Harvest's: acked and skipped like a malformed one, logged with its size,
# never its content.
MAX_ENTRY_BYTES = 1024
# The most one reply may bring into the process. Anyone who can write to the Redis can add an entry
# of any size (512 MB a value, any number of fields), and a read brings in whole entries: past this
# bound the client stops reading the reply before it allocates it (ReplyTooLarge, the connection
# dropped), and the reader takes the entries it was handed through PROJECT_SCRIPT instead, which
# measures them in Redis and returns the few fields a reference has.
REPLY_MAX_BYTES = 1 << 20
# What one element of a reply costs against REPLY_MAX_BYTES besides its bytes (a million empty
# fields is no small reply either).
ELEMENT_COST = 16
# The longest entry id Redis makes: "<ms>-<seq>", two 64-bit numbers.
ENTRY_ID_MAX = 41
# A Harvest entry's fields (task_id, queue, due_at).
ENTRY_FIELDS = 3
# The entries of one stream, measured and cut down in Redis, for a reader that must not receive them
# whole: those another consumer left pending past min-idle (``reclaim``: XAUTOCLAIM, JUSTID) or those
# this consumer was handed by a read it could not take in (``pending``: XPENDING), PROJECT_MAX at
# most. Each comes back as {id, size, task_id, due_at}: size -1 for an entry trimmed or deleted
# meanwhile; both fields of an entry past MAX_ENTRY_BYTES, or whose task id is past 20 bytes or due
# time past 64 (no Harvest's: malformed, task 0), come back empty, so that the reply stays far below
# REPLY_MAX_BYTES (the queue field is not read: docs/redis-dispatch.md).
PROJECT_MAX = 1000
PROJECT_SCRIPT = """
local key, group, consumer, mode = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local count, max_bytes, min_idle = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local ids = {}
if mode == 'reclaim' then
  ids = redis.call('XAUTOCLAIM', key, group, consumer, min_idle, '0-0', 'COUNT', count, 'JUSTID')[2]
else
  for _, p in ipairs(redis.call('XPENDING', key, group, '-', '+', count, consumer)) do
    ids[#ids + 1] = p[1]
  end
end
local out = {}
for _, id in ipairs(ids) do
  local found = redis.call('XRANGE', key, id, id)[1]
  if not found then
    out[#out + 1] = {id, -1, '', ''}
  else
    local f, size, task_id, due_at = found[2], 0, '', ''
    for i = 1, #f do size = size + #f[i] end
    if size <= max_bytes then
      for i = 1, #f - 1, 2 do
        if f[i] == 'task_id' then task_id = f[i + 1] end
        if f[i] == 'due_at' then due_at = f[i + 1] end
      end
    end
    if #task_id > 20 or #due_at > 64 then task_id, due_at = '', '' end
    out[#out + 1] = {id, size, task_id, due_at}
  end
end
return out
"""
# The path of a Redis URL: none, or the database number.
DB_PATH = re.compile(r"(/[0-9]*)?")


def stream_key(queue: str) -> str:
    return STREAM_PREFIX + queue


def endpoint(url: str) -> str:
    """``scheme://host:port/db`` of a Redis URL, never its user or password (for errors and logs).
    Only of a URL :func:`check_url` passed: in one it refuses, a password not percent-encoded
    may have become the host, the port or the database."""
    parts = urlsplit(url)
    host = parts.hostname or ("localhost" if not parts.netloc else "?")
    port: int | str
    try:
        port = parts.port or 6379
    except ValueError:
        port = "?"
    db = parts.path if DB_PATH.fullmatch(parts.path) else ""
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"{parts.scheme}://{host}:{port}{db}"


def check_url(url: str, where: str = "redis.url") -> None:
    """Refuse a URL Redis dispatch cannot use safely, and a process without the client library.

    ``redis://`` (plaintext) or ``rediss://`` (TLS, verified against the platform trust store,
    or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``); no query option may weaken the verification; the
    ``redis`` package must be installed (``pip install 'harvest-workflows[redis]'``): a
    configured URL is never silently ignored. No error quotes the URL: a password in it that
    is not percent-encoded may sit in any of its parts.
    """
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ConfigError(f"{where} is not a Redis URL; use redis://host:6379 or rediss:// for TLS")
    # A password with a / # ? or @ that is not percent-encoded splits the URL elsewhere: its
    # pieces became the host, the port, the database or the query, were quoted by the client's
    # errors ("Port could not be cast to integer value as '...'") or sent the worker to another
    # host. Refused, naming no piece of it.
    if (
        (parts.netloc and not parts.hostname)
        or not _port_readable(parts)
        or not DB_PATH.fullmatch(parts.path)
        or "#" in url
        or "@" in parts.path + parts.query
    ):
        raise ConfigError(
            f"{where} cannot be read as redis[s]://[[user]:password@]host[:port][/db][?options]: "
            "percent-encode any of / # ? @ : % in the user or password (the URL is not shown here: "
            "it holds the password)"
        )
    _check_options(parts.query, where, tls=parts.scheme == "rediss")
    try:
        import redis  # noqa: F401
    except ImportError:
        raise ConfigError(
            f"{where} is set but the redis client is not installed: pip install 'harvest-workflows[redis]', "
            "or unset it to stay on the Postgres claim path"
        ) from None


def _check_options(query: str, where: str, *, tls: bool) -> None:
    """Refuse a query option Redis dispatch does not take (URL_OPTIONS), naming it and the
    accepted ones; never a value (``?password=...`` is refused by name). The client certificate's
    options only with TLS: a plaintext connection took them as keywords it does not know (a raw
    TypeError at boot)."""
    keys = sorted({k for k, _ in parse_qsl(query, keep_blank_values=True)})
    shown = ", ".join(k if OPTION_NAME.fullmatch(k) else "an option that is not a name" for k in keys)
    accepted = f"the options a Redis URL may set are {', '.join(sorted(URL_OPTIONS))}"
    if any(k.lower().startswith("ssl") and k not in CLIENT_TLS_OPTIONS for k in keys):
        raise ConfigError(
            f"{where}: the URL sets {shown}; Redis dispatch always verifies a rediss:// server "
            f"against the trust store (set SSL_CERT_FILE or SSL_CERT_DIR for a private CA); {accepted}"
        )
    plain = sorted(k for k in keys if k in CLIENT_TLS_OPTIONS) if not tls else []
    if plain:
        what = "a TLS option" if len(plain) == 1 else "TLS options"
        raise ConfigError(f"{where}: the URL sets {', '.join(plain)}, {what}: use rediss:// (or drop it)")
    if any(k not in URL_OPTIONS for k in keys):
        raise ConfigError(
            f"{where}: the URL sets {shown}, which Redis dispatch does not take: {accepted} "
            "(the timeouts, keepalives and TLS verification are Harvest's own: docs/redis-dispatch.md)"
        )


def _port_readable(parts: SplitResult) -> bool:
    try:
        return parts.port is None or parts.port > 0
    except ValueError:  # not a number, or past 65535
        return False


class ReplyTooLarge(Exception):
    """A reply of the Redis past REPLY_MAX_BYTES: not read (its connection is dropped)."""


@dataclass(frozen=True)
class TaskRef:
    """One reference read from a stream: the task it names and the entry to ack."""

    task_id: int
    queue: str
    due_at: datetime | None
    stream: str
    message_id: str
    oversized: int = 0  # the size of an entry past MAX_ENTRY_BYTES (task 0, acked and skipped)


def _parse(fields: Mapping[Any, Any]) -> tuple[int, str, datetime | None]:
    """(task id, queue, due time) of an entry's fields; task id 0 for an entry no Harvest wrote.

    Anyone who can write to the Redis can add an entry, so nothing of it is trusted: bytes that
    are not UTF-8, an id that is not a positive bigint (one past 2**63 - 1 reached the claim as
    numeric[] and failed it, for the whole batch, on every take-over), a due time that is not
    ISO 8601 with a zone (a naive one raised TypeError against the worker's clock, which ended
    the consumer). Such an entry is acked and skipped like a stale one; the claim in Postgres
    judges a well-formed one.
    """
    try:
        got = {k.decode() if isinstance(k, bytes) else str(k): v for k, v in fields.items()}
        raw_id, raw_due = got.get("task_id"), got.get("due_at")
        task_id = int(raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id))
        queue = got.get("queue", b"")
        queue = queue.decode() if isinstance(queue, bytes) else str(queue)
        due = raw_due.decode() if isinstance(raw_due, bytes) else str(raw_due or "")
        due_at = datetime.fromisoformat(due) if due else None
    except (ValueError, TypeError, AttributeError):  # (UnicodeDecodeError is a ValueError)
        return 0, "", None
    if not 0 < task_id <= ROW_ID_MAX or (due_at is not None and due_at.tzinfo is None):
        return 0, "", None
    return task_id, queue, due_at


def _entry_size(fields: Mapping[Any, Any]) -> int:
    return sum(len(k) + len(v) for k, v in fields.items() if isinstance(k, bytes) and isinstance(v, bytes))


def _refs(entries: Iterable[Any]) -> list[TaskRef]:
    """TaskRefs of XREADGROUP answers: [(stream, [(id, fields), ...]), ...]. Every entry gives
    one, to be acked: a trimmed one (no fields), a malformed one or one past MAX_ENTRY_BYTES
    names task 0."""
    refs = []
    for stream, messages in entries:
        for message_id, fields in messages:
            size = _entry_size(fields or {})
            if size > MAX_ENTRY_BYTES:
                refs.append(TaskRef(0, "", None, _decode(stream), _decode(message_id), size))
                continue
            task_id, queue, due_at = _parse(fields or {})
            refs.append(TaskRef(task_id, queue, due_at, _decode(stream), _decode(message_id)))
    return refs


def _projected(stream: str, rows: Iterable[Any]) -> list[TaskRef]:
    """TaskRefs of PROJECT_SCRIPT's rows: [id, size, task_id, due_at]."""
    refs = []
    for message_id, size, task_id, due_at in rows:
        if int(size) > MAX_ENTRY_BYTES:
            refs.append(TaskRef(0, "", None, stream, _decode(message_id), int(size)))
            continue
        fields = {b"task_id": task_id, b"due_at": due_at} if int(size) >= 0 else {}
        parsed_id, parsed_queue, parsed_due = _parse(fields)
        refs.append(TaskRef(parsed_id, parsed_queue, parsed_due, stream, _decode(message_id)))
    return refs


def _header_cost(n: int) -> int:
    """What the bounded parser charges for the header line of an array or bulk string of ``n``
    ("*n" or "$n")."""
    return 1 + len(str(n)) + ELEMENT_COST


# What one entry of Harvest's shape (ENTRY_FIELDS fields of MAX_ENTRY_BYTES at most, the longest
# id) costs a read's reply: its bytes, its id, and the headers of its two arrays and seven bulk
# strings (each charged as if MAX_ENTRY_BYTES long). 1,246 bytes; a published entry costs about 250.
ENTRY_REPLY_MAX = (
    _header_cost(2)
    + _header_cost(ENTRY_ID_MAX)
    + ENTRY_ID_MAX
    + _header_cost(2 * ENTRY_FIELDS)
    + 2 * ENTRY_FIELDS * _header_cost(MAX_ENTRY_BYTES)
    + MAX_ENTRY_BYTES
)


def read_count(queues: Sequence[str], count: int) -> int:
    """The COUNT of one XREADGROUP on the streams of these queues: ``count`` entries a stream, cut
    so that the reply cannot pass REPLY_MAX_BYTES while its entries have Harvest's shape. One read
    covers every stream at COUNT each: five queues at claim_batch 1,000 with a backlog of
    Harvest's own entries passed the bound on every read, which dropped its connection and took
    them through PROJECT_SCRIPT. So only an entry no Harvest wrote (past MAX_ENTRY_BYTES, or with
    more fields) can still pass it. At least 1: past about 800 queues, a read of one entry a
    stream may pass the bound (and is projected)."""
    framing = _header_cost(len(queues)) + sum(
        _header_cost(2) + _header_cost(len(key)) + len(key) + _header_cost(count)
        for key in map(stream_key, queues)
    )
    fits = (REPLY_MAX_BYTES - framing) // (max(1, len(queues)) * ENTRY_REPLY_MAX)
    return max(1, min(count, fits))


def _bounded_parser() -> type:
    """The redis client's RESP2 parser, refusing a reply past REPLY_MAX_BYTES before it reads
    (and allocates) the rest: each bulk string is charged its length before it is read, each
    element ELEMENT_COST. Built on first use (``redis`` is an optional import)."""
    import redis
    from redis._parsers import _AsyncRESP2Parser

    if not all(hasattr(_AsyncRESP2Parser, name) for name in ("_read", "_readline", "read_response")):
        # (the client's private parser changed: no bound rather than none silently)
        raise ConfigError(
            f"redis.url: the installed redis client {redis.__version__} reads replies in a way Harvest "
            "cannot bound (docs/redis-dispatch.md, tested with redis 8.2): install redis 8.2"
        )

    class BoundedReplyParser(_AsyncRESP2Parser):
        _left = REPLY_MAX_BYTES

        async def read_response(self, *args: Any, **kwargs: Any) -> Any:
            self._left = REPLY_MAX_BYTES
            return await super().read_response(*args, **kwargs)

        def _charge(self, n: int) -> None:
            self._left -= n
            if self._left < 0:
                raise ReplyTooLarge(f"a reply of the Redis is past {REPLY_MAX_BYTES} bytes")

        async def _readline(self) -> bytes:
            line = await super()._readline()
            self._charge(len(line) + ELEMENT_COST)
            return line

        async def _read(self, length: int) -> bytes:
            self._charge(length)
            return await super()._read(length)

    return BoundedReplyParser


def _decode(value: Any) -> str:
    """A stream key or an entry id (Redis made them: ASCII)."""
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisChannel:
    """One process's connection to the dispatch streams (asyncio)."""

    def __init__(self, url: str, client: Any) -> None:
        self.url = url
        self.endpoint = endpoint(url)
        self._client = client

    @classmethod
    async def connect(cls, url: str, queues: Sequence[str] = ()) -> RedisChannel:
        """Connect, check that this is one Redis instance, and make the consumer group of each
        queue's stream. Raises RedisUnavailable naming the endpoint when it cannot connect (a
        configured URL that cannot connect fails the boot: docs/redis-dispatch.md) and
        ConfigError for Redis Cluster."""
        check_url(url)
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import RedisError

        options: dict[str, Any] = {
            "socket_connect_timeout": CONNECT_TIMEOUT_SECS,
            "socket_timeout": COMMAND_TIMEOUT_SECS,
            "retry": Retry(NoBackoff(), 0),
            "health_check_interval": 15,
            # A Redis that goes silent is given up as a database is (harvest.db.connection), and
            # the worker falls back to the Postgres claim.
            "socket_keepalive": True,
            "socket_keepalive_options": SOCKET_KEEPALIVE_OPTIONS,  # the database's timings
            # No reply past REPLY_MAX_BYTES is taken in: entries are anyone's (MAX_ENTRY_BYTES).
            "parser_class": _bounded_parser(),
            "protocol": 2,  # (the bounded parser's)
        }
        if urlsplit(url).scheme == "rediss":
            # Verified against the platform trust store (SSL_CERT_FILE / SSL_CERT_DIR replace it),
            # host name included; no switch turns this off.
            options.update(ssl_cert_reqs="required", ssl_check_hostname=True)
        try:
            client = aioredis.Redis.from_url(url, **options)
        except ValueError:  # (its text may quote the URL's options)
            raise ConfigError(
                f"redis.url: the options of the URL of {endpoint(url)} are not the redis client's"
            ) from None
        channel = cls(url, client)
        try:
            await client.ping()
            cluster = await client.info("cluster")
            if int(cluster.get("cluster_enabled", 0) or 0):
                await channel.close()
                raise ConfigError(
                    f"redis.url: {channel.endpoint} is a Redis Cluster node; Redis dispatch supports "
                    "one Redis instance only (docs/redis-dispatch.md)"
                )
            await channel.ensure_groups(queues)
            await channel._check_projection(queues)
        except RedisError as exc:
            await channel.close()
            # (A refused AUTH, or a certificate not verified, is a Redis that is up: starting it
            # is not the cure.)
            cure = _cure(exc)
            raise RedisUnavailable(
                f"Redis dispatch is configured (redis.url) but {channel.endpoint} cannot be reached: "
                f"{type(exc).__name__}: {_safe(exc, url).rstrip('.')}; {cure}"
            ) from None
        except OSError as exc:
            await channel.close()
            raise RedisUnavailable(
                f"Redis dispatch is configured (redis.url) but {channel.endpoint} cannot be reached: "
                f"{exc.strerror or _safe(exc, url)}; start Redis or unset redis.url"
            ) from None
        return channel

    async def _check_projection(self, queues: Sequence[str]) -> None:
        """Run PROJECT_SCRIPT once (it projects nothing: a consumer that holds nothing). A Redis
        user whose ACL forbids EVAL (or a command the script calls) would boot, and then fail
        every take-over as a Redis loss: refused here, naming what to grant."""
        from redis.exceptions import NoPermissionError

        if not queues:
            return
        try:
            await self._client.eval(
                PROJECT_SCRIPT, 1, stream_key(queues[0]), GROUP, "harvest-boot-check", "pending", 1, 0, 0
            )
        except NoPermissionError:
            await self.close()
            raise ConfigError(
                f"redis.url: the Redis user of {self.endpoint} may not run EVAL with XAUTOCLAIM, XPENDING "
                "and XRANGE, which Redis dispatch's take-overs run: grant it +@scripting (and the stream "
                "commands) on the harvest:tasks:* keys (docs/redis-dispatch.md)"
            ) from None

    async def ensure_groups(self, queues: Iterable[str]) -> None:
        """The consumer group of each queue's stream (made with the stream; an existing one kept).
        A new group starts at the stream's end: what was published before is the Postgres
        claim's."""
        from redis.exceptions import ResponseError

        for queue in queues:
            try:
                await self._client.xgroup_create(stream_key(queue), GROUP, id="$", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def publish(self, refs: Iterable[Mapping[str, Any]]) -> int:
        """Add one entry per claimable task (``task_id``, ``queue``, ``due_at``) to its queue's
        stream, in one round trip; returns how many."""
        pipe = self._client.pipeline(transaction=False)
        n = 0
        for ref in refs:
            due = ref.get("due_at")
            pipe.xadd(
                stream_key(ref["queue"]),
                {
                    "task_id": str(ref["task_id"]),
                    "queue": ref["queue"],
                    "due_at": due.isoformat() if isinstance(due, datetime) else str(due or ""),
                },
                maxlen=STREAM_MAXLEN,
                approximate=True,
            )
            n += 1
        if n:
            await pipe.execute()
        return n

    async def read(self, consumer: str, queues: Sequence[str], count: int, block_ms: int) -> list[TaskRef]:
        """Up to ``count`` new references of each of these queues for ``consumer`` (fewer when
        that many could pass REPLY_MAX_BYTES: :func:`read_count`), waiting up to ``block_ms`` for
        one; each stays pending in the group until :meth:`ack`. A read whose reply is past
        REPLY_MAX_BYTES all the same (an entry no Harvest wrote, of any size) is not taken in: the
        entries it handed this consumer are taken through PROJECT_SCRIPT instead."""
        count = read_count(queues, count)
        try:
            answer = await self._client.xreadgroup(
                GROUP, consumer, {stream_key(q): ">" for q in queues}, count=count, block=block_ms
            )
        except ReplyTooLarge:
            return await self._project(consumer, queues, "pending", count)
        return _refs(answer or [])

    async def reclaim(
        self, consumer: str, queues: Sequence[str], min_idle_ms: int, count: int
    ) -> list[TaskRef]:
        """References another consumer read and never acked for ``min_idle_ms`` (it died between
        read and ack): taken over by ``consumer``, to be claimed (or found taken) and acked.
        Measured in Redis: an entry past MAX_ENTRY_BYTES comes back as its id and size only."""
        return await self._project(consumer, queues, "reclaim", count, min_idle_ms)

    async def _project(
        self, consumer: str, queues: Sequence[str], mode: str, count: int, min_idle_ms: int = 0
    ) -> list[TaskRef]:
        refs: list[TaskRef] = []
        for queue in queues:
            key = stream_key(queue)
            rows = await self._client.eval(
                PROJECT_SCRIPT,
                1,
                key,
                GROUP,
                consumer,
                mode,
                min(count, PROJECT_MAX),
                MAX_ENTRY_BYTES,
                min_idle_ms,
            )
            refs += _projected(key, rows or [])
        return refs

    async def ack(self, refs: Iterable[TaskRef]) -> None:
        by_stream: dict[str, list[str]] = {}
        for ref in refs:
            by_stream.setdefault(ref.stream, []).append(ref.message_id)
        if not by_stream:
            return
        pipe = self._client.pipeline(transaction=False)
        for stream, ids in by_stream.items():
            pipe.xack(stream, GROUP, *ids)
        await pipe.execute()

    async def delete_consumer(self, consumer: str, queues: Iterable[str]) -> None:
        """Forget a stopping consumer (its unacked references, if any, go with it: the rows
        they name are the Postgres claim's). One pipelined round trip, so a Redis that does not
        answer holds a worker's stop for one COMMAND_TIMEOUT_SECS, not one per queue."""
        pipe = self._client.pipeline(transaction=False)
        for queue in queues:
            pipe.xgroup_delconsumer(stream_key(queue), GROUP, consumer)
        await pipe.execute()

    async def close(self) -> None:
        try:
            await self._client.aclose()
        except AttributeError:  # redis < 5.0.1
            await self._client.close()


def _cure(exc: BaseException) -> str:
    """What to do about a Redis that the boot could not use (the end of RedisUnavailable's line)."""
    from redis.exceptions import AuthenticationError, NoPermissionError  # (the redis extra)

    if isinstance(exc, AuthenticationError):
        return "Redis refused the login: check the user and password in redis.url (percent-encoded)"
    if isinstance(exc, NoPermissionError):
        return (
            "the Redis user's ACL lacks a command Redis dispatch runs: grant it on the "
            "harvest:tasks:* keys (docs/redis-dispatch.md, Configure, lists them)"
        )
    if isinstance(exc.__cause__, ssl.SSLCertVerificationError):
        return (
            "its TLS certificate was not verified: name in redis.url a host its certificate carries, "
            "and for a private CA set SSL_CERT_FILE or SSL_CERT_DIR to it"
        )
    return "start Redis or unset redis.url"


def _safe(exc: BaseException, url: str) -> str:
    """An error's text with the URL's password taken out, as written and as sent (decoded)."""
    text = str(exc)
    password = urlsplit(url).password
    for form in sorted({password, unquote(password)} if password else (), key=len, reverse=True):
        text = text.replace(form, "***")
    return text
