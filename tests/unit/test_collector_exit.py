"""`harvest dev`, `harvest serve` and `harvest worker` spare their exit the interpreter's teardown
collections (harvest/worker/collector.py, freeze_at_exit): 0.3 to 0.7 s of every stop of `harvest
dev` or `harvest serve`, after the stop itself was done. The garbage there is at exit is still
collected and finalized first."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import atexit, gc

    # Registered before freeze_at_exit's handler, so it runs after it (atexit is last in, first out).
    atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, flush=True))
    from harvest.worker import collector

    def counted(run=collector._collect_and_freeze):
        print("exit handler", flush=True)
        run()

    collector._collect_and_freeze = counted

    class Cycle:
        def __del__(self):
            print("garbage finalized", flush=True)

    gc.disable()  # (only the exit's collection finds the cycle below)
    collector.freeze_at_exit()
    collector.freeze_at_exit()  # (a command run twice in one process: one handler)
    print("frozen now:", gc.get_freeze_count() > 0, flush=True)
    cycle = Cycle()
    cycle.me = cycle
    del cycle
    """
)


def test_the_exit_collects_the_garbage_then_freezes_what_is_alive() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.splitlines() == [
        "frozen now: False",
        "exit handler",
        "garbage finalized",
        "frozen at exit: True",
    ], done.stderr
