"""No raw cast of a caller's JSON field to an integer or a boolean in functions/: such a field is
read by the one rule (functions/core.sql, _json_integer, _json_bigint, _json_boolean), which
takes 2.0 as 2 and refuses a fraction, a string, a number out of range (HR001 naming the
field). A raw ``(x ->> 'f')::integer`` failed with 22P02 on "2.0" (JSON has no integer type: a
float serialiser writes it), often long after the check that let it through (a claim, a failed
attempt, every start), took "3" and "yes", and a jsonb cast rounded 2.5 to 3.

A cast is allowed only of JSON the engine itself wrote, listed in ENGINE_WRITTEN by the
expression it reads, with why. A new field of a caller's JSON goes through the rule, and into
tests/integration/test_json_number_fields.py's FIELDS."""

from __future__ import annotations

import re

import pytest

from harvest import Batch, Quota, RateLimit, RetryPolicy, Throttle
from harvest.core.errors import InvalidArgument
from harvest.db.paths import functions_dir
from harvest.declare.definitions import check_priority

CAST = re.compile(
    r"\(\s*(?P<source>[\w.]+(?:\[\d+\])?)\s*(?:->>|#>>|->|#>)\s*'[^']*'\s*\)\s*::\s*"
    r"(?:integer|int|int4|int8|bigint|smallint|boolean|bool)\b",
    re.IGNORECASE,
)

# (file, the JSON the cast reads): why it is not a caller's.
ENGINE_WRITTEN = {
    (
        "activities.sql",
        "v_decision",
    ): "complete_activities' per-task outcomes, built by the worker's SQL API call",
    ("audit.sql", "e.v"): "the shards' answers fan_out_audit collected itself",
    ("dags.sql", "e.event_data"): "a recorded event (its seq the engine wrote)",
    (
        "executions.sql",
        "w.wait",
    ): "a decision marker's awaiting, its numbers read by the rule (decide.sql, _awaited_signals_of)",
    ("dags.sql", "o.out"): "a DAG task's recorded outcome (its attempt the engine wrote)",
    ("dags.sql", "j.obj"): "the same outcome, merged",
    ("flow_usage.sql", "ev.event_data"): "a recorded event's attempt",
    ("lifecycle.sql", "ev.event_data"): "a recorded event's seq",
    ("lifecycle.sql", "v_event.event_data"): "a recorded event's attempt",
    ("metrics.sql", "c.value"): "list_concurrency_keys' own rows as JSON",
    ("metrics.sql", "h.value"): "_sample_queue_depths' own per-queue heads (v_heads)",
    ("metrics.sql", "s.value"): "_sample_queue_depths' own block-sample counts (v_sample)",
    ("shards.sql", "q.value"): "_sample_queue_depths' rows, which get_shard_health sums per queue",
    ("rebalance.sql", "v_prior_seal"): "the seal a migration's source shard wrote",
    ("rebalance.sql", "v_source"): "the digest the source shard computed",
    ("rebalance.sql", "v_now"): "the digest this shard computed",
    ("reset.sql", "c.event_data"): "a recorded event's seq",
    ("reset.sql", "ev.event_data"): "a WorkflowResetFork event's to_event, written by the reset",
    ("reset.sql", "r.event_data"): "a recorded event's seq",
    ("reset.sql", "x.event_data"): "a recorded event's timer_seq",
    ("schedules.sql", "v_spec"): "the spec _check_schedule_spec returned, its numbers read by the rule",
    ("start.sql", "s.v"): "a priority _starts_plain matched to ^-?[0-9]{1,7}$ first",
    ("start.sql", "v_start"): "a start _starts_plain let through (its priority digits only)",
    ("start.sql", "s.value"): "a start _starts_plain let through (its priority digits only)",
}


def _casts() -> list[tuple[str, int, str, str]]:
    found = []
    for path in sorted(functions_dir().glob("*.sql")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("--", 1)[0]
            found.extend((path.name, number, m.group("source"), m.group(0)) for m in CAST.finditer(code))
    return found


def test_no_raw_cast_of_a_callers_json_field() -> None:
    raw = [
        f"functions/{name}:{number}: {text}"
        for name, number, source, text in _casts()
        if (name, source) not in ENGINE_WRITTEN
    ]
    assert not raw, (
        "read these with harvest._json_integer / _json_bigint / _json_boolean (functions/core.sql), "
        "or list the JSON in ENGINE_WRITTEN if the engine wrote it:\n" + "\n".join(raw)
    )


def test_every_listed_exception_is_still_there() -> None:
    """A stale entry would let a later raw cast of a caller's field through."""
    seen = {(name, source) for name, _, source, _ in _casts()}
    assert not set(ENGINE_WRITTEN) - seen, sorted(set(ENGINE_WRITTEN) - seen)


def test_the_pattern_finds_the_casts_it_forbids() -> None:
    for text in (
        "coalesce((v_retry ->> 'max_attempts')::integer, 3)",
        "(q.command #>> '{options,priority}')::integer",
        "(p_spec ->> 'catchup')::boolean",
        "(c.command -> 'seq')::integer",
        "(p_commands[1] #>> '{options,priority}')::int",
    ):
        assert CAST.search(text), text


def test_the_python_checks_refuse_what_the_sql_refuses() -> None:
    """What a Python declaration lets through, the SQL's rule takes: the Python side is the
    stricter (an ``int`` where a count goes, no float; rates and sizes at most 1e300, which the
    SQL's _json_number and the activity options' check refuse past)."""
    refused = [
        lambda: RateLimit(rps=1e301),
        lambda: RateLimit(rps=1, burst=1e301),
        lambda: Throttle(rps=1e301),
        lambda: RetryPolicy(max_attempts=2.5),
        lambda: RetryPolicy(max_attempts="3"),
        lambda: RetryPolicy(backoff=1e301),
        lambda: Quota(key="input", max_active_executions=1.5),
        lambda: Batch(max_size=2.5, window=1),
        lambda: check_priority(2**31),
        lambda: check_priority(True),
    ]
    for make in refused:
        with pytest.raises(InvalidArgument):
            make()
    assert RateLimit(rps=1e300).rps == 1e300
