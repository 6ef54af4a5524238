"""The shard router (harvest.shard.router): rendezvous hashing that is stable across
processes and moves about 1/N of the keys when a shard is added, the residency map (declared,
never hashed), reserved shards for tenant cells, every boot-time refusal as one line naming
its key, the placement rejections (terse, never the shard set), and a byte-stable topology."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from harvest.core.errors import ConfigError, InvalidArgument
from harvest.core.ids import shard_of
from harvest.shard import ShardRouter, rendezvous

KEYS = [f"key-{n}" for n in range(4000)]


def test_rendezvous_is_the_same_in_another_process() -> None:
    here = [rendezvous(k, range(8)) for k in KEYS[:200]]
    code = (
        "import json, sys\n"
        "from harvest.shard import rendezvous\n"
        "print(json.dumps([rendezvous(f'key-{n}', range(8)) for n in range(200)]))\n"
    )
    # A different hash seed: the answer must not depend on hash().
    env = {"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert json.loads(out.stdout) == here


def test_rendezvous_spreads_keys_and_ignores_the_order_of_shards() -> None:
    counts = dict.fromkeys(range(4), 0)
    for k in KEYS:
        counts[rendezvous(k, [3, 1, 0, 2])] += 1
        assert rendezvous(k, [3, 1, 0, 2]) == rendezvous(k, (0, 1, 2, 3))
    assert all(800 < c < 1200 for c in counts.values()), counts
    with pytest.raises(ValueError):
        rendezvous("k", [])


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_adding_a_shard_moves_about_one_in_n_plus_one_keys_all_to_the_new_shard(n: int) -> None:
    before = {k: rendezvous(k, range(n)) for k in KEYS}
    after = {k: rendezvous(k, range(n + 1)) for k in KEYS}
    moved = [k for k in KEYS if before[k] != after[k]]
    assert all(after[k] == n for k in moved), "a key only ever moves to the new shard"
    expected = len(KEYS) / (n + 1)
    assert 0.8 * expected < len(moved) < 1.2 * expected, (len(moved), expected)


def test_pick_for_new_workflow_hashes_name_and_id_over_writable_unreserved_shards() -> None:
    router = ShardRouter([0, 1, 2, 3], [0, 1, 2], 0, reserved=[2])
    picked = {router.pick_for_new_workflow("order", f"o-{n}") for n in range(500)}
    assert picked == {0, 1}, "never a readable-only shard, never a reserved one"
    assert router.pick_for_new_workflow("order", "o-1") == router.pick_for_new_workflow("order", "o-1")
    # The name is part of the key, unambiguously: ("a:b", "c") is not ("a", "b:c").
    a = [router.pick_for_new_workflow("a:b", f"c{n}") for n in range(200)]
    b = [router.pick_for_new_workflow("a", f"b:c{n}") for n in range(200)]
    assert a != b


def test_reserving_a_shard_moves_only_the_keys_that_hashed_to_it() -> None:
    open_router = ShardRouter([0, 1, 2], [0, 1, 2], 0)
    cell_router = ShardRouter([0, 1, 2], [0, 1, 2], 0, reserved=[2])
    for n in range(1000):
        before = open_router.pick_for_new_workflow("wf", str(n))
        after = cell_router.pick_for_new_workflow("wf", str(n))
        assert after == before or before == 2


def test_residency_is_declared_and_survives_widening_the_shard_set() -> None:
    two = ShardRouter([0, 1], [0, 1], 0, residency_map={"eu": 0, "us": 1})
    three = ShardRouter([0, 1, 2], [0, 1, 2], 0, residency_map={"eu": 0, "us": 1, "apac": 2})
    for router in (two, three):
        assert router.place("order", "o-1", residency_key="eu") == 0
        assert router.place("order", None, residency_key="us") == 1
    assert three.place("order", "x", residency_key="apac") == 2


def test_a_pin_reaches_a_reserved_cell_and_unpinned_starts_never_do() -> None:
    router = ShardRouter([0, 1], [0, 1], 0, residency_map={"cell-a": 1}, reserved=[1])
    assert router.place("import", "acme-42", residency_key="cell-a") == 1
    assert router.place("import", "acme-42", shard_id=1) == 1
    assert {router.place("import", f"t-{n}") for n in range(300)} == {0}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shard_id": 1, "residency_key": "eu"}, "shard_id and residency_key are mutually exclusive"),
        ({"residency_key": "mars"}, "unknown residency_key 'mars'"),
        ({"residency_key": " "}, "residency_key is blank"),
        ({"residency_key": 5}, "residency_key must be a non-empty string, got int 5"),  # not "is blank"
        ({"residency_key": "drained"}, "residency_key 'drained' maps to a shard that is not accepting new"),
        ({"shard_id": 2}, "shard_id 2 is not accepting new workflows"),
        ({"shard_id": 9}, "shard_id 9 is not a shard of this deployment"),
        ({"shard_id": 70000}, "shard_id 70000 is not a shard number"),
        ({"shard_id": True}, "is not a shard number"),
    ],
)
def test_place_rejections_are_terse_and_never_enumerate_the_shard_set(kwargs: dict, message: str) -> None:
    router = ShardRouter([0, 1, 2], [0, 1], 0, residency_map={"eu": 0, "us": 1, "drained": 2})
    with pytest.raises(InvalidArgument) as caught:
        router.place("order", "o-1", **kwargs)
    text = str(caught.value)
    assert message in text and "\n" not in text
    assert "[" not in text and "shards" not in text, "no shard set, no config key"
    for other in {"eu", "us", "drained"} - {kwargs.get("residency_key")}:
        assert f"'{other}'" not in text, f"{text!r} names the declared key {other!r}"


def test_an_unpinned_place_needs_a_workflow_id_and_hashes_it() -> None:
    router = ShardRouter([0, 1], [0, 1], 0)
    assert router.place("order", "o-7") == router.pick_for_new_workflow("order", "o-7")
    with pytest.raises(InvalidArgument, match="workflow_id"):
        router.place("order", None)


@pytest.mark.parametrize(
    ("args", "kwargs", "key", "reason"),
    [
        (([], [], 0), {}, "shards.readable", "is empty"),
        (([0], [0, 1], 0), {}, "shards.writable", "not in shards.readable"),
        (([0, 1], [0, 1], 5), {}, "shards.default", "not in shards.readable"),
        (([0, 1], [0, 1], 0), {"reserved": [0]}, "shards.reserved", "default shard 0"),
        (([0, 1], [0, 1], 0), {"reserved": [1, 4]}, "shards.reserved", "shard 4"),
        (([0, 1, 2], [0, 1], 2), {"reserved": [0, 1]}, "shards.reserved", "no unreserved writable shard"),
        (([0, 1], [0, 1], 0), {"residency_map": {"": 0}}, "shards.residency", "blank key"),
        (([0, 1], [0, 1], 0), {"residency_map": {"  ": 1}}, "shards.residency", "blank key"),
        (([0, 1], [0, 1], 0), {"residency_map": {"eu": 3}}, "shards.residency.eu", "not in shards.readable"),
        (([0, 1], [0, 1], 0), {"residency_map": {"eu": -1}}, "shards.residency.eu", "not a shard number"),
        (([0, 70000], [0], 0), {}, "shards.readable", "70000 is not a shard number"),
        (([0], [0], True), {}, "shards.default", "not a shard number"),
        (("01", [0], 0), {}, "shards.readable", "expected a list"),
    ],
)
def test_every_boot_time_refusal_is_one_line_naming_its_key(args, kwargs, key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ShardRouter(*args, **kwargs)
    text = str(caught.value)
    assert text.split(" ")[0].rstrip(":") == key, text
    assert reason in text and "\n" not in text, text


def test_an_empty_writable_set_is_a_full_drain_that_refuses_every_start(caplog) -> None:
    caplog.set_level("WARNING", logger="harvest.shard")
    router = ShardRouter([0, 1, 2], [], 0, residency_map={"eu": 1}, reserved=[2])
    built = [r.getMessage() for r in caplog.records]
    assert router.writable == () and router.topology()["writable_shards"] == []
    assert len(built) == 1 and "fully drained" in built[0], built
    drained = "no shard is accepting new workflows right now: retry later"
    for call in (
        lambda: router.pick_for_new_workflow("order", "o-1"),
        lambda: router.place("order", "o-1"),
        lambda: router.place("order", None),
        lambda: router.place("order", "o-1", shard_id=0),
        lambda: router.place("order", None, shard_id=2),
        lambda: router.place("order", "o-1", residency_key="eu"),
    ):
        with pytest.raises(InvalidArgument) as caught:
            call()
        assert str(caught.value).startswith(drained) and "\n" not in str(caught.value), caught.value
        assert "0" not in str(caught.value) and "eu" not in str(caught.value)  # terse: no shard set, no keys
    # The pin's own refusals still come first, each its one line.
    with pytest.raises(InvalidArgument, match="unknown residency_key 'us'"):
        router.place("order", "o-1", residency_key="us")
    with pytest.raises(InvalidArgument, match="shard_id 9 is not a shard of this deployment"):
        router.place("order", "o-1", shard_id=9)
    with pytest.raises(InvalidArgument, match="mutually exclusive"):
        router.place("order", "o-1", shard_id=0, residency_key="eu")
    assert uuid.UUID(router.mint_workflow_id("order", 0))  # nothing hashes anywhere: a plain uuid4


def test_a_full_drain_still_refuses_a_bad_reserved_or_residency_entry() -> None:
    with pytest.raises(ConfigError, match=r"^shards\.reserved names the default shard 0"):
        ShardRouter([0, 1], [], 0, reserved=[0])
    with pytest.raises(ConfigError, match=r"^shards\.residency\.eu = 3 names a shard that is not in"):
        ShardRouter([0, 1], [], 0, residency_map={"eu": 3})


def test_a_residency_target_that_is_readable_but_not_writable_is_accepted_with_a_warning(caplog) -> None:
    router = ShardRouter([0, 1], [0], 0, residency_map={"eu": 1})
    assert router.residency_map == {"eu": 1}
    assert any("shards.residency.eu" in r.getMessage() for r in caplog.records)


def test_single_is_one_database_on_shard_0() -> None:
    router = ShardRouter.single()
    assert (router.readable, router.writable, router.default, router.reserved) == ((0,), (0,), 0, frozenset())
    assert router.place("wf", "any") == 0
    assert ShardRouter.single(4).pick_for_new_workflow("wf", "x") == 4


def test_route_follows_the_id() -> None:
    router = ShardRouter([0, 1], [0, 1], 0)
    execution_id = uuid.UUID("0102" + uuid.uuid4().hex[4:])
    assert router.route(execution_id) == shard_of(str(execution_id)) == 258
    with pytest.raises(ValueError):
        shard_of("not-a-uuid")


def test_topology_is_sorted_and_byte_stable() -> None:
    a = ShardRouter([1, 0, 2], [2, 0], 0, residency_map={"us": 2, "eu": 0}, reserved=[2])
    b = ShardRouter((0, 2, 1, 1), {0, 2}, 0, residency_map={"eu": 0, "us": 2}, reserved={2})
    assert json.dumps(a.topology()) == json.dumps(b.topology())
    assert a.topology() == {
        "default_shard": 0,
        "readable_shards": [0, 1, 2],
        "reserved_shards": [2],
        "residency_map": {"eu": 0, "us": 2},
        "shard_forwards": {},
        "writable_shards": [0, 2],
    }
    assert list(a.topology()) == sorted(a.topology())
    assert a == b


def test_a_minted_workflow_id_hashes_to_the_pinned_shard() -> None:
    router = ShardRouter([0, 1, 2], [0, 1, 2], 0, reserved=[2])
    for shard in (0, 1):
        minted = router.mint_workflow_id("order", shard)
        assert router.pick_for_new_workflow("order", minted) == shard
    uuid.UUID(router.mint_workflow_id("order", 2))  # a cell: no id hashes there, a plain uuid


def test_a_distributed_child_stays_on_its_parents_shard_during_a_full_drain(caplog) -> None:
    from harvest.runtime.children import ChildPlacement
    from harvest.shard.children import place_child

    router = ShardRouter([0, 1, 2], [], 0)
    parent = "0002" + str(uuid.uuid4())[4:]  # a parent on shard 2, not the default shard
    assert shard_of(parent) == 2
    command = {"workflow_name": "invoice", "seq": 3, "placement": ChildPlacement.DISTRIBUTED.as_command()}
    caplog.clear()
    caplog.set_level("WARNING", logger="harvest.shard.children")
    assert place_child(router, (0, 1), 2, parent, command) == 2  # no pool for 2 needed: it is the parent's
    warned = [r.getMessage() for r in caplog.records if r.name == "harvest.shard.children"]
    assert len(warned) == 1 and "'invoice'" in warned[0] and parent in warned[0] and "shard 2" in warned[0]
    # A pinned child is a start like any other: refused during the drain.
    pinned = {**command, "placement": ChildPlacement.shard(1).as_command()}
    with pytest.raises(InvalidArgument, match="no shard is accepting new workflows"):
        place_child(router, (0, 1, 2), 2, parent, pinned)


def test_distributed_children_spread_over_the_unreserved_writable_shards_only() -> None:
    """A reserved shard is a tenant cell: only a pin or a residency key places a run there, and
    a distributed child is neither. 300 children of parents on several shards land on every
    writable unreserved shard, none on the cell, none on a shard that is not writable; the same
    child (parent, seq) lands on the same shard each time its decision is made again."""
    from harvest.runtime.children import ChildPlacement
    from harvest.shard.children import place_child

    router = ShardRouter([0, 1, 2, 3], [0, 1, 2], 0, reserved=[2])
    command = {"workflow_name": "invoice", "placement": ChildPlacement.DISTRIBUTED.as_command()}
    landed: dict[int, int] = {}
    for n in range(100):
        for parent_shard in (0, 1, 3):
            parent = f"{parent_shard:04x}" + str(uuid.uuid4())[4:]
            child = {**command, "seq": n}
            shard = place_child(router, (0, 1, 2, 3), parent_shard, parent, child)
            assert place_child(router, (0, 1, 2, 3), parent_shard, parent, child) == shard
            landed[shard] = landed.get(shard, 0) + 1
    assert set(landed) == {0, 1}, landed  # not 2 (reserved), not 3 (readable only)
    assert min(landed.values()) > 100, landed  # (rendezvous over two shards: about 150 each)
