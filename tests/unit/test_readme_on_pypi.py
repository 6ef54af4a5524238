"""README.md is the package's page on PyPI (pyproject.toml: ``readme``), where a relative link
resolves against pypi.org and finds nothing (and a ``#heading`` anchor finds no id): it named
its pages by relative links. It names them by their path in the repository and the source
distribution (MANIFEST.in: ``graft docs``), and links only to absolute URLs. No repository URL
is known to this project, so pyproject.toml has no ``[project.urls]`` to link to the docs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# [text](target) outside code: an inline link or image of Markdown
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)[^)]*\)")


def _prose(text: str) -> str:
    """The README without its fenced blocks and code spans (a link there is not a link)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`]*`", "", text)


def test_the_readme_links_only_to_absolute_urls() -> None:
    targets = LINK.findall(_prose((ROOT / "README.md").read_text()))
    relative = [t for t in targets if not re.match(r"https?://", t)]
    assert relative == [], f"relative links break on PyPI; name the path instead: {relative}"


def test_the_pages_the_readme_names_are_shipped_in_the_sdist() -> None:
    readme = (ROOT / "README.md").read_text()
    named = set(re.findall(r"`((?:docs|examples)/[\w./-]+\.md)`", readme))
    assert {"docs/install.md", "docs/getting-started.md", "examples/README.md"} <= named
    missing = sorted(path for path in named if not (ROOT / path).is_file())
    assert missing == [], missing
    manifest = (ROOT / "MANIFEST.in").read_text().split()
    assert "docs" in manifest and "examples" in manifest  # graft docs, graft examples


def test_project_urls_are_absolute_where_there_are_any() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    urls = project.get("urls", {})
    assert all(re.match(r"https://", u) for u in urls.values()), urls
