"""Run one function in a fresh spawned process (warm start, held-out evaluations).

The child writes everything (its prints, vLLM, transformers, warnings) to its own log file
when one is given (run/output/logs.py); it speaks to the launch console only through `say` (a
line) and `progress` (done / total of its stage), which travel back over a queue and reach
`on_message` in the parent. Called outside such a child, `say` prints and `progress` does
nothing, so the same code runs in `agent-r1-async sft` and `eval`.
"""

from __future__ import annotations

import contextlib
import os
import queue as queue_mod
import signal
from collections.abc import Callable
from typing import Any

_QUEUE: Any = None


def say(line: str) -> None:
    """A line for the launch console (printed when not inside `in_subprocess`)."""
    if _QUEUE is not None:
        _QUEUE.put(("say", line))
    else:
        print(line, flush=True)


def progress(done: float, total: float) -> None:
    """This child's stage progress (the parent draws it as a bar on a terminal)."""
    if _QUEUE is not None:
        _QUEUE.put(("progress", done, total))


def _main(fn: Any, args: tuple, q: Any, log_path: str | None) -> None:
    global _QUEUE
    _QUEUE = q
    os.setpgrp()  # a group of its own: the processes it starts (vLLM's engine) end with it
    if log_path:
        from agent_r1_async.run.output.logs import redirect_output

        redirect_output(log_path)
    try:
        result = fn(*args)
    except BaseException as e:
        import traceback

        traceback.print_exc()  # the full story stays in the child's log
        try:
            q.put(("error", e))
        except Exception:  # an exception that does not pickle: its text
            q.put(("error", RuntimeError(f"{type(e).__name__}: {e}")))
        return
    q.put(("result", result))


def in_subprocess(fn: Any, *args: Any, log_path: str | None = None,
                  on_message: Callable[[tuple], None] | None = None) -> Any:
    """`fn(*args)` in a fresh spawned process; its return value, or its exception re-raised.

    The warm start and the held-out evaluations run this way: a trainer or an engine leaves
    gigabytes in the allocator of the process that ran it, and the driver stays alive (next
    to the learner and the actors) for the whole run. `log_path`: the child's output goes
    there; `on_message`: receives its `("say", line)` and `("progress", done, total)`.
    """
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_main, args=(fn, args, q, log_path), daemon=False)
    proc.start()
    finished = False
    try:
        while True:
            try:
                msg = q.get(timeout=1.0)
            except queue_mod.Empty:
                if not proc.is_alive() and q.empty():
                    where = f"; see {log_path}" if log_path else ""
                    raise RuntimeError(f"{getattr(fn, '__name__', fn)} ended without a result "
                                       f"(exit code {proc.exitcode}){where}") from None
                continue
            if msg[0] in ("result", "error"):
                finished = True
                if msg[0] == "error":
                    raise msg[1]
                return msg[1]
            if on_message is not None:
                on_message(msg)
            elif msg[0] == "say":
                print(msg[1], flush=True)
    finally:
        if not finished:  # interrupted (Ctrl-C, SIGTERM): the child may still be working
            proc.terminate()
            _signal_group(proc.pid, signal.SIGTERM)
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
            proc.join()
        if not finished:  # what the child started (an engine core) and left behind
            _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pid: int | None, sig: int) -> None:
    """`sig` to the process group the child leads (it calls setpgrp first); nothing when
    the group is gone, or when the child died before making it (the group would be ours)."""
    if pid is None:
        return
    try:
        if os.getpgid(pid) != pid:
            return
    except ProcessLookupError:  # the child is gone; its group may live on without it
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
