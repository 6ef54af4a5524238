"""The optional Redis dispatch (harvest/worker/redis_dispatch.py, docs/redis-dispatch.md) on a real
redis-server (Debian's, `make redis`) that each test starts on a free port in its own directory.

Dispatch end to end, a reference to a row another worker holds (acked, run once), the boot
refusals (unreachable, Redis Cluster, sharded), the config checks, and Redis killed mid-run
(marker chaos): the Postgres claim path finishes the work.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import cli_forks
import psycopg
import pytest

from harvest import App, Client, Worker, activity, workflow
from harvest.config import load_config
from harvest.core.errors import ConfigError, RedisUnavailable
from harvest.db import redis_channel
from harvest.db.redis_channel import GROUP, RedisChannel, check_url, endpoint, stream_key

REDIS_SERVER = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(
    REDIS_SERVER is None and os.environ.get("CI") != "true",
    reason="redis-server is not installed (make redis)",
)

ran: dict[int, int] = {}
ran_lock = threading.Lock()


@activity(queue="rd_acts")
async def mark(ctx, i: int) -> int:
    with ran_lock:
        ran[i] = ran.get(i, 0) + 1
    await asyncio.sleep(0.005)
    return i


@workflow(queue="rd_wf")
async def fan(ctx, first: int, n: int) -> int:
    return sum(await asyncio.gather(*(ctx.execute_activity(mark, first + i) for i in range(n))))


app = App(workflows=[fan], activities=[mark])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server of one test: its own port and directory, no persistence; killed at the end."""

    def __init__(self, directory: Path, port: int | None = None):
        self.directory = directory
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *extra: str) -> RedisServer:
        assert REDIS_SERVER is not None, "redis-server is not installed: make redis"
        self.proc = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--save",
                "",
                "--appendonly",
                "no",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith((b"+PONG", b"-NOAUTH")):  # (up; -NOAUTH: --requirepass)
                        return self
            except OSError:
                time.sleep(0.02)
        self.kill()  # (not left running behind the failed test)
        raise AssertionError(f"redis-server did not start on port {self.port}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # (a test may have stopped it: SIGSTOP)
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path).start()
    try:
        yield server
    finally:
        server.kill()


def connected(*running: Any) -> None:
    """Wait until each RunningWorker's Redis dispatch is up (its consumer groups exist): a
    reference published before its group was made is the Postgres claim's, by design."""
    deadline = time.monotonic() + 10
    while not all(r.worker.redis.connected and r.worker.lanes[0].ready for r in running):
        assert time.monotonic() < deadline, "the Redis dispatch of a worker did not come up"
        time.sleep(0.01)


def start_fans(client: Client, count: int, width: int) -> list:
    return [client.start_workflow(fan, i * width, width, workflow_id=f"rd-{i}") for i in range(count)]


def run_of_each(width: int, count: int) -> dict[int, int]:
    with ran_lock:
        return {i: ran.get(i, 0) for i in range(count * width)}


# -- dispatch end to end ---------------------------------------------------------------------------


def test_dispatch_runs_every_task_once_and_claims_by_reference(db, redis_server, start_worker, client):
    """Two workers with Redis: the decider publishes the activities it does not hand off, the
    other claims them by reference; every activity runs once and every reference is acked."""
    ran.clear()
    decider = start_worker(app, queues=["rd_wf"], redis_url=redis_server.url, hand_off=False)
    runner = start_worker(app, queues=["rd_acts"], redis_url=redis_server.url, concurrency=8)
    connected(decider, runner)
    dispatch = runner.worker.redis
    # Both paths run. The runner's LISTEN/NOTIFY claim usually takes a row before its reference
    # arrives (that reference is then skipped), and a claim in flight keeps its slots, so a
    # reference read meanwhile finds none free: the runner's claim loop here starts each claim
    # 50 ms late, which leaves the first slots to the references and the rest to it. Rounds go
    # on until one task was claimed by reference.
    claim_now = runner.worker._claim

    async def claim_late():
        await asyncio.sleep(0.05)
        return await claim_now()

    runner.worker._claim = claim_late
    for round_ in range(5):
        first = round_ * 12
        handles = [
            client.start_workflow(fan, (first + i) * 5, 5, workflow_id=f"rd-{first + i}") for i in range(12)
        ]
        assert [h.result(timeout=30) for h in handles] == [
            sum(range(j * 5, j * 5 + 5)) for j in range(first, first + 12)
        ]
        if dispatch.claimed:
            break
    assert set(run_of_each(5, first + 12).values()) == {1}  # each activity ran exactly once
    assert decider.worker.redis.published > 0

    async def stream_state() -> tuple[int, int]:
        """(references published to rd_acts, references read there and not acked)"""
        channel = await RedisChannel.connect(redis_server.url)
        try:
            info = await channel._client.xpending(stream_key("rd_acts"), GROUP)
            return await channel._client.xlen(stream_key("rd_acts")), info["pending"]
        finally:
            await channel.close()

    # The decider published the activities each decision left pending (the other worker's
    # Postgres claim may take one first: it is not published then); the runner reads them all.
    entries, _ = asyncio.run(stream_state())
    assert entries > 0
    deadline = time.monotonic() + 10
    # (a reference is counted read before its named claim ends: claimed or skipped after it)
    while (dispatch.read < entries or dispatch.claimed + dispatch.skipped < dispatch.read) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.02)
    assert dispatch.read == entries
    assert dispatch.claimed + dispatch.skipped == dispatch.read
    assert dispatch.claimed > 0, "no task was claimed through Redis"
    assert asyncio.run(stream_state()) == (entries, 0)  # every reference read was acked


def test_a_reference_to_a_row_another_worker_holds_is_acked_and_not_run(db, redis_server, start_worker):
    """A stale reference (the row is already claimed elsewhere) is acked and skipped: the row
    keeps its holder and its lease, and nothing runs twice."""
    ran.clear()
    with Client(db) as c:
        c.start_workflow(fan, 1000, 1, workflow_id="held")
    with psycopg.connect(db, autocommit=True) as conn:
        task = conn.execute(
            "SELECT task_id, fencing_token, queue, lease_expires_at "
            "FROM harvest.claim_tasks('other', ARRAY['rd_wf'], 1, 60)"
        ).fetchone()
    assert task is not None
    running = start_worker(app, queues=["rd_wf"], redis_url=redis_server.url)
    connected(running)
    dispatch = running.worker.redis

    async def publish() -> None:
        channel = await RedisChannel.connect(redis_server.url)
        try:
            await channel.publish([{"task_id": task[0], "queue": "rd_wf", "due_at": task[3]}])
        finally:
            await channel.close()

    asyncio.run(publish())
    deadline = time.monotonic() + 5
    while dispatch.claimed + dispatch.skipped < 1 and time.monotonic() < deadline:  # (its claim answered)
        time.sleep(0.02)
    assert (dispatch.read, dispatch.claimed, dispatch.skipped) == (1, 0, 1)
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(
            "SELECT status, lease_owner, fencing_token FROM harvest.tasks WHERE id = %s", (task[0],)
        ).fetchone()
    assert row == ("running", "other", task[1])  # still the other worker's claim
    assert ran == {}


@activity(queue="rd_wf")
async def rd_first(ctx) -> int:
    return 1


@activity(queue="rd_elsewhere")
async def rd_elsewhere(ctx, i: int) -> int:
    return i


@workflow(queue="rd_wf")
async def rd_then_fan(ctx) -> int:
    await ctx.execute_activity(rd_first)
    return sum(await asyncio.gather(*(ctx.execute_activity(rd_elsewhere, i) for i in range(6))))


