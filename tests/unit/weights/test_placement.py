"""Where each backend sends a tensor from, and which engine may open a vllm_ipc tensor
(weights/placement.py). Device strings and GPU UUIDs only, so the CUDA cases run on a machine
without a GPU; every expectation is written out by hand."""

from __future__ import annotations

import re

import pytest

from agent_r1_async.weights.placement import ipc_same_gpu, send_device


@pytest.mark.parametrize(("backend", "tensor_device", "sender", "expected"), [
    # the learner's publish: fresh CPU copies (learner/loop.py, publish(copy=False))
    ("vllm_nccl", "cpu", "cuda:0", "cuda:0"),
    ("vllm_nccl", "cpu", "cuda:1", "cuda:1"),
    # already on the sender's device: sent from there
    ("vllm_nccl", "cuda:0", "cuda:0", "cuda:0"),
    ("vllm_nccl", "cuda:3", "cuda:3", "cuda:3"),
    # on another GPU than the sender's NCCL rank: moved to the sender's
    ("vllm_nccl", "cuda:1", "cuda:0", "cuda:0"),
    ("vllm_nccl", "cuda:0", "cuda:2", "cuda:2"),
])
def test_nccl_sends_every_tensor_from_the_senders_cuda_device(
    backend: str, tensor_device: str, sender: str, expected: str
) -> None:
    """The rule placement.py replaces (native_sender.publish's `owned`) kept a tensor where it
    was on NCCL:

        if not copy and v.is_contiguous() and (nccl or v.device.type == "cpu"): return v
        return v.clone().contiguous() if nccl else v.to("cpu", copy=True).contiguous()

    It gives "cpu", "cpu", "cuda:1" and "cuda:0" for the first, second, fifth and sixth cases
    (the learner's CPU copies come with `copy=False`), and `PyNcclCommunicator.broadcast`
    asserts on each: the tensor is not on its communicator's device."""
    assert send_device(backend, tensor_device, sender) == expected


@pytest.mark.parametrize(("tensor_device", "sender", "expected"), [
    ("cpu", "cuda:0", "cuda:0"),  # the learner's CPU copy: exported from its GPU
    ("cuda:0", "cuda:0", "cuda:0"),  # already there: exported in place
    ("cuda:1", "cuda:0", "cuda:0"),  # another GPU than the sender's: moved to the sender's
    ("cpu", "cuda:2", "cuda:2"),
])
def test_ipc_exports_every_tensor_from_the_senders_cuda_device(
    tensor_device: str, sender: str, expected: str
) -> None:
    """A CUDA IPC handle exports CUDA memory of one device: a CPU tensor has none to export,
    and the engine checks the handles' GPU against its own, so every tensor is on the
    sender's."""
    assert send_device("vllm_ipc", tensor_device, sender) == expected


def test_ipc_opens_only_on_the_senders_physical_gpu() -> None:
    ipc_same_gpu("GPU-3f1c", "GPU-3f1c")  # the same UUID: one GPU, whatever its index
    with pytest.raises(ValueError) as info:
        ipc_same_gpu("GPU-3f1c", "GPU-77aa")
    assert str(info.value) == (
        "weights.backend vllm_ipc: the learner's tensors are on GPU GPU-3f1c and this engine "
        "on GPU GPU-77aa; CUDA IPC opens memory of the same physical GPU only: put the learner "
        "and the engine on one GPU, or use weights.backend vllm_nccl across GPUs")
    with pytest.raises(ValueError, match=r"^weights.backend vllm_ipc: a GPU UUID is missing "
                       r"\(the learner's tensors on '', the engine on 'GPU-77aa'\)$"):
        ipc_same_gpu("", "GPU-77aa")


@pytest.mark.parametrize("backend", ["vllm_gloo", "zmq"])
@pytest.mark.parametrize(("tensor_device", "sender"), [
    ("cpu", None),
    ("cuda:0", None),  # a CUDA tensor goes to the CPU
    ("cuda:5", None),
    ("cpu", "cuda:0"),  # a sender's CUDA device does not matter to a CPU backend
    ("cuda:1", "cuda:1"),
])
def test_gloo_and_zmq_send_from_the_cpu(
    backend: str, tensor_device: str, sender: str | None
) -> None:
    assert send_device(backend, tensor_device, sender) == "cpu"


@pytest.mark.parametrize(("backend", "tensor_device", "sender", "message"), [
    ("vllm_nccl", "cpu", None,
     "vllm_nccl sends from the sender's CUDA device; this sender has none"),
    ("vllm_nccl", "cpu", "cuda", "the sender's CUDA device 'cuda' must be cuda:N"),
    ("vllm_nccl", "cpu", "cpu", "the sender's CUDA device 'cpu' must be cuda:N"),
    ("vllm_nccl", "meta", "cuda:0", "a tensor on the meta device has no bytes to send"),
    ("vllm_gloo", "meta", None, "a tensor on the meta device has no bytes to send"),
    ("vllm_ipc", "cpu", None,
     "weights.backend vllm_ipc sends from the sender's CUDA device; this sender has none"),
    ("vllm_ipc", "cuda:0", "cuda", "the sender's CUDA device 'cuda' must be cuda:N"),
    ("vllm_ipc", "meta", "cuda:0", "a tensor on the meta device has no bytes to send"),
    ("rdma", "cpu", None,
     "weights.backend 'rdma' is not one of zmq, vllm_gloo, vllm_nccl, vllm_ipc"),
])
def test_what_cannot_be_placed_is_refused_by_name(
    backend: str, tensor_device: str, sender: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        send_device(backend, tensor_device, sender)
