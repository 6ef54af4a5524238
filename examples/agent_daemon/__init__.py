"""An agent daemon: agent sessions as durable workflows, with a scripted offline model, tool
calls as activities, a mutex around the shared workspace and cost accounting (README.md)."""

from examples.agent_daemon.workflows import (
    DaemonState,
    SessionReport,
    Task,
    agent_daemon,
    agent_session,
    app,
)

__all__ = ["DaemonState", "SessionReport", "Task", "agent_daemon", "agent_session", "app"]
