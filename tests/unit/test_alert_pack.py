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


def _promtool(*args: str, cwd: Path = DOCS / "alerts") -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: run `make promtool` (Debian's prometheus package)"
    return subprocess.run(
        [promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
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


_SLO_TEST = """rule_files: [slo.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'harvest_workflow_task_duration_seconds_count{workflow_type="a"}'
        values: '0+90x120'
      - series: 'harvest_workflow_task_failed_total{workflow_type="a",error_type="NonDeterminismError"}'
        values: '0+10x120'
      - series: 'harvest_workflow_task_failed_total{workflow_type="b",error_type="UnknownWorkflow"}'
        values: '0+0x120'
    promql_expr_test:
      - expr: round(harvest:workflow_task_error_ratio:rate1h, 0.001)
        eval_time: 100m
        exp_samples:
          - labels: '{}'
            value: 0.1
      - expr: round(harvest:workflow_task_error_ratio:rate5m, 0.001)
        eval_time: 100m
        exp_samples:
          - labels: '{}'
            value: 0.1
    alert_rule_test:
      - eval_time: 100m
        alertname: HarvestWorkflowTaskBudgetBurn
        exp_alerts:
          - exp_labels: {severity: page}
"""


def test_the_slo_pack_fires_on_failing_workflow_tasks(tmp_path: Path) -> None:
    """The error ratio is failed / (decided + failed) summed over every label: the failures carry an
    error_type the successes do not, so adding the two series label by label matched nothing."""
    slo = (DOCS / "alerts" / "slo.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", slo, re.S)
    rules = "".join(f"      {line}\n" for block in blocks for line in block.splitlines())
    (tmp_path / "slo.yml").write_text(f"groups:\n  - name: slo\n    rules:\n{rules}")
    (tmp_path / "slo.test.yml").write_text(_SLO_TEST)
    done = _promtool("test", "rules", "slo.test.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
