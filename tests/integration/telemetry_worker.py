"""A worker process for tests/integration/test_telemetry.py: tracing to a file, JSON logs.

python telemetry_worker.py DSN QUEUES SPAN_FILE LOG_FILE [CACHE_SIZE]
Runs until SIGTERM. Each finished span is one JSON line of SPAN_FILE.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from harvest import App, Worker, activity, workflow
from harvest.telemetry import tracing
from harvest.telemetry.logs import configure_logging


@activity(queue="tp_act")
async def traced_act(ctx, x: int) -> int:
    ctx.logger.info("activity ran")
    logging.getLogger("user.code").info("plain logger in an activity")
    return x + 1


@workflow(queue="tp_child")
async def traced_grandchild(ctx, x: int) -> int:
    return await ctx.execute_activity(traced_act, x)


@workflow(queue="tp_child")
async def traced_child(ctx, x: int) -> int:
    y = await ctx.execute_activity(traced_act, x)
    return await ctx.execute_child_workflow(traced_grandchild, y, queue="tp_child")


@workflow(queue="tp")
async def traced_parent(ctx, x: int) -> int:
    ctx.logger.info("parent step 1")
    y = await ctx.execute_activity(traced_act, x)
    ctx.logger.info("parent step 2")
    z = await ctx.execute_child_workflow(traced_child, y, queue="tp_child")
    ctx.logger.info("parent done")
    return z


app = App(workflows=[traced_parent, traced_child, traced_grandchild], activities=[traced_act])


class FileExporter(SpanExporter):
    def __init__(self, path: str):
        self.path = path

    def export(self, spans):
        with open(self.path, "a") as out:
            for span in spans:
                ctx = span.context
                out.write(
                    json.dumps(
                        {
                            "name": span.name,
                            "trace_id": f"{ctx.trace_id:032x}",
                            "span_id": f"{ctx.span_id:016x}",
                            "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
                            "links": [f"{link.context.trace_id:032x}" for link in span.links],
                            "attributes": dict(span.attributes or {}),
                        }
                    )
                    + "\n"
                )
        return SpanExportResult.SUCCESS

    def shutdown(self):
        return None


def main() -> None:
    dsn, queues, span_file, log_file = sys.argv[1:5]
    cache_size = int(sys.argv[5]) if len(sys.argv) > 5 else 1000
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(span_file)))
    tracing.configure(provider)
    configure_logging("INFO", "json", stream=open(log_file, "a", buffering=1))  # noqa: SIM115
    worker = Worker(
        app,
        dsn,
        queues=queues.split(","),
        cache_size=cache_size,
        poll_interval=0.2,
        scan_interval=0.2,
        hand_off=False,
    )
    asyncio.run(worker.run(install_signal_handlers=True))


if __name__ == "__main__":
    main()
