"""`harvest worker module:attribute` (and `harvest dev`) name what is wrong with the target: a
misspelt attribute said "is not a harvest.App (found NoneType)", as if it existed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harvest.cli.worker import load_app
from harvest.core.errors import ConfigError


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "dx_shop.py").write_text(
        "from harvest import App, workflow\n"
        "@workflow\nasync def checkout(ctx) -> None: ...\n"
        "shop_app = App(workflows=[checkout])\n"
        "VERSION = '1'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "dx_shop"
    sys.modules.pop("dx_shop", None)


def test_a_misspelt_attribute_is_named_with_the_apps_the_module_has(shop: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_app(f"{shop}:shop_ap")
    assert str(err.value) == (
        "'dx_shop:shop_ap': module 'dx_shop' has no attribute 'shop_ap'; its App: dx_shop:shop_app"
    )


def test_no_attribute_given_defaults_to_app_and_says_so(shop: str) -> None:
    with pytest.raises(
        ConfigError, match=r"has no attribute 'app' \(the default\); its App: dx_shop:shop_app"
    ):
        load_app(shop)


def test_an_attribute_that_is_not_an_app_says_what_it_is(shop: str) -> None:
    with pytest.raises(
        ConfigError, match=r"'dx_shop:VERSION' is not a harvest.App \(found str\).*dx_shop:shop_app"
    ):
        load_app(f"{shop}:VERSION")
    assert load_app(f"{shop}:shop_app").workflows
