"""Where a tensor bound for the wire lives before it is sent: one rule for every backend.

    dest = send_device(backend, str(t.device), sender_cuda_device)
    if str(t.device) != dest: t = t.to(dest)    # the sender moves it (native_sender.py)

- `zmq`: `cpu`; its frames are zero-copy views of CPU memory (weights/zmq.py).
- `vllm_gloo`: `cpu`; our gloo group is a CPU group and broadcasts CPU tensors only.
- `vllm_nccl`: the sender's CUDA device (`cuda:N`); vLLM's `PyNcclCommunicator.broadcast`
  asserts that each tensor it sends (packed: the `torch.cat` of the tensors) is on the device
  its communicator was created on.

The result depends on the backend and the sender's device only, never on where the tensor
happens to be: a tensor already there is sent as it is (the caller compares devices), one
anywhere else is moved there. A tensor on the `meta` device has no bytes and is refused.

Why the sender moves the tensors instead of the learner publishing from its own device: the
learner's publish (`Learner.publish`: `published_state_dict` → `publish(copy=False)`) is
one path shared by every backend, and the CPU copy it makes is exactly what zmq and gloo send;
only NCCL needs the bytes on a GPU, and only the sender knows which GPU its NCCL rank sits on.
The cost on NCCL: one host → device copy per version, and one copy of the published weights
held on the sender's GPU until the next version replaces it.

Device strings are as `str(torch.device)` writes them for a tensor (`cpu`, `cuda:0`): the
sender's CUDA device must carry its index, since a tensor's device always does.
"""

from __future__ import annotations

import re

from agent_r1_async.weights.seam import BACKENDS

CPU = "cpu"
_CUDA = re.compile(r"cuda:\d+")
_FROM_CPU = ("zmq", "vllm_gloo")


def send_device(backend: str, tensor_device: str, sender_cuda_device: str | None) -> str:
    """The device a tensor on `tensor_device` is sent from by `backend` (the module's list);
    `sender_cuda_device` is the sender's NCCL device (`cuda:N`, vllm_nccl only).

    Raises ValueError for an unknown backend, a meta tensor, or vllm_nccl without an indexed
    CUDA device of the sender's."""
    if backend not in BACKENDS:
        raise ValueError(f"weights.backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if tensor_device == "meta":
        raise ValueError("a tensor on the meta device has no bytes to send")
    if backend in _FROM_CPU:
        return CPU
    if sender_cuda_device is None:
        raise ValueError("weights.backend vllm_nccl sends from the sender's CUDA device; "
                         "this sender has none")
    if not _CUDA.fullmatch(sender_cuda_device):
        raise ValueError(f"the sender's CUDA device {sender_cuda_device!r} must be cuda:N "
                         "(a tensor's device always carries its index)")
    return sender_cuda_device
