"""transformers engine: concurrent `generate` calls collected into one batched sampling loop.

Design choices
- The fallback engine where vLLM is not installed, and a second real engine to check vLLM's
  log-probs against. Concurrent `generate` calls queue up; a single server task takes all
  pending requests (up to `engine.max_concurrent_requests`), left-pads them into one batch
  and runs a KV-cached sampling loop in a worker thread, so the event loop (env steps,
  sockets) keeps running while the model computes. Requests that arrive during a batch wait
  for the next one (no continuous batching: that is what the vLLM engine is for).
- The sampling loop is our own rather than `model.generate`: the model's generation_config
  can carry hidden processors (top_k=50, repetition penalty) that would make the reported
  log-probs differ from the distribution actually sampled. Here the only processing is
  temperature then top-p (`agent_r1_async.sampling.process_logits`, the same function the
  learner differentiates), and `logprobs` are `log_softmax` of exactly those processed
  logits (vLLM's `logprobs_mode="processed_logprobs"`).
- Weights change only between batches (`load_weights` takes the same lock as a batch), so
  every action of a batch has one version and `token_versions` stays empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import torch

from agent_r1_async import precision
from agent_r1_async.actors.engines.base import (
    EngineError,
    GenResult,
    SamplingSettings,
)
from agent_r1_async.config import EngineConfig
from agent_r1_async.sampling import process_logits

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class _LoopBound:
    """Asyncio objects bound to the event loop the engine is used from."""

    loop: asyncio.AbstractEventLoop
    wakeup: asyncio.Event
    lock: asyncio.Lock
    server: asyncio.Task


@dataclass
class _Request:
    context_ids: list[int]
    budget: int
    future: asyncio.Future
    submitted: float = field(default_factory=time.perf_counter)


@dataclass
class _Row:
    """Per-row state of the sampling loop."""

    budget: int
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str = ""


class HFEngine:
    """Batched transformers sampling with exact behavior log-probs (see module docstring)."""

    def __init__(
        self,
        cfg: EngineConfig,
        model_path: str,
        sampling: SamplingSettings,
        max_model_len: int,
        model: torch.nn.Module | None = None,
        tokenizer: object | None = None,
        model_name: str | None = None,
    ) -> None:
        """`model_name`: the run's `model.name_or_path`, whose shapes `engine.dtype: auto` is
        measured at (precision.py); default `model_path`."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.sampling = sampling
        self.max_model_len = max_model_len
        self.max_batch = cfg.max_concurrent_requests
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(model_path)
        self.model = model or AutoModelForCausalLM.from_pretrained(
            model_path, dtype=_DTYPES[precision.engine_dtype(cfg, model=model_name or model_path)]
        )
        self.model.eval()
        self.eos_ids = _eos_ids(self.model, self.tokenizer)
        self.version = 0
        self._generator = torch.Generator().manual_seed(sampling.seed)
        self._pending: list[_Request] = []
        self._bound: _LoopBound | None = None
        self._closed = False

    # ---------------------------------------------------------------- public API

    async def generate(self, context_ids: list[int], max_new_tokens: int | None = None) -> GenResult:
        if self._closed:
            raise EngineError("engine is closed")
        if not context_ids:
            raise EngineError("empty context")
        bound = self._ensure_server()
        budget = self.sampling.budget(max_new_tokens, len(context_ids), self.max_model_len)
        req = _Request(list(context_ids), budget, asyncio.get_running_loop().create_future())
        self._pending.append(req)
        bound.wakeup.set()
        return await req.future

    async def load_weights(self, version: int, state_dict: dict[str, torch.Tensor]) -> None:
        """Load a full state dict between batches; `version` is served from the next batch."""
        async with self._ensure_server().lock:
            await asyncio.to_thread(self._load_state_dict, state_dict)
            self.version = version

    async def close(self) -> None:
        self._closed = True
        server = None if self._bound is None else self._bound.server
        if server is not None and not server.done():
            server.cancel()
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await server
        for req in self._pending:
            if not req.future.done():
                req.future.set_exception(EngineError("engine closed"))
        self._pending.clear()

    # ---------------------------------------------------------------- batching

    def _ensure_server(self) -> _LoopBound:
        loop = asyncio.get_running_loop()
        bound = self._bound
        if bound is not None and bound.loop is loop and not bound.server.done():
            return bound
        # First use, or a new event loop (evaluate() runs its own): fresh loop-bound state.
        self._pending = [r for r in self._pending if not r.future.done()]
        wakeup, lock = asyncio.Event(), asyncio.Lock()
        server = loop.create_task(self._serve(wakeup, lock), name="hf-engine")
        self._bound = _LoopBound(loop, wakeup, lock, server)
        return self._bound

    async def _serve(self, wakeup: asyncio.Event, lock: asyncio.Lock) -> None:
        while True:
            await wakeup.wait()
            wakeup.clear()
            while self._pending:
                batch = self._pending[: self.max_batch]
                del self._pending[: self.max_batch]
                await self._run_batch(batch, lock)

    async def _run_batch(self, batch: list[_Request], lock: asyncio.Lock) -> None:
        async with lock:
            version = self.version
            try:
                rows = await asyncio.to_thread(
                    self._sample_batch, [r.context_ids for r in batch], [r.budget for r in batch]
                )
            except Exception as e:  # one failed batch fails its requests, not the engine
                for req in batch:
                    if not req.future.done():
                        req.future.set_exception(EngineError(f"{type(e).__name__}: {e}"))
                return
        now = time.perf_counter()
        for req, row in zip(batch, rows, strict=True):
            if not req.future.done():  # the caller may have been cancelled (timeout)
                req.future.set_result(
                    GenResult(row.ids, row.logprobs, row.finish, version, [], now - req.submitted)
                )

    # ---------------------------------------------------------------- model work (thread)

    @torch.inference_mode()
    def _sample_batch(self, contexts: list[list[int]], budgets: list[int]) -> list[_Row]:
        from transformers import DynamicCache

        device = next(self.model.parameters()).device
        pad = self.eos_ids[0]
        width = max(len(c) for c in contexts)
        ids = torch.full((len(contexts), width), pad, dtype=torch.long)  # [B, L] left-padded
        mask = torch.zeros((len(contexts), width), dtype=torch.long)
        for i, c in enumerate(contexts):
            ids[i, width - len(c) :] = torch.tensor(c)
            mask[i, width - len(c) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, L]
        rows = [_Row(b) for b in budgets]
        cache = DynamicCache()
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions,
            past_key_values=cache, use_cache=True,
        )
        last_pos = positions[:, -1:]  # [B, 1]
        for _ in range(max(budgets)):
            logits = process_logits(out.logits[:, -1], self.sampling.temperature, self.sampling.top_p)
            logp = torch.log_softmax(logits, dim=-1)  # [B, V]
            nxt = torch.multinomial(logp.exp().cpu(), 1, generator=self._generator)  # [B, 1]
            picked = logp.cpu().gather(-1, nxt)  # [B, 1]
            for i, row in enumerate(rows):
                if not row.finish:
                    self._append(row, int(nxt[i, 0]), float(picked[i, 0]))
            if all(r.finish for r in rows):
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
            last_pos = last_pos + 1
            out = self.model(
                input_ids=nxt.to(device), attention_mask=mask, position_ids=last_pos,
                past_key_values=cache, use_cache=True,
            )
        return rows

    def _append(self, row: _Row, token: int, logprob: float) -> None:
        row.ids.append(token)
        row.logprobs.append(logprob)
        if token in self.eos_ids or (self.sampling.stop and self._hits_stop(row.ids)):
            row.finish = "stop"
        elif len(row.ids) >= row.budget:
            row.finish = "length"

    def _hits_stop(self, ids: list[int]) -> bool:
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return any(s in text for s in self.sampling.stop)

    def _load_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        result = self.model.load_state_dict(state_dict, strict=False)
        tied = {"lm_head.weight"} if _ties_embeddings(self.model) else set()
        missing = [k for k in result.missing_keys if k not in tied]
        if missing or result.unexpected_keys:
            raise ValueError(
                f"state dict does not match the engine's model: missing {missing[:5]}, "
                f"unexpected {list(result.unexpected_keys)[:5]}"
            )


def _ties_embeddings(model: torch.nn.Module) -> bool:
    return bool(getattr(model.config, "tie_word_embeddings", False))


def _eos_ids(model: torch.nn.Module, tokenizer: object) -> list[int]:
    """End-of-action ids: the tokenizer's eos first (it is also the pad), then the model's."""
    ids: list[int] = []
    tok_eos = getattr(tokenizer, "eos_token_id", None)
    if tok_eos is not None:
        ids.append(int(tok_eos))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for e in gen_eos if isinstance(gen_eos, list) else [gen_eos]:
        if e is not None and int(e) not in ids:
            ids.append(int(e))
    if not ids:
        raise ValueError("the model/tokenizer defines no eos token; actions could never stop")
    return ids
