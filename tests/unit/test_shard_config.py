"""[shards] in harvest.toml and HARVEST_SHARDS__* variables (harvest.config), and the router
and URLs they make: no [shards] is one database on shard 0 (today's behaviour); a variable
adds or overrides one shard's URL or one residency key; bad keys and values stop the boot."""

from __future__ import annotations

from pathlib import Path

import pytest

from harvest.config import load_config, shard_urls, shards_configured
from harvest.core.errors import ConfigError
from harvest.shard import ShardRouter

TOML = """
database_url = "postgresql://app@db0/harvest"

[shards]
default = 0
readable = [0, 1, 2]
writable = [0, 1]
reserved = [1]

[shards.urls]
"1" = "postgresql://app@db1/harvest"

[shards.residency]
eu = 0
cell-a = 1
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "harvest.toml"
    path.write_text(text)
    return path


def test_no_shards_section_is_one_database_on_shard_0(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, 'database_url = "postgresql://app@db0/h"\n'), env={})
    assert ShardRouter.from_config(config) == ShardRouter.single(0)
    assert shard_urls(config, config.get("database_url")) == {0: "postgresql://app@db0/h"}
    assert shard_urls(load_config(None, env={}), None) == {}


def test_the_file_declares_the_router_and_variables_add_urls_and_keys(tmp_path: Path) -> None:
    env = {
        "HARVEST_SHARDS__URLS__2": "postgresql://app:secret@db2/harvest",
        "HARVEST_SHARDS__URLS__1": "postgresql://app:other@db1b/harvest",
        "HARVEST_SHARDS__RESIDENCY__US": "2",
    }
    config = load_config(write(tmp_path, TOML), env=env)
    router = ShardRouter.from_config(config)
    assert router.topology() == {
        "default_shard": 0,
        "readable_shards": [0, 1, 2],
        "reserved_shards": [1],
        "residency_map": {"cell-a": 1, "eu": 0, "us": 2},
        "shard_forwards": {},
        "writable_shards": [0, 1],
    }
    assert shard_urls(config, config.get("database_url")) == {
        0: "postgresql://app@db0/harvest",
        1: "postgresql://app:other@db1b/harvest",  # the variable wins over the file, per shard
        2: "postgresql://app:secret@db2/harvest",
    }
    assert "HARVEST_SHARDS__URLS__2" in config.setting("shards.urls").source


def test_readable_defaults_to_every_shard_with_a_url_and_writable_to_readable() -> None:
    config = load_config(
        None, env={"HARVEST_SHARDS__URLS__1": "postgresql://a@b/c", "HARVEST_SHARDS__URLS__3": "x"}
    )
    router = ShardRouter.from_config(config)
    assert (router.readable, router.writable, router.default) == ((0, 1, 3), (0, 1, 3), 0)
    lists = load_config(None, env={"HARVEST_SHARDS__READABLE": "0, 1", "HARVEST_SHARDS__WRITABLE": "1"})
    assert ShardRouter.from_config(lists).writable == (1,)


def test_an_explicitly_empty_writable_in_the_file_is_a_full_drain(tmp_path: Path, caplog) -> None:
    path = write(tmp_path, "[shards]\nreadable = [0, 1]\nwritable = []\n")
    router = ShardRouter.from_config(load_config(path, env={}))
    assert (router.readable, router.writable) == ((0, 1), ())
    assert any("fully drained" in r.getMessage() for r in caplog.records)
    # An empty variable unsets the key (as for every key): every readable shard is writable again.
    cleared = load_config(path, env={"HARVEST_SHARDS__WRITABLE": ""})
    assert ShardRouter.from_config(cleared).writable == (0, 1)
    assert shards_configured(load_config(write(tmp_path, "[shards]\nwritable = []\n"), env={}))
    # Other shard lists keep "empty means not set".
    other = load_config(write(tmp_path, "[shards]\nreadable = []\nwritable = [0]\n"), env={})
    assert ShardRouter.from_config(other).readable == (0,)


def test_shards_urls_0_replaces_database_url_for_shard_0() -> None:
    config = load_config(None, env={"HARVEST_SHARDS__URLS__0": "postgresql://a@s0/c"})
    assert shard_urls(config, "postgresql://a@main/c") == {0: "postgresql://a@s0/c"}


@pytest.mark.parametrize(
    ("text", "env", "needle"),
    [
        ("[shards]\nreadble = [0]\n", {}, "unknown config key 'shards.readble'"),
        ("[shards.colours]\nred = 1\n", {}, "unknown config key 'shards.colours'"),
        ("", {"HARVEST_SHARDS__READBLE": "0"}, "unknown setting HARVEST_SHARDS__READBLE"),
        ("[shards]\nreadable = [0, 70000]\n", {}, "shards.readable (from"),
        ('[shards]\nreadable = ["a"]\n', {}, "'a' is not a shard number"),
        ("", {"HARVEST_SHARDS__WRITABLE": "0,x"}, "shards.writable (from HARVEST_SHARDS__WRITABLE)"),
        ("[shards]\ndefault = 70000\n", {}, "shards.default = 70000"),
        ('[shards.urls]\nx = "postgresql://a@b/c"\n', {}, "shards.urls.x"),
        (
            "",
            {"HARVEST_SHARDS__URLS__ONE": "postgresql://a@b/c"},
            "shards.urls.one (from HARVEST_SHARDS__URLS__ONE)",
        ),
        ('[shards.urls]\n"1" = ""\n', {}, "shards.urls.1"),
        ('[shards.residency]\neu = "zero"\n', {}, "shards.residency.eu"),
        (
            "",
            {"HARVEST_SHARDS__RESIDENCY__EU": "x"},
            "shards.residency.eu (from HARVEST_SHARDS__RESIDENCY__EU)",
        ),
        ("[shards]\nurls = 3\n", {}, "shards.urls"),
    ],
)
def test_a_bad_shards_key_or_value_stops_the_boot_naming_it(
    tmp_path: Path, text: str, env: dict, needle: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), env=env)
    assert needle in str(caught.value) and "\n" not in str(caught.value)
    if "unknown" in needle:
        assert "shards.urls.<N>" in str(caught.value) or "HARVEST_SHARDS__URLS__<N>" in str(caught.value)


def test_a_router_refusal_names_the_key_from_the_config(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "[shards]\nreadable = [0, 1]\nreserved = [0]\n"), env={})
    with pytest.raises(ConfigError, match=r"^shards\.reserved names the default shard 0"):
        ShardRouter.from_config(config)
    with pytest.raises(ConfigError, match=r"^shards\.residency \(from .*\) has a blank key"):
        load_config(write(tmp_path, '[shards.residency]\n"" = 0\n'), env={})


def test_shards_forwards_from_the_file_and_a_variable_route_a_retired_shards_ids(tmp_path: Path) -> None:
    text = TOML + '\n[shards.forwards]\n"3" = 0\n'
    text = text.replace("readable = [0, 1, 2]", "readable = [0, 1, 2, 4]")
    config = load_config(write(tmp_path, text), env={"HARVEST_SHARDS__FORWARDS__4": "2"})
    router = ShardRouter.from_config(config)
    assert router.topology()["shard_forwards"] == {"3": 0, "4": 2}
    assert router.route("00030000-0000-4000-8000-000000000001") == 0
    with pytest.raises(ConfigError) as caught:
        load_config(None, env={"HARVEST_SHARDS__FORWARDS__X": "0"})
    assert "shards.forwards.X" in str(caught.value) or "shards.forwards.x" in str(caught.value)


def test_the_known_keys_and_variables_name_each_tables_placeholder_alike() -> None:
    """An unknown key's error lists the known keys (toml) and variables (environment): a table's
    entries are named by a placeholder, the same one in both spellings."""
    from harvest.config.config import known_keys, known_variables

    keys, variables = known_keys().split(", "), known_variables().split(", ")
    for key, variable in (
        ("shards.urls.<N>", "HARVEST_SHARDS__URLS__<N>"),
        ("shards.forwards.<N>", "HARVEST_SHARDS__FORWARDS__<N>"),
        ("shards.residency.<KEY>", "HARVEST_SHARDS__RESIDENCY__<KEY>"),
        ("shards.default", "HARVEST_SHARDS__DEFAULT"),
        ("database_url", "HARVEST_DATABASE_URL"),
    ):
        assert key in keys and variable in variables, (key, variable)
    assert len(keys) == len(variables)
