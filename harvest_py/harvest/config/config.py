"""Process configuration: one ``harvest.toml`` plus ``HARVEST_*`` variables, and the process role.

Precedence, highest first: an explicit command-line flag, a ``HARVEST_*`` variable,
the config file, then the role (``HARVEST_ROLE`` = ``web`` | ``worker`` | ``combined``,
default ``combined``), then the built-in default. The file is the path given with
``--config``, else ``HARVEST_CONFIG``, else ``./harvest.toml`` when it exists.

A variable names a key with ``__`` between section and key: ``HARVEST_WORKER__QUEUES=a,b``
is ``[worker] queues = ["a", "b"]``. An empty variable unsets the key (it clears a list
set in the file). An unknown key, in the file or among the ``HARVEST_*`` variables,
stops the boot with its name and the known keys; so does a value of the wrong type,
an unknown role or an unknown ``retention.run_on``.

The role decides which runtimes a process runs:

==========  ======  =========  ====================================
role        worker  scheduler  retention (run_on = "scheduler")
==========  ======  =========  ====================================
web         off     off        off (runs where the scheduler runs)
worker      on      on         on
combined    on      on         on
==========  ======  =========  ====================================

``worker.enabled`` and ``scheduler.enabled`` are unset by default and follow the role;
an explicit value wins, with one warning per switch that contradicts the role.
``retention.run_on = "all"`` runs the janitor on every process, whatever its role.
"""

from __future__ import annotations

import difflib
import logging
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from harvest.core.durations import plain_number
from harvest.core.errors import ConfigError, InvalidArgument
from harvest.core.ids import MAX_SHARD, shard_number
from harvest.core.secret_files import env_secret, env_secret_or_none, resolve_secret_files
from harvest.worker.event_loop import EVENT_LOOPS
from harvest.worker.options import WorkerOptions, parse_shard_assignments, tunables

log = logging.getLogger("harvest.config")

ENV_PREFIX = "HARVEST_"
CONFIG_ENV = "HARVEST_CONFIG"
DEFAULT_FILE = "harvest.toml"
ROLES = ("web", "worker", "combined")
RUN_ON = ("scheduler", "all")
# HARVEST_* variables that are not config keys (read elsewhere, or by the tests).
NOT_CONFIG = frozenset(
    {
        "HARVEST_DATABASE_URL",
        "HARVEST_DEV_DATABASE_URL",
        "HARVEST_TEST_DSN",
        "HARVEST_SQL_DIR",
        "HARVEST_CONFIG",
        # the CLI's HTTP transport (harvest/cli/http.py): never a worker's concern
        "HARVEST_URL",
        "HARVEST_TOKEN",
        "HARVEST_HTTP_TIMEOUT_SECS",
        # harvest backup verify --scratch-url (harvest/cli/backup.py)
        "HARVEST_BACKUP_SCRATCH_URL",
    }
)
# The test suite's own switches: set for `make test`, so in every process a test starts; passed
# over like NOT_CONFIG but not listed to users in the unknown-setting error.
TEST_SWITCHES = frozenset({"HARVEST_UPDATE_SCREENSHOTS", "HARVEST_TEST_CLI_FORK", "HARVEST_UPGRADE_FIXTURE"})


class ShardList(list[int]):
    """The kind of a config key that lists shard numbers (``shards.readable``, ...)."""


class ShardUrls(dict[int, str]):
    """The kind of ``shards.urls``: shard number (a string key in TOML) -> database URL."""


class ShardSessionUrls(dict[int, str]):
    """The kind of ``shards.session_urls``: shard number -> the session URL (the database directly,
    or a session-mode pool) of that shard's ``shards.urls`` entry when it goes through a
    transaction-mode pooler (harvest/db/pooler.py): ``session_url`` for a shard."""


class ShardResidency(dict[str, int]):
    """The kind of ``shards.residency``: residency key -> shard number."""


class ShardAssignments(str):
    """The kind of ``worker.shard_assignments``: ``"auto"`` or a list of shard numbers."""


class ShardForwards(dict[int, int]):
    """The kind of ``shards.forwards``: a decommissioned shard number -> the shard its ids route to."""


TABLES = (ShardUrls, ShardSessionUrls, ShardResidency, ShardForwards)