def test_the_activities_of_a_decision_made_ahead_are_published(db, redis_server, start_worker, client):
    """The decision the activity's worker makes ahead on its result (worker/decide_ahead.py,
    committed with the result) schedules activities as a workflow task's does: those it does not
    hand back are published (here all six: no worker of this one's polls their queue)."""
    running = start_worker(
        App(workflows=[rd_then_fan], activities=[rd_first, rd_elsewhere]),
        queues=["rd_wf"],
        redis_url=redis_server.url,
    )
    connected(running)
    client.start_workflow(rd_then_fan, workflow_id="rd-ahead")
    dispatch, worker = running.worker.redis, running.worker
    deadline = time.monotonic() + 10
    while not worker.decided_ahead and time.monotonic() < deadline:
        time.sleep(0.02)
    assert worker.decided_ahead == 1, "the fan-out was decided ahead on rd_first's result"
    while dispatch.published < 6 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert dispatch.published == 6


held_gate = threading.Event()
held_started = threading.Event()


@activity(queue="rd_hold")
async def held(ctx) -> str:
    held_started.set()
    while not held_gate.is_set():
        await asyncio.sleep(0.02)
    return "done"


@workflow(queue="rd_hold")
async def holds(ctx) -> str:
    return await ctx.execute_activity(held)


def test_a_stopping_worker_stops_its_consumer_before_its_drain_and_publishes_through_it(
    db, redis_server, start_worker, client
) -> None:
    """The stop's order (Worker._stop): the Redis consumer, which claims, is stopped before the
    drain begins; the publisher runs on through it (what the work in flight commits is
    published for the other workers)."""
    running_at_drain: list[set[str]] = []

    class AtDrain(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:  # (on the worker's loop)
            if "finishing 1 in-flight task(s)" in record.getMessage():
                running_at_drain.append({t.get_name() for t in asyncio.all_tasks() if not t.done()})

    handler = AtDrain(logging.INFO)
    logger = logging.getLogger("harvest.worker")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    held_gate.clear()
    held_started.clear()
    try:
        hold_app = App(workflows=[holds], activities=[held])
        running = start_worker(hold_app, queues=["rd_hold"], redis_url=redis_server.url, shutdown_grace=60)
        connected(running)
        handle = client.start_workflow(holds)
        assert held_started.wait(30), "the activity did not start"
        running.loop.call_soon_threadsafe(running.worker.request_stop)
        deadline = time.monotonic() + 30
        while not running_at_drain:
            assert time.monotonic() < deadline, "the drain did not begin"
            time.sleep(0.02)
        held_gate.set()
        running._thread.join(30)
        assert not running._thread.is_alive()
    finally:
        held_gate.set()
        logger.removeHandler(handler)
        logger.setLevel(level)
    [names] = running_at_drain
    assert "redis-consumer" not in names and {"redis-publisher", "queries-0", "heartbeat-0"} <= names
    start_worker(hold_app, queues=["rd_hold"])
    assert handle.result(timeout=30) == "done"


def test_the_channel_gives_a_silent_redis_up_as_a_database_is(redis_server) -> None:
    """Keepalives and the TCP user timeout of harvest.db.connection on the channel's socket: a
    read blocked on a Redis that went silent fails in about 30 s, and the worker falls back."""
    from silent_peer_helpers import EXPECTED, socket_settings

    async def settings() -> tuple[int, ...]:
        channel = await RedisChannel.connect(redis_server.url)
        try:
            # redis-py keeps the socket in its pool's connection, behind asyncio's transport.
            (conn,) = channel._client.connection_pool._available_connections
            return socket_settings(conn._writer.transport.get_extra_info("socket").fileno())
        finally:
            await channel.close()

    assert asyncio.run(settings()) == EXPECTED


# -- boot refusals and config ----------------------------------------------------------------------


def test_boot_refuses_an_unreachable_redis_naming_it(db) -> None:
    port = free_port()  # nothing listens there
    worker = Worker(app, db, redis_url=f"redis://:s3cret@127.0.0.1:{port}/0")
    with pytest.raises(RedisUnavailable) as refused:
        asyncio.run(worker.run())
    message = str(refused.value)
    assert f"redis://127.0.0.1:{port}/0 cannot be reached" in message
    assert "s3cret" not in message
    assert ".;" not in message, message  # (the client's sentence, then the cure: one full stop less)


def test_harvest_worker_exits_1_on_an_unreachable_redis(db, tmp_path) -> None:
    from test_config import harvest_cmd, one_error_line

    port = free_port()
    r = harvest_cmd(
        db,
        "worker",
        "test_redis_dispatch:app",
        env={"HARVEST_REDIS__URL": f"redis://127.0.0.1:{port}"},
        cwd=tmp_path,
    )
    assert r.returncode == 1
    assert f"redis://127.0.0.1:{port} cannot be reached" in one_error_line(r)


def test_boot_refuses_redis_cluster(db, tmp_path) -> None:
    # The cluster bus gets a free port of its own (by default it is the port + 10000, which
    # may be taken or past 65535).
    server = RedisServer(tmp_path).start("--cluster-enabled", "yes", "--cluster-port", str(free_port()))
    try:
        with pytest.raises(
            ConfigError, match="is a Redis Cluster node; Redis dispatch supports one Redis instance"
        ):
            asyncio.run(Worker(app, db, redis_url=server.url).run())
    finally:
        server.kill()


def test_a_sharded_deployment_is_refused(db) -> None:
    with pytest.raises(ConfigError, match="single-shard deployment only"):
        load_config(
            env={
                "HARVEST_REDIS__URL": "redis://cache:6379",
                "HARVEST_SHARDS__URLS__0": db,
                "HARVEST_SHARDS__URLS__1": db,
            }
        )
    with pytest.raises(ConfigError, match="polls 2 shards: Redis dispatch supports a single-shard"):
        Worker(app, shards={0: db, 1: db}, redis_url="redis://cache:6379")


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("http://cache:6379", "is not a Redis URL"),
        ("rediss://cache:6380?ssl_cert_reqs=none", "sets ssl_cert_reqs; Redis dispatch always verifies"),
        # Every other TLS option of the redis client that loosens or replaces the verification
        ("rediss://cache:6380?ssl_ca_data=PEM", "sets ssl_ca_data; Redis dispatch always verifies"),
        ("rediss://cache:6380?ssl_exclude_verify_flags=VERIFY_X509_STRICT", "sets ssl_exclude_verify_flags"),
        ("rediss://cache:6380?ssl_include_verify_flags=VERIFY_X509_PARTIAL_CHAIN", "sets ssl_include_verify"),
        ("rediss://cache:6380?ssl_min_version=2", "sets ssl_min_version"),
        ("rediss://cache:6380?ssl_ciphers=ALL%3A%40SECLEVEL%3D0", "sets ssl_ciphers"),
    ],
)
def test_config_refuses_an_unusable_url(url: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_config(env={"HARVEST_REDIS__URL": url})
    assert load_config(env={"HARVEST_REDIS__URL": "rediss://u:pw@cache:6380/2"}).get("redis.url")
    check_url("redis://cache")
    assert endpoint("rediss://u:pw@cache:6380/2") == "rediss://cache:6380/2"


def test_a_configured_url_without_the_redis_client_is_refused_at_config_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The spec: a build without Redis support rejects a configured URL at config validation
    rather than ignoring it. Here: without the redis package (sys.modules["redis"] = None makes
    its import fail), load_config refuses ``redis.url`` naming the extra to install; with no
    URL the same load passes (the Postgres claim path needs no client)."""
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(
        ConfigError, match=r"redis client is not installed: pip install 'harvest-workflows\[redis\]'"
    ):
        load_config(env={"HARVEST_REDIS__URL": "redis://cache:6379/0"})
    assert load_config(env={}).get("redis.url") is None


@pytest.mark.parametrize(
    ("query", "option"),
    [
        ("bogus=1", "bogus"),
        ("ssl_cert_req=none", "ssl_cert_req"),  # a misspelt TLS option
        ("socket_timeout=3600", "socket_timeout"),  # one the client knows: it replaced Harvest's timeout
        ("health_check_interval=0", "health_check_interval"),
        ("password=hunter2secret", "password"),  # a password in the query is not scrubbed from errors
    ],
)
def test_an_unknown_url_option_is_a_config_error_naming_it_and_not_the_password(
    query: str, option: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An option of the URL's query that Redis dispatch does not take reached the redis client as a
    keyword: a raw TypeError at boot (``AbstractConnection.__init__() got an unexpected keyword
    argument 'bogus'``), or one of the client's own (``socket_timeout``) silently replaced the
    timeouts Harvest sets. Refused at config load and by Worker(), naming the option and the ones
    accepted, never the password."""
    url = f"rediss://:hunter2secret@127.0.0.1:6380/0?{query}"
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ConfigError) as refused:
        load_config(env={"HARVEST_REDIS__URL": url})
    text = str(refused.value)
    assert f"sets {option}" in text and "client_name, ssl_certfile, ssl_keyfile, ssl_password" in text, text
    with pytest.raises(ConfigError) as refused_by_worker:
        Worker(app, "postgresql://nowhere/x", redis_url=url)
    assert str(refused_by_worker.value) == str(refused.value).replace(
        "redis.url (from HARVEST_REDIS__URL)", "redis.url"
    )
    for shown in (text, caplog.text):
        assert "hunter2" not in shown and "secret" not in shown, shown
    check_url(
        "rediss://:hunter2secret@127.0.0.1:6380/0?client_name=w1&ssl_certfile=/c.pem&ssl_keyfile=/k.pem"
    )


