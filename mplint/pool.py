"""Worker processes for per-file work, and the collector settings that make syntax trees cheap.

Workers are forked after the project's state is set, so nothing but indexes and results crosses
the process boundary. Runs of a few files stay in-process (a pool costs more than it saves).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable

POOL_MIN_FILES = 8
_WORK: tuple[Callable, list] | None = None


def _work_on(index: int):
    function, items = _WORK
    return function(items[index])


def parallel_map(
    function: Callable, items: list, jobs: int | None, on_result: Callable[[], None] | None = None
) -> list:
    """``[function(item) for item in items]``, over a fork pool of ``jobs`` workers when it pays."""
    global _WORK
    jobs = jobs or os.cpu_count() or 1
    if jobs <= 1 or len(items) < POOL_MIN_FILES or not hasattr(os, "fork"):
        with _fewer_collections():
            results = []
            for item in items:
                results.append(function(item))
                if on_result:
                    on_result()
            return results
    import multiprocessing  # a pool only when there is work for one: warm runs never start it
    from concurrent.futures import ProcessPoolExecutor

    _WORK = (function, items)
    gc.freeze()  # objects alive now (modules, the catalog) stay shared with the forked workers, never copied
    try:
        with ProcessPoolExecutor(
            max_workers=min(jobs, len(items)), mp_context=multiprocessing.get_context("fork"), initializer=_tune_worker
        ) as pool:
            results = []
            # Small chunks: a few files of a project cost most of its time, and must not queue behind each other.
            for result in pool.map(_work_on, range(len(items)), chunksize=max(1, len(items) // (jobs * 32))):
                results.append(result)
                if on_result:
                    on_result()
    finally:
        _WORK = None
        gc.unfreeze()
    return results


# Syntax trees make millions of short-lived objects: CPython's default collector thresholds rescan
# them constantly (about a tenth of a cold run). Workers collect less often; the calling process only
# while it does the same work in-process, and gets its settings back afterwards.
_THRESHOLDS = (50_000, 20, 50)


def _tune_worker() -> None:
    gc.set_threshold(*_THRESHOLDS)


class _fewer_collections:
    def __enter__(self):
        self.saved = gc.get_threshold()
        gc.set_threshold(*_THRESHOLDS)

    def __exit__(self, *exc) -> None:
        gc.set_threshold(*self.saved)
