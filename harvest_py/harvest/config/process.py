"""Run the worker of a configured process: one database, or a pool per shard.

The one place that turns a :class:`~harvest.config.Config` and a :class:`WorkerOptions` into a
running :class:`~harvest.worker.Worker`: ``harvest worker``, Django's ``manage.py
harvest_worker`` and the FastAPI/Starlette lifespan (harvest/integrations) all call it, the
lifespan and ``harvest serve`` through :class:`WorkerBeside`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from harvest.config.config import (
    Config,
    database_url,
    log,
    resolve_queues,
    runtime_plan,
    shard_urls,
    worker_options,
)
from harvest.core.errors import ConfigError
from harvest.shard.router import ShardRouter
from harvest.worker.options import WorkerOptions
from harvest.worker.probes import WorkerProbes, run_probed
from harvest.worker.worker import Worker


def is_sharded(config: Config) -> bool:
    """Whether the worker of this configuration polls shards (``[shards]``) rather than one database."""
    return bool(config.get("shards.urls")) or ShardRouter.from_config(config) != ShardRouter.single(0)


def worker_dsn(config: Config, explicit: str | None = None, hint: str | None = None) -> str | None:
    """The database URL of the worker (``explicit``, ``HARVEST_DATABASE_URL``, the config's
    ``database_url``); None on shards whose shard 0 is in ``shards.urls``. ``hint``:
    :func:`database_url`'s."""
    try:
        return database_url(explicit, config, hint=hint)
    except ConfigError:
        if not is_sharded(config) or "0" not in (config.get("shards.urls") or {}):
            raise
        return None


async def run_worker(
    app: Any,
    config: Config,
    options: WorkerOptions,
    *,
    database_url: str | None = None,
    dsn_hint: str | None = None,
    install_signal_handlers: bool = False,
    started: Callable[[Worker], None] | None = None,
    probes: WorkerProbes | None = None,
) -> None:
    """Run a worker for ``app`` until it is asked to stop (``worker.request_stop()``, or SIGTERM
    and SIGINT with ``install_signal_handlers``), then drain it. ``started`` is handed the
    :class:`Worker` before it runs (to stop it from elsewhere). ``probes``
    (:func:`harvest.worker.probes.probes_on`): the liveness and readiness they answer are this
    worker's, its loop ticking for them while it runs (``worker.liveness_stall_after``)."""
    if probes is None:
        await _run_worker(app, config, options, database_url, dsn_hint, install_signal_handlers, started)
        return

    def attach(worker: Worker) -> None:
        probes.attach(worker)
        if started is not None:
            started(worker)

    probes.stall_after = options.liveness_stall_after
    running = _run_worker(app, config, options, database_url, dsn_hint, install_signal_handlers, attach)
    await run_probed(probes, running)


async def _run_worker(
    app: Any,
    config: Config,
    options: WorkerOptions,
    database_url: str | None,
    dsn_hint: str | None,
    install_signal_handlers: bool,
    started: Callable[[Worker], None] | None,
) -> None:
    log_startup(app, config, options)
    dsn = worker_dsn(config, database_url, dsn_hint)
    if not is_sharded(config):
        worker = Worker(app, dsn, options=options, redis_url=config.get("redis.url"))
        if started is not None:
            started(worker)
        await worker.run(install_signal_handlers=install_signal_handlers)
        return
    # The cross-shard pump (relays of external signals and cancels, cross-shard children)
    # needs a pool to every shard a relay may target, not only the assigned ones; each
    # shard's scanner sweeps that shard's outbox (harvest/shard/relay_pump.py).
    from harvest.shard.pools import AsyncShardPools
    from harvest.shard.relay_pump import RelayPump

    router = ShardRouter.from_config(config)
    urls = shard_urls(config, dsn)
    async with AsyncShardPools(router, urls, max_size=2) as pump_pools:
        worker = Worker(
            app,
            options=options,
            shards=urls,
            router=router,
            relay_pump=RelayPump(pump_pools),
            redis_url=config.get("redis.url"),  # refused on shards: docs/redis-dispatch.md
        )
        if started is not None:
            started(worker)
        await worker.run(install_signal_handlers=install_signal_handlers)


