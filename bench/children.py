"""Waiting on a bench's spawned processes: the next message they put on a queue, or an error
as soon as they can no longer send one, instead of waiting out the whole timeout."""

from __future__ import annotations

import queue
import time
from collections.abc import Sequence
from typing import Any


def next_message(q: Any, procs: Any | Sequence[Any], timeout: float,
                 who: str = "the child process") -> Any:
    """The next item on `q` (a multiprocessing queue that `procs` put on).

    Raises RuntimeError once the queue is empty and either one of `procs` exited with a
    non-zero code or all of them exited (its traceback is on stderr); TimeoutError after
    `timeout` seconds otherwise. A message put just before its process exited is still read:
    the queue is checked after the process is found dead.
    """
    group = list(procs) if isinstance(procs, Sequence) else [procs]
    deadline = time.monotonic() + timeout
    while True:
        try:
            return q.get(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
        except queue.Empty:
            failed = [p.exitcode for p in group if not p.is_alive() and p.exitcode != 0]
            if (failed or all(not p.is_alive() for p in group)) and q.empty():
                codes = failed or [p.exitcode for p in group]
                raise RuntimeError(f"{who} exited (exit code {', '.join(map(str, codes))}) "
                                   "without a result") from None
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no word from {who} in {timeout:.0f} s") from None
