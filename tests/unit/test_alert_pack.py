"""The starter alert pack (docs/alerts/) names only metrics Harvest exports, each with a runbook
section and a CLI/SQL equivalent."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from harvest.telemetry.metrics import metric_names

DOCS = Path(__file__).resolve().parents[2] / "docs"
PACK = json.loads((DOCS / "alerts" / "starter-pack-v0.1.0.json").read_text())
RULES = [rule for group in PACK["groups"] for rule in group["rules"]]


def test_every_metric_a_rule_reads_is_in_the_registry() -> None:
    known = metric_names()
    for rule in RULES:
        used = set(re.findall(r"\bharvest_[a-z_]+", rule["expr"]))
        assert used, rule["alert"]
        assert used <= known, (rule["alert"], sorted(used - known))


def test_every_rule_has_a_runbook_section_and_a_cli_equivalent() -> None:
    runbook = (DOCS / "runbooks" / "harvest-alerts.md").read_text()
    readme = (DOCS / "alerts" / "README.md").read_text()
    for rule in RULES:
        anchor = rule["annotations"]["runbook"].split("#")[1]
        assert f"## {rule['alert']}" in runbook and anchor == rule["alert"].lower()
        assert f"`{rule['alert']}`" in readme


def test_the_slo_pack_reads_exported_metrics() -> None:
    slo = (DOCS / "alerts" / "slo.md").read_text()
    used = set(re.findall(r"\bharvest_[a-z_]+", slo))
    assert used and used <= metric_names(), sorted(used - metric_names())


def _promtool(*args: str) -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: run `make promtool` (Debian's prometheus package)"
    return subprocess.run(
        [promtool, *args], cwd=DOCS / "alerts", capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_accepts_the_pack() -> None:
    done = _promtool("check", "rules", "starter-pack-v0.1.0.json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(RULES)} rules found" in done.stdout


def test_each_alert_fires_on_its_incident_and_stays_quiet_when_healthy() -> None:
    tests = (DOCS / "alerts" / "starter-pack-v0.1.0.test.yml").read_text()
    for rule in RULES:  # every rule has a firing case and a quiet case
        assert f"alertname: {rule['alert']}\n        exp_alerts:\n" in tests, rule["alert"]
        assert f"alertname: {rule['alert']}\n        exp_alerts: []\n" in tests, rule["alert"]
    done = _promtool("test", "rules", "starter-pack-v0.1.0.test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
