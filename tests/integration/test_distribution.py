"""The source distribution: what `pip download harvest-workflows --no-binary :all:` or a
distribution's packager gets. It carries the package and the SQL it installs (which a wheel
built from it ships as harvest/_sql: test_sql_files.py), and what a user reads beside them:
docs/, examples/, the changelog, the licences (MANIFEST.in); never a tool's cache or bytecode.

The sdist is built offline, as a frontend would, by the build backend pyproject.toml names
(setuptools, which the dev extra installs), from a copy of the checkout into which a working
tree's junk is planted; the checkout itself is not written to. These need no database.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What the copy leaves out: what is never source (the repository, the virtualenv, build output
# and the caches, which JUNK then plants on purpose).
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", ".hypothesis", "build", "dist", "*.egg-info", "__pycache__", "*.py[cod]", ".*_cache"
)
# A working tree's junk, under what the sdist carries and beside it: none may reach the sdist.
JUNK = (
    "examples/approval/__pycache__/workflows.cpython-311.pyc",
    "examples/stray.pyc",
    "examples/.pytest_cache/v/cache/lastfailed",
    "docs/.mypy_cache/3.11/cache.db",
    "harvest_py/harvest/.ruff_cache/content",
    "harvest_py/harvest/core/__pycache__/errors.cpython-311.pyc",
    ".pytest_cache/README.md",
)
BUILD = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The sdist's member files, each relative to its top directory."""
    work = tmp_path_factory.mktemp("sdist")
    source, out = work / "source", work / "out"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE, symlinks=True)
    for junk in JUNK:
        (source / junk).parent.mkdir(parents=True, exist_ok=True)
        (source / junk).write_text("junk")
    built = subprocess.run(
        [sys.executable, "-c", BUILD, str(out)], cwd=source, capture_output=True, text=True, timeout=300
    )
    assert built.returncode == 0, f"the sdist did not build:\n{built.stderr[-3000:]}"
    with tarfile.open(out / built.stdout.split()[-1]) as archive:
        names = [m.name for m in archive.getmembers() if m.isfile()]
    top = {name.split("/", 1)[0] for name in names}
    assert len(top) == 1, f"an sdist holds one top directory, not {sorted(top)}"
    return sorted(name.split("/", 1)[1] for name in names)


def _junk(path: str) -> bool:
    """A cache's file or bytecode."""
    parts = path.split("/")
    return path.endswith((".pyc", ".pyo")) or any(p == "__pycache__" or p.endswith("_cache") for p in parts)


def _tracked(directory: str) -> list[str]:
    """The checkout's files under ``directory`` (what the copy took), relative to the root."""
    files = (p.relative_to(ROOT).as_posix() for p in (ROOT / directory).rglob("*") if p.is_file())
    return sorted(f for f in files if not _junk(f))


def test_the_sdist_carries_the_docs_and_the_examples(sdist: list[str]) -> None:
    members = set(sdist)
    for directory in ("docs", "examples"):
        missing = [f for f in _tracked(directory) if f not in members]
        assert not missing, f"the sdist lacks {len(missing)} file(s) of {directory}/: {missing[:10]}"
    assert "docs/testing.md" in members and "docs/README.md" in members
    assert "examples/README.md" in members and "examples/approval/README.md" in members


def test_the_sdist_carries_the_changelog_licences_and_readme(sdist: list[str]) -> None:
    for name in (
        "CHANGELOG.md",
        "CONTRIBUTING.md",
        "README.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
        "pyproject.toml",
    ):
        assert name in sdist


def test_the_sdist_carries_what_the_wheel_is_built_from(sdist: list[str]) -> None:
    """A wheel built from the sdist (pip installing it) ships the SQL as harvest/_sql, which
    pyproject.toml maps from the top-level sql/, functions/ and migrations/: all three whole."""
    members = set(sdist)
    for directory in ("sql", "functions", "migrations"):
        files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / directory).glob("*.sql"))
        assert files and not [f for f in files if f not in members], directory
    assert "harvest_py/harvest/__init__.py" in members and "harvest_py/harvest/py.typed" in members


def test_the_sdist_carries_no_cache_or_bytecode(sdist: list[str]) -> None:
    junk = [name for name in sdist if _junk(name)]
    assert junk == []
    assert not set(JUNK) & set(sdist)
