"""The native weight path (weights.backend: vllm_gloo) without a vLLM model: the learner's
`NativeWeightSender` (store, pairs, our gloo trainer engine through vLLM's trainer factory)
against actors' `NativeWeightReceiver` with our gloo worker engine (`tests/fakes/weights.py`).
Real TCPStore, real gloo groups, real checksums; a tied-embedding and an untied model; faults:
a mismatch, a peer that never joins, an actor that never gets an answer, an actor that stalls
mid-transfer.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from tests.fakes.weights import GlooRecordingEngine
from tests.setup_needs import require_module

require_module("vllm")
pytestmark = pytest.mark.vllm

from agent_r1_async.weights import native_sender  # noqa: E402
from agent_r1_async.weights.native_receiver import NativeWeightReceiver  # noqa: E402
from agent_r1_async.weights.native_sender import NativeWeightSender  # noqa: E402
from agent_r1_async.weights.rendezvous import serve_store  # noqa: E402
from agent_r1_async.weights.seam import (  # noqa: E402
    sampled_checksum,
    sent_tensors,
    with_tied_head,
)

TIMEOUT_S = 3.0


def _state(scale: float) -> dict[str, torch.Tensor]:
    """A tied-embedding model as the learner publishes it: the head is the embedding, sent once."""
    g = torch.Generator().manual_seed(0)
    return {
        "model.embed_tokens.weight": torch.randn(64, 8, generator=g) * scale,
        "model.layers.0.mlp.up_proj.weight": torch.randn(16, 8, generator=g) * scale,
        "model.norm.weight": torch.ones(8, dtype=torch.bfloat16) * scale,
    }


def _untied_state(scale: float) -> dict[str, torch.Tensor]:
    """An untied model: a head of its own, published beside the embedding."""
    head = torch.randn(64, 8, generator=torch.Generator().manual_seed(1)) * scale
    return {**_state(scale), "lm_head.weight": head}


async def _pump(channels, engines, want: int, seconds: float):
    """Run the actors' loop turns until every engine serves `want` (or time runs out)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for ch, eng in zip(channels, engines, strict=True):
            await ch.update(eng)
        if all(e.version >= want for e in engines):
            return
        await asyncio.sleep(0.01)


@pytest.fixture
def sender():
    s = NativeWeightSender("vllm_gloo", "127.0.0.1", 0, TIMEOUT_S)
    yield s
    s.close()


def test_two_actors_receive_three_versions_bit_exact(sender):
    engines = [GlooRecordingEngine(), GlooRecordingEngine()]
    channels = [NativeWeightReceiver(sender.endpoint, f"actor-{i}", TIMEOUT_S) for i in range(2)]

    async def run():
        for v in (1, 2, 3):
            sender.publish(v, _state(float(v)))
            await _pump(channels, engines, v, 20)
            for eng in engines:
                assert eng.version == v
                # the learner's tied head is not sent: the worker loads it from the embedding
                assert set(eng.weights) == set(_state(1.0)) | {"lm_head.weight"}
                for k, t in _state(float(v)).items():
                    assert eng.weights[k].dtype == t.dtype and torch.equal(eng.weights[k], t)

    asyncio.run(run())
    assert sender.wait_acked(3, actors=2, timeout_s=5)
    assert sender.acked() == {"actor-0": 3, "actor-1": 3}
    assert (sender.sent, sender.failed, sender.rejected) == (6, 0, 0)
    assert all((c.failed, c.rejected) == (0, 0) for c in channels)


