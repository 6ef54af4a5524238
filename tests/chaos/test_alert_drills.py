"""The synthetic incident drills (scripts/alert_drills.py): real workers, a real Prometheus with
the starter pack loaded, and each incident firing its alert (about three minutes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.chaos

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "alert_drills.py"


def test_every_drill_fires_its_alert() -> None:
    command = [sys.executable, str(SCRIPT), "--timeout", "240"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    for drill in ("drill 1", "drill 2", "drill 3", "drill 4"):
        assert drill in done.stdout
    assert "steady state: firing nothing" in done.stdout
    assert "every drill fired its alert" in done.stdout
