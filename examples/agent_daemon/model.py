"""The scripted offline "model": deterministic replies from the task and the transcript, with
token counts, so the example runs with no network and no API key.

A real model sits behind the same activity (``call_model``): swap :func:`reply` for an API call
and the workflows do not change. The script knows two kinds of task:

- ``note: <text>``: read NOTES.md, write it back with ``- <text>`` appended, answer;
- ``count: <path>``: read the file, answer how many lines it has.

Anything else gets an answer that it cannot help.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NOTES = "NOTES.md"
MODEL = "scripted-offline"  # the name the cost ledger records its calls under


@dataclass
class Message:
    role: str  # user | assistant | tool
    content: str


@dataclass
class ToolCall:
    tool: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelReply:
    text: str
    tool_call: ToolCall | None
    input_tokens: int
    output_tokens: int


def tokens(text: str) -> int:
    """A rough token count (four characters a token), enough for the accounting."""
    return max(1, len(text) // 4)


def reply(prompt: str, transcript: list[Message]) -> ModelReply:
    """The model's next turn for ``prompt`` after ``transcript`` (the tool results so far)."""
    results = [m.content for m in transcript if m.role == "tool"]
    kind, _, argument = prompt.partition(":")
    argument = argument.strip()
    if kind == "note":
        if not results:
            text, call = f"I will read {NOTES} first.", ToolCall("read_file", {"path": NOTES})
        elif len(results) == 1:
            content = results[0] if results[0].endswith("\n") or not results[0] else results[0] + "\n"
            text = f"Appending the note to {NOTES}."
            call = ToolCall("write_file", {"path": NOTES, "content": f"{content}- {argument}\n"})
        else:
            text, call = f"Added the note {argument!r} to {NOTES}.", None
    elif kind == "count":
        if not results:
            text, call = f"Reading {argument}.", ToolCall("read_file", {"path": argument})
        else:
            text, call = f"{argument} has {len(results[0].splitlines())} lines.", None
    else:
        text, call = "I cannot help with that task.", None
    read = prompt + "".join(m.content for m in transcript)
    return ModelReply(text, call, input_tokens=50 + tokens(read), output_tokens=10 + tokens(text + str(call)))
