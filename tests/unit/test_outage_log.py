"""An outage's log lines, bounded (docs/security.md, "What an outage tells a caller"): a 503 for a
database that cannot be reached logs what the connect met under its request id, but a few
hundred such requests a second must not be as many lines. One app's OutageLog logs a cause's
first request at once, then a count at most every interval, and a line when no request met the
cause for an interval; every request id of the outage starts with the outage's 8 characters,
which its lines name. The clock is the test's own: no sleep, no time compared."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest

from harvest.core.errors import NoShardReached, ShardUnavailable
from harvest.db.connection import failure_reason
from harvest.db.pools import ServerUnreachable
from harvest.web.errors import OutageLog, outage_answer
from harvest.web.principal import Principal

DOWN = ServerUnreachable("Connection refused")
LOGIN_REFUSED = ServerUnreachable('password authentication failed for user "harvest_api"')
ADMIN = Principal("ops", "admin")
READER = Principal("ci", "read")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.said.append(record.getMessage())


@pytest.fixture
def lines() -> Iterator[list[str]]:
    """The lines logger harvest.web logs, as they are logged."""
    handler = _Lines()
    logger = logging.getLogger("harvest.web")
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.WARNING
    try:
        yield handler.said
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _outage_id(line: str) -> str:
    (found,) = re.findall(r"outage ([0-9a-f]{8}) ", line)
    return found


def _counted(said: list[str]) -> int:
    """The requests the counting lines say, besides each outage's first."""
    return sum(int(n) for line in said for n in re.findall(r": (\d+) more requests", line))


def test_a_burst_is_a_bounded_number_of_lines_with_the_right_counts(lines: list[str]) -> None:
    clock = Clock()
    outages = OutageLog(clock=clock)
    burst, per_second = 3000, 100  # 30 s of an outage at 100 requests a second
    ids = []
    for _ in range(burst):
        _, message, details = outage_answer(DOWN, READER, "harvest", outages)
        assert details["request_id"] in message and details["detail"] is None, details
        ids.append(details["request_id"])
        clock.now += 1 / per_second
    clock.now += 10  # no request met it for an interval: the next answer says it is over
    outages.tick()
    assert 2 <= len(lines) <= 1 + 30 // 10 + 1, lines  # the first, one per 10 s, the end
    first, *counts, over = lines
    outage = _outage_id(first)
    assert first.startswith(f"harvest: request {ids[0]}: outage {outage} begins"), first
    assert first.endswith(": ServerUnreachable: the database cannot be reached now (Connection refused)")
    assert all(_outage_id(line) == outage and line.endswith("(Connection refused)") for line in lines)
    assert all(" goes on: " in line for line in counts) and " is over " in over, lines
    assert _counted(lines) == burst - 1, lines  # every request after the first, counted once
    assert over.split(": ")[2].endswith(f"{burst} in all over 30 s"), over
    # Any request id of the burst finds its outage's lines: it starts with the outage's id.
    assert {request_id[:8] for request_id in ids} == {outage}, ids[:3]
    # The rest is 8 random hex a request: 3,000 of them collide about once in 950 runs (a
    # birthday bound, C(3000, 2) / 2**32), three times about once in 5e9.
    assert len(set(ids)) >= burst - 2 and all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids)


def test_another_cause_is_logged_as_its_own_outage(lines: list[str]) -> None:
    clock = Clock()
    outages = OutageLog(clock=clock)
    said = {}
    for _ in range(50):
        for name, exc in (
            ("down", DOWN),
            ("login", LOGIN_REFUSED),
            ("shard 3", ShardUnavailable(3)),
            ("shard 4", ShardUnavailable(4)),
        ):
            said.setdefault(name, set()).add(
                outage_answer(exc, READER, "harvest", outages)[2]["request_id"][:8]
            )
        clock.now += 0.1
    assert all(len(prefixes) == 1 for prefixes in said.values()), said  # one outage per cause
    assert len({p for prefixes in said.values() for p in prefixes}) == 4, said
    assert len(lines) == 4 and all(" begins " in line for line in lines), lines  # each cause's first
    assert sum("harvest_api" in line for line in lines) == 1, lines
    clock.now += 10
    outages.tick()
    assert len(lines) == 8 and _counted(lines[4:]) == 4 * 49, lines


def test_one_cause_met_by_two_faces_is_one_outage(lines: list[str]) -> None:
    """The management API and its dashboard share a process's log (harvest.web.errors.app_outages):
    a database down for both is one outage, one begins line (its first request's face), and the
    dashboard's requests are counted in it. It was an outage per face, a begins line from each."""
    clock = Clock()
    outages = OutageLog(clock=clock)
    ids = []
    for _ in range(20):
        for where in ("harvest", "dashboard"):
            ids.append(outage_answer(DOWN, READER, where, outages)[2]["request_id"])
        clock.now += 0.1
    assert {i[:8] for i in ids} == {ids[0][:8]}, ids
    assert len(lines) == 1 and lines[0].startswith(
        f"harvest: request {ids[0]}: outage {ids[0][:8]} begins"
    ), lines
    clock.now += 10
    outages.tick()
    assert len(lines) == 2 and _counted(lines) == 39 and "40 in all" in lines[1], lines


