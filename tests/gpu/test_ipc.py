"""CUDA IPC between two processes on one GPU (weights.backend: vllm_ipc): this process is the
learner, tests/gpu/ipc_peer.py the engine side.

- torch alone: the learner exports handles to a small model's CUDA tensors as JSON values
  (weights/ipc_handles.py), the other process opens them on the same GPU, and the names,
  dtypes, shared checksum and every byte match;
- our vLLM IPC engines end to end: the learner's `NativeWeightSender("vllm_ipc")` publishes a
  tiny model's weights as `Learner.publish` does (CPU copies, moved to cuda:0 and cast to the
  engine's bf16 there), the engine side's `NativeWeightReceiver` joins through the store and
  vLLM's `IPCWeightTransferEngine` (with our same-GPU and checksum checks) opens and loads
  them; two versions, each checksum and digest equal to the learner's, none failed or
  rejected.

vLLM's IPC engine is a dependency here, not an option: an import error, or a changed
signature of the engine or its update info, fails the second test (API drift is never a
skip); only a machine without CUDA skips (`gpu`). scripts/gpu_check.sh deselects the vLLM test
by its `vllm` marker where vLLM is not importable and says so in its first lines.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from gpu_helpers import CUDA, gpu, tiny_random_llama
from ipc_peer import describe

from agent_r1_async.weights.ipc_handles import encode_handle, gpu_uuid
from agent_r1_async.weights.seam import sent_tensors

pytestmark = gpu

ROOT = Path(__file__).resolve().parents[2]
PEER = str(Path(__file__).resolve().parent / "ipc_peer.py")


def _env() -> dict[str, str]:
    """This environment, with the repository first on PYTHONPATH (the peer imports the package)."""
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path}


def _peer(*args: str, stdin: str | None = None, timeout: float = 180) -> list[dict]:
    """Run the engine side; its RESULT lines, in order (its whole output on a failure)."""
    out = subprocess.run([sys.executable, PEER, *args], input=stdin, env=_env(), text=True,
                         capture_output=True, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return [json.loads(line.removeprefix("RESULT ")) for line in out.stdout.splitlines()
            if line.startswith("RESULT ")]


def _tiny_state(tmp_path: Path) -> dict[str, torch.Tensor]:
    """The tiny Llama's weights as the learner publishes them (a tied head once, as the
    embedding), fp32 on the CPU."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_random_llama(tmp_path / "tiny"))
    seen: set[int] = set()
    out = {}
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) not in seen:
            seen.add(id(t))
            out[name] = t.detach().clone()
    assert "lm_head.weight" not in out  # TINY_CONFIG ties the head
    return out


def test_cuda_ipc_handles_open_bit_exact_in_another_process(tmp_path):
    from torch.multiprocessing.reductions import reduce_tensor

    sd = {k: v.to("cuda:0") for k, v in _tiny_state(tmp_path).items()}
    sd["model.norm.weight"] = sd["model.norm.weight"].to(torch.bfloat16)  # a second dtype
    stream = sent_tensors(sd, "vllm_ipc")  # the stream vllm_ipc sends: the head included
    torch.cuda.synchronize()
    offer = {"names": [n for n, _ in stream],
             "handles": [encode_handle(reduce_tensor(t)[1]) for _, t in stream]}
    (got,) = _peer("open", stdin=json.dumps(offer))  # `stream` stays alive meanwhile
    assert got["gpu"] == gpu_uuid(0)
    assert got == {"gpu": gpu_uuid(0), **describe(stream)}
    assert got["names"][-1] == "lm_head.weight" and "bfloat16" in got["dtypes"]


@pytest.mark.vllm
def test_vllm_ipc_engine_receives_the_learners_cuda_tensors_in_another_process(tmp_path):
    if not CUDA:  # the module-level skip already applies; keeps the imports below honest
        pytest.skip("no CUDA")
    from vllm.distributed.weight_transfer.ipc_engine import (
        IPCWeightTransferEngine,
        IPCWeightTransferInitInfo,
        IPCWeightTransferUpdateInfo,
    )

    from agent_r1_async.weights.native_sender import NativeWeightSender

    # The facts of vLLM's IPC engine that weights/ipc.py builds on.
    assert list(inspect.signature(IPCWeightTransferEngine.__init__).parameters) == [
        "self", "config", "vllm_config", "device", "model"]
    assert list(inspect.signature(IPCWeightTransferEngine.receive_weights).parameters) == [
        "self", "update_info"]
    assert [f.name for f in dataclasses.fields(IPCWeightTransferUpdateInfo)] == [
        "names", "dtype_names", "shapes", "ipc_handles", "ipc_handles_pickled", "tensor_sizes"]
    assert [f.name for f in dataclasses.fields(IPCWeightTransferInitInfo)] == ["packed"]

    v1 = _tiny_state(tmp_path)
    v2 = {k: t * 1.5 if t.is_floating_point() else t for k, t in v1.items()}
    sender = NativeWeightSender("vllm_ipc", "127.0.0.1", 0, 30.0, cuda_device="cuda:0")
    peer = subprocess.Popen([sys.executable, PEER, "engine", sender.endpoint, "2", "bfloat16"],
                            env=_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        for version, state in ((1, v1), (2, v2)):
            sender.publish(version, {k: t.clone() for k, t in state.items()}, copy=False)
            if not sender.wait_acked(version, timeout_s=150):
                peer.kill()
                pytest.fail(f"v{version} never acknowledged (sender failed {sender.failed}, "
                            f"rejected {sender.rejected}):\n{peer.communicate(timeout=30)[0]}")
        out, _ = peer.communicate(timeout=60)
    finally:
        sender.close()
        if peer.poll() is None:
            peer.kill()
    assert peer.returncode == 0, out
    results = [json.loads(line.removeprefix("RESULT ")) for line in out.splitlines()
               if line.startswith("RESULT ")]
    assert results[0] == {"gpu": gpu_uuid(0)}, out
    for got, (version, state) in zip(results[1:3], ((1, v1), (2, v2)), strict=True):
        bf16 = {k: t.to(torch.bfloat16) if t.is_floating_point() else t  # the engine's dtype
                for k, t in state.items()}
        assert got == {"version": version, **describe(sent_tensors(bf16, "vllm_ipc"))}, out
    assert results[3] == {"served": 2, "failed": 0, "rejected": 0}, out
    assert (sender.failed, sender.rejected, sender.join_failures) == (0, 0, 0)
