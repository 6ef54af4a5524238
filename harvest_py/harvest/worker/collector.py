"""The cyclic garbage collector's settings for a process that is a worker and nothing else.

A worker allocates many short-lived container objects per workflow (task rows, events, the
run's commands and their payloads), most of them freed by reference count. CPython's default
generation-0 threshold (700 allocations) then runs a collection every few workflows, and each
one walks the survivors, including everything imported at start-up on the older generations'
passes: about a tenth of the canonical worker's CPU (docs/performance.md, "Cheaper Python,
fourth cut"). :func:`tune_collector` moves what start-up allocated out of the collector's
reach (``gc.freeze()``) and raises the generation-0 threshold, keeping the older
generations' thresholds as they were.

It is process-wide, so the library never calls it for its host: ``harvest worker`` does (after
the App is imported, before the worker starts; ``--no-gc-tuning`` or ``worker.gc_tuning =
false`` keep the interpreter's settings), and so does the benchmarks' in-process worker, so
that the bench measures what ``harvest worker`` runs. A program that embeds a Worker may call
it itself once its imports are done.
"""

from __future__ import annotations

import atexit
import gc

# Allocations (net of frees) of container objects between two generation-0 collections; CPython's
# default is 700. 10,000 took the canonical drain's collector from ~0.15 s to ~0.02 s per 1,000
# workflows at the same peak RSS; 50,000 saved no more and added ~6 MB.
GEN0_THRESHOLD = 10_000


def tune_collector(gen0_threshold: int = GEN0_THRESHOLD) -> tuple[int, int, int]:
    """Freeze every object alive now (start-up's modules, classes and the App) into the
    collector's permanent generation, then raise the generation-0 threshold to
    ``gen0_threshold``. Returns the thresholds in force before (``gc.set_threshold(*them)``
    restores them; ``gc.unfreeze()`` returns the frozen objects to the collector).

    Garbage cycles are still collected, only in larger batches. A frozen object is still freed
    when its reference count drops to zero, but a cycle of frozen objects that becomes garbage
    later is never collected: bounded by what start-up allocated, and start-up's modules and
    classes live as long as the process anyway. Call it once, after the imports."""
    before = gc.get_threshold()
    gc.collect()  # start-up's own cycles are freed, not frozen
    gc.freeze()
    gc.set_threshold(gen0_threshold, before[1], before[2])
    return before


def _collect_and_freeze() -> None:
    gc.collect()  # the garbage there is: collected, its finalizers run, as the exit would
    gc.freeze()


def freeze_at_exit() -> None:
    """Spare the interpreter's exit its teardown collections: at exit (an atexit handler, so
    after the command's own stop and before the modules are torn down), collect the garbage
    there is, then freeze what is still alive. The teardown then frees by reference count what
    it can and leaves the modules' own cycles (functions, classes) to the operating system,
    which reclaims the whole process anyway, instead of walking and freeing each one: 0.3 to
    0.7 s of every stop of `harvest dev` and `harvest serve` (some 80,000 objects from uvicorn,
    Starlette and the management API), after the stop had done everything it has to. Nothing
    a stop does is skipped: the worker, the server and the pools are closed before, and
    logging's own atexit handler still flushes. Registered once, however often it is called
    (an in-process caller, a test, freezes only at its own exit)."""
    atexit.unregister(_collect_and_freeze)
    atexit.register(_collect_and_freeze)
