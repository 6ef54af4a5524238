"""A long-running entity: a bank account as a workflow that lives for years, taking commands
by signal, answering queries, and rotating its history with continue-as-new (README.md)."""

from examples.entity.workflows import AccountState, Command, account, app

__all__ = ["AccountState", "Command", "account", "app"]
