"""The launch's memory preflight (run/preflight/memory.py): the estimate's parts, derived by hand for
SmolLM2-135M, and a launch refused before Ray starts when its learner cannot fit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_r1_async import precision
from agent_r1_async.bf16 import hardware, verdicts
from agent_r1_async.config import ConfigError, load_config
from agent_r1_async.run.preflight import memory
from agent_r1_async.run.preflight.memory import GB, ModelDims, check, estimate, learner_parts

ROOT = Path(__file__).resolve().parents[4]
SMOLLM2 = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
           "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
           "vocab_size": 49152, "tie_word_embeddings": True}


def test_smollm2_parameter_count() -> None:
    d = ModelDims.from_hf_config(SMOLLM2)
    # per layer: q, o 576x576 each (9 heads x 64); k, v 576x192 (3 x 64); MLP 3 x 576x1536;
    # 2 norms: 663,552 + 221,184 + 2,654,208 + 1,152 = 3,540,096; x 30 = 106,202,880;
    # tied embedding 49,152 x 576 = 28,311,552; final norm 576
    assert d.params == 134_515_008
    assert (d.layers, d.hidden, d.intermediate, d.vocab) == (30, 576, 1536, 49152)


FP32 = ["engine.dtype=float32", "learner.bf16=false"]
"""fp32 on both sides, whatever this machine's CPU: the by-hand figures below are fp32's."""


def test_default_config_estimate_by_hand() -> None:
    # The learner without activation checkpointing: every layer's activations are kept.
    cfg = load_config(str(ROOT / "configs" / "default.yaml"),
                      ["learner.gradient_checkpointing=false", *FP32])
    d = ModelDims.from_hf_config(SMOLLM2)
    parts = learner_parts(cfg, d)
    p = 134_515_008
    assert parts["weights + gradients + AdamW"] == 16 * p  # 2.152 GB
    assert parts["published copy"] == 8 * p
    # 1.8 x 2048 tokens x 30 layers x (12 x 576 + 3 x 1536 = 11,520 floats) x 4 bytes
    assert parts["activations"] == pytest.approx(1.8 * 2048 * 30 * 11520 * 4)  # 5.10 GB
    # action tokens: 2048 x 96 new tokens x 3 turns / 1024 = 576; x 49,152 x 12 bytes x 1.8
    assert parts["LM head"] == pytest.approx(1.8 * 576 * 49152 * 12)  # 0.61 GB
    learner = sum(parts.values())
    assert learner / GB == pytest.approx(9.44, abs=0.01)  # measured in launches: 9-10.6 GB
    est = estimate(cfg, d)
    # vLLM actor: 2.4 GB of processes + 0.538 GB fp32 weights + 1 GiB KV cache
    assert est["actors (1)"] / GB == pytest.approx(2.4 + 0.538 + 1.0737, abs=0.001)
    assert sum(est.values()) / GB == pytest.approx(14.45, abs=0.01)  # + 1.0 GB the rest
    assert check(cfg, d, available=14.5 * GB) is None
    why = check(cfg, d, available=12 * GB)
    assert why is not None and why.startswith("the run needs about 14.4 GB")
    assert "12.0 GB available" in why and "`learner.micro_batch_tokens` (2048" in why
    assert "`learner.gradient_checkpointing: true`" in why and "--force" in why


def test_checkpointing_and_bf16_shrink_the_activations() -> None:
    d = ModelDims.from_hf_config(SMOLLM2)
    autocast = load_config(str(ROOT / "configs" / "default.yaml"), [
        "learner.gradient_checkpointing=true", "learner.bf16=true", "learner.bf16_copy=false"])
    # kept: each layer's input (30 x 576 x 4 x 2) + one layer's full set (11,520 x 4), halved
    per_token = (30 * 576 * 4 * 2 + 11520 * 4) // 2
    parts = learner_parts(autocast, d)
    assert parts["activations"] == pytest.approx(1.8 * 2048 * per_token)
    assert parts["bf16 weight copies"] == 2 * 134_515_008  # autocast's casts of each weight
    # On the bf16 working copy the kept inputs (the residual stream) are bf16: 30 x 576 x 2
    # bytes a token, + one layer's full set in bf16 (11,520 x 2) = 57,600
    copy = load_config(str(ROOT / "configs" / "default.yaml"),
                       ["learner.gradient_checkpointing=true", "learner.bf16=true"])
    parts = learner_parts(copy, d)
    assert parts["activations"] == pytest.approx(1.8 * 2048 * 57_600)
    assert parts["bf16 weight copies"] == 2 * 134_515_008  # the working copy itself


_CPU_VERDICT = verdicts.cpu_verdict


def _cpu_measures(monkeypatch, ratio: float) -> None:
    """This CPU's micro-benchmark (bf16/probe.py) gives bf16 `ratio` x fp32's speed."""
    monkeypatch.setattr(precision, "cpu_verdict", lambda probe, flags=None, timer=None: (
        _CPU_VERDICT(probe, flags, lambda _: (ratio, 1.0))))  # (fp32 s, bf16 s)


def test_default_config_as_shipped_on_a_bf16_cpu(monkeypatch, tmp_path) -> None:
    # configs/default.yaml checkpoints activations: each layer's input + one layer's full set
    # per token; under bf16 (an AMX CPU, where bf16 matmuls measure 5.2x fp32's speed) on the
    # bf16 working copy both are bf16: 30 x 576 x 2 + 11,520 x 2 = 57,600 bytes.
    monkeypatch.setenv("AGENT_R1_ASYNC_CACHE", str(tmp_path / "bf16"))
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset({"amx_bf16", "avx512_bf16"}))
    _cpu_measures(monkeypatch, 5.2)
    cfg = load_config(str(ROOT / "configs" / "default.yaml"), [])
    d = ModelDims.from_hf_config(SMOLLM2)
    parts = learner_parts(cfg, d)
    p = 134_515_008
    assert parts["activations"] == pytest.approx(1.8 * 2048 * 57_600)
    assert parts["published copy"] == 4 * p  # bf16: 2 bytes, the dict and its frame
    # 0.5 GB + 16 P (fp32 weights, grads, AdamW) + 4 P published + 2 P bf16 copies
    # + activations + head (576 action tokens x 49,152 x 12 x 1.8)
    total = 0.5 * GB + 22 * p + 1.8 * 2048 * 57_600 + 1.8 * 576 * 49152 * 12
    assert sum(parts.values()) == pytest.approx(total) and total / GB == pytest.approx(4.28, abs=0.01)
    # fp32 on a CPU whose bf16 matmuls measure slower (0.57x fp32), and on one without bf16
    # units (nothing measured): 24 P and full-size activations
    fp32 = 0.5 * GB + 24 * p + 1.8 * 2048 * 184_320 + 1.8 * 576 * 49152 * 12
    monkeypatch.setenv("AGENT_R1_ASYNC_CACHE", str(tmp_path / "fp32"))
    _cpu_measures(monkeypatch, 0.57)
    assert sum(learner_parts(cfg, d).values()) == pytest.approx(fp32)
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset({"avx2"}))
    monkeypatch.setenv("AGENT_R1_ASYNC_CACHE", str(tmp_path / "no-flags"))
    _cpu_measures(monkeypatch, 5.2)
    assert sum(learner_parts(cfg, d).values()) == pytest.approx(fp32)


def test_preflight_refuses_or_warns_with_force(monkeypatch, capsys) -> None:
    cfg = load_config(str(ROOT / "configs" / "default.yaml"),
                      ["learner.gradient_checkpointing=false", *FP32])
    monkeypatch.setattr(memory, "model_dims", lambda _: ModelDims.from_hf_config(SMOLLM2))
    monkeypatch.setattr(memory, "available_bytes", lambda: 8 * GB)
    with pytest.raises(ConfigError, match=r"learner\.micro_batch_tokens"):
        memory.memory_preflight(cfg)
    memory.memory_preflight(cfg, force=True)
    assert "warning (--force): the run needs about 14.4 GB" in capsys.readouterr().err
    memory.memory_preflight(cfg, joined=True)  # a cluster: other machines, not checked


def test_a_learner_that_cannot_fit_is_refused_before_ray_starts(tmp_path: Path) -> None:
    """The real command: 4M-token micro-batches need ~3.6 TB of logits; refused in seconds,
    naming the key, with no run directory made and no Ray started: a `ray` package first on
    the path ends the process with code 99 on import, so an exit code of 2 shows Ray was not
    even imported (checked so, not timed)."""
    noray = tmp_path / "noray" / "ray"
    noray.mkdir(parents=True)
    (noray / "__init__.py").write_text("import os\nos._exit(99)\n")
    runs = tmp_path / "runs"
    out = subprocess.run(
        [sys.executable, "-m", "agent_r1_async.cli", "launch", "--config",
         str(ROOT / "configs" / "tiny.yaml"), "--set", f"launch.run_root={runs}",
         "--set", "learner.micro_batch_tokens=4000000"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{noray.parent}{os.pathsep}{ROOT}", "RAY_ADDRESS": ""},
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "agent-r1-async: config error: the run needs about" in out.stderr
    assert "lower `learner.micro_batch_tokens` (4000000" in out.stderr
    assert out.stdout == "" and not runs.exists()  # no run directory


LONG = ["context.builder=full", "env.max_turns=100", "model.max_model_len=6656",
        "learner.micro_batch_tokens=6656", "learner.bf16=true", "engine.dtype=bfloat16"]
"""configs/world.yaml's learner with 100-step episodes of a `full` context packed into one
sequence of up to 6,656 tokens (bench/bench_learner_long_sequences.py's shape)."""


def test_a_100_step_episode_estimate_by_hand() -> None:
    cfg = load_config(str(ROOT / "configs" / "world.yaml"), LONG)
    d = ModelDims.from_hf_config(SMOLLM2)
    parts = learner_parts(cfg, d)
    p = 134_515_008
    # whole-layer recompute on the bf16 working copy: 30 x 576 x 2 + 11,520 x 2 = 57,600 bytes
    # a token, for a 6,656-token micro-batch (one packed episode)
    assert parts["activations"] == pytest.approx(1.8 * 6656 * 57_600)  # 0.69 GB
    # action tokens: 6,656 x 48 x 100 / 6,656 = 4,800, in head_chunk_tokens 512 at a time
    assert parts["LM head"] == pytest.approx(1.8 * 512 * 49152 * 12)  # 0.54 GB
    total = 0.5 * GB + 22 * p + 1.8 * 6656 * 57_600 + 1.8 * 512 * 49152 * 12
    assert sum(parts.values()) == pytest.approx(total) and total / GB == pytest.approx(4.69, abs=0.01)


def test_the_longest_sequence_sizes_the_activations_whatever_the_budget() -> None:
    # A budget below model.max_model_len (which `launch` refuses) still gets a whole packed
    # episode into one micro-batch: the estimate counts the sequence, not the budget.
    d = ModelDims.from_hf_config(SMOLLM2)
    small = load_config(str(ROOT / "configs" / "world.yaml"),
                        [*LONG, "learner.micro_batch_tokens=2048"])
    assert memory.longest_sequence(small) == memory.micro_batch_tokens(small) == 6656
    full = load_config(str(ROOT / "configs" / "world.yaml"), LONG)
    assert learner_parts(small, d) == learner_parts(full, d)
    wide = load_config(str(ROOT / "configs" / "world.yaml"), [*LONG, "learner.micro_batch_tokens=8192"])
    assert memory.micro_batch_tokens(wide) == 8192


def test_a_long_horizon_run_that_cannot_fit_names_the_keys_that_shorten_its_sequences() -> None:
    d = ModelDims.from_hf_config(SMOLLM2)
    # Every layer's activations kept: 30 x 11,520 x 2 bytes a token x 6,656 tokens x 1.8 = 8.3 GB
    cfg = load_config(str(ROOT / "configs" / "world.yaml"),
                      [*LONG, "learner.gradient_checkpointing=false"])
    why = check(cfg, d, available=8 * GB)
    assert why is not None
    assert ("lower `model.max_model_len` (6656, the longest sequence, which a micro-batch holds "
            "whole: activations 8.8 GB per rank) and `learner.micro_batch_tokens` (6656) with it"
            in why)
    for key in ("`env.max_turns`", "`context.builder: truncate`", "`context.max_tokens`",
                "`engine.max_new_tokens`", "`learner.gradient_checkpointing: true`", "--force"):
        assert key in why, key
    # With a budget above the longest sequence the budget is the first key to lower.
    wide = load_config(str(ROOT / "configs" / "world.yaml"),
                       [*LONG, "learner.gradient_checkpointing=false",
                        "learner.micro_batch_tokens=16384"])
    why = check(wide, d, available=8 * GB)
    assert why is not None and ("lower `learner.micro_batch_tokens` (16384: activations "
                                in why) and "not below `model.max_model_len` 6656" in why
