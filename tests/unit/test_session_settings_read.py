"""The session settings Harvest's SQL reads are a reviewed list.

Any session can set a setting (``SET harvest.anything = ...``), so a setting a function reads
is input from its caller: it must not change what the function does for anyone else
(docs/security.md). Each one read today is below with why that holds; a new
``current_setting(...)`` fails this test until it is reviewed and added. (A decision's queued
activities once told the task trigger "fairness answered" with a setting: any session could
then have left its own tasks unkeyed on a fair queue; it became a marker in the row.)
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

REVIEWED = {
    "transaction_isolation": "read to refuse a snapshot isolation a function is not written for",
    "harvest.fake_now": "moves harvest.now() only where the owner allowed a test clock (engine_settings)",
    "role": "who the caller is: audit rows and role checks; a session can only SET ROLE to roles it has",
    "application_name": "the audit source of a direct SQL call: caller-asserted text in its own audit rows",
    "harvest.audit_actor": "caller-asserted text for audit rows only, beside the real login",
    "harvest.audit_source": "caller-asserted text for audit rows only, beside the real login",
    "harvest.audit_route": "caller-asserted text for audit rows only, beside the real login",
    "block_size": "a build-time preset (no session can set it): the tasks table's pages",
}

_READ = re.compile(r"current_setting\s*\(\s*('([^']*)')?", re.IGNORECASE)


def _reads() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for folder in ("functions", "sql"):
        for path in sorted((ROOT / folder).glob("*.sql")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("--", 1)[0]
                for match in _READ.finditer(code):
                    name = match.group(2) if match.group(1) else "<not a literal>"
                    found.setdefault(name, []).append(f"{path.relative_to(ROOT)}:{number}")
    return found


def test_every_setting_a_function_reads_is_reviewed():
    reads = _reads()
    assert reads, "no current_setting found: the scan is broken"
    unreviewed = {name: where for name, where in reads.items() if name not in REVIEWED}
    assert not unreviewed, (
        "a function reads a session setting nobody reviewed (any session can set one; see this "
        f"module's note): {unreviewed}"
    )
