"""Traces of a family of children spread over shards (docs/observability.md): a child placed on
another shard, its own child there, and a grandchild placed on another shard than its parent
all put their spans in the root run's trace, with the OpenTelemetry SDK's in-memory exporter
over one worker per shard. The shard that starts a cross-shard child cannot read its parent's
start, so the parent's child.start span travels with the child's lifecycle row."""

from __future__ import annotations

import pytest
from cross_shard_helpers import clients, enable_cross_shard_relays, shard_workers
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harvest import App, ChildPlacement, workflow
from harvest.core.ids import shard_of
from harvest.telemetry import tracing

pytestmark = pytest.mark.shard


@workflow
async def tr_leaf(ctx, n: int) -> list:
    return [n, str(ctx.execution_id)]


@workflow
async def tr_middle(ctx, shard: int) -> list:
    """A child that starts its own child on ``shard``."""
    placement = ChildPlacement.PARENT_SHARD if shard < 0 else ChildPlacement.shard(shard)
    leaf = await ctx.execute_child_workflow(tr_leaf, shard, placement=placement)
    return [str(ctx.execution_id), leaf[1]]


@workflow
async def tr_root(ctx) -> list:
    # A child on shard 1 whose child stays there; a child here whose child goes to shard 2.
    remote = await ctx.execute_child_workflow(tr_middle, -1, placement=ChildPlacement.shard(1))
    local = await ctx.execute_child_workflow(tr_middle, 2)
    return remote + local


app = App(workflows=[tr_root, tr_middle, tr_leaf])


def test_children_and_grandchildren_on_other_shards_join_the_root_trace(shards) -> None:
    enable_cross_shard_relays(shards)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider)
    try:
        with shard_workers(app, shards), clients(shards) as c:
            root = c[0].start_workflow(tr_root)
            family = root.result(timeout=90)
    finally:
        tracing.disable()
    assert [shard_of(r) for r in family] == [1, 1, 0, 2]
    runs = {str(root.execution_id), *family}
    root_trace = int(str(root.execution_id).replace("-", ""), 16)
    tasks = [s for s in exporter.get_finished_spans() if s.name == "harvest.workflow.task"]
    traced = {s.attributes["harvest.execution_id"]: s.context.trace_id for s in tasks}
    assert set(traced) == runs, "every run of the family decided with tracing on"
    assert set(traced.values()) == {root_trace}, {
        run: f"{trace:032x}" for run, trace in traced.items() if trace != root_trace
    }
    activity_or_child = [s for s in exporter.get_finished_spans() if s.name == "harvest.child.start"]
    assert len(activity_or_child) == 4 and {s.context.trace_id for s in activity_or_child} == {root_trace}
