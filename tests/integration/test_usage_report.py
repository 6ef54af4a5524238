"""The usage report as the sharding guide specifies it (functions/flow_usage.sql, docs/flow-control.md
"Usage report"): activities that record model calls in the agent cost ledger from async and plain
``def`` code (ctx.arecord_llm_call / ctx.record_llm_call), activity_compute_seconds measured from
the final attempt's start, `harvest usage --from 1h --json` with every field, and the server's
90-day ceiling refusing a wider window with exit 2."""

from __future__ import annotations

import json

from click.testing import CliRunner

from harvest import App, Client, activity, workflow
from harvest.cli.main import main as cli


@activity
async def ur_ask(ctx, prompt: str) -> str:
    await ctx.arecord_llm_call(
        "model-a", input_tokens=100, output_tokens=20, cost_usd_micros=1500, latency_ms=40
    )
    return prompt.upper()


@activity
def ur_ask_sync(ctx, prompt: str) -> str:
    ctx.record_llm_call("model-b", input_tokens=7, output_tokens=3, latency_ms=5)  # no known price
    return prompt[::-1]


@workflow
async def ur_agent(ctx, prompt: str) -> list:
    return [await ctx.execute_activity(ur_ask, prompt), await ctx.execute_activity(ur_ask_sync, prompt)]


APP = App(workflows=[ur_agent], activities=[ur_ask, ur_ask_sync])


def test_usage_report_sums_the_cost_ledger_and_compute_seconds(db: str, start_worker) -> None:
    start_worker(APP)
    with Client(db) as client:
        for tenant in ("acme", "globex"):
            handle = client.start_workflow(ur_agent, "hi", search_attributes={"tenant": tenant})
            assert handle.result(timeout=30) == ["HI", "ih"]
        events = handle.history()
    outcome = next(e for e in events if e["event_type"] == "ActivityCompleted")
    assert "started_at" in outcome["event_data"], "the outcome records its final attempt's start"

    env = {"HARVEST_DATABASE_URL": db}
    result = CliRunner().invoke(
        cli, ["usage", "--from", "1h", "--group-by", "search_attr:tenant", "--json"], env=env
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["status"] == "complete" and report["unavailable_shards"] == []
    groups = {g["group"]: g for g in report["groups"]}
    assert set(groups) == {"acme", "globex"}
    acme = groups["acme"]
    assert (acme["workflow_starts"], acme["completed"], acme["activity_executions"]) == (1, 1, 2)
    assert (acme["llm_calls"], acme["llm_input_tokens"], acme["llm_output_tokens"]) == (2, 107, 23)
    assert (acme["llm_cost_usd_micros"], acme["llm_unpriced_calls"], acme["llm_latency_ms"]) == (1500, 1, 45)
    assert 0 < acme["activity_compute_seconds"] < 30

    wide = CliRunner().invoke(cli, ["usage", "--from", "100d", "--json"], env=env)
    assert wide.exit_code == 2 and "ceiling of 7776000 seconds" in wide.output


def test_a_group_by_key_no_filter_can_name_is_refused_as_the_dashboard_refuses_it(db: str) -> None:
    """`harvest usage --group-by search_attr:<key>` holds the key to the search attribute key rule
    (harvest._search_attr_key_ok, in count_usage), as the dashboard's usage view did alone."""
    env = {"HARVEST_DATABASE_URL": db}
    bad = CliRunner().invoke(cli, ["usage", "--from", "1h", "--group-by", "search_attr:ten ant"], env=env)
    assert bad.exit_code == 2, bad.output
    assert 'group_by "search_attr:ten ant" names no search attribute key' in bad.output
    good = CliRunner().invoke(cli, ["usage", "--from", "1h", "--group-by", "search_attr:ten-ant.1"], env=env)
    assert good.exit_code == 0, good.output
