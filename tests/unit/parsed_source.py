"""One parse of each source file per test process, for the tests that read the package's code
(layers, channels, log lines): each parsed all of it again, a second or more of CPU a pass."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path


def parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree, shared: read it, never change it. A file written again (a test's
    probe) is parsed again."""
    stat = path.stat()
    return _parse(path, stat.st_mtime_ns, stat.st_size)


@cache
def _parse(path: Path, _mtime_ns: int, _size: int) -> ast.Module:
    return ast.parse(path.read_text(), str(path))
