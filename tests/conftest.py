"""Shared test setup: keep W&B offline and out of the home directory; one Ray-free default;
the verifiers environment's fixture."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def micro_model_dir(tmp_path_factory) -> str:
    """A 2-layer Llama with hidden 16 and a 64-token vocabulary (no tokenizer): the
    checkpoint tests' model."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("micro")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(str(out))
    return str(out)


@pytest.fixture(scope="session")
def verifiers_venv() -> None:
    """`.venv-verifiers/` (scripts/setup.sh) is here; without it the test skips, or fails in
    CI (tests/setup_needs.py). Used through `tests.integration.vf_setup.needs_verifiers`."""
    from tests.integration.vf_setup import require_verifiers

    require_verifiers()


@pytest.fixture
def one_thread():
    """One intra-op thread: on a shared 2-core machine two spinning threads run ~4x slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