@pytest.mark.parametrize("state", [_state, _untied_state], ids=["tied", "untied"])
def test_a_tied_and_an_untied_model_pass_the_shared_checksum_bit_exact(sender, state):
    """The learner's checksum is over the stream it sends (`sent_tensors`), the worker's over
    what it received; both pass for either model, and the worker loads a head that is the
    embedding for the tied one and the model's own for the untied one."""
    engine = GlooRecordingEngine()
    channel = NativeWeightReceiver(sender.endpoint, "actor-0", TIMEOUT_S)

    async def run():
        for v in (1, 2):  # v2 as the learner publishes: fresh CPU copies handed over
            snap = sender.publish(v, state(float(v)), copy=v == 1)
            assert snap.checksum == sampled_checksum(sent_tensors(state(float(v)), "vllm_gloo"))
            await _pump([channel], [engine], v, 20)
            expected = with_tied_head(list(state(float(v)).items()))
            assert engine.version == v and set(engine.weights) == {n for n, _ in expected}
            for name, t in expected:
                got = engine.weights[name]
                assert got.dtype == t.dtype and torch.equal(got, t)

    asyncio.run(run())
    assert (channel.rejected, channel.failed, sender.rejected, sender.failed) == (0, 0, 0, 0)
    assert sender.wait_acked(2, timeout_s=5)


def test_an_actor_serving_bf16_is_sent_bf16(sender):
    engine = GlooRecordingEngine()
    channel = NativeWeightReceiver(sender.endpoint, "actor-0", TIMEOUT_S, dtype="bfloat16")
    sender.publish(1, _state(1.0))
    asyncio.run(_pump([channel], [engine], 1, 20))
    assert engine.version == 1 and channel.failed == 0
    for k, t in _state(1.0).items():  # cast by the learner, checked against the cast's checksum
        assert engine.weights[k].dtype == torch.bfloat16
        assert torch.equal(engine.weights[k], t.to(torch.bfloat16))


def test_checksum_mismatch_is_rejected_counted_and_the_next_version_passes(sender, monkeypatch):
    engine = GlooRecordingEngine()
    channel = NativeWeightReceiver(sender.endpoint, "actor-0", TIMEOUT_S)

    async def run():
        real = native_sender.sampled_checksum
        monkeypatch.setattr(native_sender, "sampled_checksum", lambda items: "0" * 32)
        sender.publish(1, _state(1.0))
        deadline = time.monotonic() + 20
        while channel.rejected == 0 and time.monotonic() < deadline:
            await channel.update(engine)
            await asyncio.sleep(0.01)
        monkeypatch.setattr(native_sender, "sampled_checksum", real)
        sender.publish(2, _state(2.0))
        await _pump([channel], [engine], 2, 20)

    asyncio.run(run())
    assert channel.rejected == 1 and channel.failed == 0  # the pair stayed
    assert engine.version == 2 and engine.joined == 1
    assert sender.wait_acked(2) and sender.rejected == 1 and sender.failed == 0


def test_a_peer_that_never_joins_times_out_and_others_are_unaffected(sender, caplog):
    from agent_r1_async.weights.rendezvous import connect_store

    ghost = connect_store("127.0.0.1", sender.port, TIMEOUT_S)
    n = ghost.add(f"{sender.token}/joins", 1)  # registers, then never joins the group
    ghost.set(f"{sender.token}/join/{n}", "ghost")
    engine = GlooRecordingEngine()
    channel = NativeWeightReceiver(sender.endpoint, "actor-0", TIMEOUT_S)
    sender.publish(1, _state(1.0))
    t0 = time.monotonic()
    asyncio.run(_pump([channel], [engine], 1, 20))
    assert engine.version == 1  # the healthy actor was served while the ghost's pair waited
    while sender.join_failures == 0 and time.monotonic() - t0 < TIMEOUT_S + 10:
        time.sleep(0.05)
    assert sender.join_failures == 1 and sender.failed == 0
    assert "actor ghost never joined its weight group" in caplog.text


def test_an_actor_whose_learner_never_answers_fails_within_the_timeout():
    store, port = serve_store("127.0.0.1", 0, TIMEOUT_S)  # a store, but no learner behind it
    channel = NativeWeightReceiver(f"tcp://127.0.0.1:{port}/tok", "actor-0", TIMEOUT_S)
    engine = GlooRecordingEngine()
    t0 = time.monotonic()
    # nothing will ever answer: the update ends at all only through its timeout (the guard
    # fails a hang instead of waiting for pytest's own timeout)
    assert asyncio.run(asyncio.wait_for(channel.update(engine), 120)) is None
    took = time.monotonic() - t0
    assert channel.failed == 1 and engine.version == 0 and engine.joined == 0
    assert took > TIMEOUT_S - 0.5  # it waited out its timeout (no earlier give-up)
    del store