@pytest.mark.parametrize("option", ["ssl_certfile=/c.pem", "ssl_keyfile=/k.pem", "ssl_password=pw"])
def test_a_client_certificate_option_on_a_plaintext_url_is_a_config_error(option: str) -> None:
    """The client certificate's options are TLS options: on a ``redis://`` URL the redis client's
    plaintext connection took them as keywords it does not know, and `harvest worker` died at boot
    with a raw TypeError (``AbstractConnection.__init__() got an unexpected keyword argument
    'ssl_certfile'``). Refused at config load and by Worker(), pointing at ``rediss://``."""
    url = f"redis://cache:6379/0?{option}"
    name = option.split("=")[0]
    with pytest.raises(ConfigError, match=f"sets {name}, a TLS option: use rediss://"):
        load_config(env={"HARVEST_REDIS__URL": url})
    with pytest.raises(ConfigError, match=f"sets {name}, a TLS option: use rediss://"):
        Worker(app, "postgresql://nowhere/x", redis_url=url)
    check_url(f"rediss://cache:6380/0?{option}")


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A private CA and a server certificate it signed for the name ``localhost`` only."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("harvest test CA"))
        .issuer_name(name("harvest test CA"))
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name("localhost"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


def test_tls_is_verified_against_the_trust_store(tmp_path, monkeypatch) -> None:
    """rediss:// verifies the server: refused by the platform trust store (a private CA), accepted
    with SSL_CERT_FILE naming that CA, and refused again for a name the certificate does not carry."""
    ca, cert, key = _certificates(tmp_path)
    server = RedisServer(tmp_path)  # started here: RedisServer.start's probe speaks plaintext
    assert REDIS_SERVER is not None
    server.proc = subprocess.Popen(
        [
            REDIS_SERVER,
            "--port",
            "0",
            "--tls-port",
            str(server.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(tmp_path),
            "--save",
            "",
            "--appendonly",
            "no",
            "--tls-cert-file",
            str(cert),
            "--tls-key-file",
            str(key),
            "--tls-ca-cert-file",
            str(ca),
            "--tls-auth-clients",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", server.port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "redis-server (TLS) did not start"
                time.sleep(0.02)

        async def connect(url: str) -> None:
            channel = await RedisChannel.connect(url, ["q"])
            await channel.close()

        url = f"rediss://localhost:{server.port}/0"
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        with pytest.raises(RedisUnavailable, match="certificate verify failed") as refused:
            asyncio.run(connect(url))
        # A Redis that is up: the cure is the certificate's name or the trust store, not starting it.
        assert "set SSL_CERT_FILE or SSL_CERT_DIR" in str(refused.value), refused.value
        assert "start Redis" not in str(refused.value), refused.value
        # A CA given in the URL's query does not replace the trust store: refused, not connected.
        with pytest.raises(ConfigError, match="sets ssl_ca_data"):
            asyncio.run(connect(f"{url}?{urlencode({'ssl_ca_data': ca.read_text()})}"))
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        asyncio.run(connect(url))  # the private CA replaces the store: verified, connected
        with pytest.raises(RedisUnavailable, match=r"certificate verify failed|match") as refused:
            asyncio.run(connect(f"rediss://127.0.0.1:{server.port}/0"))  # not the certificate's name
        assert "a host its certificate carries" in str(refused.value), refused.value
    finally:
        server.kill()


# -- Redis lost mid-run ------------------------------------------------------------------------------


@pytest.mark.chaos
def test_redis_killed_mid_run_the_postgres_claim_finishes_the_work(db, tmp_path, start_worker, client):
    ran.clear()
    server = RedisServer(tmp_path).start()
    try:
        decider = start_worker(app, queues=["rd_wf"], redis_url=server.url, hand_off=False)
        runner = start_worker(app, queues=["rd_acts"], redis_url=server.url, concurrency=4)
        connected(decider, runner)
        first = start_fans(client, 4, 5)
        assert [h.result(timeout=30) for h in first] == [sum(range(i * 5, i * 5 + 5)) for i in range(4)]
        server.kill()
        handles = [client.start_workflow(fan, 100 + i * 5, 5, workflow_id=f"rd-late-{i}") for i in range(8)]
        assert [h.result(timeout=30) for h in handles] == [
            sum(range(100 + i * 5, 105 + i * 5)) for i in range(8)
        ]
        assert runner.worker.redis.losses + decider.worker.redis.losses >= 1
        # The runner learns Redis is gone at its next call to it, which can come after the runs
        # have all ended on the Postgres claim (CI saw it still connected right after them).
        deadline = time.monotonic() + 20
        while runner.worker.redis.connected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not runner.worker.redis.connected
        with ran_lock:
            assert set(ran.values()) == {1} and len(ran) == 60
        # Back on the same port: the consumer reconnects and claims by reference again.
        server = RedisServer(tmp_path, server.port).start()
        deadline = time.monotonic() + 10
        while not runner.worker.redis.connected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert runner.worker.redis.connected
    finally:
        server.kill()


# -- harvest dev honours redis.url ---------------------------------------------------------------------


def _dev_demo(db: str, redis_url: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARVEST_")}
    env.update(HARVEST_DEV_DATABASE_URL=db, HARVEST_REDIS__URL=redis_url)
    return cli_forks.run(["dev", "--demo-and-exit", "--no-api"], env, cwd=tmp_path, timeout=120)


def test_harvest_dev_refuses_an_unreachable_redis(db, tmp_path) -> None:
    """dev ran its worker without the configured redis.url (the demo passed on the Postgres
    claim with the setting silently ignored): it now boots the worker's Redis dispatch, which
    refuses a Redis it cannot reach, at once (not after the demo's result timeout)."""
    port = free_port()
    done = _dev_demo(db, f"redis://127.0.0.1:{port}/0", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"redis://127.0.0.1:{port}/0 cannot be reached" in done.stderr
    assert "Traceback" not in done.stderr


def test_harvest_dev_dispatches_through_redis(db, redis_server, tmp_path) -> None:
    done = _dev_demo(db, redis_server.url, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Hello, world!" in done.stdout

    async def groups() -> dict[str, list[str]]:
        """The consumer groups of each stream: the dispatch makes its group on the streams of
        the queues it polls as it boots (the demo's tasks are handed off, so none is published)."""
        import redis.asyncio as aioredis

        conn = aioredis.from_url(redis_server.url)
        try:
            return {
                k.decode(): [g["name"].decode() for g in await conn.xinfo_groups(k)]
                async for k in conn.scan_iter("harvest:tasks:*")
            }
        finally:
            await conn.aclose()

    assert asyncio.run(groups()) == {stream_key("default"): [GROUP]}


def test_a_stale_channel_failing_after_the_reconnect_does_not_drop_the_new_one(tmp_path) -> None:
    """Redis restarted: the consumer lost the channel and reconnected to the new server, then a
    publish still in flight on the old channel failed. That failure dropped (and closed) the
    new channel: a second loss, a second reconnect, and the references of its reads lost in
    between. A failure on a channel already given up is now the old channel's alone."""
    from types import SimpleNamespace

    from harvest.worker.redis_dispatch import RedisDispatch

    async def scenario(server: RedisServer) -> tuple[bool, int, bool]:
        async def claimable(runs, kind):
            return [{"task_id": 1, "queue": "rd_q", "due_at": None}]

        lane = SimpleNamespace(usable=True, sql=SimpleNamespace(list_claimable_tasks=claimable))
        worker = SimpleNamespace(queues=["rd_q"], worker_id="rd-w", lanes=[lane])
        dispatch = RedisDispatch(worker, server.url)  # type: ignore[arg-type]
        await dispatch.open()
        old = dispatch.channel
        assert old is not None
        in_flight = asyncio.Event()
        fail = asyncio.Event()

        async def publish_across_the_restart(refs):
            in_flight.set()
            await fail.wait()
            raise ConnectionError("Connection reset by peer")

        old.publish = publish_across_the_restart  # type: ignore[method-assign]
        publishing = asyncio.create_task(dispatch._publish(["run-1"], None))
        await in_flight.wait()
        server.kill()
        await dispatch._lost(ConnectionError("reading"), "reading", old)  # the consumer's read failed
        server.start()  # the same port
        assert await dispatch._reconnect()
        new = dispatch.channel
        fail.set()  # the old channel's publish fails only now
        await publishing
        try:
            one = [{"task_id": 2, "queue": "rd_q", "due_at": None}]
            return dispatch.channel is new, dispatch.losses, await new.publish(one) == 1  # type: ignore[union-attr]
        finally:
            await dispatch.close()

    server = RedisServer(tmp_path).start()
    try:
        kept, losses, usable = asyncio.run(scenario(server))
    finally:
        server.kill()
    assert (kept, losses, usable) == (True, 1, True)


# -- hostile references ------------------------------------------------------------------------------


async def _raw_xadd(url: str, queue: str, *entries: dict[Any, Any]) -> None:
    """Entries added to a queue's stream as they are, past RedisChannel.publish (what another
    writer of the same Redis, a bug or an attacker with access could add)."""
    import redis.asyncio as aioredis

    conn = aioredis.from_url(url)
    try:
        for fields in entries:
            await conn.xadd(stream_key(queue), fields)
    finally:
        await conn.aclose()


async def _unacked(url: str, queue: str) -> int:
    import redis.asyncio as aioredis

    conn = aioredis.from_url(url)
    try:
        return (await conn.xpending(stream_key(queue), GROUP))["pending"]
    finally:
        await conn.aclose()


@pytest.mark.parametrize(
    "fields",
    [
        {b"task_id": b"\xff\xfe\x00", "queue": "rd_wf"},  # not UTF-8
        {b"\xc3\x28": b"1"},  # a field name that is not UTF-8
        {"task_id": "1", "queue": "rd_wf", "due_at": "2020-01-01T00:00:00"},  # a due time without a zone
        {"task_id": str(2**70), "queue": "rd_wf"},  # past a bigint
        {"task_id": "9" * 5000, "queue": "rd_wf", "due_at": "x" * 100_000},
        {"task_id": "1", "queue": "rd_wf", "junk": "x" * 16_000_000},  # a huge entry
    ],
    ids=["task-id-not-utf8", "field-name-not-utf8", "naive-due-at", "id-past-bigint", "long-digits", "huge"],
)
def test_a_malformed_reference_is_acked_and_the_consumer_goes_on(
    db, redis_server, start_worker, fields: dict[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """An entry no Harvest wrote (garbage bytes, a due time without a zone, an id no bigint
    holds, a huge one) is acked and skipped, and the references after it are read: it is not
    a Redis loss, it does not end the consumer, and it does not stay pending to fail again."""
    running = start_worker(app, queues=["rd_wf"], redis_url=redis_server.url)
    connected(running)
    dispatch = running.worker.redis
    well_formed = {"task_id": "999999999", "queue": "rd_wf", "due_at": ""}  # names no row: skipped
    asyncio.run(_raw_xadd(redis_server.url, "rd_wf", fields, well_formed))
    deadline = time.monotonic() + 15
    while dispatch.read < 2 or asyncio.run(_unacked(redis_server.url, "rd_wf")):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert (dispatch.read, dispatch.claimed, dispatch.skipped, dispatch.losses) == (2, 0, 2, 0)
    assert asyncio.run(_unacked(redis_server.url, "rd_wf")) == 0
    asyncio.run(_raw_xadd(redis_server.url, "rd_wf", well_formed))  # the consumer still reads
    while dispatch.read < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dispatch.read == 3
    assert "x" * 64 not in caplog.text and "9" * 64 not in caplog.text  # (no entry's content logged)
    if "junk" in fields:
        assert dispatch.oversized == 1
        assert "1 stream entry past 1024 bytes acked and skipped" in caplog.text, caplog.text


def test_boot_refuses_a_redis_user_that_may_not_run_the_projection(tmp_path) -> None:
    """The take-overs (and a read past the reply bound) run a Lua script: a Redis user whose ACL
    forbids scripting booted, then every take-over failed as a Redis loss and reconnected, every
    10 s. Refused at boot instead, naming what to grant and not the password."""
    acl = ("hv", "on", ">hunter2secret", "~*", "&*", "+@all", "-@scripting")
    server = RedisServer(tmp_path).start("--user", *acl)
    try:
        with pytest.raises(ConfigError) as refused:
            asyncio.run(RedisChannel.connect(f"redis://hv:hunter2secret@127.0.0.1:{server.port}/0", ["q"]))
    finally:
        server.kill()
    text = str(refused.value)
    assert "EVAL" in text and "+@scripting" in text and "hunter2" not in text, text


def test_boot_refuses_a_redis_user_without_client_setname_saying_to_grant_it(tmp_path) -> None:
    """The ACL docs/redis-dispatch.md lists boots, and with ``client_name`` in the URL it also needs
    CLIENT SETNAME: refused at boot naming the command and saying to grant it, not to start a
    Redis that is up."""
    acl = ("hv", "on", ">hunter2secret", "~harvest:tasks:*", "+xadd", "+xreadgroup", "+xack")
    acl += ("+xgroup", "+xautoclaim", "+xpending", "+xrange", "+eval", "+ping", "+info")
    server = RedisServer(tmp_path).start("--user", *acl)
    url = f"redis://hv:hunter2secret@127.0.0.1:{server.port}/0"

    async def connect(url: str) -> None:
        channel = await RedisChannel.connect(url, ["q"])
        await channel.close()

    try:
        asyncio.run(connect(url))  # the documented commands are enough
        with pytest.raises(RedisUnavailable) as refused:
            asyncio.run(connect(f"{url}?client_name=w1"))
    finally:
        server.kill()
    text = str(refused.value)
    assert "client|setname" in text and "grant it" in text, text
    assert "start Redis" not in text and "hunter2" not in text, text


def test_a_take_over_of_many_entries_just_under_the_entry_bound_fits_its_reply(redis_server) -> None:
    """The projection's own reply is bounded too: 1,200 entries, each under MAX_ENTRY_BYTES but
    with a 900-byte due time, made the projection's reply past REPLY_MAX_BYTES (a read's and a
    take-over's would fail as a Redis loss, at every take-over). A projected entry carries a
    task id and a due time of a sane length only (else it is malformed), and one call projects
    1,000 entries at most. (A read of them is cut to fit its reply: read_count.)"""
    url = redis_server.url

    async def scenario() -> tuple[list, list]:
        channel = await RedisChannel.connect(url, ["rd_many"])
        try:
            await _raw_xadd(
                url, "rd_many", *({"task_id": str(i + 1), "due_at": "x" * 900} for i in range(1200))
            )
            read: list = []
            while len(read) < 1200:  # c1 reads them all, and dies
                got = await channel.read("c1", ["rd_many"], 1200, 100)
                assert got, len(read)
                read += got
            return read, await channel.reclaim("c2", ["rd_many"], 0, 5000)
        finally:
            await channel.close()

    read, taken = asyncio.run(scenario())
    assert len(read) == 1200 and len(taken) == 1000, (len(read), len(taken))
    for refs in (read, taken):
        assert {r.task_id for r in refs} == {0}, refs[:3]  # (malformed due times)


def test_a_batch_of_more_references_than_one_named_claim_takes_is_acked_not_stuck(
    db, redis_server, start_worker, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker with more than 1,000 free slots (concurrency goes to 10,000) read up to
    claim_batch references per stream (and a take-over as many as its free slots): more than
    claim_named_tasks' 1..1000 ids, which refused the whole batch (HR001); its references stayed
    pending, were taken over and refused again, for good. The claim now asks for 1,000 at most
    and acks the rest unclaimed (their rows are the Postgres claim's)."""

    async def backlog() -> None:  # published before the worker reads, so that one read takes them all
        channel = await RedisChannel.connect(redis_server.url, ["rd_wf", "rd_acts"])
        await channel.close()
        for first, queue in ((10**12, "rd_wf"), (2 * 10**12, "rd_acts")):
            await _raw_xadd(
                redis_server.url, queue, *({"task_id": str(first + i), "queue": queue} for i in range(600))
            )

    asyncio.run(backlog())
    running = start_worker(
        app, queues=["rd_wf", "rd_acts"], redis_url=redis_server.url, concurrency=5000, claim_batch=1000
    )
    dispatch = running.worker.redis
    deadline = time.monotonic() + 20
    while dispatch.skipped < 1200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (dispatch.read, dispatch.claimed, dispatch.skipped) == (1200, 0, 1200)
    # (A batch is counted skipped before its ack is sent: CI 66d read 180 still pending.)
    unacked = lambda: sum(asyncio.run(_unacked(redis_server.url, q)) for q in ("rd_wf", "rd_acts"))  # noqa: E731
    while unacked() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert asyncio.run(_unacked(redis_server.url, "rd_wf")) == 0
    assert asyncio.run(_unacked(redis_server.url, "rd_acts")) == 0
    assert "claiming named tasks failed" not in caplog.text


def test_no_read_takes_in_an_entry_past_its_bound(redis_server) -> None:
    """Anyone who can write to the Redis can add an entry of any size (a value of 8 MB, 200,000
    fields): a read took every entry it was handed in whole, so a hostile or buggy publisher
    made a worker allocate without bound. Now no reply past REPLY_MAX_BYTES is read: the entries
    of that read, and those another consumer left pending, are measured in Redis and come back
    as their ids and sizes, acked and skipped like a malformed one; a well-formed one among them
    is still a reference."""
    import tracemalloc

    from harvest.db.redis_channel import MAX_ENTRY_BYTES, REPLY_MAX_BYTES

    url = redis_server.url
    entries = [
        {"task_id": "7", "queue": "rd_big", "junk": "x" * 8_000_000},
        {f"f{i}": "" for i in range(200_000)},
        {"task_id": "8", "queue": "rd_big", "junk": "y" * 4000},  # under the reply's bound, past an entry's
        {"task_id": "9", "queue": "rd_big", "due_at": ""},
    ]

    async def measured(call: Any) -> tuple[list, int]:
        tracemalloc.start()
        try:
            refs = await call
            return refs, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    async def scenario() -> tuple[Any, ...]:
        channel = await RedisChannel.connect(url, ["rd_big"])
        try:
            await _raw_xadd(url, "rd_big", *entries)
            read, read_peak = await measured(channel.read("c1", ["rd_big"], 10, 100))
            # c1 died before its ack: c2 takes the four over
            taken, taken_peak = await measured(channel.reclaim("c2", ["rd_big"], 0, 10))
            return read, read_peak, taken, taken_peak
        finally:
            await channel.close()

    read, read_peak, taken, taken_peak = asyncio.run(scenario())
    for refs, peak in ((read, read_peak), (taken, taken_peak)):
        assert [r.task_id for r in refs] == [0, 0, 0, 9], refs
        assert all(r.oversized > MAX_ENTRY_BYTES for r in refs[:3]) and not refs[3].oversized, refs
        assert refs[0].oversized > 8_000_000
        assert peak < 2 * REPLY_MAX_BYTES, peak


async def _connections_received(url: str) -> int:
    """How many connections the Redis has accepted so far (a channel that drops its connection
    after a reply past the bound connects again)."""
    import redis.asyncio as aioredis

    conn = aioredis.from_url(url)
    try:
        return int((await conn.info("stats"))["total_connections_received"])
    finally:
        await conn.aclose()


@pytest.mark.parametrize("shape", ["published", "largest-well-formed"])
def test_a_backlog_of_well_formed_entries_on_many_queues_never_passes_the_reply_bound(
    redis_server, shape: str
) -> None:
    """One XREADGROUP covers every queue the worker polls at COUNT entries each (claim_batch per
    stream): five queues at claim_batch 1,000 with a backlog of Harvest's own entries (about 250
    bytes each in the reply) passed REPLY_MAX_BYTES on every read, so each read of ordinary
    entries dropped its connection and took them through the projection. Each read's COUNT is now
    cut so that entries of Harvest's shape (three fields, MAX_ENTRY_BYTES at most, the longest
    entry id) cannot pass the bound: the backlog is read whole, with no reconnect."""
    from harvest.db.redis_channel import MAX_ENTRY_BYTES

    url = redis_server.url
    queues = [f"rd_many_{i}" for i in range(5)]
    due = "2026-01-01T00:00:00.123456+00:00"

    async def scenario() -> tuple[list, int]:
        import redis.asyncio as aioredis

        channel = await RedisChannel.connect(url, queues)
        raw = aioredis.from_url(url)
        try:
            for q, queue in enumerate(queues):
                first = (q + 1) * 10**17  # (18 digits: a task id as long as Harvest's get)
                if shape == "published":
                    await channel.publish(
                        {"task_id": first + i, "queue": queue, "due_at": datetime.fromisoformat(due)}
                        for i in range(1000)
                    )
                    continue
                pipe = raw.pipeline(transaction=False)
                for i in range(1000):
                    fields = {"task_id": str(first + i), "due_at": due, "queue": ""}
                    fields["queue"] = "q" * (
                        MAX_ENTRY_BYTES - sum(len(k) + len(v) for k, v in fields.items())
                    )
                    # the longest entry id Redis makes (two 20-digit numbers)
                    pipe.xadd(stream_key(queue), fields, id=f"{10**19 + q * 10**6 + i}-{10**19}")
                await pipe.execute()
            before = await _connections_received(url)
            refs: list = []
            while len(refs) < 5000:
                got = await channel.read("c1", queues, 1000, 100)
                assert got, len(refs)
                refs += got
            return refs, await _connections_received(url) - before - 1  # (less _connections_received's own)
        finally:
            await raw.aclose()
            await channel.close()

    refs, reconnects = asyncio.run(scenario())
    assert reconnects == 0
    assert len({r.task_id for r in refs}) == 5000 and not any(r.oversized for r in refs), refs[:3]


def test_a_worker_on_five_queues_at_claim_batch_1000_reads_a_backlog_without_the_projection(
    db, redis_server, start_worker, monkeypatch
) -> None:
    """The reviewer's case end to end: a worker polling five queues at claim_batch 1,000 with
    free slots to match and a backlog of 1,000 references a queue. Its reads passed
    REPLY_MAX_BYTES and were projected (a dropped connection each); now none is."""
    queues = ["rd_wf", "rd_acts", "rd_more_1", "rd_more_2", "rd_more_3"]
    projected: list[str] = []
    project = RedisChannel._project

    async def counting(self, consumer, queues_, mode, *args):  # type: ignore[no-untyped-def]
        projected.append(mode)
        return await project(self, consumer, queues_, mode, *args)

    monkeypatch.setattr(RedisChannel, "_project", counting)

    async def backlog() -> None:  # published before the worker reads, so that its reads meet all of it
        channel = await RedisChannel.connect(redis_server.url, queues)
        try:
            for q, queue in enumerate(queues):
                await channel.publish(
                    {"task_id": (q + 1) * 10**12 + i, "queue": queue, "due_at": datetime.now(UTC)}
                    for i in range(1000)
                )
        finally:
            await channel.close()

    asyncio.run(backlog())
    running = start_worker(app, queues=queues, redis_url=redis_server.url, concurrency=5000, claim_batch=1000)
    dispatch = running.worker.redis
    deadline = time.monotonic() + 30
    while dispatch.skipped < 5000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (dispatch.read, dispatch.claimed, dispatch.skipped, dispatch.losses) == (5000, 0, 5000, 0)
    assert "pending" not in projected, projected


@pytest.mark.parametrize(
    "url",
    [
        "redis://:hun/ter2secret@127.0.0.1:6379/0",  # a '/' (base64) not percent-encoded
        "redis://:hun#ter2secret@127.0.0.1:6379/0",
        "redis://:hun?ter2secret@127.0.0.1:6379/0",
        "redis://:12345/ter2secret@127.0.0.1:6379/0",  # which also read as localhost:12345
        "redis://:hunter2secret@127.0.0.1:6379/zero",
        "redis://:hunter2secret@127.0.0.1:port/0",
    ],
)
def test_a_url_whose_password_breaks_its_parse_is_refused_without_echoing_it(url: str, db) -> None:
    """A password with a character the URL syntax reads (/ # ?) that is not percent-encoded
    splits the URL elsewhere: the password's pieces became the host, the port or the database,
    and an error quoted them ("Port could not be cast to integer value as 'hun'"), or the
    worker connected to another host. Such a URL is refused at config load, naming no piece
    of it past the scheme."""
    with pytest.raises(ConfigError) as refused:
        load_config(env={"HARVEST_REDIS__URL": url})
    for text in (str(refused.value), endpoint(url)):
        assert "hun" not in text and "ter2" not in text and "secret" not in text, text
    assert "percent-encode" in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        asyncio.run(Worker(app, db, redis_url=url).run())
    assert "hun" not in str(refused.value) and "secret" not in str(refused.value)


def test_no_redis_error_names_the_password(tmp_path) -> None:
    """The password, as written (percent-encoded) and as sent, is in no error of a refused
    AUTH, nor in the log."""
    server = RedisServer(tmp_path).start("--requirepass", "p@ss/w0rd")

    async def connect(url: str) -> None:
        channel = await RedisChannel.connect(url, ["q"])
        await channel.close()

    try:
        for password in ("wr%40ng%2Fpw", "p%40ss%2Fw0rd%21"):  # wrong; and the right one with a "!"
            url = f"redis://:{password}@127.0.0.1:{server.port}/0"
            with pytest.raises(RedisUnavailable) as refused:
                asyncio.run(connect(url))
            text = str(refused.value)
            assert not [p for p in ("wr%40ng", "wr@ng", "ng/pw", "p%40ss", "p@ss", "w0rd") if p in text], text
            # A refused login is not a Redis to start: the error says what to check.
            assert "refused the login: check the user and password in redis.url" in text, text
            assert "start Redis" not in text, text
        asyncio.run(connect(f"redis://:p%40ss%2Fw0rd@127.0.0.1:{server.port}/0"))  # (the right one)
    finally:
        server.kill()


# -- a Redis that stops answering ----------------------------------------------------------------------


def test_a_redis_that_stops_answering_holds_neither_the_work_nor_the_stop(
    db, redis_server, start_worker, client, monkeypatch
) -> None:
    """A Redis that accepts and never answers: every call to it is given up after the channel's
    command timeout (here shortened) and the worker goes on, on the Postgres claim path (the
    loss is logged and counted), and its stop ends. The calls waited forever: the consumer's
    read, the publisher's XADD (while the runs to publish piled up) and, at the stop, the
    consumer's removal, so the stop never ended."""
    monkeypatch.setattr(redis_channel, "COMMAND_TIMEOUT_SECS", 1.5)
    monkeypatch.setattr(redis_channel, "CONNECT_TIMEOUT_SECS", 0.5)
    ran.clear()
    running = start_worker(app, queues=["rd_wf", "rd_acts"], redis_url=redis_server.url, hand_off=False)
    connected(running)
    dispatch = running.worker.redis
    assert redis_server.proc is not None
    redis_server.proc.send_signal(signal.SIGSTOP)
    handles = start_fans(client, 3, 4)
    assert [h.result(timeout=60) for h in handles] == [sum(range(i * 4, i * 4 + 4)) for i in range(3)]
    deadline = time.monotonic() + 30
    while not dispatch.losses and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dispatch.losses == 1 and not dispatch.connected
    running.loop.call_soon_threadsafe(running.worker.request_stop)
    running._thread.join(30)
    assert not running._thread.is_alive(), "the stop waited on the silent Redis"


def test_a_stop_just_after_redis_stops_answering_ends(db, redis_server, start_worker, monkeypatch) -> None:
    """The stop removes the worker's consumer from the group: on a Redis that stopped answering
    before the worker noticed, that call waited forever (redis 5's default), so the stop did."""
    monkeypatch.setattr(redis_channel, "COMMAND_TIMEOUT_SECS", 1.5)
    running = start_worker(app, queues=["rd_wf", "rd_acts"], redis_url=redis_server.url)
    connected(running)
    assert redis_server.proc is not None
    redis_server.proc.send_signal(signal.SIGSTOP)
    running.loop.call_soon_threadsafe(running.worker.request_stop)
    running._thread.join(30)
    assert not running._thread.is_alive(), "the stop waited on the silent Redis"


# -- duplicates and races --------------------------------------------------------------------------


def test_two_connections_claiming_the_same_references_at_once_never_share_a_task(db) -> None:
    """A duplicated reference read by two workers at once: two real connections call
    claim_named_tasks with the same ids, released together by a barrier, many times over. Each
    task goes to one of them (FOR UPDATE SKIP LOCKED, then the status), never to both; and a
    claim in flight (uncommitted) hides its rows from the other."""
    with Client(db) as c:
        for i in range(60):
            c.start_workflow(fan, 0, 1, workflow_id=f"rd-dup-{i}")
    with psycopg.connect(db, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM harvest.tasks WHERE queue = 'rd_wf' ORDER BY id")]
    assert len(ids) == 60
    claim = "SELECT task_id FROM harvest.claim_named_tasks(%s, ARRAY['rd_wf'], %s, 60)"

    # A claim in flight: the other finds nothing, before and after it commits.
    with psycopg.connect(db) as a, psycopg.connect(db, autocommit=True) as b:
        first = [r[0] for r in a.execute(claim, ("rd-a", ids[:5]))]
        assert first == ids[:5]
        assert b.execute(claim, ("rd-b", ids[:5])).fetchall() == []
        a.commit()
        assert b.execute(claim, ("rd-b", ids[:5])).fetchall() == []

    # Both at once, one id a round, then the rest in one batch each.
    rounds = [[i] for i in ids[5:45]] + [ids[45:]]
    barrier = threading.Barrier(2)
    got: dict[str, list[int]] = {"rd-a": [], "rd-b": []}

    def claimer(worker_id: str) -> None:
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(claim, (worker_id, [ids[0]]))  # (warm: the plan is cached before the race)
            for batch in rounds:
                barrier.wait(30)
                got[worker_id] += [r[0] for r in conn.execute(claim, (worker_id, batch))]

    threads = [threading.Thread(target=claimer, args=(w,)) for w in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert not set(got["rd-a"]) & set(got["rd-b"]), "a task was claimed by both"
    assert sorted(got["rd-a"] + got["rd-b"]) == ids[5:]
    with psycopg.connect(db, autocommit=True) as conn:
        owners = conn.execute(
            "SELECT lease_owner, count(*), max(attempt) FROM harvest.tasks WHERE id = ANY(%s) "
            "GROUP BY 1 ORDER BY 1",
            (ids[5:],),
        ).fetchall()
    assert [(o, n) for o, n, _ in owners] == [(w, len(got[w])) for w in sorted(got) if got[w]]
    assert {a for _, _, a in owners} == {1}  # each claimed once


def test_references_a_claim_could_not_take_are_acked_and_run_nothing(db, redis_server, start_worker) -> None:
    """Forged or stale references, each acked and skipped with its row left as it was: one
    naming a task of a queue the worker does not poll (on a stream it does read), one naming a
    task not due yet that claims a due time in the past, one naming no row, one naming a row
    deleted since."""
    with Client(db) as c:
        c.start_workflow(fan, 0, 1, workflow_id="rd-later")
        other = c.start_workflow(fan, 0, 1, workflow_id="rd-other", queue="rd_other")
        gone = c.start_workflow(fan, 0, 1, workflow_id="rd-gone", queue="rd_other")
    with psycopg.connect(db, autocommit=True) as conn:
        later_id = conn.execute(
            "UPDATE harvest.tasks SET due_at = now() + interval '1 hour' WHERE queue = 'rd_wf' RETURNING id"
        ).fetchone()[0]
        other_id, gone_id = (
            conn.execute(
                "SELECT t.id FROM harvest.tasks AS t JOIN harvest.executions AS x ON x.id = t.execution_id "
                "WHERE x.workflow_id = %s",
                (h.workflow_id,),
            ).fetchone()[0]
            for h in (other, gone)
        )
        conn.execute("DELETE FROM harvest.tasks WHERE id = %s", (gone_id,))
        before = conn.execute("SELECT id, status, attempt, due_at FROM harvest.tasks ORDER BY id").fetchall()
    running = start_worker(app, queues=["rd_wf"], redis_url=redis_server.url)
    connected(running)
    dispatch = running.worker.redis
    past = "2020-01-01T00:00:00+00:00"
    asyncio.run(
        _raw_xadd(
            redis_server.url,
            "rd_wf",
            {"task_id": str(other_id), "queue": "rd_wf", "due_at": past},  # (its queue forged too)
            {"task_id": str(later_id), "queue": "rd_wf", "due_at": past},
            {"task_id": str(10**12), "queue": "rd_wf", "due_at": past},
            {"task_id": str(gone_id), "queue": "rd_wf", "due_at": past},
        )
    )
    deadline = time.monotonic() + 15
    while dispatch.read + dispatch.claimed < 4 or asyncio.run(_unacked(redis_server.url, "rd_wf")):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert (dispatch.read, dispatch.claimed, dispatch.skipped) == (4, 0, 4)
    assert asyncio.run(_unacked(redis_server.url, "rd_wf")) == 0
    with psycopg.connect(db, autocommit=True) as conn:
        after = conn.execute("SELECT id, status, attempt, due_at FROM harvest.tasks ORDER BY id").fetchall()
    assert after == before


@workflow(queue="rd_dupq")
async def dup_fan(ctx, first: int, n: int) -> int:
    return sum(await asyncio.gather(*(ctx.execute_activity(mark_dup, first + i) for i in range(n))))


@activity(queue="rd_dupa")
async def mark_dup(ctx, i: int) -> int:
    with ran_lock:
        ran[i] = ran.get(i, 0) + 1
    return i


def test_every_reference_published_twice_still_runs_each_task_once(
    db, redis_server, start_worker, client
) -> None:
    """The decider publishes each reference twice (a retried XADD does); two runners read them,
    so the two copies of one reference reach both at once or one after the other: every
    activity runs once."""
    ran.clear()
    dup_app = App(workflows=[dup_fan], activities=[mark_dup])
    decider = start_worker(dup_app, queues=["rd_dupq"], redis_url=redis_server.url, hand_off=False)
    runners = [
        start_worker(dup_app, queues=["rd_dupa"], redis_url=redis_server.url, concurrency=4) for _ in range(2)
    ]
    connected(decider, *runners)
    channel = decider.worker.redis.channel
    assert channel is not None
    publish_once = channel.publish

    async def publish_twice(refs) -> int:
        refs = list(refs)
        return await publish_once(refs + refs)

    channel.publish = publish_twice  # type: ignore[method-assign]
    for runner in runners:  # the Postgres claim starts late: the references get their chance
        claim_now = runner.worker._claim

        async def claim_late(claim_now=claim_now):
            await asyncio.sleep(0.05)
            return await claim_now()

        runner.worker._claim = claim_late
    handles = [client.start_workflow(dup_fan, i * 6, 6, workflow_id=f"rd-dup-{i}") for i in range(10)]
    assert [h.result(timeout=60) for h in handles] == [sum(range(i * 6, i * 6 + 6)) for i in range(10)]
    with ran_lock:
        assert sorted(ran) == list(range(60)) and set(ran.values()) == {1}
    assert decider.worker.redis.published >= 2


@pytest.mark.chaos
def test_references_lost_in_a_redis_restarted_empty_leave_no_task_behind(
    db, tmp_path, start_worker, client
) -> None:
    """The decider publishes the activities of three runs while no worker polls their queue;
    Redis is killed and comes back empty (no persistence): the references are gone, and the
    runner, connected to the new Redis, runs every activity once on the Postgres claim."""
    ran.clear()
    dup_app = App(workflows=[dup_fan], activities=[mark_dup])
    server = RedisServer(tmp_path).start()
    try:
        decider = start_worker(dup_app, queues=["rd_dupq"], redis_url=server.url, hand_off=False)
        connected(decider)
        handles = [client.start_workflow(dup_fan, i * 4, 4, workflow_id=f"rd-lost-{i}") for i in range(3)]
        deadline = time.monotonic() + 30
        while decider.worker.redis.published < 12:
            assert time.monotonic() < deadline, "the decider did not publish the activities"
            time.sleep(0.02)
        server.kill()
        server = RedisServer(tmp_path, server.port).start()
        runner = start_worker(dup_app, queues=["rd_dupa"], redis_url=server.url)
        connected(runner)
        assert [h.result(timeout=60) for h in handles] == [sum(range(i * 4, i * 4 + 4)) for i in range(3)]
        with ran_lock:
            assert sorted(ran) == list(range(12)) and set(ran.values()) == {1}
        assert runner.worker.redis.claimed == 0  # (nothing was left in Redis to read)
    finally:
        server.kill()


def test_boot_refuses_a_redis_that_accepts_and_never_answers(db, redis_server, monkeypatch) -> None:
    """The boot's PING on a Redis that accepts and never answers fails after the command timeout
    (RedisUnavailable, naming the endpoint), where redis 5's default waited forever."""
    monkeypatch.setattr(redis_channel, "COMMAND_TIMEOUT_SECS", 1.0)
    assert redis_server.proc is not None
    redis_server.proc.send_signal(signal.SIGSTOP)
    with pytest.raises(RedisUnavailable, match=f"{redis_server.url} cannot be reached: TimeoutError"):
        asyncio.run(Worker(app, db, redis_url=redis_server.url).run())


def test_harvest_worker_exits_1_on_a_redis_that_accepts_and_never_answers(db, redis_server, tmp_path) -> None:
    """The process, not only Worker.run: `harvest worker` whose Redis accepts and never answers
    (frozen) gives it up after the command timeout (5 s) and exits 1 with the one line naming
    the endpoint, instead of hanging at its boot."""
    from test_config import harvest_cmd, one_error_line

    assert redis_server.proc is not None
    redis_server.proc.send_signal(signal.SIGSTOP)
    r = harvest_cmd(
        db, "worker", "test_redis_dispatch:app", env={"HARVEST_REDIS__URL": redis_server.url}, cwd=tmp_path
    )
    assert r.returncode == 1
    assert f"{redis_server.url} cannot be reached: TimeoutError" in one_error_line(r)


def test_a_failure_handling_references_does_not_end_the_consumer(db, redis_server, start_worker) -> None:
    """An error nothing foresaw while the consumer handles what it read (injected here: the
    first batch's handling raises) is logged and the consumer goes on; the references of that
    batch stay pending and are taken over. Such an error ended the consumer's task silently,
    and the worker ran on without Redis dispatch until its stop."""
    running = start_worker(app, queues=["rd_wf"], redis_url=redis_server.url)
    connected(running)
    dispatch = running.worker.redis
    handle = dispatch._claim
    failed: list[int] = []

    async def fails_once(channel, refs):
        if not failed:
            failed.append(len(refs))
            raise RuntimeError("unforeseen")
        await handle(channel, refs)

    dispatch._claim = fails_once  # type: ignore[method-assign]
    no_row = {"task_id": "999999999", "queue": "rd_wf", "due_at": ""}
    asyncio.run(_raw_xadd(redis_server.url, "rd_wf", no_row))
    deadline = time.monotonic() + 15
    while not failed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert failed == [1]
    asyncio.run(_raw_xadd(redis_server.url, "rd_wf", no_row))  # read by the consumer still running
    while dispatch.skipped < 1 and time.monotonic() < deadline:  # (counted once its claim answered)
        time.sleep(0.02)
    assert (dispatch.read, dispatch.skipped, dispatch.losses) == (1, 1, 0)
    assert asyncio.run(_unacked(redis_server.url, "rd_wf")) == 1  # the first, to be taken over


@pytest.mark.parametrize(
    "claim",
    [
        "SELECT task_id FROM harvest.claim_named_tasks('rd-b', ARRAY['rd_wf'], ARRAY[%s::bigint], 60)",
        "SELECT task_id FROM harvest.claim_tasks('rd-b', ARRAY['rd_wf'], 1, 60) WHERE %s IS NOT NULL",
    ],
    ids=["claim_named_tasks", "claim_tasks"],
)
def test_a_row_that_stops_being_due_while_a_claim_reads_it_is_not_claimed(db, claim: str) -> None:
    """A claim reads its candidates in one statement and locks them in a later one (the gates
    and owner mode run between). A row read as due whose due time moved past now before the
    lock (a retry's backoff: claimed, failed and pending again) was claimed all the same: the
    lock re-checked only that the row was pending. Made to happen here by holding the claim
    between its statements (an ACCESS EXCLUSIVE lock on harvest.owner_mode, which only the
    second reads) while the row's due time moves."""
    with Client(db) as c:
        c.start_workflow(fan, 0, 1, workflow_id="rd-moving")
    with psycopg.connect(db, autocommit=True) as conn:
        task_id = conn.execute("SELECT id FROM harvest.tasks WHERE queue = 'rd_wf'").fetchone()[0]
    got: list[Any] = []
    with psycopg.connect(db) as holder, psycopg.connect(db, autocommit=True) as watcher:
        holder.execute("LOCK TABLE harvest.owner_mode IN ACCESS EXCLUSIVE MODE")
        with psycopg.connect(db, autocommit=True) as claimer:
            pid = claimer.info.backend_pid
            thread = threading.Thread(
                target=lambda: got.extend(claimer.execute(claim, (task_id,)).fetchall())
            )
            thread.start()
            deadline = time.monotonic() + 30
            while not watcher.execute(
                "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()[0]:
                assert time.monotonic() < deadline, "the claim did not reach its second statement"
                time.sleep(0.01)
            watcher.execute(
                "UPDATE harvest.tasks SET due_at = now() + interval '1 hour', attempt = attempt + 1 "
                "WHERE id = %s",
                (task_id,),
            )
            holder.commit()
            thread.join(30)
    assert got == []
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT status FROM harvest.tasks WHERE id = %s", (task_id,)).fetchone() == (
            "pending",
        )


def test_a_reconnect_refused_for_good_reasons_keeps_the_consumer_trying(db, tmp_path, start_worker) -> None:
    """Redis came back as something the boot would refuse (here a Redis Cluster node on the same
    port): the reconnect's ConfigError ended the consumer's task silently, so the worker never
    came back to Redis dispatch. It is now logged and retried like a Redis still down: the
    consumer is back once a single Redis answers there again."""
    import redis as sync_redis

    for name in ("one", "cluster"):
        (tmp_path / name).mkdir()
    server = RedisServer(tmp_path / "one").start()
    try:
        running = start_worker(app, queues=["rd_wf"], redis_url=server.url)
        connected(running)
        dispatch = running.worker.redis
        server.kill()
        server = RedisServer(tmp_path / "cluster", server.port).start(
            "--cluster-enabled", "yes", "--cluster-port", str(free_port())
        )
        deadline = time.monotonic() + 30
        with sync_redis.Redis(port=server.port) as cluster_node:
            # The worker's reconnect PINGs the node and is refused (start's probe was one PING).
            while cluster_node.info("commandstats").get("cmdstat_ping", {}).get("calls", 0) < 2:
                assert time.monotonic() < deadline, "the consumer did not try the cluster node"
                time.sleep(0.05)
        assert dispatch.losses == 1 and not dispatch.connected
        server.kill()
        server = RedisServer(tmp_path / "one", server.port).start()
        deadline = time.monotonic() + 30
        while not dispatch.connected:
            assert time.monotonic() < deadline, "the consumer did not come back"
            time.sleep(0.05)
    finally:
        server.kill()
