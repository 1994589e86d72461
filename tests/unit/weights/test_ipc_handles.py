"""CUDA IPC handles as JSON values (weights/ipc_handles.py), on a machine without a GPU: the
arguments torch's `reduce_tensor` gives for a CUDA tensor are written out by hand (their layout
is `rebuild_cuda_tensor`'s signature), encoded, sent through JSON and decoded back exactly;
anything else is refused by field name."""

from __future__ import annotations

import json

import pytest
import torch

from agent_r1_async.weights.ipc_handles import FIELDS, decode_handle, encode_handle

# What reduce_tensor(t)[1] is for a contiguous bf16 [2, 3] CUDA tensor at offset 4 of its
# storage on device 0, with a 3-byte memory handle, a 2-byte ref-counter handle and a 1-byte
# event handle (real handles are 64 bytes; the encoding does not care).
ARGS = (
    torch.Tensor, torch.Size([2, 3]), (3, 1), 4, torch.storage.TypedStorage, torch.bfloat16, 0,
    b"\x00\x01\x02", 20, 512, False, b"rc", 8, b"\xff", True,
)
ENCODED = {
    "tensor_cls": "Tensor", "size": [2, 3], "stride": [3, 1], "tensor_offset": 4,
    "storage_cls": "TypedStorage", "dtype": "bfloat16", "device": 0,
    "handle": "AAEC",  # base64 of 00 01 02
    "storage_size_bytes": 20, "storage_offset_bytes": 512, "requires_grad": False,
    "ref_counter_handle": "cmM=",  # base64 of "rc"
    "ref_counter_offset": 8,
    "event_handle": "/w==",  # base64 of ff
    "event_sync_required": True,
}


def test_a_handle_encodes_to_json_values_written_out_by_hand() -> None:
    assert encode_handle(ARGS) == ENCODED


def test_a_handle_survives_json_and_decodes_to_the_same_arguments() -> None:
    wire = json.loads(json.dumps(encode_handle(ARGS)))
    back = decode_handle(wire)
    assert back == ARGS
    assert [type(a) for a in back] == [type(a) for a in ARGS]  # Size stays Size, tuple tuple
    assert back[0] is torch.Tensor and back[4] is torch.storage.TypedStorage


def test_a_null_storage_handle_and_a_parameter_round_trip() -> None:
    """An empty tensor's storage has no handle (None); a Parameter keeps its class."""
    args = (torch.nn.Parameter, torch.Size([0]), (1,), 0, torch.UntypedStorage, torch.float32,
            1, None, 0, 0, True, b"r", 0, None, False)
    encoded = encode_handle(args)
    assert (encoded["tensor_cls"], encoded["storage_cls"], encoded["handle"],
            encoded["event_handle"]) == ("Parameter", "UntypedStorage", None, None)
    assert decode_handle(json.loads(json.dumps(encoded))) == args


@pytest.mark.parametrize(("field", "value", "message"), [
    ("dtype", "manual_seed", "IPC handle field 'dtype': 'manual_seed' is not a torch dtype"),
    ("tensor_cls", "builtins.eval", "IPC handle field 'tensor_cls': 'builtins.eval' is not one "
     "of Tensor, Parameter"),
    ("storage_cls", "os.system", "IPC handle field 'storage_cls': 'os.system' is not one of "
     "TypedStorage, UntypedStorage"),
    ("handle", 5, "IPC handle field 'handle': expected base64 text, got 5"),
    ("size", [2, "3"], "IPC handle field 'size': expected a list of ints, got [2, '3']"),
    ("device", True, "IPC handle field 'device': expected an int, got True"),
    ("requires_grad", 0, "IPC handle field 'requires_grad': expected a bool, got 0"),
])
def test_a_decoded_field_of_the_wrong_kind_is_refused_by_name(
    field: str, value: object, message: str
) -> None:
    with pytest.raises(ValueError) as info:
        decode_handle({**ENCODED, field: value})
    assert str(info.value) == message


def test_a_handle_with_other_fields_is_refused() -> None:
    wire = {k: v for k, v in ENCODED.items() if k != "event_handle"} | {"pickle": "x"}
    with pytest.raises(ValueError) as info:
        decode_handle(wire)
    assert str(info.value) == (
        f"IPC handle fields differ from {', '.join(FIELDS)}: missing ['event_handle'], "
        "unexpected ['pickle']")


def test_a_reduce_tensor_of_another_shape_fails_loudly() -> None:
    """A torch whose reduce_tensor gives a 16th argument must not be read as the 15 above."""
    with pytest.raises(ValueError, match=r"^torch's reduce_tensor gave 16 arguments for a CUDA "
                       r"tensor; this module reads 15 \(tensor_cls, size,"):
        encode_handle((*ARGS, 0))
    with pytest.raises(ValueError, match=r"^IPC handle field 'tensor_cls': <class 'str'> is not "
                       r"one of Tensor, Parameter$"):
        encode_handle((str, *ARGS[1:]))
