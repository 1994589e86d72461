"""in_subprocess: a result or the child's exception; an interrupted child ends with what it
started."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from agent_r1_async.run.processes.child import in_subprocess, say


def _start_sleeper_then_wait() -> None:
    """Starts a grandchild (as vLLM starts its engine core), names it, then works forever."""
    sleeper = subprocess.Popen(["sleep", "600"])
    say(str(sleeper.pid))
    time.sleep(600)


def _double(x: int) -> int:
    return 2 * x


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (exited, not yet reaped) is not alive
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_result_and_error_come_back() -> None:
    assert in_subprocess(_double, 21) == 42
    with pytest.raises(TypeError):
        in_subprocess(_double, None)


def test_an_interrupted_child_takes_what_it_started_with_it() -> None:
    seen: list[int] = []

    def on_message(msg: tuple) -> None:
        if msg[0] == "say":
            seen.append(int(msg[1]))
            raise KeyboardInterrupt  # the launch's Ctrl-C, while the child works

    with pytest.raises(KeyboardInterrupt):
        in_subprocess(_start_sleeper_then_wait, on_message=on_message)
    (grandchild,) = seen
    deadline = time.monotonic() + 30  # a hang guard: the group is signalled before return
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild)
