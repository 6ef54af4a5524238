"""Where a refusal sends the reader: the role model lives in docs/security.md ("Roles")."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from harvest.core.errors import PermissionDenied, from_database_error

REPO = Path(__file__).resolve().parents[2]


def test_permission_denied_points_to_the_role_model() -> None:
    refused = SimpleNamespace(
        sqlstate="42501",
        diag=SimpleNamespace(message_primary="permission denied for function terminate_workflow"),
    )
    error = from_database_error(refused)
    assert isinstance(error, PermissionDenied)
    assert "docs/security.md, section Roles" in str(error)
    assert "docs/security.md" in (PermissionDenied.__doc__ or "")
    assert re.search(r"^## Roles$", (REPO / "docs" / "security.md").read_text(), re.MULTILINE)


def test_every_docs_page_the_code_names_exists() -> None:
    named = set()
    for path in (REPO / "harvest_py" / "harvest").rglob("*.py"):
        named.update(re.findall(r"docs/([\w-]+\.md)", path.read_text()))
    assert named and all((REPO / "docs" / page).is_file() for page in named), sorted(
        page for page in named if not (REPO / "docs" / page).is_file()
    )
