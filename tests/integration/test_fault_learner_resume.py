"""The learner dies after an update it never checkpointed; learner and buffer resume.

Real parts in one process: the tiny model's `Learner` sampling from a real `BufferService`
over ZeroMQ (its `BufferClient`), checkpoints on disk, the buffer's shutdown snapshot. The
timeline (batch_groups = 2, max_reuse = 1, 10 groups in all):

    8 groups pushed -> update 1, update 2 -> checkpoint (step-2, version 2)
    -> update 3 (its weights are never saved) -> the learner is dropped ("killed")
    -> the buffer stops (snapshot) and a new one starts from the snapshot
    -> Learner.from_checkpoint: version 2 again, weights = the checkpoint's
    -> 2 more groups pushed -> update 3', update 4'

Checked by group and episode ids: every accepted group was sampled exactly once over the whole
run (none lost, none twice), and every sampled episode is whole. The two groups of the lost
update 3 are not trained again: delivery to the learner is at most once; what a crash loses is
the training on the batches since the last checkpoint (`learner.checkpoint_every`), not data
that was still waiting in the buffer.
"""

from __future__ import annotations

import torch

from agent_r1_async import config
from agent_r1_async.buffers.service import BufferService
from agent_r1_async.learner.loop import Learner
from agent_r1_async.models import tiny_model_dir
from agent_r1_async.wire import messages as m
from agent_r1_async.wire.buffer_client import BufferClient
from agent_r1_async.wire.zmq import ZmqTransport
from tests.fakes.checks import Ledger
from tests.fakes.learner import RecordingSource
from tests.fakes.records import group_records
from tests.fakes.services import granted, wait_for


def _cfg() -> config.RunConfig:
    return config.config_from_dict({
        "model": {"name_or_path": tiny_model_dir()},
        "algorithm": {"group_size": 2, "batch_groups": 2},
        "buffer": {"max_staleness": 10, "max_reuse": 1, "spi_tolerance": 1000.0,
                   "snapshot_interval_s": 0.0, "gc_freeze": False},
        "learner": {"lr": 1e-3, "micro_batch_tokens": 256, "device": "cpu",
                    "sample_timeout_s": 20.0},
    })


def _start_buffer(cfg: config.RunConfig, transport: ZmqTransport, snap: str):
    service = BufferService(cfg.buffer, cfg.algorithm, transport, snapshot_dir=snap)
    service.start()
    client = BufferClient(transport, service.control_endpoint, "learner", "learner")
    client.connect()
    return service, client


def _push(transport: ZmqTransport, service: BufferService, n: int) -> list[str]:
    """`n` whole groups, under ids the buffer granted (it refuses others: `ungranted`)."""
    group_ids = granted(transport, service.control_endpoint, n)
    pusher = transport.pusher(service.data_endpoint)
    try:
        for gid in group_ids:
            for rec in group_records(gid, [0.0, 1.0]):
                assert pusher.send([m.encode(rec)], timeout_ms=2000)
    finally:
        pusher.close()
    wait_for(lambda: service.metrics().accepted_groups >= len(group_ids), 10, "groups accepted")
    return group_ids


def test_learner_killed_after_an_unsaved_update_resumes_without_losing_data(tmp_path) -> None:
    cfg = _cfg()
    run_dir, snap = str(tmp_path / "run"), str(tmp_path / "buffer")
    transport = ZmqTransport()
    ledger = Ledger.empty()
    service, client = _start_buffer(cfg, transport, snap)
    try:
        first = _push(transport, service, 8)
        learner = Learner(cfg, RecordingSource(client, ledger), None, run_dir)
        learner.update()
        learner.update()
        ckpt = learner.save_checkpoint()
        saved = {k: v.clone() for k, v in learner.trainer.published_state_dict().items()}
        learner.update()  # trained, never checkpointed
        assert learner.version == 3 and service.metrics().learner_version == 3
        before_kill = set(ledger.groups)
        del learner  # the learner process is gone
    finally:
        client.close()
        service.stop()  # the buffer's snapshot (launch stops it the same way)
    assert ckpt.endswith("step-2") and len(before_kill) == 6

    service, client = _start_buffer(cfg, transport, snap)
    try:
        assert service.restored
        with service._lock:
            left = {g.group.group_id for g in service.buffer.state().stored}
        assert left == set(first) - before_kill  # the two not yet sampled, restored
        resumed = Learner.from_checkpoint(cfg, RecordingSource(client, ledger), None,
                                          run_dir)
        assert (resumed.version, resumed.updates, resumed.samples_drawn) == (2, 2, 2)
        assert service.metrics().learner_version == 2  # the buffer follows the resumed learner
        weights = resumed.trainer.published_state_dict()
        assert all(torch.equal(weights[k], saved[k]) for k in saved)  # the checkpoint's weights
        second = _push(transport, service, 2)
        versions = [int(resumed.update()["version"]) for _ in range(2)]
        assert versions == [3, 4]  # numbering continues from the checkpoint
        assert service.metrics().learner_version == 4
        assert resumed.save_checkpoint().endswith("step-4")
    finally:
        client.close()
        service.stop()
        transport.close()

    accepted = set(first) | set(second)
    assert set(ledger.groups) == accepted  # none lost
    assert all(n == 1 for n in ledger.groups.values())  # none sampled twice
    assert len(ledger.sampled) == 2 * len(accepted) and set(ledger.sampled.values()) == {1}
