"""Runnable examples of Harvest, one package each (examples/README.md lists them).

Each runs with one command on the embedded PostgreSQL (``python -m examples.<name>`` from the
repository root) and is exercised by ``tests/examples/test_<name>.py``.
"""
