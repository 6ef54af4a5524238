"""docs/operations.md's table of audited operations names every operation the SQL writes an audit
row for, and no other.

The operations are read from functions/*.sql: the first argument of each call of
``harvest._audit`` and ``harvest._audit_asserted`` (a literal, a CASE of literals, or a literal
prefix completed by a parameter, which PREFIXES completes); and from the Python that calls
``harvest._audit`` itself (the migrator's ``functions.downgrade``), where it is a literal. The
table is the one under "### The audit log": the backquoted names of its first column.
"""

from __future__ import annotations

import re

from docs_scan import ROOT

# A name built at run time ('dead_letters.bulk_' || p_action): the prefix and what it becomes.
PREFIXES = {
    "dead_letters.bulk_": ("dead_letters.bulk_replay", "dead_letters.bulk_discard"),
    "workflow.bulk_": (
        "workflow.bulk_cancel",
        "workflow.bulk_terminate",
        "workflow.bulk_signal",
        "workflow.bulk_pause",
        "workflow.bulk_resume",
        "workflow.bulk_reset",
    ),
}
CALL = re.compile(r"harvest\._audit(?:_asserted)?\(")
LITERAL = re.compile(r"'((?:[^']|'')*)'")
PYTHON_CALL = re.compile(r"harvest\._audit(?:_asserted)?\('([a-z_.]+)'")


def _first_argument(text: str, start: int) -> str:
    """The text of a call's first argument, from just after its "(" to its top-level comma."""
    depth, quoted = 0, False
    for i in range(start, len(text)):
        c = text[i]
        if c == "'":
            quoted = not quoted
        elif quoted:
            continue
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            return text[start:i]
    raise AssertionError(f"an unterminated call at {text[start : start + 60]!r}")


def audited_in_sql() -> dict[str, set[str]]:
    """{operation: the files that write it}."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "functions").glob("*.sql")):
        text = path.read_text()
        for call in CALL.finditer(text):
            if re.search(r"FUNCTION\s+$", text[: call.start()]):
                continue  # the definition, not a call
            argument = _first_argument(text, call.end())
            if argument.strip() == "p_operation":
                continue  # _audit_asserted passing its caller's operation on
            names = LITERAL.findall(argument)
            assert names, f"{path.name}: an audit call whose operation is no literal: {argument!r}"
            if "||" in argument:
                (prefix,) = names
                assert prefix in PREFIXES, f"{path.name}: a built operation {argument!r}: add it to PREFIXES"
                names = list(PREFIXES[prefix])
            for name in names:
                if not name.startswith("p_"):  # a literal of the CASE's condition is no operation
                    found.setdefault(name, set()).add(path.name)
    for path in sorted((ROOT / "harvest_py").rglob("*.py")):
        for name in PYTHON_CALL.findall(path.read_text()):
            found.setdefault(name, set()).add(path.name)
    return found


def audited_in_docs() -> set[str]:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("### The audit log", 1)[1]
    lines = section.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| operation"))
    table = []
    for line in lines[first + 2 :]:  # past the header and its rule, to the table's end
        if not line.startswith("|"):
            break
        table.append(line)
    assert table, "docs/operations.md: no table under ### The audit log"
    return {name for line in table for name in re.findall(r"`([a-z_.]+)`", line.split(" | ")[0])}


def test_the_audit_table_names_every_audited_operation_and_no_other() -> None:
    sql, docs = audited_in_sql(), audited_in_docs()
    assert len(sql) > 20  # the reader found the calls
    missing = {name: sorted(files) for name, files in sql.items() if name not in docs}
    assert not missing, f"docs/operations.md's audit table lacks (operation: where it is written): {missing}"
    unknown = docs - set(sql)
    assert not unknown, f"docs/operations.md's audit table names operations no SQL writes: {unknown}"