class WorkerBeside:
    """:func:`run_worker` as a task on a server's event loop, beside what the server serves
    (``HarvestLifespan(run_worker=True)``, the runtimes ``harvest serve`` places): it starts at
    once, :meth:`started` waits for its boot, and :meth:`stop` drains it. ``on_failure`` is
    handed the error of a worker that ended by itself while the server ran (a stop's own error
    is :meth:`stop`'s to raise, a boot's :meth:`started`'s); :attr:`failure` keeps it.
    ``on_drained`` is handed the worker that ended by itself without an error while the server
    ran (a remote drain, ``harvest worker drain`` or the dashboard's button, stopped its claim
    loop, scheduler and janitor) and when; :attr:`drained_at` keeps when. ``probes``:
    :func:`run_worker`'s."""

    def __init__(
        self,
        app: Any,
        config: Config,
        options: WorkerOptions,
        *,
        database_url: str | None,
        name: str,
        on_failure: Callable[[BaseException], None],
        on_drained: Callable[[Worker, datetime], None] | None = None,
        probes: WorkerProbes | None = None,
    ) -> None:
        self.worker: Worker | None = None  # once built (a stop before that stops it as it is handed over)
        self.failure: BaseException | None = None
        self.drained_at: datetime | None = None
        self._on_drained = on_drained
        self._built = asyncio.Event()
        self._stopping = False
        self._start_awaited = False
        self._on_failure = on_failure
        self._task = asyncio.create_task(
            run_worker(app, config, options, database_url=database_url, started=self._started, probes=probes),
            name=name,
        )
        self._task.add_done_callback(self._ended)

    def _started(self, worker: Worker) -> None:
        self.worker = worker
        self._built.set()
        if self._stopping:  # the server stopped before the worker was built
            worker.request_stop()

    @property
    def booted(self) -> bool:
        return self.worker is not None and self.worker.booted.is_set()

    def _ended(self, task: asyncio.Task[None]) -> None:
        if self._stopping or task.cancelled():
            return
        error = task.exception()
        if error is None and self.booted and self.worker is not None:
            # Ended by itself, no stop asked of it here: its registry row was drained.
            self.drained_at = datetime.now(UTC)
            if self._on_drained is not None:
                self._on_drained(self.worker, self.drained_at)
            return
        if error is None or (self._start_awaited and not self.booted):
            return  # (a boot's error is started()'s to raise)
        self.failure = error
        self._on_failure(error)

    async def started(self) -> None:
        """Return once the worker has booted (Redis, its databases and their schema, its
        registration); raise what ended it if it could not: a server that awaits this before it
        serves never serves without its worker (a failure at boot was only logged, and the
        server looked healthy with nothing claiming its queues)."""
        self._start_awaited = True
        await self._until(self._built)
        if self.worker is not None:
            await self._until(self.worker.booted)
        if self.booted:
            return
        await self._task  # raises what ended the boot
        raise RuntimeError("the worker stopped before it started")  # (asked to stop meanwhile)

    async def _until(self, event: asyncio.Event) -> None:
        """Wait for ``event``, or for the worker's task to end (whichever first)."""
        if self._task.done():
            return
        waiting = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait({self._task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()

    async def stop(self) -> None:
        """Stop claiming, let the tasks in flight finish (``shutdown_grace``), release the
        rest; a worker that had failed raises its error here."""
        self._stopping = True
        if self.worker is not None:
            self.worker.request_stop()
        await self._task


def log_startup(app: Any, config: Config, options: WorkerOptions) -> None:
    """What every process that runs the App's runtimes logs at startup (``harvest worker``,
    Django's ``harvest_worker``, ``HarvestLifespan(run_worker=True)``, all through
    :func:`run_worker`): the runtimes line (each value and its source), one warning per switch
    that contradicts the role, the retention note, and, where the worker runs, the queues."""
    runtime_plan(config).log()
    if not options.run_worker:
        return
    polled, declared, source = resolve_queues(app, config)
    if options.queues is not None and list(options.queues) != polled:
        polled, source = list(options.queues), "explicit (worker options)"  # a caller's own list
    log.info(
        "harvest worker.queues: declared %s; polled %s (source: %s)",
        ", ".join(declared),
        ", ".join(polled),
        source,
    )


def configured_options(app: Any, config: Config, **fixed: Any) -> WorkerOptions:
    """The WorkerOptions of a process running ``app`` under ``config``: the queues it polls
    (``worker.queues`` narrowing the App's), the role's switches (worker, scheduler,
    retention), the ``[worker]`` tunables, and ``fixed`` over them."""
    plan = runtime_plan(config)
    # Queues matter only where the claim loop runs: a scheduler or janitor process (a web
    # replica with run_on = "all" and no App) polls nothing, so a shared worker.queues is no
    # error there.
    polled = resolve_queues(app, config)[0] if plan.worker.value else None
    switches = {
        "queues": polled,
        "run_worker": plan.worker.value,
        "run_scanner": plan.scheduler.value,
        "run_retention": plan.retention.value,
    }
    enabled = config.setting("retention.enabled")
    follows = plan.run_on == "scheduler" and (enabled is None or enabled.value)
    if follows and "run_scanner" in fixed and "run_retention" not in fixed:
        # The janitor goes where the caller puts the scheduler, as `--no-scheduler`
        # (scheduler.enabled) takes it along in runtime_plan.
        switches["run_retention"] = fixed["run_scanner"]
    return worker_options(config, **{**switches, **fixed})
