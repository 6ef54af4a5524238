"""The client's placement of a start (harvest/client/routing.py), without a database: what a
one-database and a sharded client decide, the minted ids, and the refusal of a pin that a
debounce or a batch would defer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harvest import Batch, Debounce, Throttle, workflow
from harvest.client import routing
from harvest.core.errors import InvalidArgument
from harvest.shard import ShardRouter

ROUTER = ShardRouter([0, 1, 2], [0, 1, 2], 0, residency_map={"eu": 0, "apac": 2})
SHARDED = SimpleNamespace(router=ROUTER, sharded=True)
ONE = SimpleNamespace(router=ShardRouter.single(0), sharded=False)


@workflow(debounce=Debounce(quiet=5))
async def debounced(ctx) -> None:
    return None


@workflow(batch=Batch(window=5, max_size=10))
async def batched(ctx, item) -> None:
    return None


@workflow(throttle=Throttle(rps=1))
async def throttled(ctx) -> None:
    return None


def test_one_database_unpinned_starts_keep_the_database_shard_and_the_given_id() -> None:
    placed = routing.place_start(ONE, "wf", None, None, None)
    assert (placed.shard, placed.workflow_id, placed.pinned) == (None, None, False)
    assert routing.place_start(ONE, "wf", "w-1", None, None).workflow_id == "w-1"


def test_sharded_unpinned_starts_hash_and_mint_an_id_first() -> None:
    placed = routing.place_start(SHARDED, "wf", "order-7", None, None)
    assert placed.shard == ROUTER.pick_for_new_workflow("wf", "order-7") and not placed.pinned
    minted = routing.place_start(SHARDED, "wf", None, None, None)
    assert minted.workflow_id and minted.shard == ROUTER.pick_for_new_workflow("wf", minted.workflow_id)


@pytest.mark.parametrize(("pin", "shard"), [({"shard_id": 1}, 1), ({"residency_key": "apac"}, 2)])
def test_a_pin_without_an_id_mints_one_that_hashes_to_its_shard(pin, shard) -> None:
    for _ in range(20):
        placed = routing.place_start(SHARDED, "wf", None, pin.get("shard_id"), pin.get("residency_key"))
        assert placed.pinned and placed.shard == shard
        assert ROUTER.pick_for_new_workflow("wf", placed.workflow_id) == shard
    kept = routing.place_start(SHARDED, "wf", "mine", pin.get("shard_id"), pin.get("residency_key"))
    assert kept.workflow_id == "mine" and kept.shard == shard


def test_a_one_database_client_pins_within_its_single_router() -> None:
    assert routing.place_start(ONE, "wf", None, 0, None).shard == 0
    with pytest.raises(InvalidArgument, match="shard_id 1 is not a shard of this deployment"):
        routing.place_start(ONE, "wf", None, 1, None)


@pytest.mark.parametrize(("fn", "kind"), [(debounced, "debounce"), (batched, "batch")])
def test_a_pin_of_a_deferring_workflow_is_refused_from_its_declaration(fn, kind) -> None:
    definition = fn.__harvest_workflow__
    with pytest.raises(InvalidArgument, match=f"declares a {kind}: .* cannot take shard_id or residency_key"):
        routing.place_start(SHARDED, definition.name, None, 1, None, definition)
    # Unpinned, the gate applies as usual: nothing to refuse.
    assert not routing.place_start(SHARDED, definition.name, None, None, None, definition).pinned
    # A throttle keeps the pin.
    assert routing.place_start(SHARDED, "throttled", None, 1, None, throttled.__harvest_workflow__).shard == 1


def test_the_database_answer_of_a_pinned_start_decides_the_refusal() -> None:
    placement = routing.Placement(1, "w-1", True)
    started = {"execution_id": "x", "workflow_id": "w-1"}
    assert routing.pin_was_deferred("wf", placement, started) is False
    with pytest.raises(InvalidArgument, match="declares a batch"):  # merged into another's batch
        routing.pin_was_deferred("wf", placement, {"execution_id": "y", "workflow_id": "other"})
    deferred = {"execution_id": None, "workflow_id": "w-1"}
    assert routing.pin_was_deferred("wf", placement, deferred) is True
    routing.refuse_pending("wf", deferred, [{"kind": "throttle", "workflow_id": "w-1"}])  # kept
    with pytest.raises(InvalidArgument, match="declares a debounce"):
        routing.refuse_pending("wf", deferred, [{"kind": "debounce", "workflow_id": "w-1"}])
    with pytest.raises(InvalidArgument, match="declares a debounce or batch"):
        routing.refuse_pending("wf", deferred, [])  # deferred, but by nothing it can name


def test_routing_an_id_that_is_not_a_uuid_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgument, match="not an execution id"):
        routing.route_id(ROUTER, "order-7")
    assert routing.boot_order(ShardRouter([0, 1, 2], [0, 1, 2], 1), (0, 1, 2)) == [1, 0, 2]


@workflow(debounce=Debounce(quiet=5, key="input.doc.id"))
async def keyed(ctx, change) -> None:
    return None


def test_a_burst_of_one_gate_key_without_ids_is_placed_on_one_shard() -> None:
    """A debounce or a batch collapses only where its starts meet: a start without a workflow id
    is placed by (name, the gate's key as the database resolves it), under an id minted to hash
    to that shard; a start with one keeps the id's shard."""
    gate = routing.gate_key
    assert gate(None, [{}]) is None and gate(throttled.__harvest_workflow__, [{}]) is None
    assert gate(debounced.__harvest_workflow__, []) == "" and gate(batched.__harvest_workflow__, [1]) == ""
    definition = keyed.__harvest_workflow__
    assert gate(definition, [{"doc": {"id": "d-1"}}]) == "d-1"
    assert gate(definition, [{"doc": {"id": 7}}]) == "7"
    assert gate(definition, [{"doc": {"id": {"b": 1, "a": [True]}}}]) == '{"a":[true],"b":1}'
    for missing in ([], [None], [{"doc": "d"}], [{"doc": {"id": None}}]):
        assert gate(definition, missing) is None, "no value at the path: no gate, placed by id"
    placed = [
        routing.place_start(SHARDED, "keyed", None, None, None, definition, [{"doc": {"id": "d-1"}, "n": n}])
        for n in range(6)
    ]
    assert len({p.shard for p in placed}) == 1 and not any(p.pinned for p in placed)
    for p in placed:  # each minted id hashes where the run is: a lookup by it finds it
        assert ROUTER.pick_for_new_workflow("keyed", p.workflow_id) == p.shard
    # A given workflow_id keeps its hashed shard (where get_handle(workflow_id=...) looks).
    given = routing.place_start(SHARDED, "keyed", "w-1", None, None, definition, [{"doc": {"id": "d-1"}}])
    assert (given.shard, given.workflow_id) == (ROUTER.pick_for_new_workflow("keyed", "w-1"), "w-1")
    other = {
        routing.place_start(SHARDED, "keyed", None, None, None, definition, [{"doc": {"id": f"d-{n}"}}]).shard
        for n in range(30)
    }
    assert other == {0, 1, 2}, "keys spread over the shards"


def test_the_shards_declaration_of_a_name_is_read_again_after_its_period(monkeypatch) -> None:
    """What the shards answered for a name (read_declaration) stands for DECLARATION_TTL_SECS:
    a deploy that adds, changes or drops a workflow's debounce reaches a long-running client
    (a server) within it. It was kept for the process: such a client placed the name by its
    old declaration until it restarted."""
    clock = [1000.0]
    monkeypatch.setattr(routing.time, "monotonic", lambda: clock[0])
    target = SimpleNamespace(router=ROUTER, sharded=True, pools=SimpleNamespace(declared_gates={}))
    assert routing.declaration_by_name(target, None, "reindex") is routing.ASK  # never read
    gate = routing._remember(target, "reindex", {"kind": "debounce", "key_path": "$.doc"})
    assert gate is not None and gate.debounce is not None and gate.debounce.key == "$.doc"
    assert routing.declaration_by_name(target, None, "reindex") is gate
    routing._remember(target, "plain", None)  # no gate: remembered as such
    assert routing.declaration_by_name(target, None, "plain") is None
    clock[0] += routing.DECLARATION_TTL_SECS - 0.001
    assert routing.declaration_by_name(target, None, "reindex") is gate
    clock[0] += 0.002
    assert routing.declaration_by_name(target, None, "reindex") is routing.ASK
    assert routing.declaration_by_name(target, None, "plain") is routing.ASK
    # A definition in the App at hand, or a function, is the client's own: never read.
    assert (
        routing.declaration_by_name(target, SimpleNamespace(workflows={"reindex": "own"}), "reindex") == "own"
    )
    assert routing.declaration_by_name(ONE, None, "reindex") is None
