"""The `harvest` command. Each subcommand group lives in its own module."""

from __future__ import annotations

from harvest.cli.main import main

__all__ = ["main"]
