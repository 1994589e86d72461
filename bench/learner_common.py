"""What bench/bench_learner.py's modes share: the model, synthetic rows, the bench's
RunConfig, the plain HF step every mode compares against, and FLOP counting for MFU."""

from __future__ import annotations

import os
import random
import resource
from pathlib import Path
from typing import Any

MODEL = "smollm2-135m-instruct"
DEFAULT_CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "default.yaml")


QWEN2_SHAPES = {  # Qwen2.5-0.5B / 1.5B architecture (random init)
    "0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, intermediate_size=4864, tie_word_embeddings=True),
    "1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, intermediate_size=8960, tie_word_embeddings=True),
}
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}


def random_qwen2_dir(size: str, root: str) -> str:
    """Save a random-init Qwen2 model of the given size (bf16 safetensors) under `root`."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(vocab_size=151936, max_position_embeddings=4096, pad_token_id=0,
                      **QWEN2_SHAPES[size])
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    path = os.path.join(root, f"qwen2-{size}")
    model.save_pretrained(path)
    return path


def flops_params(model: Any) -> int:
    """N for 6·N·tokens: every parameter except the input embedding (a tied head counts once)."""
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    n = sum(p.numel() for p in model.parameters()) - emb.numel()
    return n + (head.numel() if head is emb else 0)


def synthetic_rows(n: int, ctx: int, act: int, vocab: int, seed: int = 0) -> list[Any]:
    from agent_r1_async.learner.batching import Row

    rng = random.Random(seed)
    return [
        Row(context_ids=[rng.randrange(3, vocab) for _ in range(ctx)],
            action_ids=[rng.randrange(3, vocab) for _ in range(act)],
            behavior_logprobs=[-rng.random() * 3 for _ in range(act)], token_versions=[0] * act,
            advantage=rng.gauss(0, 1), reward=0.0, sample_weight=1.0, group_index=i // 4,
            episode_index=i % 4, step_index=0, ids=(f"g{i // 4}", f"e{i}"))
        for i in range(n)
    ]


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def bench_config(bf16: bool, args: Any, overrides: list[str] | None) -> Any:
    """The RunConfig of one configuration: `overrides` None = the synthetic GRPO learner;
    a list = configs/default.yaml with those `a.b=value` overrides (`--default-config`)."""
    from agent_r1_async.config import AlgorithmConfig, LearnerConfig, RunConfig, load_config

    if overrides is not None:
        return load_config(DEFAULT_CONFIG, [f"learner.device={args.device}", *overrides])
    return RunConfig(algorithm=AlgorithmConfig(name="grpo"),
                     learner=LearnerConfig(lr=1e-6, bf16=bf16, device=args.device,
                                           bf16_copy=getattr(args, "bf16_copy", True),
                                           micro_batch_tokens=args.micro_batch_tokens,
                                           flash_attention=True))


def plain_step(trainer: Any, mbs: list[Any], bf16: bool) -> None:
    """The baseline: HF causal-LM loss on the action tokens, full logits, AdamW."""
    import torch

    model, dev = trainer._causal_lm(), trainer.device
    trainer.optimizer.zero_grad(set_to_none=True)
    for mb in mbs:
        labels = mb.input_ids.masked_fill(~mb.action_mask, -100).to(dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=mb.input_ids.to(dev),
                         attention_mask=mb.attention_mask.to(dev), labels=labels).loss
        (loss / len(mbs)).backward()
    torch.nn.utils.clip_grad_norm_(trainer.trainable_parameters(), 1.0)
    trainer.optimizer.step()


def peak_tflops(args: Any) -> float:
    import torch

    if args.peak_tflops:
        return args.peak_tflops
    name = torch.cuda.get_device_name()
    for key, tf in PEAK_TFLOPS.items():
        if key in name:
            return tf
    raise SystemExit(f"unknown GPU {name!r}: pass --peak-tflops (dense bf16 TFLOP/s)")
