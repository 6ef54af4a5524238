"""The one wording of "this needs an extra that is not installed" (docs/integrations.md)."""

from __future__ import annotations


def missing_extra(what: str, extra: str, exc: ImportError) -> ImportError:
    """An ImportError for ``what`` used without ``harvest-workflows[extra]``: it names the missing
    package (the top of ``exc.name``; an ``exc`` this made already keeps its package, so a guard
    around another guard says it once) and the ``pip install`` line that brings it."""
    package = (exc.name or "an optional package").split(".")[0]
    return ImportError(
        f"{what} needs the {extra} extra (No module named {package!r}): "
        f"pip install 'harvest-workflows[{extra}]'",
        name=package,
    )
