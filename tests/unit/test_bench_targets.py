"""bench/targets.py: each target row's figure from a run's results, and met / missed /
not measured. No timing here: the figures are given."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _targets():
    # Loaded by path: bench/ is not a package (as tests/integration/test_sql_path_bench.py).
    spec = importlib.util.spec_from_file_location("bench_targets", BENCH / "targets.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


T = _targets()


def _lat(p50: float, p99: float, n: int = 100) -> dict:
    return {"n": n, "p50_ms": p50, "p95_ms": (p50 + p99) / 2, "p99_ms": p99, "max_ms": p99}


def sample() -> dict:
    return {
        "summary": {
            "ratio_harvest_dbos_direct": 6.5,
            "harvest_wf_per_s": 750.0,
            "dbos_direct_wf_per_s": 115.0,
            "sql_path_wf_per_s": 1500.0,
            "raw_row_floor_runs_per_s": 2500.0,
            "fan_out": {"n": 20000, "workflows": 200, "harvest_per_s": 3300.0},
            "pgqueuer_best": {"jobs_per_s": 3000.0, "batch_size": 100, "concurrency": 400},
            "remote_start_to_result": _lat(2.5, 12.0),
            "dispatch": _lat(1.6, 2.8),
            "signal_round_trip": _lat(5.4, 8.6),
            "sharding": {"cross_shard_per_workflow": 0.0, "traced_workflows": 500, "traced_shards": 4},
        },
        "replay": {
            "sizes": [
                {"events": 10000, "runtime": {"median_s": 0.05}},
                {"events": 100000, "runtime": {"median_s": 0.4}, "memory_peak_mib": 40.7},
            ]
        },
        "cache_memory": {
            "canonical": {"traced_bytes_per_run": 12288, "estimate_bytes_per_run": 16397},
            "result_10kb": {"traced_bytes_per_run": 22000, "estimate_bytes_per_run": 26391},
            "bounded": {"max_bytes": 8 * 2**20, "kept": 511, "runs": 2000, "traced_bytes": 6 * 2**20},
        },
    }


def rows(results: dict) -> dict[str, dict]:
    return {r["key"]: r for r in T.evaluate(results)}


def test_every_row_of_the_issue_table_is_declared_once():
    keys = [t.key for t in T.TARGETS]
    assert len(keys) == len(set(keys))
    for key in (
        "canonical_vs_dbos",
        "worker_efficiency",
        "sql_efficiency",
        "fan_out_vs_pgqueuer",
        "start_result_p50",
        "start_result_p99",
        "dispatch_p50",
        "dispatch_p99",
        "signal_p50",
        "replay_100k",
        "claim_10m",
        "worker_memory",
    ):
        assert key in keys


def test_each_figure_is_computed_from_the_results():
    r = rows(sample())
    assert r["canonical_vs_dbos"]["value"] == 6.5
    assert r["worker_efficiency"]["value"] == pytest.approx(0.5)  # 750 / 1500
    assert r["sql_efficiency"]["value"] == pytest.approx(0.6)  # 1500 / 2500
    assert r["fan_out_vs_pgqueuer"]["value"] == pytest.approx(1.1)  # 3300 / 3000, the best config
    assert "batch_size=100" in r["fan_out_vs_pgqueuer"]["detail"]
    assert r["start_result_p50"]["value"] == 2.5
    assert r["start_result_p99"]["value"] == 12.0
    assert r["dispatch_p50"]["value"] == 1.6
    assert r["dispatch_p99"]["value"] == 2.8
    assert r["signal_p50"]["value"] == 5.4
    assert r["replay_100k"]["value"] == 0.4
    assert "40.7 MiB" in r["replay_100k"]["detail"]
    assert r["cross_shard"]["value"] == 0.0
    assert r["worker_memory"]["value"] == 12.0 and r["worker_memory"]["figure"] == "12.0 KiB"
    assert r["worker_memory"]["status"] == T.MET  # a reported row: met when measured
    assert "kept 511 of 2,000 runs" in r["worker_memory"]["detail"]
    assert r["worker_efficiency"]["figure"] == "50%"
    assert r["canonical_vs_dbos"]["figure"] == "6.50x"


def test_worker_efficiency_shows_the_bound_the_shared_cores_set():
    plain = rows(sample())["worker_efficiency"]["detail"]
    assert plain == "750.0 vs 1,500.0 workflows/s"  # no CPU figures: no bound claimed
    results = sample()
    results["summary"]["sql_path_server_cpu_ms_per_wf"] = 0.9
    results["summary"]["harvest_cpu_ms_per_workflow"] = {"server": 1.2, "client": 0.3}
    detail = rows(results)["worker_efficiency"]["detail"]
    assert "server CPU per workflow 1.20 ms vs the SQL path's 0.90 (1.33x)" in detail
    assert "at most 75% at the SQL path's server cost" in detail  # 0.9 / (0.9 + 0.3)
    assert rows(results)["worker_efficiency"]["value"] == pytest.approx(0.5)  # the figure is unchanged


def test_met_and_missed_follow_each_goal():
    r = rows(sample())
    status = {k: v["status"] for k, v in r.items()}
    assert status["canonical_vs_dbos"] == T.MISSED  # 6.5 < 10
    assert status["worker_efficiency"] == T.MISSED  # 50% < 75%
    assert status["sql_efficiency"] == T.MET  # 60% >= 50%
    assert status["fan_out_vs_pgqueuer"] == T.MET
    assert status["start_result_p50"] == T.MET  # 2.5 <= 3
    assert status["start_result_p99"] == T.MISSED  # 12 > 10
    assert status["dispatch_p50"] == T.MISSED  # 1.6 > 1
    assert status["dispatch_p99"] == T.MET
    assert status["signal_p50"] == T.MISSED
    assert status["replay_100k"] == T.MET  # 0.4 < 0.5
    assert status["cross_shard"] == T.MET


def test_a_figure_on_the_goal_meets_an_inclusive_goal_only():
    assert T.is_met(">=", 10.0, 10.0)
    assert T.is_met("<=", 3.0, 3.0)
    assert not T.is_met("<", 0.5, 0.5)
    assert not T.is_met(">=", 9.99, 10.0)
    assert not T.is_met("<=", 3.01, 3.0)


def test_missing_measurements_are_not_measured_with_a_reason_and_no_figure():
    r = rows({"summary": {}, "replay": {"sizes": [{"events": 1000, "runtime": {"median_s": 0.004}}]}})
    for row in r.values():
        assert row["status"] == T.NOT_MEASURED
        assert row["figure"] is None
        assert row["detail"]
    assert "1,000" in r["replay_100k"]["detail"]
    assert r["sql_efficiency"]["detail"] == "the raw-row floor did not run"


def _claim_cost(*depths_ms: tuple[int, float]) -> dict:
    return {
        "measured_at": "2026-12-01T19:30:00+00:00",
        "machine": {"host": "devbox", "cpus": 2},
        "command": "nice -n 10 python bench/claim_gates.py",
        "batch": 50,
        "rows": [{"pending": d, "median_ms": ms, "samples": 200} for d, ms in depths_ms],
    }


def test_the_claim_row_is_the_committed_measurement_at_10m_over_1k():
    r = rows(sample())
    assert r["claim_10m"]["status"] == T.NOT_MEASURED  # a run without the by-hand measurement
    met = rows({**sample(), "claim_cost": _claim_cost((1_000, 20.0), (1_000_000, 22.0), (10_000_000, 26.0))})
    row = met["claim_10m"]
    assert row["value"] == pytest.approx(1.3) and row["status"] == T.MET
    assert "26.00 ms at 10,000,000 vs 20.00 ms at 1,000" in row["detail"]
    assert "2026-12-01" in row["detail"] and "devbox" in row["detail"]
    gates = _claim_cost((1_000, 20.0), (10_000_000, 26.0))
    gates["rows"][0]["gated_share"], gates["rows"][1]["gated_share"] = 1.0, 0.42
    assert "through the gates 100% at 1K, 42% at 10M" in rows({"claim_cost": gates})["claim_10m"]["detail"]
    gates["rows"][1]["buffers_ratio_to_first"] = 1.87  # claim_gates.py counts a claim's buffers too
    assert "buffers per claim 1.87x" in rows({"claim_cost": gates})["claim_10m"]["detail"]
    missed = rows({**sample(), "claim_cost": _claim_cost((1_000, 20.0), (10_000_000, 31.0))})
    assert missed["claim_10m"]["status"] == T.MISSED  # 1.55x > 1.5x
    shallow = rows({**sample(), "claim_cost": _claim_cost((1_000, 20.0), (1_000_000, 22.0))})
    assert shallow["claim_10m"]["status"] == T.NOT_MEASURED
    assert (
        "no 10,000,000 row (it measured 1,000, 1,000,000; 1,000,000 pending is 1.10x the 1,000)"
        in (shallow["claim_10m"]["detail"])
    )


def test_with_claim_cost_reads_the_committed_file_unless_the_results_carry_one(tmp_path):
    path = tmp_path / "claim_cost.json"
    path.write_text(json.dumps(_claim_cost((1_000, 20.0), (10_000_000, 24.0))))
    assert T.with_claim_cost({}, path)["claim_cost"]["rows"][1]["median_ms"] == 24.0
    own = {"claim_cost": _claim_cost((1_000, 1.0), (10_000_000, 1.0))}
    assert T.with_claim_cost(own, path)["claim_cost"]["rows"][1]["median_ms"] == 1.0
    assert "claim_cost" not in T.with_claim_cost({}, tmp_path / "absent.json")


def test_the_table_prints_every_row():
    lines = T.markdown(T.evaluate(sample()))
    assert len(lines) == 2 + len(T.TARGETS)
    assert any("not measured" in line for line in lines)
    assert any("**missed**" in line for line in lines)


def _run_module():
    # bench/run.py by path, its own directory first (it imports report, targets, shard_bench).
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_run", BENCH / "run.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def _fan_row(concurrency: int, per_s: float, server_ms: float) -> dict:
    return {
        "n": 20000,
        "workflows": 200,
        "throughput": per_s,
        "worker_options": {"concurrency": concurrency, "claim_batch": concurrency},
        "cpu": {"server_ms_per_activity": server_ms, "worker_ms_per_activity": 0.2},
    }


def test_fan_out_summary_takes_each_side_at_its_best_setting():
    run = _run_module()
    fo = {
        # Two rounds of Harvest's sweep: the best setting by its median over the rounds.
        "harvest": [
            _fan_row(50, 1000.0, 0.5),
            _fan_row(200, 1900.0, 0.3),
            _fan_row(50, 1300.0, 0.5),
            _fan_row(200, 1500.0, 0.34),
        ],
        "pgqueuer": [
            {"throughput": 3000.0, "settings": {"batch_size": 100, "max_concurrent_tasks": 400}},
            {
                "throughput": 3400.0,
                "settings": {"batch_size": 500, "max_concurrent_tasks": 2000},
                "cpu": {"server_ms_per_job": 0.05, "worker_ms_per_job": 0.09},
            },
        ],
    }
    s = run.fan_out_summary(fo)
    assert s["fan_out"]["concurrency"] == 200  # median 1700 beats 50's median 1150
    assert s["fan_out"]["harvest_per_s"] == pytest.approx(1700.0)
    assert s["fan_out"]["server_ms_per_activity"] == pytest.approx(0.32)
    assert s["pgqueuer_best"]["batch_size"] == 500
    assert s["pgqueuer_best"]["server_ms_per_job"] == 0.05
    assert s["fan_out_vs_pgqueuer"] == pytest.approx(0.5)
    assert "Harvest concurrency=200" in rows({"summary": s})["fan_out_vs_pgqueuer"]["detail"]


# Proposed measures (not issue 20's targets): printed beside the targets, never changing them.


def _calls(step_ms: float = 1.0) -> dict:
    steps = (
        "start_workflows",
        "claim_tasks",
        "complete_workflow_tasks",
        "complete_activities",
        "wait_for_result",
    )
    return {
        "runs": 200,
        **{step: {"wall_ms_p50": step_ms, "cpu_ms": step_ms / 2} for step in steps},
        "signal_calls": {
            "runs": 200,
            "signal_workflow": {"wall_ms_p50": 1.0},
            "claim_tasks": {"wall_ms_p50": 1.0},
            "complete_workflow_tasks": {"wall_ms_p50": 1.5},
            "wall_ms_sum": 3.5,
        },
    }


def proposed_sample() -> dict:
    results = sample()
    s = results["summary"]
    s["steady_start_to_result"] = _lat(6.0, 12.0)
    s["calls_back_to_back"] = _calls(1.0)  # five calls of 1 ms: 5 ms back to back
    s["harvest_cpu_ms_per_workflow"] = {"server": 1.2, "client": 0.5}
    s["sql_path_server_cpu_ms_per_wf"] = 0.8
    s["sql_path_1_client_server_cpu_ms_per_wf"] = 0.6
    s["raw_row_floor_1_client_server_cpu_ms_per_run"] = 0.33  # (bench/run.py reads both from the sweeps)
    cost = _claim_cost((1_000, 7.0), (10_000_000, 16.0))
    cost["rows"][0]["buffers_median"], cost["rows"][1]["buffers_median"] = 2500.0, 3300.0
    cost["rows"][1]["buffers_read_median"] = 95.0
    results["claim_cost"] = cost
    return results


def proposed(results: dict) -> dict[str, dict]:
    return {r["key"]: r for r in T.evaluate_proposed(results)}


def test_proposed_rows_are_computed_from_the_results():
    r = proposed(proposed_sample())
    # Latency rows: p50 / the row's own calls back to back; met needs p99 <= 3x p50 as well.
    assert r["dispatch_vs_calls"]["value"] == pytest.approx(1.6)  # 1.6 ms / the decision's 1 ms
    assert r["dispatch_vs_calls"]["status"] == T.MISSED
    assert r["start_result_vs_calls"]["value"] == pytest.approx(1.2)  # 6 / 5
    assert r["start_result_vs_calls"]["status"] == T.MET  # p99 12 = 2x p50
    assert r["start_result_vs_calls"]["figure"] == "1.20x; p99 2.00x p50"
    assert r["remote_start_result_vs_calls"]["value"] == pytest.approx(0.5)  # 2.5 / 5
    assert r["remote_start_result_vs_calls"]["status"] == T.MISSED  # p99 12 > 3x 2.5
    assert r["signal_vs_calls"]["value"] == pytest.approx(5.4 / 3.5)
    assert "signal_workflow + claim_tasks + complete_workflow_tasks" in r["signal_vs_calls"]["detail"]
    assert "committed apart" in r["signal_vs_calls"]["detail"]  # the fixture's calls were not merged
    merged = proposed_sample()
    merged["summary"]["calls_back_to_back"]["merged_claim"] = True
    assert "in one transaction" in proposed(merged)["start_result_vs_calls"]["detail"]
    # SQL efficiency at one client, by server CPU: the floor's / the SQL path's.
    assert r["sql_efficiency_cpu"]["value"] == pytest.approx(0.55)
    assert r["sql_efficiency_cpu"]["status"] == T.MET and r["sql_efficiency_cpu"]["figure"] == "55%"
    # The drain's server CPU per workflow / the SQL path's.
    assert r["worker_efficiency_cpu"]["value"] == pytest.approx(1.5)
    assert r["worker_efficiency_cpu"]["status"] == T.MISSED
    assert "at one client 0.600 ms" in r["worker_efficiency_cpu"]["detail"]
    # The claim by buffers per claim.
    assert r["claim_10m_buffers"]["value"] == pytest.approx(1.32)
    assert r["claim_10m_buffers"]["status"] == T.MET
    assert "95 of them read" in r["claim_10m_buffers"]["detail"]
    for row in r.values():
        assert row["replaces"]


def test_proposed_rows_leave_the_issue_targets_as_they_are():
    results = proposed_sample()
    before = T.evaluate(results)
    T.evaluate_proposed(results)
    assert T.evaluate(results) == before
    assert [t.key for t in T.TARGETS].count("dispatch_p50") == 1
    assert {row["key"] for row in before}.isdisjoint(p.key for p in T.PROPOSED)


def test_proposed_rows_without_their_data_are_not_measured():
    r = proposed({"summary": {}})
    for row in r.values():
        assert row["status"] == T.NOT_MEASURED and row["figure"] is None and row["detail"]
    # A run saved before the proposed measures: its json lacks the calls and the floor's CPU.
    old = sample()
    old["summary"]["sql_path_1_client_server_cpu_ms_per_wf"] = 0.6  # the floor's CPU is missing
    old["claim_cost"] = _claim_cost((1_000, 7.0), (10_000_000, 16.0))  # times only, no buffers
    r = proposed(old)
    assert r["dispatch_vs_calls"]["status"] == T.NOT_MEASURED
    assert "back to back" in r["dispatch_vs_calls"]["detail"]
    assert r["sql_efficiency_cpu"]["status"] == T.NOT_MEASURED
    assert "server's CPU" in r["sql_efficiency_cpu"]["detail"]
    assert r["claim_10m_buffers"]["status"] == T.NOT_MEASURED
    assert "no buffers" in r["claim_10m_buffers"]["detail"]
    no_signals = proposed_sample()
    del no_signals["summary"]["calls_back_to_back"]["signal_calls"]
    r = proposed(no_signals)
    assert r["signal_vs_calls"]["status"] == T.NOT_MEASURED
    assert r["dispatch_vs_calls"]["status"] == T.MISSED


def test_the_proposed_table_is_apart_and_prints_every_row():
    lines = T.proposed_markdown(T.evaluate_proposed(proposed_sample()))
    assert lines[0].startswith("Proposed measures (not issue 20's targets)")
    assert len([line for line in lines if line.startswith("| ") and "---" not in line]) == 1 + len(T.PROPOSED)
    assert "would replace signal round trip p50 <= 3 ms" in "\n".join(lines)
    line = T.proposed_summary(T.evaluate_proposed({"summary": {}}))
    assert line.startswith("Proposed measures (not issue 20's targets): ") and "not measured" in line
