"""Secrets read from files: ``HARVEST_X_FILE=/run/secrets/x`` stands for ``HARVEST_X``.

Kubernetes and Docker mount a secret as a file; a variable holding its path keeps the secret
out of the process' environment (``/proc/<pid>/environ``, ``docker inspect``) and out of the
manifests. Each variable that carries a secret (``SECRET_VARIABLES``, and each shard's
``HARVEST_SHARDS__URLS__<N>`` / ``HARVEST_SHARDS__SESSION_URLS__<N>``) may be given this way:
the file's text is the value, less one trailing newline (``echo`` and most editors add one).
The two spellings of one variable exclude each other, and a file that cannot be read stops the
process: each is one ConfigError naming the variable and the path, never the file's text.
docs/operations.md#secrets-from-files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from harvest.core.errors import ConfigError

FILE_SUFFIX = "_FILE"
# The variables whose value is a secret (a password in a URL, an API token).
SECRET_VARIABLES = frozenset(
    {
        "HARVEST_DATABASE_URL",
        "HARVEST_SESSION_URL",
        "HARVEST_REDIS__URL",
        "HARVEST_TOKEN",
        "HARVEST_DEV_DATABASE_URL",
        "HARVEST_BACKUP_SCRATCH_URL",
    }
)
# The largest secret file read: a URL or a token is far smaller, and a path naming a device or a
# log by mistake (/dev/zero, /dev/stdin) must stop the process with an error, not hang it.
MAX_SECRET_BYTES = 64 * 1024
# ... and the tables whose every entry is one (a shard's URL): the prefix of each entry's name.
SECRET_TABLES = ("HARVEST_SHARDS__URLS__", "HARVEST_SHARDS__SESSION_URLS__")


def is_secret(name: str) -> bool:
    """Whether the variable ``name`` carries a secret (and so may be given as ``name_FILE``)."""
    return name in SECRET_VARIABLES or any(
        name.startswith(prefix) and len(name) > len(prefix) for prefix in SECRET_TABLES
    )


def file_variable(name: str) -> str | None:
    """``HARVEST_X`` for ``HARVEST_X_FILE`` when ``HARVEST_X`` is a secret, else None."""
    if not name.endswith(FILE_SUFFIX):
        return None
    base = name[: -len(FILE_SUFFIX)]
    return base if is_secret(base) else None


def read_secret_file(variable: str, path: str) -> str:
    """The text of the file ``path`` that ``variable`` names, less one trailing newline; one
    ConfigError naming both when it cannot be read, or is empty (a secret is never empty)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise ConfigError(
            f"{variable} names {path!r}, which cannot be read ({exc.strerror or type(exc).__name__}): "
            "mount the secret there, or give its value another way"
        ) from None
    if len(data) > MAX_SECRET_BYTES:
        raise ConfigError(
            f"{variable} names {path!r}, which holds more than {MAX_SECRET_BYTES // 1024} KiB: "
            "a secret is a URL or a token; name the file that holds it"
        )
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ConfigError(f"{variable} names {path!r}, which is not UTF-8 text") from None
    text = text.removesuffix("\n").removesuffix("\r") if text.endswith("\n") else text
    if not text:
        raise ConfigError(f"{variable} names {path!r}, which is empty: write the secret there")
    return text


def env_secret(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The value of the variable ``name`` (None when unset or empty), or the text of the file its
    ``name_FILE`` names. Both set is a ConfigError naming the two (never a silent pick)."""
    env = os.environ if env is None else env
    value = env.get(name) or None
    path = env.get(name + FILE_SUFFIX) or None
    if path is None:
        return value
    if value is not None:
        raise ConfigError(f"{name} and {name}{FILE_SUFFIX} are both set: keep one (the file: unset {name})")
    return read_secret_file(name + FILE_SUFFIX, path)


def env_secret_or_none(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """:func:`env_secret`, None where it would raise: for redacting what may be in a message,
    which must not fail on a secret the command itself reports as unreadable."""
    try:
        return env_secret(name, env)
    except ConfigError:
        return None


def resolve_secret_files(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` with each secret's ``X_FILE`` replaced by ``X`` = the file's text, and for each
    such ``X`` where it came from (``"HARVEST_X_FILE"``), for the errors that name a source."""
    out = dict(env)
    sources: dict[str, str] = {}
    for name in sorted(env):
        base = file_variable(name)
        if base is None or not env[name]:
            if base is not None:
                del out[name]  # an empty HARVEST_X_FILE is unset, as an empty variable is
            continue
        out[base] = env_secret(base, env) or ""
        del out[name]
        sources[base] = name
    return out, sources