# The numeric keys are the WorkerOptions fields that name a config key (worker/options.py
# defines each one's name, default and bounds once): key -> that field.
WORKER_KEYS = {t.config: t for t in tunables() if t.config}
# key -> type: str, bool, int, float, list (of str)
SCHEMA: dict[tuple[str, ...], type] = {
    ("role",): str,
    ("database_url",): str,
    # The database reached directly (or through a session-mode pool) when database_url goes
    # through a pooler in transaction mode (harvest/db/pooler.py, docs/operations.md).
    ("session_url",): str,
    ("worker", "enabled"): bool,
    ("worker", "queues"): list,
    ("worker", "shard_assignments"): ShardAssignments,
    # `harvest worker` tunes the process' cyclic GC unless false (harvest/worker/collector.py).
    ("worker", "gc_tuning"): bool,
    # `harvest worker`'s event loop: auto (uvloop when installed), asyncio or uvloop
    # (harvest/worker/event_loop.py).
    ("worker", "event_loop"): str,
    # The worker's rebalance-resume scanner (WorkerOptions.rebalance_resume_enabled).
    ("worker", "rebalance_resume_enabled"): bool,
    **{key: int if t.integer else float for key, t in WORKER_KEYS.items() if key[0] == "worker"},
    ("scheduler", "enabled"): bool,
    ("retention", "enabled"): bool,
    ("retention", "run_on"): str,
    # The janitor's age for the audit log (WorkerOptions.audit_max_age): unset, never pruned.
    ("retention", "audit_max_age"): str,
    **{key: int if t.integer else float for key, t in WORKER_KEYS.items() if key[0] == "retention"},
    ("shards", "default"): int,
    ("shards", "readable"): ShardList,
    ("shards", "writable"): ShardList,
    ("shards", "reserved"): ShardList,
    ("shards", "urls"): ShardUrls,
    ("shards", "session_urls"): ShardSessionUrls,
    ("shards", "residency"): ShardResidency,
    ("shards", "forwards"): ShardForwards,
    ("shards", "cli_timeout"): float,
    ("profile",): str,
    ("web", "host"): str,
    ("web", "port"): int,
    # The management API's pool (harvest serve, management_app): at most this many connections
    # per shard, for a server whose max_connections is small (a managed platform's).
    ("web", "pool_size"): int,
    ("readiness", "require_shard_readiness"): bool,
    # `harvest migrate run`'s bound on a migration's lock wait (harvest/db/migrate.py): seconds
    # a try, seconds in all.
    ("migrate", "lock_timeout"): float,
    ("migrate", "lock_wait"): float,
    # The optional Redis dispatch (docs/redis-dispatch.md): unset, every worker stays on the
    # Postgres claim path.
    ("redis", "url"): str,
}
SECTIONS = frozenset(k[0] for k in SCHEMA if len(k) == 2)
# key -> (lowest, highest) allowed, inclusive, and its unit (WorkerOptions' bounds).
BOUNDS: dict[tuple[str, ...], tuple[float, float]] = {key: (t.low, t.high) for key, t in WORKER_KEYS.items()}
BOUNDS[("shards", "default")] = (0, MAX_SHARD)
UNITS: dict[tuple[str, ...], str] = {key: t.unit for key, t in WORKER_KEYS.items()}
UNITS[("shards", "default")] = ""
BOUNDS[("shards", "cli_timeout")] = (0.1, 600)
UNITS[("shards", "cli_timeout")] = " seconds"
BOUNDS[("migrate", "lock_timeout")] = (0, 3600)
UNITS[("migrate", "lock_timeout")] = " seconds (0: without limit)"
BOUNDS[("migrate", "lock_wait")] = (0, 86400)
UNITS[("migrate", "lock_wait")] = " seconds"
BOUNDS[("web", "port")] = (0, 65535)
UNITS[("web", "port")] = ""
BOUNDS[("web", "pool_size")] = (1, 1000)
UNITS[("web", "pool_size")] = " connections"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def dotted(key: tuple[str, ...]) -> str:
    return ".".join(key)


def env_name(key: tuple[str, ...]) -> str:
    return ENV_PREFIX + "__".join(part.upper() for part in key)


def _table_placeholder(key: tuple[str, ...]) -> str:
    """What stands for a table's entry after its key ("N": a shard number, "KEY": a residency
    key; "" for a plain value): one rule, so the toml and the environment spellings agree."""
    kind = SCHEMA[key]
    if kind in (ShardUrls, ShardSessionUrls, ShardForwards):
        return "<N>"
    return "<KEY>" if kind is ShardResidency else ""


def known_keys() -> str:
    return ", ".join(dotted(k) + (f".{p}" if (p := _table_placeholder(k)) else "") for k in SCHEMA)


def known_variables() -> str:
    return ", ".join(env_name(k) + (f"__{p}" if (p := _table_placeholder(k)) else "") for k in SCHEMA)


@dataclass(frozen=True)
class Setting:
    value: Any
    source: str  # "HARVEST_WORKER__QUEUES", "harvest.toml", "--queue", ...


