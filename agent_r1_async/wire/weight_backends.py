"""Choose the weight channel's backend from `weights.backend` (the seam: weight_channel.py).

Backends are imported only when chosen: the native ones need vLLM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_r1_async.wire.transport import Transport
from agent_r1_async.wire.weight_channel import WeightChannel, WeightSender

if TYPE_CHECKING:
    from agent_r1_async.config import RunConfig


def make_weight_sender(cfg: RunConfig, transport: Transport) -> WeightSender:
    """The configured backend's learner side, bound to `launch.bind_host`."""
    from agent_r1_async.wire.transport import tcp_endpoint

    if cfg.weights.backend == "zmq":
        from agent_r1_async.wire.weights import WeightPublisher

        return WeightPublisher(transport, tcp_endpoint(cfg.launch.bind_host))
    from agent_r1_async.wire.vllm_sender import NativeWeightSender

    return NativeWeightSender(
        cfg.weights.backend, cfg.launch.bind_host, cfg.weights.rendezvous_port,
        cfg.weights.timeout_s,
    )


def make_weight_receiver(
    cfg: RunConfig, transport: Transport, endpoint: str, actor_id: str
) -> WeightChannel:
    """The configured backend's actor side, talking to the sender at `endpoint`."""
    if cfg.weights.backend == "zmq":
        from agent_r1_async.wire.weights import ZmqWeightChannel

        return ZmqWeightChannel(transport, endpoint, actor_id)
    from agent_r1_async.precision import engine_dtype
    from agent_r1_async.wire.vllm_receiver import NativeWeightChannel

    return NativeWeightChannel(endpoint, actor_id, cfg.weights.timeout_s, engine_dtype(cfg.engine))
