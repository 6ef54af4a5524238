"""Without Chromium the browser tests skip, with the reason, except under CI=true, where they fail
(a CI that lost its browser must not go green by skipping)."""

from __future__ import annotations

import dashboard_helpers
import pytest


def test_no_chromium_skips_locally_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dashboard_helpers.shutil, "which", lambda name: None)
    monkeypatch.setattr(dashboard_helpers.os.path, "exists", lambda path: False)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="make chromium"):
        dashboard_helpers.chromium_or_skip()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true requires the browser tests to run"):
        dashboard_helpers.chromium_or_skip()


def test_chromium_found_is_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dashboard_helpers.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert dashboard_helpers.chromium_or_skip() == ("/usr/bin/chromium", "/usr/bin/chromedriver")
