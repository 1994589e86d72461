"""engine.ipc_busy_wait_s: the window resolves per host, and the patch makes every reader of
vLLM's shared-memory queue wait with it (readers made before the patch too), writers untouched;
engine.cpu_reserved_cores reaches vLLM's environment and leaves it with the engine."""

from __future__ import annotations

import pytest

from agent_r1_async.actors.engines import vllm_wait
from agent_r1_async.config import EngineConfig
from tests.setup_needs import require_module


class Spin:
    """The part of vLLM's SpinCondition the patch relies on: `is_reader`, `busy_loop_s` and
    `wait(timeout_ms)`, which reads `busy_loop_s` on each call."""

    def __init__(self, is_reader: bool, busy_loop_s: float = 1.0) -> None:
        self.is_reader = is_reader
        self.busy_loop_s = busy_loop_s
        self.seen: list[tuple[float, int | None]] = []

    def wait(self, timeout_ms: int | None = None) -> None:
        self.seen.append((self.busy_loop_s, timeout_ms))


def test_unset_leaves_vllm_its_own_window_and_a_set_value_is_exported():
    environ = {vllm_wait.ENV: "0.0"}  # an earlier engine of this process parked
    vllm_wait.export(None, environ)
    assert environ == {}  # apply() then changes nothing: vLLM's own 1 s
    vllm_wait.export(0.25, environ)
    assert environ == {vllm_wait.ENV: "0.25"}
    vllm_wait.export(0, environ)
    assert environ == {vllm_wait.ENV: "0.0"}


def test_config_names_the_key_of_a_bad_window():
    with pytest.raises(ValueError, match=r"engine\.ipc_busy_wait_s"):
        EngineConfig(ipc_busy_wait_s=-1.0)
    assert EngineConfig(ipc_busy_wait_s=0.002).ipc_busy_wait_s == 0.002


def test_patch_sets_the_window_of_readers_made_before_it_and_leaves_writers_alone():
    class Cls(Spin):
        pass

    before = Cls(is_reader=True)
    writer = Cls(is_reader=False, busy_loop_s=0.0)
    vllm_wait.patch(Cls, 0.0)
    after = Cls(is_reader=True, busy_loop_s=1.0)
    before.wait(5)
    after.wait()
    writer.busy_loop_s = 7.0
    writer.wait(3)
    assert before.seen == [(0.0, 5)]
    assert after.seen == [(0.0, None)]
    assert writer.seen == [(7.0, 3)]
    vllm_wait.patch(Cls, 0.5)  # again: only the window changes, the wrapper is not stacked
    before.wait(1)
    assert before.seen[-1] == (0.5, 1)
    assert len(before.seen) == 2


def test_apply_without_the_variable_changes_nothing(monkeypatch):
    require_module("vllm")
    from vllm.distributed.device_communicators.shm_broadcast import SpinCondition

    monkeypatch.delenv(vllm_wait.ENV, raising=False)
    wait = SpinCondition.wait
    vllm_wait.apply()
    assert SpinCondition.wait is wait


def test_reserved_cores_are_exported_then_given_back_to_what_the_process_inherited():
    from agent_r1_async.actors.engines.vllm import RESERVED_CORES_ENV, export_reserved_cores

    env: dict[str, str] = {}
    export_reserved_cores(0, env, inherited=None)
    assert env == {RESERVED_CORES_ENV: "0"}
    export_reserved_cores(None, env, inherited=None)  # a later engine with the key unset
    assert env == {}
    export_reserved_cores(None, env, inherited="2")  # the user's own setting comes back
    assert env == {RESERVED_CORES_ENV: "2"}
    export_reserved_cores(1, env, inherited="2")
    assert env == {RESERVED_CORES_ENV: "1"}


def test_reserved_cores_must_be_a_count():
    with pytest.raises(ValueError, match=r"engine\.cpu_reserved_cores"):
        EngineConfig(cpu_reserved_cores=-1)
    assert EngineConfig(cpu_reserved_cores=0).cpu_reserved_cores == 0
    assert EngineConfig().cpu_reserved_cores is None
