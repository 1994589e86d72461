"""The stream a native backend sends for one version and its checksum (weights/seam.py): one
definition on both sides, for a tied-embedding and an untied state dict.

The receiver sides are the real worker engines with the bytes handed over in memory: our gloo
worker (`GlooWeightTransferEngine`, its broadcasts replaced by copies of the sent bytes) and
our NCCL worker (`ChecksummedNCCLWeightTransferEngine`, vLLM's NCCL receive replaced by what
its packed consumer does: the sent tensors, in order and in chunks, into `load_weights`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import SimpleNamespace

import pytest
import torch

from agent_r1_async.weights.seam import (
    EMBEDDING,
    TIED_HEAD,
    sampled_checksum,
    sent_tensors,
    with_tied_head,
)
from tests.setup_needs import require_module

EMBED, UP, NORM = EMBEDDING, "model.layers.0.mlp.up_proj.weight", "model.norm.weight"


def _tied() -> dict[str, torch.Tensor]:
    """As the learner publishes a tied model (`iter_published` drops the head: it is the
    embedding)."""
    g = torch.Generator().manual_seed(0)
    return {EMBED: torch.randn(32, 8, generator=g), UP: torch.randn(16, 8, generator=g),
            NORM: torch.ones(8, dtype=torch.bfloat16)}


def _tied_sharing() -> dict[str, torch.Tensor]:
    """A tied model's full state dict: the head shares the embedding's storage."""
    sd = _tied()
    sd[TIED_HEAD] = sd[EMBED].view(32, 8)
    return sd


def _untied() -> dict[str, torch.Tensor]:
    sd = _tied()
    sd[TIED_HEAD] = torch.randn(32, 8, generator=torch.Generator().manual_seed(1))
    return sd


STATE_DICTS: dict[str, Callable[[], dict[str, torch.Tensor]]] = {
    "tied": _tied, "tied_sharing_storage": _tied_sharing, "untied": _untied}


# ---------------------------------------------------------------------- the stream


@pytest.mark.parametrize(("state", "backend", "names"), [
    ("tied", "vllm_nccl", [EMBED, UP, NORM, TIED_HEAD]),
    ("tied", "vllm_gloo", [EMBED, UP, NORM]),
    ("tied", "zmq", [EMBED, UP, NORM]),
    ("tied_sharing_storage", "vllm_nccl", [EMBED, UP, NORM, TIED_HEAD]),
    ("tied_sharing_storage", "vllm_gloo", [EMBED, UP, NORM, TIED_HEAD]),
    ("untied", "vllm_nccl", [EMBED, UP, NORM, TIED_HEAD]),
    ("untied", "vllm_gloo", [EMBED, UP, NORM, TIED_HEAD]),
    # vLLM's IPC worker, like its NCCL one, loads only what it is handed (tests/unit/weights/
    # test_ipc.py runs it): the head's handle opens the embedding's memory
    ("tied", "vllm_ipc", [EMBED, UP, NORM, TIED_HEAD]),
    ("tied_sharing_storage", "vllm_ipc", [EMBED, UP, NORM, TIED_HEAD]),
    ("untied", "vllm_ipc", [EMBED, UP, NORM, TIED_HEAD]),
])
def test_the_stream_each_backend_sends(state: str, backend: str, names: list[str]) -> None:
    sd = STATE_DICTS[state]()
    stream = sent_tensors(sd, backend)
    assert [n for n, _ in stream] == names
    for name, t in stream:  # the tensors themselves, nothing copied
        assert t is (sd[EMBED] if name == TIED_HEAD and state == "tied" else sd[name])


def test_an_unknown_backend_has_no_stream() -> None:
    with pytest.raises(KeyError):
        sent_tensors(_tied(), "rdma")


def test_with_tied_head_adds_the_embedding_as_the_head_only_when_it_is_missing() -> None:
    embed = torch.zeros(2, 2)
    assert with_tied_head([(EMBED, embed)]) == [(EMBED, embed), (TIED_HEAD, embed)]
    head = torch.ones(2, 2)
    untied = [(EMBED, embed), (TIED_HEAD, head)]
    assert with_tied_head(untied) == untied
    assert with_tied_head([(UP, head)]) == [(UP, head)]


def test_the_checksum_covers_the_head_that_is_sent() -> None:
    tied = _tied()
    with_head = sampled_checksum(sent_tensors(tied, "vllm_nccl"))
    assert with_head != sampled_checksum(sent_tensors(tied, "vllm_gloo"))
    assert with_head == sampled_checksum([*tied.items(), (TIED_HEAD, tied[EMBED])])


# ---------------------------------------------------------------------- both sides

def _update_info(stream: list[tuple[str, torch.Tensor]], checksum: str) -> dict[str, object]:
    """What the learner's trainer engine posts for `stream` (names, dtypes, shapes from the
    source's metadata) with the version and checksum the pair client adds."""
    from agent_r1_async.weights.native_sender import SnapshotSource

    source = SnapshotSource()
    source.set(stream)
    meta = source.metadata()
    return {"names": [m.name for m in meta],
            "dtype_names": [str(m.dtype).removeprefix("torch.") for m in meta],
            "shapes": [list(m.shape) for m in meta], "version": 1, "checksum": checksum}