def test_an_actor_that_stalls_mid_transfer_fails_loudly_and_rejoins(sender):
    stalled, healthy = GlooRecordingEngine(), GlooRecordingEngine()
    channels = [NativeWeightReceiver(sender.endpoint, f"actor-{i}", TIMEOUT_S) for i in range(2)]
    stalled.stall_receive = True

    async def run():
        sender.publish(1, _state(1.0))
        await _pump(channels[1:], [healthy], 1, 20)
        assert healthy.version == 1  # the healthy pair does not wait for the stalled one
        # the stalled actor's update times out (counted), it leaves, re-joins and is sent
        # the current version by its new pair
        await _pump(channels, [stalled, healthy], 1, 40)

    asyncio.run(run())
    assert stalled.version == 1 and stalled.joined == 2
    assert channels[0].failed == 1 and channels[1].failed == 0
    assert sender.failed == 1 and sender.pairs_joined == 3
    assert sampled_checksum(stalled.weights.items()) == sampled_checksum(healthy.weights.items())


@pytest.mark.slow
def test_learner_killed_mid_transfer_fails_the_update_and_the_actor_keeps_its_weights():
    import multiprocessing as mp

    from tests.fakes.weights import learner_that_dies_mid_transfer

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    learner = ctx.Process(target=learner_that_dies_mid_transfer, args=(q,))
    learner.start()
    try:
        engine = GlooRecordingEngine()
        channel = NativeWeightReceiver(q.get(timeout=120), "actor-0", TIMEOUT_S)

        async def run():
            while engine.joined == 0:
                await channel.update(engine)
            q.put("joined")
            t0 = time.monotonic()  # the guard against a hang: a failure is counted long before
            while channel.failed == 0 and time.monotonic() - t0 < TIMEOUT_S + 15:
                await channel.update(engine)
                await asyncio.sleep(0.01)

        asyncio.run(run())
        learner.join(30)
        assert learner.exitcode == 9  # it died inside the transfer
        assert (channel.failed, channel.rejected) == (1, 0)
        assert engine.version == 0 and engine.weights == {}  # nothing half-loaded
        # with the learner gone, re-joining fails again (counted), it never raises or hangs
        time.sleep(1.1)
        assert asyncio.run(asyncio.wait_for(channel.update(engine), TIMEOUT_S + 15)) is None
        assert channel.failed == 2
    finally:
        if learner.is_alive():
            learner.kill()


def test_actor_killed_mid_transfer_fails_its_pair_only(sender):
    import multiprocessing as mp

    from tests.fakes.weights import actor_that_dies_mid_transfer

    doomed = mp.get_context("spawn").Process(target=actor_that_dies_mid_transfer,
                                             args=(sender.endpoint,))
    doomed.start()
    try:
        deadline = time.monotonic() + 120
        while sender.pairs_joined < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        healthy = GlooRecordingEngine()
        channel = NativeWeightReceiver(sender.endpoint, "actor-1", TIMEOUT_S)
        sender.publish(1, _state(1.0))
        asyncio.run(_pump([channel], [healthy], 1, 20))
        doomed.join(30)
        assert doomed.exitcode == 9
        sender.publish(2, _state(2.0))
        asyncio.run(_pump([channel], [healthy], 2, 20))
        assert healthy.version == 2
        deadline = time.monotonic() + TIMEOUT_S + 10
        while sender.failed == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sender.wait_acked(2, timeout_s=10)  # the learner reads the ack after the actor
        assert sender.failed == 1 and sender.acked() == {"actor-1": 2}
    finally:
        if doomed.is_alive():
            doomed.kill()
