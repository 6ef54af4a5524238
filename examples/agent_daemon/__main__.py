"""``python -m examples.agent_daemon [WORKSPACE]``: a daemon on the embedded PostgreSQL takes
four tasks: two sessions append to the same NOTES.md at once (the workspace mutex keeps both
notes), one counts its lines, one is refused because its budget does not fit; then the books."""

from __future__ import annotations

import datetime as dt
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from examples._runner import main, query_until, say
from examples.agent_daemon.workflows import DaemonState, Inbox, Task, agent_daemon, app
from harvest import AsyncClient

DAEMON_ID = "agent-daemon"


async def scenario(client: AsyncClient, workspace: str, budget_micros: int = 40_000) -> DaemonState:
    daemon = await client.signal_with_start(
        agent_daemon,
        DaemonState(workspace, budget_micros),
        workflow_id=DAEMON_ID,
        signal="inbox",
        signal_payload=Inbox("task", Task("note-1", "note: buy milk", budget_micros=15_000)),
    )
    say(f"daemon {daemon.execution_id} on workspace {workspace}")
    await daemon.signal("inbox", Inbox("task", Task("note-2", "note: call the bank", budget_micros=15_000)))
    # The third task's budget does not fit beside the reservation of a session still running.
    await daemon.signal("inbox", Inbox("task", Task("big", "note: a long essay", budget_micros=30_000)))
    await query_until(client, agent_daemon, DAEMON_ID, "costs", finished(2))
    await daemon.signal("inbox", Inbox("task", Task("count", f"count: {'NOTES.md'}", budget_micros=5_000)))
    await daemon.signal("inbox", Inbox("stop"))
    final: DaemonState = await client.get_handle(workflow=agent_daemon, workflow_id=DAEMON_ID).result(
        timeout=60
    )
    for report in final.recent:
        say(
            f"  {report.session_id}: {report.status}, {len(report.turns)} turns, "
            f"{report.cost_micros} micro-dollars: {report.answer}"
        )
    say(
        f"spent {final.spent_micros} of {final.budget_micros} micro-dollars; "
        f"tokens in {final.input_tokens}, out {final.output_tokens}"
    )
    # The same calls in Harvest's cost ledger, as `harvest usage --from 1h` reports them.
    now = dt.datetime.now(dt.UTC)
    usage = await client.sql.count_usage(now - dt.timedelta(hours=1), now + dt.timedelta(minutes=1))
    calls = sum(int(row["llm_calls"] or 0) for row in usage)
    cost = sum(int(row["llm_cost_usd_micros"] or 0) for row in usage)
    say(f"the cost ledger: {calls} model calls, {cost} micro-dollars")
    say(f"NOTES.md:\n{(Path(workspace) / 'NOTES.md').read_text()}")
    return final


def finished(sessions: int) -> Callable[[dict[str, Any]], bool]:
    """Whether the books show ``sessions`` sessions that ran (refusals not counted)."""
    return lambda books: sum(n for status, n in books["sessions"].items() if status != "refused") >= sessions


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="agent-workspace-") as default:
        directory = sys.argv[1] if len(sys.argv) > 1 else default
        sys.exit(main(app, lambda client: scenario(client, directory)))
