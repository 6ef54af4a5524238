"""The config keys and `HARVEST_*` variables the docs show are ones Harvest reads.

The pages: docs/**/*.md, README.md and examples/*/README* (tests/unit/docs_scan.py), and the
examples' own harvest.toml files.

- A ```toml block is loaded as a config file is (harvest.config's `config_from_mapping`, no
  environment): an unknown key, a wrong type or a number out of range fails as at boot. A
  commented-out assignment (`# enabled = true`) in it names a key too.
- An inline `[section] key` or `section.key` (section one of the config's) names a key,
  unless it is a file (`retention.sql`) or an operation the audit log records (`worker.drain`,
  a string of functions/*.sql).
- A `HARVEST_NAME` is a config variable (`HARVEST_WORKER__QUEUES`, a table's entry such as
  `HARVEST_SHARDS__URLS__1`), one of harvest.config's NOT_CONFIG variables, the envvar of a
  `harvest` option, one the code reads (`os.environ[...]`, `getenv`, `setenv` in harvest_py,
  tests, scripts, bench), or one of ALLOWED below; `HARVEST_SHARDS__*` and
  `HARVEST_<SECTION>__<KEY>` are patterns.
"""

from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path

import click
from docs_scan import ROOT, doc_pages, inline_spans, split_page, where

from harvest.cli.main import main
from harvest.config.config import NOT_CONFIG, SCHEMA, SECTIONS, TABLES, config_from_mapping, env_name
from harvest.core.errors import ConfigError
from harvest.core.secret_files import FILE_SUFFIX, is_secret

# Variables the docs name that Harvest does not read, each for a reason.
ALLOWED = {
    "HARVEST_WORKER_QUEUES": "operations.md: the misspelling the boot error corrects",
}

VARIABLE = re.compile(r"\bHARVEST_[A-Z0-9_]*[A-Z0-9_](?P<pattern>\*|<)?")
READ = re.compile(r"""(?:environ(?:\.get)?[\[(]\s*|getenv\(\s*|envvar=|setenv\(\s*)["'](HARVEST_\w+)""")
SECTION_KEY = re.compile(r"^\[(\w+)\]\s+(\w+)$")
DOTTED = re.compile(r"^(\w+)\.(\w+)$")
COMMENTED = re.compile(r"^\s*#\s*(\w+)\s*=")
SECTION = re.compile(r"^\s*\[([\w.]+)\]\s*(?:#.*)?$")


def _cli_variables() -> set[str]:
    found: set[str] = set()

    def walk(command: click.Command, ctx: click.Context) -> None:
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            found.update([envvar] if isinstance(envvar, str) else envvar or [])
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None:
                    walk(sub, click.Context(sub, info_name=name, parent=ctx))

    walk(main, click.Context(main, info_name="harvest"))
    return found


def _read_by_code() -> set[str]:
    found: set[str] = set()
    for top in ("harvest_py", "tests", "scripts", "bench"):
        for path in (ROOT / top).rglob("*.py"):
            found.update(READ.findall(path.read_text()))
    return found


@cache
def known_variables() -> tuple[frozenset[str], frozenset[str]]:
    """(names, prefixes of table variables)."""
    names = {env_name(key) for key in SCHEMA} | set(NOT_CONFIG) | set(ALLOWED)
    names |= _cli_variables() | _read_by_code()
    # a secret's variable may name a file instead (docs/operations.md#secrets-from-files)
    names |= {name + FILE_SUFFIX for name in names if is_secret(name)}
    prefixes = {env_name(key) + "__" for key in SCHEMA if SCHEMA[key] in TABLES}
    return frozenset(names), frozenset(prefixes)


def variable_problems(text: str) -> list[tuple[int, str]]:
    names, prefixes = known_variables()
    problems = []
    for match in VARIABLE.finditer(text):
        name = match.group(0).rstrip("*<")
        if match.group("pattern"):
            ok = any(n.startswith(name) for n in names | prefixes)
        else:
            ok = name in names or any(name.startswith(p) and len(name) > len(p) for p in prefixes)
        if not ok:
            problems.append((text.count("\n", 0, match.start()) + 1, name))
    return problems


def _not_keys() -> set[str]:
    """Dotted names that are not config keys: the audit log's operations, in functions/*.sql."""
    found: set[str] = set()
    for path in (ROOT / "functions").glob("*.sql"):
        found.update(re.findall(r"'([a-z_]+\.[a-z_]+)'", path.read_text()))
    return found


def _key_known(section: str | None, key: str) -> bool:
    return ((section, key) if section else (key,)) in SCHEMA


