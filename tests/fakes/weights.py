"""A weight-receiving engine for the native weight path without a vLLM model: our real
`GlooWeightTransferEngine` (real gloo group, real checksum check) whose final load into a
vLLM model is replaced by recording the tensors. It speaks the same three calls as
`VllmEngine` (join_weight_transfer / receive_weights / leave_weight_transfer)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import torch


def _worker():
    from agent_r1_async.weights.gloo import GlooWeightTransferEngine

    class RecordingGlooEngine(GlooWeightTransferEngine):
        def _load_into_model(self, named):
            self.loaded = {n: t.clone() for n, t in named}
            self._loaded = False  # nothing to finalize: no vLLM model

    parallel = SimpleNamespace(data_parallel_index=0, world_size=1, rank=0)
    return RecordingGlooEngine(None, SimpleNamespace(parallel_config=parallel, model_config=None),
                               torch.device("cpu"), None)


class GlooRecordingEngine:
    """`version` and `weights` (the last loaded tensors); `stall_receive` makes the next
    receive never enter the collective (a hung or dead actor)."""

    def __init__(self) -> None:
        self.worker = _worker()
        self.version = 0
        self.weights: dict[str, torch.Tensor] = {}
        self.stall_receive = False
        self.joined = 0

    async def join_weight_transfer(self, init_info: dict) -> None:
        w = self.worker
        await asyncio.to_thread(w.init_transfer_engine, w.parse_init_info(init_info))
        self.joined += 1

    async def load_weights(self, version: int, state_dict: dict[str, torch.Tensor]) -> None:
        """The zmq backend's path; a native receiver must never take it."""
        raise AssertionError("a native weight receiver loaded a whole state dict")

    async def receive_weights(self, version: int, update_info: dict) -> None:
        if self.stall_receive:
            self.stall_receive = False
            await asyncio.sleep(3600)  # the channel's timeout must end this
        w = self.worker

        def run() -> None:
            w.start_weight_update()
            w.update_weights(update_info)
            w.finish_weight_update()

        await asyncio.to_thread(run)
        self.weights = w.loaded
        self.version = version

    async def leave_weight_transfer(self) -> None:
        self.worker.shutdown()


def _die_after_first(real_broadcast_all):
    """A `_broadcast_all` that moves the first tensor, then kills its process (no cleanup,
    sockets closed by the kernel, as SIGKILL would)."""
    import os

    def broadcast_all(group, tensors, timeout_s):
        real_broadcast_all(group, tensors[:1], timeout_s)
        os._exit(9)

    return broadcast_all


def learner_that_dies_mid_transfer(q) -> None:
    """Child process: a real `NativeWeightSender` that dies after the first tensor of v1."""
    from agent_r1_async.weights import gloo
    from agent_r1_async.weights.native_sender import NativeWeightSender

    gloo._broadcast_all = _die_after_first(gloo._broadcast_all)
    sender = NativeWeightSender("vllm_gloo", "127.0.0.1", 0, 3.0)
    q.put(sender.endpoint)
    q.get()  # the actor joined
    sender.publish(1, {"a": torch.ones(1000), "b": torch.ones(1000)})
    q.get()  # never answered: the process dies in the transfer


def actor_that_dies_mid_transfer(endpoint: str) -> None:
    """Child process: an actor whose worker dies after the first tensor of its first update."""
    from agent_r1_async.weights import gloo
    from agent_r1_async.weights.native_receiver import NativeWeightReceiver

    gloo._broadcast_all = _die_after_first(gloo._broadcast_all)
    engine = GlooRecordingEngine()
    channel = NativeWeightReceiver(endpoint, "doomed", 3.0)

    async def run() -> None:
        while True:
            await channel.update(engine)
            await asyncio.sleep(0.01)

    asyncio.run(run())
