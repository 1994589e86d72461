"""The learner side of the native backends without a peer (weights/native_sender.py): which
CUDA device a vllm_nccl sender sends from, and how `publish` takes ownership of a tensor.
CUDA's presence is injected, so this runs on a machine without a GPU."""

from __future__ import annotations

import pytest
import torch

from tests.setup_needs import require_module

require_module("vllm")
pytestmark = pytest.mark.vllm

from agent_r1_async.weights.native_sender import (  # noqa: E402
    NativeWeightSender,
    sender_cuda_device,
)


@pytest.fixture
def cuda_current_3(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that sees CUDA, current device 3."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)


@pytest.mark.parametrize(("requested", "expected"), [
    (None, "cuda:3"), ("cuda", "cuda:3"), ("cuda:1", "cuda:1"), ("cuda:0", "cuda:0")])
def test_nccl_sends_from_the_named_device_else_the_current_one(
    cuda_current_3: None, requested: str | None, expected: str
) -> None:
    assert sender_cuda_device("vllm_nccl", requested) == expected


@pytest.mark.parametrize(("requested", "expected"), [
    (None, "cuda:3"), ("cuda:0", "cuda:0"), ("cuda:2", "cuda:2")])
def test_ipc_exports_from_the_named_device_else_the_current_one(
    cuda_current_3: None, requested: str | None, expected: str
) -> None:
    assert sender_cuda_device("vllm_ipc", requested) == expected


def test_ipc_without_cuda_is_refused_before_anything_is_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError) as info:
        NativeWeightSender("vllm_ipc", "127.0.0.1")
    assert str(info.value) == ("weights.backend vllm_ipc sends from a CUDA device; this "
                               "process sees none (use weights.backend zmq or vllm_gloo)")


def test_nccl_refuses_a_cpu_device(cuda_current_3: None) -> None:
    with pytest.raises(ValueError, match="sends from a CUDA device, not 'cpu'"):
        sender_cuda_device("vllm_nccl", "cpu")


def test_nccl_without_cuda_is_refused_before_anything_is_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="vllm_nccl sends from a CUDA device; this process "
                       "sees none"):
        NativeWeightSender("vllm_nccl", "127.0.0.1")


def test_gloo_has_no_cuda_device(cuda_current_3: None) -> None:
    assert sender_cuda_device("vllm_gloo", "cuda:1") is None


def _gloo_owner() -> NativeWeightSender:
    """`_owned` reads only the backend and the CUDA device: no store, no threads."""
    sender = object.__new__(NativeWeightSender)
    sender.backend, sender.cuda_device = "vllm_gloo", None
    return sender


def test_a_handed_over_cpu_tensor_is_sent_as_it_is() -> None:
    t = torch.arange(6.0, requires_grad=True)
    sent = _gloo_owner()._owned(t, copy=False)
    assert sent.data_ptr() == t.data_ptr() and not sent.requires_grad  # no copy, detached


def test_a_copied_or_strided_tensor_becomes_the_senders_contiguous_copy() -> None:
    t = torch.arange(6.0).reshape(2, 3)
    copied = _gloo_owner()._owned(t, copy=True)
    assert copied is not t and copied.data_ptr() != t.data_ptr() and torch.equal(copied, t)
    strided = _gloo_owner()._owned(t.t(), copy=False)
    assert strided.is_contiguous() and torch.equal(strided, t.t())
