"""Fixtures of the chaos tests: a database with the side tables, and worker processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness import WorkerProcs, create_side_tables

import harvest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    procs = getattr(item, "_chaos_workers", None)
    if procs is not None and report.failed:
        report.sections.append(("chaos worker logs", procs.all_logs()))


@pytest.fixture
def chaos_db(db: str) -> str:
    create_side_tables(db)
    return db


@pytest.fixture
def workers(chaos_db: str, tmp_path, request) -> Iterator[WorkerProcs]:
    procs = WorkerProcs(chaos_db, tmp_path)
    request.node._chaos_workers = procs
    try:
        yield procs
    finally:
        procs.close()


@pytest.fixture
def client(chaos_db: str) -> Iterator[harvest.Client]:
    with harvest.Client(chaos_db) as c:
        yield c
