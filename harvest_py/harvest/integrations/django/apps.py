"""The Django app config: ``INSTALLED_APPS = [..., "harvest.integrations.django"]``."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from harvest.core.errors import ConfigError
from harvest.integrations.django import SETTING, close_client, get_app, get_config


class HarvestConfig(AppConfig):
    """Checks ``settings.HARVEST`` at startup (a bad key stops ``manage.py`` with its name, as
    ``harvest.toml`` stops ``harvest worker``) and closes the shared client when the setting
    changes (``override_settings`` in tests)."""

    name = "harvest.integrations.django"
    label = "harvest"
    verbose_name = "Harvest"
    default = True

    def ready(self) -> None:
        try:
            get_config()
            get_app()
        except ConfigError as exc:
            raise ImproperlyConfigured(str(exc)) from None
        setting_changed.connect(_on_setting_changed, dispatch_uid="harvest.integrations.django")


def _on_setting_changed(*, setting: str, **_: Any) -> None:
    if setting == SETTING:
        close_client()
