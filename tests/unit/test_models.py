"""`models.attention_implementation`: flash-attention 2 only on CUDA, when wanted and
installed; SDPA otherwise, with the reason `launch` prints."""

from __future__ import annotations

import importlib.util

import pytest

from agent_r1_async import models


@pytest.fixture
def flash_installed(monkeypatch):
    real = importlib.util.find_spec

    def find_spec(name, *a, **kw):
        return object() if name == "flash_attn" else real(name, *a, **kw)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_cpu_is_sdpa_even_with_flash_attn(flash_installed):
    assert models.attention_implementation("cpu") == ("sdpa", "not on CUDA")


def test_cuda_with_flash_attn_installed(flash_installed):
    assert models.attention_implementation("cuda:1") == ("flash_attention_2", "flash-attn installed")
    assert models.attention_implementation("cuda", flash_attention=False) == (
        "sdpa", "learner.flash_attention is off")


def test_cuda_without_flash_attn(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **kw: None if name == "flash_attn" else real(name, *a, **kw))
    assert models.attention_implementation("cuda") == (
        "sdpa", "flash-attn is not installed: no prebuilt wheel for this torch/CUDA")


def test_auto_follows_cuda_availability(monkeypatch, flash_installed):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert models.attention_implementation("auto")[0] == "sdpa"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert models.attention_implementation("auto")[0] == "flash_attention_2"
