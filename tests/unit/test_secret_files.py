"""Secrets from files: each secret variable ``HARVEST_X`` may be given as ``HARVEST_X_FILE``, the
path of a file holding it (a Kubernetes or Docker secret mounted as a file), less one trailing
newline; both set, or a file that cannot be read, is one ConfigError naming the variable and
the path and never the file's text (docs/operations.md#secrets-from-files)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from harvest.config.config import database_url, load_config
from harvest.core.errors import ConfigError
from harvest.db import pooler
from harvest.db.connection import resolve_dsn

SECRET = "postgresql://harvest:s3cr3t-pw@db.internal/harvest"


def _secret(tmp_path: Path, text: str, name: str = "secret") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_database_url_comes_from_its_file_less_one_newline(tmp_path: Path) -> None:
    env = {"HARVEST_DATABASE_URL_FILE": _secret(tmp_path, SECRET + "\n")}
    config = load_config(None, env)
    assert database_url(None, config, env) == SECRET


def test_only_one_trailing_newline_goes(tmp_path: Path) -> None:
    from harvest.core.secret_files import env_secret

    env = {"HARVEST_TOKEN_FILE": _secret(tmp_path, "hv_token\n\n")}
    assert env_secret("HARVEST_TOKEN", env) == "hv_token\n"
    env = {"HARVEST_TOKEN_FILE": _secret(tmp_path, "hv_token\r\n", "crlf")}
    assert env_secret("HARVEST_TOKEN", env) == "hv_token"
    env = {"HARVEST_TOKEN_FILE": _secret(tmp_path, "hv_token", "bare")}
    assert env_secret("HARVEST_TOKEN", env) == "hv_token"


def test_config_keys_that_hold_secrets_come_from_files(tmp_path: Path) -> None:
    """session_url and a shard's URL (its session URL too): the config key's variable + _FILE;
    the setting's source names the _FILE variable."""
    env = {
        "HARVEST_DATABASE_URL": "postgresql://db0/harvest",
        "HARVEST_SESSION_URL_FILE": _secret(tmp_path, "postgresql://u:pw@direct0/harvest\n", "s0"),
        "HARVEST_SHARDS__URLS__1_FILE": _secret(tmp_path, "postgresql://u:pw@db1/harvest\n", "u1"),
        "HARVEST_SHARDS__SESSION_URLS__1_FILE": _secret(tmp_path, "postgresql://u:pw@direct1/harvest", "s1"),
    }
    config = load_config(None, env)
    assert config.get("session_url") == "postgresql://u:pw@direct0/harvest"
    assert config.get("shards.urls") == {"1": "postgresql://u:pw@db1/harvest"}
    assert config.get("shards.session_urls") == {"1": "postgresql://u:pw@direct1/harvest"}
    setting = config.setting("session_url")
    assert setting is not None and setting.source == "HARVEST_SESSION_URL_FILE"


