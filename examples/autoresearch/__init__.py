"""An autoresearch-style overnight loop, offline: a scripted researcher proposes, a simulated
trainer trains for simulated time, a keep rule decides, all night (README.md)."""

from examples.autoresearch.workflows import (
    NightPlan,
    Progress,
    Trial,
    app,
    build_app,
    research_night,
    train_candidate,
)

__all__ = ["NightPlan", "Progress", "Trial", "app", "build_app", "research_night", "train_candidate"]
