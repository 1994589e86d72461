"""Build the configured weight backend (`weights.backend`) on either side of the seam (seam.py).

Backends are imported only when chosen: the native ones need vLLM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_r1_async.config import NativeWeights
from agent_r1_async.weights.seam import WeightReceiver, WeightSender
from agent_r1_async.wire.transport import Transport

if TYPE_CHECKING:
    from agent_r1_async.config import RunConfig


def make_weight_sender(cfg: RunConfig, transport: Transport) -> WeightSender:
    """The configured backend's learner side, bound to `launch.bind_host`."""
    from agent_r1_async.wire.transport import tcp_endpoint

    w = cfg.weights
    if not isinstance(w, NativeWeights):
        from agent_r1_async.weights.zmq import ZmqWeightSender

        return ZmqWeightSender(transport, tcp_endpoint(cfg.launch.bind_host))
    from agent_r1_async.weights.native_sender import NativeWeightSender

    device = cfg.learner.device  # vllm_nccl / vllm_ipc send from the learner's GPU if named
    return NativeWeightSender(w.backend, cfg.launch.bind_host, w.rendezvous_port, w.timeout_s,
                              cuda_device=device if device.startswith("cuda:") else None)


def make_weight_receiver(
    cfg: RunConfig, transport: Transport, endpoint: str, actor_id: str
) -> WeightReceiver:
    """The configured backend's actor side, talking to the sender at `endpoint`."""
    w = cfg.weights
    if not isinstance(w, NativeWeights):
        from agent_r1_async.weights.zmq import ZmqWeightReceiver

        return ZmqWeightReceiver(transport, endpoint, actor_id)
    from agent_r1_async.precision import engine_dtype
    from agent_r1_async.weights.native_receiver import NativeWeightReceiver

    return NativeWeightReceiver(endpoint, actor_id, w.timeout_s, engine_dtype(cfg.engine, model=cfg.model.name_or_path))
