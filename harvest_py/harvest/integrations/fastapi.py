"""FastAPI: :class:`HarvestLifespan` and the ``HarvestClient`` dependency.

::

    from fastapi import FastAPI
    from harvest.integrations.fastapi import HarvestClient, HarvestLifespan

    api = FastAPI(lifespan=HarvestLifespan(app, run_worker=True))

    @api.post("/orders/{order_id}")
    async def create(order_id: str, client: HarvestClient) -> dict:
        handle = await client.start_workflow(checkout, order_id, workflow_id=f"order-{order_id}")
        return {"execution_id": handle.execution_id}

See :mod:`harvest.integrations.starlette` for what the lifespan does, and docs/integrations.md.
"""

from __future__ import annotations

from typing import Annotated

from harvest.client.client import AsyncClient
from harvest.core.extras import missing_extra

try:
    from fastapi import Depends
except ImportError as exc:
    raise missing_extra("harvest.integrations.fastapi", "fastapi", exc) from exc
from harvest.integrations.starlette import (
    DEFAULT_MOUNT_PATH,
    HarvestLifespan,
    harvest_client,
    harvest_error_handler,
)

__all__ = [
    "DEFAULT_MOUNT_PATH",
    "HarvestClient",
    "HarvestLifespan",
    "harvest_client",
    "harvest_error_handler",
]

# A route parameter annotated with this receives the app's AsyncClient.
HarvestClient = Annotated[AsyncClient, Depends(harvest_client)]
