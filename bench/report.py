"""Turn bench/results/*.json into a Markdown table, a PNG plot and the one-line ratios.

python bench/report.py bench/results/latest.json   # rewrite latest.md and latest.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import targets


def _cpu(row: dict, key: str) -> str:
    """A per-task CPU figure of a fan-out row (rows from before it was measured have none)."""
    value = (row.get("cpu") or {}).get(key)
    return "-" if value is None else f"{value:.3f}"


def _f(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def ratios(results: dict) -> str:
    s = results["summary"]
    return (
        f"Harvest/DBOS direct = {s['ratio_harvest_dbos_direct']:.2f}x, "
        f"Harvest/DBOS queue = {s['ratio_harvest_dbos_queue']:.2f}x, "
        f"Harvest tasks/PgQueuer = {s['ratio_harvest_pgqueuer']:.2f}x, "
        f"Harvest = {s['fraction_of_ceiling']:.1%} of ceiling/commits-per-workflow"
        + (
            f", {s['fraction_of_sql_path']:.0%} of its SQL path alone"
            if s.get("fraction_of_sql_path")
            else ""
        )
        + (f", SQL path = {s['sql_efficiency']:.0%} of the raw-row floor" if s.get("sql_efficiency") else "")
        + (
            f", fan-out/PgQueuer at its best = {s['fan_out_vs_pgqueuer']:.2f}x"
            if s.get("fan_out_vs_pgqueuer")
            else ""
        )
    )


def markdown(results: dict) -> str:
    s, m, cfg = results["summary"], results["machine"], results["config"]
    n_rounds = len(results["rounds"])
    lines = [
        (
            f"Run: `{results['kind']}` at {results['started_at'][:19]}Z, {results['total_seconds']:.0f} s. "
            f"Machine: {m['cpu_count']} x {m['cpu_model'] or 'unknown CPU'}, {m['memory_gib']} GiB, "
            f"{m['postgres'].split(' on ')[0]}; fsync, synchronous_commit and full_page_writes on."
        ),
        "",
        (
            f"Canonical workload: three no-op activities in sequence, {cfg['workflows']:,} runs per round, "
            f"{n_rounds} round(s) alternating Harvest / DBOS direct / DBOS queue; medians over rounds. "
            "Latency is start-to-result with all runs started at once (it includes the backlog)."
        ),
        "",
        (
            "| system | workflows/s | p50 ms | p95 ms | p99 ms | commits/workflow | server CPU ms/workflow "
            "| client CPU ms/workflow | Harvest ratio |"
        ),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    rows = [
        ("Harvest", "harvest", s["harvest_commits_per_workflow"], None),
        (
            "DBOS direct start",
            "dbos_direct",
            s["dbos_direct_commits_per_workflow"],
            s["ratio_harvest_dbos_direct"],
        ),
        ("DBOS queue", "dbos_queue", s["dbos_queue_commits_per_workflow"], s["ratio_harvest_dbos_queue"]),
    ]
    for label, key, commits, ratio in rows:
        lat = s[f"{key}_latency"]
        cpu = s.get(f"{key}_cpu_ms_per_workflow") or {}  # absent in results from before it was measured
        lines.append(
            f"| {label} | {_f(s[key + '_wf_per_s'])} | {_f(lat['p50_ms'], 0)} | {_f(lat['p95_ms'], 0)} "
            f"| {_f(lat['p99_ms'], 0)} | {_f(commits, 1)} | {_f(cpu.get('server'), 2)} "
            f"| {_f(cpu.get('client'), 2)} | {'-' if ratio is None else f'{ratio:.2f}x'} |"
        )
    if s.get("async_commit"):
        ac = s["async_commit"]
        lines.append(
            f"| *extra, synchronous_commit=off:* Harvest / DBOS direct | "
            f"{_f(ac['harvest_wf_per_s'])} / {_f(ac['dbos_direct_wf_per_s'])} | | | | | | | "
            f"{ac['ratio']:.2f}x |"
        )
    lines += [
        "",
        (
            f"Task layer: {cfg['tasks']:,} no-op activities (Harvest: {cfg['tasks'] // cfg['fan_out']} workflows "
            f"fanning out {cfg['fan_out']} each) vs {cfg['tasks']:,} no-op PgQueuer jobs."
        ),
        "",
        "| system | tasks/s | ratio |",
        "| --- | ---: | ---: |",
        f"| Harvest activities | {_f(s['harvest_tasks_per_s'])} | {s['ratio_harvest_pgqueuer']:.2f}x |",
        f"| PgQueuer jobs | {_f(s['pgqueuer_jobs_per_s'])} | - |",
        "",
        f"Latency at a steady {cfg['latency_rate']:g} workflows/s ({3 * cfg['latency_rate']:g} activities/s):",
        "",
        "| measure | p50 ms | p95 ms | p99 ms | n |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, key in (
        ("activity dispatch (scheduled -> body runs)", "dispatch"),
        ("workflow start -> result", "steady_start_to_result"),
    ):
        d = s[key]
        lines.append(
            f"| {label} | {_f(d['p50_ms'], 2)} | {_f(d['p95_ms'], 2)} | {_f(d['p99_ms'], 2)} | {d['n']} |"
        )
    sig = results.get("signals")
    if sig:
        lines += [
            "",
            (
                f"Signal round trip at a steady {sig['rate_signals_per_s']:g} signals/s, round-robin to "
                f"{sig['runs']} waiting runs ({sig['signals_per_run_per_s']:g} per run per second); each run "
                "loops on `wait_for_signal` and starts a no-op activity per signal:"
            ),
            "",
            "| measure | p50 ms | p95 ms | p99 ms | n |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for label, key in (
            ("**signal round trip** (sent -> the activity the workflow starts on it runs)", "round_trip"),
            ("signal sent -> workflow code has it", "to_workflow_code"),
            ("client `handle.signal` call (its commit)", "send_call"),
        ):
            d = sig[key]
            lines.append(
                f"| {label} | {_f(d['p50_ms'], 2)} | {_f(d['p95_ms'], 2)} | {_f(d['p99_ms'], 2)} | {d['n']} |"
            )
        eager = results.get("signals_eager")
        # The target is read on the plain row above; this one needs the worker in the client's process.
        if eager:
            d = eager["round_trip"]
            lines.append(
                "| signal round trip, eager (`AsyncClient(eager_worker=)` in the worker's process) | "
                f"{_f(d['p50_ms'], 2)} | {_f(d['p95_ms'], 2)} | {_f(d['p99_ms'], 2)} | {d['n']} |"
            )
    else:
        lines.append(f"| signal round trip | {results.get('signal_round_trip', 'not measured')} | | | |")
    lines += [
        "",
        "Replay on a cache miss (fresh run, whole history, no database):",
        "",
        "| history | replay time | events/s | peak Python memory |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for row in results["replay"]["sizes"]:
        mem = row.get("memory_peak_mib")
        lines.append(
            f"| {row['events']:,} events | {row['runtime']['median_s'] * 1000:,.1f} ms "
            f"| {row['runtime']['events_per_s']:,} | {'-' if mem is None else f'{mem:,.1f} MiB'} |"
        )
    ceiling = results["ceiling"][0]["runs"]
    lines += [
        "",
        "Ceiling: pgbench, one-row INSERT per transaction:",
        "",
        "| clients | commits/s |",
        "| ---: | ---: |",
    ]
    for run in ceiling:
        lines.append(f"| {run['clients']} | {_f(run['commits_per_s'])} |")
    lines += [
        "",
        (
            f"Harvest commits per workflow: {s['harvest_commits_per_workflow']:.1f} (`xact_commit`, includes "
            f"read-only ones), of which {s['harvest_writing_xacts_per_workflow']:.1f} write (xids assigned). "
            f"Ceiling / commits-per-workflow = {_f(s['ceiling_wf_per_s'])} wf/s; Harvest reaches "
            f"**{s['fraction_of_ceiling']:.1%}** of it ({s['fraction_of_ceiling_writing_xacts']:.1%} counting "
            "writing transactions only)."
        ),
    ]
    if s.get("sql_path_wf_per_s"):
        sp = results["sql_path"]
        best = max(sp["runs"], key=lambda r: r["wf_per_s"])
        lines += [
            "",
            (
                "SQL path (not a target): the same workflow taken through Harvest's SQL functions by "
                f"procedures that run nothing else, {best['batch']} runs per transaction as the worker's "
                "group commits take them, no Python (`bench/sql_path.py`):"
            ),
            "",
            "| clients | workflows/s | server CPU ms/workflow |",
            "| ---: | ---: | ---: |",
            *(
                f"| {r['clients']} | {_f(r['wf_per_s'])} | {r.get('server_cpu_ms_per_wf', '-')} |"
                for r in sp["runs"]
            ),
            "",
            (
                f"Harvest, with its Python worker and client, reaches **{s['fraction_of_sql_path']:.0%}** of "
                f"its SQL path alone ({_f(s['sql_path_wf_per_s'])} workflows/s)."
            ),
        ]
    if results.get("sharding"):
        lines += ["", *sharding_lines(results["sharding"])]
    lines += issue20_lines(results)
    lines += [
        "",
        "Targets (bench/targets.py; the machine and run as above):",
        "",
        # Results saved before bench/targets.py carry the previous issue's rows: evaluate anew.
        *targets.markdown(
            s["targets"]
            if s.get("targets") and "status" in s["targets"][0]
            else targets.evaluate(targets.with_claim_cost(results))
        ),
        "",
        # Results saved before the proposed measures have none: evaluate anew (not measured).
        *targets.proposed_markdown(
            s.get("proposed") or targets.evaluate_proposed(targets.with_claim_cost(results))
        ),
    ]
    return "\n".join(lines) + "\n"


def issue20_lines(results: dict) -> list[str]:
    """The raw-row floor, the SQL path's statement costs, the fan-out beside PgQueuer's sweep
    and start -> result from another process (each only when the run measured it)."""
    s, lines = results["summary"], []
    floor = results.get("raw_row_floor")
    if floor:
        per_run = ", ".join(f"{k} {v}" for k, v in floor["writes_per_run"].items() if k != "transactions")
        lines += [
            "",
            (
                f"Raw-row floor (`bench/raw_row_floor/`): pgbench writes the rows one canonical run writes "
                f"({per_run}; in {floor['writes_per_run']['transactions']} transactions), "
                f"{floor['runs_per_transaction']} runs per transaction, plain statements on tables with the "
                "same columns and primary keys and nothing else"
                + ("" if floor.get("committed_script_current") else " (the committed floor.sql is stale)")
                + ":"
            ),
            "",
            "| clients | runs/s |",
            "| ---: | ---: |",
            *(f"| {r['clients']} | {_f(r['runs_per_s'])} |" for r in floor["runs"]),
        ]
        if s.get("sql_efficiency") is not None:
            lines += [
                "",
                f"Harvest's SQL path reaches **{s['sql_efficiency']:.0%}** of the raw-row floor.",
            ]
    stm = (results.get("sql_path") or {}).get("statements")
    if stm and stm.get("available"):
        lines += [
            "",
            (
                f"Where the SQL path's server time goes (`pg_stat_statements.track = all`, {stm['workflows']} "
                "more workflows from one client, untimed; nested, so a function's time includes its "
                "statements'; tracking all statements slows the server, so compare rows, not totals):"
            ),
            "",
            "| statement | calls/workflow | µs/workflow |",
            "| --- | ---: | ---: |",
            *(
                f"| `{t['query'].replace('|', '/')}` | {t['calls_per_workflow']:g} | {t['us_per_workflow']:,.1f} |"
                for t in stm["top"]
            ),
        ]
        if stm.get("statements_per_workflow") is not None:
            floor_count = (floor or {}).get("statements_per_run")
            lines += [
                "",
                f"The SQL path runs {float(stm['statements_per_workflow']):g} statements per workflow inside its "
                f"functions ({float(stm['writes_per_workflow']):g} of them INSERT, UPDATE or DELETE), each paying "
                "executor start-up and a plan check (a write also its table's CHECKs and trigger WHENs)"
                + (
                    f"; the floor writes the same rows in {floor_count:g} statements per run."
                    if floor_count is not None
                    else "."
                ),
            ]
    elif stm:
        lines += ["", f"SQL path per-statement costs: not measured ({stm.get('reason')})."]
    fo = results.get("fan_out")
    if fo:
        f = s["fan_out"]
        lines += [
            "",
            (
                f"Fan-out: {f['n']:,} no-op activities (Harvest: {f['workflows']} workflows fanning out 100 "
                f"each, {len(fo['harvest'])} round(s)) vs PgQueuer draining {f['n']:,} no-op jobs at each "
                "batch size and concurrency:"
            ),
            "",
            "| system | settings | tasks/s | server CPU ms/task | client CPU ms/task |",
            "| --- | --- | ---: | ---: | ---: |",
            *(
                f"| Harvest activities | concurrency={x['worker_options']['concurrency']}, "
                f"claim_batch={x['worker_options']['claim_batch']} | {_f(x['throughput'])} | "
                f"{_cpu(x, 'server_ms_per_activity')} | {_cpu(x, 'worker_ms_per_activity')} |"
                for x in fo["harvest"]
            ),
            *(
                f"| PgQueuer jobs | batch_size={x['settings']['batch_size']}, "
                f"max_concurrent_tasks={x['settings']['max_concurrent_tasks']} | {_f(x['throughput'])} | "
                f"{_cpu(x, 'server_ms_per_job')} | {_cpu(x, 'worker_ms_per_job')} |"
                for x in fo["pgqueuer"]
            ),
            "",
            (
                f"Harvest at its best setting (concurrency={f['concurrency']}, claim_batch={f['claim_batch']}, "
                f"median over rounds) {_f(f['harvest_per_s'])} activities/s against PgQueuer's best "
                f"{_f(s['pgqueuer_best']['jobs_per_s'])} jobs/s: **{s['fan_out_vs_pgqueuer']:.2f}x**. "
                "Harvest's time runs from the first ActivityScheduled, so it includes the decisions that "
                "schedule the activities; PgQueuer's jobs are enqueued before its clock starts."
            ),
        ]
    rl = results.get("remote_latency")
    if rl:
        d = rl["start_to_result"]
        lines += [
            "",
            (
                f"Start -> result from another process: a client process starts `one_step` (one no-op "
                f"activity) at a steady {rl['rate_wf_per_s']:g}/s and awaits `handle.result()`; the worker "
                "runs in its own process:"
            ),
            "",
            "| measure | p50 ms | p95 ms | p99 ms | max ms | n | over 1 s |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
            (
                f"| start -> result | {_f(d['p50_ms'], 2)} | {_f(d['p95_ms'], 2)} | {_f(d['p99_ms'], 2)} "
                f"| {_f(d['max_ms'], 2)} | {d['n']} | {rl.get('over_1s', '-')} |"
            ),
        ]
    return lines


def sharding_lines(out: dict) -> list[str]:
    """The sharding row (bench/shard_bench.py): its table and the cross-shard count."""
    s = out["summary"]
    lines = [
        (
            "Sharding: the canonical workflow, each shard its own embedded PostgreSQL server on this "
            "machine; one AsyncClient over AsyncShardPools (hashed placement) and one multi-shard Worker "
            f"(50 slots and 8 starters in all, unless the row says per shard); medians over "
            f"{len(out['rounds'])} round(s). Server CPU per workflow is each shard server's process tree "
            "(/proc) over the runs placed on it; statements are pg_stat_statements' top-level calls."
        ),
        "",
        (
            "| shards | runs | workflows/s | server CPU ms/workflow, per shard (min-max) | net of idle "
            "| statements/workflow, per shard | idle server ms/s, per shard "
            "| worker process CPU ms/workflow (net of idle) |"
        ),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in s["rows"]:
        ps = r["server_ms_per_workflow_per_shard"]
        lines.append(
            f"| {r['shards']}{', 50 slots + 8 starters per shard' if r['scaled'] else ''} | {r['n']:,} "
            f"| {r['wf_per_s']:,.1f} | {ps['median']:.2f} ({ps['min']:.2f}-{ps['max']:.2f}) "
            f"| {r['net_server_ms_per_workflow_per_shard']:.2f} | {r['statements_per_workflow_per_shard']:.2f} "
            f"| {r['idle_server_ms_per_s_per_shard']:.1f} "
            f"| {r['worker_ms_per_workflow']:.2f} ({r['net_worker_ms_per_workflow']:.2f}) |"
        )
    by_call = ", ".join(f"{k} {v}" for k, v in s["cross_shard_by_call"].items()) or "none"
    lines += [
        "",
        (
            f"Cross-shard round trips on the hot path ({s['traced_workflows']:,} traced runs on "
            f"{s['traced_shards']} shards): **{s['cross_shard_round_trips']}** "
            f"({s['cross_shard_per_workflow']:g} per workflow; by call: {by_call}), of "
            f"{s['run_statements_per_workflow']:g} statements per workflow that name a run (by execution, "
            "workflow or task id)."
        ),
    ]
    if out.get("load_average_at_start"):
        a, b = out["load_average_at_start"], out["load_average_at_end"]
        lines += [
            "",
            f"Load average (1 min) on this 2-core machine: {a[0]:.2f} before the sharding row, {b[0]:.2f} after.",
        ]
    return lines


def _goal(key: str) -> float:
    """A target's goal as bench/targets.py declares it (the chart draws the same line)."""
    goal = next(t.goal for t in targets.TARGETS if t.key == key)
    assert goal is not None
    return goal


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = results["summary"]
    sig = results.get("signals")
    fig, axes = plt.subplots(1, 4 if sig else 3, figsize=(20 if sig else 15, 4.5))
    colors = {"Harvest": "#2e7d32", "DBOS direct": "#1565c0", "DBOS queue": "#64b5f6", "PgQueuer": "#ef6c00"}

    ax = axes[0]
    names = ["Harvest", "DBOS direct", "DBOS queue"]
    values = [s["harvest_wf_per_s"], s["dbos_direct_wf_per_s"], s["dbos_queue_wf_per_s"]]
    bars = ax.bar(names, values, color=[colors[n] for n in names])
    # The issue-20 target line (bench/targets.py), not the withdrawn commit-ceiling one, whose
    # height squashed the bars.
    ax.axhline(
        _goal("canonical_vs_dbos") * s["dbos_direct_wf_per_s"],
        color="grey",
        linestyle="--",
        linewidth=1,
        label=f"target: {_goal('canonical_vs_dbos'):g}x DBOS direct",
    )
    ax.bar_label(bars, fmt="%.0f")
    ax.set_title("Canonical workload (3 activities)")
    ax.set_ylabel("workflows / s")
    ax.legend(fontsize=8)

    ax = axes[1]
    names2 = ["Harvest", "PgQueuer"]
    bars = ax.bar(
        names2, [s["harvest_tasks_per_s"], s["pgqueuer_jobs_per_s"]], color=[colors[n] for n in names2]
    )
    ax.bar_label(bars, fmt="%.0f")
    ax.set_title("Task layer (no-op activities / jobs)")
    ax.set_ylabel("tasks / s")

    ax = axes[2]
    pcts = ["p50_ms", "p95_ms", "p99_ms"]
    width = 0.25
    series = [
        ("Harvest", s["harvest_latency"]),
        ("DBOS direct", s["dbos_direct_latency"]),
        ("DBOS queue", s["dbos_queue_latency"]),
    ]
    for i, (name, lat) in enumerate(series):
        ax.bar(
            [j + (i - 1) * width for j in range(3)],
            [lat[p] for p in pcts],
            width,
            label=name,
            color=colors[name],
        )
    ax.set_xticks(range(3), ["p50", "p95", "p99"])
    ax.set_ylabel("start -> result, ms (burst, backlog included)")
    d = s["dispatch"]
    ax.set_title(f"Latency; Harvest dispatch p50 {d['p50_ms']:.1f} / p99 {d['p99_ms']:.1f} ms")
    ax.legend(fontsize=8)

    if sig:
        ax = axes[3]
        series = [
            ("activity dispatch", s["dispatch"], "#2e7d32"),
            ("signal -> workflow code", sig["to_workflow_code"], "#81c784"),
            ("signal round trip", sig["round_trip"], "#1b5e20"),
        ]
        for i, (name, lat, color) in enumerate(series):
            ax.bar(
                [j + (i - 1) * width for j in range(3)],
                [lat[p] for p in pcts],
                width,
                label=name,
                color=color,
            )
        for key, style, what in (("dispatch_p50", "--", "dispatch"), ("signal_p50", ":", "signal")):
            goal = _goal(key)
            ax.axhline(
                goal, color="grey", linestyle=style, linewidth=1, label=f"{what} p50 target {goal:g} ms"
            )
        ax.set_xticks(range(3), ["p50", "p95", "p99"])
        ax.set_ylabel("ms, steady moderate load")
        ax.set_title(
            f"Harvest steady latency ({results['config']['latency_rate']:g} wf/s; "
            f"{sig['rate_signals_per_s']:g} signals/s)"
        )
        ax.legend(fontsize=8)

    fig.suptitle(
        f"Harvest benchmarks ({results['kind']}, {results['machine']['cpu_count']} cores, "
        "fsync + synchronous_commit on)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results" / "latest.json")
    results = json.loads(path.read_text())
    path.with_suffix(".md").write_text(markdown(results))
    plot(results, path.with_suffix(".png"))
    print(ratios(results))
    proposed = results["summary"].get("proposed")
    print(targets.proposed_summary(proposed or targets.evaluate_proposed(targets.with_claim_cost(results))))


if __name__ == "__main__":
    main()
