"""Learner step on CUDA in bf16 autocast vs the same step in fp32 on the CPU.

Same tiny model (fp32 weights from one directory), same micro-batches; `PolicyTrainer` with
GRPO. Compared: the action-token log-probs of a no-grad forward, the loss of the optimizer
step, and every parameter's gradient.

Tolerances. bf16 keeps 8 significant bits (unit roundoff 2^-9 ≈ 2e-3); autocast runs the
matmuls in bf16 with fp32 accumulation, the log-softmax in fp32 (the trainer casts the logits).
On this tiny random model the logits are small (near-uniform: log-probs ≈ -ln 49152 = -10.80),
so a log-prob's error is the error of z_a - logsumexp(z): a few roundings of values below 1.
The same comparison with bf16 autocast on the CPU (the same bf16 rounding, other kernels;
`check_bf16_against_fp32(path, "cpu")`, 2026-11-23) measured max |Δ log p| 3.1e-3, mean 9.0e-4,
loss rel. error 1.5e-4, gradient rel. L2 error 6.3e-3, smallest per-tensor gradient cosine
0.99996, grad-norm rel. error 2.5e-4. The bounds leave about 5× margin for CUDA's kernels:
log-probs 0.015 nats max / 5e-3 mean, loss 1e-3 relative, gradients 3 % relative L2 with every
tensor's cosine > 0.999, grad norm 2e-3 relative. The learner runs bf16 on its bf16 working
copy of the weights (`learner.bf16_copy`, the default); on the CPU that measured max |Δ log p|
3.7e-3, mean 1.1e-3, gradient rel. L2 7.9e-3 (tests/unit/learner/test_bf16_copy.py).
"""

from __future__ import annotations

import torch
from gpu_helpers import check_bf16_against_fp32, gpu, learner_step, tiny_random_llama

pytestmark = gpu


def test_cuda_bf16_step_agrees_with_cpu_fp32(tmp_path):
    r = check_bf16_against_fp32(tiny_random_llama(tmp_path / "tiny"), "cuda")
    assert r["logprob_max"] < 0.015 and r["logprob_mean"] < 5e-3
    assert r["loss_rel"] < 1e-3
    assert r["grad_rel_l2"] < 0.03 and r["grad_cos"] > 0.999
    assert r["grad_tensor_cos_min"] > 0.999
    assert r["grad_norm_rel"] < 2e-3


def test_cuda_fp32_step_matches_cpu_fp32(tmp_path):
    """Without autocast the CUDA step is the CPU step up to fp32 reordering (TF32 is off by
    default for matmuls in PyTorch): log-probs within 1e-4, gradients within 1e-3 rel. L2."""
    path = tiny_random_llama(tmp_path / "tiny")
    ref = learner_step(path, "cpu", bf16=False)
    got = learner_step(path, "cuda", bf16=False)
    assert (got["logprobs"] - ref["logprobs"]).abs().max().item() < 1e-4
    g_ref = torch.cat([g.flatten() for g in ref["grads"].values()])
    g_got = torch.cat([got["grads"][n].flatten() for n in ref["grads"]])
    assert ((g_got - g_ref).norm() / g_ref.norm()).item() < 1e-3


def test_cuda_compiled_bf16_step_agrees_with_cpu_fp32(tmp_path):
    """`learner.compile` on CUDA (inductor's Triton kernels) within the bf16 bounds above."""
    r = check_bf16_against_fp32(tiny_random_llama(tmp_path / "tiny"), "cuda", compile=True)
    assert r["logprob_max"] < 0.015
    assert r["loss_rel"] < 1e-3
    assert r["grad_rel_l2"] < 0.03
