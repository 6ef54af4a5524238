"""Paired A/B of the replay row: two checkouts of Harvest replay the same saved histories.

The histories (``--sizes``, default 10,000 and 100,000 events) are built once by the base
checkout's ``bench/replay_bench.py`` and saved as JSON, so both sides replay the same events.
Each side then runs in its own process with its own ``harvest_py`` first on ``sys.path``,
replaying each history the way ``replay_bench.py`` times it (a copy of the events made before
the clock starts, then a fresh ``WorkflowRun`` fed the whole history): the median of
``--repeats`` replays' wall time and process CPU (``time.process_time()``), and how many
collections of the cyclic GC (full ones, and any) ran inside the timed part. The sides
alternate which goes first; one line per pair, then the medians of the per-pair ratios.

    python bench/replay_ab.py --base /work/wt/base30 --candidate . --pairs 8
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULT = "REPLAY_AB "


def _import_side(root: Path) -> Any:
    sys.path.insert(0, str(root / "harvest_py"))
    sys.path.insert(0, str(root / "bench"))
    import replay_bench

    import harvest

    if not Path(harvest.__file__).resolve().is_relative_to(root):
        raise SystemExit(f"{root}: imported harvest from {harvest.__file__}")
    return replay_bench


def build(root: Path, sizes: list[int], out: Path) -> None:
    rb = _import_side(root)
    for size in sizes:
        events = asyncio.run(rb.build_history(size))
        (out / f"history_{size}.json").write_text(json.dumps(events))


def side(root: Path, sizes: list[int], repeats: int, out: Path) -> None:
    rb = _import_side(root)
    timing, counts = [False], [0, 0]  # [full collections, collections] while timing

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and timing[0]:
            counts[0] += info["generation"] == 2
            counts[1] += 1

    gc.callbacks.append(on_gc)

    async def once(events: list[dict[str, Any]]) -> tuple[float, float]:
        batch = [dict(e) for e in events]  # as replay_bench.replay_once: before the clock
        timing[0] = True
        t0, c0 = time.perf_counter(), time.process_time()
        run = rb.WorkflowRun(rb.APP, rb.long_chain, "exec-bench", "bench", "default")
        activation = await run.advance(batch)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        timing[0] = False
        run.close()
        assert len(activation.commands) == 1, "a replay of a running history issues the next command"
        return wall, cpu

    result: dict[str, Any] = {}
    for size in sizes:
        events = json.loads((out / f"history_{size}.json").read_text())
        counts[:] = [0, 0]
        walls, cpus = zip(*(asyncio.run(once(events)) for _ in range(repeats)), strict=True)
        result[str(size)] = {
            "wall_s": statistics.median(walls),
            "cpu_s": statistics.median(cpus),
            "gc_full": counts[0],
            "gc_all": counts[1],
        }
    print(RESULT + json.dumps(result))


def _run_side(root: Path, sizes: str, repeats: int, out: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [sys.executable, __file__, "--side", str(root), "--sizes", sizes, "--repeats", str(repeats)]
    proc = subprocess.run([*cmd, "--dir", str(out)], capture_output=True, text=True, env=env, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{root}: failed ({proc.returncode})\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len(RESULT) :])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path)
    parser.add_argument("--candidate", default=Path("."), type=Path)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--repeats", type=int, default=3)
    # The child processes: --build (the base's histories) and --side (one side's replays).
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--side", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.build is not None:
        build(args.build.resolve(), sizes, args.dir)
        return
    if args.side is not None:
        side(args.side.resolve(), sizes, args.repeats, args.dir)
        return
    if args.base is None:
        parser.error("--base is required")
    base, cand = args.base.resolve(), args.candidate.resolve()
    with tempfile.TemporaryDirectory(prefix="replay_ab_") as tmp:
        out = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        build_cmd = [sys.executable, __file__, "--build", str(base), "--sizes", args.sizes, "--dir", tmp]
        subprocess.run(build_cmd, check=True, env=env)
        rows = []
        for i in range(args.pairs):
            order = [("base", base), ("cand", cand)] if i % 2 == 0 else [("cand", cand), ("base", base)]
            got = {name: _run_side(root, args.sizes, args.repeats, out) for name, root in order}
            load = os.getloadavg()[0]
            parts = []
            for size in sizes:
                b, c = got["base"][str(size)], got["cand"][str(size)]
                parts.append(
                    f"{size:,}: base {b['wall_s']:.3f}/{b['cpu_s']:.3f} s cand {c['wall_s']:.3f}/{c['cpu_s']:.3f} s"
                    f" ratio {c['wall_s'] / b['wall_s']:.2f}/{c['cpu_s'] / b['cpu_s']:.2f}"
                    f" gc full/all {b['gc_full']}/{b['gc_all']} -> {c['gc_full']}/{c['gc_all']}"
                )
            print(
                f"pair {i + 1} ({order[0][0]} first, load {load:.1f}) wall/cpu | " + " | ".join(parts),
                flush=True,
            )
            rows.append(got)
        summary: dict[str, Any] = {}
        for size in sizes:
            key = str(size)
            summary[key] = {
                "median_wall_ratio": round(
                    statistics.median(r["cand"][key]["wall_s"] / r["base"][key]["wall_s"] for r in rows), 3
                ),
                "median_cpu_ratio": round(
                    statistics.median(r["cand"][key]["cpu_s"] / r["base"][key]["cpu_s"] for r in rows), 3
                ),
                "base_median_wall_cpu_s": [
                    round(statistics.median(r["base"][key][m] for r in rows), 4) for m in ("wall_s", "cpu_s")
                ],
                "cand_median_wall_cpu_s": [
                    round(statistics.median(r["cand"][key][m] for r in rows), 4) for m in ("wall_s", "cpu_s")
                ],
            }
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
