"""Actor side of the native weight backends (weights.backend: vllm_gloo | vllm_nccl |
vllm_ipc).

Each `update(engine)` (once per actor loop turn):
  not joined → join: take a pair number in the learner's store, wait for the learner's init
               payload, `engine.join_weight_transfer(payload)` (vLLM's
               `init_weight_transfer_engine`: the worker forms the group), acknowledge;
  joined     → is offer k+1 there? then `engine.receive_weights(version, update_info)`
               (pause keep → start → update_weights → reset prefix cache →
               finish_weight_update(weight_version) → resume; see the vLLM engine) and
               acknowledge with the version and checksum the worker verified.

Failures never raise out of `update`, never hang: every store wait and every engine call is
bounded by `weights.timeout_s` (+ a margin for the engine's own bookkeeping). That bounds the
actor's call on every backend; the worker inside the engine is bounded by its own timeouts on
gloo (gloo.py), waits on no peer on IPC (it opens the learner's memory locally, ipc.py), and
is bounded by nothing on NCCL, where vLLM gives the receive no timeout (nccl.py). A checksum
mismatch rejects that version (`rejected`, the pair stays); anything else (timeout, learner
gone) counts in `failed`, is logged, the actor leaves the group and re-joins as a new pair
(after `_REJOIN_S`), and keeps serving the weights it has meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import torch.distributed as dist

from agent_r1_async.weights.rendezvous import (
    connect_store,
    parse_endpoint,
    reachable_init_info,
    wait_get,
)
from agent_r1_async.weights.seam import Applied, NativeWeightTarget, WeightTarget

log = logging.getLogger(__name__)
_REJOIN_S = 1.0
_MARGIN_S = 10.0


def _native(engine: WeightTarget) -> NativeWeightTarget:
    """`engine`, or a TypeError (counted as a failure by the caller) when it cannot join."""
    if not isinstance(engine, NativeWeightTarget):
        raise TypeError(f"{type(engine).__name__} has no native weight transfer "
                        "(join_weight_transfer, receive_weights, leave_weight_transfer)")
    return engine


class NativeWeightReceiver:
    """`WeightReceiver` for an engine with `join_weight_transfer`, `receive_weights` and
    `leave_weight_transfer` (the vLLM engine)."""

    def __init__(
        self, endpoint: str, actor_id: str, timeout_s: float = 30.0, dtype: str | None = None
    ) -> None:
        self.host, self.port, self.token = parse_endpoint(endpoint)
        self.actor_id = actor_id
        self.dtype = dtype
        """The engine's dtype: the learner casts floating tensors to it before sending (what
        vLLM would do on load anyway; bf16 halves the bytes sent while generation pauses)."""
        self.timeout_s = timeout_s
        self.failed = 0
        self.rejected = 0
        self.joins = 0
        self._store: dist.TCPStore | None = None
        self._pair: str | None = None
        self._k = 0
        self._next_join = 0.0

    async def update(self, engine: WeightTarget) -> Applied | None:
        if self._pair is None:
            if time.monotonic() < self._next_join:
                return None
            try:
                await self._join(engine)
            except Exception as e:
                await self._fail(engine, f"joining the learner's weight group failed: {e}")
                return None
        key = f"{self._pair}/offer/{self._k + 1}"
        try:
            store = self._connected()
            if not await asyncio.to_thread(store.check, [key]):
                return None
            offer = json.loads(await asyncio.to_thread(store.get, key))
        except Exception as e:  # the learner's store is gone (learner died or restarted)
            await self._fail(engine, f"weights store unreachable: {e}")
            return None
        self._k += 1
        return await self._apply(engine, offer)

    def close(self) -> None:
        self._store = None

    # ------------------------------------------------------------------ steps

    def _connected(self) -> dist.TCPStore:
        """The store of the pair this actor is in (it is set while `_pair` is)."""
        if self._store is None:
            raise RuntimeError("not connected to the learner's weights store")
        return self._store

    async def _join(self, engine: WeightTarget) -> None:
        target = _native(engine)
        if self._store is None:
            self._store = await asyncio.to_thread(
                connect_store, self.host, self.port, self.timeout_s)
        store = self._store
        n = await asyncio.to_thread(store.add, f"{self.token}/joins", 1)
        pair = f"{self.token}/pair/{n}"
        if self.dtype is not None:  # before the id: the learner reads it once the id is there
            await asyncio.to_thread(store.set, f"{self.token}/join/{n}/dtype", self.dtype)
        await asyncio.to_thread(store.set, f"{self.token}/join/{n}", self.actor_id)
        raw = await asyncio.to_thread(wait_get, store, f"{pair}/init", self.timeout_s,
                                      f"the learner never accepted pair {n}")
        try:
            info = reachable_init_info(json.loads(raw), self.host)
            await asyncio.wait_for(target.join_weight_transfer(info),
                                   self.timeout_s + _MARGIN_S)
        except BaseException as e:
            await asyncio.to_thread(store.set, f"{pair}/init_ack", f"error: {e}")
            raise
        await asyncio.to_thread(store.set, f"{pair}/init_ack", "ok")
        self._pair, self._k = pair, 0
        self.joins += 1
        log.info("%s: joined the weight group (pair %d)", self.actor_id, n)

    async def _apply(self, engine: WeightTarget, offer: dict[str, Any]) -> Applied | None:
        version, checksum = offer["version"], offer["checksum"]
        ack_key = f"{self._pair}/ack/{self._k}"
        try:
            await asyncio.wait_for(_native(engine).receive_weights(version, offer["update_info"]),
                                   self.timeout_s + _MARGIN_S)
        except Exception as e:
            text = f"{type(e).__name__}: {e}"
            rejected = "checksum mismatch" in text
            await self._ack(ack_key, {"ok": False, "rejected": rejected, "version": version,
                                      "error": text[:2000]})
            if rejected:
                self.rejected += 1
                log.error("%s: weights v%d rejected: %s", self.actor_id, version, text)
            else:
                await self._fail(engine, f"receiving weights v{version} failed: {text}")
            return None
        await self._ack(ack_key, {"ok": True, "version": version, "checksum": checksum})
        return Applied(version, offer["published_at"])

    async def _ack(self, key: str, body: dict[str, Any]) -> None:
        try:
            await asyncio.to_thread(self._connected().set, key, json.dumps(body))
        except Exception as e:  # the learner times out on its side and drops the pair
            log.error("%s: could not acknowledge %s: %s", self.actor_id, key, e)

    async def _fail(self, engine: WeightTarget, why: str) -> None:
        """Count, log, leave the group (if in one) and re-join after `_REJOIN_S`."""
        self.failed += 1
        log.error("%s: %s; re-joining in %.0f s", self.actor_id, why, _REJOIN_S)
        if self._pair is not None:
            self._pair = None
            try:
                await asyncio.wait_for(_native(engine).leave_weight_transfer(), self.timeout_s)
            except Exception as e:
                log.error("%s: leaving the weight group failed: %s", self.actor_id, e)
        self._store = None  # reconnect: the learner may have restarted
        self._next_join = time.monotonic() + _REJOIN_S