@dataclass
class Config:
    """The merged settings. ``get`` answers a value or ``None`` (not set)."""

    settings: dict[tuple[str, ...], Setting] = field(default_factory=dict)
    path: Path | None = None

    def get(self, key: str | tuple[str, ...], default: Any = None) -> Any:
        setting = self.settings.get(_key(key))
        return default if setting is None or setting.value is None else setting.value

    def setting(self, key: str | tuple[str, ...]) -> Setting | None:
        setting = self.settings.get(_key(key))
        return None if setting is None or setting.value is None else setting

    def with_overrides(self, overrides: Mapping[str, tuple[Any, str]]) -> Config:
        """A copy with explicit flags applied (``{"worker.queues": (["a"], "--queue")}``);
        a ``None`` value means the flag was not given."""
        merged = dict(self.settings)
        for key, (value, source) in overrides.items():
            if value is not None:
                merged[_key(key)] = Setting(_coerce(_key(key), value, source), source)
        return Config(merged, self.path)


def _key(key: str | tuple[str, ...]) -> tuple[str, ...]:
    out = tuple(key.split(".")) if isinstance(key, str) else tuple(key)
    if out not in SCHEMA:
        raise KeyError(f"unknown config key {dotted(out)!r}")
    return out


def _coerce(key: tuple[str, ...], value: Any, source: str) -> Any:
    """Check (file, flag) or parse (a variable's string) a value against the schema."""
    kind = SCHEMA[key]
    where = f"{dotted(key)} (from {source})"
    from_env = isinstance(value, str) and source.startswith(ENV_PREFIX)
    if from_env and value.strip() == "":
        return None  # an empty variable unsets the key
    if kind is ShardAssignments:
        try:
            return parse_shard_assignments(value, where)
        except InvalidArgument as exc:
            raise ConfigError(str(exc)) from None
    if kind is ShardList:
        if isinstance(value, str):
            parts = [part.strip() for part in value.split(",") if part.strip()]
            value = [int(p) if p.isdigit() else p for p in parts]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list of shard numbers, got {value!r}")
        for v in value:
            shard_number(v, where, ConfigError)
        if key == ("shards", "writable") and not from_env:
            return list(value)  # an explicit empty list in the file is a full drain
        return list(value) or None  # an empty list means "not set"
    if kind in TABLES:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a [{dotted(key)}] table, got {value!r}")
        return kind({k: _table_entry(key, k, v, source) for k, v in value.items()}) or None
    if kind is list:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: expected a list of names, got {value!r}")
        return list(value) or None  # an empty list means "not set"
    if kind is bool:
        if from_env:
            lowered = value.strip().lower()
            if lowered in _TRUE | _FALSE:
                return lowered in _TRUE
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if kind in (int, float):
        if from_env:
            try:
                return _in_bounds(key, kind(value.strip()), source)
            except ValueError:
                pass
        elif (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and (kind is float or isinstance(value, int))
        ):
            return _in_bounds(key, kind(value), source)
        raise ConfigError(f"{where}: expected {'an integer' if kind is int else 'a number'}, got {value!r}")
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def _table_entry(key: tuple[str, ...], name: str, value: Any, source: str) -> Any:
    """One entry of ``shards.urls`` (shard number -> URL) or ``shards.residency`` (key -> shard)."""
    where = f"{dotted(key)}.{name} (from {source})"
    from_env = isinstance(value, str) and source.startswith(ENV_PREFIX)
    if SCHEMA[key] in (ShardUrls, ShardSessionUrls):
        if not name.isdigit() or int(name) > MAX_SHARD:
            raise ConfigError(f"{where}: {name!r} is not a shard number 0..{MAX_SHARD}")
        if not isinstance(value, str) or not value.strip():
            what = "database" if SCHEMA[key] is ShardUrls else "session (direct or session-mode pool's)"
            raise ConfigError(f"{where}: expected the shard's {what} URL")
        return value
    if SCHEMA[key] is ShardForwards:
        if not name.isdigit() or int(name) > MAX_SHARD:
            raise ConfigError(f"{where}: {name!r} is not a shard number 0..{MAX_SHARD}")
        if from_env and value.strip().isdigit():
            value = int(value.strip())
        return shard_number(value, where, ConfigError)
    if not name.strip():
        raise ConfigError(f"{dotted(key)} (from {source}) has a blank key: name each residency key")
    if from_env and value.strip().isdigit():
        value = int(value.strip())
    return shard_number(value, where, ConfigError)


def _in_bounds(key: tuple[str, ...], value: float, source: str) -> int | float:
    """The value if it lies within BOUNDS[key] (NaN and infinities never do), else one line."""
    low, high = BOUNDS[key]
    if not low <= value <= high:  # False for NaN too
        raise ConfigError(
            f"{dotted(key)} = {value!r} (from {source}) is out of range: allowed "
            f"{plain_number(low)} to {plain_number(high)}{UNITS[key]}"
        )
    return value