def test_the_python_api_reads_the_file_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Client() with no URL reads HARVEST_DATABASE_URL, so HARVEST_DATABASE_URL_FILE as well."""
    monkeypatch.delenv("HARVEST_DATABASE_URL", raising=False)
    monkeypatch.delenv("HARVEST_SESSION_URL", raising=False)
    monkeypatch.setenv("HARVEST_DATABASE_URL_FILE", _secret(tmp_path, SECRET + "\n"))
    assert resolve_dsn() == SECRET
    assert not pooler.is_pooled(SECRET)


@pytest.mark.parametrize(
    "variable",
    ["HARVEST_DATABASE_URL", "HARVEST_SESSION_URL", "HARVEST_SHARDS__URLS__2", "HARVEST_REDIS__URL"],
)
def test_both_spellings_set_is_one_error_naming_them(tmp_path: Path, variable: str) -> None:
    env = {variable: SECRET, variable + "_FILE": _secret(tmp_path, SECRET)}
    with pytest.raises(ConfigError) as caught:
        database_url(None, load_config(None, env), env)
    message = str(caught.value)
    assert f"{variable} and {variable}_FILE are both set" in message
    assert "s3cr3t" not in message


def test_an_unreadable_file_names_the_variable_and_the_path(tmp_path: Path) -> None:
    from harvest.core.secret_files import env_secret

    missing = str(tmp_path / "nothing-here")
    env = {"HARVEST_DATABASE_URL_FILE": missing}
    with pytest.raises(
        ConfigError, match=r"HARVEST_DATABASE_URL_FILE names '.*nothing-here', which cannot be read"
    ):
        load_config(None, env)
    directory = {"HARVEST_SHARDS__URLS__1_FILE": str(tmp_path)}
    with pytest.raises(ConfigError, match=r"HARVEST_SHARDS__URLS__1_FILE names .* which cannot be read"):
        load_config(None, directory)
    empty = {"HARVEST_TOKEN_FILE": _secret(tmp_path, "\n", "empty")}
    with pytest.raises(ConfigError, match=r"HARVEST_TOKEN_FILE names .* which is empty"):
        env_secret("HARVEST_TOKEN", empty)


def test_a_file_too_large_for_a_secret_is_an_error_not_a_hang(tmp_path: Path) -> None:
    from harvest.core.secret_files import MAX_SECRET_BYTES, env_secret

    big = {"HARVEST_TOKEN_FILE": _secret(tmp_path, "x" * (MAX_SECRET_BYTES + 1), "big")}
    with pytest.raises(ConfigError, match=r"HARVEST_TOKEN_FILE names .*big', which holds more than 64 KiB"):
        env_secret("HARVEST_TOKEN", big)
    # A device that never ends (a path to /dev/zero by mistake) reads one bound's worth, then stops.
    with pytest.raises(ConfigError, match=r"which holds more than 64 KiB"):
        env_secret("HARVEST_TOKEN", {"HARVEST_TOKEN_FILE": "/dev/zero"})
    at_bound = {"HARVEST_TOKEN_FILE": _secret(tmp_path, "y" * MAX_SECRET_BYTES, "at_bound")}
    assert env_secret("HARVEST_TOKEN", at_bound) == "y" * MAX_SECRET_BYTES


def test_an_error_about_a_secret_from_a_file_shows_no_secret(tmp_path: Path) -> None:
    """A value refused from a file: its error names the _FILE variable, not the file's text."""
    env = {"HARVEST_REDIS__URL_FILE": _secret(tmp_path, "http://u:s3cr3t@redis1/0\n")}
    with pytest.raises(ConfigError) as caught:
        load_config(None, env)
    assert "redis.url (from HARVEST_REDIS__URL_FILE) is not a Redis URL" in str(caught.value)
    assert "s3cr3t" not in str(caught.value)


def test_a_file_variable_of_no_secret_is_still_an_unknown_setting(tmp_path: Path) -> None:
    env = {"HARVEST_WORKER__QUEUES_FILE": _secret(tmp_path, "a,b")}
    with pytest.raises(ConfigError, match="unknown setting HARVEST_WORKER__QUEUES_FILE"):
        load_config(None, env)


def test_the_cli_token_comes_from_its_file_and_a_bad_one_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`harvest` over HTTP: HARVEST_TOKEN_FILE stands for HARVEST_TOKEN; a missing file exits 1
    (a ConfigError's code, as no database given) with one line naming the variable and the path."""
    from harvest.cli.main import main
    from harvest.cli.output import RootOptions, _token

    monkeypatch.delenv("HARVEST_TOKEN", raising=False)
    monkeypatch.setenv("HARVEST_TOKEN_FILE", _secret(tmp_path, "hv_abcdef\n"))
    assert _token(RootOptions(None, None, None)) == "hv_abcdef"
    for name in ("HARVEST_DATABASE_URL", "HARVEST_DATABASE_URL_FILE", "HARVEST_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARVEST_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("HARVEST_TOKEN_FILE", str(tmp_path / "gone"))
    result = CliRunner().invoke(main, ["workflow", "list"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: HARVEST_TOKEN_FILE names '")
    assert "gone', which cannot be read" in result.output
    assert len(result.output.strip().splitlines()) == 1
