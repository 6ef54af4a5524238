"""The suite's own `HARVEST_*` switches are not refused by the processes the tests start.

Harvest refuses an unknown `HARVEST_*` variable at boot (a misspelt setting must not pass
silently), and the tests start `harvest` processes with the environment they run in. A switch a
developer sets for `make test` (`HARVEST_UPDATE_SCREENSHOTS=1 make test`, docs/dashboard.md) is
therefore in every such process' environment: it must be a config key's variable, one of
harvest.config's NOT_CONFIG names or one of its TEST_SWITCHES, or every test starting a process
fails with "unknown setting".
"""

from __future__ import annotations

import re

from docs_scan import ROOT

from harvest.config.config import NOT_CONFIG, SCHEMA, TABLES, TEST_SWITCHES, config_from_mapping, env_name

READ = re.compile(r"""(?:environ\.get\(\s*|environ\[\s*|getenv\(\s*)["'](HARVEST_\w+)["']\s*[\],)]""")


def _switches_read_by_tests() -> set[str]:
    found: set[str] = set()
    for top in ("tests", "bench", "scripts"):
        for path in (ROOT / top).rglob("*.py"):
            found.update(READ.findall(path.read_text()))
    return found


def _a_config_variable(name: str) -> bool:
    if name in {env_name(key) for key in SCHEMA}:
        return True
    return any(name.startswith(env_name(key) + "__") for key in SCHEMA if SCHEMA[key] in TABLES)


def test_every_switch_the_tests_read_is_accepted_by_harvest() -> None:
    switches = _switches_read_by_tests()
    assert "HARVEST_UPDATE_SCREENSHOTS" in switches  # the scan finds what it is for
    refused = sorted(
        name for name in switches if not _a_config_variable(name) and name not in NOT_CONFIG | TEST_SWITCHES
    )
    assert refused == [], f"add these to harvest.config.config.TEST_SWITCHES: {refused}"


def test_a_process_started_with_the_screenshot_switch_boots() -> None:
    config_from_mapping({}, "test", env={"HARVEST_UPDATE_SCREENSHOTS": "1"})
