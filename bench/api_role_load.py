"""One side of bench/api_role_ab.py: the management API (``management_app``, dev profile: every
request as harvest_admin, through its role) in this process over httpx's ASGI transport,
``--concurrency`` requests in flight for ``--secs`` seconds on one route; prints {"rps": ...,
"cpu_ms": ...}: requests per second, and this process's CPU per request (the API's and the
driver's; steadier than the rate on a shared machine).

    python bench/api_role_load.py DSN --route read --secs 4 --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import httpx
import psycopg

from harvest.config import config_from_mapping
from harvest.web.app import management_app


async def load(dsn: str, route: str, secs: float, concurrency: int) -> dict[str, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        run = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('bench', '[]', 'api-role-' || gen_random_uuid(), 'q')"
        ).fetchone()[0]  # type: ignore[index]
    app = management_app(dsn=dsn, profile="dev", config=config_from_mapping({}, "bench", env={}))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") as http,
    ):

        async def one() -> None:
            if route == "read":
                answer = await http.get(f"/workflows/{run}")
            else:
                answer = await http.post(f"/workflows/{run}/signal", json={"signal_name": "poke"})
            assert answer.status_code == 200, answer.text

        async def worker(until: float, counts: list[int]) -> None:
            while time.monotonic() < until:
                await one()
                counts[0] += 1

        warm = [0]
        await asyncio.gather(*(worker(time.monotonic() + 1.0, warm) for _ in range(concurrency)))
        counts = [0]
        start, cpu = time.monotonic(), time.process_time()
        await asyncio.gather(*(worker(start + secs, counts) for _ in range(concurrency)))
        rps = counts[0] / (time.monotonic() - start)
        return {"rps": round(rps, 1), "cpu_ms": round((time.process_time() - cpu) * 1000 / counts[0], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dsn")
    parser.add_argument("--route", choices=["read", "signal"], default="read")
    parser.add_argument("--secs", type=float, default=4.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(load(args.dsn, args.route, args.secs, args.concurrency))))


if __name__ == "__main__":
    main()
