"""CUDA IPC handles as plain JSON values (weights.backend: vllm_ipc), torch only, never pickled.

    args = reduce_tensor(t)[1]                  # learner: torch's export of a CUDA tensor
    wire = encode_handle(args)                  # a dict of str / int / bool / None / list[int]
    t2 = rebuild_cuda_tensor(*decode_handle(wire))   # engine: the same memory, opened in place

`torch.multiprocessing.reductions.reduce_tensor` describes a CUDA tensor by the arguments of
`rebuild_cuda_tensor`: the tensor and storage classes, size, stride and offsets, the dtype,
the device index, the CUDA IPC memory handle, the reference-counter handle and the event
handle (bytes), and two flags. Those are classes, a dtype and bytes, which JSON (the learner's
store, rendezvous.py) and vLLM's engine-core RPC do not carry; vLLM's HTTP path pickles them
instead. Here each argument becomes a JSON value under its own name: bytes as base64, the
classes and the dtype by name from fixed allow-lists, so decoding builds nothing but those
classes, a `torch.dtype`, ints, bools and bytes. A handle with other fields, or values of
another type, is refused with a ValueError naming the field: a torch whose `reduce_tensor`
changed shape fails here, loudly, never as a wrong tensor.

This module imports torch and nothing of vLLM (the GPU check runs it where vLLM is absent).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import torch

FIELDS = (
    "tensor_cls", "size", "stride", "tensor_offset", "storage_cls", "dtype", "device",
    "handle", "storage_size_bytes", "storage_offset_bytes", "requires_grad",
    "ref_counter_handle", "ref_counter_offset", "event_handle", "event_sync_required",
)
"""`rebuild_cuda_tensor`'s arguments, in its order (torch/multiprocessing/reductions.py)."""

_TENSOR_CLASSES: dict[str, type] = {"Tensor": torch.Tensor, "Parameter": torch.nn.Parameter}
_STORAGE_CLASSES: dict[str, type] = {
    "TypedStorage": torch.storage.TypedStorage, "UntypedStorage": torch.UntypedStorage}
_INTS = ("tensor_offset", "device", "storage_size_bytes", "storage_offset_bytes",
         "ref_counter_offset")
_BOOLS = ("requires_grad", "event_sync_required")
_BYTES = ("handle", "ref_counter_handle", "event_handle")

Encoded = dict[str, Any]
"""One handle as JSON values, one entry per name of `FIELDS`."""


def gpu_uuid(index: int) -> str:
    """The physical identity of CUDA device `index` of this process (as vLLM's IPC engine
    keys its handles): the same GPU has the same UUID in every process, whatever index its
    CUDA_VISIBLE_DEVICES gives it."""
    return str(torch.cuda.get_device_properties(index).uuid)


def _name_of(cls: object, allowed: Mapping[str, type], field: str) -> str:
    for name, known in allowed.items():
        if cls is known:
            return name
    raise ValueError(f"IPC handle field {field!r}: {cls!r} is not one of {', '.join(allowed)}")


def _b64(value: object, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, bytes):
        raise ValueError(f"IPC handle field {field!r}: expected bytes, got {type(value).__name__}")
    return base64.b64encode(value).decode("ascii")


def _int_list(value: object, field: str) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ValueError(f"IPC handle field {field!r}: expected a list of ints, got {value!r}")
    return [int(v) for v in value]


def _int(value: object, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"IPC handle field {field!r}: expected an int, got {value!r}")
    return value


def _bool(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"IPC handle field {field!r}: expected a bool, got {value!r}")
    return value


def encode_handle(args: Sequence[object]) -> Encoded:
    """`reduce_tensor(t)[1]` of a CUDA tensor `t` as JSON values (module docstring)."""
    if len(args) != len(FIELDS):
        raise ValueError(f"torch's reduce_tensor gave {len(args)} arguments for a CUDA tensor; "
                         f"this module reads {len(FIELDS)} ({', '.join(FIELDS)})")
    a = dict(zip(FIELDS, args, strict=True))
    dtype = a["dtype"]
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"IPC handle field 'dtype': expected a torch.dtype, got {dtype!r}")
    out: Encoded = {
        "tensor_cls": _name_of(a["tensor_cls"], _TENSOR_CLASSES, "tensor_cls"),
        "storage_cls": _name_of(a["storage_cls"], _STORAGE_CLASSES, "storage_cls"),
        "dtype": str(dtype).removeprefix("torch."),
        "size": _int_list(a["size"], "size"),
        "stride": _int_list(a["stride"], "stride"),
    }
    out.update({f: _int(a[f], f) for f in _INTS})
    out.update({f: _bool(a[f], f) for f in _BOOLS})
    out.update({f: _b64(a[f], f) for f in _BYTES})
    return out


def _unb64(value: object, field: str) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"IPC handle field {field!r}: expected base64 text, got {value!r}")
    return base64.b64decode(value, validate=True)


def _dtype(value: object) -> torch.dtype:
    dtype = getattr(torch, value, None) if isinstance(value, str) else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"IPC handle field 'dtype': {value!r} is not a torch dtype")
    return dtype


def _class(value: object, allowed: Mapping[str, type], field: str) -> type:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"IPC handle field {field!r}: {value!r} is not one of "
                         f"{', '.join(allowed)}")
    return allowed[value]


def _decode_field(field: str, value: object) -> object:
    if field == "tensor_cls":
        return _class(value, _TENSOR_CLASSES, field)
    if field == "storage_cls":
        return _class(value, _STORAGE_CLASSES, field)
    if field == "dtype":
        return _dtype(value)
    if field == "size":
        return torch.Size(_int_list(value, field))
    if field == "stride":
        return tuple(_int_list(value, field))
    if field in _INTS:
        return _int(value, field)
    if field in _BOOLS:
        return _bool(value, field)
    return _unb64(value, field)


def decode_handle(encoded: Mapping[str, object]) -> tuple[Any, ...]:
    """The arguments of `rebuild_cuda_tensor` from `encode_handle`'s JSON values; ValueError
    naming the field for anything `encode_handle` does not write."""
    if set(encoded) != set(FIELDS):
        missing, extra = sorted(set(FIELDS) - set(encoded)), sorted(set(encoded) - set(FIELDS))
        raise ValueError(f"IPC handle fields differ from {', '.join(FIELDS)}: missing "
                         f"{missing}, unexpected {extra}")
    return tuple(_decode_field(f, encoded[f]) for f in FIELDS)
