"""What a long-running process built as it started, kept out of the garbage collector's way.

A web or worker process holds some 130,000 objects once Django, the apps and their modules are
loaded, and every one of them lives as long as the process. CPython's full collection walks
them all each time it runs: 25-270 ms per collection on a 2-core machine, every few thousand
requests, and the call that waits behind it is the interceptor's p99. `gc.freeze()` moves them
to a generation the collector never scans, so a full collection walks only what requests made
since (bench/bench_interceptor.py prints the collections each side ran and how long they took).
Nothing is leaked: what is frozen would live for ever anyway, and cycles made later are
collected as before.

A worker also makes its young collections rarer (EVALHUB_WORKER_GC_GEN0, 50,000 allocations
where CPython waits 700): its runner's rollouts in flight are thousands of live objects, and
each young collection walked them again, about 230 ms of a 4,000-rollout job (docs/performance.md).
The web process keeps CPython's threshold: a collection of 50,000 objects would be a pause of
10-20 ms in the interceptor's tail.
"""

from __future__ import annotations

import gc


def startup_heap_freeze(*, young_threshold: int | None = None) -> int:
    """Collect once, then freeze what is left; how many objects were frozen. With
    `young_threshold` (a worker's, above), the allocations between two young collections from
    now on; the older generations keep their thresholds."""
    gc.collect()
    gc.freeze()
    if young_threshold is not None:
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(young_threshold, older, oldest)
    return gc.get_freeze_count()