def toml_problems(text: str, source: str) -> list[str]:
    problems = []
    try:
        config_from_mapping(tomllib.loads(text), source, env={})
    except tomllib.TOMLDecodeError as exc:
        problems.append(f"not valid TOML: {exc}")
    except ConfigError as exc:
        problems.append(str(exc).split("; known keys")[0])
    section: str | None = None
    for line in text.splitlines():
        if heading := SECTION.match(line):
            section = heading.group(1)
        elif (commented := COMMENTED.match(line)) and "." not in (section or ""):
            key = commented.group(1)
            if not _key_known(section, key):
                problems.append(f"commented key {'.'.join(filter(None, [section, key]))} is unknown")
    return problems


def test_the_docs_toml_blocks_are_valid_config() -> None:
    failures, checked = [], 0
    for page in doc_pages():
        for block in split_page(page)[0]:
            if block.lang == "toml":
                checked += 1
                failures += [
                    f"{where(page, block.line)}: {p}"
                    for p in toml_problems(block.text, where(page, block.line))
                ]
    for path in sorted((ROOT / "examples").glob("*/harvest.toml")):
        checked += 1
        failures += [f"{where(path, 1)}: {p}" for p in toml_problems(path.read_text(), str(path))]
    assert checked >= 6, f"only {checked} TOML configs found: has the scan broken?"
    assert not failures, "the docs' TOML configs:\n" + "\n".join(failures)


def test_inline_config_keys_exist() -> None:
    failures, checked, not_keys = [], 0, _not_keys()
    for page in doc_pages():
        for span in inline_spans(page, split_page(page)[1]):
            match = SECTION_KEY.match(span.text) or DOTTED.match(span.text)
            if match is None or match.group(1) not in SECTIONS:
                continue
            if span.text in not_keys or match.group(2) in ("sql", "py", "md", "toml"):
                continue
            checked += 1
            if not _key_known(match.group(1), match.group(2)):
                failures.append(
                    f"{where(page, span.line)}: `{span.text}`: no config key {'.'.join(match.groups())}"
                )
    assert checked >= 20, f"only {checked} inline config keys found: has the scan broken?"
    assert not failures, "the docs name config keys that do not exist:\n" + "\n".join(failures)


def test_every_harvest_variable_the_docs_name_is_read() -> None:
    failures, checked = [], 0
    for page in doc_pages():
        text = page.read_text()
        checked += len(VARIABLE.findall(text))
        failures += [
            f"{where(page, line)}: {name}: no such variable" for line, name in variable_problems(text)
        ]
    assert checked >= 100, f"only {checked} variables found: has the scan broken?"
    assert not failures, "the docs name HARVEST_* variables nothing reads:\n" + "\n".join(failures)


def test_a_variable_a_harvest_option_reads_passes_the_boot_check() -> None:
    # Every command checks the HARVEST_* variables first: an option's own variable
    # (HARVEST_BACKUP_SCRATCH_URL, backup-restore.md's) must not stop the command as unknown.
    options = _cli_variables()
    assert "HARVEST_BACKUP_SCRATCH_URL" in options, "has the walk over the commands broken?"
    refused = []
    for name in sorted(options):
        try:
            config_from_mapping({}, "test", env={name: "postgresql://h/db"})
        except ConfigError as exc:
            refused.append(f"{name}: {str(exc)[:120]}")
    assert not refused, "the boot check refuses a variable a harvest option reads:\n" + "\n".join(refused)


def test_the_checks_themselves() -> None:
    assert (
        variable_problems("HARVEST_WORKER__CONCURRENCY HARVEST_SHARDS__URLS__3 HARVEST_SHARDS__* HARVEST_<S>")
        == []
    )
    assert variable_problems("a\nHARVEST_WORKER__CONCURENCY") == [(2, "HARVEST_WORKER__CONCURENCY")]
    assert toml_problems("[worker]\nconcurrency = 20\n# gc_tuning = false\n", "t") == []
    assert toml_problems("[worker]\nconcurency = 20\n", "t")[0].startswith(
        "unknown config key 'worker.concurency'"
    )
    assert toml_problems("[worker]\n# concurency = 20\n", "t") == [
        "commented key worker.concurency is unknown"
    ]
    assert toml_problems("[worker]\nconcurrency = 0\n", "t") != []  # out of range
    assert Path(ROOT / "README.md").exists()


def test_the_configuration_section_names_every_variable_the_code_reads() -> None:
    """operations.md's "Every key has a variable" list is a deployer's inventory of what can be
    set from the environment: it left out HARVEST_SESSION_URL, HARVEST_WORKER__CACHE_SIZE and
    HARVEST_RETENTION__AUDIT_MAX_AGE, and the CLI's HARVEST_URL, HARVEST_TOKEN and
    HARVEST_HTTP_TIMEOUT_SECS from the ones read elsewhere."""
    page = (ROOT / "docs" / "operations.md").read_text()
    start = page.index("Every key has a variable")
    section = page[start : page.index("The boot stops (one", start)]
    wanted = {env_name(key) + ("__<" if SCHEMA[key] in TABLES else "") for key in SCHEMA} | set(NOT_CONFIG)
    assert sorted(name for name in wanted if name not in section) == []
