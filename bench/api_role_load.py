"""One side of bench/api_role_ab.py: the management API (``management_app``, dev profile: every
request as harvest_admin, through its role) in this process over httpx's ASGI transport,
``--concurrency`` requests in flight for ``--secs`` seconds on one route; prints {"rps": ...,
"cpu_ms": ...}: requests per second, and this process's CPU per request (the API's and the
driver's; steadier than the rate on a shared machine). ``--shard1 DSN1``: a deployment of two
shards ([shards], DSN shard 0 and DSN1 shard 1, each given its number here), the run on shard 1.

    python bench/api_role_load.py DSN --route read --secs 4 --concurrency 8 [--shard1 DSN1]
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


async def load(
    dsn: str, route: str, secs: float, concurrency: int, shard1: str | None = None
) -> dict[str, float]:
    env: dict[str, str] = {}
    if shard1 is not None:
        env = {"HARVEST_SHARDS__READABLE": "0,1", "HARVEST_SHARDS__WRITABLE": "0,1"}
        for shard, url in enumerate((dsn, shard1)):
            env[f"HARVEST_SHARDS__URLS__{shard}"] = url
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("SELECT harvest.set_shard_id(%s, 'bench')", (shard,))
    with psycopg.connect(shard1 or dsn, autocommit=True) as conn:
        run = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('bench', '[]', 'api-role-' || gen_random_uuid(), 'q')"
        ).fetchone()[0]  # type: ignore[index]
    config = config_from_mapping({}, "bench", env=env)
    app = management_app(dsn=None if shard1 else dsn, profile="dev", config=config)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") as http,
    ):

        async def one() -> None:
            if route == "read":
                answer = await http.get(f"/workflows/{run}")
            elif route == "list":
                answer = await http.get("/workflows", params={"limit": 20})
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
    parser.add_argument("--route", choices=["read", "signal", "list"], default="read")
    parser.add_argument("--secs", type=float, default=4.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--shard1", help="shard 1's database: a deployment of two shards")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(load(args.dsn, args.route, args.secs, args.concurrency, args.shard1))))


if __name__ == "__main__":
    main()
