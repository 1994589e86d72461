"""The weight path from CUDA tensors: publish a CUDA state dict over real ZeroMQ (tcp
loopback PUB/SUB), receive it on the CPU bit-exact (same bytes, dtype, shape)."""

from __future__ import annotations

import time

import torch
from gpu_helpers import gpu

from agent_r1_async.weights.zmq import WeightSubscriber, ZmqWeightSender
from agent_r1_async.wire.zmq import ZmqTransport

pytestmark = gpu


def test_cuda_state_dict_arrives_bit_exact_on_cpu():
    g = torch.Generator(device="cuda").manual_seed(0)
    sd = {
        "w.fp32": torch.randn(256, 128, device="cuda", generator=g),
        "w.bf16": torch.randn(64, 96, device="cuda", generator=g).to(torch.bfloat16),
        "w.fp16": torch.randn(33, device="cuda", generator=g).to(torch.float16),
        "w.int64": torch.arange(7, device="cuda"),
        "w.strided": torch.randn(8, 24, device="cuda", generator=g).t(),  # non-contiguous
        "w.scalar": torch.tensor(2.5, device="cuda"),
    }
    transport = ZmqTransport()
    pub = ZmqWeightSender(transport)
    sub = WeightSubscriber(transport, pub.endpoint)
    try:
        got, deadline = None, time.monotonic() + 10
        while got is None and time.monotonic() < deadline:  # PUB/SUB slow joiner
            pub.publish(3, sd)
            got = sub.poll(timeout_ms=200)
        assert got is not None, "weights never arrived"
        header, tensors = got
    finally:
        sub.close()
        pub.close()
        transport.close()
    assert header.version == 3 and sub.rejected == 0
    assert list(tensors) == list(sd)
    for name, t in sd.items():
        r = tensors[name]
        assert r.device.type == "cpu" and r.dtype == t.dtype and r.shape == t.shape, name
        want = t.cpu().contiguous().reshape(-1).view(torch.uint8)
        assert torch.equal(r.contiguous().reshape(-1).view(torch.uint8), want), name
