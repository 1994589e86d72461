"""How long vLLM's processes busy-wait on each other (`engine.ipc_busy_wait_s`).

vLLM's engine core and its worker pass every step through a shared-memory queue. A reader of
that queue spins (`sched_yield` in a loop) for `busy_loop_s` after its last read before it
parks on a ZeroMQ notification, and vLLM fixes that window at 1 s. Steps come every few
milliseconds while it generates, so the window never lapses: the engine core spins for the
whole of every forward pass its worker computes, a whole CPU core that does nothing. On a
GPU host that core is spare; on a CPU host it is the core the learner, the actor's event loop
and the buffer share with it (2 cores here: the worker's OpenMP thread holds one), and
`engine.ipc_busy_wait_s: 0` gives it back to them.

This module is a `vllm.general_plugins` entry point (pyproject.toml): vLLM calls `apply()` in
every process it starts, and the engine core and worker are spawned, so no setting made in
our process reaches them but through the environment. `VllmEngine` puts a set window in `ENV`
before it starts vLLM (`export`); `apply()` reads it and makes every reader of the queue use it
(readers made before `apply()` ran too: the window is read at each wait). Without `ENV` (the
key unset, or vLLM started by anything else) vLLM is left as it ships.
"""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping
from typing import Any

ENV = "AGENT_R1_ASYNC_VLLM_BUSY_WAIT_S"
"""The busy-wait window in seconds, as `VllmEngine` resolved `engine.ipc_busy_wait_s`."""

log = logging.getLogger(__name__)


def export(busy_wait_s: float | None, environ: MutableMapping[str, str] = os.environ) -> None:
    """`engine.ipc_busy_wait_s` for the vLLM processes about to start: a set window in `ENV`;
    unset, `ENV` removed (one an earlier engine of this process set too), so vLLM keeps its own
    1 s and is not patched. Parking (0) frees the core the engine core spins on, but each step
    then waits for a ZeroMQ wake-up: with a tiny model (steps of a few ms) generation is slower,
    and a `vllm_gloo` weight update lands later (BENCHMARKS "vLLM's busy-wait"), so it is not
    the default."""
    if busy_wait_s is None:
        environ.pop(ENV, None)
    else:
        environ[ENV] = str(float(busy_wait_s))


def apply() -> None:
    """Make vLLM's shared-memory queue readers busy-wait `ENV` seconds (entry point)."""
    raw = os.environ.get(ENV)
    if raw is None:
        return
    try:
        window = float(raw)
    except ValueError:
        log.warning("%s=%r is not a number of seconds: vLLM keeps its own busy-wait", ENV, raw)
        return
    try:
        from vllm.distributed.device_communicators.shm_broadcast import SpinCondition
    except ImportError:
        log.warning("engine.ipc_busy_wait_s: this vLLM has no SpinCondition; it keeps its own "
                    "busy-wait")
        return
    patch(SpinCondition, window)


def patch(cls: Any, window: float) -> None:
    """Make every reader of `cls` (vLLM's SpinCondition) use `window` at each wait; calling it
    again only changes the window."""
    cls.agent_r1_busy_wait_s = window
    if getattr(cls, "agent_r1_patched", False):
        return
    original = cls.wait

    def wait(self: Any, timeout_ms: int | None = None) -> None:
        if self.is_reader:
            self.busy_loop_s = cls.agent_r1_busy_wait_s
        original(self, timeout_ms)

    cls.wait = wait
    cls.agent_r1_patched = True