def _suggest(name: str, candidates: Iterable[str], prefix: str = "") -> str:
    """A near name, compared without the ``prefix`` every candidate shares: HARVEST_ alone made
    HARVEST_KEY_K1 "close" to HARVEST_ROLE."""
    by_rest = {c.removeprefix(prefix): c for c in candidates}
    close = difflib.get_close_matches(name.removeprefix(prefix), list(by_rest), n=1, cutoff=0.6)
    return f"; did you mean {by_rest[close[0]]}?" if close else ""


def config_path(explicit: str | os.PathLike[str] | None, env: Mapping[str, str]) -> Path | None:
    """--config, else HARVEST_CONFIG, else ./harvest.toml if present; a named file must exist."""
    if explicit:
        path, what = Path(explicit), "--config"
    elif env.get(CONFIG_ENV):
        path, what = Path(env[CONFIG_ENV]), CONFIG_ENV
    else:
        path = Path(DEFAULT_FILE)
        return path if path.is_file() else None
    if not path.is_file():
        raise ConfigError(f"{what} names {str(path)!r}, which is not a file")
    return path


def _from_file(path: Path) -> dict[tuple[str, ...], Setting]:
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    return _from_data(data, str(path))


def _from_data(data: Mapping[str, Any], source: str) -> dict[tuple[str, ...], Setting]:
    """The file's keys from a mapping (the parsed TOML, or Django's ``settings.HARVEST``)."""
    out: dict[tuple[str, ...], Setting] = {}
    for name, value in data.items():
        if name in SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"{name} (from {source}): expected a [{name}] table")
            for inner, inner_value in value.items():
                key = (name, inner)
                if key not in SCHEMA:
                    raise ConfigError(
                        f"unknown config key {dotted(key)!r} in {source}"
                        f"{_suggest(dotted(key), map(dotted, SCHEMA))}; known keys: {known_keys()}"
                    )
                out[key] = Setting(_coerce(key, inner_value, source), source)
        elif (name,) in SCHEMA:
            out[(name,)] = Setting(_coerce((name,), value, source), source)
        else:
            raise ConfigError(
                f"unknown config key {name!r} in {source}"
                f"{_suggest(name, map(dotted, SCHEMA))}; known keys: {known_keys()}"
            )
    return out


def _from_env(env: Mapping[str, str]) -> dict[tuple[str, ...], Setting]:
    by_name = {env_name(k): k for k in SCHEMA}
    tables = {env_name(k) + "__": k for k in SCHEMA if SCHEMA[k] in TABLES}
    out: dict[tuple[str, ...], Setting] = {}
    # A secret's HARVEST_X_FILE stands for HARVEST_X (harvest.core.secret_files); a setting from
    # one names the _FILE variable as its source.
    env, from_files = resolve_secret_files(env)
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name in NOT_CONFIG or name in TEST_SWITCHES:
            continue
        source = from_files.get(name, name)
        table = next((k for prefix, k in tables.items() if name.startswith(prefix)), None)
        if table is not None:
            # HARVEST_SHARDS__URLS__1, HARVEST_SHARDS__RESIDENCY__EU: one entry of a table
            # (a residency key is lower-cased); an empty variable unsets the entry.
            entry = name[len(env_name(table)) + 2 :].lower()
            merged = dict(out[table].value) if table in out else {}
            if env[name].strip() == "":
                merged.pop(entry, None)
            else:
                merged[entry] = _table_entry(table, entry, env[name], source)
            sources = (out[table].source + ", " if table in out else "") + source
            out[table] = Setting(SCHEMA[table](merged), sources)
            continue
        key = by_name.get(name)
        if key is None:
            raise ConfigError(
                f"unknown setting {name}{_suggest(name, by_name, ENV_PREFIX)}; known variables: "
                f"{known_variables()} (and {', '.join(sorted(NOT_CONFIG))})"
            )
        out[key] = Setting(_coerce(key, env[name], source), source)
    return out


