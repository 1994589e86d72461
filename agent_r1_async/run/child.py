"""Run one function in a fresh spawned process (warm start, held-out evaluations)."""

from __future__ import annotations

from typing import Any


def in_subprocess(fn: Any, *args: Any) -> Any:
    """`fn(*args)` in a fresh spawned process; its return value, or its exception re-raised.

    The warm start and the held-out evaluations run this way: a trainer or an engine leaves
    gigabytes in the allocator of the process that ran it, and the driver stays alive (next
    to the learner and the actors) for the whole run.
    """
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()
