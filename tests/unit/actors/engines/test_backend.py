"""A configured engine backend that cannot start fails loudly: never a silent fallback."""

from __future__ import annotations

import sys

import msgspec
import pytest

from agent_r1_async.actors.engines import make_engine, require_backend
from agent_r1_async.config import ConfigError, RunConfig
from agent_r1_async.run.preflight.checks import preflight


@pytest.fixture
def no_vllm(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError


def _cfg(backend: str, eval_backend: str = "", in_launch: bool = False) -> RunConfig:
    cfg = RunConfig()
    return msgspec.structs.replace(
        cfg,
        engine=msgspec.structs.replace(cfg.engine, backend=backend),
        eval=msgspec.structs.replace(cfg.eval, backend=eval_backend, in_launch=in_launch),
    )


def test_vllm_backend_without_vllm_fails_before_anything_starts(no_vllm):
    with pytest.raises(ConfigError) as err:
        preflight(_cfg("vllm"))
    msg = str(err.value)
    assert msg.startswith("engine.backend:") and "bash scripts/setup.sh" in msg
    with pytest.raises(RuntimeError, match="vLLM is not importable"):
        make_engine(_cfg("vllm"), "unused-model-path")


def test_the_eval_backend_is_checked_only_when_the_launch_evaluates(no_vllm):
    preflight(_cfg("hf", eval_backend="vllm", in_launch=False))  # no evaluation: nothing to check
    with pytest.raises(ConfigError, match=r"^eval\.backend:"):
        preflight(_cfg("hf", eval_backend="vllm", in_launch=True))


def test_hf_backend_needs_no_vllm(no_vllm):
    require_backend("hf")
    preflight(_cfg("hf"))