def load_config(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read the config file and the ``HARVEST_*`` variables (variables win); validate every key."""
    env = os.environ if env is None else env
    file_path = config_path(path, env)
    return _with_env(_from_file(file_path) if file_path else {}, file_path, env)


def config_from_mapping(data: Mapping[str, Any], source: str, env: Mapping[str, str] | None = None) -> Config:
    """:func:`load_config` with the file's keys given as a mapping instead of a file
    (``{"database_url": ..., "worker": {"concurrency": 8}}``, Django's ``settings.HARVEST``):
    no file is read, the ``HARVEST_*`` variables win over it, and errors name ``source``."""
    return _with_env(_from_data(data, source), None, os.environ if env is None else env)


def _with_env(
    settings: dict[tuple[str, ...], Setting], file_path: Path | None, env: Mapping[str, str]
) -> Config:
    """The file's settings with the ``HARVEST_*`` variables over them, the role checked."""
    for key, setting in _from_env(env).items():
        if SCHEMA[key] in TABLES and key in settings:
            # A table merges entry by entry: a variable adds or overrides one shard's URL (the
            # place for a password) and keeps the file's other entries.
            merged = {**settings[key].value, **setting.value}
            settings[key] = Setting(SCHEMA[key](merged), f"{settings[key].source}, {setting.source}")
        else:
            settings[key] = setting
    config = Config(settings, file_path)
    role = config.setting("role")
    if role and role.value not in ROLES:
        raise ConfigError(f"role {role.value!r} (from {role.source}) is not one of {', '.join(ROLES)}")
    run_on = config.setting("retention.run_on")
    if run_on and run_on.value not in RUN_ON:
        raise ConfigError(
            f"retention.run_on {run_on.value!r} (from {run_on.source}) is unknown; use {' or '.join(RUN_ON)}"
        )
    event_loop = config.setting("worker.event_loop")
    if event_loop and event_loop.value not in EVENT_LOOPS:
        raise ConfigError(
            f"worker.event_loop {event_loop.value!r} (from {event_loop.source}) is unknown; "
            f"use {', '.join(EVENT_LOOPS)}"
        )
    _check_redis(config)
    _check_session_urls(config)
    return config


def _check_session_urls(config: Config) -> None:
    """Each ``shards.session_urls`` entry pairs with the shard's url, under the same key: one for
    a shard with no url (in ``shards.urls``, or shard 0's ``database_url``) is refused, never
    left unused."""
    setting = config.setting("shards.session_urls")
    if setting is None:
        return
    urls = config.get("shards.urls") or {}
    for name in sorted(setting.value, key=int):
        if name not in urls and name != "0":
            raise ConfigError(
                f"shards.session_urls.{name} (from {setting.source}) is the session URL of shard {name}, "
                f"which has no url: give it under the same shard number as its url (shards.urls.{name}, "
                f"HARVEST_SHARDS__URLS__{name}), or remove it (shards.urls names "
                f"{', '.join(sorted(urls, key=int)) or 'no shard'})"
            )


def _check_redis(config: Config) -> None:
    """``redis.url``: a usable URL, the client library installed, and a single-shard deployment
    (docs/redis-dispatch.md); a configured URL is never silently ignored."""
    setting = config.setting("redis.url")
    if setting is None:
        return
    from harvest.db.redis_channel import check_url

    check_url(setting.value, f"redis.url (from {setting.source})")
    shards = set(config.get("shards.readable") or []) | set(config.get("shards.writable") or [])
    shards |= {int(k) for k in config.get("shards.urls") or {}}
    if len(shards) > 1:
        raise ConfigError(
            f"redis.url (from {setting.source}) is set and [shards] names {len(shards)} shards "
            f"({', '.join(map(str, sorted(shards)))}): Redis dispatch supports a single-shard deployment "
            "only; unset redis.url (every shard keeps the Postgres claim path) or run one shard"
        )


# -- the database URL, for every command -----------------------------------------------------------
DSN_ENV = "HARVEST_DATABASE_URL"


def database_url(
    explicit: str | None, config: Config, env: Mapping[str, str] | None = None, *, hint: str | None = None
) -> str:
    """The DSN every command uses: ``--database-url``, else ``HARVEST_DATABASE_URL``, else the
    config file's ``database_url``; never a silent default. ``hint``: where else a process that
    is no command takes it (``"database_url" in settings.HARVEST``), for the error."""
    env = os.environ if env is None else env
    dsn = explicit or env_secret(DSN_ENV, env) or config.get("database_url")
    if not dsn and hint is not None:
        raise ConfigError(f"no database given: set {DSN_ENV} (the place for a password), or {hint}")
    if not dsn:
        where = f" or database_url in {config.path}" if config.path else " or database_url in harvest.toml"
        raise ConfigError(
            f"no database given: set {DSN_ENV} (preferred: a command line is visible to ps)"
            f"{where}, or pass --database-url"
        )
    declare_session_url(config, dsn)
    return dsn


def declare_session_url(config: Config, dsn: str) -> str | None:
    """Declare ``dsn`` pooled with its session URL when the configuration gives one (harvest.db.pooler:
    its own sessions, LISTEN, the sampler's lock, migrations, go there) and answer it. ``dsn`` is
    shard N's url in ``shards.urls``: ``shards.session_urls.N``; any other URL is shard 0's
    (``database_url``): ``shards.session_urls.0`` or ``session_url``, which never pairs with
    another shard's url (it would migrate shard 0 for shard N)."""
    shard = next((int(k) for k, url in (config.get("shards.urls") or {}).items() if url == dsn), None)
    if shard is None:
        # Shard 0's session URL pairs with the configured database URL (or, none configured, the
        # URL given): an explicit --database-url naming another database must not send its
        # sessions (migrations, LISTEN) to the configured one's session URL.
        configured = {url for url in (env_secret_or_none(DSN_ENV), config.get("database_url")) if url}
        if configured and dsn not in configured:
            return None
        shard = 0
    per_shard = config.setting("shards.session_urls")
    session = per_shard.value.get(str(shard)) if per_shard else None
    top = config.setting("session_url")
    if shard == 0 and top is not None:
        if per_shard is not None and session is not None and session != top.value:
            raise ConfigError(
                f"session_url (from {top.source}) and shards.session_urls.0 (from {per_shard.source}) "
                "both give shard 0's session URL, and they differ: keep one"
            )
        session = top.value
    if session:  # the URL goes through a transaction-mode pooler
        from harvest.db import pooler  # (here: a command's --help loads no database driver)

        pooler.declare(dsn, session)
    return session


# -- shards ------------------------------------------------------------------------------------
def shard_urls(config: Config, database_url: str | None = None) -> dict[int, str]:
    """Each shard's database URL: ``shards.urls`` (``HARVEST_SHARDS__URLS__<N>`` win per
    shard), and shard 0 on ``database_url`` unless ``shards.urls`` names it. Without a
    ``[shards]`` section that is ``{0: database_url}``, today's single database. Each URL with
    a session URL (``shards.session_urls``) is declared pooled with it (:func:`declare_session_url`)."""
    urls = {int(k): v for k, v in (config.get("shards.urls") or {}).items()}
    if 0 not in urls and database_url:
        urls[0] = database_url
    for url in urls.values():  # each with its session URL (shards.session_urls.N)
        declare_session_url(config, url)
    return dict(sorted(urls.items()))


def shards_configured(config: Config) -> bool:
    """Whether the configuration says anything under ``shards`` (else: one database)."""
    if config.get("shards.default") is not None or config.get("shards.writable") is not None:
        return True
    return any(
        config.get(f"shards.{key}") for key in ("readable", "writable", "reserved", "urls", "residency")
    )


def _pool_arguments(config: Config, explicit: str | None) -> tuple[Any, dict[int, str]]:
    from harvest.shard.router import ShardRouter

    router = ShardRouter.from_config(config)
    try:
        dsn: str | None = database_url(explicit, config)
    except ConfigError:
        if not config.get("shards.urls"):
            raise
        dsn = None  # every shard may have its url in shards.urls
    return router, shard_urls(config, dsn)


def shard_pools(config: Config, database_url: str | None = None, **options: Any) -> Any:
    """A :class:`harvest.shard.ShardPools` for the shards ``config`` declares (the router from
    ``[shards]``, shard 0 on ``database_url`` / ``HARVEST_DATABASE_URL`` / the file's
    ``database_url`` unless ``shards.urls`` names it); ``options`` are ShardPools' own
    (``max_size``, ``acquire_timeout``). What ``Client(shards=...)`` and the CLI use."""
    from harvest.shard.pools import ShardPools

    router, urls = _pool_arguments(config, database_url)
    return ShardPools(router, urls, **options)


def async_shard_pools(config: Config, database_url: str | None = None, **options: Any) -> Any:
    """:func:`shard_pools` for asyncio: a :class:`harvest.shard.AsyncShardPools`
    (``AsyncClient.connect(shards=...)``, the worker)."""
    from harvest.shard.pools import AsyncShardPools

    router, urls = _pool_arguments(config, database_url)
    return AsyncShardPools(router, urls, **options)


# -- the Worker's options -------------------------------------------------------------------
def worker_options(config: Config, **fixed: Any) -> WorkerOptions:
    """One WorkerOptions from the merged config (flags > ``HARVEST_*`` > file, already applied by
    :meth:`Config.with_overrides`) for every key a WorkerOptions field names, plus ``fixed``
    (what the process decides itself: the polled queues, the role's switches); an unset key
    keeps the field's default."""
    values = {t.name: config.get(key) for key, t in WORKER_KEYS.items() if config.get(key) is not None}
    resume = config.get("worker.rebalance_resume_enabled")
    if resume is not None and "rebalance_resume_enabled" not in fixed:
        values["rebalance_resume_enabled"] = resume
    audit_max_age = config.get("retention.audit_max_age")
    if audit_max_age is not None and "audit_max_age" not in fixed:
        values["audit_max_age"] = audit_max_age
    assignments = config.get("worker.shard_assignments")
    if assignments is not None and "shard_assignments" not in fixed:
        values["shard_assignments"] = assignments
    return WorkerOptions(**values, **fixed)


# -- the process role -------------------------------------------------------------------------
ROLE_RUNS = {
    "web": {"worker": False, "scheduler": False},
    "worker": {"worker": True, "scheduler": True},
    "combined": {"worker": True, "scheduler": True},
}


@dataclass(frozen=True)
class Switch:
    name: str
    value: bool
    source: str  # explicit (<where>) | role <role> | default

    def line(self) -> str:
        return f"{self.name}={'true' if self.value else 'false'} (source: {self.source})"


@dataclass
class RuntimePlan:
    """Which runtimes this process runs, and why (see the module docstring)."""

    role: str
    role_source: str
    worker: Switch
    scheduler: Switch
    retention: Switch
    run_on: str
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    run_on_source: str = "default"

    @property
    def switches(self) -> list[Switch]:
        return [self.worker, self.scheduler, self.retention]

    def runs_anything(self) -> bool:
        return any(s.value for s in self.switches)

    def as_run(self, runs: Mapping[str, bool], source: str) -> RuntimePlan:
        """This plan as the process actually runs it: each switch named in ``runs`` (``worker``,
        ``scheduler``, ``retention``) whose value differs takes that value, with ``source``
        (a process that runs fewer runtimes than its role places must not report them)."""

        def run(switch: Switch, name: str) -> Switch:
            value = runs.get(name, switch.value)
            return switch if value == switch.value else Switch(switch.name, value, source)

        return replace(
            self,
            worker=run(self.worker, "worker"),
            scheduler=run(self.scheduler, "scheduler"),
            retention=run(self.retention, "retention"),
        )

    def line(self) -> str:
        """The startup line: the role, each switch and run_on, each with its value and source."""
        parts = [
            f"role={self.role} (source: {self.role_source})",
            *(s.line() for s in self.switches),
            f"retention.run_on={self.run_on} (source: {self.run_on_source})",
        ]
        return "harvest runtimes: " + "; ".join(parts)

    def log(self, logger: logging.Logger = log) -> None:
        """The startup line, then one warning per contradicting switch, then the notes."""
        logger.info("%s", self.line())
        for warning in self.warnings:
            logger.warning("%s", warning)
        for note in self.notes:
            logger.info("%s", note)


def runtime_plan(config: Config) -> RuntimePlan:
    role_setting = config.setting("role")
    role = role_setting.value if role_setting else "combined"
    if role not in ROLES:
        raise ConfigError(f"role {role!r} is not one of {', '.join(ROLES)}")
    role_source = f"explicit ({role_setting.source})" if role_setting else "default"
    warnings: list[str] = []

    def switch(name: str) -> Switch:
        by_role = ROLE_RUNS[role][name]
        explicit = config.setting(f"{name}.enabled")
        if explicit is None:
            return Switch(f"{name}.enabled", by_role, f"role {role}" if role_setting else "default")
        if explicit.value != by_role:
            warnings.append(
                f"{name}.enabled={str(explicit.value).lower()} (from {explicit.source}) overrides "
                f"role {role}, which turns the {name} {'on' if by_role else 'off'}"
            )
        return Switch(f"{name}.enabled", explicit.value, f"explicit ({explicit.source})")

    worker, scheduler = switch("worker"), switch("scheduler")
    run_on = config.get("retention.run_on", "scheduler")
    enabled = config.setting("retention.enabled")
    notes: list[str] = []
    if enabled is not None and not enabled.value:
        retention = Switch("retention.enabled", False, f"explicit ({enabled.source})")
    elif run_on == "all":
        where = cast(Setting, config.setting("retention.run_on"))  # run_on was read from it
        retention = Switch("retention.enabled", True, f"explicit (run_on=all from {where.source})")
    else:
        retention = Switch(
            "retention.enabled",
            scheduler.value,
            f"follows scheduler.enabled (run_on=scheduler): {scheduler.source}",
        )
        if not scheduler.value:
            notes.append(
                "retention runs where the scheduler runs (run_on=scheduler), not in this "
                "process, whose scheduler is off: a `harvest worker` runs both (nothing to do; "
                "set HARVEST_RETENTION__RUN_ON=all to run it here too)"
            )
            if not role_setting and scheduler.source.startswith("explicit"):
                warnings.append(
                    "the scheduler is off and no role is set: retention may run nowhere "
                    "unless another process runs the scheduler"
                )
    run_on_setting = config.setting("retention.run_on")
    run_on_source = f"explicit ({run_on_setting.source})" if run_on_setting else "default"
    return RuntimePlan(
        role, role_source, worker, scheduler, retention, run_on, warnings, notes, run_on_source
    )


# -- worker queues ----------------------------------------------------------------------------
def declared_queues(app: Any) -> list[str]:
    """The queues an App's workflows and activities use (code order: sorted), ``default`` if none."""
    return sorted(app.queues or {"default"})


def resolve_queues(app: Any, config: Config) -> tuple[list[str], list[str], str]:
    """``(polled, declared, source)``: config (or a flag) may narrow the declared queues, never add one."""
    declared = declared_queues(app)
    setting = config.setting("worker.queues")
    if setting is None:
        return declared, declared, "code"
    unknown = [q for q in setting.value if q not in declared]
    if unknown:
        raise ConfigError(
            f"worker.queues (from {setting.source}) names {', '.join(repr(q) for q in unknown)}, "
            f"which the App does not declare; declared queues: {', '.join(declared)} (the App declares "
            "a queue by using it: @workflow(queue=...), @activity(queue=...) or a DAG task's queue=)"
        )
    wanted = set(setting.value)
    return [q for q in declared if q in wanted], declared, f"explicit ({setting.source})"


def fleet_queues(sql: Any) -> list[str]:
    """The queues the fleet registered: every worker row, stopped and stale too (a queue whose
    workers all died is exactly the one coverage must report)."""
    return _registered(sql.list_workers(None, None, None))


def _registered(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    return sorted({q for row in rows for q in row.get("queues") or []})


def coverage_facts(sql: Any) -> tuple[list[str], list[dict[str, Any]]]:
    """What :func:`merge_coverage` reads from one database (a sync :class:`harvest.db.sqlapi.
    SqlApi`): the queues its workers registered, and its live workers (active and not stale,
    as list_workers(status active, health healthy) filters them), from one read of the rows."""
    rows = sql.list_workers(None, None, None)
    live = [r for r in rows if r["status"] == "active" and r["health"] == "healthy"]
    return _registered(rows), live


def queue_coverage(sql: Any, declared: Iterable[str] | None) -> dict[str, Any]:
    """Coverage of one database (``sql``: a :class:`harvest.db.sqlapi.SqlApi`), by the rule of
    :func:`merge_coverage`: ``{"declared_queues", "live_workers", "unpolled_declared_queues"}``
    (and ``registered_queues`` when ``declared`` is None, which leaves the list unknown)."""
    merged = merge_coverage({0: coverage_facts(sql)}, None if declared is None else list(declared))
    del merged["unpolled_by_shard"]  # one database: the list itself
    return merged


def merge_coverage(
    results: Mapping[int, tuple[list[str], list[dict[str, Any]]]],
    declared: list[str] | None,
    writable: Iterable[int] | None = None,
    unavailable: Iterable[int] = (),
) -> dict[str, Any]:
    """Queue coverage: the one rule that ``harvest queue coverage``, ``GET /admin/queue-coverage``
    and ``harvest preflight`` share. From each shard's (registered queues, live worker rows)
    (:func:`coverage_facts`): a queue is polled when each writable shard has a live worker on
    it (work on a shard no live worker polls waits; a drained shard takes no new run, so its
    gaps do not count). ``live_workers`` counts distinct workers over the shards;
    ``unpolled_by_shard`` names each counted shard's unpolled queues. ``writable`` None: every
    shard counts. The list is None (unknown, never "all covered") when nothing is declared or a
    counted shard is in ``unavailable``. ``declared`` None (no App: no runtime is installed)
    is unknown too: the queues the fleet registered miss a queue no worker ever registered, so
    they are reported (``registered_queues``, and ``live_workers`` and ``unpolled_by_shard``
    over them) but never stand in for the declared list."""
    registered = sorted({q for found, _ in results.values() for q in found})
    queues = registered if declared is None else declared
    counted = None if writable is None else set(writable)
    live: dict[str, set[str]] = {q: set() for q in queues}
    by_shard: dict[str, list[str]] = {}
    for s, (_, rows) in results.items():
        here: set[str] = set()
        for row in rows:
            for q in row.get("queues") or []:
                if q in live:
                    live[q].add(row["worker_id"])
                    here.add(q)
        if counted is None or s in counted:
            by_shard[str(s)] = [q for q in queues if q not in here]
    missed = any(counted is None or s in counted for s in unavailable)
    out: dict[str, Any] = {
        "declared_queues": declared,
        "live_workers": {q: len(ids) for q, ids in live.items()},
        "unpolled_declared_queues": None
        if not declared or missed
        else [q for q in declared if any(q in u for u in by_shard.values())],
        "unpolled_by_shard": by_shard,
    }
    if declared is None:
        out["registered_queues"] = registered
    return out
