"""Every `harvest ...` command line the docs show names a command that exists, with options
that command accepts.

The pages: docs/**/*.md, README.md and examples/*/README* (tests/unit/docs_scan.py). A
command line is found in a shell-like fenced block (no language, sh, bash, console, text,
ini) or an inline code span, where `harvest` starts a command: at the start (after a `$ `
prompt and `VAR=value` assignments), after `|`, `&&`, `;`, `$(` or a backtick, or as the
last part of a path (`/opt/app/.venv/bin/harvest`). Backslash continuations are joined; the
command ends at a pipe, `&&`, `;`, a redirection or a `# comment`.

It is checked against the click tree of the `harvest` root group (harvest.cli.main.main),
introspected, nothing run: each word is a subcommand of the group it follows, each option
one the command at that point accepts (`--x=v` and `-o v` alike; an option's value is
skipped). Not checked: positional arguments (placeholders such as `<id>`, `TARGET`, `...`
stand for them), and, for a group, a placeholder in a subcommand's place (`harvest workflow
COMMAND`). `[--opt]` brackets are optional-syntax and dropped; `start|signal` in a
subcommand's place is each of them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

import click
import pytest
from docs_scan import ROOT, doc_pages, inline_spans, split_page, where

from harvest.cli.main import main

SHELL_BLOCKS = {"", "sh", "bash", "shell", "console", "text", "ini"}

# `harvest` as a command: after a start, a separator or a path (`.venv/bin/harvest`)
COMMAND = re.compile(r"(?:(?<=^)|(?<=[\s;|&(`=]))((?:[\w.~-]*/)*)harvest(?=\s|$)")
ENV = r"(?:[A-Za-z_]\w*=\S*\s+)*"
CONTEXT = re.compile(rf"(?:^\s*(?:\$\s+)?{ENV}|(?:\||&&|;|\$\(|`|\bexec|-m)\s*{ENV}|ExecStart=)$")
# where a command line ends (quotes are not parsed: no doc puts these inside an argument)
END = re.compile(r"\s(?:\||&&|;|#|>|2>|<<)(?:\s|$)|\)\s*$|`|;\s*$")
FIRST_WORD = re.compile(r"^(?:-.*|[a-z][a-z-]*(?:[|/][a-z-]*)*|[<\[].*)$")
PLACEHOLDER = re.compile(r"^(?:<.*>|[A-Z][A-Z0-9_-]*|options|args|\.\.\.|…|\$\w+|\{.*\})$")
MAX_OPEN = 5


@dataclass(frozen=True)
class Reference:
    place: str
    line: str  # the command line as the doc shows it, from `harvest`


def _unclosed(line: str) -> bool:
    try:
        shlex.split(line, comments=True)
    except ValueError:
        return True
    return False


def _logical_lines(text: str, first: int) -> Iterator[tuple[int, str]]:
    """A block's lines with backslash continuations, and quotes left open (a JSON argument over
    three lines, at most MAX_OPEN), joined; each with its first line."""
    pending, start, held = "", first, 0
    for offset, line in enumerate(text.splitlines()):
        if not pending:
            start, held = first + offset, 0
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        if held < MAX_OPEN and "harvest " in pending + line and _unclosed(pending + line):
            pending, held = pending + line + " ", held + 1
            continue
        yield start, pending + line
        pending = ""
    if pending:
        yield start, pending


def _commands_in(text: str) -> Iterator[str]:
    for match in COMMAND.finditer(text):
        if not CONTEXT.search(text[: match.start()]):
            continue
        rest = text[match.end() :]
        cut = END.search(rest)
        rest = (rest[: cut.start()] if cut else rest).rstrip()
        if rest and not FIRST_WORD.match(rest.split()[0]):
            continue  # a log line's logger name (`harvest worker.enabled=true`), not a command
        yield "harvest" + rest


def references() -> list[Reference]:
    found: list[Reference] = []
    for path in doc_pages():
        blocks, prose = split_page(path)
        for block in blocks:
            if block.lang not in SHELL_BLOCKS:
                continue
            for number, line in _logical_lines(block.text, block.line):
                found += [Reference(where(path, number), c) for c in _commands_in(line)]
        for span in inline_spans(path, prose):
            text = " ".join(span.text.split())
            found += [Reference(where(path, span.line), c) for c in _commands_in(text)]
    return found


def _words(line: str) -> list[str]:
    try:
        words = shlex.split(line)
    except ValueError:  # an unclosed quote (a value continued in the doc's prose)
        words = line.split()
    joined: list[str] = []
    for word in (w.strip("[]") for w in words[1:]):
        if joined and joined[-1].endswith(("/", "|")):
            joined[-1] += word  # `list/count/query/ update` broken over a line
        elif word:
            joined.append(word)
    return joined


def _options(command: click.Command, ctx: click.Context) -> dict[str, click.Parameter]:
    options: dict[str, click.Parameter] = {}
    for param in command.get_params(ctx):
        if isinstance(param, click.Option):
            for name in [*param.opts, *param.secondary_opts]:
                options[name] = param
    return options


def _takes_value(param: click.Parameter) -> bool:
    return not (isinstance(param, click.Option) and (param.is_flag or param.count))


def _choice(param: click.Parameter, value: str) -> list[str]:
    """A literal value of a choice option must be one of its choices (`table|json`: each)."""
    if not isinstance(param.type, click.Choice) or PLACEHOLDER.match(value):
        return []
    choices = [str(c) for c in param.type.choices]
    fold = (lambda v: v.lower()) if not param.type.case_sensitive else (lambda v: v)
    return [
        f"{v!r} is not one of {', '.join(choices)}"
        for v in re.split(r"[|/]", value)
        if fold(v) not in {fold(c) for c in choices}
    ]


def _arguments(command: click.Command) -> str:
    return " ".join(p.human_readable_name for p in command.params if isinstance(p, click.Argument)) or "none"


def _max_arguments(command: click.Command) -> float:
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    if any(p.nargs < 0 for p in arguments):
        return float("inf")
    return sum(p.nargs for p in arguments)


def check(line: str) -> list[str]:
    """What is wrong with one command line ([] when nothing)."""
    return _check(main, "harvest", _words(line), click.Context(main, info_name="harvest"))


def _check(command: click.Command, path: str, words: list[str], ctx: click.Context) -> list[str]:
    problems: list[str] = []
    i = positionals = 0
    while i < len(words):
        word = words[i]
        i += 1
        run_command = getattr(command, "run_command", None)  # `harvest worker TARGET [OPTIONS]`
        if (
            isinstance(run_command, click.Command)
            and word not in ("--help", "-h", *command.list_commands(ctx))
            and not PLACEHOLDER.match(word)
        ):
            command, ctx = run_command, click.Context(run_command, info_name="run", parent=ctx)
            positionals = 0
        if word.startswith("-") and len(word) > 1 and not word[1:2].isdigit():
            name, has_value = word.split("=", 1)[0], "=" in word
            options = _options(command, ctx)
            param = options.get(name)
            if param is None:
                positionals = -1_000  # its value, if it takes one, is not an argument
                have = ", ".join(sorted(o for o in options if o.startswith("--")))
                problems.append(f"no option {name} on `{path}` (has: {have or 'none'})")
                continue
            if not _takes_value(param):
                continue
            count = param.nargs if param.nargs > 0 else 1
            values = [word.split("=", 1)[1]] if has_value else words[i : i + count]
            i += 0 if has_value else count
            problems += [f"`{path} {name}`: {p}" for v in values for p in _choice(param, v)]
            continue
        if not isinstance(command, click.Group):
            positionals += 1
            if positionals > _max_arguments(command) and not PLACEHOLDER.match(word):
                problems.append(f"`{path}` takes no argument {word!r} (its arguments: {_arguments(command)})")
            continue
        if PLACEHOLDER.match(word):
            return problems  # some subcommand: what follows cannot be checked
        names = command.list_commands(ctx)
        alternatives = re.split(r"[|/]", word)
        if word not in names and len(alternatives) > 1 and all(w in names for w in alternatives):
            for alternative in alternatives:
                sub = command.get_command(ctx, alternative)
                assert sub is not None
                child = click.Context(sub, info_name=alternative, parent=ctx)
                problems += _check(sub, f"{path} {alternative}", words[i:], child)
            return problems
        if word in names:
            sub = command.get_command(ctx, word)
            assert sub is not None
            command, path, ctx = sub, f"{path} {word}", click.Context(sub, info_name=word, parent=ctx)
            positionals = 0
        else:
            problems.append(f"no command `{path} {word}` (has: {', '.join(names)})")
            return problems
    return problems


def test_the_docs_show_command_lines() -> None:
    found = references()
    assert len(found) >= 200, f"only {len(found)} `harvest` command lines found: has the scan broken?"
    pages = {r.place.split(":")[0] for r in found}
    assert {"docs/operations.md", "docs/getting-started.md", "README.md"} <= pages


def test_every_command_line_in_the_docs_exists() -> None:
    mismatches = [f"{r.place}: `{r.line}`: {p}" for r in references() for p in check(r.line)]
    assert not mismatches, "the docs show harvest command lines the CLI does not have:\n" + "\n".join(
        mismatches
    )


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("harvest workflow list --state RUNNING -o json", None),
        ("harvest worker app:app --concurrency 4 --queue q", None),
        ("harvest worker drain <worker-id> --deadline 30s", None),
        ("harvest workflow start|signal --database-url X", None),
        ("harvest migrate status [--check] [--output table|json]", None),
        ("harvest --output json workflow get <id>", None),
        ("harvest workflow COMMAND --anything", None),
        ("harvest workflow list --nope", "no option --nope on `harvest workflow list`"),
        ("harvest workflow lst", "no command `harvest workflow lst`"),
        ("harvest workflow list --output json --format x", "no option --format"),
        ("harvest --nope workflow list", "no option --nope on `harvest` "),
        ("harvest workflow list -o yaml", "`harvest workflow list -o`: 'yaml' is not one of"),
        ("harvest migrate status --output table|jsn", "`harvest migrate status --output`: 'jsn' is not"),
        ("harvest workflow get <id> extra", "`harvest workflow get` takes no argument 'extra'"),
        ("harvest workflow get <id> ...", None),
    ],
)
def test_the_check_itself(line: str, problem: str | None) -> None:
    problems = check(line)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(problem), problems


@pytest.mark.parametrize(
    ("text", "commands"),
    [
        ("$ harvest dag list", ["harvest dag list"]),
        ("HARVEST_URL=http://x/api HARVEST_TOKEN=$T harvest workflow get $ID", ["harvest workflow get $ID"]),
        ("harvest dlq list -o json | jq '.[]' | harvest x", ["harvest dlq list -o json", "harvest x"]),
        ("harvest health   # GET /health/ready", ["harvest health"]),
        (
            "ExecStart=/opt/a/.venv/bin/harvest worker m:app --concurrency 20",
            ["harvest worker m:app --concurrency 20"],
        ),
        ("no harvest role can read harvest.api_tokens", []),
        ("the schema harvest is", []),
    ],
)
def test_command_lines_are_found(text: str, commands: list[str]) -> None:
    assert list(_commands_in(text)) == commands


def test_continuations_are_joined() -> None:
    text = "$ harvest workflow start checkout --workflow-id a \\\n    --input-json '{}'\nharvest dag list"
    assert list(_logical_lines(text, 10)) == [
        (10, "$ harvest workflow start checkout --workflow-id a      --input-json '{}'"),
        (12, "harvest dag list"),
    ]
    text = (
        'harvest workflow start a --input-json \\\n  \'[{"a": 1,\n    "b": 2}]\'\n'  # a quote over lines
        "harvest dag list\nerror: the DSN's user\nharvest dag list"  # an apostrophe outside a command
    )
    assert [n for n, _ in _logical_lines(text, 1)] == [1, 4, 5, 6]
    assert ROOT.exists()
