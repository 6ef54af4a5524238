"""An activity's options encoded once (docs/performance.md, "Cheaper Python, eleventh cut"):
``ActivityDefinition.encoded_options`` keeps the options' JSON text while nothing they are made
from changes, and ``dumps_spliced`` writes that text in place of the object. Any change to the
definition or its retry policy, a per-call override and a DAG's tag must give the options as
``options_json`` makes them now, never a text kept from before.
"""

from __future__ import annotations

import asyncio
import json

from history_builder import Engine

from harvest.core.jsonb import EncodedJson, dumps, dumps_spliced, stored_text
from harvest.db.arrays import JsonbArray
from harvest.declare.definitions import ActivityDefinition, App, RetryPolicy, activity, workflow
from harvest.declare.flow_control import RateLimit


async def _noop(ctx, step: int) -> int:
    return step


def _fresh_text(defn: ActivityDefinition) -> str:
    return dumps(defn.options_json())


def test_the_kept_text_is_the_options_json_text() -> None:
    defn = ActivityDefinition(name="a", fn=_noop, max_concurrent=2, fairness_key="$.tenant")
    encoded = defn.encoded_options()
    assert encoded.text == _fresh_text(defn)
    assert dict(encoded) == defn.options_json() and encoded == defn.options_json()
    assert defn.encoded_options() is encoded  # nothing changed: the same object, no new text


def test_every_change_to_what_the_options_read_gives_the_new_text() -> None:
    defn = ActivityDefinition(name="a", fn=_noop)
    changes = [
        lambda d: setattr(d, "start_to_close", 12.5),
        lambda d: setattr(d, "schedule_to_close", 60.0),
        lambda d: setattr(d, "heartbeat_timeout", 5.0),
        lambda d: setattr(d, "priority", 7),
        lambda d: setattr(d, "dead_letter", False),
        lambda d: setattr(d, "dead_letter", 0),  # equal to False, another JSON value (refused)
        lambda d: setattr(d, "priority", 7.0),  # equal to 7, another JSON text
        lambda d: setattr(d, "max_concurrent", 3),
        lambda d: setattr(d, "concurrency_key", "k"),
        lambda d: setattr(d, "name", "b"),  # the concurrency key's default
        lambda d: setattr(d, "rate_limit", RateLimit(rps=5)),
        lambda d: setattr(d, "priority_aging_secs", 30.0),
        lambda d: setattr(d, "fairness_key", "$.tenant"),
        lambda d: setattr(d, "retry", RetryPolicy(max_attempts=9)),
        lambda d: setattr(d.retry, "max_attempts", 4),  # the policy changed in place
        lambda d: setattr(d.retry, "backoff", 3.0),
        lambda d: setattr(d.retry, "initial_interval", 2.0),
        lambda d: setattr(d.retry, "max_interval", 50.0),
        lambda d: d.retry.non_retryable_errors.append("ValueError"),  # its list, in place
        lambda d: d.retry.non_retryable_errors.__setitem__(0, "KeyError"),
    ]
    for change in changes:
        defn.encoded_options()  # kept before the change
        change(defn)
        assert defn.encoded_options().text == _fresh_text(defn), defn


def test_a_shared_retry_policy_changed_in_place_reaches_every_definition() -> None:
    policy = RetryPolicy()
    first = ActivityDefinition(name="a", fn=_noop, retry=policy)
    second = ActivityDefinition(name="b", fn=_noop, retry=policy)
    first.encoded_options(), second.encoded_options()
    policy.max_attempts = 8
    assert '"max_attempts": 8' in first.encoded_options().text
    assert '"max_attempts": 8' in second.encoded_options().text


def test_the_encoded_options_cannot_be_changed() -> None:
    encoded = ActivityDefinition(name="a", fn=_noop).encoded_options()
    assert not hasattr(encoded, "__setitem__") and not hasattr(encoded, "update")


def test_dumps_spliced_is_dumps_of_the_plain_value() -> None:
    options = ActivityDefinition(name="a", fn=_noop).encoded_options()
    decision = {
        "after": 12,
        "result_text": "1",
        "commands": [
            {
                "type": "schedule_activity",
                "seq": 2,
                "name": "a",
                "input": [2],
                "queue": "q",
                "options": options,
            },
            {
                "type": "schedule_activity",
                "seq": 3,
                "name": "a",
                "input": ["x"],
                "queue": "q",
                "options": options,
            },
        ],
        "hand_off_slots": 2,
    }
    plain = json.loads(json.dumps(decision, default=dict))
    assert dumps_spliced(decision) == json.dumps(plain) == dumps(decision)
    assert stored_text(decision) == stored_text(plain)


def test_a_value_holding_the_splice_mark_is_written_plainly() -> None:
    from harvest.core.jsonb import _SPLICE_MARK

    options = ActivityDefinition(name="a", fn=_noop).encoded_options()
    for own in (_SPLICE_MARK, '"' + _SPLICE_MARK):
        value = {"input": [own], "options": options}
        assert dumps_spliced(value) == json.dumps({"input": [own], "options": dict(options)})


def test_the_decisions_array_writes_the_spliced_text() -> None:
    from harvest.db.arrays import JsonbArrayBinaryDumper

    options = ActivityDefinition(name="a", fn=_noop).encoded_options()
    command = {"type": "schedule_activity", "seq": 1, "name": "a", "input": [], "options": options}
    spliced = JsonbArrayBinaryDumper(JsonbArray).dump(JsonbArray([[command]], spliced=True))
    plain = JsonbArrayBinaryDumper(JsonbArray).dump(JsonbArray([[{**command, "options": dict(options)}]]))
    assert spliced == plain


@activity
async def step(ctx, n: int) -> int:
    return n


@workflow
async def overrides(ctx) -> int:
    await ctx.execute_activity(step, 1)
    await ctx.execute_activity(step, 2, priority=5, retry=RetryPolicy(max_attempts=1))
    await ctx.execute_activity(step, 3, start_to_close="7s", queue="other")
    return await ctx.execute_activity(step, 4)


def test_a_per_call_override_never_gets_the_declarations_text() -> None:
    scheduled: list[dict] = []

    def resolve(out: list[dict]) -> list:
        scheduled.extend(out)
        return [(c, ("result", c["input"][0])) for c in out]

    app = App(workflows=[overrides], activities=[step])
    asyncio.run(Engine(app, overrides, resolver=resolve).run_to_end())
    options = {c["seq"]: c["options"] for c in scheduled}
    declared = step.__harvest_activity__
    assert [dumps_spliced(o) for o in options.values()] == [dumps(dict(o)) for o in options.values()]
    assert dict(options[1]) == declared.options_json() == dict(options[4])
    assert options[2]["priority"] == 5 and options[2]["retry"]["max_attempts"] == 1
    assert options[3]["start_to_close"] == 7
    assert {c["seq"]: c["queue"] for c in scheduled}[3] == "other"
    assert not isinstance(options[2], EncodedJson) and not isinstance(options[3], EncodedJson)
