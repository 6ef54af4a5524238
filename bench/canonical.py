"""The canonical workload's workflow as Harvest runs it: three no-op activities in
sequence. One definition for harvest_bench.py (the drain), sql_path.py (the same
commands without Python) and tests/integration/test_sql_path_bench.py; it imports
nothing but harvest, so the test runs without the bench extra.
"""

from __future__ import annotations

from harvest import activity, workflow


@activity
async def noop(ctx, step: int) -> int:
    return step


@workflow
async def three_steps(ctx, n: int) -> int:
    a = await ctx.execute_activity(noop, 1)
    b = await ctx.execute_activity(noop, 2)
    c = await ctx.execute_activity(noop, 3)
    return a + b + c + n


@workflow
async def one_step(ctx, n: int) -> int:
    """The start -> result row's workflow (bench/remote_latency.py): one no-op activity."""
    return await ctx.execute_activity(noop, n)
