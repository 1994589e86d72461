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
tensor's cosine > 0.999, grad norm 2e-3 relative. Not yet run on a GPU.
"""

from __future__ import annotations

import torch
from gpu_helpers import gpu, synthetic_rows, tiny_random_llama

from agent_r1_async.config import AlgorithmConfig, LearnerConfig, RunConfig
from agent_r1_async.learner.batching import make_micro_batches
from agent_r1_async.learner.trainer import PolicyTrainer

pytestmark = gpu


def learner_step(model_dir: str, device: str, bf16: bool) -> dict:
    """Log-probs, then one optimizer step: its loss, grad norm and gradients (on the CPU)."""
    torch.manual_seed(0)
    cfg = RunConfig(algorithm=AlgorithmConfig(name="grpo"),
                    learner=LearnerConfig(device=device, bf16=bf16, lr=1e-5,
                                          micro_batch_tokens=512, flash_attention=False))
    trainer = PolicyTrainer(cfg, model_dir)
    mbs = make_micro_batches(synthetic_rows(8, 40, 24), 512, trainer.pad_id)
    with torch.no_grad():
        logprobs = [trainer.forward(mb).logprobs.cpu()[mb.action_mask] for mb in mbs]
    metrics = trainer.optimize(mbs)
    grads = {n: p.grad.detach().float().cpu() for n, p in trainer.model.named_parameters()
             if p.grad is not None}
    return {"logprobs": torch.cat(logprobs), "loss": metrics["loss"], "grads": grads,
            "grad_norm": metrics["grad_norm"], "mbs": len(mbs)}


def check_bf16_against_fp32(model_dir: str, device: str) -> dict[str, float]:
    ref = learner_step(model_dir, "cpu", bf16=False)
    got = learner_step(model_dir, device, bf16=True)
    assert ref["mbs"] >= 2  # gradient accumulation is part of the step
    assert set(got["grads"]) == set(ref["grads"]) and len(ref["grads"]) >= 10
    dlp = (got["logprobs"] - ref["logprobs"]).abs()
    g_ref = torch.cat([g.flatten() for g in ref["grads"].values()])
    g_got = torch.cat([got["grads"][n].flatten() for n in ref["grads"]])
    per_tensor_cos = min(
        torch.nn.functional.cosine_similarity(got["grads"][n].flatten(), g.flatten(), dim=0).item()
        for n, g in ref["grads"].items() if g.norm() > 0
    )
    out = {
        "logprob_max": dlp.max().item(), "logprob_mean": dlp.mean().item(),
        "loss_rel": abs(got["loss"] - ref["loss"]) / abs(ref["loss"]),
        "grad_rel_l2": ((g_got - g_ref).norm() / g_ref.norm()).item(),
        "grad_cos": torch.nn.functional.cosine_similarity(g_got, g_ref, dim=0).item(),
        "grad_tensor_cos_min": per_tensor_cos,
        "grad_norm_rel": abs(got["grad_norm"] - ref["grad_norm"]) / ref["grad_norm"],
    }
    print(f"\nbf16 {device} vs fp32 cpu: " + ", ".join(f"{k} {v:.3g}" for k, v in out.items()))
    return out


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
