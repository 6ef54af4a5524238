"""The App's worker beside a server (harvest.config.process.WorkerBeside): one start and stop for
``harvest serve``'s placed runtimes and ``HarvestLifespan(run_worker=True)``, which each had
their own copy. run_worker is replaced by a stand-in worker: what is under test is the start,
the stop and who hears of a failure."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harvest.config import process


class StandIn:
    """A worker that runs until asked to stop, then ends with ``fails_on_stop`` if given."""

    def __init__(self, fails_on_stop: BaseException | None = None) -> None:
        self.stop = asyncio.Event()
        self.fails_on_stop = fails_on_stop

    def request_stop(self) -> None:
        self.stop.set()


async def told(failures: list[BaseException]) -> None:
    while not failures:  # (the task's done callback runs on a later turn of the loop)
        await asyncio.sleep(0)


def beside(monkeypatch: pytest.MonkeyPatch, worker: StandIn, built: asyncio.Event, **kw: Any) -> Any:
    failures: list[BaseException] = []

    async def run_worker(
        app: Any, config: Any, options: Any, *, database_url: Any, started: Any, probes: Any = None
    ) -> None:
        await built.wait()  # (a worker whose building takes time: connections, migrations check)
        started(worker)
        await worker.stop.wait()
        if worker.fails_on_stop is not None:
            raise worker.fails_on_stop

    monkeypatch.setattr(process, "run_worker", run_worker)
    return process.WorkerBeside(
        None, None, None, database_url=None, name="t", on_failure=failures.append
    ), failures  # type: ignore[arg-type]


def test_a_stop_before_the_worker_is_built_stops_it_as_it_is_handed_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def main() -> None:
        built, worker = asyncio.Event(), StandIn()
        runtimes, failures = beside(monkeypatch, worker, built)
        stopping = asyncio.create_task(runtimes.stop())
        await asyncio.sleep(0)
        built.set()
        await asyncio.wait_for(stopping, 5)
        assert runtimes.worker is worker and worker.stop.is_set() and failures == []

    asyncio.run(main())


def test_a_worker_that_fails_by_itself_is_told_once_and_its_stop_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def main() -> None:
        built, worker = asyncio.Event(), StandIn(fails_on_stop=RuntimeError("lost the database"))
        runtimes, failures = beside(monkeypatch, worker, built)
        built.set()
        await asyncio.sleep(0)
        worker.request_stop()  # (it ends by itself: not through runtimes.stop)
        await asyncio.wait_for(told(failures), 5)
        assert [str(e) for e in failures] == ["lost the database"]
        with pytest.raises(RuntimeError, match="lost the database"):
            await runtimes.stop()
        assert len(failures) == 1

    asyncio.run(main())


def test_an_error_while_stopping_is_the_stops_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept from harvest serve's copy: on_failure hears of a worker that ended while the server
    ran; an error in its drain is raised by the stop only (the lifespan's copy logged it as well,
    then raised it from the same stop: told twice)."""

    async def main() -> None:
        built, worker = asyncio.Event(), StandIn(fails_on_stop=RuntimeError("drain failed"))
        runtimes, failures = beside(monkeypatch, worker, built)
        built.set()
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="drain failed"):
            await runtimes.stop()
        assert failures == []

    asyncio.run(main())