def _gloo_receive(monkeypatch: pytest.MonkeyPatch, stream: list[tuple[str, torch.Tensor]],
                  checksum: str) -> dict[str, torch.Tensor]:
    """Our gloo worker receiving `stream` (bytes as the learner's engine sends them); what it
    loaded into the model."""
    from agent_r1_async.weights import gloo
    from tests.fakes.weights import _worker

    wire = [gloo._as_bytes(t) for _, t in stream]

    def delivered(group: object, raw: list[torch.Tensor], timeout_s: float) -> None:
        for dst, src in zip(raw, wire, strict=True):
            dst.copy_(src)

    monkeypatch.setattr(gloo, "_broadcast_all", delivered)
    worker = _worker()
    worker.group = object()  # joined (the broadcasts above stand in for the group)
    worker.update_weights(_update_info(stream, checksum))
    loaded: dict[str, torch.Tensor] = worker.loaded
    return loaded


class _Model:
    """A vLLM model as far as the NCCL worker goes: `load_weights` (a method of the class, so
    the worker's hook can wrap and restore it)."""

    def __init__(self) -> None:
        self.loaded: dict[str, torch.Tensor] = {}

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        for name, t in weights:
            self.loaded[name] = t.clone()


def _nccl_receive(monkeypatch: pytest.MonkeyPatch, stream: list[tuple[str, torch.Tensor]],
                  checksum: str) -> dict[str, torch.Tensor]:
    """Our NCCL worker receiving `stream`: vLLM's receive hands the model what it received,
    in order, two tensors per packed chunk, each a fresh buffer (as its consumer does)."""
    from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

    from agent_r1_async.weights.nccl import ChecksummedNCCLWeightTransferEngine

    def vllm_receive(self: NCCLWeightTransferEngine, update_info: object) -> None:
        received = [(n, t.clone()) for n, t in stream]
        for i in range(0, len(received), 2):
            self.model.load_weights(received[i:i + 2])

    monkeypatch.setattr(NCCLWeightTransferEngine, "receive_weights", vllm_receive)
    model = _Model()
    parallel = SimpleNamespace(data_parallel_index=0, world_size=1, rank=0)
    worker = ChecksummedNCCLWeightTransferEngine(
        None, SimpleNamespace(parallel_config=parallel, model_config=None),
        torch.device("cpu"), model)
    worker.receive_weights(worker.parse_update_info(_update_info(stream, checksum)))
    return model.loaded


RECEIVERS = {"vllm_gloo": _gloo_receive, "vllm_nccl": _nccl_receive}


@pytest.mark.vllm
@pytest.mark.parametrize("backend", ["vllm_gloo", "vllm_nccl"])
@pytest.mark.parametrize("state", sorted(STATE_DICTS))
def test_the_receiver_recomputes_the_senders_checksum(
    monkeypatch: pytest.MonkeyPatch, backend: str, state: str
) -> None:
    """The learner's stream and checksum (`prepare`, what `publish` stores and each pair
    sends) pass the real worker's check, and the model gets every tensor plus the head."""
    require_module("vllm")
    from agent_r1_async.weights.native_sender import prepare

    sd = STATE_DICTS[state]()
    stream, checksum = prepare(sd, backend)
    loaded = RECEIVERS[backend](monkeypatch, stream, checksum)
    assert set(loaded) == {EMBED, UP, NORM, TIED_HEAD}
    for name, t in with_tied_head(list(sd.items())):
        assert loaded[name].dtype == t.dtype and torch.equal(loaded[name], t)


@pytest.mark.vllm
def test_a_checksum_over_the_published_dict_alone_fails_a_tied_model_on_nccl(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sender hashes the stream it sends. Before, `publish` hashed the published dict,

        snap = _Version(version, tensors, sampled_checksum(tensors.items()), started)

    and `SnapshotSource.set(tensors, tied_head=True)` appended `lm_head.weight` afterwards,
    so the NCCL worker, which hashes every tensor it loads, rejected every version of a tied
    model. That checksum is refused here; the stream's passes."""
    require_module("vllm")
    from agent_r1_async.weights.native_sender import prepare
    from agent_r1_async.weights.seam import ChecksumMismatch

    sd = _tied()
    stream, checksum = prepare(sd, "vllm_nccl")
    assert checksum != sampled_checksum(sd.items())
    with pytest.raises(ChecksumMismatch, match="checksum mismatch"):
        _nccl_receive(monkeypatch, stream, sampled_checksum(sd.items()))
    assert set(_nccl_receive(monkeypatch, stream, checksum)) == {EMBED, UP, NORM, TIED_HEAD}
