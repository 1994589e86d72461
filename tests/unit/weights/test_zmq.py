"""Weight sync over real ZeroMQ (tcp loopback): bit-exact tensors, rejected frames, latency."""

from __future__ import annotations

import time

import pytest
import torch

from agent_r1_async.actors.engines.vllm import write_safetensors
from agent_r1_async.weights.zmq import WeightSubscriber, ZmqWeightSender, decode_weights
from agent_r1_async.wire import messages
from agent_r1_async.wire.zmq import ZmqTransport


@pytest.fixture
def transport():
    t = ZmqTransport()
    yield t
    t.close()


@pytest.fixture
def pubsub(transport):
    pub = ZmqWeightSender(transport)
    sub = WeightSubscriber(transport, pub.endpoint)
    try:
        yield pub, sub
    finally:
        sub.close()
        pub.close()


def _sync(pub, sub, version, sd, timeout_s=10.0):
    """Publish until the subscriber (slow joiner) has it; return (header, tensors, latency)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        header = pub.publish(version, sd)
        got = sub.poll(timeout_ms=200)
        if got is not None:
            return got[0], got[1], time.time() - header.published_at
    raise AssertionError("weights never arrived")


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _mixed_state_dict() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "w.fp32": torch.randn(7, 5, generator=g),
        "w.bf16": torch.randn(3, 4, generator=g).to(torch.bfloat16),
        "w.fp16": torch.randn(6, generator=g).to(torch.float16),
        "w.int64": torch.arange(5),
        "w.scalar": torch.tensor(3.5),
        "w.empty": torch.zeros(0, 4),
        "w.strided": torch.randn(4, 6, generator=g).t(),  # non-contiguous: snapshot fixes it
    }


def test_sync_is_bit_exact_including_bf16(pubsub):
    pub, sub = pubsub
    sd = _mixed_state_dict()
    header, got, _ = _sync(pub, sub, 7, sd)
    assert header.version == 7 and sub.version == 7
    assert list(got) == list(sd)
    for k, v in sd.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape
        # Bit for bit: compare the raw bytes, not the float values.
        assert torch.equal(_bytes(got[k]), _bytes(v))
    # The received tensors are owned (writable) memory, not views of the ZMQ frame.
    got["w.fp32"].add_(1.0)


def test_newest_version_wins_and_old_versions_are_ignored(pubsub):
    pub, sub = pubsub
    sd = {"x": torch.ones(3)}
    _sync(pub, sub, 1, sd)
    time.sleep(0.05)  # see the note on PUB drops in the malformed-messages test
    pub.publish(2, {"x": torch.full((3,), 2.0)})
    time.sleep(0.05)
    pub.publish(3, {"x": torch.full((3,), 3.0)})
    time.sleep(0.2)
    header, got = sub.poll(timeout_ms=1000)
    assert header.version == 3 and got["x"].tolist() == [3.0, 3.0, 3.0]
    time.sleep(0.05)
    pub.publish(2, {"x": torch.zeros(3)})  # older than what we have: not returned
    assert sub.poll(timeout_ms=300) is None


def test_malformed_messages_are_counted_not_raised(pubsub):
    pub, sub = pubsub
    _sync(pub, sub, 1, {"x": torch.ones(2)})
    raw = pub._pub  # the same PUB socket sends the bad frames below
    header = messages.WeightsHeader(
        schema_version=messages.SCHEMA_VERSION, version=5,
        tensors=[messages.TensorMeta(name="x", dtype="float32", shape=[2], nbytes=8)],
        published_at=0.0,
    )
    wrong_schema = messages.WeightsHeader(
        schema_version=999, version=6, tensors=[], published_at=0.0
    )
    bad_dtype = messages.WeightsHeader(
        schema_version=messages.SCHEMA_VERSION, version=7,
        tensors=[messages.TensorMeta(name="x", dtype="nonsense", shape=[2], nbytes=8)],
        published_at=0.0,
    )
    bad = [
        [b"\xc1garbage"],  # not msgpack
        [messages.encode(header)],  # missing tensor frame
        [messages.encode(header), b"\x00" * 7],  # wrong byte count
        [messages.encode(wrong_schema)],
        [messages.encode(bad_dtype), b"\x00" * 8],
    ]
    for frames in bad:
        # Spaced out: with SNDHWM=2, libzmq 4.3.5's PUB drops every 3rd message sent in a
        # tight loop even when the subscriber keeps up (its read count reaches the
        # PUB socket lazily); a few ms between messages avoids it.
        time.sleep(0.05)
        before = sub.rejected
        raw.publish(frames)
        assert sub.poll(timeout_ms=500) is None
        assert sub.rejected == before + 1, frames
    assert sub.rejected == 5 and sub.version == 1
    # The receiver still works afterwards.
    assert _sync(pub, sub, 8, {"x": torch.zeros(2)})[0].version == 8


def test_decode_rejects_shape_size_mismatch():
    header = messages.WeightsHeader(
        schema_version=messages.SCHEMA_VERSION, version=1,
        tensors=[messages.TensorMeta(name="x", dtype="float32", shape=[3], nbytes=8)],
        published_at=0.0,
    )
    with pytest.raises(messages.WireError, match="shape"):
        decode_weights([messages.encode(header), b"\x00" * 8])


def test_write_safetensors_roundtrip(tmp_path):
    from safetensors.torch import load_file

    w = torch.randn(4, 3)
    sd = {"embed": w, "lm_head": w, "norm": torch.ones(3).to(torch.bfloat16)}  # tied pair
    directory = write_safetensors(sd, str(tmp_path / "w"))
    loaded = load_file(f"{directory}/model.safetensors")
    assert set(loaded) == set(sd)
    assert all(torch.equal(loaded[k], sd[k]) for k in sd)
    assert [p.name for p in (tmp_path / "w").iterdir()] == ["model.safetensors"]  # no temp left


def smollm2_shaped_state_dict(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Random tensors with SmolLM2-135M's shapes (30 layers, hidden 576, 9/3 heads, vocab 49152)."""
    h, inter, kv = 576, 1536, 192
    sd = {"model.embed_tokens.weight": torch.empty(49152, h, dtype=dtype).normal_()}
    for i in range(30):
        p = f"model.layers.{i}."
        for name, shape in [
            ("self_attn.q_proj.weight", (h, h)), ("self_attn.k_proj.weight", (kv, h)),
            ("self_attn.v_proj.weight", (kv, h)), ("self_attn.o_proj.weight", (h, h)),
            ("mlp.gate_proj.weight", (inter, h)), ("mlp.up_proj.weight", (inter, h)),
            ("mlp.down_proj.weight", (h, inter)), ("input_layernorm.weight", (h,)),
            ("post_attention_layernorm.weight", (h,)),
        ]:
            sd[p + name] = torch.empty(shape, dtype=dtype).normal_()
    sd["model.norm.weight"] = torch.ones(h, dtype=dtype)
    return sd


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_publish_to_received_latency_135m(pubsub, dtype):
    pub, sub = pubsub
    sd = smollm2_shaped_state_dict(dtype)
    n = sum(t.numel() for t in sd.values())
    assert 134e6 < n < 135e6  # SmolLM2-135M without the tied lm_head
    _sync(pub, sub, 0, {"warmup": torch.ones(1)})  # connect first: measure the transfer only
    t0 = time.time()
    header = pub.publish(1, sd)
    got = None
    while got is None and time.time() - t0 < 30:
        got = sub.poll(timeout_ms=1000)
    latency = time.time() - header.published_at
    assert got is not None and got[0].version == 1
    k = "model.layers.29.mlp.down_proj.weight"
    assert torch.equal(got[1][k].view(torch.uint8), sd[k].view(torch.uint8))
    mb = n * sd[k].element_size() / 2**20
    print(f"\n135M-shaped {dtype}: {mb:.0f} MiB publish→received {latency * 1000:.0f} ms "
          f"({mb / latency:.0f} MiB/s)")
