"""Every execution id the CLI takes is checked at the edge (cli.output.execution_id_argument),
the repeatable `shard rebalance --execution-id` as the `<execution-id>` arguments."""

from __future__ import annotations

from click.testing import CliRunner

from harvest.cli.main import main

NOWHERE = "postgresql://127.0.0.1:1/none"  # never reached: the check comes first


def test_rebalance_refuses_an_execution_id_that_is_no_uuid_before_any_connection() -> None:
    """`--execution-id order-42` went to the source shard as text, refused there in
    PostgreSQL's words (invalid input syntax for type uuid), after the schema parity check."""
    run_id = "00001a24-8434-42af-a66b-fc87a5640301"
    ids = ["--execution-id", run_id.upper(), "--execution-id", "order-42"]
    shards = [f"--shard=0={NOWHERE}", f"--shard=1={NOWHERE}"]
    result = CliRunner().invoke(main, ["shard", "rebalance", "--from", "0", "--to", "1", *ids, *shards])
    assert result.exit_code == 2, result.output
    assert "'order-42' is not an execution id (a UUID)" in result.output
