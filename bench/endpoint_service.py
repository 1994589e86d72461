"""The endpoint benches' service: the tiny model on the transformers engine (fp32), behind a
`GenerationService`, and recorded sessions whose step records are counted, not kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def tiny_service(max_new: int) -> tuple[Any, Any, Any, Callable[[], Any]]:
    """(tokenizer, engine, service, new_session): `new_session()` opens a recorded session."""
    from agent_r1_async.actors.context import FullContext
    from agent_r1_async.actors.endpoint.params import EngineSampling
    from agent_r1_async.actors.endpoint.recorder import StepRecorder
    from agent_r1_async.actors.endpoint.service import GenerationService
    from agent_r1_async.actors.endpoint.sessions import Session, SessionStore
    from agent_r1_async.actors.engines.base import SamplingSettings
    from agent_r1_async.actors.engines.hf import HFEngine
    from agent_r1_async.actors.rollout import EpisodeIds
    from agent_r1_async.config import EngineConfig
    from agent_r1_async.models import load_tokenizer, tiny_model_dir

    path = tiny_model_dir()
    tok = load_tokenizer(path)
    cfg = EngineConfig(backend="hf", dtype="float32", max_new_tokens=max_new, temperature=1.0)
    engine = HFEngine(cfg, path, SamplingSettings.from_config(cfg, seed=0), 2048)
    service = GenerationService(
        engine=engine, tokenizer=tok, builder=FullContext(),
        sampling=EngineSampling(max_new_tokens=max_new, temperature=1.0),
        max_model_len=2048, vocab_size=len(tok), model_name="tiny")
    opened = 0

    async def emit(msg: Any) -> None:
        return None

    def new_session() -> Session:
        nonlocal opened
        opened += 1
        recorder = StepRecorder(EpisodeIds(f"ep-{opened}", f"g-{opened}", 1),
                                f"task-{opened}", "actor-0", "blackbox", emit)
        return service.sessions.open(Session(SessionStore.new_id(), tok, None, recorder))

    return tok, engine, service, new_session
