"""docs/testing.md's first test, and its schedules' test, run as the page shows them.

Its `# test_checkout.py` block is executed as a module and its test function called, as pytest
would; only the environment is pointed at the suite's database (``dsn=``, the test's own clone)
instead of the test kit's shared server, which would migrate a second template here.
"""

from __future__ import annotations

import functools
import re
import types
from pathlib import Path

from harvest.testing import WorkflowEnvironment

ROOT = Path(__file__).resolve().parents[2]
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def test_the_first_test_of_the_testing_page_passes(db: str) -> None:
    blocks = PYTHON_BLOCK.findall((ROOT / "docs" / "testing.md").read_text())
    source = next(b for b in blocks if b.startswith("# test_checkout.py"))
    module = types.ModuleType("test_checkout")
    exec(compile(source, "<docs/testing.md test_checkout.py>", "exec"), module.__dict__)
    module.WorkflowEnvironment = functools.partial(WorkflowEnvironment, dsn=db)
    # The page's policy means what it says: an hour before the first retry (a cap below it
    # was the 100 s default, silently: RetryPolicy now refuses that).
    assert module.charge.__harvest_activity__.retry.delay(1) == 3600
    module.test_checkout_charges_after_a_day()


def test_the_schedules_test_of_the_testing_page_passes(db: str) -> None:
    blocks = PYTHON_BLOCK.findall((ROOT / "docs" / "testing.md").read_text())
    source = next(b for b in blocks if b.startswith("# test_reports.py"))
    module = types.ModuleType("test_reports")
    exec(compile(source, "<docs/testing.md test_reports.py>", "exec"), module.__dict__)
    module.WorkflowEnvironment = functools.partial(WorkflowEnvironment, dsn=db)
    module.test_the_report_runs_every_hour()
