"""Fixtures shared by the actor tests."""

from __future__ import annotations

import pytest

from agent_r1_async.models import load_tokenizer, tiny_model_dir


@pytest.fixture(scope="module")
def tok():
    """The tiny model's tokenizer (SmolLM2's ChatML template)."""
    return load_tokenizer(tiny_model_dir())
