"""`harvest worker`'s event loop (harvest/worker/event_loop.py): auto takes uvloop when it can
be imported, asyncio's loop otherwise; a loop asked for by name is that loop or a ConfigError."""

from __future__ import annotations

import asyncio
import sys

import pytest

from harvest.config import config_from_mapping
from harvest.core.errors import ConfigError
from harvest.worker.event_loop import choose_event_loop


async def running_loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_asyncio_is_asyncio_loop_even_where_uvloop_is_installed() -> None:
    pytest.importorskip("uvloop")
    choice = choose_event_loop("asyncio")
    assert choice.name == "asyncio"
    assert choice.run(running_loop_module()).startswith("asyncio")


@pytest.mark.parametrize("asked", ["auto", "uvloop"])
def test_uvloop_is_taken_where_it_is_installed(asked: str) -> None:
    uvloop = pytest.importorskip("uvloop")
    choice = choose_event_loop(asked)
    assert choice.name == f"uvloop {uvloop.__version__}"
    assert choice.run(running_loop_module()).startswith("uvloop")


def test_auto_falls_back_to_asyncio_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    choice = choose_event_loop("auto")
    assert (choice.name, choice.loop_factory) == ("asyncio", None)
    assert choice.run(running_loop_module()).startswith("asyncio")


def test_uvloop_asked_for_and_missing_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)
    with pytest.raises(ConfigError, match=r"harvest-workflows\[uvloop\].*auto or asyncio"):
        choose_event_loop("uvloop")


def test_an_unknown_loop_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="'trio' is unknown; use auto, asyncio, uvloop"):
        choose_event_loop("trio")


def test_the_config_refuses_an_unknown_loop_and_says_where_it_came_from() -> None:
    with pytest.raises(ConfigError, match=r"worker.event_loop 'trio' \(from HARVEST_WORKER__EVENT_LOOP\)"):
        config_from_mapping({}, "settings", env={"HARVEST_WORKER__EVENT_LOOP": "trio"})
    config = config_from_mapping({"worker": {"event_loop": "asyncio"}}, "settings", env={})
    assert config.get("worker.event_loop") == "asyncio"
