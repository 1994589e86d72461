"""Where a tensor bound for the wire lives before it is sent: one rule for every backend.

    dest = send_device(backend, str(t.device), sender_cuda_device)
    if str(t.device) != dest: t = t.to(dest)    # the sender moves it (native_sender.py)

- `zmq`: `cpu`; its frames are zero-copy views of CPU memory (weights/zmq.py).
- `vllm_gloo`: `cpu`; our gloo group is a CPU group and broadcasts CPU tensors only.
- `vllm_nccl`: the sender's CUDA device (`cuda:N`); vLLM's `PyNcclCommunicator.broadcast`
  asserts that each tensor it sends (packed: the `torch.cat` of the tensors) is on the device
  its communicator was created on.
- `vllm_ipc`: the sender's CUDA device (`cuda:N`, the learner's); a CUDA IPC handle exports
  CUDA memory only, and the engine opens it in place, so the sent tensor is the memory the
  engine reads (ipc.py).

The result depends on the backend and the sender's device only, never on where the tensor
happens to be: a tensor already there is sent as it is (the caller compares devices), one
anywhere else is moved there. A tensor on the `meta` device has no bytes and is refused.

The second rule, for `vllm_ipc` alone (`ipc_same_gpu`): the engine must sit on the same
*physical* GPU as the sender's tensors. Device indices cannot tell (each process numbers the
GPUs it sees from 0, through its own CUDA_VISIBLE_DEVICES), so the rule compares GPU UUIDs
(`torch.cuda.get_device_properties(i).uuid`): the engine's worker checks the UUID each handle
names against its own before it opens anything.

Why the sender moves the tensors instead of the learner publishing from its own device: the
learner's publish (`Learner.publish`: `published_state_dict` → `publish(copy=False)`) is
one path shared by every backend, and the CPU copy it makes is exactly what zmq and gloo send;
only NCCL and IPC need the bytes on a GPU, and only the sender knows which GPU it sends from.
The cost there: one host → device copy per version, and one copy of the published weights
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
    `sender_cuda_device` is the sender's CUDA device (`cuda:N`, vllm_nccl and vllm_ipc only).

    Raises ValueError for an unknown backend, a meta tensor, or vllm_nccl / vllm_ipc without
    an indexed CUDA device of the sender's."""
    if backend not in BACKENDS:
        raise ValueError(f"weights.backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if tensor_device == "meta":
        raise ValueError("a tensor on the meta device has no bytes to send")
    if backend in _FROM_CPU:
        return CPU
    if sender_cuda_device is None:
        raise ValueError(f"weights.backend {backend} sends from the sender's CUDA device; "
                         "this sender has none")
    if not _CUDA.fullmatch(sender_cuda_device):
        raise ValueError(f"the sender's CUDA device {sender_cuda_device!r} must be cuda:N "
                         "(a tensor's device always carries its index)")
    return sender_cuda_device


def ipc_same_gpu(sender_gpu: str, engine_gpu: str) -> None:
    """vllm_ipc: the engine on GPU `engine_gpu` can open tensors that live on `sender_gpu`
    (both GPU UUIDs) only when they are the same physical GPU; ValueError naming both and what
    to use instead otherwise. An empty UUID (a handle that names no GPU) is refused too."""
    if not sender_gpu or not engine_gpu:
        raise ValueError(f"weights.backend vllm_ipc: a GPU UUID is missing (the learner's "
                         f"tensors on {sender_gpu!r}, the engine on {engine_gpu!r})")
    if sender_gpu != engine_gpu:
        raise ValueError(
            f"weights.backend vllm_ipc: the learner's tensors are on GPU {sender_gpu} and this "
            f"engine on GPU {engine_gpu}; CUDA IPC opens memory of the same physical GPU only: "
            "put the learner and the engine on one GPU, or use weights.backend vllm_nccl "
            "across GPUs")
