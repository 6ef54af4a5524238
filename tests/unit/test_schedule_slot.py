"""``ctx.info.schedule_slot``: a schedule's run reads its slot from its workflow id."""

from __future__ import annotations

import datetime as dt

import pytest

from harvest.runtime.context import WorkflowInfo


def _info(workflow_id: str) -> WorkflowInfo:
    return WorkflowInfo(workflow_id=workflow_id, execution_id="e", workflow_name="w", queue="default")


def test_a_schedules_run_reads_its_name_and_slot() -> None:
    assert _info("sched:daily_billing_report:1893456000").schedule_slot == (
        "daily_billing_report",
        dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
    )


def test_a_name_with_colons_keeps_them() -> None:
    slot = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    assert _info("sched:team:eu:1893456000").schedule_slot == ("team:eu", slot)


@pytest.mark.parametrize("workflow_id", ["order-42", "sched:", "sched:daily", "sched:daily:soon", "sched::1"])
def test_any_other_id_has_no_slot(workflow_id: str) -> None:
    assert _info(workflow_id).schedule_slot is None
