"""bench.children.next_message: a result put just before exit is read; a dead child is an error
at once, not after the timeout; a live silent child times out."""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

import pytest

from bench.children import next_message


def _put_then_exit(q: Any, value: int) -> None:
    q.put(value)


def _fail(q: Any) -> None:
    raise SystemExit(3)


def _sleep(q: Any, seconds: float) -> None:
    time.sleep(seconds)


def _start(target: Any, *args: Any) -> tuple[Any, Any]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=target, args=(q, *args))
    proc.start()
    return q, proc


def test_reads_a_message_put_just_before_exit() -> None:
    q, proc = _start(_put_then_exit, 41)
    proc.join(60)
    assert proc.exitcode == 0
    assert next_message(q, proc, 30) == 41


def test_a_dead_child_is_an_error_long_before_the_timeout() -> None:
    q, proc = _start(_fail)
    proc.join(60)
    # A RuntimeError, not the TimeoutError that waiting out the 600 s would end in.
    with pytest.raises(RuntimeError, match=r"the child process exited \(exit code 3\)"):
        next_message(q, proc, 600)


def test_one_failed_rank_of_several_is_an_error() -> None:
    q, failed = _start(_fail)
    ctx = mp.get_context("spawn")
    alive = ctx.Process(target=_sleep, args=(q, 30.0))
    alive.start()
    try:
        failed.join(60)
        with pytest.raises(RuntimeError, match="exit code 3"):
            next_message(q, [failed, alive], 600, "the ranks")
    finally:
        alive.terminate()
        alive.join(10)


def test_a_live_silent_child_times_out() -> None:
    q, proc = _start(_sleep, 30.0)
    try:
        with pytest.raises(TimeoutError, match="no word from the sleeper in 2 s"):
            next_message(q, proc, 2, "the sleeper")
    finally:
        proc.terminate()
        proc.join(10)
