"""The client: start, signal, query, update and wait for workflows, over ``harvest.db``.

Names resolve lazily (PEP 562), as ``harvest.worker``'s: importing a submodule that needs no
database (``harvest.client.history_export``, which `harvest workflow --help` loads) does not
load the client, the SQL API or the database driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harvest.core.lazy import lazy_exports

if TYPE_CHECKING:
    from harvest.client.client import (
        AsyncClient,
        AsyncWorkflowHandle,
        Children,
        Client,
        Page,
        StartOptions,
        WorkflowHandle,
    )
    from harvest.client.messages import UpdateHandle

__all__ = [
    "AsyncClient",
    "AsyncWorkflowHandle",
    "Children",
    "Client",
    "Page",
    "StartOptions",
    "UpdateHandle",
    "WorkflowHandle",
]

_WHERE = {
    **dict.fromkeys([name for name in __all__ if name != "UpdateHandle"], "harvest.client.client"),
    "UpdateHandle": "harvest.client.messages",
}


__getattr__, __dir__ = lazy_exports(__name__, globals(), _WHERE, __all__)
