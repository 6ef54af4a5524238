"""The source distribution: what `pip download harvest-workflows --no-binary :all:` or a
distribution's packager gets. It carries the package and the SQL it installs (which a wheel
built from it ships as harvest/_sql: test_sql_files.py), and what a user reads beside them:
docs/, examples/, the changelog, the licences (MANIFEST.in); never a tool's cache or bytecode.

The sdist is built offline, as a frontend would, by the build backend pyproject.toml names
(setuptools, which the dev extra installs), from a copy of the checkout into which a working
tree's junk is planted; the checkout itself is not written to. A wheel is then built from the
unpacked sdist (as pip does) and installed, without its dependencies (this interpreter has
them), with `pip install --target` into an application's directory beside which sit folders
named like Harvest's own (an Alembic `migrations/`, say), and run from there: what a user of
the built package gets, not the checkout. These need no database.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
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
BUILD = "import sys; from setuptools import build_meta; print(build_meta.build_{}(sys.argv[1]))"


def _build(kind: str, source: Path, out: Path) -> Path:
    """Build the sdist or the wheel of ``source`` into ``out`` with the backend, offline."""
    built = subprocess.run(
        [sys.executable, "-c", BUILD.format(kind), str(out)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, f"the {kind} did not build:\n{built.stderr[-3000:]}"
    return out / built.stdout.split()[-1]


@pytest.fixture(scope="module")
def sdist_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("sdist")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE, symlinks=True)
    for junk in JUNK:
        (source / junk).parent.mkdir(parents=True, exist_ok=True)
        (source / junk).write_text("junk")
    return _build("sdist", source, work / "out")


@pytest.fixture(scope="module")
def sdist(sdist_archive: Path) -> list[str]:
    """The sdist's member files, each relative to its top directory."""
    with tarfile.open(sdist_archive) as archive:
        names = [m.name for m in archive.getmembers() if m.isfile()]
    top = {name.split("/", 1)[0] for name in names}
    assert len(top) == 1, f"an sdist holds one top directory, not {sorted(top)}"
    return sorted(name.split("/", 1)[1] for name in names)


# An application's own folders named like Harvest's SQL directories, beside the directory the
# package is installed into (Alembic's and Flask-Migrate's `migrations/` holds no .sql file).
APP_FOLDERS = {"migrations/env.py": "# alembic\n", "sql/report.sql": "SELECT 1;\n", "functions/x.sql": ""}


@pytest.fixture(scope="module")
def unpacked(sdist_archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist unpacked: its top directory."""
    work = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(sdist_archive) as archive:
        archive.extractall(work, filter="data")
    (top,) = work.iterdir()
    return top


@pytest.fixture(scope="module")
def installed(unpacked: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An application directory holding the wheel built from the sdist in vendor/
    (``pip install --no-deps --target vendor``) and APP_FOLDERS; the package's files are
    under vendor/harvest, its command is vendor/bin/harvest."""
    work = tmp_path_factory.mktemp("wheel")
    wheel = _build("wheel", unpacked, work / "out")
    app = work / "app"
    for name, text in APP_FOLDERS.items():
        (app / name).parent.mkdir(parents=True, exist_ok=True)
        (app / name).write_text(text)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    done = subprocess.run(
        [*pip, "--target", str(app / "vendor"), str(wheel)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"the wheel did not install:\n{done.stderr[-3000:]}"
    return app


def _run_installed(app: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``args`` in the application's directory with only the installed package importable
    (this interpreter's site-packages give the dependencies; its editable Harvest comes after)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARVEST_", "PYTHON"))}
    env["PYTHONPATH"] = str(app / "vendor")
    return subprocess.run(args, cwd=app, env=env, capture_output=True, text=True, timeout=120)


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


WHERE = """
import harvest
from harvest.db import paths
print(harvest.__file__)
for directory in (paths.migrations_dir(), paths.functions_dir(), paths.sql_dir()):
    print(directory, len(list(directory.glob("*.sql"))))
"""


def test_the_installed_package_reads_its_own_sql_not_the_folders_beside_it(installed: Path) -> None:
    """The SQL an installed Harvest applies is the wheel's harvest/_sql, whatever sits two
    levels above the package: before, a `pip install --target vendor` beside an Alembic
    `migrations/` read that folder as Harvest's migrations (none), and `harvest migrate run`
    then failed in functions/activities.sql on `type harvest.executions does not exist`."""
    done = _run_installed(installed, sys.executable, "-c", WHERE)
    assert done.returncode == 0, done.stderr
    package, *directories = done.stdout.splitlines()
    assert Path(package).is_relative_to(installed / "vendor" / "harvest"), package
    sql = installed / "vendor" / "harvest" / "_sql"
    for line, name in zip(directories, ("migrations", "functions", "sql"), strict=True):
        path, count = line.rsplit(" ", 1)
        assert Path(path) == sql / name, line
        assert int(count) == len(list((ROOT / name).glob("*.sql"))), line


def test_the_installed_command_runs(installed: Path) -> None:
    """The `harvest` script pip wrote runs from the application's directory."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    harvest = str(installed / "vendor" / "bin" / "harvest")
    done = _run_installed(installed, harvest, "--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"harvest, version {version}"), done.stderr
    done = _run_installed(installed, harvest, "migrate", "status", "--help")
    assert done.returncode == 0 and "Usage: harvest migrate status" in done.stdout, done.stderr


def test_the_extension_builds_from_the_unpacked_sdist(unpacked: Path, tmp_path: Path) -> None:
    """docs/install.md's `python scripts/build_extension.py` works where a user without a
    checkout has the SQL: the unpacked sdist (before, it carried no scripts/)."""
    done = subprocess.run(
        [sys.executable, "scripts/build_extension.py", "--output-dir", str(tmp_path)],
        cwd=unpacked,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    with open(ROOT / "pyproject.toml", "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    assert f"default_version = '{version}'" in (tmp_path / "harvest.control").read_text()
    assert "CREATE SCHEMA harvest;" in (tmp_path / f"harvest--{version}.sql").read_text()
