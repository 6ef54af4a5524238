"""Runs whose activity results go the plain way for now (docs/internals.md, "Deciding ahead").

A decision ahead steps the cached run on an activity's result before the result is committed.
If anything reached the run meanwhile (a signal landed while the activity ran), the database
refuses the decision: the run holds a step the history does not, so it is dropped, and the woken
workflow task replays the whole history. A run whose signals keep landing while its activities
run would replay on every such result, and the replays (longer as its history grows) slow the
worker, so that more signals land during its activities: a mode of replays that feeds itself
(docs/performance.md, "Signal storms").

The plain path costs no replay there: the result is committed alone, the cached run stays where
its last decision left it, and the woken workflow task brings it the signal and the result
together. So after a refusal, the run's results go the plain way for a while; the memory is kept
by execution id (it outlives the dropped run and the replay), and each workflow task that brings
the run one of its activity results says whether a decision ahead on that result would have stood:

- a refusal, or a task that brought a result with anything else: *interleaved*. A signal before
  the result would have refused a decision ahead on it; one after it (appended before the task
  was claimed) would not have, but says that signals reach the run at the pace of its
  activities, so that the next result's is likely to be refused (counting only the first kind,
  tried, left runs on the plain path for shorter and made 2-3 times the refusals:
  docs/performance.md, "Signal storms"). The run's level goes up by one (to ``TOP_LEVEL``) and
  its count of clean results starts over.
- a task that brought one result alone: *clean*. After ``span(level)`` clean results in a row
  (``BASE_SPAN`` at level 1, doubling with each level) the level goes down by one; at level 0
  the run is forgotten and decides ahead again.

So a run that was refused once, and then saw no interleaving, decides ahead again after
``BASE_SPAN`` results; a run whose signals keep interleaving stays on the plain path (at the top
level it leaves only after ``span(TOP_LEVEL)`` clean results in a row). Nothing here can make a
history differ: both paths are the plain history's (the database checks a decision ahead against
it), the rule only chooses which one a result takes. At most ``capacity`` runs are remembered
(least recently marked forgotten first: such a run simply decides ahead again).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

# Clean results in a row that bring a run down from level 1 (it then decides ahead again); each
# level above doubles it.
BASE_SPAN = 4
TOP_LEVEL = 5  # span 64: a run that interleaves one result in 20 stays plain
# Runs remembered at once (a few tens of bytes each).
CAPACITY = 4096


def span(level: int) -> int:
    """Clean results in a row that bring a run at ``level`` down by one."""
    return BASE_SPAN << (level - 1)


class PlainRuns:
    """Execution id -> [level, clean results in a row] for the runs whose results go plain."""

    def __init__(self, capacity: int = CAPACITY):
        self.capacity = capacity
        # (Read directly on the hot paths, ``execution_id in plain_runs.runs``: no call.)
        self.runs: OrderedDict[str, list[int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self.runs)

    def __contains__(self, execution_id: object) -> bool:
        """Whether the run's results go the plain way (no decision ahead) for now."""
        return execution_id in self.runs

    def level(self, execution_id: str) -> int:
        entry = self.runs.get(execution_id)
        return 0 if entry is None else entry[0]

    def interleaved(self, execution_id: str) -> None:
        """A decision ahead of the run's was refused, or would have been."""
        entry = self.runs.get(execution_id)
        if entry is None:
            self.runs[execution_id] = [1, 0]
            if len(self.runs) > self.capacity:
                self.runs.popitem(last=False)
            return
        entry[0] = min(entry[0] + 1, TOP_LEVEL)
        entry[1] = 0
        self.runs.move_to_end(execution_id)

    def clean(self, execution_id: str) -> None:
        """A workflow task brought the run one activity result alone: a decision ahead on it
        would have stood."""
        entry = self.runs.get(execution_id)
        if entry is None:
            return
        entry[1] += 1
        if entry[1] >= span(entry[0]):
            entry[0] -= 1
            entry[1] = 0
            if entry[0] == 0:
                del self.runs[execution_id]

    def observe(self, execution_id: str, events: list[dict[str, Any]]) -> None:
        """What a workflow task of a remembered run brought it (the events after its last
        decision): its activity result alone is clean; a result with anything else (a signal
        before it, or after it and before the task was claimed) interleaved: signals reach the
        run at the pace of its activities; no result says nothing."""
        if len(events) == 1:
            if events[0]["event_type"] == "ActivityCompleted":
                self.clean(execution_id)
        elif any(event["event_type"] == "ActivityCompleted" for event in events):
            self.interleaved(execution_id)

    def forget(self, execution_id: str) -> None:
        self.runs.pop(execution_id, None)
