"""An approval workflow: a decision by signal, state by query, changes by update, a deadline
timer and escalation (README.md)."""

from examples.approval.workflows import Decision, Outcome, Request, app, approval

__all__ = ["Decision", "Outcome", "Request", "app", "approval"]
