"""Offline models: the GGUF conversion gives a HF directory transformers loads and generates from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_r1_async.models import (
    TINY_CONFIG,
    load_causal_lm,
    load_tokenizer,
    model_vocab_size,
    prepare_model,
    resolve_model,
    tiny_model_dir,
)


def test_tiny_model_has_real_tokenizer_and_small_config():
    path = Path(tiny_model_dir())
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["hidden_size"] == TINY_CONFIG["hidden_size"] == 128
    assert cfg["num_hidden_layers"] == 2 and cfg["vocab_size"] == 49152
    tok = load_tokenizer(str(path))
    # ChatML: <|im_end|> is id 2 in SmolLM2's vocabulary, <|im_start|> is 1.
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2
    assert tok.convert_tokens_to_ids("<|im_start|>") == 1
    assert tiny_model_dir() == str(path)  # cached, same directory
    assert model_vocab_size(str(path)) == 49152  # what the buffer range-checks ids against
    assert model_vocab_size("some-org/not-downloaded") == 0  # a hub id: nothing on disk


def test_prepared_smollm2_generates_the_right_sum():
    import torch

    path = prepare_model("smollm2-135m-instruct")
    assert (path / ".complete").exists() and (path / "model.safetensors").is_file()
    assert resolve_model("smollm2-135m-instruct") == str(path)
    tok = load_tokenizer(str(path))
    model = load_causal_lm(str(path))
    enc = tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}],
                                  add_generation_prompt=True, return_tensors="pt",
                                  return_dict=True)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=12, do_sample=False)
    text = tok.decode(out[0][enc["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "5" in text


def test_resolve_model_errors(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        resolve_model(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_model("./no/such/model")
    with pytest.raises(KeyError, match="known: smollm2-135m-instruct"):
        prepare_model("gpt-17")
    assert resolve_model("org/some-model") == "org/some-model"
