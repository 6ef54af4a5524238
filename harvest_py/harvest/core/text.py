"""Text a user or a caller chose (a workflow id, an exception's message, a signal's name),
made safe to print where an operator reads it: a terminal, a log line, a table."""

from __future__ import annotations

import re

__all__ = ["escape_controls"]

# C0 controls but tab and newline, DEL and C1: a carriage return rewrites the line shown, an
# escape sequence (ESC, or C1's CSI) drives the terminal itself.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROLS_AND_NEWLINE = re.compile(r"[\x00-\x08\n\x0b-\x1f\x7f-\x9f]")
_NAMED = {"\r": "\\r", "\n": "\\n"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or f"\\x{ord(char):02x}"


def escape_controls(text: str, *, newlines: bool = True) -> str:
    """``text`` with its control characters printed escaped (``\\r``, ``\\x1b``); a tab is
    kept, and a newline too unless ``newlines`` is False (a table's cell: ``\\n``)."""
    pattern = _CONTROLS if newlines else _CONTROLS_AND_NEWLINE
    if pattern.search(text) is None:  # (the usual text: one scan, nothing built)
        return text
    return pattern.sub(_escaped, text)
