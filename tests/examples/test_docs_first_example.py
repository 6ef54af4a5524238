"""The first example of README.md and of docs/getting-started.md runs as the page shows it.

The page's `# app.py` block becomes the module `app`, run by the test kit's worker
(``harvest_env``, time skipped: the example's 5 s durable timer costs nothing); then its
`with Client() as client:` block runs as a user runs it, `HARVEST_DATABASE_URL` pointing at
the test's database, and prints what the page says it prints.
"""

from __future__ import annotations

import ast
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from harvest import App
from harvest.testing import WorkflowEnvironment

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "docs/getting-started.md"]
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks(page: str) -> tuple[str, str]:
    """The page's first `# app.py` block and the first block that starts it with a Client."""
    blocks = PYTHON_BLOCK.findall((ROOT / page).read_text())
    app = next(b for b in blocks if b.startswith("# app.py"))
    start = next(b for b in blocks if "with Client() as client:" in b)
    return app, start


@pytest.fixture(params=PAGES)
def page(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def app_module(page: str) -> Iterator[types.ModuleType]:
    module = types.ModuleType("app")
    module.__file__ = f"<{page} app.py>"
    previous = sys.modules.get("app")
    sys.modules["app"] = module  # the dataclass decorator and `from app import ...` look here
    try:
        exec(compile(_blocks(page)[0], module.__file__, "exec"), module.__dict__)
        yield module
    finally:
        if previous is None:
            sys.modules.pop("app", None)
        else:
            sys.modules["app"] = previous


@pytest.fixture
def harvest_app(app_module: types.ModuleType) -> App:
    return app_module.app


def test_the_first_example_runs_as_shown(
    page: str,
    app_module: types.ModuleType,
    harvest_env: WorkflowEnvironment,
    db: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HARVEST_DATABASE_URL", db)
    start = _blocks(page)[1]

    exec(compile(start, f"<{page} start>", "exec"), {"__name__": "__main__"})

    printed = capsys.readouterr().out.splitlines()
    result = ast.literal_eval(printed[-1])  # the last line: the workflow's result, as printed
    assert result["order_id"] == "A-1"
    assert re.fullmatch(r"ch_[0-9a-f]{8}", result["charge_id"])
    assert "receipt for A-1: " + result["charge_id"] in printed  # send_receipt ran (in a thread)
    if '"started"' in start:  # getting-started prints the execution id first
        assert printed[0].startswith("started ") and len(printed[0].split()[1]) == 36
    handle = harvest_env.client.get_handle(workflow_id="order-A-1")
    assert [e["event_type"] for e in handle.history()].count("TimerFired") == 1