def test_a_cause_met_again_after_it_was_over_begins_a_new_outage(lines: list[str]) -> None:
    clock = Clock()
    outages = OutageLog(clock=clock)
    first = outage_answer(DOWN, None, "harvest", outages)[2]["request_id"]
    clock.now += 5
    assert outage_answer(DOWN, None, "harvest", outages)[2]["request_id"][:8] == first[:8]
    clock.now += 10
    again = outage_answer(DOWN, None, "harvest", outages)[2]["request_id"]
    assert again[:8] != first[:8], (first, again)
    assert [" begins " in line for line in lines] == [True, False, True], lines
    assert lines[1].endswith("is over (no request met it for 10 s): 1 more requests since its last line, "
                             "2 in all over 5 s: ServerUnreachable: the database cannot be reached now "
                             "(Connection refused)"), lines[1]  # fmt: skip
    outages.close()  # (the server stops: nothing more to count of the one request of the second)
    assert len(lines) == 3, lines


def test_the_counts_not_said_yet_are_said_at_shutdown(lines: list[str]) -> None:
    clock = Clock()
    outages = OutageLog(clock=clock)
    for _ in range(7):
        outage_answer(DOWN, None, "harvest", outages)
        clock.now += 1
    outages.close()
    assert len(lines) == 2 and " at shutdown: 6 more requests since its last line, 7 in all " in lines[1], (
        lines
    )


def test_an_admin_still_reads_the_detail_and_no_one_else_does() -> None:
    outages = OutageLog(clock=Clock())
    for _ in range(3):  # (the outage's first request, and counted ones)
        for exc, shard in ((DOWN, None), (ShardUnavailable(2), 2)):
            admin = outage_answer(exc, ADMIN, "harvest", outages)
            reader = outage_answer(exc, READER, "harvest", outages)
            assert admin[2]["detail"] == failure_reason(exc) and reader[2]["detail"] is None, (admin, reader)
            assert admin[0] == reader[0] == ("database_unavailable" if shard is None else "shard_unavailable")
            assert admin[2]["shard_id"] == reader[2]["shard_id"] == shard
            for _, message, details in (admin, reader):
                rid = details["request_id"]
                assert message.endswith(
                    f"(request {rid}: the server's log has the cause under outage {rid[:8]})"
                )
                assert failure_reason(exc) not in message, message


def test_past_max_outages_a_new_causes_requests_are_each_logged_whole(lines: list[str]) -> None:
    """An app follows MAX_OUTAGES causes at once: a cause past them is never unsaid (each of its
    requests a line, as before the log was bounded) and never kept (no table without end)."""
    from harvest.web.errors import MAX_OUTAGES

    clock = Clock()
    outages = OutageLog(clock=clock)
    for shard in range(MAX_OUTAGES):
        outage_answer(ShardUnavailable(shard), None, "harvest", outages)
    assert len(lines) == MAX_OUTAGES and all(" begins " in line for line in lines)
    past = [
        outage_answer(ShardUnavailable(MAX_OUTAGES), None, "harvest", outages)[2]["request_id"]
        for _ in range(3)
    ]
    assert len(lines) == MAX_OUTAGES + 3, lines[MAX_OUTAGES:]
    for request_id, line in zip(past, lines[MAX_OUTAGES:], strict=True):
        assert line.startswith(f"harvest: request {request_id}: ShardUnavailable: "), line
        assert " begins " not in line and "shard 64" in line, line
    assert len(outages._open) == MAX_OUTAGES  # (the cause past them is not kept)
    clock.now += 10  # the followed ones are over (one request each: no line), and free their places
    outages.tick()
    assert len(lines) == MAX_OUTAGES + 3 and not outages._open
    outage_answer(ShardUnavailable(MAX_OUTAGES), None, "harvest", outages)
    assert " begins " in lines[-1], lines[-1]


def test_a_call_named_in_an_outage_is_not_an_outage_of_its_own(lines: list[str]) -> None:
    """A dead letter's search names its id in NoShardReached's message; two ids searched while
    the same shard is down are one outage (one begins line, one id prefix), not one each."""
    clock = Clock()
    outages = OutageLog(clock=clock)
    ids = []
    for letter in (41, 42, 43):
        exc = NoShardReached(f"dead letter {letter}: shard(s) 1 could not be searched", "shard 1: down")
        ids.append(outage_answer(exc, READER, "harvest", outages)[2]["request_id"])
        clock.now += 1
    assert len({rid[:8] for rid in ids}) == 1, ids
    assert sum("begins" in line for line in lines) == 1, lines
