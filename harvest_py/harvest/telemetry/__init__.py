"""Telemetry: Prometheus metrics, OpenTelemetry spans and structured logs (docs/observability.md).

Each part costs nothing unless it is installed and turned on: ``metrics`` needs
prometheus-client (the ``metrics`` extra), ``tracing`` needs OpenTelemetry (the ``otel`` extra)
and a call to :func:`harvest.telemetry.tracing.configure`, ``logs`` is the standard library.
Importing this package imports none of them.
"""
